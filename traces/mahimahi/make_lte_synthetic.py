#!/usr/bin/env python3
"""Writes lte-synthetic.mahi: a SYNTHETIC Mahimahi link trace with an LTE-like pattern.

No measured cellular trace can be downloaded here, so this one is made up, for the
importer's example only; it is not a measurement. Mahimahi's format: one line per
1500-byte delivery opportunity, the time in milliseconds; the trace loops with its last
timestamp as the period.

Pattern, 20 s long: the capacity follows a multiplicative random walk between 1 and 30
Mbit/s (re-drawn every 50 ms, biased back toward 8 Mbit/s), with two deep fades (0.3
Mbit/s for 600 ms and 1.2 s) and one 400 ms handover gap with no opportunity at all.
Opportunities are placed each millisecond from the accumulated capacity. Deterministic:
random.seed(7) and random.random() only (stable across Python 3 versions).

    python3 traces/mahimahi/make_lte_synthetic.py > traces/mahimahi/lte-synthetic.mahi
"""
import math
import random

random.seed(7)
DURATION_MS = 20_000
BITS_PER_OPPORTUNITY = 1500 * 8
fades = [(4_000, 4_600), (13_000, 14_200)]  # capacity 0.3 Mbit/s
gap = (9_000, 9_400)                           # handover: nothing

mbps = 8.0
credit = 0.0
lines = []
for ms in range(1, DURATION_MS + 1):
    if ms % 50 == 0:
        # Log-space step of up to +-25 %, pulled toward 8 Mbit/s.
        step = (random.random() - 0.5) * 0.5 + 0.05 * math.log(8.0 / mbps)
        mbps = min(30.0, max(1.0, mbps * math.exp(step)))
    rate = mbps
    if any(a <= ms < b for a, b in fades):
        rate = 0.3
    if gap[0] <= ms < gap[1]:
        rate = 0.0
        credit = 0.0
    credit += rate * 1e6 / 1000 / BITS_PER_OPPORTUNITY
    while credit >= 1.0:
        lines.append(ms)
        credit -= 1.0
if lines[-1] != DURATION_MS:
    lines.append(DURATION_MS)  # the period: Mahimahi loops at the last timestamp
print("\n".join(str(t) for t in lines))
