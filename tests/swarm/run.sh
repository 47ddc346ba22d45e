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
# the stack's name) and bench/scenarios/three-dc-smoke.json; `wanlab compose --swarm` (the
# control API published on a free port of this host); a random token as the Docker secret
# <lab>-token; `docker stack deploy`; every agent connected (the bring-up time is printed).
# Then the lab is driven as from a manager, through the controller's published API with
# this machine's wanlab (`wanlab --api 127.0.0.1:PORT --api-token-file FILE`, no docker
# exec): status (text and JSON; a wrong token must get 401), and the docker tier's checks
# inside the services, with its tolerances (tests/support/docker_tier.sh): ping RTT between
# every pair of DCs against the topology; `link set` of one direction's delay +25 ms, ping
# then checked against the new RTT, and the delay set back; `replay --stop`; iperf3 goodput
# use -> usw within 5 % of 1448/1514 of 100 Mbit/s (set with `link set`); the smoke scenario
# (`wanlab --api run`) with its summary checked (iterations, WAN bytes within 2 % of the
# scenario's); `docker
# stack rm`, and checks that no service, container, network or config of the stack is left;
# the results volume, the secret, the labels, the image made here and the swarm made here are removed
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
    -h|--help) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "swarm: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done

lab=swarm-$$
topology=topologies/three-dc.json
scenario=bench/scenarios/three-dc-smoke.json
base_image=wanlab:latest
image=wanlab-swarm-test:$$

tier=swarm
# shellcheck source=../support/docker_tier.sh
source "$repo/tests/support/docker_tier.sh"

build_dir=$(cd "$build_dir" 2>/dev/null && pwd) || fail "no build folder $build_dir"
wanlab_bin=$build_dir/controller/wanlab
[[ -x $wanlab_bin ]] || fail "$wanlab_bin is not built (build first: scripts/build.sh)"
work=$build_dir/swarm
mkdir -p "$work"

# ---- Docker, swarm ----

need_root "to run Docker services with NET_ADMIN"
command -v docker >/dev/null || skip "no docker here (the docker tier, or scripts/setup.sh, installs docker.io)"
command -v jq >/dev/null || skip "no jq here (scripts/setup.sh installs it)"
docker=("${sudo[@]}" docker)
# As the docker tier: our own daemon where none answers, stopped at the end.
start_dockerd_if_none "$work/dockerd.log"

