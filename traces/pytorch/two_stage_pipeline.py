#!/usr/bin/env python3
"""A real two-stage pipeline-parallel training job (PyTorch, gloo on CPU, loopback), profiled.

Rank 0 holds the first half of an MLP, rank 1 the second half and the loss. Each iteration
runs GPipe over MICRO micro-batches: rank 0's forwards send activations to rank 1
(dist.send), rank 1 sends the activation gradients back; both ranks step their optimizer.
torch.profiler records ITER iterations after a warm-up and writes one Chrome-trace JSON per
rank (OUT/rank0.json, OUT/rank1.json), which `wanlab import-trace` turns into programs.

Usage: /usr/bin/python3 two_stage_pipeline.py OUT [--hidden 1024] [--micro 4] [--iters 3]
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, schedule


def run(rank, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    torch.set_num_threads(1)
    torch.manual_seed(rank)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    h = args.hidden
    layers = [torch.nn.Linear(h, h) for _ in range(args.layers)]
    model = torch.nn.Sequential(*[m for l in layers for m in (l, torch.nn.ReLU())])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, h)
    target = torch.randn(args.batch, h)

    def step():
        opt.zero_grad()
        outs, ins = [], []
        for mb in range(args.micro):
            if rank == 0:
                y = model(x)
                dist.send(y.detach(), dst=1)
                outs.append(y)
            else:
                a = torch.empty(args.batch, h)
                dist.recv(a, src=0)
                a.requires_grad_()
                ins.append(a)
                outs.append(torch.nn.functional.mse_loss(model(a), target))
        for mb in range(args.micro):
            if rank == 0:
                g = torch.empty(args.batch, h)
                dist.recv(g, src=1)
                outs[mb].backward(g)
            else:
                outs[mb].backward()
                dist.send(ins[mb].grad, dst=0)
        opt.step()

    for _ in range(2):  # warm-up outside the profiler
        step()
    dist.barrier()
    times = []
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=schedule(wait=0, warmup=1, active=args.iters),
                 on_trace_ready=lambda p: p.export_chrome_trace(os.path.join(args.out, f"rank{rank}.json"))) as prof:
        for _ in range(1 + args.iters):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
            prof.step()
    if rank == 0:
        print("iteration wall times (s):", " ".join(f"{t:.4f}" for t in times[1:]))
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--micro", type=int, default=4)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--port", type=int, default=29531)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    mp.spawn(run, args=(args,), nprocs=2, join=True)


if __name__ == "__main__":
    main()
