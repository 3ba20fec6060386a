"""Interop with Hugging Face TRL's sparse weight patches (docs/python.md).

The layout follows TRL's own writer and reader,
trl/experimental/async_grpo/delta_engine.py (encode_patch,
iter_sparse_patches), delta_codec.py (gap_delta_encode/decode) and
weight_diff.py (PatchMetadata), at commit
019ac735792bb3a56e904d4d086d3bfa13acf8e2 of huggingface/trl:

  - a safetensors file; a changed parameter NAME is two 1-D tensors:
    NAME.idx, the flat element positions, ascending, and NAME.val, the new
    values at them. TRL writes every parameter it was given, so unchanged
    ones have empty .idx/.val;
  - .idx is "raw" (I32 absolute positions) or "gap_delta" (idx[k] -
    idx[k-1] - 1 with idx[-1] = -1, as U16 when every gap fits, else U32:
    the dtype is the width); TRL's third encoding, "nvcomp_cascaded", needs
    nvCOMP on a GPU and is refused here;
  - a parameter stored whole (TRL's anchors) is a tensor named NAME;
  - __metadata__ holds PatchMetadata as strings: format
    "sparse_weight_patch", version "1", sparse ("True"/"False"),
    model_version, num_changed_params, total_changed_elements,
    total_elements, sparsity, encoding.

TRL compares BF16 values (so -0.0 == +0.0 and NaN != NaN); we compare bit
patterns, so a patch is exact for every dtype. TRL casts values to BF16;
for views of other dtypes (FP8, packed NVFP4, F32 scales) we keep the
tensor's own dtype, which TRL's reader passes through unchanged. Extra
metadata keys, which TRL ignores, carry the view digests of the base and
result ("stitch.base_view", "stitch.result_view") and the result's own
metadata ("stitch.result_meta"), so an import checks its base and its
result bit for bit.
"""
import argparse
import json
import os
import sys

from . import binding as B

FORMAT, FORMAT_VERSION = "sparse_weight_patch", "1"
ENCODINGS = ("raw", "gap_delta")
_INT_OF_WIDTH = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def _torch():
    import torch
    return torch


def _load(path):
    """(tensors, metadata) of a safetensors file, with the safetensors
    package (what TRL reads and writes with)."""
    from safetensors import safe_open
    with safe_open(os.fspath(path), framework="pt", device="cpu") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata() or {}


def _bits(t):
    """T flattened as integers of its width: equality is bit equality."""
    torch = _torch()
    return t.reshape(-1).view(getattr(torch, _INT_OF_WIDTH[t.element_size()]))


def gap_delta_encode(idx):
    """TRL's gap coding of ascending int64 positions."""
    torch = _torch()
    if idx.numel() == 0:
        return idx.to(torch.uint16)
    prev = torch.cat([idx.new_full((1,), -1), idx[:-1]])
    gaps = idx - prev - 1
    return gaps.to(torch.uint16 if int(gaps.max()) <= 0xFFFF else torch.uint32)


def gap_delta_decode(gaps):
    torch = _torch()
    if gaps.numel() == 0:
        return gaps.to(torch.int64)
    return torch.cumsum(gaps.to(torch.int64) + 1, dim=0) - 1


def _view_digest(path):
    with B.Checkpoint.open(path) as ck:
        return ck.view_digest()


