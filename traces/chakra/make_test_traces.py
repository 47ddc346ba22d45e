#!/usr/bin/env python3
"""Writes a small, hand-made Chakra execution trace of a two-rank pipeline: rank.0.et, rank.1.et.

The files are Chakra's protobuf format (chakra's schema/protobuf/et_def.proto): a GlobalMetadata
message, then one Node message per operation, each preceded by its length as a varint. The wire
format is written here directly, so the script needs no protobuf package:

    python3 traces/chakra/make_test_traces.py traces/chakra/two-rank

GPipe over 2 micro-batches of 64 KiB activations: rank 0 runs the forwards and sends the
activations, rank 1 receives them, runs forward and backward and sends the gradients back; then
both all-reduce 1 MiB of gradients, all-gather 256 KiB (a collective wanlab programs lack), load
from memory (a node type they lack) and step the optimizer. Durations in microseconds.
"""
import os
import struct
import sys

METADATA, MEM_LOAD, COMP, SEND, RECV, COLL = 1, 2, 4, 5, 6, 7
ALL_REDUCE, ALL_GATHER = 0, 2


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(field, wire_type):
    return varint(field << 3 | wire_type)


def length_delimited(field, payload):
    return key(field, 2) + varint(len(payload)) + payload


def attr_int(name, value):
    return length_delimited(1, name.encode()) + key(9, 0) + varint(value)  # int64_val


def attr_bool(name, value):
    return length_delimited(1, name.encode()) + key(27, 0) + varint(1 if value else 0)  # bool_val


def node(nid, name, ntype, deps, start, dur, attrs=()):
    msg = key(1, 0) + varint(nid) + length_delimited(2, name.encode()) + key(3, 0) + varint(ntype)
    if deps:
        msg += length_delimited(4, b"".join(varint(d) for d in deps))  # ctrl_deps, packed
    msg += key(6, 0) + varint(start) + key(7, 0) + varint(dur)
    for a in attrs:
        msg += length_delimited(10, a)
    return msg


def metadata():
    # GlobalMetadata: version (1), one attribute (2); a double, to exercise a fixed64 field.
    a = length_delimited(1, b"schema") + key(3, 1) + struct.pack("<d", 0.3)
    return length_delimited(1, b"0.0.4") + length_delimited(2, a)


def comm(kind, peer_attr, peer, size):
    return [attr_int(peer_attr, peer), attr_int("comm_size", size), attr_bool("is_cpu_op", False)] if kind else []


def rank_nodes(rank):
    act = 64 * 1024
    nodes = []
    t = 0
    nid = 0

    def add(name, ntype, dur, attrs=()):
        nonlocal t, nid
        nid += 1
        deps = [nid - 1] if nid > 1 else []
        nodes.append(node(nid, name, ntype, deps, t, dur, attrs))
        t += dur

    if rank == 0:
        for mb in range(2):
            add(f"forward_mb{mb}", COMP, 1000, [attr_int("num_ops", 10**9)])
            add(f"send_act_mb{mb}", SEND, 60, comm(True, "comm_dst", 1, act))
        for mb in range(2):
            add(f"recv_grad_mb{mb}", RECV, 2500, comm(True, "comm_src", 1, act))
            add(f"backward_mb{mb}", COMP, 2000)
    else:
        for mb in range(2):
            add(f"recv_act_mb{mb}", RECV, 1060, comm(True, "comm_src", 0, act))
            add(f"forward_mb{mb}", COMP, 1000)
            add(f"backward_mb{mb}", COMP, 2000)
            add(f"send_grad_mb{mb}", SEND, 60, comm(True, "comm_dst", 0, act))
    add("all_reduce_grads", COLL, 800, [attr_int("comm_type", ALL_REDUCE), attr_int("comm_size", 1 << 20)])
    add("all_gather_params", COLL, 300, [attr_int("comm_type", ALL_GATHER), attr_int("comm_size", 256 << 10)])
    add("load_batch", MEM_LOAD, 100)
    add("optimizer_step", COMP, 500)
    return nodes


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "two-rank")
    os.makedirs(out, exist_ok=True)
    for rank in range(2):
        data = bytearray()
        for msg in [metadata()] + rank_nodes(rank):
            data += varint(len(msg)) + msg
        with open(os.path.join(out, f"rank.{rank}.et"), "wb") as f:
            f.write(data)
    print(f"wrote {out}/rank.0.et, rank.1.et")


if __name__ == "__main__":
    main()
