#!/usr/bin/python3
"""The headline table: where Atlas and BubbleTea pay off against the baselines, and where not.

For 7B, 70B and 405B across 2, 3 and 5 DCs (the shipped two-dc, three-dc and
five-dc-global topologies: measured WAN, and their provisioned twins at 100 Gbit/s,
400 Gbit/s and 1.6 Tbit/s per DC pair), writes one scenario per row (one plan that fits
in GPU memory, below), simulates it with `wanlab simulate` and prints one markdown row:
iteration time and GPU utilization of each baseline (stock, stock-flat, varuna, fair-k4:
docs/baselines.md), of Atlas and of Atlas with BubbleTea (a prefill load in the bubbles,
its waits fed back into training), Atlas's speedup over each baseline, and a mark where a
speedup reaches 17x or a utilization 94 % (the paper's figures).

  bench/paper.py [--wanlab build/controller/wanlab] [--out DIR] [--results FILE.md]
                 [--topologies three-dc] [--models 7b,70b] [--wans measured,100g] [--jobs 2]

Conditions of every row: TP 8, 60 DP replicas, 16 micro-batches of 1 sequence per replica
per iteration, 1F1B for Atlas and fair, GPipe with recomputation for Varuna, H100 80 GB
(the topologies' GPU), MFU 0.4, full-size bytes, --lan-rate 3.2Tbit (8 x 400 Gbit/s NICs
per node), 3 iterations of which 1 warm-up, seed 1. pp is the smallest multiple of the DC
count (one or more whole stages per DC) at which the plan fits in memory (memory_need()).
"""
import argparse
import datetime
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOPOLOGIES = {"two-dc": ["use", "euw"], "three-dc": ["use", "usw", "euw"],
              "five-dc-global": ["use", "usw", "euw", "apne", "apse"]}
WANS = {"measured": "", "100g": "-100g", "400g": "-400g", "1600g": "-1600g"}
WAN_WORDS = {"measured": "measured (3.0-4.35 Gbit/s)", "100g": "100 Gbit/s", "400g": "400 Gbit/s",
             "1600g": "1.6 Tbit/s"}
# Llama 2 7B and Llama 3 70B are wanlab's presets; Llama 3.1 405B (Meta's model card) given in full.
MODELS = {
    "7b": {"preset": "7b"},
    "70b": {"preset": "70b"},
    "405b": {"layers": 126, "hidden": 16384, "heads": 128, "kv_heads": 8, "ffn_hidden": 53248, "gated_mlp": True,
             "seq_len": 8192, "vocab": 128256},
}
SHAPES = {  # the presets' shapes, for the memory model
    "7b": {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 32, "ffn_hidden": 11008, "seq_len": 4096,
           "vocab": 32000},
    "70b": {"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn_hidden": 28672, "seq_len": 8192,
            "vocab": 128256},
    "405b": MODELS["405b"],
}
REPLICAS, TP, MICRO_BATCHES, MBS = 60, 8, 16, 1  # 60: a multiple of 2, 3 and 5 DCs (stock deals replicas evenly)
args_reuse = False  # --reuse
args_bubbletea = ["7b", "70b", "405b"]  # --bubbletea-models
args_bubbletea_gpus = 1 << 30  # --bubbletea-max-gpus
args_bt_budget = 2e7  # --bubbletea-budget
args_bt_iterations = 3  # --bubbletea-iterations
args_bt_gpus = 256  # --bubbletea-gpus
BASELINES = ["stock", "stock-flat", "varuna", "fair-k4"]
MARK_SPEEDUP, MARK_UTIL = 17.0, 0.94


def wanlab_memory(wanlab, files, baseline=None):
    """`wanlab memory --json` on scenario files: the shared memory model's figures (per GPU,
    the fullest stage against its GPUs' memory; workload/memory.hpp, docs/workloads.md), one
    dict per file. Exit status 1 only says that some plan does not fit."""
    cmd = [wanlab, "memory", "--json"] + (["--baseline", baseline] if baseline else []) + list(files)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout)


