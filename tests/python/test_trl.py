#!/usr/bin/env python3
"""TRL interop: export our views as TRL sparse patches and import TRL's,
read and written with the real safetensors package.

Checks that an exported file has exactly TRL's layout (NAME.idx / NAME.val,
index dtypes per encoding, PatchMetadata strings), that TRL's own decoding
(gap cumsum, then index_copy into the flat tensor) turns the old view into
the new one bit for bit, that a file written the way TRL writes it imports,
and that an imported view publishes and reaches an engine bit-exactly.

Plain script (ctest runs it): exit 0 pass, 1 fail, 77 skip. STITCH_SEED=N
replays a run.
"""
import os
import shutil
import subprocess
import sys
import tempfile

import harness

SEED = harness.start()  # exits 77 without torch or safetensors
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from harness import check, raw

import stitch
from stitch import trl

TRL_FIELDS = ("format", "version", "sparse", "model_version",
              "num_changed_params", "total_changed_elements", "total_elements",
              "sparsity", "encoding")


def same(a_path, b_path, what):
    a, b = load_file(a_path), load_file(b_path)
    check(sorted(a) == sorted(b), "%s: names differ" % what)
    bad = [n for n in b if n in a and (a[n].dtype != b[n].dtype or
                                       not torch.equal(raw(a[n]), raw(b[n])))]
    check(not bad, "%s: tensors differ: %s" % (what, bad))


def make_views(tmp, kind):
    """Two consecutive stitch views of a small model after Adam steps, plus
    a large tensor whose changes are far apart (gaps past 16 bits)."""
    model = torch.nn.Sequential(torch.nn.Linear(48, 96), torch.nn.LayerNorm(96),
                                torch.nn.Linear(96, 48))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    big = torch.randn(300, 320)
    paths = []
    for step in range(2):
        if step:
            x = torch.randn(8, 48)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            big.view(-1)[[5, 70000, 95000]] += 1.0
        masters = os.path.join(tmp, "m%d.safetensors" % step)
        sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
        sd["big.weight"] = big.clone()
        save_file(sd, masters)
        out = os.path.join(tmp, "%s-%d.safetensors" % (kind, step))
        with stitch.Checkpoint.open(masters) as ck:
            prev = stitch.Checkpoint.open(paths[-1]) if paths else None
            stitch.build_view(ck, out, kind, prev=prev)
            if prev:
                prev.close()
        paths.append(out)
    return paths


def trl_apply(old_path, patch_path):
    """What TRL's receiver does: decode indices per the metadata's encoding
    (delta_engine._decode_idx), then write the values at those flat
    positions."""
    base = load_file(old_path)
    with safe_open(patch_path, framework="pt") as f:
        meta = f.metadata()
        enc = meta["encoding"]
        names = sorted({k[:-4] for k in f.keys() if k.endswith(".val")})
        for name in names:
            r = f.get_tensor(name + ".idx")
            idx = r.long() if enc == "raw" else torch.cumsum(r.long() + 1, 0) - 1
            val = f.get_tensor(name + ".val")
            flat = base[name].reshape(-1).view(torch.uint8 if val.element_size() == 1
                                               else torch.int16 if val.element_size() == 2
                                               else torch.int32).clone()
            flat[idx] = val.view(flat.dtype)
            base[name] = flat.view(val.dtype).reshape(base[name].shape)
    return base, meta


