#!/usr/bin/env python3
"""The engine adapter's two phases (docs/python.md "Two phases"): prepare()
writes nothing into the tensors; prepare() then commit() is bit-exact
against the trainer's view, one step or several; a wrong base is refused
with the tensors untouched; tensors that moved since prepare() are refused
at commit(); a failure midway through commit() restores the tensors
exactly; commit() without prepare() or twice is refused; a prepared version
the store moved past still commits; apply() is the two in a row; nothing
uses Tensor.nbytes (missing in torch 1.13). All of it twice: with the
tensors read in place, and through host mirrors (host_mirror=True, the
path of tensors on a GPU, run here on CPU tensors), where the mirrors
follow each commit without a copy from the tensors and refresh after an
in-place write.

Plain script (ctest runs it): exit 0 pass, 1 fail, 77 skip (no torch or
safetensors). STITCH_SEED=N replays a run; the seed is printed.
"""
import ctypes
import os
import shutil
import sys
import tempfile

import harness

SEED = harness.start()  # exits 77 without torch or safetensors
import torch
from safetensors.torch import load_file
from harness import check, raises, raw

from stitch import (DigestMismatch, EngineAdapter, Publisher, StitchError,
                    tensors_for)

MIRROR = {"host_mirror": None, "scatter": "auto"}  # the adapters' options


def snapshot(tensors):
    return {n: raw(t).clone() for n, t in tensors.items()}


def changed(tensors, snap):
    """Names of the tensors whose bytes differ from SNAP."""
    return [n for n in snap if not torch.equal(raw(tensors[n]), snap[n])]


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(64, 32)
        self.up = torch.nn.Linear(32, 96)
        self.down = torch.nn.Linear(96, 32)
        self.head = torch.nn.Linear(32, 64, bias=False)
        # Never trained: no patch block covers it, so a wrong byte here is
        # caught only by the digests.
        self.register_buffer("pos", torch.linspace(-1, 1, 32))

    def forward(self, x):
        h = self.emb(x) + self.pos
        return self.head(h + self.down(torch.relu(self.up(h))))


class Trainer:
    def __init__(self, tmp, kind, tag=""):
        self.store = os.path.join(tmp, "store-" + kind + tag)
        self.pub = os.path.join(tmp, "tr.pub")
        self.model = Tiny()
        # BF16 at 1e-5 changes a few percent of the elements per step, so
        # most tensors get lists; the coarser views need larger steps.
        self.opt = torch.optim.Adam(self.model.parameters(),
                                    lr=1e-5 if kind == "bf16" else 1e-3)
        self.p = Publisher(self.store, os.path.join(tmp, "tr.key"), view=kind,
                           keep=16)
        self.views = {}

    def step(self):
        x = torch.randint(0, 64, (4, 8))
        loss = torch.nn.functional.cross_entropy(
            self.model(x).reshape(-1, 64), x.roll(1, 1).reshape(-1))
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        v = self.p.publish(self.model).version
        # The publisher keeps only the latest view: keep each one here.
        self.views[v] = load_file(os.path.join(
            self.store, "publisher", "view-%020d.safetensors" % v))
        return v

    def view(self, v):
        return self.views[v]

    def engine(self):
        """Zeroed tensors and an adapter over them (at version 0)."""
        t = tensors_for(self.store, self.pub)
        return t, EngineAdapter(t, self.store, self.pub, **MIRROR)


def same_as_view(tr, tensors, v, what):
    ref = tr.view(v)
    bad = [n for n in ref if not torch.equal(raw(ref[n]), raw(tensors[n]))]
    check(not bad and sorted(ref) == sorted(tensors),
          "%s: tensors differ from the view of v%d: %s" % (what, v, bad))


def test_two_phases(tr, kind):
    tr.step()
    tensors, ad = tr.engine()
    ad.apply()
    check(ad.version == 1, "%s: at v%d after the first apply" % (kind, ad.version))
    v = tr.step()
    snap = snapshot(tensors)
    got = ad.prepare()
    check(got == v and ad.prepared() == v,
          "%s: prepared %s (waiting %s), want v%d" % (kind, got, ad.prepared(), v))
    check(not changed(tensors, snap),
          "%s: prepare wrote into %s" % (kind, changed(tensors, snap)))
    check(ad.version == 1, "%s: prepare moved the version to %d" % (kind, ad.version))
    st = ad.last_stats
    check(st["steps"] == 1 and st["changes"] > 0 and st["prepare_s"] > 0
          and st["undo_bytes"] > 0,
          "%s: prepare stats %s" % (kind, st))
    pause = ad.commit()
    check(pause > 0 and ad.version == v and ad.prepared() is None,
          "%s: commit paused %.6f s, at v%d" % (kind, pause, ad.version))
    check("prepare_s" in ad.last_stats and ad.last_stats["pause_s"] == pause,
          "%s: commit stats %s" % (kind, ad.last_stats))
    same_as_view(tr, tensors, v, "%s: prepare + commit" % kind)
    raises(ad.commit, "EINVAL", "nothing is prepared", "%s: a second commit" % kind)
    return tensors, ad


