#!/usr/bin/env python3
"""e2e_trainer.py: the trainer side of tests/e2e_trainer_engine.sh.

  e2e_trainer.py --store S --key K.key --steps N --out JSON
                 [--views DIR] [--pause-after V --go FILE]

A training loop of a few lines: a 2-layer MLP (~100k parameters), Adam at
lr 1e-3 (so the BF16 view changes every step), and the Publisher's one-line
optimizer hook publishing a BF16 view into S after every step. For the
check it records, per version, what the trainer served: the view's digest
and every tensor's digest (computed with the binding over the view's
bytes), copies the view file to DIR/view-<v>.safetensors, and checks the
view is exactly torch's BF16 cast of the FP32 masters. With --pause-after V
it stops after publishing version V until FILE exists (so the test can
apply a version mid-run). Prints "published V" per version, after
rewriting JSON with what it served so far.
"""
import argparse
import json
import os
import shutil
import time

import torch
from safetensors.torch import load_file

import stitch

ap = argparse.ArgumentParser()
ap.add_argument("--store", required=True)
ap.add_argument("--key", required=True)
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--out", required=True)
ap.add_argument("--views", default=None)
ap.add_argument("--pause-after", type=int, default=0)
ap.add_argument("--go", default=None)
a = ap.parse_args()

torch.manual_seed(1234)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(),
                            torch.nn.Linear(256, 128))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
record = {"params": sum(p.numel() for p in model.parameters()),
          "versions": {}}
prev_view = {}


def save():
    with open(a.out + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(a.out + ".tmp", a.out)


def served(r):
    """What version r.version serves, read back from the store's copy of
    the view the Publisher built (proto/store.md publisher/view-<v>)."""
    path = os.path.join(a.store, "publisher",
                        "view-%020d.safetensors" % r.version)
    if a.views:
        os.makedirs(a.views, exist_ok=True)
        shutil.copyfile(path, os.path.join(a.views,
                                           "view-%d.safetensors" % r.version))
    with stitch.Checkpoint.open(path) as ck:
        view_digest = ck.view_digest()
    tensors = load_file(path)
    masters = model.state_dict()
    digests, changed, total, cast_ok = {}, 0, 0, True
    for name, t in sorted(tensors.items()):
        t = t.contiguous()
        digests[name] = stitch.tensor_digest(
            "BF16", list(t.shape), t.data_ptr(), t.numel() * t.element_size())
        want = masters[name].detach().to(torch.bfloat16).contiguous()
        if not torch.equal(want.view(torch.int16), t.view(torch.int16)):
            cast_ok = False
        if name in prev_view:
            changed += int((prev_view[name].view(torch.int16) !=
                            t.view(torch.int16)).sum())
        total += t.numel()
        prev_view[name] = t
    record["versions"][str(r.version)] = {
        "view_digest": view_digest, "tensor_digests": digests,
        "bf16_cast_exact": cast_ok,
        "changed_fraction": changed / total if r.version > 1 else 1.0,
        "stall_s": r.stall_s, "view_bytes": r.view_bytes,
        "object_bytes": sum(o["bytes"] for o in r.objects),
        "objects": [o["kind"] for o in r.objects]}
    save()
    print("published %d" % r.version, flush=True)
    if r.version == a.pause_after and a.go:
        while not os.path.exists(a.go):
            time.sleep(0.05)


# The training loop: the one added line is pub.hook(...).
pub = stitch.Publisher(a.store, a.key, view="bf16")
pub.hook(opt, model, on_publish=served)
for step in range(a.steps):
    x = torch.randn(32, 256)
    loss = (model(x) - x[:, :128]).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()                                    # -> a new version
pub.close()
save()
