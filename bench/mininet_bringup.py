#!/usr/bin/python3
"""Mininet side of the bring-up benchmark: the same hosts and links as a wanlab topology.

Run it with Debian's /usr/bin/python3 (the `mininet` package is installed for it), as root:

    /usr/bin/python3 bench/mininet_bringup.py [--runs 5] [--topology topologies/bringup-96.json] [--json]

From the topology file it builds, per run:
  - one LinuxBridge switch per DC, with STP on (the WAN mesh between DC switches has loops);
  - one host per node of the DC, on its DC's switch (plain veth links: the LAN is unshaped);
  - one link per DC pair joined by the WAN, between the two DC switches, whose interfaces are
    TCIntf with `bw` = the topology's rate in Mbit/s for that direction (what TCLink does;
    each end shapes its own egress, so asymmetric links keep their two rates);
  - controller=None.
It times bring-up (Mininet() + adding nodes and links + build() + start()) and teardown
(stop()). start() does not wait for STP to converge (about 30 s of kernel bridge timers);
neither is wanlab's figure waiting for anything but its own netlink operations.

Deviations from stock Mininet, both deliberate:
  - Mininet refuses bw above 1000 Mbit/s (TCIntf.bwParamMax; it prints an error and leaves the
    link unshaped). The WAN rates here are about 4 Gbit/s, so the interfaces are a TCIntf
    subclass with a higher bwParamMax, and the tc commands really run.
  - Instead of mininet.clean.cleanup() (`mn -c`), which killalls every `ping`, `mnexec`,
    controller, ... on the machine, pkills "sudo mnexec" and deletes /tmp/*.log and /tmp/*.out,
    the pre-run cleanup removes only what this script creates: root-namespace interfaces
    named mnb<k> / mnb<k>-eth<n> (the DC switches and their ports). Host shells left by a
    killed earlier run are reported, not killed (they hold nothing that collides).

--reconfig N additionally brings the network up once more (untimed) and times N in-place
rate changes of one WAN interface the way Mininet does them, `intf.config(bw=...)`.
"""
import argparse
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import time

try:
    from mininet.link import Link, TCIntf
    from mininet.log import setLogLevel
    from mininet.net import VERSION as MININET_VERSION
    from mininet.net import Mininet
    from mininet.nodelib import LinuxBridge
except ImportError as exc:  # pragma: no cover - reported to the wrapper
    print(f"mininet_bringup: mininet is not importable by {sys.executable}: {exc}", file=sys.stderr)
    sys.exit(3)

SWITCH_PREFIX = "mnb"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class WideTCIntf(TCIntf):
    """TCIntf that accepts WAN rates above 1 Gbit/s (stock Mininet ignores them)."""

    bwParamMax = 1_000_000  # Mbit/s


_RATE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)bit(?:/s)?\s*$", re.IGNORECASE)
_RATE_SCALE = {"": 1e-6, "k": 1e-3, "m": 1.0, "g": 1e3, "t": 1e6}  # to Mbit/s


def rate_mbit(text):
    m = _RATE_RE.match(text)
    if not m:
        raise ValueError(f"unsupported rate {text!r}")
    return float(m.group(1)) * _RATE_SCALE[m.group(2).lower()]