def topology_for(topo, wan, pp, folder, wan_factor=1.0):
    """The shipped topology with pp / DCs 8-GPU nodes in each DC (one node per stage there;
    --gpus then grows the node counts by the replicas), its WAN as shipped, or every WAN rate
    x wan_factor (the coarse BubbleTea model, below). Returns the file written."""
    with open(os.path.join(ROOT, "topologies", topo + WANS[wan] + ".json")) as f:
        t = json.load(f)
    for dc in t["dcs"]:
        dc["nodes"] = pp // len(TOPOLOGIES[topo])
    if wan_factor != 1.0:
        for link in t["wan"]:
            rate = link["rate"]
            if not rate.endswith("Gbit"):
                raise RuntimeError(f"topologies/{topo}{WANS[wan]}.json: rate {rate}: expected Gbit")
            link["rate"] = f"{float(rate[:-4]) * wan_factor:.6g}Gbit"
    os.makedirs(folder, exist_ok=True)
    file = os.path.join(folder, f"topology-pp{pp}" + ("" if wan_factor == 1.0 else
                                                      f"-wan{round(wan_factor * 1e4)}e-4") + ".json")
    with open(file, "w") as f:
        json.dump(t, f, indent=1)
    return file


_plans = {}


def choose_plan(model, topo, folder, wanlab):
    """The smallest pp, a multiple of the DC count (up to 16 stages per DC), whose 1F1B plan
    fits by wanlab's memory model (`wanlab memory`): without recomputation if it fits so,
    else with it. Returns (pp, recompute, the memory figures) or None when nothing fits.
    Memory does not depend on the WAN: one query per model and topology."""
    key = (model, topo)
    if key in _plans:
        return _plans[key]
    dcs = TOPOLOGIES[topo]
    layers = SHAPES[model]["layers"]
    cands, files = [], []
    for per_dc in range(1, 17):
        pp = per_dc * len(dcs)
        if pp > layers:
            break
        tf = topology_for(topo, "measured", pp, os.path.join(folder, "plans"))
        stages = [dc for dc in dcs for _ in range(per_dc)]
        for recompute in (False, True):
            sc = scenario(model, tf, stages, recompute, False)
            sc["name"] = f"plan-pp{pp}" + ("-rc" if recompute else "")
            f = os.path.join(folder, "plans", sc["name"] + ".json")
            with open(f, "w") as fh:
                json.dump(sc, fh, indent=1)
            cands.append((pp, recompute))
            files.append(f)
    plan = None
    for (pp, recompute), m in zip(cands, wanlab_memory(wanlab, files)):
        if m["fits"]:
            plan = (pp, recompute, m)
            break
    _plans[key] = plan
    return plan


def scenario(model, topo_file, stages, recompute, prefill, replicas=None, iterations=3):
    replicas = replicas or REPLICAS
    s = {"name": os.path.basename(topo_file)[:-5] + "-" + model + ("-bubbletea" if prefill else ""),
         "topology": topo_file, "model": MODELS[model], "gpu": {"mfu": 0.4},
         "parallelism": {"pp": len(stages), "dp": 1, "tp": TP}, "schedule": "1f1b",
         "micro_batch_size": MBS, "micro_batches": MICRO_BATCHES, "iterations": iterations, "warmup": 1,
         "connections": 4, "policy": "fair", "compute": "modeled", "scale": 1, "seed": 1,
         "memory": {"recompute": recompute}, "placement": [[dc] for dc in stages]}
    if prefill:
        dcs = list(dict.fromkeys(stages))
        gpus = len(stages) * replicas * TP
        # Llama-2-7B prefills of long prompts (lognormal around 16,384 tokens), deadline 5 s,
        # Poisson at GPUs / 2 requests per second (bench/paper_scale.py --bubbletea's load).
        s["prefill"] = {"model": "7b", "rate_per_s": gpus // 2, "deadline_s": 5,
                        "prompt_tokens": {"distribution": "lognormal", "median": 16384, "sigma": 0.3,
                                          "min": 4096, "max": 32768},
                        "loadgen": f"{dcs[0]}-0", "decode": [f"{dc}-1" for dc in dcs]}
    return s


