#!/usr/bin/python3
"""GET /metrics against its targets on a three-DC lab with traffic (root; after the build):

  1. scrape time: back-to-back scrapes of `up --metrics` while iperf3 crosses every WAN
     link, timed at the client (connect + answer) and at the controller
     (wanlab_metrics_render_seconds); target: under 5 ms at the controller;
  2. the userspace engine's release lateness (wanlab_engine_release_lateness_seconds, read
     before and after each window) with no scraper and with one scraping every second,
     alternating, `--repeats` times each: the scrape must not move it.

The lab is topologies/three-dc.json renamed (--lab), one node per DC, userspace backend.
The machine may be shared: every figure comes with its spread over the repeats and the
load average it ran under.

Usage: bench/metrics.py [--seconds 20] [--repeats 3] [--scrapes 300] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WANLAB = os.environ.get("WANLAB", os.path.join(ROOT, "build/controller/wanlab"))


def parse(text):
    """Prometheus text -> {(name, ((label, value), ...)): value} (the format wanlab writes)."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, value = line.rsplit(" ", 1)
        labels = ()
        if "{" in name_labels:
            name, rest = name_labels.split("{", 1)
            pairs = []
            for part in rest.rstrip("}").split('",'):
                k, v = part.split('="', 1)
                pairs.append((k, v.rstrip('"')))
            labels = tuple(sorted(pairs))
        else:
            name = name_labels
        out[(name, labels)] = float(value)
    return out


def scrape(at):
    t0 = time.perf_counter()
    with urllib.request.urlopen(f"http://{at}/metrics", timeout=10) as r:
        body = r.read().decode()
    return time.perf_counter() - t0, parse(body)