def _atomic_save(tensors, metadata, path):
    """safetensors' save_file to a temporary beside PATH, fsync, rename: a
    reader never sees a partial file."""
    from safetensors.torch import save_file
    path = os.fspath(path)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        save_file(tensors, tmp, metadata=metadata)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def export_patch(old_path, new_path, out_path, model_version=0,
                 encoding="gap_delta"):
    """Writes the TRL patch that turns the view at OLD_PATH into the view at
    NEW_PATH (OLD_PATH None: a TRL anchor, every tensor whole). Tensors new
    in NEW, or whose dtype or shape changed, are stored whole. Returns the
    metadata written."""
    torch = _torch()
    if encoding not in ENCODINGS:
        raise ValueError("encoding must be one of %s, not %r"
                         % (", ".join(ENCODINGS), encoding))
    new, new_meta = _load(new_path)
    old = _load(old_path)[0] if old_path is not None else {}
    gone = sorted(set(old) - set(new))
    if gone:
        raise ValueError("%s drops tensor '%s': TRL's layout cannot express "
                         "a removed tensor" % (new_path, gone[0]))
    out, n_sparse, changed, total = {}, 0, 0, 0
    for name, t in new.items():
        if name.endswith((".idx", ".val")):
            raise ValueError("tensor '%s': a name ending in .idx or .val is "
                             "ambiguous in TRL's layout" % name)
        total += t.numel()
        o = old.get(name)
        if o is None or o.dtype != t.dtype or o.shape != t.shape:
            out[name] = t.contiguous()
            changed += t.numel()
            continue
        if t.numel() >= 2 ** 31:
            raise ValueError("tensor '%s': %d elements; TRL's int32 "
                             "positions stop at 2^31" % (name, t.numel()))
        idx = (_bits(o) != _bits(t)).nonzero().reshape(-1)
        # Gathered as integers: index_select has no kernel for some dtypes
        # (float8), and the bits are what must match.
        out[name + ".val"] = _bits(t)[idx].view(t.dtype).contiguous()
        out[name + ".idx"] = (idx.to(torch.int32) if encoding == "raw"
                              else gap_delta_encode(idx)).contiguous()
        n_sparse += 1
        changed += idx.numel()
    meta = {
        "format": FORMAT, "version": FORMAT_VERSION,
        "sparse": str(n_sparse > 0), "model_version": str(int(model_version)),
        "num_changed_params": str(len(new)),
        "total_changed_elements": str(changed),
        "total_elements": str(total),
        "sparsity": str(1.0 - changed / max(total, 1)),
        "encoding": encoding,
        "stitch.result_view": _view_digest(new_path),
    }
    if old_path is not None:
        meta["stitch.base_view"] = _view_digest(old_path)
    if new_meta:
        meta["stitch.result_meta"] = json.dumps(new_meta, sort_keys=True)
    _atomic_save(out, meta, out_path)
    return meta


def read_patch(path):
    """(metadata, {name: ("sparse", int64 positions, values) or
    ("whole", tensor)}) of a TRL patch file, checked for shape."""
    torch = _torch()
    tensors, meta = _load(path)
    if meta.get("format") != FORMAT or meta.get("version") != FORMAT_VERSION:
        raise ValueError("%s: not a TRL sparse weight patch (format %r "
                         "version %r)" % (path, meta.get("format"),
                                          meta.get("version")))
    enc = meta.get("encoding", "gap_delta")
    if enc not in ENCODINGS:
        raise ValueError("%s: index encoding %r is not supported here (%s "
                         "are); nvcomp_cascaded needs nvCOMP on a GPU"
                         % (path, enc, ", ".join(ENCODINGS)))
    out = {}
    for k, t in tensors.items():
        if k.endswith(".val"):
            name = k[:-4]
            if name + ".idx" not in tensors:
                raise ValueError("%s: '%s' has no '%s.idx'" % (path, k, name))
            raw = tensors[name + ".idx"]
            if enc == "raw" and raw.dtype != torch.int32 or \
                    enc == "gap_delta" and raw.dtype not in (torch.uint16,
                                                             torch.uint32):
                raise ValueError("%s: '%s.idx' is %s, not what %s indices are"
                                 % (path, name, raw.dtype, enc))
            idx = raw.to(torch.int64) if enc == "raw" else gap_delta_decode(raw)
            if idx.numel() != t.numel() or t.dim() != 1:
                raise ValueError("%s: '%s' has %d positions and %d values"
                                 % (path, name, idx.numel(), t.numel()))
            out[name] = ("sparse", idx, t)
        elif k.endswith(".idx"):
            if k[:-4] + ".val" not in tensors:
                raise ValueError("%s: '%s' has no '%s.val'" % (path, k, k[:-4]))
        else:
            out[k] = ("whole", t)
    return meta, out


