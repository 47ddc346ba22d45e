"""A two-rank PyTorch (gloo, CPU) job for the pytorch tier, started by `wanlab launch`.

It reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from the environment launch gives
and prints one JSON object per line, prefixed "RESULT ", for tests/pytorch/run.py.

  job.py hello              an all-reduce of the ranks' numbers + 1 (torchrun's check)
  job.py p2p SIZES ROUNDS STOP
                            rank 0 sends SIZES (bytes, comma-separated) to rank 1 ROUNDS
                            times each, then 4 MiB rounds until the file STOP exists;
                            each round: the message, then a 1-byte reply
  job.py pipeline SPEC...   runs the two-stage program in the JSON file SPEC (made by run.py
                            from `wanlab simulate`'s timeline): compute as sleeps, messages
                            as gloo send/recv, in mode "preposted" (every receive of an
                            iteration posted at its start, dist.irecv) or "naive" (each
                            posted where it is waited for, dist.recv); sends are dist.isend;
                            one SPEC after the other
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def result(**kv):
    print("RESULT " + json.dumps(kv), flush=True)


def p2p(sizes, rounds, stop_file):
    rank = dist.get_rank()
    reply = torch.zeros(1, dtype=torch.uint8)
    bufs = {n: torch.zeros(n, dtype=torch.uint8) for n in sizes + [1 << 20, 4 << 20]}

    # One round: rank 0 sends n bytes, rank 1 answers with one byte; the first byte of the
    # data says whether this is the last round (so the flag costs no extra round trip).
    def exchange(n, last=False):
        t0 = time.time()
        if rank == 0:
            bufs[n][0] = 1 if last else 0
            dist.send(bufs[n], 1)
            dist.recv(reply, 1)
        else:
            dist.recv(bufs[n], 0)
            dist.send(reply, 0)
        return t0, time.time(), bufs[n][0].item() == 1

    # The first rounds open the pair's connections and their windows.
    for _ in range(2):
        exchange(1 << 20)
    for n in sizes:
        for i in range(rounds):
            t0, t1, _ = exchange(n)
            if rank == 0:
                result(kind="p2p", bytes=n, round=i, start=t0, end=t1)
    # 4 MiB rounds until the stop file appears (rank 0 looks before each round).
    i = 0
    while True:
        t0, t1, last = exchange(4 << 20, rank == 0 and os.path.exists(stop_file))
        if rank == 0:
            result(kind="change", bytes=4 << 20, round=i, start=t0, end=t1)
        if last:
            break
        i += 1


def pipeline(spec_file):
    with open(spec_file) as f:
        spec = json.load(f)
    rank = dist.get_rank()
    peer = 1 - rank
    ops = spec["programs"][rank]
    mode = spec["mode"]
    nbytes = spec["bytes"]
    buf = {}
    for op in ops:
        if op["kind"] in ("send", "recv"):
            buf[(op["kind"], op["mb"])] = torch.zeros(nbytes, dtype=torch.uint8)
    sends = []
    for it in range(spec["iterations"]):
        t0 = time.time()
        posted = {}
        if mode == "preposted":
            for op in ops:
                if op["kind"] == "recv":
                    posted[op["mb"]] = dist.irecv(buf[("recv", op["mb"])], peer)
        for op in ops:
            k = op["kind"]
            if k == "compute":
                time.sleep(op["s"])
            elif k == "send":
                sends.append(dist.isend(buf[("send", op["mb"])], peer))
            elif mode == "preposted":
                posted[op["mb"]].wait()
            else:
                dist.recv(buf[("recv", op["mb"])], peer)
        t1 = time.time()
        result(kind="iteration", mode=mode, rank=rank, iteration=it, start=t0, end=t1)
        sends = [s for s in sends if not s.is_completed()]
    for s in sends:
        s.wait()
    dist.barrier()


def main():
    dist.init_process_group("gloo")
    result(kind="hello", rank=dist.get_rank(), world=dist.get_world_size(), host=os.uname().nodename)
    if sys.argv[1] == "hello":
        t = torch.ones(1024) * (dist.get_rank() + 1)
        dist.all_reduce(t)
        result(kind="allreduce", rank=dist.get_rank(), value=t[0].item())
    elif sys.argv[1] == "p2p":
        p2p([int(x) for x in sys.argv[2].split(",")], int(sys.argv[3]), sys.argv[4])
    else:
        for spec in sys.argv[2:]:
            pipeline(spec)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