class Spec:
    """The parts of a wanlab topology Mininet can mirror: DCs, node counts, WAN rates."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        self.name = doc["name"]
        self.dcs = [(dc["name"], int(dc["nodes"])) for dc in doc["dcs"]]
        directed = {}
        for entry in doc.get("wan", []):
            rate = rate_mbit(entry["rate"])
            if "between" in entry:
                a, b = entry["between"]
                directed[(a, b)] = rate
                directed[(b, a)] = rate
            else:
                directed[(entry["from"], entry["to"])] = rate
        order = [name for name, _ in self.dcs]
        self.pairs = []  # (a, b, Mbit/s a->b, Mbit/s b->a), one per joined DC pair
        for i, a in enumerate(order):
            for b in order[i + 1:]:
                if (a, b) in directed or (b, a) in directed:
                    self.pairs.append((a, b, directed.get((a, b)), directed.get((b, a))))
        self.directed_links = len(directed)

    @property
    def hosts(self):
        return sum(n for _, n in self.dcs)


def own_root_interfaces():
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    names = []
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) < 2:
            continue
        name = parts[1].strip().split("@", 1)[0]
        if re.fullmatch(SWITCH_PREFIX + r"[0-9]+(-eth[0-9]+)?", name):
            names.append(name)
    return names


def leftover_host_shells(spec):
    tags = {f"mininet:{dc}h{i}" for dc, n in spec.dcs for i in range(n)}
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if any(a.decode(errors="replace") in tags for a in args):
            pids.append(int(entry))
    return pids


def cleanup_own(spec, log):
    """Removes what an earlier, interrupted run of this script left in the root namespace."""
    names = own_root_interfaces()
    # Bridges first (their ports then go with the veth pairs).
    for name in sorted(names, key=lambda n: "-eth" in n):
        subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)
    if names:
        log(f"  cleanup: removed {len(names)} leftover interface(s) named {SWITCH_PREFIX}*")
    pids = leftover_host_shells(spec)
    if pids:
        log(f"  cleanup: {len(pids)} Mininet host shell(s) of an earlier run still alive (pids "
            f"{' '.join(map(str, pids[:10]))}{' ...' if len(pids) > 10 else ''}); not killing them")


def new_net():
    return Mininet(topo=None, controller=None, switch=LinuxBridge, link=Link, build=False,
                   waitConnected=False)


def populate(net, spec):
    """Adds the switches, hosts and links (Mininet starts each host's shell here)."""
    switches = {}
    for k, (dc, nodes) in enumerate(spec.dcs):
        switches[dc] = net.addSwitch(f"{SWITCH_PREFIX}{k + 1}", stp=True)
        for i in range(nodes):
            host = net.addHost(f"{dc}h{i}")
            net.addLink(host, switches[dc])
    wan = []
    for a, b, bw_ab, bw_ba in spec.pairs:
        p1 = {"bw": bw_ab} if bw_ab else {}
        p2 = {"bw": bw_ba} if bw_ba else {}
        wan.append(net.addLink(switches[a], switches[b], cls1=WideTCIntf, cls2=WideTCIntf,
                               params1=p1, params2=p2))
    return wan


def stop_quietly(net, log):
    try:
        net.stop()
    except Exception as exc:  # noqa: BLE001 - best effort on an error path
        log(f"  net.stop() failed: {exc!r}")


def one_run(spec):
    """Returns timings in ms; always stops what it started."""
    net = None
    stopped = False
    try:
        t0 = time.perf_counter()
        net = new_net()  # assigned first: an interrupted populate() still gets stopped
        populate(net, spec)
        net.build()
        t1 = time.perf_counter()
        net.start()
        t2 = time.perf_counter()
        check_shaping(net, spec)
        t3 = time.perf_counter()
        net.stop()
        stopped = True
        t4 = time.perf_counter()
        return {"bringup_ms": (t2 - t0) * 1e3, "build_ms": (t1 - t0) * 1e3, "start_ms": (t2 - t1) * 1e3,
                "teardown_ms": (t4 - t3) * 1e3}
    finally:
        if net is not None and not stopped:
            stop_quietly(net, lambda m: print(m, file=sys.stderr))


_checked = False


def check_shaping(net, spec):
    """Once: the WAN interfaces really carry an htb class (not skipped by bwParamMax)."""
    global _checked
    if _checked or not spec.pairs:
        return
    _checked = True
    sw = net.switches[0]
    for intf in sw.intfList():
        if isinstance(intf, WideTCIntf):
            out = sw.cmd(f"tc class show dev {intf}")
            if "htb" not in out:
                raise RuntimeError(f"{intf} has no htb class after start: {out!r}")
            return


def percentiles(values):
    v = sorted(values)

    def pct(p):  # nearest rank, as the C++ benchmarks
        rank = min(len(v), max(1, math.ceil(p / 100 * len(v))))
        return v[rank - 1]

    return {"n": len(v), "p50_us": pct(50), "p90_us": pct(90), "p99_us": pct(99), "max_us": v[-1],
            "min_us": v[0], "mean_us": statistics.fmean(v)}


def reconfig(spec, count, log):
    """Times `intf.config(bw=...)` on one WAN interface of a running network."""
    a, b, bw_ab, _ = spec.pairs[0]
    net = None
    try:
        net = new_net()
        wan = populate(net, spec)
        net.build()
        net.start()
        intf = wan[0].intf1
        hi = bw_ab
        lo = bw_ab / 2
        for i in range(5):  # warm-up
            intf.config(bw=hi if i % 2 == 0 else lo)
        us = []
        for i in range(count):
            t0 = time.perf_counter()
            intf.config(bw=lo if i % 2 == 0 else hi)
            us.append((time.perf_counter() - t0) * 1e6)
        shown = intf.node.cmd(f"tc class show dev {intf}").strip()
        log(f"  reconfig of {intf} ({a}->{b}) {count}x, last: {shown}")
        return percentiles(us)
    finally:
        if net is not None:
            stop_quietly(net, log)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--topology", default=os.path.join(REPO, "topologies", "bringup-96.json"))
    ap.add_argument("--json", action="store_true", help="print results as JSON on stdout (text to stderr)")
    ap.add_argument("--pause-ms", type=int, default=250, help="pause between runs")
    ap.add_argument("--reconfig", type=int, default=0, metavar="N",
                    help="also time N in-place bw changes with intf.config(bw=...)")
    ap.add_argument("-v", "--verbose", action="store_true", help="Mininet's info logging")
    args = ap.parse_args()

    out = sys.stderr if args.json else sys.stdout

    # Ctrl-C and SIGTERM unwind through the `finally` blocks, so net.stop() always runs
    # (SIGINT is ignored by default in background jobs; Python's SIGTERM default skips them).
    def interrupted(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)

    def log(msg):
        print(msg, file=out, flush=True)

    if os.geteuid() != 0:
        log("mininet_bringup: needs root")
        return 1
    # "critical": tc warns "quantum of class 50001 is big" at these rates, which Mininet logs as
    # an error on every WAN interface; check_shaping() verifies the classes exist instead.
    setLogLevel("info" if args.verbose else "critical")
    spec = Spec(args.topology)
    log(f"Mininet {MININET_VERSION} bring-up: {args.topology} ({len(spec.dcs)} DCs, {spec.hosts} hosts, "
        f"{len(spec.dcs)} LinuxBridge switches with STP, {len(spec.pairs)} TCLink WAN links)")
    log("  WAN bw (Mbit/s): " + ", ".join(f"{a}->{b} {x:g} / {b}->{a} {y:g}" for a, b, x, y in spec.pairs))

    runs = []
    log(f"  {'run':>4} {'bring-up ms':>12} {'(build':>8} {'+ start)':>9} {'teardown ms':>12}")
    for i in range(1, args.runs + 1):
        cleanup_own(spec, log)
        r = one_run(spec)
        runs.append(r)
        log(f"  {i:>4} {r['bringup_ms']:>12.1f} {r['build_ms']:>8.1f} {r['start_ms']:>9.1f} {r['teardown_ms']:>12.1f}")
        time.sleep(args.pause_ms / 1000)

    med = {k: statistics.median(r[k] for r in runs) for k in ("bringup_ms", "build_ms", "start_ms", "teardown_ms")}
    lo = {k: min(r[k] for r in runs) for k in ("bringup_ms", "teardown_ms")}
    hi = {k: max(r[k] for r in runs) for k in ("bringup_ms", "teardown_ms")}
    log(f"  median: bring-up {med['bringup_ms']:.1f} ms (min {lo['bringup_ms']:.1f}, max {hi['bringup_ms']:.1f}), "
        f"teardown {med['teardown_ms']:.1f} ms (min {lo['teardown_ms']:.1f}, max {hi['teardown_ms']:.1f})")

    doc = {"tool": "mininet", "version": MININET_VERSION, "python": sys.version.split()[0],
           "topology": args.topology, "hosts": spec.hosts, "switches": len(spec.dcs),
           "wan_links": len(spec.pairs), "stp": True, "runs": runs, "median": med, "min": lo, "max": hi}
    if args.reconfig > 0 and spec.pairs:
        cleanup_own(spec, log)
        rc = reconfig(spec, args.reconfig, log)
        doc["reconfig"] = rc
        log(f"  intf.config(bw=...) per change: p50 {rc['p50_us'] / 1e3:.2f} ms, p99 {rc['p99_us'] / 1e3:.2f} ms, "
            f"max {rc['max_us'] / 1e3:.2f} ms")
    cleanup_own(spec, log)
    if args.json:
        print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("mininet_bringup: interrupted (the network was stopped)", file=sys.stderr)
        sys.exit(130)