def simulate(wanlab, folder, scen, args, replicas=None):
    """One `wanlab simulate` process for every variant of `scen` (the policies and baselines
    in `args`), grown to pp x replicas x tp GPUs; returns {variant: summary}."""
    replicas = replicas or REPLICAS
    os.makedirs(folder, exist_ok=True)
    file = os.path.join(folder, scen["name"] + ".json")
    out = os.path.join(folder, scen["name"])
    text = json.dumps(scen, indent=2)
    gpus = scen["parallelism"]["pp"] * replicas * TP
    cmd = [wanlab, "simulate", file, "--gpus", str(gpus), "--connections", "4", "--no-placement-baseline",
           "--feedback-rounds", "2", "--lan-rate", "3.2Tbit", "--timeline", "none", "--out", out] + args
    # --reuse: a folder whose scenario file and command are this one's and that has its results is read back.
    stamp = os.path.join(out, "paper-command.json")
    same = os.path.exists(file) and open(file).read() == text and os.path.exists(os.path.join(out, "bench.json")) \
        and os.path.exists(stamp) and json.load(open(stamp))[1:] == cmd[1:]
    with open(file, "w") as f:
        f.write(text)
    t0 = time.monotonic()
    if not (args_reuse and same):
        shutil.rmtree(out, ignore_errors=True)
        cpu_s = 0.0
        with tempfile.TemporaryFile(mode="w+") as err:
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True)
            _, status, usage = os.wait4(p.pid, 0)  # this process's CPU time, whatever the threads around
            p.returncode = os.waitstatus_to_exitcode(status)
            cpu_s = usage.ru_utime + usage.ru_stime
            if p.returncode != 0:
                err.seek(0)
                raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {err.read().strip()}")
        with open(stamp, "w") as f:
            json.dump(cmd, f)
    else:
        cpu_s = 0.0
    PROFILE.append({"scenario": scen["name"], "folder": os.path.basename(folder), "args": " ".join(args),
                    "gpus": gpus, "wall_s": time.monotonic() - t0, "cpu_s": cpu_s,
                    "reused": bool(args_reuse and same)})
    with open(os.path.join(out, "bench.json")) as f:
        bench = json.load(f)
    runs = {}
    for v in bench["variants"]:
        runs[v["name"]] = v["summary"]
        sc = os.path.join(out, v["name"], "scenario.json")
        if os.path.exists(sc):
            runs[v["name"]]["_scenario_file"] = sc
    for sk in bench.get("skipped", []):
        runs[sk["name"]] = {"_skipped": sk["reason"]}
    return runs


PROFILE = []  # one entry per `wanlab simulate` process: what ran, how long


