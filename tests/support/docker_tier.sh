# What the docker and swarm tiers share (tests/docker/run.sh, tests/swarm/run.sh source it):
# timed steps, skip/fail, the hypervisor-steal rule, root, our own dockerd, and the checks
# inside the lab's containers (ping RTT per DC pair, iperf3 goodput).
#
# Before sourcing, set `tier` (the prefix of every line: docker, swarm). Before the checks,
# define `node_exec NODE CMD...` and `node_exec_detached NODE CMD...` (run CMD in NODE's
# container, e.g. use-0) and set `work` (files), `dcs` (the DC names, in order) and
# `status_json` (a `wanlab status --json` of the lab).

t_start=$(date +%s.%N)
t_step=$t_start
elapsed() { awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
step_done() {
  local now
  now=$(date +%s.%N)
  awk -v a="$t_step" -v b="$now" -v what="$1" -v tier="$tier" 'BEGIN { printf "%s: %s in %.1f s\n", tier, what, b - a }'
  t_step=$now
}
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "$tier: FAILED: $*" >&2; exit 1; }
measured() { echo "MEASURED: $*"; }

# The host's CPU time so far, from the first line of /proc/stat: "TOTAL STEAL" in ticks
# (user nice system idle iowait irq softirq steal; guest time is inside user and nice).
cpu_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9, $9; exit }' /proc/stat; }

# on_quiet_host WHAT CHECK [ARG...]: runs CHECK ARG..., which prints its MEASURED lines and returns 0 when
# its figures hold, and judges it by the hypervisor's steal during it (the netns tiers'
# rule, tests/support/quiet_host.hpp): figures off with steal at or below 1 % of the CPU
# fail; figures off under more steal are measured again, up to 3 times, 10 s apart.
# Sets `judged` to "checked" or "NOT JUDGED (hypervisor steal)".
on_quiet_host() {
  local what=$1 attempt rc before after steal
  shift  # the check and its arguments
  for attempt in 1 2 3; do
    before=$(cpu_ticks)
    if "$@"; then rc=0; else rc=1; fi
    after=$(cpu_ticks)
    steal=$(awk -v a="$before" -v b="$after" 'BEGIN { split(a, x, " "); split(b, y, " ")
      t = y[1] - x[1]; printf "%.2f", (t > 0 ? 100 * (y[2] - x[2]) / t : 0) }')
    echo "$tier: $what: attempt $attempt, hypervisor steal $steal %, figures $( ((rc == 0)) && echo hold || echo off)"
    ((rc == 0)) && { judged="checked"; return 0; }
    awk -v s="$steal" 'BEGIN { exit !(s > 1) }' || fail "$what: figures off on a quiet host (steal $steal %)"
    ((attempt < 3)) && sleep 10
  done
  echo "$tier: WARNING: $what: not judged: all 3 attempts ran under hypervisor steal above 1 % of the CPU and their figures were off (above)" >&2
  judged="NOT JUDGED (hypervisor steal)"
}

# need_root WHY: sets `sudo` (empty as root, else `sudo -n` where it works), or skips.
need_root() {
  if [[ $(id -u) -eq 0 ]]; then
    sudo=()
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
  else
    skip "the $tier tier needs root ($1)"
  fi
}

# start_dockerd_if_none LOG: where no daemon answers, our own, leaving the host's iptables
# and ip_forward alone (--iptables=false --ip-forward=false --bridge=none: the labs'
# networks are internal and nothing needs NAT; images build with the host's network);
# skips where it does not start. stop_dockerd stops it again (nothing where it was not ours).
started_dockerd=
start_dockerd_if_none() {
  local log=$1
  "${docker[@]}" info >/dev/null 2>&1 && return 0
  command -v dockerd >/dev/null || skip "no dockerd here (the docker tier, or scripts/setup.sh, installs docker.io)"
  "${sudo[@]}" dockerd --iptables=false --ip-forward=false --bridge=none >"$log" 2>&1 &
  started_dockerd=$!
  for _ in $(seq 1 150); do
    "${docker[@]}" info >/dev/null 2>&1 && break
    if ! kill -0 "$started_dockerd" 2>/dev/null; then
      started_dockerd=
      tail -5 "$log"
      skip "dockerd does not start here (log: $log)"
    fi
    sleep 0.2
  done
  "${docker[@]}" info >/dev/null 2>&1 || { stop_dockerd; skip "dockerd did not answer within 30 s (log: $log)"; }
  step_done "started dockerd (pid $started_dockerd, log $log)"
}
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

# build_image TAG LOG: the image from this tree's Dockerfile (every layer from the cache
# where an earlier build had them).
build_image() {
  local tag=$1 log=$2
  if ! DOCKER_BUILDKIT=0 "${docker[@]}" build --network host --build-arg JOBS="$(nproc)" -t "$tag" "$repo" \
      >"$log" 2>&1; then
    tail -30 "$log"
    fail "docker build failed (log: $log)"
  fi
}

# A duration as wanlab prints it (40ms, 250us, 1.5s) in ms.
ms_of() { awk -v v="$1" 'BEGIN { u = v; sub(/[0-9.]+/, "", u); sub(/[a-z]+$/, "", v); printf "%.3f", (u == "us" ? v / 1000 : u == "s" ? v * 1000 : v) }'; }

