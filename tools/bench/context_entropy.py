#!/usr/bin/env python3
"""Empirical conditional entropies of a trajectory's change masks and
signs, to size a context before coding it (docs/codec.md, "Change history").

For each step t >= 2 it prints H(mask), H(mask | class), H(mask | class,
last step's change) and H(sign), H(sign | last step's direction), in KB,
where class = octaves below the tensor's largest exponent (capped at 15),
as the coder's contexts use it.

    python3 tools/bench/context_entropy.py TRAJ_DIR [--steps N] [--view bf16|nvfp4]

TRAJ_DIR holds step_0000.safetensors .. (stitch-synth or tools/trajectory.py).
With --view nvfp4 the symbols are the E2M1 nibbles of the U8 tensors (the
scales are left out: they rarely change), the class is the nibble's
exponent below the tensor's largest, and it also prints H(mask | value),
the finest context a nibble's own base value gives, and the bits per
change of the best line with a sign bit added, which is what an
int32 + value layout's 5x (8 bits a change) would have to beat.
Needs numpy (tools/setup-python.sh installs it).
"""
import argparse
import json
import struct

import numpy as np


def load(path, view):
    """The view's symbols by tensor: BF16 elements, or E2M1 nibbles (low
    nibble first) of the U8 tensors."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    want = "BF16" if view == "bf16" else "U8"
    for name, v in header.items():
        if name == "__metadata__" or v["dtype"] != want:
            continue
        s, e = v["data_offsets"]
        if view == "bf16":
            out[name] = np.frombuffer(raw[base + s:base + e], dtype=np.uint16)
        else:
            b = np.frombuffer(raw[base + s:base + e], dtype=np.uint8)
            out[name] = np.stack([b & 15, b >> 4], axis=1).reshape(-1)
    return out


# (width, mantissa bits, exponent bits) of each view's symbols.
FORMATS = {"bf16": (16, 7, 8), "nvfp4": (4, 1, 2)}


def key(v, w):
    """Order-preserving key of W-bit float patterns (proto/delta.md)."""
    v = v.astype(np.int64)
    top, mask = 1 << (w - 1), (1 << w) - 1
    return np.where(v & top, v ^ mask, v ^ top)


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
    ap.add_argument("--view", choices=sorted(FORMATS), default="bf16")
    a = ap.parse_args()
    w, mb, eb = FORMATS[a.view]
    views = [load(f"{a.traj}/step_{i:04d}.safetensors", a.view)
             for i in range(a.steps + 1)]
    if not views[0]:
        raise SystemExit(f"context_entropy: no {a.view} tensors in {a.traj}")
    for t in range(2, a.steps + 1):
        mask, cls, val, hist, sign = [], [], [], [], []
        for name in views[t]:
            ka, kb, kc = (key(views[s][name], w) for s in (t - 2, t - 1, t))
            old = views[t - 1][name].astype(np.int64)
            e = (old >> mb) & ((1 << eb) - 1)
            cls.append(np.clip(int(e.max()) - e, 0, 15))
            val.append(old & ((1 << (w - 1)) - 1))  # the value without its sign
            hist.append(np.sign(kb - ka) + 1)  # 0 down, 1 same, 2 up
            mask.append((kc != kb).astype(np.int64))
            sign.append(((np.sign(kc - kb) + 1) // 2).astype(np.int64))
        m, c, v, h, s = (np.concatenate(x) for x in (mask, cls, val, hist, sign))
        ch = m == 1
        k = int(ch.sum())
        kb = lambda bits: f"{bits / 8 / 1e3:.1f} KB"
        line = (f"step {t}: n={len(m)} p={m.mean():.4f} "
                f"H(mask)={kb(entropy_bits(m))} "
                f"H(mask|class)={kb(cond_entropy_bits(m, c))} "
                f"H(mask|class,hist)={kb(cond_entropy_bits(m, c * 3 + h))} ")
        if a.view == "nvfp4":
            best = cond_entropy_bits(m, v * 3 + h)
            line += (f"H(mask|value)={kb(cond_entropy_bits(m, v))} "
                     f"H(mask|value,hist)={kb(best)} ")
        line += (f"H(sign)={kb(entropy_bits(s[ch]))} "
                 f"H(sign|hist)={kb(cond_entropy_bits(s[ch], h[ch]))} "
                 f"changed-again={(h[ch] != 1).mean():.3f} "
                 f"(base rate {(h != 1).mean():.4f})")
        if a.view == "nvfp4" and k > 0:
            line += (f" bits/change: mask|value,hist {best / k:.2f}"
                     f" + sign|hist {cond_entropy_bits(s[ch], h[ch]) / k:.2f}")
        print(line)


if __name__ == "__main__":
    main()