def test_scatter_option(tr):
    """scatter='stitch' writes every list through libstitch, in one batch
    per device (stitch_gpu_ref_apply_batch here), and 'torch' through
    none; both bit-exact; an unknown mode is refused."""
    for mode in ("stitch", "torch"):
        tensors = tensors_for(tr.store, tr.pub)
        ad = EngineAdapter(tensors, tr.store, tr.pub, scatter=mode)
        ad.apply(1)  # an anchor: whole copies, no lists
        v = tr.step()
        ad.prepare()
        lists = [c for c in ad._prepared.changes if c.pos is not None]
        batched = [c for b in ad._prepared.batches for c in b.changes]
        check(len(lists) > 0 and len(batched) ==
              (len(lists) if mode == "stitch" else 0),
              "scatter=%s: %d of %d lists batched" % (mode, len(batched),
                                                      len(lists)))
        ad.commit()
        same_as_view(tr, tensors, v, "scatter=%s" % mode)
    raises(lambda: EngineAdapter({}, tr.store, tr.pub, scatter="cuda"),
           "EINVAL", "not auto, torch or stitch", "scatter='cuda'")


def test_batch_base(tr, tensors, ad):
    """A batched commit checks every element it overwrites: an element
    written behind torch's back (its in-place count does not move) is
    refused by name, and nothing is written anywhere."""
    held, v = ad.version, tr.step()
    ad.prepare()
    b = ad._prepared.batches[0]
    c = b.changes[len(b.changes) // 2]
    flat = raw(c.target.tensor).view(torch.uint8)
    at = int(c.pos[0]) * c.w
    ctypes.memset(flat.data_ptr() + at, flat[at].item() ^ 0x40, 1)
    snap = snapshot(tensors)
    raises(ad.commit, "EBASE", "tensor '%s': apply: entry 0 " % c.target.name,
           "batch: a raw write since prepare()")
    check(not changed(tensors, snap),
          "batch: written despite a refusal: %s" % changed(tensors, snap))
    check(ad.version == held, "batch: at v%d, not v%d" % (ad.version, held))
    ctypes.memset(flat.data_ptr() + at, flat[at].item() ^ 0x40, 1)
    ad.apply()
    same_as_view(tr, tensors, v, "batch: apply after the refusal")


def test_batch_shared(tr, tensors, ad):
    """Lists on tensors that share memory (tied weights) are written one
    by one, never in one batch, where they would overlap."""
    import stitch.engine as E
    base = torch.zeros(64, dtype=torch.bfloat16)
    a = E._Target("a", base[:40])
    b = E._Target("b", base[32:])
    c = E._Target("c", torch.zeros(8, dtype=torch.bfloat16))
    one = torch.zeros(1, dtype=torch.int16)

    def change(t):
        return E._Change(t, torch.zeros(1, dtype=torch.int64), one, one, 2)

    batches, rest = ad._batches([change(a), change(b), change(c)])
    got = sorted(c.target.name for b in batches for c in b.changes)
    check(got == ["c"] and sorted(c.target.name for c in rest) == ["a", "b"],
          "batch: shared memory batched %s, one by one %s"
          % (got, [c.target.name for c in rest]))


def test_catch_up(tr, tensors, ad):
    """A lagging engine: several steps, composed into one list."""
    lag = {n: t.clone() for n, t in tensors.items()}
    lad = EngineAdapter(lag, tr.store, tr.pub, **MIRROR)
    was = lad.version
    for _ in range(3):
        v = tr.step()
    lad.prepare()
    check(lad.last_stats["steps"] >= 2,
          "catch-up: %d steps from v%d to v%d" % (lad.last_stats["steps"], was, v))
    lad.commit()
    same_as_view(tr, lag, v, "catch-up from v%d" % was)
    ad.apply()
    same_as_view(tr, tensors, v, "apply() after three versions")


def test_refusals(tr, tensors, ad):
    v = tr.step()
    # A wrong base: "pos" altered while the adapter claims its version.
    good = tensors["pos"].clone()
    tensors["pos"].view(torch.uint8)[3] ^= 0x40
    snap = snapshot(tensors)
    try:
        ad.prepare()
        check(False, "refusal: a wrong base was prepared")
    except DigestMismatch as e:
        check(e.tensors == ["pos"] and "'pos'" in str(e),
              "refusal: mismatch names %s: %s" % (e.tensors, e))
    check(not changed(tensors, snap),
          "refusal: a refused prepare changed %s" % changed(tensors, snap))
    check(ad.prepared() is None and ad.version == v - 1,
          "refusal: waiting %s at v%d" % (ad.prepared(), ad.version))
    raises(ad.commit, "EINVAL", "nothing is prepared", "commit without prepare")
    tensors["pos"].copy_(good)

    # A wrong base in every element of a tensor the step changes: its
    # blocks no longer decode (the coder's change count disagrees), which
    # is the same refusal as a digest's, naming the tensor.
    flat = tensors["emb.weight"].view(-1).view(torch.int16)
    keep = flat.clone()
    flat.add_(3)
    snap = snapshot(tensors)
    try:
        ad.prepare()
        check(False, "refusal: a wrong base in changed blocks was prepared")
    except DigestMismatch as e:
        check(e.tensors == ["emb.weight"],
              "refusal: the mismatch names %s: %s" % (e.tensors, e))
    except StitchError as e:
        check(False, "refusal: a wrong base in changed blocks gave %s: %s"
              % (e.name, e))
    check(not changed(tensors, snap),
          "refusal: a refused prepare changed %s" % changed(tensors, snap))
    flat.copy_(keep)

    # An in-place write between the phases (torch counts it).
    ad.prepare()
    tensors["up.weight"].add_(0)
    snap = snapshot(tensors)
    raises(ad.commit, "EMISMATCH", "changed since prepare()",
           "commit after an in-place write")
    check(not changed(tensors, snap) and ad.version == v - 1,
          "generation: a refused commit wrote %s, at v%d"
          % (changed(tensors, snap), ad.version))
    raises(ad.commit, "EINVAL", "nothing is prepared",
           "a commit after a refused one")
    # New storage under a tensor (its address moved).
    ad.prepare()
    tensors["head.weight"].data = tensors["head.weight"].data.clone()
    snap = snapshot(tensors)
    raises(ad.commit, "EMISMATCH", "changed since prepare()",
           "commit after a storage swap")
    check(not changed(tensors, snap), "generation: a swap was written to")
    ad.apply()  # the adapter follows the tensor object, new storage and all
    same_as_view(tr, tensors, v, "apply after the refusals")


def test_mid_commit(tr, tensors, ad):
    """A failure midway through commit(): every tensor is back as it was,
    the version too. One by one, the failure comes in the third tensor's
    write, after half of it was written; in a batch, after the batch wrote
    every list (which the undo then writes back)."""
    v = tr.step()
    ad.prepare()
    n = len(ad._prepared.changes)
    check(n >= 3, "mid-commit: only %d tensors change" % n)
    snap = snapshot(tensors)
    calls = []
    if ad._prepared.batches:
        name, real = "_sync", ad._sync

        def failing(changes):
            calls.append("batch")
            if len(calls) == 1:
                raise RuntimeError("injected after the batch")
            return real(changes)
    else:
        name, real = "_scatter", ad._scatter

        def failing(c, old=False):
            # The first listed change after two tensors or more: half of
            # it is written, then the failure.
            if not old:
                calls.append("whole" if c.pos is None else "list")
                if len(calls) >= 3 and c.pos is not None:
                    h = c.pos.numel() // 2
                    c.target.flat_bytes().view(c.val.dtype)[c.pos[:h]] = \
                        c.val[:h]
                    raise RuntimeError("injected after %d tensors"
                                       % (len(calls) - 1))
            return real(c, old)

    setattr(ad, name, failing)
    try:
        ad.commit()
        check(False, "mid-commit: the injected failure did not raise")
    except RuntimeError as e:
        check("injected" in str(e), "mid-commit: raised %s" % e)
    delattr(ad, name)
    check(len(calls) >= (1 if name == "_sync" else 3),
          "mid-commit: %d writes before the failure" % (len(calls) - 1))
    print("test_engine: mid-commit: failed after %s" % calls[:-1])
    check(not changed(tensors, snap),
          "mid-commit: not restored: %s" % changed(tensors, snap))
    check(ad.version == v - 1, "mid-commit: at v%d" % ad.version)
    ad.apply()
    same_as_view(tr, tensors, v, "apply after a failed commit")


def test_stale(tr, tensors, ad):
    """The store moves on between the phases: the commit brings the
    prepared version, and the next one is pending."""
    v = tr.step()
    ad.prepare()
    tr.step()
    ad.commit()
    check(ad.version == v and ad.pending() == v + 1,
          "stale: at v%d, pending %s" % (ad.version, ad.pending()))
    same_as_view(tr, tensors, v, "a stale prepare committed")
    # Preparing twice replaces the first; the held version prepares nothing.
    ad.prepare(v + 1)
    ad.prepare(v + 1)
    ad.commit()
    ad.prepare()
    check(ad.last_stats["steps"] == 0, "stale: the held version took steps")
    ad.commit()
    same_as_view(tr, tensors, v + 1, "stale: the next version")


def test_no_nbytes(tr):
    """torch 1.13 has no Tensor.nbytes: the adapter must not need it."""
    had = torch.Tensor.__dict__.get("nbytes")

    def missing(self):
        raise AttributeError("'Tensor' object has no attribute 'nbytes'")

    torch.Tensor.nbytes = property(missing)
    try:
        tensors, ad = tr.engine()
        ad.apply()
        tr.step()
        ad.apply()
        check(ad.last_stats["undo_bytes"] > 0, "no nbytes: nothing kept")
        same_as_view(tr, tensors, ad.version, "apply without Tensor.nbytes")
    finally:
        if had is None:
            del torch.Tensor.nbytes
        else:
            torch.Tensor.nbytes = had


def test_mirrors(tr, tensors, ad):
    """Host mirrors: a commit leaves them in step (no copy at the next
    prepare); an in-place write to a tensor makes its mirror copy again,
    and a mirror that does not match fails no digest it should pass."""
    copies = {n: t.mirror_copies for n, t in ad.targets.items()}
    check(all(t.mirror is not None for t in ad.targets.values()),
          "mirrors: not every tensor has one")
    v = tr.step()
    ad.apply()
    same_as_view(tr, tensors, v, "mirrors: apply")
    again = [n for n, t in ad.targets.items() if t.mirror_copies != copies[n]]
    check(not again, "mirrors: copied again after a commit: %s" % again)
    bad = [n for n, t in ad.targets.items()
           if not torch.equal(raw(t.mirror), raw(tensors[n]))]
    check(not bad, "mirrors: out of step after a commit: %s" % bad)
    tensors["down.weight"].mul_(1)  # an in-place write, same bytes
    v = tr.step()
    ad.apply()
    same_as_view(tr, tensors, v, "mirrors: apply after an in-place write")
    check(ad.targets["down.weight"].mirror_copies ==
          copies["down.weight"] + 1,
          "mirrors: down.weight copied %d times, want %d"
          % (ad.targets["down.weight"].mirror_copies,
             copies["down.weight"] + 1))


def main():
    tmp = tempfile.mkdtemp(prefix="stitch-engine-")
    try:
        import stitch
        stitch.keygen(os.path.join(tmp, "tr"))
        # The third pass writes through libstitch's apply (its C
        # reference on CPU tensors; stitch_gpu_apply's kernels on a GPU).
        for mirror, scatter in ((None, "auto"), (True, "auto"),
                                (None, "stitch")):
            MIRROR["host_mirror"], MIRROR["scatter"] = mirror, scatter
            print("test_engine: host_mirror=%s scatter=%s" % (mirror, scatter))
            tag = "-%s-%s" % (mirror, scatter)
            tr = Trainer(tmp, "bf16", tag)
            tensors, ad = test_two_phases(tr, "bf16")
            test_catch_up(tr, tensors, ad)
            test_refusals(tr, tensors, ad)
            test_mid_commit(tr, tensors, ad)
            test_stale(tr, tensors, ad)
            if mirror:
                test_mirrors(tr, tensors, ad)
            elif scatter == "auto":
                test_no_nbytes(tr)
            else:
                test_scatter_option(tr)
                test_batch_base(tr, tensors, ad)
                test_batch_shared(tr, tensors, ad)
            for kind in ("fp8", "nvfp4"):
                k = Trainer(tmp, kind, tag)
                test_two_phases(k, kind)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return harness.finish(SEED)


if __name__ == "__main__":
    sys.exit(main())
