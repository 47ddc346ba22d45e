#!/usr/bin/env bash
# The userspace engine against its targets, on this machine, with real traffic:
#   1. TCP goodput through a 1 Gbit/s link with 25 ms one-way delay each way, against
#      kernel HTB alone at 1 Gbit/s (target >= 95%);
#   2. aggregate throughput through the engine across several links at once (>= 2 Gbit/s);
#   3. ping RTT against configured RTT + the lab's base RTT (zero-delay link) (+-0.3 ms);
#   4. loss: measured against configured over >= 10,000 packets (+-10% relative);
#   5. jitter never reorders: reordering detected by the TCP sender (0).
# Usage: bench/engine.sh [--seconds N] [--json FILE]    (root; after scripts/build.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=10
json_out=
while (($#)); do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --json) json_out=$2; shift 2 ;;
    *) echo "usage: $0 [--seconds N] [--json FILE]" >&2; exit 2 ;;
  esac
done
wanlab=${WANLAB:-build/controller/wanlab}
tmp=$(mktemp -d)
labs=()
cleanup() { for l in "${labs[@]}"; do "$wanlab" down "$l" >/dev/null 2>&1 || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

# topology NAME DELAY RATE [JITTER] [LOSS] [DCS]
topology() {
  local name=$1 delay=$2 rate=$3 jitter=${4:-0ms} loss=${5:-0%} dcs=${6:-2}
  local names=(a b c d)
  {
    printf '{"name": "%s", "dcs": [' "$name"
    for ((i = 0; i < dcs; i++)); do printf '%s{"name": "%s", "nodes": 1}' "$([[ $i -gt 0 ]] && echo ,)" "${names[$i]}"; done
    printf '], "wan": ['
    local first=1
    for ((i = 0; i < dcs; i++)); do for ((j = i + 1; j < dcs; j++)); do
      printf '%s{"between": ["%s", "%s"], "delay": "%s", "jitter": "%s", "loss": "%s", "rate": "%s"}' \
        "$([[ $first -eq 0 ]] && echo ,)" "${names[$i]}" "${names[$j]}" "$delay" "$jitter" "$loss" "$rate"
      first=0
    done; done
    printf ']}\n'
  } >"$tmp/$name.json"
  echo "$tmp/$name.json"
}
up() { # NAME FILE BACKEND
  "$wanlab" down "$1" >/dev/null 2>&1 || true
  labs+=("$1")
  "$wanlab" up "$2" --backend "$3" >/dev/null
}
down() { "$wanlab" down "$1" >/dev/null; }
addr() { # DC index -> node 0 address
  echo "198.18.$((4 * $1)).2"
}
# iperf LAB FROM_NODE TO_NODE TO_ADDR PORT STREAMS -> receiver bits/s
iperf() {
  "$wanlab" exec --lab "$1" "$3" -- iperf3 -s -1 -D -p "$5" >/dev/null
  sleep 0.3
  "$wanlab" exec --lab "$1" "$2" -- iperf3 -c "$4" -p "$5" -t "$seconds" -O 2 -P "$6" -J |
    jq -r '.end.sum_received.bits_per_second'
}

echo "engine benchmark: $(date -u +%FT%TZ), kernel $(uname -r), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

# 1. HTB alone vs the engine at 1 Gbit/s, 25 ms each way.
up wleb-htb "$(topology wleb-htb 0ms 1Gbit)" kernel
htb=$(iperf wleb-htb a-0 b-0 "$(addr 1)" 5201 4)
down wleb-htb
up wleb-one "$(topology wleb-one 25ms 1Gbit)" userspace
# Node TCP buffers cover the 6.25 MB bandwidth-delay product with 8 streams.
eng=$(iperf wleb-one a-0 b-0 "$(addr 1)" 5201 8)
down wleb-one
calc() { awk "BEGIN { printf \"%.6f\", $1 }"; }
printf '1. TCP goodput: kernel HTB 1 Gbit/s alone %.1f Mbit/s; engine 1 Gbit/s + 25 ms each way %.1f Mbit/s = %.1f%% (target >= 95%%)\n' \
  "$(calc "$htb/1e6")" "$(calc "$eng/1e6")" "$(calc "100*$eng/$htb")"

# 2. Aggregate across three links at once (a->b, b->c, c->a), each 10 Gbit/s, 1 ms.
up wleb-agg "$(topology wleb-agg 1ms 10Gbit 0ms 0% 3)" userspace
for k in 0 1 2; do
  to=$(((k + 1) % 3)); n=(a b c)
  "$wanlab" exec --lab wleb-agg "${n[$to]}-0" -- iperf3 -s -1 -D -p $((5301 + k)) >/dev/null
done
sleep 0.3
for k in 0 1 2; do
  to=$(((k + 1) % 3)); n=(a b c)
  "$wanlab" exec --lab wleb-agg "${n[$k]}-0" -- iperf3 -c "$(addr $to)" -p $((5301 + k)) -t "$seconds" -O 2 -P 2 -J \
    >"$tmp/agg$k.json" &
done
wait
agg=0
for k in 0 1 2; do agg=$(calc "$agg + $(jq -r '.end.sum_received.bits_per_second' "$tmp/agg$k.json")"); done
down wleb-agg
printf '2. aggregate through the engine over 3 links: %.2f Gbit/s (target >= 2 Gbit/s)\n' "$(calc "$agg/1e9")"

# 3. Ping accuracy: base RTT with zero delay, then 25 ms each way (configured RTT 50 ms).
ping_avg() { "$wanlab" exec --lab "$1" a-0 -- ping -q -c "$2" -i "$3" "$(addr 1)" | awk -F/ '/^rtt/ {print $5}'; }
up wleb-base "$(topology wleb-base 0ms 1Gbit)" userspace
base=$(ping_avg wleb-base 200 0.05)
down wleb-base
up wleb-rtt "$(topology wleb-rtt 25ms 1Gbit)" userspace
rtt=$(ping_avg wleb-rtt 200 0.05)
down wleb-rtt
err=$(calc "$rtt - 50 - $base")
printf '3. ping: base %.3f ms; configured 50 ms -> measured %.3f ms; error vs 50 + base: %+.3f ms (target +-0.3 ms)\n' \
  "$base" "$rtt" "$err"

# 4. Loss: 1% on a->b; 150,000 UDP datagrams (sigma of the measured rate: 2.6% relative).
up wleb-loss "$(topology wleb-loss 1ms 1Gbit 0ms 1%)" userspace
"$wanlab" exec --lab wleb-loss b-0 -- iperf3 -s -1 -D -p 5401 >/dev/null
sleep 0.3
"$wanlab" exec --lab wleb-loss a-0 -- iperf3 -u -c "$(addr 1)" -p 5401 -b 120M -l 1000 -t 10 -J >"$tmp/loss.json"
udp_lost=$(jq -r '.end.sum.lost_percent' "$tmp/loss.json")
udp_sent=$(jq -r '.end.sum.packets' "$tmp/loss.json")
engine_loss=$("$wanlab" status wleb-loss --json |
  jq '.links[] | select(.src == "a") | .counters | 100 * .dropped_loss / .packets_in')
down wleb-loss
printf '4. loss: configured 1%%; %s UDP datagrams: engine dropped %.3f%%, receiver saw %.3f%% lost (relative error %+.1f%%, target +-10%%)\n' \
  "$udp_sent" "$engine_loss" "$udp_lost" "$(calc "100*($udp_lost - 1)/1")"
lost_pct=$udp_lost

# 5. Jitter never reorders: 5 ms jitter on 20 ms, one TCP flow; out-of-order segments at the receiver.
up wleb-jit "$(topology wleb-jit 20ms 200Mbit 5ms)" userspace
# The sender's TCP counts the reordering it detects (SACK, timestamps, duplicate ACKs).
iperf wleb-jit a-0 b-0 "$(addr 1)" 5201 1 >/dev/null
ofo=$("$wanlab" exec --lab wleb-jit a-0 -- nstat -az 'TcpExt*Reorder' | awk '/Reorder/ {s += $2} END {print s + 0}')
retrans=$("$wanlab" exec --lab wleb-jit a-0 -- nstat -az TcpRetransSegs | awk '/TcpRetransSegs/ {print $2}')
down wleb-jit
printf '5. jitter 20 ms +- 5 ms, one TCP flow at 200 Mbit/s: reorderings detected by the sender %s (retransmitted segments %s, from queue overflow in slow start) (target 0 reordering)\n' \
  "$ofo" "$retrans"

if [[ -n $json_out ]]; then
  jq -n --argjson htb "$htb" --argjson eng "$eng" --argjson agg "$agg" --argjson base "$base" --argjson rtt "$rtt" \
    --argjson lost "$lost_pct" --argjson eloss "$engine_loss" --argjson ofo "${ofo:-0}" \
    '{htb_1g_bps: $htb, engine_1g_25ms_bps: $eng, ratio: ($eng / $htb), aggregate_bps: $agg,
      base_rtt_ms: $base, rtt_50ms_measured_ms: $rtt, rtt_error_ms: ($rtt - 50 - $base),
      udp_loss_pct: $lost, engine_loss_pct: $eloss, reorderings_detected: $ofo}' >"$json_out"
fi