def test_export(tmp, kind):
    old, new = make_views(tmp, kind)
    for enc in ("gap_delta", "raw"):
        out = os.path.join(tmp, "patch-%s-%s.safetensors" % (kind, enc))
        trl.export_patch(old, new, out, model_version=7, encoding=enc)
        with safe_open(out, framework="pt") as f:
            meta, keys = f.metadata(), set(f.keys())
            dts = {k: f.get_tensor(k).dtype for k in keys}
        newt = load_file(new)
        check(keys == {n + s for n in newt for s in (".idx", ".val")},
              "%s %s: keys are not NAME.idx/NAME.val for every tensor" % (kind, enc))
        check(all(k in meta for k in TRL_FIELDS),
              "%s %s: metadata lacks TRL fields: %s" % (kind, enc, meta))
        check(meta["format"] == "sparse_weight_patch" and meta["version"] == "1"
              and meta["sparse"] == "True" and meta["model_version"] == "7"
              and meta["encoding"] == enc
              and meta["num_changed_params"] == str(len(newt))
              and meta["total_elements"] == str(sum(t.numel() for t in newt.values())),
              "%s %s: metadata %s" % (kind, enc, meta))
        want_idx = {torch.int32} if enc == "raw" else {torch.uint16, torch.uint32}
        check(all(dts[n + ".idx"] in want_idx for n in newt),
              "%s %s: index dtypes %s" % (kind, enc,
                                          {dts[n + ".idx"] for n in newt}))
        check(all(dts[n + ".val"] == newt[n].dtype for n in newt),
              "%s %s: value dtypes differ from the view's" % (kind, enc))
        if kind == "bf16" and enc == "gap_delta":
            check(dts["big.weight.idx"] == torch.uint32,
                  "gaps past 65535 were not stored as U32")
            check(dts["0.weight.idx"] == torch.uint16,
                  "small gaps were not stored as U16")
        got, _ = trl_apply(old, out)
        want = load_file(new)
        bad = [n for n in want if not torch.equal(raw(got[n]), raw(want[n]))]
        check(not bad, "%s %s: TRL's decoding gives other bytes for %s"
              % (kind, enc, bad))
        back = os.path.join(tmp, "back-%s-%s.safetensors" % (kind, enc))
        trl.import_patch(old, out, back)
        same(back, new, "%s %s round trip" % (kind, enc))
        with stitch.Checkpoint.open(back) as a, stitch.Checkpoint.open(new) as b:
            check(a.view_digest() == b.view_digest() and a.metadata() == b.metadata(),
                  "%s %s: imported view's digest or metadata differ" % (kind, enc))
    return old, new


def test_trl_written(tmp, old, new):
    """A patch made as TRL's encode_patch makes it: every parameter's
    changed positions (bf16 != bf16), gap_delta indices, bf16 values,
    PatchMetadata's strings, safetensors' save_file; no stitch keys."""
    a, b = load_file(old), load_file(new)
    tensors, changed, total = {}, 0, 0
    for name in b:
        mask = a[name] != b[name]
        idx = mask.reshape(-1).nonzero(as_tuple=True)[0]
        tensors[name + ".val"] = b[name].reshape(-1).index_select(0, idx).to(
            torch.bfloat16).contiguous()
        tensors[name + ".idx"] = trl.gap_delta_encode(idx).contiguous()
        changed += idx.numel()
        total += b[name].numel()
    meta = {"format": "sparse_weight_patch", "version": "1", "sparse": "True",
            "model_version": "3", "num_changed_params": str(len(b)),
            "total_changed_elements": str(changed), "total_elements": str(total),
            "sparsity": str(1.0 - changed / total), "encoding": "gap_delta"}
    path = os.path.join(tmp, "trl-written.safetensors")
    save_file(tensors, path, metadata=meta)
    out = os.path.join(tmp, "from-trl.safetensors")
    trl.import_patch(old, path, out)
    same(out, new, "import of a TRL-written patch")
    return out


