#!/usr/bin/env bash
# The swarm tier: the default three-DC lab as a Docker Swarm stack on a single-node swarm
# on this machine (`wanlab compose --swarm`), end to end.
#
#   tests/swarm/run.sh [--build-dir DIR] [--keep]
#
# --build-dir  the CMake build folder holding controller/wanlab (default: build/)
# --keep       leave the stack (and the swarm) up at the end (take them down with the printed commands)
#
# Steps (each timed): Docker (installed by scripts/setup.sh or the docker tier; where no
# daemon answers, one of our own as the docker tier starts it, stopped at the end); a single-node swarm (`docker swarm init
# --advertise-addr 127.0.0.1 --listen-addr 127.0.0.1:2377`: nothing listens or is sent
# beyond this machine) unless this daemon is in a swarm already (then it is used and left
# as it is); the node labelled for the controller and every DC (wanlab.controller=true,
# wanlab.<dc>=true); an image built from this tree's Dockerfile (cached from wanlab:latest, made by
# the docker tier; built from the Dockerfile here where it is missing); a project folder
# with a copy of topologies/three-dc.json under a lab name of its own (swarm-<pid>, also
# the stack's name) and bench/scenarios/three-dc-smoke.json; `wanlab compose --swarm`;
# `docker stack deploy`; every agent connected (the bring-up time is printed); then the
# docker tier's checks inside the services, with its tolerances: ping RTT between every pair
# of DCs against the topology, iperf3 goodput use -> usw within 5 % of 1448/1514 of 100
# Mbit/s (set with `wanlab link set`), the smoke scenario (`wanlab run` in the controller)
# with its summary checked (iterations, WAN bytes within 2 % of the scenario's); `docker
# stack rm`, and checks that no service, container, network or config of the stack is left;
# the results volume, the labels, the image made here and the swarm made here are removed
# (`docker swarm leave --force`, and docker_gwbridge where the swarm made it).
#
# Where Docker cannot run (not root, no docker or jq, dockerd does not start, no swarm can be
# made) it prints "SKIPPED: <reason>" and exits 77, which ctest reports as skipped. Once
# the stack is being deployed, every problem is a failure. Figures are judged under the
# hypervisor's steal as in the docker tier.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build_dir=$repo/build
keep=0
while (($#)); do
  case $1 in
    --build-dir) build_dir=$2; shift 2 ;;
    --build-dir=*) build_dir=${1#*=}; shift ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "swarm: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done

lab=swarm-$$
topology=topologies/three-dc.json
scenario=bench/scenarios/three-dc-smoke.json
base_image=wanlab:latest
image=wanlab-swarm-test:$$

t_start=$(date +%s.%N)
t_step=$t_start
elapsed() { awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
step_done() {
  local now
  now=$(date +%s.%N)
  awk -v a="$t_step" -v b="$now" -v what="$1" 'BEGIN { printf "swarm: %s in %.1f s\n", what, b - a }'
  t_step=$now
}
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "swarm: FAILED: $*" >&2; exit 1; }
measured() { echo "MEASURED: $*"; }

# The host's CPU time so far, from the first line of /proc/stat: "TOTAL STEAL" in ticks
# (user nice system idle iowait irq softirq steal; guest time is inside user and nice).
cpu_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9, $9; exit }' /proc/stat; }

# on_quiet_host WHAT CHECK: runs CHECK, which prints its MEASURED lines and returns 0 when
# its figures hold, and judges it by the hypervisor's steal during it (see the header).
# Sets `judged` to "checked" or "NOT JUDGED (hypervisor steal)".
on_quiet_host() {
  local what=$1 check=$2 attempt rc before after steal
  for attempt in 1 2 3; do
    before=$(cpu_ticks)
    if "$check"; then rc=0; else rc=1; fi
    after=$(cpu_ticks)
    steal=$(awk -v a="$before" -v b="$after" 'BEGIN { split(a, x, " "); split(b, y, " ")
      t = y[1] - x[1]; printf "%.2f", (t > 0 ? 100 * (y[2] - x[2]) / t : 0) }')
    echo "swarm: $what: attempt $attempt, hypervisor steal $steal %, figures $( ((rc == 0)) && echo hold || echo off)"
    ((rc == 0)) && { judged="checked"; return 0; }
    awk -v s="$steal" 'BEGIN { exit !(s > 1) }' || fail "$what: figures off on a quiet host (steal $steal %)"
    ((attempt < 3)) && sleep 10
  done
  echo "swarm: WARNING: $what: not judged: all 3 attempts ran under hypervisor steal above 1 % of the CPU and their figures were off (above)" >&2
  judged="NOT JUDGED (hypervisor steal)"
}

