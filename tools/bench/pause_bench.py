#!/usr/bin/env python3
"""pause_bench.py: the engine's pause, one-shot apply against the two
phases (issue 38, docs/python.md "Two phases"). A benchmark, not a test.

  STITCH_LIB=build/lib/libstitch.so PYTHONPATH=python \\
    python3 tools/bench/pause_bench.py [--size 1G[,200M...]] \\
        [--densities 0.01,0.001,0.05] [--tensor-mb 16] [--work DIR] \\
        [--device cpu|cuda]

For each size: a synthetic BF16 model of SIZE bytes (tensors of TENSOR_MB,
values ~N(0, 0.02)) is published as version 1, then one version per
density, each moving that fraction of the elements by one BF16 ulp from
the one before (what an Adam step does to a served view), published as
plain deltas. Two engines hold version 1 and follow each version (the
two-phase one on --device: with cuda, its tensors are on the GPU and
prepare reads them through host mirrors, docs/python.md):
  - one-shot: the apply of the previous release (kept below, as it was:
    decode, write with undo, digest every tensor, all in the pause);
  - two phases: EngineAdapter.prepare() (engine serving) then commit()
    (the pause).
Both must end bit-exact with the published view. Per version it prints
the changes, the one-shot pause, prepare, the commit pause, and their
ratios. Timings on a shared machine move between runs; compare within one.
"""
import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import torch

import stitch
from stitch import binding as B

# ---- the one-shot apply of the previous release (python/stitch/engine.py
# before the two phases), kept to measure against ------------------------

_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _width(dtype, off, ln):
    w = B.dtype_size(dtype)
    return w if w in _INT and off % w == 0 and ln % w == 0 else 1


def oneshot_apply(tensors, store, pub, held, held_id, to):
    """Brings TENSORS (name -> CPU tensor) from HELD to TO in place, every
    step inside the call. Returns the id of TO."""
    with B.Store(store, pub) as s:
        for v, obj, _ in s.plan(held, held_id, to):
            vi = s.find(v)
            mts = vi.tensors()
            flats = [tensors[m[0]].reshape(-1).view(torch.uint8) for m in mts]
            patch = s.patch(v, obj)
            undo = []
            try:
                _patch_blocks(patch, patch.blocks(), mts, flats, undo)
                got = B.tensor_digests([(dt, sh, flats[i].data_ptr(), nb)
                                        for i, (_, dt, sh, nb, _)
                                        in enumerate(mts)], 0)
                if any(got[i] != mts[i][4] for i in range(len(mts))):
                    raise RuntimeError("one-shot: digest mismatch at v%d" % v)
            finally:
                patch.close()
            held_id = vi.id
    return held_id


def _patch_blocks(patch, blocks, mts, flats, undo):
    big = max(ln for _, _, ln in blocks)
    sbytes = max(patch.scratch_bytes(), 1)
    local = threading.local()

    def one(k):
        ti, off, ln = blocks[k]
        if not hasattr(local, "buf"):
            local.buf = torch.empty(big, dtype=torch.uint8)
            local.scratch = torch.empty(sbytes, dtype=torch.uint8)
        live = flats[ti][off:off + ln]
        new = local.buf[:ln]
        new.copy_(live)
        patch.decode_block(k, new.data_ptr(), local.scratch.data_ptr())
        w = _width(mts[ti][1], off, ln)
        lv, nv = live.view(_INT[w]), new.view(_INT[w])
        idx = (lv != nv).nonzero().reshape(-1)
        if idx.numel() * (4 + w) >= ln:
            entry = (ti, off, ln, 1, None, live.clone())
            live.copy_(new)
            return entry
        entry = (ti, off, ln, w, idx.to(torch.int32), lv[idx].clone())
        lv[idx] = nv[idx]
        return entry

    with ThreadPoolExecutor(max_workers=min(os.cpu_count() or 1,
                                            len(blocks))) as ex:
        for u in ex.map(one, range(len(blocks))):
            undo.append(u)


# ---- the synthetic model and its versions -------------------------------

def parse_size(s):
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper()
    return int(float(s[:-1]) * mul[s[-1]]) if s[-1] in mul else int(s)


