#!/usr/bin/python3
"""The paper-scale table of bench/results/2026-11-26-paper-scale.md ("Paper scale: fair vs atlas").

For each model (7b, 70b) and shipped topology (two-dc, three-dc, five-dc-global), writes a
scenario with one pipeline stage per DC (TP 8, 1F1B, 16 micro-batches, 4 connections,
scale 1), runs `wanlab simulate --gpus stages x 64 x 8 --policies fair,atlas --lan-rate
3.2Tbit` on it and prints one markdown row per scenario.

One stage per DC where that plan fits in GPU memory by wanlab's model (`wanlab memory`,
docs/workloads.md), the model run and simulate refuse plans by: else the smallest number
of whole stages per DC that fits (without recomputation if possible, else with
`memory.recompute`), the stages in DC order. 70B on two DCs (pp 2) needs 86.7 GiB per GPU
on stage 0 without recomputation, more than an H100's 80 GiB: it runs with recomputation,
still one stage per DC (`rc` in the pp x dp x tp column, which says which plan ran).

  bench/paper_scale.py [--wanlab build/controller/wanlab] [--out DIR] [--bubbletea]

--bubbletea prints the BubbleTea table instead: the same scenarios under fair with 4
connections and a prefill load (Llama-2-7B, long prompts lognormal around 16,384 tokens,
4,096-32,768, deadline 5 s, Poisson at GPUs / 2 requests per second: about half of what
the GPUs' bubbles can take), placed by the simulator's prefill pass (sim/prefill.hpp).
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOPOLOGIES = {"two-dc": ["use", "euw"], "three-dc": ["use", "usw", "euw"],
              "five-dc-global": ["use", "usw", "euw", "apne", "apse"]}
REPLICAS = 64
LAYERS = {"7b": 32, "70b": 80}  # the presets' layers

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--wanlab", default=os.path.join(ROOT, "build", "controller", "wanlab"))
ap.add_argument("--out", default="paper-scale")
ap.add_argument("--bubbletea", action="store_true", help="the BubbleTea table (fair, with a prefill load)")
args = ap.parse_args()
os.makedirs(args.out, exist_ok=True)

if args.bubbletea:
    print("| model | topology | GPUs | fair (s/iter) | GPU util. training only (%) | with prefill (%) | requests | "
          "completed (%) | TTFT p50 / p99 (s) | preemptions | training wait per GPU per iteration (ms) | wall (s) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
else:
    print("| model | topology | GPUs | pp x dp x tp | fair (s/iter) | atlas (s/iter) | atlas speedup | "
          "GPU util. fair (%) | atlas (%) | wall (s) |")
    print("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")


def plan_scenario(model, topo, dcs, per_dc, recompute):
    """The scenario with per_dc whole stages in each DC, on a copy of the shipped topology
    with per_dc 8-GPU nodes per DC (--gpus grows them by the replicas), its WAN as shipped."""
    with open(os.path.join(ROOT, "topologies", topo + ".json")) as f:
        t = json.load(f)
    for dc in t["dcs"]:
        dc["nodes"] = max(dc["nodes"], per_dc)
    tfile = os.path.join(args.out, f"{topo}-{per_dc}-per-dc.json")
    with open(tfile, "w") as f:
        json.dump(t, f, indent=1)
    stages = [dc for dc in dcs for _ in range(per_dc)]
    name = f"paper-{model}-{topo}"
    s = {"name": name, "topology": tfile if per_dc > 1 else os.path.join(ROOT, "topologies", topo + ".json"),
         "model": model, "gpu": {"mfu": 0.4}, "parallelism": {"pp": len(stages), "dp": 1, "tp": 8},
         "schedule": "1f1b", "micro_batch_size": 1, "micro_batches": 16, "iterations": 3, "warmup": 1,
         "connections": 4, "policy": "fair", "compute": "modeled", "scale": 1, "seed": 1,
         "placement": [[dc] for dc in stages]}
    if recompute:
        s["memory"] = {"recompute": True}
    return s


def feasible_plan(model, topo, dcs):
    """The first plan that fits by `wanlab memory`: one stage per DC, then 2, 3... (at most
    16), each without recomputation, then with it. Exits where none does."""
    cands, files = [], []
    for per_dc in range(1, 17):
        if per_dc * len(dcs) > LAYERS[model]:  # every stage needs a layer
            break
        for recompute in (False, True):
            s = plan_scenario(model, topo, dcs, per_dc, recompute)
            f = os.path.join(args.out, "plans", f"{model}-{topo}-{per_dc}-{int(recompute)}.json")
            os.makedirs(os.path.dirname(f), exist_ok=True)
            with open(f, "w") as fh:
                json.dump(s, fh, indent=2)
            cands.append(s)
            files.append(f)
    r = subprocess.run([args.wanlab, "memory", "--json"] + files, capture_output=True, text=True)
    if r.returncode not in (0, 1):
        sys.exit(f"wanlab memory failed ({r.returncode}): {r.stderr.strip()}")
    for s, m in zip(cands, json.loads(r.stdout)):
        if m["fits"]:
            return s, m
    sys.exit(f"{model} on {topo}: no plan of up to 16 stages per DC fits in GPU memory (`wanlab memory`)")


for model in ["7b", "70b"]:
    for topo, dcs in TOPOLOGIES.items():
        scenario, mem = feasible_plan(model, topo, dcs)
        pp = scenario["parallelism"]["pp"]
        name = scenario["name"]
        if pp != len(dcs) or mem["recompute"]:
            print(f"<!-- {model} on {topo}: one stage per DC without recomputation does not fit in GPU memory; pp {pp} "
                  f"({mem['needed_gib']:.1f} GiB of {mem['available_gib']:.0f} on stage {mem['stage']})"
                  f"{', with recomputation' if mem['recompute'] else ''} -->", flush=True)
        gpus = pp * REPLICAS * 8
        if args.bubbletea:
            name += "-bubbletea"
            scenario["name"] = name
            scenario["prefill"] = {"model": "7b", "rate_per_s": gpus // 2, "deadline_s": 5,
                                   "prompt_tokens": {"distribution": "lognormal", "median": 16384, "sigma": 0.3,
                                                     "min": 4096, "max": 32768},
                                   "loadgen": f"{dcs[0]}-0", "decode": [f"{dc}-1" for dc in dcs]}
        file = os.path.join(args.out, name + ".json")
        with open(file, "w") as f:
            json.dump(scenario, f, indent=2)
        out = os.path.join(args.out, name)
        policies = "fair" if args.bubbletea else "fair,atlas"
        t0 = time.monotonic()
        rc = subprocess.run([args.wanlab, "simulate", file, "--gpus", str(gpus), "--policies", policies,
                             "--connections", "4", "--no-placement-baseline", "--lan-rate", "3.2Tbit",
                             "--timeline", "none", "--out", out], stdout=subprocess.DEVNULL).returncode
        if rc != 0:
            sys.exit(f"wanlab simulate {file} failed ({rc})")
        with open(os.path.join(out, "bench.json")) as f:
            bench = json.load(f)
        s = {v["name"]: v["summary"] for v in bench["variants"]}
        if args.bubbletea:
            fair = s["fair-k4"]
            p = fair["prefill"]
            training = 1 - fair["bubble_fraction"]
            print(f"| {model} | {topo} ({len(dcs)} DCs) | {gpus} | {fair['iteration_time_s']['mean']:.2f} | "
                  f"{100 * training:.1f} | {100 * fair['gpu_utilization']['mean']:.1f} | {p['requests']} | "
                  f"{100 * p['completed'] / max(p['requests'], 1):.1f} | {p['ttft_s']['p50']:.2f} / {p['ttft_s']['p99']:.2f} | "
                  f"{p['preemptions']} | {1000 * p['training_wait_s_per_iteration']['mean']:.1f} | "
                  f"{time.monotonic() - t0:.0f} |", flush=True)
            continue
        fair, atlas = s["fair-k4"], s["atlas-k4"]
        tf, ta = fair["iteration_time_s"]["mean"], atlas["iteration_time_s"]["mean"]
        wall = max(v["summary"]["simulation"]["wall_s"] for v in bench["variants"])
        print(f"| {model} | {topo} ({len(dcs)} DCs) | {gpus} | {pp} x {REPLICAS} x 8{' rc' if mem['recompute'] else ''} | {tf:.2f} | {ta:.2f} | {tf / ta:.2f}x | "
              f"{100 * fair['gpu_utilization']['mean']:.1f} | {100 * atlas['gpu_utilization']['mean']:.1f} | {wall:.2f} |")
