#!/usr/bin/env python3
"""Fit the modeled compute's MFU to wanlab-gpu-probe measurements and compare.

Reads the probe results that bench/gpu_check.sh collects (a JSON array: one object per
stage shape, {"name", "scenario", "stage", "shape", "forward_flops", "backward_flops",
"probe": <wanlab-gpu-probe --json output>}), and prints, per shape and pass, the measured
time, the achieved TFLOP/s and MFU, and the modeled time at the fitted MFU with its error.

The fitted MFU is the one value that minimises the largest relative error of the modeled
stage time (flops / (peak x MFU)) against the measured one over every shape and pass: the
midpoint of the smallest and largest measured MFU. The largest error is then
(max - min) / (max + min).

Usage: gpu_fit.py PROBES.json [--peak 989e12] [--json FIT.json] [--md FIT.md]
"""
import argparse
import json
import sys


def rows_of(probes, peak):
    rows = []
    for p in probes:
        if p.get("reference"):
            continue  # a ceiling to compare with, not a stage
        probe = p.get("probe") or {}
        for r in probe.get("passes", []):
            t = r["median_ns"] / 1e9
            rows.append({
                "name": p["name"],
                "scenario": p.get("scenario", ""),
                "stage": p.get("stage"),
                "pass": r["pass"],
                "gemms": r["gemms"],
                "flops": r["flops"],
                "median_s": t,
                "min_s": r["min_ns"] / 1e9,
                "max_s": r["max_ns"] / 1e9,
                "tflops": r["flops"] / t / 1e12,
                "mfu": r["flops"] / t / peak,
            })
    return rows


def fit(rows, peak):
    lo = min(r["mfu"] for r in rows)
    hi = max(r["mfu"] for r in rows)
    mfu = (lo + hi) / 2
    # The same, weighted by time (what a whole iteration's compute would see).
    total_flops = sum(r["flops"] for r in rows)
    total_time = sum(r["median_s"] for r in rows)
    for r in rows:
        r["modeled_s"] = r["flops"] / (peak * mfu)
        r["error"] = r["modeled_s"] / r["median_s"] - 1
    return {
        "peak_flops_per_s": peak,
        "mfu": mfu,
        "mfu_min": lo,
        "mfu_max": hi,
        "mfu_time_weighted": total_flops / total_time / peak,
        "max_abs_error": max(abs(r["error"]) for r in rows),
        "shapes": len({r["name"] for r in rows}),
        "rows": rows,
    }


def markdown(f, gpu):
    out = []
    out.append(f"GPU: {gpu}. Peak {f['peak_flops_per_s'] / 1e12:.0f} TFLOP/s (dense bf16).")
    out.append("")
    out.append(f"Fitted MFU {f['mfu']:.3f} (measured {f['mfu_min']:.3f} to {f['mfu_max']:.3f}; "
               f"time-weighted {f['mfu_time_weighted']:.3f}); largest error of the modeled stage time "
               f"{f['max_abs_error'] * 100:.1f} %.")
    out.append("")
    out.append("| shape | pass | GEMMs | GFLOP | measured ms (min-max) | TFLOP/s | MFU | modeled ms | error |")
    out.append("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in f["rows"]:
        out.append(f"| {r['name']} | {r['pass']} | {r['gemms']} | {r['flops'] / 1e9:.1f} | "
                   f"{r['median_s'] * 1e3:.3f} ({r['min_s'] * 1e3:.3f}-{r['max_s'] * 1e3:.3f}) | "
                   f"{r['tflops']:.1f} | {r['mfu'] * 100:.1f} % | {r['modeled_s'] * 1e3:.3f} | "
                   f"{r['error'] * 100:+.1f} % |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("probes")
    ap.add_argument("--peak", type=float, default=989e12)
    ap.add_argument("--json", dest="json_out")
    ap.add_argument("--md")
    a = ap.parse_args()
    try:
        with open(a.probes, encoding="utf-8") as fh:
            probes = json.load(fh)
    except (OSError, ValueError) as e:
        sys.exit(f"gpu_fit.py: {a.probes}: {e}")
    rows = rows_of(probes, a.peak)
    if not rows:
        sys.exit(f"gpu_fit.py: {a.probes}: no probe measurements in it")
    f = fit(rows, a.peak)
    gpu = next((p["probe"]["gpu"]["name"] for p in probes if p.get("probe")), "?")
    f["gpu"] = gpu
    text = markdown(f, gpu)
    sys.stdout.write(text)
    if a.json_out:
        with open(a.json_out, "w", encoding="utf-8") as fh:
            json.dump(f, fh, indent=1)
    if a.md:
        with open(a.md, "w", encoding="utf-8") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