def import_patch(base_path, patch_path, out_path):
    """Applies the TRL patch at PATCH_PATH to the view at BASE_PATH (None
    for an anchor) and writes the resulting view to OUT_PATH atomically,
    ready for `stitch publish`. When the patch names view digests (ours do),
    the base and the result are checked against them. Returns the patch's
    metadata."""
    meta, entries = read_patch(patch_path)
    base_meta = {}
    tensors = {}
    if base_path is not None:
        want = meta.get("stitch.base_view")
        if want is not None and _view_digest(base_path) != want:
            raise B.L.error("EBASE", "%s: the patch applies to view "
                                "%s..., not this one" % (base_path, want[:16]))
        tensors, base_meta = _load(base_path)
    for name, e in entries.items():
        if e[0] == "whole":
            tensors[name] = e[1]
            continue
        _, idx, val = e
        t = tensors.get(name)
        if t is None:
            raise ValueError("%s: patches '%s', which the base does not have"
                             % (patch_path, name))
        if val.dtype != t.dtype:
            raise ValueError("%s: '%s' values are %s, the base tensor is %s"
                             % (patch_path, name, val.dtype, t.dtype))
        if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= t.numel()):
            raise ValueError("%s: '%s' has a position outside its %d elements"
                             % (patch_path, name, t.numel()))
        flat = _bits(t.contiguous()).clone()
        flat[idx] = _bits(val)
        tensors[name] = flat.view(t.dtype).reshape(t.shape)
    out_meta = base_meta
    if "stitch.result_meta" in meta:
        out_meta = json.loads(meta["stitch.result_meta"])
    _write_view(tensors, out_meta, out_path, meta.get("stitch.result_view"))
    return meta


def _write_view(tensors, metadata, out_path, want_digest):
    """Writes through libstitch's writer to a temporary, checks the view
    digest when one is expected, then renames."""
    out_path = os.fspath(out_path)
    tmp = "%s.tmp.%d" % (out_path, os.getpid())
    items = []
    for name, t in tensors.items():
        t = t.contiguous()
        items.append((name, B.st_dtype(t.dtype), tuple(t.shape),
                      t.reshape(-1).view(_torch().uint8).numpy()))
    try:
        B.write_checkpoint(tmp, items, metadata or None)
        if want_digest is not None:
            got = _view_digest(tmp)
            if got != want_digest:
                raise B.L.error("EDIGEST", "%s: the patched view's "
                                    "digest %s... is not the patch's %s..."
                                    % (out_path, got[:16], want_digest[:16]))
        os.replace(tmp, out_path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python3 -m stitch.trl",
        description="Convert between Stitch views and TRL sparse patches.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="OLD NEW -> TRL patch (OLD '-': anchor)")
    e.add_argument("old")
    e.add_argument("new")
    e.add_argument("out")
    e.add_argument("--encoding", choices=ENCODINGS, default="gap_delta")
    e.add_argument("--model-version", type=int, default=0)
    i = sub.add_parser("import", help="BASE + TRL patch -> new view "
                       "(BASE '-': the patch is an anchor)")
    i.add_argument("base")
    i.add_argument("patch")
    i.add_argument("out")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "export":
            m = export_patch(None if a.old == "-" else a.old, a.new, a.out,
                             a.model_version, a.encoding)
        else:
            m = import_patch(None if a.base == "-" else a.base, a.patch, a.out)
    except (B.StitchError, ValueError, OSError) as ex:
        print("stitch.trl: %s" % ex, file=sys.stderr)
        return 1
    print("%s: %s of %s elements changed (sparsity %s)"
          % (a.out, m["total_changed_elements"], m["total_elements"],
             m["sparsity"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
