"""The pytorch tier: a real framework (PyTorch 1.13, gloo on CPU) across a two-DC lab,
started with one `wanlab launch` line per job and no variable set by hand.

  tests/pytorch/run.sh [--build-dir DIR] [--lab NAME] [--keep]

Checks (the lab: use <-> euw, 40 ms RTT, 100 Mbit/s; 1448/1514 of it carries payload):
  1. send/recv of 4 and 16 MiB (rank 0 on use-0 sends, rank 1 on euw-0 answers with one
     byte): the median of 5 rounds within 10 % of size / payload rate + one RTT;
  2. a `wanlab link set use euw --rate 50Mbit` while 4 MiB rounds go on: the job keeps
     running, rounds before the change follow 100 Mbit/s and rounds after it 50 Mbit/s
     (median, 10 %); the rate is set back after;
  3. a two-stage GPipe loop (tests/pytorch/job.py pipeline) whose programs are the
     scenario's (compute as sleeps of the modeled times, messages its bytes), once with every
     receive posted at the start of the iteration and once naive (each receive posted where
     it is waited for): the mean iteration time after warm-up within 10 % of `wanlab
     simulate` with "send_mode": "eager" and "rendezvous" respectively;
  4. wanlab's own agents on the same lab (`wanlab run` of the same scenarios): their mean
     iteration time within 10 % of `wanlab simulate` in both send modes, and each run's
     tcp_congestion (reno, then cubic) every node's default afterwards;
  5. after `wanlab down`, no namespace, /etc/netns folder, mount or job process is left.
Prints "MEASURED: ..." lines with every figure. Exit 0: passed; 1: failed; 77 with
"SKIPPED: <reason>": it cannot run here (not root, no python3-torch, no wanlab binary).
"""
import argparse
import glob
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"
RTT_S = 0.040
RATE = 100e6
CHANGED_RATE = 50e6
PAYLOAD = 1448 / 1514
TOLERANCE = 0.10
MIB = 1 << 20

failures = []


def skip(why):
    print(f"SKIPPED: {why}", flush=True)
    sys.exit(77)


def say(msg):
    print(f"pytorch: {msg}", flush=True)


def measured(msg):
    print(f"MEASURED: {msg}", flush=True)


def check(ok, what):
    say(("ok: " if ok else "FAILED: ") + what)
    if not ok:
        failures.append(what)


def within(measured_s, expected_s, tol=TOLERANCE):
    return abs(measured_s - expected_s) <= tol * expected_s


def run(args, **kw):
    return subprocess.run(args, text=True, capture_output=True, **kw)


def results_of(lines):
    out = []
    for line in lines:
        m = re.match(r"^\[([^/\]]+)/(\d+)\] RESULT (.*)$", line)
        if m:
            out.append(json.loads(m.group(3)))
    return out


class Launch:
    """A `wanlab launch` running in the background, its output lines collected."""

    def __init__(self, wanlab, lab, out, cmd):
        self.lines = []
        self.cv = threading.Condition()
        self.proc = subprocess.Popen([wanlab, "launch", "--lab", lab, "--nodes", "use-0,euw-0", "--out", out, "--"] + cmd,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cv:
                self.lines.append(line.rstrip("\n"))
                self.cv.notify_all()

    def wait_for(self, pred, timeout):
        end = time.time() + timeout
        with self.cv:
            while not pred(results_of(self.lines)):
                if self.proc.poll() is not None or time.time() > end:
                    return False
                self.cv.wait(0.2)
        return True

    def finish(self, timeout):
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGINT)
            rc = self.proc.wait(30)
        self.thread.join(5)
        return rc


def topology(lab):
    return {
        "name": lab,
        "description": "The pytorch tier's lab: one node per DC, 40 ms RTT, 100 Mbit/s.",
        "lan": {"delay": "0ms", "mtu": 1500},
        "dcs": [
            {"name": "use", "nodes": 1, "gpus_per_node": 1, "gpu": "H100"},
            {"name": "euw", "nodes": 1, "gpus_per_node": 1, "gpu": "H100"},
        ],
        "wan": [{"between": ["use", "euw"], "rtt": "40ms", "rate": "100Mbit"}],
        # As scenarios assume: an idle connection keeps its window between messages.
        "node": {"tcp_congestion": "cubic", "sysctls": {"net.ipv4.tcp_slow_start_after_idle": "0"}},
    }


