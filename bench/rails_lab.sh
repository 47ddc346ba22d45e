#!/usr/bin/env bash
# The lab's photonic rails against the simulator (docs/rails.md, "In the lab"): the shipped
# rails scenarios (bench/scenarios/rails/rails-lab-phase.json: Opus's phase policy on OCS
# rails; rails-lab-packet.json: the same rails as electrical packet rails) run on the lab
# (topologies/rails-lab.json, the userspace engine's rail switch) and in the simulator, each
# variant --repeat times, one `wanlab bench --mode lab,simulate` per scenario and OCS
# reconfiguration latency (--latencies: the topology's reconfiguration, the lab brought up
# anew for each). Prints each run's crosscheck, repeat and rails tables, then the OCS
# overhead (phase over packet) per latency in both executors. Needs root (the lab); runs
# its own lab (the shipped topology as `wlbench-rails`, refused if that lab is up) and
# takes it down on every exit.
#
#   bench/rails_lab.sh                                  # 1 ms, 3 repeats, results under /tmp/wanlab-rails-lab
#   bench/rails_lab.sh --latencies 1ms,10ms --repeat 5 --out DIR
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WANLAB="$ROOT/build/controller/wanlab"
repeat=3
out=/tmp/wanlab-rails-lab
latencies=1ms
while [ $# -gt 0 ]; do
  case "$1" in
    --repeat) repeat=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --latencies) latencies=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "rails_lab.sh: unknown argument $1 (--repeat N, --latencies T,..., --out DIR)" >&2; exit 2 ;;
  esac
done
[ -x "$WANLAB" ] || cmake --build "$ROOT/build" --target wanlab wanlab-agent >&2
lab=wlbench-rails
if "$WANLAB" status "$lab" >/dev/null 2>&1; then
  echo "rails_lab.sh: lab $lab is up; take it down first (wanlab down $lab)" >&2
  exit 1
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
trap '"$WANLAB" down "$lab" >/dev/null' EXIT

# The shipped topology with reconfiguration $1, and scenario $2 on it: their paths.
variant() {
  python3 - "$ROOT" "$out" "$1" "$2" "$lab" <<'PY'
import json, sys
root, out, lat, scen, lab = sys.argv[1:]
t = json.load(open(f"{root}/topologies/rails-lab.json"))
t["name"] = lab
t["dcs"][0]["fabric"]["reconfiguration"] = lat
tp = f"{out}/rails-lab-{lat}.json"
json.dump(t, open(tp, "w"), indent=2)
s = json.load(open(f"{root}/bench/scenarios/rails/{scen}.json"))
s["topology"] = tp
sp = f"{out}/{scen}-{lat}.json"
json.dump(s, open(sp, "w"), indent=2)
print(tp, sp)
PY
}

bench() {  # topology scenario folder
  "$WANLAB" down "$lab" >/dev/null
  "$WANLAB" up "$1" >/dev/null
  "$WANLAB" bench "$2" --mode lab,simulate --policies fair --connections 1 --no-placement-baseline \
    --repeat "$repeat" --keep-lab --out "$3" >"$3.log" 2>&1 || { tail -20 "$3.log" >&2; exit 1; }
  echo "## $(basename "$3")"
  echo
  sed -n '/^| variant | lab iteration/,/^$/p' "$3/crosscheck.md"
  sed -n '/^| variant | runs/,/^$/p' "$3/lab/bench.md"
  echo "lab:"; echo
  sed -n '/^| variant | DC/,/^$/p' "$3/lab/bench.md"
  echo "simulator:"; echo
  sed -n '/^| variant | DC/,/^$/p' "$3/sim/bench.md"
}

first=${latencies%%,*}
read -r topo scen < <(variant "$first" rails-lab-packet)
bench "$topo" "$scen" "$out/packet"
for lat in ${latencies//,/ }; do
  read -r topo scen < <(variant "$lat" rails-lab-phase)
  bench "$topo" "$scen" "$out/phase-$lat"
done
python3 - "$out" "$latencies" <<'PY'
import json, sys
out, lats = sys.argv[1], sys.argv[2].split(",")
def mean(folder, ex):
    v = json.load(open(f"{out}/{folder}/{ex}/bench.json"))["variants"][0]
    xs = [r["iteration_time_s"]["mean"] for r in (v.get("runs") or [v["summary"]])]
    return sum(xs) / len(xs), xs
k = {ex: mean("packet", ex) for ex in ("lab", "sim")}
print("| OCS latency | lab phase (s) | lab packet (s) | lab overhead (%) | simulated phase (s) | simulated packet (s) | simulated overhead (%) | simulated / lab, phase (%) |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for lat in lats:
    p = {ex: mean(f"phase-{lat}", ex) for ex in ("lab", "sim")}
    lo = 100 * (p["lab"][0] / k["lab"][0] - 1)
    so = 100 * (p["sim"][0] / k["sim"][0] - 1)
    print(f"| {lat} | {p['lab'][0]:.3f} | {k['lab'][0]:.3f} | {lo:+.1f} | {p['sim'][0]:.3f} | {k['sim'][0]:.3f} | {so:+.1f} | {100 * (p['sim'][0] / p['lab'][0] - 1):+.1f} |")
print()
print("lab runs (mean iteration time, s): packet " + ", ".join(f"{x:.3f}" for x in k["lab"][1]) + "; " +
      "; ".join(f"phase {lat} " + ", ".join(f"{x:.3f}" for x in mean(f"phase-{lat}", "lab")[1]) for lat in lats))
PY
