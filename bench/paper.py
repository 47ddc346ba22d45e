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
GPU_MEMORY_GB = 80.0  # H100 80 GB, as the topologies' DCs have
BASELINES = ["stock", "stock-flat", "varuna", "fair-k4"]
MARK_SPEEDUP, MARK_UTIL = 17.0, 0.94


def split_layers(layers, pp):
    base, extra = divmod(layers, pp)
    return [base + (1 if s < extra else 0) for s in range(pp)]


def memory_need(shape, pp, tp, schedule, micro_batches, mbs, recompute):
    """Bytes per GPU on the fullest stage, and that stage.

    The issue's formula, until the workload layer's memory model replaces this one function:
      - weights, gradients and Adam's states in mixed precision: 16 bytes per parameter
        (bf16 weights 2 + bf16 gradients 2 + fp32 master weights 4, momentum 4, variance 4),
        the stage's parameters divided over its tp GPUs;
      - activations per micro-batch in flight and layer: s b h x 34 / tp bytes (Megatron with
        sequence parallelism and selective recomputation, Korthikanti et al. 2022, "Reducing
        Activation Recomputation in Large Transformer Models", Table 2); with full
        recomputation only each layer's input, 2 s b h / tp, plus one layer's 34 s b h / tp
        while it is recomputed;
      - micro-batches in flight on stage s: 1F1B min(pp - s, M), GPipe M.
    """
    h, L = shape["hidden"], shape["layers"]
    d = h // shape["heads"]
    layer_params = h * (h + 2 * shape["kv_heads"] * d) + h * h + (3 if shape.get("gated_mlp", True) else 2) * h * \
        shape["ffn_hidden"] + 2 * h
    sbh = shape["seq_len"] * mbs * h
    worst = (0, 0)
    for s, layers in enumerate(split_layers(L, pp)):
        params = layers * layer_params + (shape["vocab"] * h if s == 0 else 0) + \
            (shape["vocab"] * h + h if s == pp - 1 else 0)
        states = 16 * params / tp
        in_flight = min(pp - s, micro_batches) if schedule == "1f1b" else micro_batches
        if recompute:
            act = in_flight * layers * 2 * sbh / tp + 34 * sbh / tp
        else:
            act = in_flight * layers * 34 * sbh / tp
        worst = max(worst, (states + act, s))
    return worst


def feasible(shape, pp, schedule, micro_batches, mbs, recompute):
    need, _ = memory_need(shape, pp, TP, schedule, micro_batches, mbs, recompute)
    return need <= GPU_MEMORY_GB * 1e9


def choose_plan(model, dcs):
    """The smallest pp, a multiple of the DC count (up to 16 stages per DC), that fits:
    without recomputation if it fits so, else with it. None when nothing does."""
    shape = SHAPES[model]
    for per_dc in range(1, 17):
        pp = per_dc * dcs
        if pp > shape["layers"]:
            break
        for recompute in (False, True):
            if feasible(shape, pp, "1f1b", MICRO_BATCHES, MBS, recompute):
                return pp, recompute
    return None


def scenario(model, topo_file, stages, recompute, prefill):
    s = {"name": os.path.basename(topo_file)[:-5] + "-" + model + ("-bubbletea" if prefill else ""),
         "topology": topo_file, "model": MODELS[model], "gpu": {"mfu": 0.4},
         "parallelism": {"pp": len(stages), "dp": 1, "tp": TP}, "schedule": "1f1b",
         "micro_batch_size": MBS, "micro_batches": MICRO_BATCHES, "iterations": 3, "warmup": 1, "connections": 4,
         "policy": "fair", "compute": "modeled", "scale": 1, "seed": 1, "recompute": recompute,
         "placement": [[dc] for dc in stages]}
    if prefill:
        dcs = list(dict.fromkeys(stages))
        gpus = len(stages) * REPLICAS * TP
        # Llama-2-7B prefills of long prompts (lognormal around 16,384 tokens), deadline 5 s,
        # Poisson at GPUs / 2 requests per second (bench/paper_scale.py --bubbletea's load).
        s["prefill"] = {"model": "7b", "rate_per_s": gpus // 2, "deadline_s": 5,
                        "prompt_tokens": {"distribution": "lognormal", "median": 16384, "sigma": 0.3,
                                          "min": 4096, "max": 32768},
                        "loadgen": f"{dcs[0]}-0", "decode": [f"{dc}-1" for dc in dcs]}
    return s