def test_anchor_and_errors(tmp, old, new):
    anchor = os.path.join(tmp, "anchor.safetensors")
    m = trl.export_patch(None, new, anchor)
    with safe_open(anchor, framework="pt") as f:
        check(set(f.keys()) == set(load_file(new)) and f.metadata()["sparse"] == "False",
              "anchor: not every tensor whole, or sparse != False")
    out = os.path.join(tmp, "from-anchor.safetensors")
    trl.import_patch(None, anchor, out)
    same(out, new, "anchor import")
    check(m["total_changed_elements"] == m["total_elements"], "anchor counts")

    patch = os.path.join(tmp, "patch-bf16-gap_delta.safetensors")
    dest = os.path.join(tmp, "never.safetensors")
    try:  # the wrong base is refused by its view digest, and nothing written
        trl.import_patch(new, patch, dest)
        check(False, "a patch applied to the wrong base")
    except stitch.StitchError as e:
        check(e.name == "EBASE" and "applies to view" in str(e), "wrong base: %s" % e)
    check(not os.path.exists(dest), "a refused import left %s" % dest)

    def bad_patch(mutate, what, contains):
        t = load_file(patch)
        with safe_open(patch, framework="pt") as f:
            meta = dict(f.metadata())
        mutate(t, meta)
        p = os.path.join(tmp, "bad.safetensors")
        save_file(t, p, metadata=meta)
        try:
            trl.import_patch(old, p, dest)
            check(False, "%s: accepted" % what)
        except ValueError as e:
            check(contains in str(e), "%s: message '%s'" % (what, e))
        check(not os.path.exists(dest), "%s: left %s" % (what, dest))

    bad_patch(lambda t, m: m.update(encoding="nvcomp_cascaded"), "nvcomp",
              "nvCOMP")
    bad_patch(lambda t, m: m.update(format="lora"), "another format",
              "not a TRL sparse weight patch")

    def far(t, m):
        m["encoding"] = "raw"
        m.pop("stitch.result_view")
        t["0.bias.idx"] = torch.tensor([96], dtype=torch.int32)
        t["0.bias.val"] = torch.zeros(1, dtype=torch.bfloat16)
        for k in list(t):
            if k.endswith(".idx") and k != "0.bias.idx":
                t[k] = torch.zeros(0, dtype=torch.int32)
                t[k[:-4] + ".val"] = t[k[:-4] + ".val"][:0]
    bad_patch(far, "a position past the tensor", "outside")

    r = subprocess.run([sys.executable, "-m", "stitch.trl", "import", new, patch,
                        dest], capture_output=True, text=True)
    check(r.returncode == 1 and r.stderr.count("\n") == 1 and
          "stitch.trl:" in r.stderr, "CLI error: rc %d, stderr %r"
          % (r.returncode, r.stderr))
    r = subprocess.run([sys.executable, "-m", "stitch.trl", "export", old, new,
                        os.path.join(tmp, "cli.safetensors")],
                       capture_output=True, text=True)
    check(r.returncode == 0 and "sparsity" in r.stdout, "CLI export: %r" % r.stderr)


def test_feed_the_mesh(tmp, old, imported):
    """A TRL trainer's patch, imported, published and pulled by an engine."""
    k = stitch.keygen(os.path.join(tmp, "tr"))
    store = os.path.join(tmp, "store")
    for path in (old, imported):
        with stitch.Checkpoint.open(path) as ck:
            stitch.publish(store, k, ck)
    pub = os.path.join(tmp, "tr.pub")
    tensors = stitch.tensors_for(store, pub, 1)
    eng = stitch.EngineAdapter(tensors, store, pub)
    eng.apply()
    want = load_file(imported)
    bad = [n for n in want if not torch.equal(raw(want[n]), raw(tensors[n]))]
    check(eng.version == 2 and not bad, "mesh: engine at v%d, differing %s"
          % (eng.version, bad))


def main():
    tmp = tempfile.mkdtemp(prefix="stitch-trl-")
    try:
        old, new = test_export(tmp, "bf16")
        for kind in ("fp8", "nvfp4"):
            test_export(tmp, kind)
        imported = test_trl_written(tmp, old, new)
        test_anchor_and_errors(tmp, old, new)
        test_feed_the_mesh(tmp, old, imported)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return harness.finish(SEED)


if __name__ == "__main__":
    sys.exit(main())
