#!/usr/bin/env bash
# The userspace engine's release lateness on a busy host: a three-DC training scenario
# (bench/scenarios/three-dc-7b.json, fair, 1 connection per peer, like the demo's fair-k1)
# with and without a CPU hog, under each engine scheduling (`wanlab up --engine-sched`).
# The hog is one busy loop per CPU at normal priority (`yes > /dev/null`), as other jobs
# on a shared machine are. Per (scheduling, load): the share of packets released more than
# 1 ms late, the p99 lateness (the upper bound of its histogram bucket), the RX ring drops,
# the iteration time, and the engine thread's time off the CPU (its CPU's hypervisor steal
# and its run delay, as shares of the run), as means with 95 % confidence intervals
# (Student t) over the repeats; runs alternate hog and no hog so a drift of the machine
# falls on both.
# Takes /tmp/wanlab-root-tests.lock so no other lab runs at the same time.
# Usage: bench/engine_under_load.sh [--repeat N] [--scheds "nice fifo:50"] [--iterations N]
#                                   [--connections K] [--out DIR]      (root; after the build)
set -euo pipefail
cd "$(dirname "$0")/.."
repeat=3
scheds="nice fifo:50"
iterations=3
connections=1
out=
while (($#)); do
  case $1 in
    --repeat) repeat=$2; shift 2 ;;
    --scheds) scheds=$2; shift 2 ;;
    --iterations) iterations=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--repeat N] [--scheds \"nice fifo:50\"] [--iterations N] [--connections K] [--out DIR]" >&2; exit 2 ;;
  esac
done
wanlab=$(realpath "${WANLAB:-build/controller/wanlab}")
out=${out:-runs/engine-under-load-$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$out"
out=$(realpath "$out")
lab=eul3dc$$
hogs=()
stop_hogs() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done; for p in "${hogs[@]}"; do wait "$p" 2>/dev/null || true; done; hogs=(); }
cleanup() { stop_hogs; "$wanlab" down "$lab" >/dev/null 2>&1 || true; }
trap cleanup EXIT

exec 9>/tmp/wanlab-root-tests.lock
echo "waiting for /tmp/wanlab-root-tests.lock ..."
flock 9

# A uniquely named copy of the three-DC topology, and of the scenario pointing at it.
jq --arg n "$lab" '.name = $n' topologies/three-dc.json >"$out/topology.json"
jq --arg t "$out/topology.json" --argjson it "$iterations" --argjson k "$connections" \
  '.topology = $t | .iterations = $it | .connections = $k' bench/scenarios/three-dc-7b.json >"$out/scenario.json"

cpus=$(nproc)
echo "$(date -u +%FT%TZ) host: $cpus CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), kernel $(uname -r)," \
  "sched_rt_runtime_us $(cat /proc/sys/kernel/sched_rt_runtime_us)" | tee "$out/conditions.txt"
printf 'sched\tload\tround\tover_1ms\tp99_us\tring_drops\titer_s\tdegraded\tsteal\tengine_steal\tengine_run_delay\tloadavg\tscheduling\n' >"$out/runs.tsv"
for sched in $scheds; do
  "$wanlab" down "$lab" >/dev/null 2>&1 || true
  "$wanlab" up "$out/topology.json" --backend userspace --engine-sched "$sched" >/dev/null
  for ((r = 1; r <= repeat; r++)); do
    loads="idle hog"
    ((r % 2 == 0)) && loads="hog idle"
    for load in $loads; do
      if [[ $load == hog ]]; then
        for ((c = 0; c < cpus; c++)); do yes >/dev/null & hogs+=($!); done
        sleep 1
      fi
      la=$(cut -d' ' -f1 /proc/loadavg)
      dir="$out/${sched//:/-}-$load-$r"
      rc=0
      "$wanlab" run "$out/scenario.json" --out "$dir" --quiet >"$dir.log" 2>&1 || rc=$?
      stop_hogs
      if [[ $rc -ne 0 || ! -f $dir/summary.json ]]; then
        echo "$sched $load round $r: run failed (rc $rc, $dir.log)"
        continue
      fi
      jq -r --arg s "$sched" --arg l "$load" --arg r "$r" --arg la "$la" \
        '[$s, $l, $r, .engine.released_late_over_1ms_fraction, (.engine.release_late_p99_us // "inf"),
          (.engine.rx_ring_dropped + .engine.rx_big_ring_dropped), .iteration_time_s.mean, .engine.degraded,
          (.host_cpu.steal_fraction // 0), (.engine.cpu_steal_fraction // "n/a"),
          (.engine.run_delay_fraction // "n/a"), $la, .engine.scheduling] | @tsv' "$dir/summary.json" | tee -a "$out/runs.tsv"
    done
  done
  "$wanlab" down "$lab" >/dev/null
done

python3 - "$out/runs.tsv" <<'PY' | tee "$out/summary.md"
import csv, math, statistics, sys
from collections import OrderedDict
T = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
groups = OrderedDict()
for r in rows: groups.setdefault((r["sched"], r["load"]), []).append(r)
def ci(xs, fmt):
    xs = [x for x in xs if math.isfinite(x)]
    if not xs: return "n/a"
    m = statistics.mean(xs)
    if len(xs) < 2: return fmt.format(m)
    h = T.get(len(xs) - 1, 1.96) * statistics.stdev(xs) / math.sqrt(len(xs))
    return (fmt + " +- " + fmt).format(m, h)
def num(v): return float("inf") if v in ("inf", "null", "", "n/a") else float(v)
print("| --engine-sched | load | runs | scheduling | > 1 ms late (%) | p99 (us) | p99 worst (us) | ring drops | iteration (s) | engine CPU steal (%) | engine run delay (%) | degraded runs |")
print("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for (s, l), rs in groups.items():
    p99 = [num(r["p99_us"]) for r in rs]
    print(f"| {s} | {l} | {len(rs)} | {rs[0]['scheduling']} | {ci([100*num(r['over_1ms']) for r in rs], '{:.3f}')} "
          f"| {ci(p99, '{:.0f}')} | {max(p99):.0f} | {ci([num(r['ring_drops']) for r in rs], '{:.0f}')} "
          f"| {ci([num(r['iter_s']) for r in rs], '{:.3f}')} "
          f"| {ci([100*num(r['engine_steal']) for r in rs], '{:.2f}')} "
          f"| {ci([100*num(r['engine_run_delay']) for r in rs], '{:.2f}')} "
          f"| {sum(r['degraded'] == 'true' for r in rs)} |")
PY
echo "results: $out (runs.tsv, summary.md, one run folder per run)"