def simulate(wanlab, folder, scen, args):
    os.makedirs(folder, exist_ok=True)
    file = os.path.join(folder, scen["name"] + ".json")
    out = os.path.join(folder, scen["name"])
    text = json.dumps(scen, indent=2)
    # --reuse: a folder whose scenario file is this one and that has its results is read back.
    same = os.path.exists(file) and open(file).read() == text and os.path.exists(os.path.join(out, "bench.json"))
    with open(file, "w") as f:
        f.write(text)
    gpus = scen["parallelism"]["pp"] * REPLICAS * TP
    cmd = [wanlab, "simulate", file, "--gpus", str(gpus), "--connections", "4", "--no-placement-baseline", "--feedback-rounds", "2",
           "--lan-rate", "3.2Tbit", "--timeline", "none", "--out", out] + args
    if not (args_reuse and same):
        shutil.rmtree(out, ignore_errors=True)
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    with open(os.path.join(out, "bench.json")) as f:
        bench = json.load(f)
    runs = {}
    for v in bench["variants"]:
        runs[v["name"]] = v["summary"]
        sc = os.path.join(out, v["name"], "scenario.json")
        if os.path.exists(sc):
            with open(sc) as f:
                runs[v["name"]]["_scenario"] = json.load(f)
    for sk in bench.get("skipped", []):
        runs[sk["name"]] = {"_skipped": sk["reason"]}
    return runs


