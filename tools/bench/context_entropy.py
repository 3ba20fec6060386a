#!/usr/bin/env python3
"""Empirical conditional entropies of a BF16 trajectory's change masks and
signs, to size a context before coding it (docs/codec.md, "Change history").

For each step t >= 2 it prints H(mask), H(mask | class), H(mask | class,
last step's change) and H(sign), H(sign | last step's direction), in KB,
where class = octaves below the tensor's largest exponent (capped at 15),
as the coder's contexts use it.

    python3 tools/bench/context_entropy.py TRAJ_DIR [--steps N]

TRAJ_DIR holds step_0000.safetensors .. (stitch-synth or tools/trajectory.py,
BF16 view). Needs numpy (tools/setup-python.sh installs it).
"""
import argparse
import json
import struct

import numpy as np


def load_bf16(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, v in header.items():
        if name == "__metadata__" or v["dtype"] != "BF16":
            continue
        s, e = v["data_offsets"]
        out[name] = np.frombuffer(raw[base + s:base + e], dtype=np.uint16)
    return out


def key(v):
    """Order-preserving key of BF16 bit patterns (proto/delta.md)."""
    v = v.astype(np.int64)
    return np.where(v & 0x8000, v ^ 0xFFFF, v ^ 0x8000)


def entropy_bits(x):
    c = np.bincount(x).astype(np.float64)
    c = c[c > 0]
    return float(-(c * np.log2(c / c.sum())).sum())


def cond_entropy_bits(x, ctx):
    return sum(entropy_bits(x[ctx == c]) for c in np.unique(ctx))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traj")
    ap.add_argument("--steps", type=int, default=4)
    a = ap.parse_args()
    views = [load_bf16(f"{a.traj}/step_{i:04d}.safetensors")
             for i in range(a.steps + 1)]
    for t in range(2, a.steps + 1):
        mask, cls, hist, sign = [], [], [], []
        for name in views[t]:
            ka, kb, kc = (key(views[s][name]) for s in (t - 2, t - 1, t))
            e = (views[t - 1][name] >> 7) & 0xFF
            cls.append(np.clip(int(e.max()) - e.astype(np.int64), 0, 15))
            hist.append(np.sign(kb - ka) + 1)  # 0 down, 1 same, 2 up
            mask.append((kc != kb).astype(np.int64))
            sign.append(((np.sign(kc - kb) + 1) // 2).astype(np.int64))
        m, c, h, s = (np.concatenate(x) for x in (mask, cls, hist, sign))
        ch = m == 1
        kb = lambda bits: f"{bits / 8 / 1e3:.1f} KB"
        print(f"step {t}: n={len(m)} p={m.mean():.4f} "
              f"H(mask)={kb(entropy_bits(m))} "
              f"H(mask|class)={kb(cond_entropy_bits(m, c))} "
              f"H(mask|class,hist)={kb(cond_entropy_bits(m, c * 3 + h))} "
              f"H(sign)={kb(entropy_bits(s[ch]))} "
              f"H(sign|hist)={kb(cond_entropy_bits(s[ch], h[ch]))} "
              f"changed-again={(h[ch] != 1).mean():.3f} "
              f"(base rate {(h != 1).mean():.4f})")


if __name__ == "__main__":
    main()