swarm_state=$("${docker[@]}" info --format '{{.Swarm.LocalNodeState}}' 2>/dev/null || echo unknown)
made_swarm=0
made_gwbridge=0
node_id=
labelled=()
made_image=0
made_secret=0
stack_up=0
cleanup() {
  local rc=$?
  if ((keep)) && ((stack_up)); then
    echo "swarm: the stack is still up: docker stack rm $lab; docker volume rm $lab-results; docker secret rm $lab-token$( ((made_swarm)) && echo "; docker swarm leave --force")"
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
  ((made_secret)) && { "${docker[@]}" secret rm "$lab-token" >/dev/null 2>&1 || true; }
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
made_image=1
build_image "$image" "$work/build.log"
step_done "image $image: this tree's Dockerfile"

project=$work/project
rm -rf "$project"
mkdir -p "$project/topologies" "$project/bench/scenarios"
jq --arg n "$lab" '.name = $n' "$repo/$topology" >"$project/$topology"
cp "$repo/$scenario" "$project/$scenario"
stack_file=$work/stack.yml
# The control API's port on this host (the manager): a free one.
api_port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
(cd "$project" && "$wanlab_bin" compose "$topology" --scenario "$scenario" --no-bench --swarm --project "$project" \
  --api-port "$api_port") >"$stack_file" || fail "wanlab compose --swarm failed"
sed -i "s|\"wanlab:latest\"|\"$image\"|" "$stack_file"

dcs=($(jq -r '.dcs[].name' "$repo/$topology"))
for l in wanlab.controller "${dcs[@]/#/wanlab.}"; do
  "${docker[@]}" node update --label-add "$l=true" "$node_id" >/dev/null
  labelled+=("$l")
done
[[ -z $(stack_leftovers) ]] || fail "services, containers, networks or configs of stack $lab exist already"
# The token (agents', the control API's): the Docker secret the stack names, and this
# shell's copy for `wanlab --api` (as a user on a manager keeps it).
token_file=$work/token
(umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$token_file")
"${docker[@]}" secret create "$lab-token" "$token_file" >/dev/null || fail "docker secret create $lab-token failed"
made_secret=1

# ---- deploy ----

ctr() { "${docker[@]}" ps -q --filter "label=com.docker.swarm.service.name=${lab}_$1" | head -1; }
node_exec() { "${docker[@]}" exec "$(ctr "$1")" "${@:2}"; }
node_exec_detached() { "${docker[@]}" exec -d "$(ctr "$1")" "${@:2}"; }
status_json=$work/status.json
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
# ---- the lab from the manager: `wanlab --api` (no docker exec) ----

# This host is the swarm's manager: the controller's API is published on it (host mode).
wl() { "$wanlab_bin" --api "127.0.0.1:$api_port" --api-token-file "$token_file" "$@"; }
wl status --json >"$status_json" 2>"$work/status.err" ||
  { cat "$work/status.err"; fail "wanlab --api 127.0.0.1:$api_port status failed (the controller's published API)"; }
[[ $(jq -r .lab "$work/status.json") == "$lab" ]] || fail "wanlab --api status: not lab $lab: $(head -c 300 "$work/status.json")"
backend=$(jq -r .backend "$work/status.json")
if WANLAB_TOKEN=not-the-token "$wanlab_bin" --api "127.0.0.1:$api_port" status >"$work/bad-token.txt" 2>&1; then
  fail "wanlab --api status with a wrong token succeeded"
fi
grep -q "refused the token (401)" "$work/bad-token.txt" || { cat "$work/bad-token.txt"; fail "a wrong token: no 401"; }
wl status >"$work/status.txt" || fail "wanlab --api status (text) failed"
grep -q "^lab $lab " "$work/status.txt" || { cat "$work/status.txt"; fail "wanlab --api status: no 'lab $lab' line"; }
measured "bring-up: docker stack deploy to all $node_count agents connected: $bringup s"
step_done "stack $lab up: controller and $node_count node services, all agents connected, $backend backend"
"${docker[@]}" exec "$(ctr use-0)" ip -4 addr show >"$work/use-0-addresses.txt"
grep -q "inet 198.18.0.2/22" "$work/use-0-addresses.txt" || { cat "$work/use-0-addresses.txt"; fail "use-0 does not hold its plan address 198.18.0.2/22"; }

# ---- ping, iperf3 (the docker tier's checks) ----

on_quiet_host "ping RTTs against the topology" check_ping
step_done "ping RTTs against the topology: $judged"

# ---- link set from the manager: the RTT follows ----

src=${dcs[0]} dst=${dcs[1]}
delay_of() { jq -r --arg a "$1" --arg b "$2" '.links[] | select(.src == $a and .dst == $b) | .delay' "$status_json"; }
old_delay=$(delay_of "$src" "$dst")
back_delay=$(delay_of "$dst" "$src")
new_ms=$(awk -v d="$(ms_of "$old_delay")" 'BEGIN { printf "%.3f", d + 25 }')
wl link set "$src" "$dst" --delay "${new_ms}ms" >"$work/link-set.txt" || { cat "$work/link-set.txt"; fail "wanlab --api link set failed"; }
on_quiet_host "RTT after link set through the API" check_rtt_after_link_set "$src" "$dst" "$new_ms" "$back_delay"
wl link set "$src" "$dst" --delay "$old_delay" >/dev/null || fail "wanlab --api link set (back to $old_delay) failed"
wl status --json >"$work/status-after.json" || fail "wanlab --api status failed"
[[ $(jq -r --arg a "$src" --arg b "$dst" '.links[] | select(.src == $a and .dst == $b) | .delay' "$work/status-after.json") == "$old_delay" ]] ||
  fail "link $src->$dst is not back at $old_delay"
wl replay --stop >"$work/replay-stop.txt" 2>&1 || { cat "$work/replay-stop.txt"; fail "wanlab --api replay --stop failed"; }
grep -q "no replay was running in lab $lab" "$work/replay-stop.txt" || { cat "$work/replay-stop.txt"; fail "wanlab --api replay --stop: unexpected answer"; }
step_done "link set through the API moved the RTT: $judged; replay --stop answered"

# ---- iperf3: rate ----

src=${dcs[0]} dst=${dcs[1]}
configured_rate=$(jq -r --arg a "$src" --arg b "$dst" '.links[] | select(.src == $a and .dst == $b) | .rate' "$status_json")
test_rate=100Mbit
test_rate_bps=100e6
wl link set "$src" "$dst" --rate "$test_rate" >/dev/null
on_quiet_host "iperf3 goodput against the link rate" check_iperf3
wl link set "$src" "$dst" --rate "$configured_rate" >/dev/null
step_done "iperf3 goodput against the link rate: $judged"

# ---- a short scenario ----

# From the manager, in the project folder: the scenario and --out are the controller's paths
# (relative: from its working folder /wanlab, where the configs and the results volume are).
if ! (cd "$project" && wl run "$scenario" --out bench-results/smoke --quiet) >"$work/run.log" 2>&1; then
  cat "$work/run.log"
  fail "wanlab --api run $scenario failed"
fi
grep -q "iteration time  mean" "$work/run.log" || { cat "$work/run.log"; fail "wanlab --api run printed no summary"; }
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