build_dir=$(cd "$build_dir" 2>/dev/null && pwd) || fail "no build folder $build_dir"
wanlab_bin=$build_dir/controller/wanlab
[[ -x $wanlab_bin ]] || fail "$wanlab_bin is not built (build first: scripts/build.sh)"
work=$build_dir/swarm
mkdir -p "$work"

# ---- Docker, swarm ----

if [[ $(id -u) -eq 0 ]]; then
  sudo=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  skip "the swarm tier needs root (to run Docker services with NET_ADMIN)"
fi
command -v docker >/dev/null || skip "no docker here (the docker tier, or scripts/setup.sh, installs docker.io)"
command -v jq >/dev/null || skip "no jq here (scripts/setup.sh installs it)"
docker=("${sudo[@]}" docker)
started_dockerd=
stop_dockerd() {
  if [[ -n $started_dockerd ]]; then
    "${sudo[@]}" kill "$started_dockerd" 2>/dev/null || true
    for _ in $(seq 1 100); do
      "${sudo[@]}" kill -0 "$started_dockerd" 2>/dev/null || break
      sleep 0.1
    done
    started_dockerd=
  fi
}
if ! "${docker[@]}" info >/dev/null 2>&1; then
  # As the docker tier: our own daemon, leaving the host's iptables and ip_forward alone.
  command -v dockerd >/dev/null || skip "no dockerd here (the docker tier, or scripts/setup.sh, installs docker.io)"
  dockerd_log=$work/dockerd.log
  "${sudo[@]}" dockerd --iptables=false --ip-forward=false --bridge=none >"$dockerd_log" 2>&1 &
  started_dockerd=$!
  for _ in $(seq 1 150); do
    "${docker[@]}" info >/dev/null 2>&1 && break
    if ! kill -0 "$started_dockerd" 2>/dev/null; then
      started_dockerd=
      tail -5 "$dockerd_log"
      skip "dockerd does not start here (log: $dockerd_log)"
    fi
    sleep 0.2
  done
  "${docker[@]}" info >/dev/null 2>&1 || { stop_dockerd; skip "dockerd did not answer within 30 s (log: $dockerd_log)"; }
  step_done "started dockerd (pid $started_dockerd, log $dockerd_log)"
fi

swarm_state=$("${docker[@]}" info --format '{{.Swarm.LocalNodeState}}' 2>/dev/null || echo unknown)
made_swarm=0
made_gwbridge=0
node_id=
labelled=()
made_image=0
stack_up=0
cleanup() {
  local rc=$?
  if ((keep)) && ((stack_up)); then
    echo "swarm: the stack is still up: docker stack rm $lab; docker volume rm $lab-results$( ((made_swarm)) && echo "; docker swarm leave --force")"
    exit $rc
  fi
  if ((stack_up)); then
    echo "swarm: taking the stack down"
    "${docker[@]}" stack rm "$lab" >/dev/null 2>&1 || true
    for _ in $(seq 1 60); do
      [[ -z $(stack_leftovers) ]] && break
      sleep 0.5
    done
  fi
  "${docker[@]}" volume rm "$lab-results" >/dev/null 2>&1 || true
  for l in "${labelled[@]}"; do "${docker[@]}" node update --label-rm "$l" "$node_id" >/dev/null 2>&1 || true; done
  ((made_image)) && { "${docker[@]}" image rm "$image" >/dev/null 2>&1 || true; }
  if ((made_swarm)); then
    "${docker[@]}" swarm leave --force >/dev/null 2>&1 && echo "swarm: left the swarm made here (docker swarm leave --force)"
    # `swarm init` made docker_gwbridge where there was none; leaving keeps it.
    if ((made_gwbridge)); then
      "${docker[@]}" network rm docker_gwbridge >/dev/null 2>&1 && echo "swarm: removed docker_gwbridge (made by the swarm)"
    fi
  fi
  stop_dockerd
  exit $rc
}
trap cleanup EXIT
stack_leftovers() {
  "${docker[@]}" service ls -q --filter "label=com.docker.stack.namespace=$lab"
  "${docker[@]}" ps -a -q --filter "label=com.docker.stack.namespace=$lab"
  "${docker[@]}" network ls -q --filter "label=com.docker.stack.namespace=$lab"
  "${docker[@]}" config ls -q --filter "label=com.docker.stack.namespace=$lab"
}

