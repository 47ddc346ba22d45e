#!/usr/bin/env bash
# The CUDA compute mode checked on a real GPU, in one run (docs: agents/gpu/README.md):
#   1. the GPU, driver and toolkit; the probe's embedded GPU code (sm_90 for H100/H200);
#   2. wanlab-gpu-probe on every pipeline stage shape of the shipped scenarios (as
#      `wanlab memory --json` gives them), then bench/gpu_fit.py: achieved TFLOP/s and MFU
#      per shape, one fitted MFU, and the modeled stage time at it against the measured;
#   3. one shipped scenario in a lab on this machine (if it can make namespaces) with
#      compute "cuda", and the same with "modeled" at the fitted MFU; since the lab's
#      emulated GPUs share the one real GPU, the probe with 1 to 32 workers at once too;
#   4. everything under --out (probes.json, fit.json, fit.md, labs.tar.gz, log.txt).
#
# Usage: bench/gpu_check.sh [--build DIR] [--out DIR] [--lab-scenario FILE] [--no-lab]
#                           [--repeat N] [--peak FLOPS]
#   --build DIR   a wanlab build folder (controller/wanlab, agents/wanlab-agent,
#                 agents/gpu/wanlab-gpu-probe), built with nvcc; default build
#   --out DIR     where results go; default bench/results/gpu-check-DATE
# Exit status: 0 done, 1 a step failed, 2 bad arguments, 3 no GPU.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build
out=""
lab_scenario=$root/bench/scenarios/two-dc-1b.json
lab=1
repeat=20
peak=989e12
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$(cd "$2" && pwd) || exit 2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --lab-scenario) lab_scenario=$2; shift 2 ;;
    --no-lab) lab=0; shift ;;
    --repeat) repeat=$2; shift 2 ;;
    --peak) peak=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || out=$root/bench/results/gpu-check-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
exec > >(tee "$out/log.txt") 2>&1

wanlab=$build/controller/wanlab
probe=$build/agents/gpu/wanlab-gpu-probe
for b in "$wanlab" "$probe" "$build/agents/wanlab-agent"; do
  [ -x "$b" ] || { echo "gpu_check.sh: $b: not an executable (is --build a wanlab build folder?)"; exit 2; }
done
# Libraries carried next to the binaries (lib/), then the machine's CUDA 13 runtime and
# cuBLAS, wherever its toolkit or a Python package put them.
libs=$build/lib
for name in libcublasLt.so.13 libcudart.so.13; do
  d=$(find /usr/local/cuda*/ /usr/lib/x86_64-linux-gnu /opt -name "$name" -print -quit 2>/dev/null | xargs -r dirname)
  [ -n "$d" ] && libs=$libs:$d
done
export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
t0=$(date +%s)
step() { echo; echo "== $(( $(date +%s) - t0 ))s: $*"; }

step "machine"
date -u
uname -r
nproc
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv || true
command -v nvcc >/dev/null && nvcc --version | tail -2
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
ldd "$probe" | grep -E 'cublas|cudart|not found'
if command -v cuobjdump >/dev/null; then
  echo "GPU code in wanlab-gpu-probe:"; cuobjdump --list-elf "$probe" | sed 's/^/  /'
  cuobjdump --list-ptx "$probe" | sed 's/^/  /'
fi
"$probe" --json > "$out/gpus.json"; rc=$?
cat "$out/gpus.json"
[ $rc -eq 0 ] || { echo "gpu_check.sh: no GPU (wanlab-gpu-probe exit $rc)"; exit 3; }

step "stage shapes of the shipped scenarios"
scenarios=(bench/scenarios/two-dc-1b.json bench/scenarios/three-dc-7b.json bench/scenarios/three-dc-7b-window.json
           bench/scenarios/paper/three-dc-7b.json bench/scenarios/paper/three-dc-70b.json)
(cd "$root" && "$wanlab" memory --json "${scenarios[@]}") > "$out/memory.json"
[ -s "$out/memory.json" ] || { echo "gpu_check.sh: wanlab memory --json gave nothing"; exit 1; }
python3 - "$out/memory.json" > "$out/shapes.txt" <<'EOF'
import json, sys
seen = {}
for s in json.load(open(sys.argv[1])):
    for st in s["stages"]:
        sh = st["shape"]
        spec = ",".join(f"{k}={int(v)}" for k, v in sh.items())
        name = f"{s['scenario'].split('scenarios/')[-1].removesuffix('.json')} stage {st['stage']}"
        if spec in seen:
            continue
        seen[spec] = name
        print(name.replace(" ", "_"), spec, st["forward_flops"], st["backward_flops"])
