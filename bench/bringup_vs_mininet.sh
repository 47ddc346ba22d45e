#!/usr/bin/env bash
# Bring-up and teardown of the same >= 96-node lab with wanlab and with Mininet, side by
# side in one run, and the ratio. Needs root. Build first (scripts/build.sh).
#
#   bench/bringup_vs_mininet.sh [--runs N] [--topology FILE] [--build-dir DIR] [--out DIR] [--reconfig N]
#
# --out keeps the two JSON result files (default: a temporary folder, printed at the end).
# MININET_PYTHON overrides the interpreter (default /usr/bin/python3).
# --reconfig N also times N Mininet in-place bw changes (intf.config), for comparison with
# bench/link_change. If Debian's python3 cannot import mininet, runs the wanlab side alone.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=5
topology=topologies/bringup-96.json
build_dir=${BUILD_DIR:-build}
out=""
reconfig=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --topology) topology=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --reconfig) reconfig=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

if [[ $EUID -ne 0 ]]; then
  echo "bringup_vs_mininet: needs root (network namespaces)" >&2
  exit 1
fi
bringup=$build_dir/bench/bringup
if [[ ! -x $bringup ]]; then
  echo "bringup_vs_mininet: $bringup not found; build first (scripts/build.sh) or pass --build-dir" >&2
  exit 1
fi
# Debian's interpreter: the mininet package is installed for it, not for a pyenv python on PATH.
py=${MININET_PYTHON:-/usr/bin/python3}
[[ -x $py ]] || py=python3
if [[ -z $out ]]; then out=$(mktemp -d /tmp/wanlab-bringup.XXXXXX); fi
mkdir -p "$out"
# The benchmarks print their progress on stderr and their JSON on stdout (to $out): keep the
# progress in order with this script's own output.
exec 2>&1

echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ), kernel $(uname -r), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== wanlab ($bringup)"
"$bringup" --runs "$runs" --topology "$topology" --json --profile >"$out/wanlab.json"

have_mininet=1
if ! "$py" -c 'import mininet.net' 2>/dev/null; then
  have_mininet=0
  echo "== Mininet: not importable by $py (Debian package 'mininet' missing); wanlab side only"
else
  echo "== Mininet"
  "$py" bench/mininet_bringup.py --runs "$runs" --topology "$topology" --json --reconfig "$reconfig" \
    >"$out/mininet.json"
fi

echo
"$py" - "$out/wanlab.json" "$out/mininet.json" "$have_mininet" <<'EOF'
import json, sys
w = json.load(open(sys.argv[1]))
m = json.load(open(sys.argv[2])) if sys.argv[3] == "1" else None
runs = len(w["runs"])
print(f"Bring-up / teardown of {w['nodes']} nodes in {w['dcs']} DCs ({w['topology']}), median of {runs} runs")
print(f"  {'':<10} {'bring-up ms':>12} {'teardown ms':>12}   spread (min..max)")
def row(name, d):
    print(f"  {name:<10} {d['median']['bringup_ms']:>12.1f} {d['median']['teardown_ms']:>12.1f}   "
          f"up {d['min']['bringup_ms']:.0f}..{d['max']['bringup_ms']:.0f}, "
          f"down {d['min']['teardown_ms']:.0f}..{d['max']['teardown_ms']:.0f}")
row("wanlab", w)
if m:
    row("Mininet", m)
    up = m["median"]["bringup_ms"] / w["median"]["bringup_ms"]
    down = m["median"]["teardown_ms"] / w["median"]["teardown_ms"]
    print(f"  {'ratio':<10} {up:>11.1f}x {down:>11.1f}x   (Mininet / wanlab; target bring-up >= 10x)")
    both = (m["median"]["bringup_ms"] + m["median"]["teardown_ms"]) / (
        w["median"]["bringup_ms"] + w["median"]["teardown_ms"])
    print(f"  up + down together: {both:.1f}x")
    if "reconfig" in m:
        r = m["reconfig"]
        print(f"  Mininet intf.config(bw=...) in place: p50 {r['p50_us']/1e3:.2f} ms, p99 {r['p99_us']/1e3:.2f} ms")
else:
    print("  Mininet: not run")
if "freed_after_teardown_ms" in w["median"]:
    freed = w["median"]["freed_after_teardown_ms"]
    print(f"  wanlab: the kernel finished removing the namespaces' interfaces a median {freed:.0f} ms after "
          f"teardown() returned" + (" (Mininet's stop() deletes its interfaces before returning)" if m else ""))
    if m:
        print(f"  teardown ratio counting that wait: {m['median']['teardown_ms'] / (w['median']['teardown_ms'] + freed):.1f}x")
print(f"  wanlab: {w['namespaces']} namespaces, {w['operations']} netlink operations, netem "
      f"{'on' if w['netem'] else 'off (kernel has none: pfifo leaves)'}")
p = w.get("profile")
if p:
    top = ", ".join(f"{o['op']} {o['total_ms']:.0f} ms ({o['count']}x {o['mean_us']:.0f} us)" for o in p["ops"][:4])
    print(f"  wanlab apply profile ({p['apply_ms']:.0f} ms): {top}")
EOF
echo
if [[ $have_mininet -eq 1 ]]; then
  echo "results: $out/wanlab.json $out/mininet.json"
else
  echo "results: $out/wanlab.json"
fi