def lateness(before, after):
    """Release lateness between two scrapes: count, mean and bucket-bound p50/p99/p999 (us)."""
    name = "wanlab_engine_release_lateness_seconds"
    buckets = sorted(
        (float("inf") if dict(l)["le"] == "+Inf" else float(dict(l)["le"]), v - before.get((n, l), 0))
        for (n, l), v in after.items() if n == name + "_bucket")
    count = after[(name + "_count", ())] - before[(name + "_count", ())]
    total = after[(name + "_sum", ())] - before[(name + "_sum", ())]

    def q(p):
        for le, cum in buckets:
            if cum >= p * count:
                return le * 1e6
        return float("inf")

    return {"releases": count, "mean_us": total / count * 1e6 if count else 0,
            "p50_le_us": q(0.5), "p99_le_us": q(0.99), "p999_le_us": q(0.999),
            "over_1ms": count - next((c for le, c in buckets if le >= 0.001), count)}


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def loadavg():
    return float(open("/proc/loadavg").read().split()[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scrapes", type=int, default=300)
    ap.add_argument("--rate", default="300M", help="iperf3 -b per flow (the same load in every window)")
    ap.add_argument("--lab", default="wlm-bench")
    ap.add_argument("--port", type=int, default=47462)
    ap.add_argument("--json")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/metrics.py: needs root (it brings a lab up)")
    topo = json.load(open(os.path.join(ROOT, "topologies/three-dc.json")))
    topo["name"] = a.lab
    for dc in topo["dcs"]:
        dc["nodes"] = 1
    tmp = tempfile.mkdtemp()
    tfile = os.path.join(tmp, a.lab + ".json")
    json.dump(topo, open(tfile, "w"))
    at = f"127.0.0.1:{a.port}"
    subprocess.run([WANLAB, "down", a.lab], capture_output=True)
    run([WANLAB, "up", tfile, "--backend", "userspace", "--metrics", at])
    try:
        status = json.loads(run([WANLAB, "status", a.lab, "--json"]).stdout)
        addr = {n["name"]: n["address"] for dc in status["dcs"] for n in dc["nodes"]}
        flows = [("use-0", "euw-0"), ("usw-0", "use-0"), ("euw-0", "usw-0")]

        def traffic(seconds, port_base):
            for i, (_, dst) in enumerate(flows):
                run([WANLAB, "exec", "--lab", a.lab, dst, "--", "iperf3", "-s", "-D", "-1", "-p", str(port_base + i)])
            time.sleep(0.3)
            return [subprocess.Popen([WANLAB, "exec", "--lab", a.lab, src, "--", "iperf3", "-c", addr[dst], "-p",
                                      str(port_base + i), "-t", str(seconds), "-b", a.rate, "-J"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                    for i, (src, dst) in enumerate(flows)]

        def goodput(procs):
            total = 0.0
            for p in procs:
                out, _ = p.communicate()
                total += json.loads(out[out.index("{"):])["end"]["sum_received"]["bits_per_second"]
            return total / 1e6

        # 1. Scrape time under traffic.
        procs = traffic(a.seconds + 30, 5400)
        time.sleep(2)
        client, render = [], []
        for _ in range(a.scrapes):
            dt, m = scrape(at)
            client.append(dt * 1e3)
            if m[("wanlab_metrics_render_seconds", ())] >= 0:
                render.append(m[("wanlab_metrics_render_seconds", ())] * 1e3)
        load_scrape = loadavg()
        for p in procs:
            p.kill()
            p.wait()
        time.sleep(1)

        def spread(xs):
            xs = sorted(xs)
            return {"p50": xs[len(xs) // 2], "p99": xs[min(len(xs) - 1, int(0.99 * len(xs)))], "max": xs[-1]}

        result = {"scrapes": a.scrapes, "client_ms": spread(client), "render_ms": spread(render),
                  "loadavg": load_scrape, "bytes": len(urllib.request.urlopen(f"http://{at}/metrics").read())}
        print(f"scrape time over {a.scrapes} scrapes under traffic (load {load_scrape:.1f}): "
              f"client p50 {result['client_ms']['p50']:.2f} ms p99 {result['client_ms']['p99']:.2f} ms "
              f"max {result['client_ms']['max']:.2f} ms; controller p50 {result['render_ms']['p50']:.3f} ms "
              f"p99 {result['render_ms']['p99']:.3f} ms max {result['render_ms']['max']:.3f} ms; "
              f"{result['bytes']} bytes", flush=True)

        # 2. Lateness with and without a 1 s scraper, alternating.
        windows = []
        for rep in range(a.repeats):
            for variant in ("none", "1s"):
                port_base = 5500 + 10 * (2 * rep + (variant == "1s"))
                _, m0 = scrape(at)
                l0 = loadavg()
                stop = threading.Event()
                scraper_ms = []

                def scraper():
                    while not stop.wait(1.0):
                        dt, _ = scrape(at)
                        scraper_ms.append(dt * 1e3)

                t = threading.Thread(target=scraper)
                if variant == "1s":
                    t.start()
                procs = traffic(a.seconds, port_base)
                gp = goodput(procs)
                stop.set()
                if variant == "1s":
                    t.join()
                _, m1 = scrape(at)
                w = {"repeat": rep + 1, "scrape": variant, "goodput_mbps": gp, "loadavg": (l0 + loadavg()) / 2,
                     "scrapes": len(scraper_ms), **lateness(m0, m1)}
                windows.append(w)
                print(f"repeat {rep + 1} scrape {variant:>4}: {w['releases']:.0f} releases, mean "
                      f"{w['mean_us']:.1f} us, p50 <= {w['p50_le_us']:.0f} us, p99 <= {w['p99_le_us']:.0f} us, "
                      f"p99.9 <= {w['p999_le_us']:.0f} us, > 1 ms {w['over_1ms']:.0f}; goodput {gp:.0f} Mbit/s; "
                      f"load {w['loadavg']:.1f}", flush=True)
        result["windows"] = windows
        for variant in ("none", "1s"):
            ws = [w for w in windows if w["scrape"] == variant]
            means = [w["mean_us"] for w in ws]
            print(f"scrape {variant:>4}: mean lateness {statistics.mean(means):.1f} us "
                  f"(min {min(means):.1f}, max {max(means):.1f}); p99 bucket bounds "
                  f"{sorted(w['p99_le_us'] for w in ws)} us")
        if a.json:
            json.dump(result, open(a.json, "w"), indent=2)
    finally:
        subprocess.run([WANLAB, "down", a.lab], capture_output=True)


if __name__ == "__main__":
    main()