made_gwbridge=0
if [[ $swarm_state != active ]]; then
  "${docker[@]}" network inspect docker_gwbridge >/dev/null 2>&1 || made_gwbridge=1
  [[ $swarm_state == inactive ]] || skip "this Docker daemon's swarm state is '$swarm_state' (neither inactive nor active)"
  if ! out=$("${docker[@]}" swarm init --advertise-addr 127.0.0.1 --listen-addr 127.0.0.1:2377 2>&1); then
    echo "$out" | tail -3
    skip "docker swarm init failed here"
  fi
  made_swarm=1
  step_done "made a single-node swarm (docker swarm init --advertise-addr 127.0.0.1)"
fi
node_id=$("${docker[@]}" info --format '{{.Swarm.NodeID}}')
[[ $("${docker[@]}" node inspect self --format '{{.ManagerStatus.Leader}}' 2>/dev/null) == true ]] ||
  [[ $("${docker[@]}" info --format '{{.Swarm.ControlAvailable}}') == true ]] ||
  skip "this daemon is a swarm worker, not a manager: deploy from a manager"

# ---- image, project, stack file ----

# The image from this tree's Dockerfile (the docker tier, which runs first, has just built it:
# then every layer comes from its cache). The host's own build is not copied in: it may
# link libraries the image does not have (ns-3 where the host has libns3-dev).
"${docker[@]}" image inspect debian:bookworm >/dev/null 2>&1 ||
  "${docker[@]}" image inspect "$base_image" >/dev/null 2>&1 ||
  skip "no $base_image and no debian:bookworm to build it from (the docker tier makes both)"
echo "swarm: building $image from this tree (Dockerfile; cached when the docker tier built it)"
DOCKER_BUILDKIT=0 "${docker[@]}" build --network host --build-arg JOBS="$(nproc)" -t "$image" "$repo" \
  >"$work/build.log" 2>&1 || { tail -30 "$work/build.log"; fail "docker build failed (log: $work/build.log)"; }
made_image=1
step_done "image $image: this tree's Dockerfile"

project=$work/project
rm -rf "$project"
mkdir -p "$project/topologies" "$project/bench/scenarios"
jq --arg n "$lab" '.name = $n' "$repo/$topology" >"$project/$topology"
cp "$repo/$scenario" "$project/$scenario"
stack_file=$work/stack.yml
(cd "$project" && "$wanlab_bin" compose "$topology" --scenario "$scenario" --no-bench --swarm --project "$project") \
  >"$stack_file" || fail "wanlab compose --swarm failed"
sed -i "s|\"wanlab:latest\"|\"$image\"|" "$stack_file"

dcs=($(jq -r '.dcs[].name' "$repo/$topology"))
for l in wanlab.controller "${dcs[@]/#/wanlab.}"; do
  "${docker[@]}" node update --label-add "$l=true" "$node_id" >/dev/null
  labelled+=("$l")
done
[[ -z $(stack_leftovers) ]] || fail "services, containers, networks or configs of stack $lab exist already"

# ---- deploy ----

ctr() { "${docker[@]}" ps -q --filter "label=com.docker.swarm.service.name=${lab}_$1" | head -1; }
stack_up=1
t_deploy=$(date +%s.%N)
"${docker[@]}" stack deploy -c "$stack_file" "$lab" >"$work/deploy.log" 2>&1 || { cat "$work/deploy.log"; fail "docker stack deploy failed"; }
nodes=$(jq -r '.dcs[] | .name as $d | range(.nodes) | "\($d)-\(.)"' "$repo/$topology")
node_count=$(wc -w <<<"$nodes")
connected=0
for _ in $(seq 1 600); do
  c=$(ctr controller)
  if [[ -n $c ]]; then
    connected=$("${docker[@]}" logs "$c" 2>&1 | grep -c "agent of node .* connected" || true)
    ((connected >= node_count)) && break
  fi
  sleep 0.2