def scenario(topo_file, mode):
    # 2 MiB per message (1 x 1024 tokens x 1024 x bf16); compute at a tiny MFU so that a
    # micro-batch's forward takes about as long as its message on the 100 Mbit/s link.
    return {
        "name": f"pytorch-gpipe-{mode}",
        "topology": topo_file,
        "model": {"layers": 2, "hidden": 1024, "heads": 16, "seq_len": 1024, "vocab": 1024, "dtype": "bf16"},
        "gpu": {"mfu": 0.0003},
        "parallelism": {"pp": 2, "dp": 1, "tp": 1},
        "placement": [["use"], ["euw"]],
        "schedule": "gpipe",
        "micro_batch_size": 1,
        "micro_batches": 4,
        "iterations": 5,
        "warmup": 1,
        "connections": 1,
        "policy": "fair",
        "compute": "modeled",
        "scale": 1,
        "send_mode": mode,
    }


def simulate(wanlab, scen_file, out):
    r = run([wanlab, "simulate", scen_file, "--policies", "fair", "--connections", "1", "--no-placement-baseline",
             "--out", out, "--quiet"])
    if r.returncode != 0:
        raise RuntimeError(f"wanlab simulate {scen_file}: {r.stdout}{r.stderr}")
    summaries = glob.glob(os.path.join(out, "*", "summary.json"))
    if len(summaries) != 1:
        raise RuntimeError(f"wanlab simulate: expected one variant in {out}, found {summaries}")
    folder = os.path.dirname(summaries[0])
    with open(summaries[0]) as f:
        summary = json.load(f)
    with open(os.path.join(folder, "timeline.json")) as f:
        timeline = json.load(f)
    return summary, timeline


def programs_of(timeline):
    """Each worker's iteration-0 program as the job runs it: the compute spans in order with
    their modeled times, a recv before each compute that needs a message (a forward on stage
    1, a backward on stage 0: the plan's two-stage programs) and a send after each compute
    that makes one; and the message size."""
    events = timeline["traceEvents"] if isinstance(timeline, dict) else timeline
    spans = {0: [], 1: []}
    nbytes = None
    for e in events:
        if e.get("ph") != "X":
            continue
        a = e.get("args", {})
        if a.get("iteration") != 0:
            continue
        w = a.get("worker")
        if e["cat"] in ("forward", "backward", "optimizer"):
            spans[w].append((e["ts"], e["cat"], a.get("microbatch", -1), e["dur"] / 1e6))
        elif e["cat"] == "send":
            nbytes = a["bytes"]
    programs = []
    for w in (0, 1):
        ops = []
        for _, kind, mb, s in sorted(spans[w]):
            needs = (w == 1 and kind == "forward") or (w == 0 and kind == "backward")
            makes = (w == 0 and kind == "forward") or (w == 1 and kind == "backward")
            if needs:
                ops.append({"kind": "recv", "mb": mb})
            ops.append({"kind": "compute", "what": kind, "mb": mb, "s": s})
            if makes:
                ops.append({"kind": "send", "mb": mb})
        programs.append(ops)
    return programs, nbytes


def iteration_time(results, warmup):
    ends = {}
    for r in results:
        if r.get("kind") == "iteration":
            ends[r["iteration"]] = max(ends.get(r["iteration"], 0), r["end"])
    its = sorted(ends)
    per = [ends[i] - ends[i - 1] for i in its if i >= warmup and i - 1 in ends]
    return statistics.mean(per), per


