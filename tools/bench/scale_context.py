#!/usr/bin/env python3
"""What the base's NVFP4 block scales would tell the group flags of the
nibble tensors (docs/codec.md, "Not at the bound yet").

A group of 16 nibbles in SPARSE/SPARSEK is one NVFP4 scale block. For
each U8 tensor X with a companion X_scale (E4M3, one per 16 elements),
and each step t of the ones named, it counts the group flags (does any
of the 16 nibbles change from step t-1 to t) and prints their empirical
entropy per tensor, summed, in bytes: with no context, given SPARSE's
class bucket (2 log2 of the group's sum of 2^(3 - exponent)), given the
base's block scale (log2 relative to the tensor's median, in half
octaves, clamped to +-4 octaves), and given both. No model cost is
counted: a coder must still learn each context's rate.

    python3 tools/bench/scale_context.py DIR [DIR ...] [--steps 2,3]

DIR holds step_0000.safetensors .. (stitch-synth --view nvfp4 or
tools/trajectory.py --view nvfp4). Needs numpy.
"""
import argparse
import json
import math
import struct

import numpy as np


def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        out[k] = (v["dtype"], np.frombuffer(b[8 + n + s:8 + n + e], dtype=np.uint8))
    return out


def e4m3(code):
    code = code.astype(np.int32)
    e, m = (code >> 3) & 15, code & 7
    return np.where(e > 0, (1 + m / 8) * 2.0 ** (e - 7), m / 8 * 2.0 ** -6)


def cond_bits(ctx, flag):
    """Sum over contexts of n h(k / n), in bits."""
    _, inv = np.unique(ctx, return_inverse=True)
    ones = np.bincount(inv, weights=flag)
    alls = np.bincount(inv)
    bits = 0.0
    for k, n in zip(ones, alls):
        for c in (k, n - k):
            if c:
                bits += c * math.log2(n / c)
    return bits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--steps", default="2,3")
    a = ap.parse_args()
    tot = {"none": 0.0, "class": 0.0, "scale": 0.0, "class+scale": 0.0}
    groups = changed = 0
    for d in a.dirs:
        for t in (int(x) for x in a.steps.split(",")):
            base = load(f"{d}/step_{t - 1:04d}.safetensors")
            new = load(f"{d}/step_{t:04d}.safetensors")
            for name, (dt, x) in base.items():
                if dt != "U8" or name + "_scale" not in base:
                    continue
                y = new[name][1]
                na = np.stack([x & 15, x >> 4], 1).reshape(-1)
                nb = np.stack([y & 15, y >> 4], 1).reshape(-1)
                flag = (na != nb).reshape(-1, 16).any(1)
                if not flag.any():
                    continue
                w = (2 ** (3 - ((na >> 1) & 3))).reshape(-1, 16).sum(1)
                cls = np.floor(np.log2(w) * 2).astype(int)
                sc = np.log2(np.maximum(e4m3(base[name + "_scale"][1]), 2.0 ** -9))
                scb = np.clip(np.round((sc - np.median(sc)) * 2), -8, 8).astype(int) + 8
                if scb.size != flag.size:
                    raise SystemExit(f"{name}: {scb.size} scales for {flag.size} groups")
                tot["none"] += cond_bits(np.zeros_like(cls), flag)
                tot["class"] += cond_bits(cls, flag)
                tot["scale"] += cond_bits(scb, flag)
                tot["class+scale"] += cond_bits(cls * 32 + scb, flag)
                groups += flag.size
                changed += int(flag.sum())
    print(f"{groups} groups, {changed} changed; group flags, bytes: "
          + ", ".join(f"{k} {v / 8:,.0f}" for k, v in tot.items()))


if __name__ == "__main__":
    main()