done
bringup=$(awk -v a="$t_deploy" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
if ((connected < node_count)); then
  "${docker[@]}" service ls --filter "label=com.docker.stack.namespace=$lab"
  [[ -n $(ctr controller) ]] && "${docker[@]}" logs "$(ctr controller)" 2>&1 | tail -20
  for n in $nodes; do [[ -n $(ctr "$n") ]] || "${docker[@]}" service ps --no-trunc "${lab}_$n" | tail -2; done
  fail "only $connected of $node_count agents connected within 120 s of docker stack deploy"
fi
backend=$("${docker[@]}" exec "$(ctr controller)" wanlab status "$lab" --json | jq -r .backend)
measured "bring-up: docker stack deploy to all $node_count agents connected: $bringup s"
step_done "stack $lab up: controller and $node_count node services, all agents connected, $backend backend"
"${docker[@]}" exec "$(ctr use-0)" ip -4 addr show >"$work/use-0-addresses.txt"
grep -q "inet 198.18.0.2/22" "$work/use-0-addresses.txt" || { cat "$work/use-0-addresses.txt"; fail "use-0 does not hold its plan address 198.18.0.2/22"; }

# ---- ping, iperf3 (the docker tier's checks) ----

dcs=($(jq -r '.dcs[].name' "$repo/$topology"))
ip_of() { jq -r --arg n "$1" '.dcs[] | .nodes[] | select(.name == $n) | .address' "$work/status.json"; }
"${docker[@]}" exec "$(ctr controller)" wanlab status "$lab" --json >"$work/status.json"
check_ping() {
  local a b from to rtt configured out line min avg max verdict bad=0
  for ((a = 0; a < ${#dcs[@]}; a++)); do
    for ((b = a + 1; b < ${#dcs[@]}; b++)); do
      from=${dcs[a]} to=${dcs[b]}
      rtt=$(jq -r --arg a "$from" --arg b "$to" \
        '[.links[] | select(.src == $a and .dst == $b or .src == $b and .dst == $a) | .delay] | join(" ")' "$work/status.json")
      [[ -n $rtt ]] || continue
      configured=$(awk -v d="$rtt" 'BEGIN { n = split(d, x, " "); s = 0; for (i = 1; i <= n; i++) { v = x[i]; u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v); s += (u == "us" ? v / 1000 : u == "s" ? v * 1000 : v) } printf "%.3f", s }')
      out=$("${docker[@]}" exec "$(ctr "$from-0")" ping -n -c 20 -i 0.1 -W 2 "$(ip_of "$to-0")" 2>&1) || true
      # min/avg/max from ping's summary (µs); the 90th percentile (the 18th of 20) from the
      # replies' own times (printed to 3 significant digits: 0.1 ms here, 1 ms over 100 ms).
      line=$(grep -o 'rtt [^=]*= [0-9./]*' <<<"$out" | awk '{ print $4 }')
      if [[ -z $line ]]; then
        echo "$out"
        echo "swarm: ping $from-0 -> $to-0 got no replies"
        bad=1
        continue
      fi
      IFS=/ read -r min avg max _ <<<"$line"
      read -r p90 replies < <(grep -o 'time=[0-9.]*' <<<"$out" | cut -d= -f2 | sort -g |
        awk '{ v[NR] = $1 } END { printf "%.3f %d\n", v[int(0.9 * NR + 0.5)], NR }')
      verdict=$(awk -v c="$configured" -v mn="$min" -v av="$avg" -v p="$p90" -v n="$replies" 'BEGIN {
        tol = 0.05 * c; if (tol < 2) tol = 2
        ok = n == 20 && mn >= c - 0.05 && av <= c + tol && p <= c + 2 * tol
        printf "%s (tolerance +%.2f ms)", ok ? "ok" : "OUT OF TOLERANCE", tol }')
      measured "ping $from-0 -> $to-0: configured RTT $configured ms, $replies of 20 replies, min $min avg $avg p90 $p90 max $max ms: $verdict"
      [[ $verdict == ok* ]] || bad=1
    done
  done
  return "$bad"
}
on_quiet_host "ping RTTs against the topology" check_ping
step_done "ping RTTs against the topology: $judged"

# ---- iperf3: rate ----

src=${dcs[0]} dst=${dcs[1]}
configured_rate=$(jq -r --arg a "$src" --arg b "$dst" '.links[] | select(.src == $a and .dst == $b) | .rate' "$work/status.json")
test_rate=100Mbit
"${docker[@]}" exec "$(ctr controller)" wanlab link set "$src" "$dst" --rate "$test_rate" >/dev/null
check_iperf3() {
  local goodput verdict
  "${docker[@]}" exec -d "$(ctr "$dst-0")" iperf3 -s -1 -J -p 5201
  sleep 0.5
  "${docker[@]}" exec "$(ctr "$src-0")" iperf3 -c "$(ip_of "$dst-0")" -p 5201 -t 8 -C cubic -J --get-server-output \
    >"$work/iperf3.json" || { cat "$work/iperf3.json"; fail "iperf3 $src-0 -> $dst-0 failed"; }
  # The receiver's goodput from second 2 on (TCP has left slow start by then at this RTT).
  goodput=$(jq '[.server_output_json.intervals[] | .sum | select(.start >= 2 and (.end - .start) > 0.9)]
                | (map(.bytes) | add) * 8 / (map(.end - .start) | add)' "$work/iperf3.json")
  verdict=$(awk -v g="$goodput" 'BEGIN { e = 100e6 * 1448 / 1514; d = (g - e) / e; if (d < 0) d = -d
    printf "%s (expected %.1f Mbit/s, off by %.1f %%)", d < 0.05 ? "ok" : "OUT OF TOLERANCE", e / 1e6, d * 100 }')
  measured "iperf3 $src-0 -> $dst-0 at $test_rate: goodput $(awk -v g="$goodput" 'BEGIN { printf "%.1f", g / 1e6 }') Mbit/s: $verdict"
  [[ $verdict == ok* ]]
}
on_quiet_host "iperf3 goodput against the link rate" check_iperf3
"${docker[@]}" exec "$(ctr controller)" wanlab link set "$src" "$dst" --rate "$configured_rate" >/dev/null
step_done "iperf3 goodput against the link rate: $judged"

# ---- a short scenario ----

if ! "${docker[@]}" exec "$(ctr controller)" wanlab run "$scenario" --out bench-results/smoke --quiet \
    >"$work/run.log" 2>&1; then
  cat "$work/run.log"
  fail "wanlab run $scenario failed in the controller service"
fi
summary=$work/summary.json
"${docker[@]}" exec "$(ctr controller)" cat bench-results/smoke/summary.json >"$summary" 2>/dev/null ||
  fail "the run left no summary in the results volume (bench-results/smoke/summary.json)"
iterations=$(jq '.iteration_time_s.per_iteration // [] | length' "$summary")
want_iterations=$(jq '.iterations' "$repo/$scenario")
mean=$(jq '.iteration_time_s.mean' "$summary")
util=$(jq '.gpu_utilization.mean' "$summary")
measured "scenario $(jq -r .run "$summary") ($(jq -r .backend "$summary") backend): $iterations iterations, iteration time mean $(awk -v m="$mean" 'BEGIN { printf "%.3f", m }') s, GPU utilization $(awk -v u="$util" 'BEGIN { printf "%.1f", 100 * u }') %, $(jq '.gpu_utilization.per_gpu | length' "$summary") GPUs"
wan_bad=$(jq -r '.wan[] | select(.expected_payload_bytes > 0 or .payload_bytes > 0)
  | "\(.src) \(.dst) \(.payload_bytes) \(.expected_payload_bytes)"' "$summary" | while read -r s d got want; do
    ok=$(awk -v g="$got" -v w="$want" 'BEGIN { d = (g - w) / w; if (d < 0) d = -d; print (w > 0 && d < 0.02) ? 1 : 0 }')
    echo "MEASURED: scenario WAN $s -> $d: $(awk -v g="$got" 'BEGIN { printf "%.1f", g / 1e6 }') MB, scenario $(awk -v w="$want" 'BEGIN { printf "%.1f", w / 1e6 }') MB" >&2
    ((ok)) || echo "$s->$d"
  done)
((iterations == want_iterations)) || fail "the summary has $iterations iteration times, the scenario runs $want_iterations"
awk -v m="$mean" 'BEGIN { exit !(m > 0) }' || fail "the summary has no iteration time"
[[ -z $wan_bad ]] || fail "WAN bytes off the scenario's by 2 % or more on: $wan_bad"
step_done "scenario $scenario ran; its summary checks out"

# ---- down ----

if ((keep)); then
  echo "swarm: whole tier $(elapsed) s (stack kept)"
  exit 0
fi
"${docker[@]}" stack rm "$lab" >"$work/rm.log" 2>&1 || { cat "$work/rm.log"; fail "docker stack rm failed"; }
left=
for _ in $(seq 1 120); do
  left=$(stack_leftovers)
  [[ -z $left ]] && break
  sleep 0.5
done
[[ -z $left ]] || fail "docker stack rm left services, containers, networks or configs of stack $lab after 60 s: $left"
stack_up=0
step_done "docker stack rm: no service, container, network or config of stack $lab is left"
echo "swarm: whole tier $(elapsed) s"