def row(task):
    model, topo, wan, out, wanlab = task
    dcs = TOPOLOGIES[topo]
    t0 = time.monotonic()
    plan = _plans[(model, topo)]
    base = {"model": model, "topology": topo + WANS[wan], "dcs": len(dcs), "wan": wan}
    if plan is None:
        return dict(base, infeasible=True)
    pp, recompute, mem = plan
    stages = [dc for dc in dcs for _ in range(pp // len(dcs))]
    folder = os.path.join(out, f"{model}-{topo}{WANS[wan]}")
    topo_file = topology_for(topo, wan, pp, folder)
    train = simulate(wanlab, folder, scenario(model, topo_file, stages, recompute, False),
                     ["--policies", "fair,atlas", "--baselines", "all"])
    res = dict(base, pp=pp, recompute=recompute, gpus=pp * REPLICAS * TP, memory_gib=mem["needed_gib"],
               memory_stage=mem["stage"], memory_available_gib=mem["available_gib"], systems={})

    def entry(summary):
        if "_skipped" in summary:
            return {"skipped": summary["_skipped"]}
        e = {"iteration_s": summary["iteration_time_s"]["mean"], "gpu_util": summary["gpu_utilization"]["mean"]}
        return e

    for name in BASELINES + ["atlas-k4"]:
        res["systems"][name] = entry(train.get(name, {"_skipped": "not run"}))
    # Varuna's own plan (GPipe, its micro-batches, recomputation) by the shared memory model:
    # `wanlab memory --baseline varuna` on the scenario as simulated (grown to the replicas).
    v = res["systems"]["varuna"]
    src = train.get("fair-k4", {}).get("_scenario_file")
    if src:
        vm = wanlab_memory(wanlab, [src], baseline="varuna")[0]
        v.update(memory_gib=vm["needed_gib"], micro_batches=vm["micro_batches"],
                 micro_batch_size=vm["micro_batch_size"], fits=vm["fits"])
        if not vm["fits"]:  # not a plan a GPU could hold: left out of the speedups
            res["systems"]["varuna"] = {"skipped": f"does not fit: {vm['needed_gib']:.1f} GiB per GPU of "
                                                   f"{vm['available_gib']:.0f}", **{k: v[k] for k in
                                                   ("memory_gib", "micro_batches", "micro_batch_size")}}
    if model not in args_bubbletea or pp * REPLICAS * TP > args_bubbletea_gpus:
        res["systems"]["atlas+bubbletea"] = {"skipped": "not run (--bubbletea-models, --bubbletea-max-gpus)"}
        res["wall_s"] = time.monotonic() - t0
        return res
    # Atlas with BubbleTea. Its prefill pass costs about requests x GPUs (each request is
    # offered to every GPU), and requests grow with GPUs x run length: 124,000 requests on
    # 960 GPUs for 7B across 2 measured DCs, ten million on 7,200 for 405B across 5. The
    # coarse model runs it on r of the 60 replicas with every WAN rate x r / 60, so each
    # pipeline keeps its share of the WAN and each GPU the same load (GPUs / 2 requests per
    # s), r the largest with r^2 x (requests per replica) x (GPUs per replica) within
    # --bubbletea-budget and r x pp x tp within --bubbletea-gpus (r = 60: the full model). Atlas's training-only time on the coarse
    # model is simulated beside it (`coarse_atlas_s`): BubbleTea's slowdown is measured there
    # and applied to the full model's Atlas, and the two Atlas times are the row's
    # sensitivity figure.
    atlas_s = res["systems"]["atlas-k4"]["iteration_s"]
    per_replica = (pp * TP // 2) * args_bt_iterations * atlas_s
    r = max(1, min(REPLICAS, args_bt_gpus // (pp * TP), int(math.sqrt(args_bt_budget / max(per_replica * pp * TP, 1)))))
    factor = r / REPLICAS
    ctopo = topology_for(topo, wan, pp, folder, factor) if r < REPLICAS else topo_file
    bt_sc = scenario(model, ctopo, stages, recompute, True, replicas=r, iterations=args_bt_iterations)
    bt = simulate(wanlab, folder, bt_sc, ["--policies", "atlas"], replicas=r)
    a = bt["atlas-k4"]
    e = entry(a)
    p = a.get("prefill", {})
    wait = p.get("training_wait_s_per_iteration", {})
    e["prefill_completed"] = p.get("completed", 0) / max(p.get("requests", 1), 1)
    e["prefill_requests"] = p.get("requests", 0)
    e["fed_back"] = wait.get("fed_back", False)
    e["feedback"] = wait.get("feedback", {})
    e["replicas"] = r
    e["iterations"] = args_bt_iterations
    if r < REPLICAS or args_bt_iterations != 3:
        ct = simulate(wanlab, folder, dict(scenario(model, ctopo, stages, recompute, False, replicas=r,
                                                    iterations=args_bt_iterations),
                                           name=bt_sc["name"].replace("-bubbletea", "-coarse")),
                      ["--policies", "atlas"], replicas=r)["atlas-k4"]
        e["coarse_atlas_s"] = ct["iteration_time_s"]["mean"]
        e["coarse_atlas_util"] = ct["gpu_utilization"]["mean"]
    else:
        e["coarse_atlas_s"], e["coarse_atlas_util"] = res["systems"]["atlas-k4"]["iteration_s"], \
            res["systems"]["atlas-k4"]["gpu_util"]
    # BubbleTea's slowdown on the model it ran on, applied to the full model's Atlas.
    e["slowdown"] = e["iteration_s"] / e["coarse_atlas_s"]
    e["coarse_iteration_s"] = e["iteration_s"]
    e["iteration_s"] = res["systems"]["atlas-k4"]["iteration_s"] * e["slowdown"]
    res["systems"]["atlas+bubbletea"] = e
    res["wall_s"] = time.monotonic() - t0
    return res


def fmt_sys(e):
    if "skipped" in e and "memory_gib" in e:
        return f"no fit ({e['memory_gib']:.0f} GiB)", "-"
    if "skipped" in e:
        return "n/a", "n/a"
    return f"{e['iteration_s']:.2f}", f"{100 * e['gpu_util']:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wanlab", default=os.path.join(ROOT, "build", "controller", "wanlab"))
    ap.add_argument("--out", default="paper-headline", help="scenarios and simulation folders")
    ap.add_argument("--results", help="results file (default: bench/results/DATE-headline.md)")
    ap.add_argument("--models", default="7b,70b,405b")
    ap.add_argument("--topologies", default="two-dc,three-dc,five-dc-global")
    ap.add_argument("--wans", default="measured,100g,400g,1600g")
    ap.add_argument("--jobs", type=int, default=2, help="simulations at once")
    ap.add_argument("--reuse", action="store_true",
                    help="read back the results of rows whose scenario in --out is unchanged instead of simulating")
    ap.add_argument("--bubbletea-models", default="7b,70b,405b",
                    help="models whose rows also simulate Atlas with BubbleTea (its prefill pass takes most of the "
                         "time: requests grow with GPUs x run length)")
    ap.add_argument("--bubbletea-max-gpus", type=int, default=1 << 30,
                    help="simulate Atlas with BubbleTea only in rows with at most this many GPUs")
    ap.add_argument("--bubbletea-budget", type=float, default=2e7,
                    help="the coarse BubbleTea model's bound on prefill requests x GPUs per row (default 2e7; "
                         "1e12: the full model, 60 replicas, on every row)")
    ap.add_argument("--bubbletea-iterations", type=int, default=3, help="iterations of the BubbleTea runs (1 warm-up)")
    ap.add_argument("--bubbletea-gpus", type=int, default=256,
                    help="the coarse BubbleTea model's most GPUs per row (default 256: r <= 256 / (pp x 8); 960+ for "
                         "the full model)")
    args = ap.parse_args()
    global args_reuse, args_bubbletea, args_bubbletea_gpus, args_bt_budget, args_bt_iterations, args_bt_gpus
    args_reuse = args.reuse
    args_bt_gpus = args.bubbletea_gpus
    args_bt_budget = args.bubbletea_budget
    args_bt_iterations = args.bubbletea_iterations
    args_bubbletea_gpus = args.bubbletea_max_gpus
    args_bubbletea = args.bubbletea_models.split(",")
    if not os.access(args.wanlab, os.X_OK):
        sys.exit(f"paper.py: --wanlab {args.wanlab}: not an executable (build it: cmake --build build --target wanlab)")
    for name, known in (("models", MODELS), ("topologies", TOPOLOGIES), ("wans", WANS)):
        for item in getattr(args, name).split(","):
            if item not in known:
                sys.exit(f"paper.py: --{name}: unknown \"{item}\"; known: {', '.join(known)}")
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    tasks = [(m, t, w, out, args.wanlab) for m in args.models.split(",") for t in args.topologies.split(",")
             for w in args.wans.split(",")]
    t0 = time.monotonic()
    cpu0 = os.times()
    # Each model and topology's plan by the shared memory model, once (memory does not
    # depend on the WAN): one `wanlab memory` process per pair.
    for m in args.models.split(","):
        for t in args.topologies.split(","):
            if choose_plan(m, t, os.path.join(out, f"{m}-{t}"), args.wanlab) is None:
                print(f"paper.py: {m} on {t}: no plan of up to 16 stages per DC fits by `wanlab memory`",
                      file=sys.stderr)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = []
        for r in pool.map(row, tasks):
            rows.append(r)
            print(f"[{len(rows)}/{len(tasks)}] {r['model']} {r['topology']}: {time.monotonic() - t0:.0f} s",
                  file=sys.stderr, flush=True)
    wall = time.monotonic() - t0
    cpu1 = os.times()
    cpu = (cpu1.children_user - cpu0.children_user) + (cpu1.children_system - cpu0.children_system)
    load = os.getloadavg()
    date = datetime.date.today().isoformat()
    results = args.results or os.path.join(ROOT, "bench", "results", f"{date}-headline.md")
    run = {"wall_s": wall, "cpu_s": cpu, "loadavg_at_end": load, "cpus": os.cpu_count(), "jobs": args.jobs,
           "simulations": PROFILE}
    with open(os.path.splitext(results)[0] + ".json", "w") as f:
        json.dump({"date": date, "wall_s": wall, "run": run, "rows": rows}, f, indent=1)
    md = report(rows, run, date, " ".join(sys.argv[1:]))
    with open(results, "w") as f:
        f.write(md)
    plot(rows, os.path.splitext(results)[0] + ".svg")
    print(md)
    print(f"results: {results}, {os.path.splitext(results)[0]}.json, .svg; {wall:.0f} s")


def profile_lines(run):
    """Where the run's time went: CPU seconds of each kind of `wanlab simulate` process."""
    kinds = {}
    for p in run["simulations"]:
        kind = "BubbleTea (atlas + fair, prefill, 2 feedback rounds)" if p["scenario"].endswith("-bubbletea") else \
            "coarse model, training only (atlas + fair)" if p["scenario"].endswith("-coarse") else \
            "training (fair, atlas, stock, stock-flat, varuna)"
        k = kinds.setdefault(kind, {"n": 0, "cpu": 0.0, "wall": 0.0, "top": (0.0, ""), "reused": 0})
        k["n"] += 1
        k["reused"] += 1 if p["reused"] else 0
        k["cpu"] += p["cpu_s"]
        k["wall"] += p["wall_s"]
        k["top"] = max(k["top"], (p["cpu_s"], f"{p['folder']} ({p['gpus']} GPUs)"))
    lines = ["| simulate processes | count | read back (--reuse) | CPU s | wall s (summed over the jobs) | most CPU |",
             "| --- | ---: | ---: | ---: | ---: | --- |"]
    for kind, k in sorted(kinds.items(), key=lambda kv: -kv[1]["cpu"]):
        top = f"{k['top'][1]}: {k['top'][0]:.1f} s" if k["top"][0] > 0 else "-"
        lines.append(f"| {kind} | {k['n']} | {k['reused']} | {k['cpu']:.1f} | {k['wall']:.0f} | {top} |")
    if any(k["reused"] for k in kinds.values()):
        lines += ["", "Simulations read back cost nothing here: their CPU time is that of the run that made them."]
    return lines


def report(rows, run, date, argv):
    wall = run["wall_s"]
    reused = sum(1 for p in run["simulations"] if p["reused"])
    lines = [f"# Headline table ({date})", "",
             f"`/usr/bin/python3 bench/paper.py {argv}`".replace(" `", "`"),
             f"({len(rows)} rows, {wall:.0f} s wall, {run['cpu_s']:.0f} s CPU of the simulator processes, "
             f"--jobs {run['jobs']} on this {run['cpus']}-CPU machine, load average "
             f"{run['loadavg_at_end'][0]:.1f} / {run['loadavg_at_end'][1]:.1f} / {run['loadavg_at_end'][2]:.1f} "
             "(1 / 5 / 15 min) at the end" + (f"; {reused} simulations read back with --reuse" if reused else "") +
             ").", "",
             "Conditions of every row: TP 8, 60 DP replicas, 16 micro-batches of 1 sequence per replica per "
             "iteration, H100 80 GiB, MFU 0.4, full-size bytes, `--lan-rate 3.2Tbit`, 3 iterations (1 warm-up), "
             "seed 1. pp is the smallest multiple of the DC count whose 1F1B plan fits by wanlab's memory model "
             "(`wanlab memory`, docs/workloads.md: per GPU of the fullest stage, bf16 weights and gradients, "
             "mixed-precision Adam's 12 B per parameter, the activations of the micro-batches in flight with "
             "sequence parallelism, against 80 GiB); `rc` = recomputation (`memory.recompute`) because nothing "
             "fits without it. GiB/GPU is that stage's need. Baselines (docs/baselines.md): "
             "**stock** = DP across DCs, hierarchical all-reduce, 1 TCP connection per peer, fair; **flat** = the "
             "same with one flat ring; **varuna** = PP across DCs, GPipe with recomputation, micro-batches chosen "
             "for the network, 1 connection, fair (its own plan checked by `wanlab memory --baseline varuna`: "
             "\"no fit\" where it needs more than 80 GiB, left out of the speedups); **fair-k4** = PP across DCs "
             "(Atlas's placement), 1F1B, 4 connections, fair sharing. **atlas** = Atlas's placement and temporal "
             "sharing, 4 connections; **+BT** = Atlas with BubbleTea's prefill load (Llama-2-7B prompts around "
             "16k tokens at GPUs / 2 per s, deadline 5 s), its GPU utilization counting prefill, its iteration "
             "time = atlas's x the slowdown prefill's waits cause when fed back once (`--feedback-rounds 2`; "
             "sim/prefill.hpp), both on the coarse model below. Speedup = baseline s/iter over Atlas's. "
             f"**Bold** marks a speedup >= {MARK_SPEEDUP:g}x or a utilization >= {100 * MARK_UTIL:g} %.", "",
             "**The coarse BubbleTea model.** The prefill pass offers each request to every GPU, so its cost "
             "grows with requests x GPUs, and requests with GPUs x run length (ten million requests on 7,200 "
             "GPUs for 405B across 5 measured DCs). Each row's +BT runs on r of the 60 replicas with every WAN "
             "rate x r / 60 (each pipeline keeps its share of the WAN, each GPU its load), r the largest with "
             "requests x GPUs within `--bubbletea-budget` (2e7) and at most `--bubbletea-gpus` (256) GPUs "
             "(r = 60 is the full model). The last table "
             "gives r and Atlas's training-only time on the coarse model against the full one: the model's "
             "error on the row.", "",
             "| model | DCs | WAN | pp x dp x tp (GPUs) | GiB/GPU | stock s (util %) | flat s (util %) | "
             "varuna s (util %) | fair-k4 s (util %) | atlas s (util %) | +BT s (util %) | atlas speedup vs "
             "stock / flat / varuna / fair-k4 | marked |",
             "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    marked = []
    for r in rows:
        if r.get("infeasible"):
            lines.append(f"| {r['model']} | {r['dcs']} | {WAN_WORDS[r['wan']]} | no plan fits | | | | | | | | | |")
            continue
        sy = r["systems"]
        cells = []
        for name in BASELINES + ["atlas-k4", "atlas+bubbletea"]:
            t, u = fmt_sys(sy[name])
            bold = "skipped" not in sy[name] and sy[name]["gpu_util"] >= MARK_UTIL
            cells.append(f"{'**' if bold else ''}{t} ({u}){'**' if bold else ''}")
        a = sy["atlas-k4"]["iteration_s"]
        sp, hit = [], []
        for name in BASELINES:
            if "skipped" in sy[name]:
                sp.append("n/a")
                continue
            x = sy[name]["iteration_s"] / a
            sp.append(f"**{x:.2f}x**" if x >= MARK_SPEEDUP else f"{x:.2f}x")
            if x >= MARK_SPEEDUP:
                hit.append(f"{x:.1f}x vs {name}")
        for name in ["atlas-k4", "atlas+bubbletea"] + BASELINES:
            if "skipped" not in sy[name] and sy[name]["gpu_util"] >= MARK_UTIL:
                hit.append(f"{name} {100 * sy[name]['gpu_util']:.1f} %")
        if hit:
            marked.append((r, hit))
        lines.append(f"| {r['model']} | {r['dcs']} | {WAN_WORDS[r['wan']]} | {r['pp']} x {REPLICAS} x {TP} "
                     f"({r['gpus']}){' rc' if r['recompute'] else ''} | {r['memory_gib']:.1f} | " + " | ".join(cells) +
                     f" | {' / '.join(sp)} | {'yes' if hit else ''} |")
    lines += ["", "## Where the paper's figures are reached", ""]
    if marked:
        for r, hit in marked:
            lines.append(f"- {r['model']}, {r['dcs']} DCs, {WAN_WORDS[r['wan']]} WAN ({r['topology']}): "
                         + "; ".join(hit))
    else:
        lines.append("- nowhere in this table.")
    lines += ["", "## Each row's Varuna plan and BubbleTea figures", "",
              "| model | topology | varuna: micro-batches x size (GiB/GPU) | +BT replicas r of 60 | atlas s/iter "
              "coarse / full | atlas util % coarse / full | +BT slowdown | prefill requests | completed (%) | "
              "fed-back wait (ms/iter per TP group) |",
              "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if r.get("infeasible"):
            continue
        v, b, a = r["systems"]["varuna"], r["systems"]["atlas+bubbletea"], r["systems"]["atlas-k4"]
        vp = f"{v['micro_batches']} x {v['micro_batch_size']} ({v['memory_gib']:.1f})" if "memory_gib" in v else "n/a"
        if "skipped" in b:
            lines.append(f"| {r['model']} | {r['topology']} | {vp} | not run | | | | | | |")
            continue
        fb = b.get("feedback", {})
        lines.append(f"| {r['model']} | {r['topology']} | {vp} | {b['replicas']} | "
                     f"{b['coarse_atlas_s']:.2f} / {a['iteration_s']:.2f} ({b['coarse_atlas_s'] / a['iteration_s']:.2f}x) | "
                     f"{100 * b['coarse_atlas_util']:.1f} / {100 * a['gpu_util']:.1f} | {b['slowdown']:.4f} | "
                     f"{b['prefill_requests']} | {100 * b.get('prefill_completed', 0):.1f} | "
                     f"{1000 * fb.get('fed_back_s_per_group', 0):.1f} |")
    lines += ["", "## Where the time went", ""] + profile_lines(run)
    return "\n".join(lines) + "\n"


def plot(rows, svg):
    """Atlas's speedup over each baseline per row (log scale), gnuplot SVG; skipped without gnuplot."""
    if shutil.which("gnuplot") is None:
        print("paper.py: gnuplot not found: no plot", file=sys.stderr)
        return
    data = svg[:-4] + ".dat"
    with open(data, "w") as f:
        f.write("row stock flat varuna fair-k4\n")
        for r in rows:
            if r.get("infeasible"):
                continue
            sy = r["systems"]
            a = sy["atlas-k4"]["iteration_s"]
            vals = ["nan" if "skipped" in sy[n] else f"{sy[n]['iteration_s'] / a:.4f}" for n in BASELINES]
            f.write(f"{r['model']}/{r['dcs']}DC/{r['wan']} " + " ".join(vals) + "\n")
    script = f"""set terminal svg size 1400,600 dynamic font 'sans,10'
set output '{svg}'
set title 'Atlas speedup over each baseline (bench/paper.py)'
set style data histogram
set style histogram cluster gap 1
set style fill solid 0.8 border -1
set logscale y
set yrange [0.1:*]
set ylabel 'speedup (baseline s/iter / Atlas s/iter)'
set xtics rotate by -60 font ',8'
set key top left
set arrow from graph 0, first 17 to graph 1, first 17 nohead dt 2 lc rgb 'red'
set label 'x17' at graph 0.01, first 19 tc rgb 'red'
plot '{data}' using 2:xtic(1) title 'stock', '' using 3 title 'flat ring', '' using 4 title 'varuna', '' using 5 title 'fair-k4'
"""
    r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    if r.returncode != 0:
        print(f"paper.py: gnuplot failed: {r.stderr.strip()}", file=sys.stderr)
    os.remove(data)


if __name__ == "__main__":
    main()
