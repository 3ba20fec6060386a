#!/usr/bin/env python3
"""publish_stall.py: the training stall of stitch.Publisher, on the training
thread against background=True, measured in one run (docs/python.md).

  STITCH_LIB=build/lib/libstitch.so PYTHONPATH=python \\
    python3 tools/bench/publish_stall.py [--params 25e6] [--steps 8] [--view bf16]

An MLP of about PARAMS FP32 parameters trains with Adam at lr 1e-6 on
random batches; each step publishes its view, once with each mode, each
into its own store. Per mode it prints the mean training step (forward,
backward, optimizer), the mean stall inside publish() (for background:
waiting for the previous publish plus the copy), the mean view and
publish times (on the worker in background), and the wall time of all
steps. Timings on a shared machine move between runs; compare the modes
within one.
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch

import stitch


def mlp(params):
    width = 1024
    layers = max(1, int(params // (2 * width * width)))
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.GELU(),
                 torch.nn.Linear(width, width)]
    return torch.nn.Sequential(*mods)


def run(mode, args, work):
    torch.manual_seed(0)
    model = mlp(args.params)
    opt = torch.optim.Adam(model.parameters(), lr=1e-6)
    store = os.path.join(work, "store-" + mode)
    pub = stitch.Publisher(store, os.path.join(work, "tr.key"), view=args.view,
                           background=(mode == "background"))
    train_s, stalls, results = [], [], []
    t_all = time.perf_counter()
    for _ in range(args.steps + 1):  # step 0 publishes the anchor
        t0 = time.perf_counter()
        loss = model(torch.randn(64, 1024)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        r = pub.publish(model)
        stalls.append(time.perf_counter() - t1)
        train_s.append(t1 - t0)
        results.append(r)
    pub.close()
    wall = time.perf_counter() - t_all
    done = [r.result() if hasattr(r, "result") else r for r in results]
    n = sum(p.numel() for p in model.parameters())
    deltas = done[1:]
    return {"mode": mode, "params": n, "wall": wall,
            "train": statistics.mean(train_s[1:]),
            "stall": statistics.mean(stalls[1:]),
            "view": statistics.mean(r.view_s for r in deltas),
            "publish": statistics.mean(r.publish_s for r in deltas),
            "versions": done[-1].version}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=float, default=25e6)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--view", default="bf16", choices=("bf16", "fp8", "nvfp4"))
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="stitch-stall-")
    try:
        stitch.keygen(os.path.join(work, "tr"))
        rows = [run(m, args, work) for m in ("thread", "background")]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("# %s view, %d params, %d steps after the anchor, torch %s, %d threads"
          % (args.view, rows[0]["params"], args.steps, torch.__version__,
             torch.get_num_threads()))
    print("%-10s %8s %8s %8s %8s %8s %8s" % ("mode", "train_s", "stall_s",
                                            "view_s", "pub_s", "wall_s",
                                            "versions"))
    for r in rows:
        print("%-10s %8.3f %8.3f %8.3f %8.3f %8.2f %8d"
              % (r["mode"], r["train"], r["stall"], r["view"], r["publish"],
                 r["wall"], r["versions"]))
    print("stall background / thread: %.2f; wall: %.2f"
          % (rows[1]["stall"] / rows[0]["stall"], rows[1]["wall"] / rows[0]["wall"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