# The plan's address of a node, from the lab's status.
ip_of() { jq -r --arg n "$1" '.dcs[] | .nodes[] | select(.name == $n) | .address' "$status_json"; }

# check_ping: ping RTT between every pair of DCs (node 0 of each) against the topology's
# RTT, 20 replies each: min no earlier than configured - 0.05 ms, mean within max(2 ms,
# 5 %) above, the 90th percentile within twice that; the max is printed, not judged (one
# preemption of the VM delays a reply by 10 ms and more while the steal stays < 1 %).
check_ping() {
  local a b d from to rtt configured out line min avg max p90 replies verdict bad=0
  for ((a = 0; a < ${#dcs[@]}; a++)); do
    for ((b = a + 1; b < ${#dcs[@]}; b++)); do
      from=${dcs[a]} to=${dcs[b]}
      rtt=$(jq -r --arg a "$from" --arg b "$to" \
        '[.links[] | select(.src == $a and .dst == $b or .src == $b and .dst == $a) | .delay] | join(" ")' "$status_json")
      [[ -n $rtt ]] || continue
      configured=0
      for d in $rtt; do configured=$(awk -v s="$configured" -v d="$(ms_of "$d")" 'BEGIN { printf "%.3f", s + d }'); done
      out=$(node_exec "$from-0" ping -n -c 20 -i 0.1 -W 2 "$(ip_of "$to-0")" 2>&1) || true
      # min/avg/max from ping's summary (µs); the 90th percentile (the 18th of 20) from the
      # replies' own times (printed to 3 significant digits: 0.1 ms here, 1 ms over 100 ms).
      line=$(grep -o 'rtt [^=]*= [0-9./]*' <<<"$out" | awk '{ print $4 }')
      if [[ -z $line ]]; then
        echo "$out"
        echo "$tier: ping $from-0 -> $to-0 got no replies"
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

# check_rtt_after_link_set SRC DST NEW_MS BACK: after `wanlab --api link set SRC DST --delay
# NEW_MS ms`, ping SRC-0 -> DST-0 (10 replies) against NEW_MS + BACK (the reverse link's
# delay as wanlab prints it): min no earlier than configured - 0.05 ms, mean within max(2 ms,
# 5 %) above. Needs node_exec and ip_of.
check_rtt_after_link_set() {
  local src=$1 dst=$2 new_ms=$3 back=$4 configured out line min avg max verdict
  configured=$(awk -v a="$new_ms" -v b="$(ms_of "$back")" 'BEGIN { printf "%.3f", a + b }')
  out=$(node_exec "$src-0" ping -n -c 10 -i 0.1 -W 2 "$(ip_of "$dst-0")" 2>&1) || true
  line=$(grep -o 'rtt [^=]*= [0-9./]*' <<<"$out" | awk '{ print $4 }')
  [[ -n $line ]] || { echo "$out"; return 1; }
  IFS=/ read -r min avg max _ <<<"$line"
  verdict=$(awk -v c="$configured" -v mn="$min" -v av="$avg" 'BEGIN { tol = 0.05 * c; if (tol < 2) tol = 2
    printf "%s (tolerance +%.2f ms)", (mn >= c - 0.05 && av <= c + tol) ? "ok" : "OUT OF TOLERANCE", tol }')
  measured "after wanlab --api link set $src $dst --delay ${new_ms}ms: ping $src-0 -> $dst-0 configured RTT $configured ms, min $min avg $avg max $max ms: $verdict"
  [[ $verdict == ok* ]]
}

# check_iperf3: iperf3 goodput $src-0 -> $dst-0 (8 s, CUBIC) within 5 % of 1448/1514 of
# $test_rate_bps (the link set to it first). Leaves the report in $work/iperf3.json.
check_iperf3() {
  local goodput verdict
  node_exec_detached "$dst-0" iperf3 -s -1 -J -p 5201
  sleep 0.5
  node_exec "$src-0" iperf3 -c "$(ip_of "$dst-0")" -p 5201 -t 8 -C cubic -J --get-server-output \
    >"$work/iperf3.json" || { cat "$work/iperf3.json"; fail "iperf3 $src-0 -> $dst-0 failed"; }
  # The receiver's goodput from second 2 on (TCP has left slow start by then at this RTT).
  goodput=$(jq '[.server_output_json.intervals[] | .sum | select(.start >= 2 and (.end - .start) > 0.9)]
                | (map(.bytes) | add) * 8 / (map(.end - .start) | add)' "$work/iperf3.json")
  verdict=$(awk -v g="$goodput" -v r="$test_rate_bps" 'BEGIN { e = r * 1448 / 1514; d = (g - e) / e; if (d < 0) d = -d
    printf "%s (expected %.1f Mbit/s, off by %.1f %%)", d < 0.05 ? "ok" : "OUT OF TOLERANCE", e / 1e6, d * 100 }')
  measured "iperf3 $src-0 -> $dst-0 at $test_rate: goodput $(awk -v g="$goodput" 'BEGIN { printf "%.1f", g / 1e6 }') Mbit/s: $verdict"
  [[ $verdict == ok* ]]
}
