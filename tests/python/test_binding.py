#!/usr/bin/env python3
"""The Python binding end to end: keys, views, a Publisher over a tiny model
trained with Adam, store inspection, the engine adapter patching tensors in
place bit-exactly, its undo on a bad patch, and errors raising with the
library's message.

Plain script (ctest runs it): exit 0 pass, 1 fail, 77 skip (no torch or
safetensors). STITCH_SEED=N replays a run; the seed is printed.
"""
import os
import shutil
import sys
import tempfile

import harness

SEED = harness.start()  # exits 77 without torch or safetensors
import torch
from safetensors.torch import load_file
from harness import check, raises, raw

import stitch
from stitch import (DigestMismatch, EngineAdapter, Publisher, StitchError,
                    tensors_for)


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(64, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.up = torch.nn.Linear(32, 64)
        self.down = torch.nn.Linear(64, 32)
        self.head = torch.nn.Linear(32, 64, bias=False)
        # Persistent and never trained: the view carries it unchanged, so
        # no patch block ever covers it (the forced digest mismatch below).
        self.register_buffer("pos", torch.linspace(-1, 1, 32))

    def forward(self, x):
        h = self.norm(self.emb(x) + self.pos)
        return self.head(h + self.down(torch.relu(self.up(h))))


def train(model, opt, steps=2):
    for _ in range(steps):
        x = torch.randint(0, 64, (4, 8))
        loss = torch.nn.functional.cross_entropy(
            model(x).reshape(-1, 64), x.roll(1, 1).reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()


def view_file(store, v):
    return os.path.join(store, "publisher", "view-%020d.safetensors" % v)


def same_as_view(tensors, store, v, what):
    ref = load_file(view_file(store, v))
    check(sorted(ref) == sorted(tensors),
          "%s: names differ: %s" % (what, sorted(set(ref) ^ set(tensors))))
    bad = [n for n in ref if n in tensors and
           (ref[n].dtype != tensors[n].dtype or
            not torch.equal(raw(ref[n]), raw(tensors[n])))]
    check(not bad, "%s: tensors differ from the trainer's view: %s" % (what, bad))


def test_keys(tmp):
    k = stitch.keygen(os.path.join(tmp, "tr"))
    pub = stitch.PublicKey.read(os.path.join(tmp, "tr.pub"))
    check(pub == k.public, "keys: the .pub file is not the generated key")
    sk = stitch.SecretKey.read(os.path.join(tmp, "tr.key"))
    check(sk.public == k.public, "keys: the .key file's public half differs")
    check(oct(os.stat(os.path.join(tmp, "tr.key")).st_mode & 0o777) == "0o600",
          "keys: tr.key is not 0600")
    raises(lambda: stitch.keygen(os.path.join(tmp, "tr")), "EEXISTS", "tr.key",
           "keygen over an existing key")
    bad = os.path.join(tmp, "bad.pub")
    with open(bad, "w") as f:
        f.write("not a key\n")
    raises(lambda: stitch.PublicKey.read(bad), "EFORMAT", "bad.pub",
           "reading a malformed public key")
    raises(lambda: stitch.SecretKey.read(os.path.join(tmp, "none.key")),
           "ENOTFOUND", "none.key", "reading a missing secret key")


def test_views(tmp, model):
    from stitch.publisher import MasterImage, named_tensors
    items = named_tensors(model)
    img = MasterImage(items)
    ck = img.fill(items)
    check(len(ck) == len(items), "views: the master image holds %d tensors, "
          "not %d" % (len(ck), len(items)))
    for kind in ("bf16", "fp8", "nvfp4"):
        out = os.path.join(tmp, "v-%s.safetensors" % kind)
        stitch.build_view(ck, out, kind)
        v = load_file(out)
        for name, t in items:
            if kind == "bf16" or t.dim() < 2 or \
                    (kind == "nvfp4" and t.shape[-1] % 16):
                check(torch.equal(raw(v[name]), raw(t.to(torch.bfloat16))),
                      "views: %s of %s is not torch's bf16 cast" % (kind, name))
            elif kind == "fp8":
                check(v[name].dtype == torch.float8_e4m3fn and
                      name + "_scale" in v, "views: fp8 %s layout" % name)
            else:
                check(v[name].dtype == torch.uint8 and
                      v[name].shape[-1] == t.shape[-1] // 2 and
                      v[name + "_scale"].dtype == torch.float8_e4m3fn and
                      v[name + "_scale_2"].shape == (1,),
                      "views: nvfp4 %s layout" % name)
    # A scale-stable rebuild from the same masters changes no scale.
    prev = stitch.Checkpoint.open(os.path.join(tmp, "v-fp8.safetensors"))
    st = stitch.build_view(ck, os.path.join(tmp, "v-fp8b.safetensors"), "fp8",
                           prev=prev)
    check(st["scales_changed"] == 0, "views: %d scales moved with no step"
          % st["scales_changed"])
    raises(lambda: stitch.Checkpoint.parse(b"\x40\x00\x00\x00\x00\x00\x00\x00{}"),
           "ETRUNCATED", "", "parsing a truncated buffer")
    raises(lambda: stitch.build_view(ck, os.path.join(tmp, "x.st"), "bf16",
                                     prev=prev),
           "EMISMATCH", "previous view is fp8", "a bf16 view with an fp8 prev")


def test_publish_and_engine(tmp, kind, versions):
    store = os.path.join(tmp, "store-" + kind)
    key, pub = os.path.join(tmp, "tr.key"), os.path.join(tmp, "tr.pub")
    model = Tiny()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    # fp8 publishes with fastest=True (RANS deltas, docs/codec.md): the
    # option reaches stitch_publish, and the engines apply as exactly. (Tiny's
    # tensors are below RANS's 2^12 symbols; test_store publishes RANS.)
    p = Publisher(store, key, view=kind, keep=8, fastest=(kind == "fp8"))
    check(p.opts.sparse_mode == (2 if kind == "fp8" else 0),
          "%s: sparse mode %d" % (kind, p.opts.sparse_mode))
    engine = lagging = None
    for v in range(1, versions + 1):
        train(model, opt)
        r = p.publish(model)
        check(r.version == v, "%s: published version %d, want %d"
              % (kind, r.version, v))
        check(r.stall_s > 0 and r.stall_s >= r.copy_s + r.view_s,
              "%s: stall %.6f s is not the sum of its parts" % (kind, r.stall_s))
        check(r.objects[0]["kind"] == ("anchor" if v == 1 else "delta"),
              "%s v%d: first object is %s" % (kind, v, r.objects[0]["kind"]))
        if engine is None:
            tensors = tensors_for(store, pub)
            engine = EngineAdapter(tensors, store, pub)
            check(engine.version == 0, "%s: zeroed tensors adopted as v%d"
                  % (kind, engine.version))
        pause = engine.apply()
        check(engine.version == v and pause > 0,
              "%s: engine at v%d after apply, want v%d" % (kind, engine.version, v))
        same_as_view(tensors, store, v, "%s v%d in place" % (kind, v))
        if v == 1:  # a second engine that lags, then catches up in one go
            lag_t = {n: t.clone() for n, t in tensors.items()}
            lagging = EngineAdapter(lag_t, store, pub)
            check(lagging.version == 1, "%s: a copy of v1 was adopted as v%d"
                  % (kind, lagging.version))
    lagging.apply()
    check(lagging.last_stats["steps"] == versions - 1,
          "%s: the lagging engine took %d steps, want %d"
          % (kind, lagging.last_stats["steps"], versions - 1))
    same_as_view(lag_t, store, versions, "%s lagging engine" % kind)
    check(engine.apply() == 0 or engine.last_stats["steps"] == 0,
          "%s: applying the held version did work" % kind)
    return store, model, opt, p, engine, tensors


def inspect_store(tmp, store):
    pub = os.path.join(tmp, "tr.pub")
    with stitch.Store(store, pub) as s:
        check(s.latest() == 3 and len(s) == 3,
              "store: latest %d, %d versions" % (s.latest(), len(s)))
        v2 = s.find(2)
        check(v2.parent == 1 and v2.objects()[0]["kind"] == "delta",
              "store: v2 has parent %d and a %s" % (v2.parent, v2.objects()[0]["kind"]))
        names = [t[0] for t in v2.tensors()]
        check("pos" in names and "up.weight" in names, "store: v2 names %s" % names)
        check(s.find(9) is None, "store: found a version never published")
        plan = s.plan(0, None, 3)
        check(plan and plan[0][0] == 1 and plan[-1][0] == 3,
              "store: plan from nothing to 3 is %s" % plan)
        raises(lambda: s.plan(3, s.find(3).id, 2), "EROLLBACK", "",
               "a plan backwards")
    other = stitch.SecretKey.generate()
    raises(lambda: stitch.Store(store, other.public), "ESWARM", store,
           "opening a store with another swarm's key")


def test_undo(tmp, store, model, opt, p, engine, tensors):
    pub = os.path.join(tmp, "tr.pub")
    v = engine.version
    train(model, opt)
    p.publish(model)
    # The engine's "pos" is altered while it claims version v: the patch
    # leaves it alone, so the digest check must catch it and put back the
    # blocks it patched.
    good = tensors["pos"].clone()
    tensors["pos"].view(torch.uint8)[3] ^= 0x40
    before = {n: t.clone() for n, t in tensors.items()}
    try:
        engine.apply()
        check(False, "undo: a corrupted engine tensor was not caught")
    except DigestMismatch as e:
        check(e.tensors == ["pos"] and "'pos'" in str(e),
              "undo: mismatch names %s: %s" % (e.tensors, e))
    check(engine.version == v, "undo: engine claims v%d after a failed apply"
          % engine.version)
    bad = [n for n in before if not torch.equal(raw(before[n]), raw(tensors[n]))]
    check(not bad, "undo: tensors not restored: %s" % bad)
    tensors["pos"].copy_(good)
    engine.apply()
    same_as_view(tensors, store, v + 1, "undo: apply after the repair")

    # A chunk whose bytes changed in the store is refused before any byte of
    # the engine's tensors is touched.
    train(model, opt)
    p.publish(model)
    with stitch.Store(store, pub) as s:
        (sv, sobj, _), = s.plan(engine.version, engine.id, s.latest())
        h = s.find(sv).chunks(sobj)[-1]
    newest = os.path.join(store, "chunks", h[:2], h)
    data = open(newest, "rb").read()
    os.chmod(newest, 0o644)
    with open(newest, "r+b") as f:
        f.seek(len(data) // 2)
        f.write(bytes([data[len(data) // 2] ^ 1]))
    before = {n: t.clone() for n, t in tensors.items()}
    raises(engine.apply, "ECHECKSUM", "version %d" % (v + 2),
           "applying a chunk with other bytes")
    check(all(torch.equal(raw(before[n]), raw(tensors[n])) for n in before),
          "undo: a refused chunk changed the tensors")
    with open(newest, "wb") as f:
        f.write(data)
    engine.apply()
    same_as_view(tensors, store, v + 2, "undo: apply after the chunk repair")

    # Layout mismatches are refused before anything is patched.
    wrong = dict(tensors)
    wrong["pos"] = torch.zeros(32, dtype=torch.float32)
    raises(lambda: EngineAdapter(wrong, store, pub, version=1).apply(),
           "EMISMATCH", "'pos'", "an engine tensor of the wrong dtype")
    raises(lambda: engine.apply(2), "EROLLBACK", "", "applying an older version")


def test_errors_and_hook(tmp):
    key = os.path.join(tmp, "tr.key")
    raises(lambda: Publisher(os.path.join(tmp, "s"), os.path.join(tmp, "no.key")),
           "ENOTFOUND", "no.key", "a Publisher with a missing key")
    try:
        Publisher(os.path.join(tmp, "s"), key, view="int4")
        check(False, "a Publisher with view int4 was accepted")
    except ValueError as e:
        check("bf16" in str(e), "view error does not list the kinds: %s" % e)
    store = os.path.join(tmp, "store-hook")
    model = Tiny()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    seen = []
    handle = Publisher(store, key).hook(opt, model, on_publish=seen.append)
    train(model, opt, steps=2)
    check([r.version for r in seen] == [1, 2], "hook: published %s"
          % [r.version for r in seen])
    handle.remove()
    # A non-finite master cannot be quantized: refused, nothing published,
    # no file left behind.
    store = os.path.join(tmp, "store-nan")
    p = Publisher(store, key, view="fp8")
    p.publish(model)
    with torch.no_grad():
        model.up.weight[0, 0] = float("nan")
    raises(lambda: p.publish(model), "EINVAL", "up.weight",
           "publishing a NaN master")
    with stitch.Store(store, os.path.join(tmp, "tr.pub")) as s:
        check(s.latest() == 1, "a failed publish moved latest to %d" % s.latest())
    left = [f for f in os.listdir(os.path.join(store, "publisher"))
            if not f.startswith("view-") and not f.startswith("anchor-")]
    check(not left, "a failed publish left files: %s" % left)


def test_background(tmp):
    """background=True: publish() returns once the masters are copied, so
    the model may change at once without touching the version; the hook's
    versions come in order; a failure raises at the next call."""
    key = os.path.join(tmp, "tr.key")
    store = os.path.join(tmp, "store-bg")
    model = Tiny()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    p = Publisher(store, key, background=True)
    for v in range(1, 4):
        train(model, opt)
        snap = {n: t.clone() for n, t in model.state_dict().items()}
        job = p.publish(model)
        with torch.no_grad():  # the next step's update, before the publish ends
            for t in model.parameters():
                t.add_(1.0)
        r = job.result()
        check(r.version == v and r.background,
              "background: got version %d (background %s), want %d"
              % (r.version, r.background, v))
        check(r.stall_s >= r.copy_s and r.view_s > 0 and r.publish_s > 0,
              "background v%d: stall %.6f, copy %.6f, view %.6f, publish %.6f"
              % (v, r.stall_s, r.copy_s, r.view_s, r.publish_s))
        same_as_view({n: t.to(torch.bfloat16) for n, t in snap.items()},
                     store, v, "background v%d: the view of the copied masters"
                     % v)
        model.load_state_dict(snap)
    seen = []
    handle = p.hook(opt, model, on_publish=seen.append)
    train(model, opt, steps=2)
    check(p.wait().version == 5, "background hook: last version is not 5")
    check([r.version for r in seen] == [4, 5], "background hook: published %s"
          % [r.version for r in seen])
    handle.remove()
    p.close()
    # A failure in the worker: the next wait() raises it, nothing moves,
    # and the publisher goes on once the masters are fixed.
    store = os.path.join(tmp, "store-bg-nan")
    p = Publisher(store, key, view="fp8", background=True)
    p.publish(model)
    with torch.no_grad():
        saved = model.up.weight[0, 0].item()
        model.up.weight[0, 0] = float("nan")
    p.publish(model)
    raises(p.wait, "EINVAL", "up.weight", "background: publishing a NaN master")
    with torch.no_grad():
        model.up.weight[0, 0] = saved
    check(p.publish(model).result().version == 2,
          "background: no version 2 after the failed publish")
    p.close()


def main():
    tmp = tempfile.mkdtemp(prefix="stitch-py-")
    try:
        test_keys(tmp)
        test_views(tmp, Tiny())
        store, model, opt, p, engine, tensors = \
            test_publish_and_engine(tmp, "bf16", 3)
        inspect_store(tmp, store)
        test_undo(tmp, store, model, opt, p, engine, tensors)
        for kind in ("fp8", "nvfp4"):
            test_publish_and_engine(tmp, kind, 3)
        test_errors_and_hook(tmp)
        test_background(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return harness.finish(SEED)


if __name__ == "__main__":
    sys.exit(main())