def row(task):
    model, topo, wan, out, wanlab = task
    dcs = TOPOLOGIES[topo]
    t0 = time.monotonic()
    plan = choose_plan(model, len(dcs))
    base = {"model": model, "topology": topo + WANS[wan], "dcs": len(dcs), "wan": wan}
    if plan is None:
        return dict(base, infeasible=True)
    pp, recompute = plan
    stages = [dc for dc in dcs for _ in range(pp // len(dcs))]
    folder = os.path.join(out, f"{model}-{topo}{WANS[wan]}")
    os.makedirs(folder, exist_ok=True)
    # The shipped topology with one 8-GPU node per stage in each DC (--gpus then grows the
    # node counts by the replicas); its WAN exactly as shipped.
    with open(os.path.join(ROOT, "topologies", topo + WANS[wan] + ".json")) as f:
        t = json.load(f)
    for dc in t["dcs"]:
        dc["nodes"] = pp // len(dcs)
    topo_file = os.path.join(folder, "topology.json")
    with open(topo_file, "w") as f:
        json.dump(t, f, indent=1)
    need, stage = memory_need(SHAPES[model], pp, TP, "1f1b", MICRO_BATCHES, MBS, recompute)
    train = simulate(wanlab, folder, scenario(model, topo_file, stages, recompute, False),
                     ["--policies", "fair,atlas", "--baselines", "all"])
    bt = simulate(wanlab, folder, scenario(model, topo_file, stages, recompute, True), ["--policies", "atlas"]) \
        if model in args_bubbletea and pp * REPLICAS * TP <= args_bubbletea_gpus else None
    res = dict(base, pp=pp, recompute=recompute, gpus=pp * REPLICAS * TP, memory_gb=need / 1e9, memory_stage=stage,
               wall_s=time.monotonic() - t0, systems={})

    def entry(summary):
        if "_skipped" in summary:
            return {"skipped": summary["_skipped"]}
        e = {"iteration_s": summary["iteration_time_s"]["mean"], "gpu_util": summary["gpu_utilization"]["mean"]}
        sc = summary.get("_scenario")
        if sc:
            e["schedule"], e["micro_batches"], e["micro_batch_size"] = sc["schedule"], sc["micro_batches"], \
                sc["micro_batch_size"]
            e["recompute"] = sc.get("recompute", False)
            e["memory_gb"] = memory_need(SHAPES[model], pp, TP, sc["schedule"], sc["micro_batches"],
                                         sc["micro_batch_size"], e["recompute"])[0] / 1e9
            if e["memory_gb"] > GPU_MEMORY_GB:  # simulated, but not a plan a GPU could hold: left out
                return {"skipped": f"does not fit: {e['memory_gb']:.0f} GB per GPU of {GPU_MEMORY_GB:.0f}",
                        "memory_gb": e["memory_gb"], "micro_batches": e["micro_batches"],
                        "micro_batch_size": e["micro_batch_size"]}
        return e

    for name in BASELINES + ["atlas-k4"]:
        res["systems"][name] = entry(train.get(name, {"_skipped": "not run"}))
    if bt is None:
        res["systems"]["atlas+bubbletea"] = {"skipped": "not run (--bubbletea-models, --bubbletea-max-gpus)"}
        return res
    a = bt["atlas-k4"]
    e = entry(a)
    p = a.get("prefill", {})
    wait = p.get("training_wait_s_per_iteration", {})
    e["prefill_completed"] = p.get("completed", 0) / max(p.get("requests", 1), 1)
    e["fed_back"] = wait.get("fed_back", False)
    e["feedback"] = wait.get("feedback", {})
    res["systems"]["atlas+bubbletea"] = e
    return res


def fmt_sys(e):
    if "skipped" in e and "memory_gb" in e:
        return f"no fit ({e['memory_gb']:.0f} GB)", "-"
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
    args = ap.parse_args()
    global args_reuse, args_bubbletea, args_bubbletea_gpus
    args_reuse = args.reuse
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
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = []
        for r in pool.map(row, tasks):
            rows.append(r)
            print(f"[{len(rows)}/{len(tasks)}] {r['model']} {r['topology']}: {time.monotonic() - t0:.0f} s",
                  file=sys.stderr, flush=True)
    wall = time.monotonic() - t0
    date = datetime.date.today().isoformat()
    results = args.results or os.path.join(ROOT, "bench", "results", f"{date}-headline.md")
    with open(os.path.splitext(results)[0] + ".json", "w") as f:
        json.dump({"date": date, "wall_s": wall, "rows": rows}, f, indent=1)
    md = report(rows, wall, date, " ".join(sys.argv[1:]))
    with open(results, "w") as f:
        f.write(md)
    plot(rows, os.path.splitext(results)[0] + ".svg")
    print(md)
    print(f"results: {results}, {os.path.splitext(results)[0]}.json, .svg; {wall:.0f} s")


def report(rows, wall, date, argv):
    lines = [f"# Headline table ({date})", "",
             f"`bench/paper.py {argv}`".replace(" `", "`"), f"({len(rows)} rows, {wall:.0f} s on this machine).", "",
             "Conditions of every row: TP 8, 60 DP replicas, 16 micro-batches of 1 sequence per replica per "
             "iteration, H100 80 GB, MFU 0.4, full-size bytes, `--lan-rate 3.2Tbit`, 3 iterations (1 warm-up), "
             "seed 1. pp is the smallest multiple of the DC count whose plan fits in memory (per GPU, fullest "
             "stage: 16 B/param of weights, gradients and Adam states over pp x tp, plus activations of the "
             "micro-batches in flight, Korthikanti et al. 2022 with sequence parallelism); `rc` = every system "
             "runs with activation recomputation because none fits without it. Baselines (docs/baselines.md): "
             "**stock** = DP across DCs, hierarchical all-reduce, 1 TCP connection per peer, fair; **flat** = the "
             "same with one flat ring; **varuna** = PP across DCs, GPipe with recomputation, micro-batches chosen "
             "for the network, 1 connection, fair; **fair-k4** = PP across DCs (Atlas's placement), 1F1B, 4 "
             "connections, fair sharing. **atlas** = Atlas's placement and temporal sharing, 4 connections; "
             "**+BT** = Atlas with BubbleTea's prefill load (Llama-2-7B prompts around 16k tokens at GPUs / 2 "
             "per s, deadline 5 s), its GPU utilization counting prefill, its iteration time with prefill's "
             "waits fed back once (`--feedback-rounds 2`: the training run, then one run with the waits the "
             "prefill pass found; sim/prefill.hpp). Speedup = baseline s/iter over Atlas's. "
             f"**Bold** marks a speedup >= {MARK_SPEEDUP:g}x or a utilization >= {100 * MARK_UTIL:g} %.", "",
             "| model | DCs | WAN | pp x dp x tp (GPUs) | GB/GPU | stock s (util %) | flat s (util %) | "
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
                     f"({r['gpus']}){' rc' if r['recompute'] else ''} | {r['memory_gb']:.0f} | " + " | ".join(cells) +
                     f" | {' / '.join(sp)} | {'yes' if hit else ''} |")
    lines += ["", "## Where the paper's figures are reached", ""]
    if marked:
        for r, hit in marked:
            lines.append(f"- {r['model']}, {r['dcs']} DCs, {WAN_WORDS[r['wan']]} WAN ({r['topology']}): "
                         + "; ".join(hit))
    else:
        lines.append("- nowhere in this table.")
    lines += ["", "## Each row's Varuna plan and BubbleTea figures", "",
              "| model | topology | varuna: micro-batches x size (GB/GPU) | +BT prefill completed (%) | "
              "feedback rounds | fed-back wait (ms/iter per TP group) |", "| --- | --- | --- | ---: | ---: | ---: |"]
    for r in rows:
        if r.get("infeasible"):
            continue
        v, b = r["systems"]["varuna"], r["systems"]["atlas+bubbletea"]
        vp = f"{v['micro_batches']} x {v['micro_batch_size']} ({v['memory_gb']:.0f})" if "memory_gb" in v else "n/a"
        if "skipped" in b:
            lines.append(f"| {r['model']} | {r['topology']} | {vp} | not run | | |")
            continue
        fb = b.get("feedback", {})
        lines.append(f"| {r['model']} | {r['topology']} | {vp} | {100 * b.get('prefill_completed', 0):.1f} | "
                     f"{fb.get('rounds', 1)} | {1000 * fb.get('fed_back_s_per_group', 0):.1f} |")
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
