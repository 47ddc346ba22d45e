#!/usr/bin/env bash
# The training overhead of Opus's phase-switched OCS rails against electrical packet rails
# on the shipped rails scenario (bench/scenarios/rails/rails-13b.json, grown to each GPU
# count as `wanlab simulate --gpus` grows it), at OCS reconfiguration latencies from 10 us to
# 25 ms, with the latency where the overhead crosses 6 % and the rails' power and cost
# (docs/rails.md). Builds build/bench/rails_overhead (the simulator only) when missing.
#
#   bench/rails_overhead.sh                      # 256 and 2,048 GPUs, Markdown on stdout
#   bench/rails_overhead.sh --out rails.md       # ... and into rails.md
#   bench/rails_overhead.sh --gpus 512 --latencies 1ms,10ms
# Every other argument goes to build/bench/rails_overhead (--help lists them).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN="$ROOT/build/bench/rails_overhead"
if [ ! -x "$BIN" ]; then
  cmake --build "$ROOT/build" --target rails_overhead >&2
fi
exec "$BIN" --scenario "$ROOT/bench/scenarios/rails/rails-13b.json" --gpus 256,1024,2048 \
  --latencies 10us,100us,1ms,2ms,5ms,10ms,25ms "$@"