def make_model(nbytes, tensor_mb, gen):
    cols = 4096
    rows = max(1, (tensor_mb << 20) // (2 * cols))
    out, left, i = {}, nbytes // 2, 0
    while left > 0:
        r = min(rows, max(1, left // cols))
        out["layers.%03d.weight" % i] = (torch.randn(
            r, cols, generator=gen) * 0.02).to(torch.bfloat16)
        left -= r * cols
        i += 1
    return out


def step(model, density, gen):
    """Moves DENSITY of each tensor's elements by one ulp; returns the
    number moved."""
    n = 0
    for t in model.values():
        bits = t.view(torch.int16).reshape(-1)
        k = max(1, int(bits.numel() * density))
        idx = torch.randint(0, bits.numel(), (k,), generator=gen)
        sign = torch.randint(0, 2, (k,), generator=gen, dtype=torch.int16) * 2 - 1
        bits[idx] += sign
        n += k
    return n


def publish(model, work, store, key, version):
    path = os.path.join(work, "view-%d.safetensors" % version)
    B.write_checkpoint(path, [(n, "BF16", tuple(t.shape),
                               t.view(torch.int16).numpy())
                              for n, t in model.items()])
    with B.Checkpoint.open(path) as ck:
        r = B.publish(store, key, ck, {"cumulative_every": None, "keep": 64})
    os.unlink(path)
    assert r["version"] == version, r
    return r


def same(a, b):
    return all(torch.equal(a[n].cpu().view(torch.int16),
                           b[n].cpu().view(torch.int16)) for n in a)


def run_size(nbytes, args, work):
    gen = torch.Generator().manual_seed(38)
    store = os.path.join(work, "store-%d" % nbytes)
    key = stitch.keygen(os.path.join(work, "tr-%d" % nbytes))
    pub = key.public
    model = make_model(nbytes, args.tensor_mb, gen)
    t0 = time.perf_counter()
    publish(model, work, store, key, 1)
    print("# %d MB, %d tensors: anchor published in %.1f s"
          % (nbytes >> 20, len(model), time.perf_counter() - t0), flush=True)
    one = {n: t.clone() for n, t in model.items()}
    two = {n: t.clone().to(args.device) for n, t in model.items()}
    ad = stitch.EngineAdapter(two, store, pub, version=1,
                              scatter=args.scatter)
    held, held_id = 1, ad.id
    rows = []
    for k, density in enumerate(args.densities):
        v = k + 2
        moved = step(model, density, gen)
        t0 = time.perf_counter()
        r = publish(model, work, store, key, v)
        pub_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        held_id = oneshot_apply(one, store, pub, held, held_id, v)
        oneshot_s = time.perf_counter() - t0
        held = v
        ad.prepare(v)
        prep = ad.last_stats
        commit_s = ad.commit()
        exact = same(one, model) and same(two, model)
        rows.append((nbytes, density, prep["changes"], moved,
                     r["objects"][0]["bytes"], oneshot_s, prep["prepare_s"],
                     commit_s, prep["held_bytes"], exact, pub_s))
        print_row(rows[-1])
        if not exact:
            print("NOT bit-exact at version %d" % v)
            sys.exit(1)
    return rows


HEADER = ("  size   density    changes   delta_B  one-shot_s  prepare_s"
          "  commit_s  commit/one  prep/one  held_MB  exact")


def print_row(r):
    nbytes, density, changes, _, delta_b, one, prep, commit, held, exact, _ = r
    print("%5dM  %7.2f%%  %9d  %8d  %10.3f  %9.3f  %8.4f  %9.1f%%  %8.2f"
          "  %7.1f  %5s" % (nbytes >> 20, density * 100, changes, delta_b, one,
                            prep, commit, 100 * commit / one, prep / one,
                            held / 2**20, "yes" if exact else "NO"),
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="1G",
                    help="model bytes, comma-separated for several (200M, 1G)")
    ap.add_argument("--densities", default="0.01,0.001,0.05")
    ap.add_argument("--tensor-mb", type=int, default=16)
    ap.add_argument("--work", default=None, help="scratch directory")
    ap.add_argument("--device", default="cpu",
                    help="where the two-phase engine's tensors live")
    ap.add_argument("--scatter", default="auto",
                    choices=("auto", "torch", "stitch"),
                    help="how commit() writes (EngineAdapter's scatter): "
                    "libstitch's apply kernel or torch's scatter_")
    args = ap.parse_args()
    args.densities = [float(x) for x in args.densities.split(",")]
    sizes = [parse_size(x) for x in args.size.split(",")]
    work = tempfile.mkdtemp(prefix="pause-bench-", dir=args.work)
    print("# pause_bench: torch %s, %d torch threads, %d CPUs, engine on %s, "
          "scatter %s" % (torch.__version__, torch.get_num_threads(),
                          os.cpu_count(), args.device, args.scatter))
    # torch's first indexed write starts its thread pool: not a pause.
    w = torch.zeros(1 << 16, dtype=torch.int16)
    w[torch.arange(0, 1 << 16, 7)] = 1
    print(HEADER, flush=True)
    try:
        for nb in sizes:
            run_size(nb, args, work)
            shutil.rmtree(work, ignore_errors=True)
            os.makedirs(work, exist_ok=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
