#!/usr/bin/env bash
# Runs `wanlab simulate` on every shipped scenario (bench/scenarios/*.json) under each burst
# model (paced, shared, fifo, paced with --paced-stream 8ms) and on a subset of the
# paper-scale table (bench/paper_scale.py's scenarios), writing each run's folder under OUT;
# with --ref REF, compares summary.json, windows.csv, links.csv, bench.json and
# timeline.json of every run byte for byte against REF (made the same way by another
# build), leaving out the fields that hold wall-clock time or name the build: "wall_s"
# (summary.json `simulation`, bench.json's copies; bench.json's sensitivity runs:
# "default_wall_s", "extra_wall_s"), "started_at" (summary.json), "commit" (the build's git
# commit, summary.json and bench.json `wanlab`) and "created_at"
# (bench.json).
#
#   scripts/check-sim-identical.sh --wanlab OLD/wanlab --out /tmp/sim-ref          # the reference
#   scripts/check-sim-identical.sh --out /tmp/sim-new --ref /tmp/sim-ref           # build/controller/wanlab
#   ... --full   # also 7B three-DC at 16,368 GPUs under fair and atlas (paced, and streamed)
#
# Exit status: 0 when every compared file is identical, 1 when one differs or a run failed.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WANLAB="$ROOT/build/controller/wanlab"
OUT="" REF="" FULL=0
while [ $# -gt 0 ]; do
  case "$1" in
    --wanlab) WANLAB=$(realpath "$2"); shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --ref) REF="$2"; shift 2 ;;
    --full) FULL=1; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "check-sim-identical: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$OUT" ] || { echo "check-sim-identical: give --out DIR" >&2; exit 2; }
[ -x "$WANLAB" ] || { echo "check-sim-identical: no wanlab at $WANLAB" >&2; exit 2; }
OUT=$(realpath -m "$OUT")
mkdir -p "$OUT"
cd "$ROOT"
# The generated paper-scale scenarios live at one fixed place, so that the paths the
# outputs name are the same from run to run.
SCEN="$ROOT/build/sim-identical-scenarios"
mkdir -p "$SCEN"
paper() {  # MODEL TOPOLOGY DC...: bench/paper_scale.py's scenario
  local model=$1 topo=$2; shift 2
  local pp=$# placement="" dc
  for dc in "$@"; do placement="$placement${placement:+, }[\"$dc\"]"; done
  cat > "$SCEN/paper-$model-$topo.json" <<JSON
{"name": "paper-$model-$topo", "topology": "$ROOT/topologies/$topo.json", "model": "$model",
 "gpu": {"mfu": 0.4}, "parallelism": {"pp": $pp, "dp": 1, "tp": 8}, "schedule": "1f1b",
 "micro_batch_size": 1, "micro_batches": 16, "iterations": 3, "warmup": 1, "connections": 4,
 "policy": "fair", "compute": "modeled", "scale": 1, "seed": 1, "placement": [$placement]}
JSON
}
paper 7b two-dc use euw
paper 7b three-dc use usw euw
paper 70b three-dc use usw euw
paper 7b five-dc-global use usw euw apne apse

failed=0
run() {  # NAME ARGS...: one `wanlab simulate` into OUT/NAME
  local name=$1; shift
  local t0=$SECONDS
  rm -rf "${OUT:?}/$name"
  if ! "$WANLAB" simulate "$@" --out "$OUT/$name" > "$OUT/$name.log" 2>&1; then
    echo "FAILED  $name (see $OUT/$name.log)"; failed=1; return
  fi
  echo "ran     $name ($((SECONDS - t0)) s)"
}
MODELS=("paced" "shared" "fifo" "stream")
model_args() {
  case "$1" in
    stream) echo "--bursts paced --paced-stream 8ms" ;;
    *) echo "--bursts $1" ;;
  esac
}
for f in bench/scenarios/*.json; do
  s=$(basename "$f" .json)
  for m in "${MODELS[@]}"; do
    # shellcheck disable=SC2046
    run "$s-$m" "$f" $(model_args "$m")
  done
done
for s in paper-7b-two-dc paper-7b-three-dc paper-70b-three-dc paper-7b-five-dc-global; do
  stages=$(jq '.parallelism.pp' "$SCEN/$s.json")
  for m in paced stream; do
    # shellcheck disable=SC2046
    run "$s-$m" "$SCEN/$s.json" --gpus $((stages * 64 * 8)) --policies fair,atlas --connections 4 \
      --no-placement-baseline --lan-rate 3.2Tbit --timeline none $(model_args "$m")
  done
done
if [ "$FULL" = 1 ]; then
  for m in paced stream; do
    # shellcheck disable=SC2046
    run "paper-7b-three-dc-16368-$m" bench/scenarios/paper/three-dc-7b.json --gpus 16368 --policies fair,atlas \
      --no-placement-baseline --timeline none $(model_args "$m")
  done
fi

[ -n "$REF" ] || exit "$failed"
REF=$(realpath "$REF")
strip() { grep -v -E '"(wall_s|default_wall_s|extra_wall_s|started_at|created_at|commit)":' "$1" || true; }
same=0 differ=0
while IFS= read -r file; do
  rel=${file#"$OUT"/}
  if [ ! -f "$REF/$rel" ]; then echo "MISSING $rel (not in $REF)"; differ=$((differ + 1)); continue; fi
  if cmp -s <(strip "$file") <(strip "$REF/$rel"); then
    same=$((same + 1))
  else
    echo "DIFFERS $rel"; differ=$((differ + 1))
  fi
done < <(find "$OUT" -mindepth 2 \( -name summary.json -o -name windows.csv -o -name links.csv -o -name bench.json \
          -o -name timeline.json \) | sort)
while IFS= read -r file; do
  rel=${file#"$REF"/}
  [ -f "$OUT/$rel" ] || { echo "MISSING $rel (not in $OUT)"; differ=$((differ + 1)); }
done < <(find "$REF" -mindepth 2 \( -name summary.json -o -name windows.csv -o -name links.csv -o -name bench.json \
          -o -name timeline.json \) | sort)
echo "check-sim-identical: $same files identical, $differ differ or missing"
[ "$differ" = 0 ] && [ "$failed" = 0 ]