def leftovers(lab):
    out = []
    prefix = lab + "."
    for d in ("/run/netns", "/run/utsns", "/etc/netns"):
        if os.path.isdir(d):
            out += [os.path.join(d, n) for n in os.listdir(d) if n.startswith(prefix)]
    with open("/proc/self/mountinfo") as f:
        out += ["mount: " + line.strip() for line in f if "/" + prefix in line]
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "tests/pytorch/job.py" in cmd:
            out.append(f"process {pid}: {cmd}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    ap.add_argument("--lab", default="wlt-pytorch")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    lab = args.lab
    wanlab = os.path.join(os.path.abspath(args.build_dir), "controller", "wanlab")
    if os.geteuid() != 0:
        skip("needs root (network namespaces)")
    if not os.access(wanlab, os.X_OK):
        skip(f"no wanlab binary at {wanlab} (build it first)")
    if not os.access(PY, os.X_OK):
        skip(f"no {PY}")
    r = run([PY, "-c", "import torch, torch.distributed as d; print(torch.__version__, d.is_gloo_available())"])
    if r.returncode != 0 or not r.stdout.strip().endswith("True"):
        skip(f"python3-torch with gloo is not installed for {PY} (scripts/setup.sh installs it where apt can): "
             f"{(r.stderr.strip().splitlines() or [r.stdout.strip()])[-1]}")
    say(f"torch {r.stdout.split()[0]}")
    t_start = time.time()
    work = tempfile.mkdtemp(prefix=f"{lab}-")
    topo_file = os.path.join(work, "topology.json")
    with open(topo_file, "w") as f:
        json.dump(topology(lab), f, indent=2)
    job = os.path.join(HERE, "job.py")

    # Predictions first: they need no lab.
    predicted, specs, scen_files = {}, {}, {}
    for mode in ("eager", "rendezvous"):
        scen_file = scen_files[mode] = os.path.join(work, f"scenario-{mode}.json")
        with open(scen_file, "w") as f:
            json.dump(scenario(topo_file, mode), f, indent=2)
        summary, timeline = simulate(wanlab, scen_file, os.path.join(work, f"sim-{mode}"))
        predicted[mode] = summary["iteration_time_s"]["mean"]
        programs, nbytes = programs_of(timeline)
        specs[mode] = {"mode": "preposted" if mode == "eager" else "naive", "programs": programs, "bytes": nbytes,
                       "iterations": 5}
        measured(f"wanlab simulate send_mode={mode}: iteration {predicted[mode]:.3f} s, message {nbytes} bytes")
    check(predicted["rendezvous"] > predicted["eager"] * 1.05,
          f"simulate: rendezvous predicts a slower loop than eager ({predicted['rendezvous']:.3f} s vs "
          f"{predicted['eager']:.3f} s)")

    run([wanlab, "down", lab])
    r = run([wanlab, "up", topo_file])
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        failures.append("wanlab up")
        return finish(wanlab, lab, work, args.keep, t_start)
    say(f"lab {lab} up in {time.time() - t_start:.1f} s")
    try:
        torchrun(wanlab, lab, work, job)
        p2p_and_link_change(wanlab, lab, work, job)
        spec_files = []
        for mode in ("eager", "rendezvous"):
            spec_files.append(os.path.join(work, f"spec-{mode}.json"))
            with open(spec_files[-1], "w") as f:
                json.dump(specs[mode], f)
        # Both loops in one job, one after the other (a launch costs Python's start-up).
        la = Launch(wanlab, lab, os.path.join(work, "run-pipeline"), [PY, job, "pipeline"] + spec_files)
        rc = la.finish(300)
        check(rc == 0, f"pipeline job exit status {rc}")
        if rc != 0:
            print("\n".join(la.lines[-30:]))
        for mode in ("eager", "rendezvous"):
            kind = specs[mode]["mode"]
            results = [r for r in results_of(la.lines) if r.get("mode") == kind]
            if not results:
                check(False, f"{kind} loop's iterations measured")
                continue
            mean, per = iteration_time(results, 1)
            measured(f"pipeline {kind}: iteration {mean:.3f} s (iterations 1-4: "
                     f"{', '.join(f'{x:.3f}' for x in per)}), predicted (send_mode={mode}) {predicted[mode]:.3f} s, "
                     f"{100 * (mean / predicted[mode] - 1):+.1f} %")
            check(within(mean, predicted[mode]), f"{kind} loop's iteration time within 10 % of simulate's {mode} prediction")
        for mode, cc in (("eager", "reno"), ("rendezvous", "cubic")):
            # The eager run's scenario names reno (the lab's nodes have cubic): a run makes
            # its congestion control every node's default (on 2 MiB messages over warm
            # connections the two give the same times).
            with open(scen_files[mode]) as f:
                doc = json.load(f)
            doc["tcp_congestion"] = cc
            with open(scen_files[mode], "w") as f:
                json.dump(doc, f, indent=2)
            out = os.path.join(work, f"run-agents-{mode}")
            r = run([wanlab, "run", scen_files[mode], "--out", out, "--quiet"], timeout=240)
            for node in ("use-0", "euw-0"):
                e = run([wanlab, "exec", "--lab", lab, node, "--", "cat", "/proc/sys/net/ipv4/tcp_congestion_control"])
                check(e.stdout.strip() == cc, f"after a run with tcp_congestion {cc}, {node}'s default is "
                                              f"{e.stdout.strip() or e.stderr.strip()}")
            check(r.returncode == 0, f"wanlab run (agents) send_mode={mode} exit status {r.returncode}")
            if r.returncode != 0:
                print(r.stdout + r.stderr)
                continue
            with open(os.path.join(out, "summary.json")) as f:
                mean = json.load(f)["iteration_time_s"]["mean"]
            measured(f"agents (wanlab run) send_mode={mode}: iteration {mean:.3f} s, predicted {predicted[mode]:.3f} s, "
                     f"{100 * (mean / predicted[mode] - 1):+.1f} %")
            check(within(mean, predicted[mode]), f"agents' iteration time within 10 % of simulate's ({mode})")
    except Exception as e:  # the lab still goes down, and the tier fails
        import traceback
        traceback.print_exc()
        failures.append(f"{type(e).__name__}: {e}")
    return finish(wanlab, lab, work, args.keep, t_start)


def torchrun(wanlab, lab, work, job):
    """torchrun with c10d rendezvous, as users call it: no flag or variable for Debian's 1.13
    on Python 3.11 (launch's PET_REDIRECTS/PET_TEE defaults)."""
    exe = shutil.which("torchrun", path="/usr/bin:/usr/local/bin")
    if not exe:
        say("no torchrun in /usr/bin: its check left out")
        return
    la = Launch(wanlab, lab, os.path.join(work, "run-torchrun"),
                [exe, "--nnodes", "2", "--nproc_per_node", "1", "--rdzv_backend", "c10d",
                 "--rdzv_endpoint", "$MASTER_ADDR:$MASTER_PORT", "--rdzv_id", "wlt", job, "hello"])
    rc = la.finish(240)
    values = sorted(r["value"] for r in results_of(la.lines) if r["kind"] == "allreduce")
    check(rc == 0 and values == [3.0, 3.0], f"torchrun (c10d) across the DCs: exit {rc}, all-reduce {values}")
    if rc != 0:
        print("\n".join(la.lines[-20:]))


def p2p_and_link_change(wanlab, lab, work, job):
    stop = os.path.join(work, "stop")
    sizes = [16 * MIB, 4 * MIB]  # the larger first: the 4 MiB rounds find the window open
    la = Launch(wanlab, lab, os.path.join(work, "run-p2p"), [PY, job, "p2p", ",".join(map(str, sizes)), "5", stop])
    hello = la.wait_for(lambda rs: sum(1 for r in rs if r["kind"] == "hello") == 2, 120)
    check(hello, "both ranks up (gloo rendezvous across the DCs by node name)")
    names = sorted(r["host"] for r in results_of(la.lines) if r["kind"] == "hello")
    check(names == ["euw-0", "use-0"], f"each rank sees its node's host name ({names})")
    # Rounds at the topology's rate, then the change.
    la.wait_for(lambda rs: sum(1 for r in rs if r["kind"] == "change") >= 4, 120)
    t_set0 = time.time()
    r = run([wanlab, "link", "set", "use", "euw", "--lab", lab, "--rate", "50Mbit"])
    t_set1 = time.time()
    check(r.returncode == 0, f"link set use euw --rate 50Mbit while the job runs ({r.stdout.strip()}{r.stderr.strip()})")
    la.wait_for(lambda rs: sum(1 for r in rs if r["kind"] == "change" and r["start"] > t_set1) >= 4, 120)
    open(stop, "w").close()
    rc = la.finish(120)
    check(rc == 0, f"p2p job exit status {rc} (it survived the change)")
    results = results_of(la.lines)
    for n in sizes:
        times = [r["end"] - r["start"] for r in results if r["kind"] == "p2p" and r["bytes"] == n]
        expected = n * 8 / (RATE * PAYLOAD) + RTT_S
        if not times:
            check(False, f"send/recv of {n >> 20} MiB measured")
            continue
        med = statistics.median(times)
        measured(f"send/recv {n >> 20} MiB: median {med:.3f} s of {len(times)} ({', '.join(f'{t:.3f}' for t in times)}), "
                 f"expected {expected:.3f} s (size / payload rate + RTT), {100 * (med / expected - 1):+.1f} %")
        check(within(med, expected), f"send/recv of {n >> 20} MiB within 10 % of size / rate + RTT")
    for label, rate, rounds in (
            ("before", RATE, [r for r in results if r["kind"] == "change" and r["end"] < t_set0]),
            ("after", CHANGED_RATE, [r for r in results if r["kind"] == "change" and r["start"] > t_set1])):
        times = [r["end"] - r["start"] for r in rounds]
        expected = 4 * MIB * 8 / (rate * PAYLOAD) + RTT_S
        if not times:
            check(False, f"4 MiB rounds {label} the link change measured")
            continue
        med = statistics.median(times)
        measured(f"4 MiB rounds {label} link set ({rate / 1e6:.0f} Mbit/s): median {med:.3f} s of {len(times)} "
                 f"(min {min(times):.3f}, max {max(times):.3f}), expected {expected:.3f} s, "
                 f"{100 * (med / expected - 1):+.1f} %")
        check(within(med, expected), f"4 MiB rounds {label} the link change follow {rate / 1e6:.0f} Mbit/s")
    r = run([wanlab, "link", "set", "use", "euw", "--lab", lab, "--rate", "100Mbit"])
    check(r.returncode == 0, "link set back to 100Mbit")


def finish(wanlab, lab, work, keep, t_start):
    if keep:
        say(f"lab {lab} left up (--keep): wanlab down {lab}; files in {work}")
    else:
        r = run([wanlab, "down", lab])
        check(r.returncode == 0, f"wanlab down {lab}")
        left = leftovers(lab)
        check(not left, f"nothing of lab {lab} left after down ({left})")
        shutil.rmtree(work, ignore_errors=True)
    say(f"{'FAILED' if failures else 'passed'} in {time.time() - t_start:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