# The ceiling: two 70B-wide layers at TP 1 (large GEMMs), not a stage of any scenario.
print("ceiling", "layers=2,tokens=8192,hidden=8192,ffn=28672,heads=64,kv_heads=8,seq_len=8192,vocab=0,gated_mlp=1,tp=1", 0, 0)
EOF
cat "$out/shapes.txt"

step "wanlab-gpu-probe on each shape ($repeat timed runs per pass)"
echo "[" > "$out/probes.json"
first=1
while read -r name spec fwd bwd; do
  r=$("$probe" --shape "$spec" --repeat "$repeat" --warmup 3 --peak "$peak" --json) || { echo "probe failed on $name"; r=null; }
  ref=false; [ "$name" = ceiling ] && ref=true
  [ $first -eq 1 ] || echo "," >> "$out/probes.json"
  first=0
  printf '{"name": "%s", "reference": %s, "spec": "%s", "forward_flops": %s, "backward_flops": %s, "probe": %s}\n' \
    "$name" "$ref" "$spec" "$fwd" "$bwd" "$r" >> "$out/probes.json"
  echo "$name: $(echo "$r" | python3 -c 'import json,sys; p=json.load(sys.stdin); print(" ".join("%s %.3f ms %.0f TFLOP/s" % (x["pass"], x["median_ns"]/1e6, x["tflops"]) for x in p["passes"]))' 2>/dev/null)"
done < "$out/shapes.txt"
echo "]" >> "$out/probes.json"

step "fit"
python3 "$root/bench/gpu_fit.py" "$out/probes.json" --peak "$peak" --json "$out/fit.json" --md "$out/fit.md" || exit 1
mfu=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["mfu"], 4))' "$out/fit.json")
echo "fitted MFU: $mfu"

if [ $lab -eq 1 ]; then
  step "lab: $(basename "$lab_scenario") with compute cuda, then modeled at MFU $mfu"
  labs=$out/labs
  mkdir -p "$labs"
  # The shipped scenario on a lab of its own name, so it can run beside any other lab.
  python3 - "$lab_scenario" "$labs" <<'EOF'
import json, os, sys
src, dst = sys.argv[1], sys.argv[2]
s = json.load(open(src))
topo_path = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(src)), s["topology"]))
t = json.load(open(topo_path))
t["name"] = "gpuchk"
json.dump(t, open(os.path.join(dst, "topology.json"), "w"), indent=1)
s["topology"] = "topology.json"
for mode in ("cuda", "modeled"):
    s["compute"] = mode
    s["name"] = f"{s['name']}-{mode}"
    json.dump(s, open(os.path.join(dst, f"scenario-{mode}.json"), "w"), indent=1)
    s["name"] = s["name"].removesuffix(f"-{mode}")
EOF
  python3 - "$labs/scenario-modeled.json" "$mfu" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1])); s["gpu"] = {"mfu": float(sys.argv[2])}
json.dump(s, open(sys.argv[1], "w"), indent=1)
EOF
  # The lab's emulated GPUs all share this one: how a stage worker's time grows with the
  # workers computing at once (wanlab-gpu-probe --workers), the lab's first stage shape.
  spec=$(head -1 "$out/shapes.txt" | cut -d' ' -f2)
  for w in 1 2 4 8 16 32; do
    r=$("$probe" --shape "$spec" --workers $w --repeat 10 --warmup 3 --peak "$peak" --json |
        python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)))') || r=null
    echo "{\"workers\": $w, \"probe\": $r}" >> "$labs/sharing.jsonl"
    echo "$w workers at once: $(echo "$r" | python3 -c 'import json,sys; p=json.load(sys.stdin); print(" ".join("%s %.3f ms" % (x["pass"], x["median_ns"]/1e6) for x in p["passes"]))' 2>/dev/null)"
  done
  # A lab of its own for each run.
  for mode in cuda modeled; do
    if ! "$wanlab" up "$labs/topology.json" --backend userspace; then
      echo "gpu_check.sh: no lab on this machine (wanlab up failed)"
      break
    fi
    timeout 150 "$wanlab" run "$labs/scenario-$mode.json" --out "$labs/$mode" --quiet
    echo "run ($mode): exit $?"
    "$wanlab" analyze --json "$labs/$mode" > "$labs/$mode-analyze.json" 2>&1 || true
    "$wanlab" down gpuchk || true
  done
  tar -C "$out" -czf "$out/labs.tar.gz" labs && rm -rf "$labs"
fi
step "done"
ls -la "$out"
