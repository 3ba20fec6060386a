"""Python objects over libstitch: keys, checkpoints, views, the store,
patches and digests. Handles own their C objects and free them in close()
(or on garbage collection); a handle that borrows memory keeps a reference
to it, so the memory outlives the C pointers into it."""
import ctypes
import json
import os
from ctypes import byref, c_size_t, c_uint64, c_void_p

from . import _lib as L
from ._lib import StitchError, check, fspath, lib

# safetensors dtype name <-> torch dtype name (torch is imported lazily so
# keys, stores and views work without it).
_DT_TORCH = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2", "U16": "uint16", "I16": "int16",
    "F16": "float16", "BF16": "bfloat16", "U32": "uint32", "I32": "int32",
    "F32": "float32", "U64": "uint64", "I64": "int64", "F64": "float64",
}
_TORCH_DT = {v: k for k, v in _DT_TORCH.items()}

VIEW_KINDS = ("bf16", "fp8", "nvfp4")
OBJ_KINDS = {1: "delta", 2: "anchor", 3: "cumulative"}


def version():
    """The loaded libstitch's version, "0.2.0 (wire protocol 3)"
    (stitch_version()); stitch._lib.lib_path says which file it is."""
    return lib.stitch_version().decode()


def dtype_name(code):
    return lib.stitch_dtype_name(code).decode()


def dtype_size(name):
    return lib.stitch_dtype_size(dtype_code(name))


def dtype_code(name):
    c = lib.stitch_dtype_from_name(name.encode())
    if c == 0:
        raise ValueError("unknown safetensors dtype %r" % name)
    return c


def torch_dtype(name):
    import torch
    return getattr(torch, _DT_TORCH[name])


def st_dtype(torch_dtype_):
    n = str(torch_dtype_).replace("torch.", "")
    if n not in _TORCH_DT:
        raise ValueError("torch dtype %s has no safetensors name" % n)
    return _TORCH_DT[n]


# ---- keys ---------------------------------------------------------------

class PublicKey:
    """The swarm's name: an Ed25519 public key."""

    def __init__(self, raw):
        if len(raw) != 32:
            raise ValueError("a public key is 32 bytes, not %d" % len(raw))
        self.c = L.PubKey()
        ctypes.memmove(self.c.b, bytes(raw), 32)

    @classmethod
    def read(cls, path):
        pk = L.PubKey()
        d = L.Diag()
        check(lib.stitch_pubkey_read(fspath(path), byref(pk), byref(d)), d)
        return cls(bytes(pk.b))

    @classmethod
    def of(cls, x):
        """A PublicKey from a PublicKey, 32 bytes or a .pub file path."""
        if isinstance(x, PublicKey):
            return x
        if isinstance(x, (bytes, bytearray)):
            return cls(x)
        return cls.read(x)

    def hex(self):
        return bytes(self.c.b).hex()

    def __eq__(self, other):
        return isinstance(other, PublicKey) and bytes(self.c.b) == bytes(other.c.b)

    def __repr__(self):
        return "PublicKey(%s...)" % self.hex()[:16]


class SecretKey:
    """The trainer's signing key. The 64 bytes stay in a ctypes buffer."""

    def __init__(self, c_sk, pub):
        self.c, self.public = c_sk, pub

    @classmethod
    def read(cls, path):
        sk, pk, d = L.SecKey(), L.PubKey(), L.Diag()
        check(lib.stitch_seckey_read(fspath(path), byref(sk), byref(pk),
                                     byref(d)), d)
        return cls(sk, PublicKey(bytes(pk.b)))

    @classmethod
    def generate(cls):
        sk, pk = L.SecKey(), L.PubKey()
        check(lib.stitch_keygen(byref(pk), byref(sk)), None, "keygen")
        return cls(sk, PublicKey(bytes(pk.b)))

    def write(self, prefix):
        """Writes PREFIX.key (0600) and PREFIX.pub; refuses to overwrite."""
        d = L.Diag()
        check(lib.stitch_key_write(fspath(prefix), byref(self.public.c),
                                   byref(self.c), byref(d)), d)


def keygen(prefix):
    """A fresh key pair written to PREFIX.key and PREFIX.pub."""
    k = SecretKey.generate()
    k.write(prefix)
    return k


# ---- checkpoints (parsed safetensors) -----------------------------------

class TensorInfo:
    __slots__ = ("name", "dtype", "shape", "nbytes", "offset", "data")

    def __init__(self, t):
        self.name = t.name.decode()
        self.dtype = dtype_name(t.dtype)
        self.shape = tuple(t.shape[i] for i in range(t.ndim))
        self.nbytes, self.offset, self.data = t.nbytes, t.offset, t.data or 0

    def __repr__(self):
        return "TensorInfo(%r, %s, %s)" % (self.name, self.dtype,
                                           list(self.shape))


class _Handle:
    """A library object owned through a handle: `handle` (an error once
    closed), close() (idempotent, and on garbage collection) and `with`.
    A subclass names its kind and its free function."""
    _kind = "object"
    _free = None

    @property
    def handle(self):
        if not self._h:
            raise ValueError("%s is closed" % self._kind)
        return self._h

    def close(self):
        if getattr(self, "_h", None):
            type(self)._free(self._h)
            self._h = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Checkpoint(_Handle):
    """A parsed safetensors file or buffer (stitch_st). From a buffer, the
    buffer is referenced here and never copied: it must not change while
    the checkpoint is in use."""

    _kind, _free = "checkpoint", lib.stitch_st_free

    def __init__(self, handle, keep=None):
        self._h, self._keep = handle, keep

    @classmethod
    def open(cls, path):
        h, d = c_void_p(), L.Diag()
        check(lib.stitch_st_open(fspath(path), byref(h), byref(d)), d)
        return cls(h, None)

    @classmethod
    def parse(cls, buf, ptr=None, size=None):
        """Parses BUF (bytes, bytearray, or anything kept alive while PTR and
        SIZE describe its memory, e.g. a torch uint8 tensor)."""
        if ptr is None:
            if isinstance(buf, bytes):
                ptr, size = ctypes.cast(ctypes.c_char_p(buf), c_void_p).value, len(buf)
            else:
                cbuf = (ctypes.c_char * len(buf)).from_buffer(buf)
                ptr, size = ctypes.addressof(cbuf), len(buf)
        h, d = c_void_p(), L.Diag()
        check(lib.stitch_st_parse(c_void_p(ptr), size, byref(h), byref(d)), d)
        return cls(h, buf)

    def close(self):
        super().close()
        self._keep = None

    def __len__(self):
        return lib.stitch_st_count(self.handle)

    def tensors(self):
        return [TensorInfo(lib.stitch_st_tensor(self.handle, i).contents)
                for i in range(len(self))]

    def find(self, name):
        p = lib.stitch_st_find(self.handle, name.encode())
        return TensorInfo(p.contents) if p else None

    def metadata(self):
        m = lib.stitch_st_metadata(self.handle)
        return json.loads(m.decode()) if m else None

    def view_digest(self):
        dg = L.Digest()
        check(lib.stitch_view_digest(self.handle, byref(dg), None), None,
              "view digest")
        return dg.hex()

    def tensor_bytes(self, name):
        t = self.find(name)
        if t is None:
            raise KeyError(name)
        return ctypes.string_at(t.data, t.nbytes) if t.nbytes else b""


def write_checkpoint(path, tensors, metadata=None):
    """Writes (name, dtype name, shape, bytes-like) tuples as safetensors at
    PATH atomically (temporary file, fsync, rename), through libstitch."""
    h, d = c_void_p(), L.Diag()
    check(lib.stitch_st_writer_new(fspath(path), byref(h), byref(d)), d)
    try:
        if metadata:
            check(lib.stitch_st_writer_set_metadata(
                h, json.dumps(metadata).encode(), byref(d)), d)
        for name, dt, shape, _ in tensors:
            sh = (c_uint64 * max(len(shape), 1))(*shape)
            check(lib.stitch_st_writer_add(h, name.encode(), dtype_code(dt),
                                           len(shape), sh, byref(d)), d)
        check(lib.stitch_st_writer_map(h, byref(d)), d)
        for i, (name, dt, shape, data) in enumerate(tensors):
            mv = memoryview(data).cast("B")
            if len(mv):
                dst = lib.stitch_st_writer_data(h, i)
                src = (ctypes.c_char * len(mv)).from_buffer_copy(mv) \
                    if mv.readonly else (ctypes.c_char * len(mv)).from_buffer(mv)
                ctypes.memmove(dst, src, len(mv))
        check(lib.stitch_st_writer_commit(h, byref(d)), d)
    finally:
        lib.stitch_st_writer_free(h)  # before commit: removes the temporary


# ---- views --------------------------------------------------------------

def build_view(masters, out_path, kind="bf16", prev=None, fp8_block=0):
    """Builds the served view of MASTERS (a Checkpoint of FP32 tensors) into
    OUT_PATH atomically. PREV, the previous step's view Checkpoint of the
    same kind, keeps quantization scales delta-stable. Returns the stats."""
    if kind not in VIEW_KINDS:
        raise ValueError("view kind must be one of %s, not %r" % (VIEW_KINDS, kind))
    o = L.ViewOpts(VIEW_KINDS.index(kind), fp8_block)
    st, d = L.ViewStats(), L.Diag()
    check(lib.stitch_view_build(masters.handle, prev.handle if prev else None,
                                byref(o), fspath(out_path), byref(st),
                                byref(d)), d)
    return {"tensors": st.tensors, "scale_blocks": st.scale_blocks,
            "scales_changed": st.scales_changed}


def tensor_digest(dtype, shape, ptr, nbytes):
    """Hex digest of one tensor's bytes at PTR (proto/digest.md)."""
    sh = (c_uint64 * max(len(shape), 1))(*shape)
    dg = L.Digest()
    check(lib.stitch_tensor_digest(dtype_code(dtype), len(shape), sh,
                                   c_void_p(ptr), nbytes, byref(dg)), None,
          "tensor digest")
    return dg.hex()


def _tensor_array(items):
    """stitch_tensor structs for ITEMS' (dtype name, shape, ptr, nbytes)
    and an array of pointers to them (which keeps them alive)."""
    n = len(items)
    ts = (L.Tensor * max(n, 1))()
    ptrs = (ctypes.POINTER(L.Tensor) * max(n, 1))()
    for i, (dt, shape, ptr, nbytes) in enumerate(items):
        t = ts[i]
        t.dtype, t.ndim = dtype_code(dt), len(shape)
        numel = 1
        for k, s in enumerate(shape):
            t.shape[k] = s
            numel *= s
        t.numel, t.nbytes, t.data = numel, nbytes, ptr
        ptrs[i] = ctypes.pointer(t)
    return ptrs


def tensor_digests(items, threads=0):
    """Digests of many tensors at once, on THREADS threads (0: all CPUs).
    ITEMS: (dtype name, shape, ptr, nbytes). Returns 32-byte digests."""
    n = len(items)
    ptrs = _tensor_array(items)
    out = (L.Digest * max(n, 1))()
    check(lib.stitch_tensor_digests(n, ptrs, threads, out), None,
          "tensor digests")
    return [out[i].raw() for i in range(n)]


def tensor_digests_patched(items, threads=0):
    """Digests of tensors with sparse changes laid over them, without
    writing them (stitch_tensor_digests_patched). ITEMS: (dtype name,
    shape, ptr, nbytes, n, width, pos_ptr, val_ptr), N changes of WIDTH
    bytes at the ascending element positions (uint64) at POS_PTR."""
    n = len(items)
    ptrs = _tensor_array([it[:4] for it in items])
    sp = (L.Sparse * max(n, 1))()
    for i, (_, _, _, _, nch, width, pos, val) in enumerate(items):
        sp[i].n, sp[i].width, sp[i].pos, sp[i].val = nch, width, pos, val
    out, d = (L.Digest * max(n, 1))(), L.Diag()
    check(lib.stitch_tensor_digests_patched(n, ptrs, sp, threads, out,
                                            byref(d)), d)
    return [out[i].raw() for i in range(n)]


# ---- publishing ---------------------------------------------------------

_PUBLISH_OPTS = ("chunk_bytes", "max_chain", "anchor_ratio",
                 "cumulative_every", "keep", "threads", "time_unix", "fastest")
SPARSE_FASTEST = 2  # stitch/delta.h STITCH_SPARSE_FASTEST


def publish_opts(**kw):
    bad = set(kw) - set(_PUBLISH_OPTS)
    if bad:
        raise TypeError("unknown publish option(s) %s (known: %s)"
                        % (", ".join(sorted(bad)), ", ".join(_PUBLISH_OPTS)))
    o = L.PublishOpts()
    for k, v in kw.items():
        if k == "cumulative_every" and v is None:
            v = 0xFFFFFFFF  # never
        if k == "fastest":  # deltas coded as RANS (docs/codec.md)
            k, v = "sparse_mode", SPARSE_FASTEST if v else 0
        setattr(o, k, v)
    return o


def publish(store_dir, seckey, ckpt, opts=None):
    """Makes CKPT (a Checkpoint of the served view) the next version of the
    store at STORE_DIR, signed with SECKEY. Returns a dict of what was
    written: version, id, and each object's kind, base, bytes and chunks."""
    if opts is None or isinstance(opts, dict):
        opts = publish_opts(**(opts or {}))
    r, d = L.PublishResult(), L.Diag()
    check(lib.stitch_publish(fspath(store_dir), byref(seckey.c), ckpt.handle,
                             byref(opts), byref(r), byref(d)), d)
    return {
        "version": r.version, "id": r.id.hex(), "view_bytes": r.view_bytes,
        "objects": [{"kind": OBJ_KINDS.get(r.kind[i], "?"),
                     "base": r.base[i], "bytes": r.bytes[i],
                     "chunks": r.chunks[i]} for i in range(r.n_objects)],
    }


# ---- the store, plans and patches ---------------------------------------

class VersionInfo:
    """A read-only view of one verified manifest, valid while its store is
    open."""

    def __init__(self, vref_ptr, store):
        self._ref, self._store = vref_ptr, store
        m = vref_ptr.contents.m.contents
        self.version, self.parent = m.version, m.parent_version
        self.id = vref_ptr.contents.id.raw()
        self.view = m.view.raw()
        self.time_unix = m.time_unix
        self.meta = json.loads(m.meta.decode()) if m.meta else None

    @property
    def manifest(self):
        return self._ref.contents.m

    def tensors(self):
        """[(name, dtype name, shape, nbytes, digest bytes)] in manifest
        order."""
        m = self.manifest.contents
        out = []
        for i in range(m.n_tensors):
            t = m.tensors[i]
            out.append((t.name.decode(), dtype_name(t.dtype),
                        tuple(t.shape[k] for k in range(t.ndim)), t.nbytes,
                        t.digest.raw()))
        return out

    def objects(self):
        m = self.manifest.contents
        return [{"kind": OBJ_KINDS.get(m.objects[i].kind, "?"),
                 "base": m.objects[i].base_version,
                 "bytes": m.objects[i].bytes,
                 "chunks": m.objects[i].n_chunks}
                for i in range(m.n_objects)]

    def chunks(self, obj=0):
        """Hex names of object OBJ's chunks, in order (the store keeps
        chunk H at chunks/H[0:2]/H, proto/store.md)."""
        o = self.manifest.contents.objects[obj]
        return [o.chunks[c].hash.hex() for c in range(o.n_chunks)]

    def __repr__(self):
        return "VersionInfo(%d, %s)" % (self.version, self.id.hex()[:16])


class Store(_Handle):
    """A version store opened for a swarm (every manifest verified)."""
    _kind, _free = "store", lib.stitch_store_close

    def __init__(self, path, swarm, create=False):
        self.path = os.fspath(path)
        self.swarm = PublicKey.of(swarm)
        h, d = c_void_p(), L.Diag()
        check(lib.stitch_store_open(fspath(path), byref(self.swarm.c),
                                    1 if create else 0, byref(h), byref(d)), d)
        self._h = h

    def latest(self):
        return lib.stitch_store_latest(self.handle)

    def __len__(self):
        return lib.stitch_store_count(self.handle)

    def at(self, i):
        if not 0 <= i < len(self):
            raise IndexError(i)
        return VersionInfo(lib.stitch_store_at(self.handle, i), self)

    def versions(self):
        return [self.at(i) for i in range(len(self))]

    def find(self, version):
        p = lib.stitch_store_find(self.handle, version)
        return VersionInfo(p, self) if p else None

    def plan(self, from_version, from_id, to_version):
        """The cheapest path (stitch_plan_path): [(version, object, bytes)]."""
        fid = L.Digest()
        if from_id:
            ctypes.memmove(fid.b, bytes(from_id), 32)
        pl, d = L.Plan(), L.Diag()
        n = len(self)
        first = lib.stitch_store_at(self.handle, 0) if n else None
        check(lib.stitch_plan_path(first, n, from_version, byref(fid),
                                   to_version, byref(pl), byref(d)), d)
        return [(pl.step[i].version, pl.step[i].object, pl.step[i].bytes)
                for i in range(pl.n)]

    def patch(self, version, obj):
        """A Patch of object OBJ of VERSION with every chunk the store holds
        added (each checked against its size and hash)."""
        v = self.find(version)
        if v is None:
            raise L.error("ENOTFOUND",
                              "%s holds no version %d" % (self.path, version))
        return Patch(self, v, obj)


class Patch:
    """One object's chunks, verified, ready to apply to caller memory. The
    chunks stay mapped until close()."""

    def __init__(self, store, vinfo, obj):
        self.store, self.vinfo, self.obj = store, vinfo, obj
        self._maps = []
        h, d = c_void_p(), L.Diag()
        what = "version %d object %d" % (vinfo.version, obj)
        check(lib.stitch_patch_new(vinfo.manifest, obj, byref(h), byref(d)),
              d, what)
        self._h = h
        try:
            o = vinfo.manifest.contents.objects[obj]
            for c in range(o.n_chunks):
                buf, ln = c_void_p(), c_size_t()
                check(lib.stitch_store_get_chunk(store.handle,
                                                 byref(o.chunks[c].hash),
                                                 byref(buf), byref(ln),
                                                 byref(d)), d, what)
                self._maps.append((buf, ln.value))
                check(lib.stitch_patch_add(h, c, buf, ln, byref(d)), d, what)
        except BaseException:
            self.close()
            raise

    def close(self):
        if getattr(self, "_h", None):
            lib.stitch_patch_free(self._h)
            self._h = None
        for buf, ln in getattr(self, "_maps", ()):
            lib.stitch_store_release(buf, ln)
        self._maps = []

    __del__ = close

    def missing(self):
        return lib.stitch_patch_missing(self._h)

    def blocks(self):
        """[(tensor index, byte offset, byte length)] of the changed blocks."""
        out, b = [], L.PatchBlock()
        for k in range(lib.stitch_patch_block_count(self._h)):
            lib.stitch_patch_block_at(self._h, k, byref(b))
            out.append((b.tensor, b.byte_off, b.byte_len))
        return out

    def scratch_bytes(self):
        return lib.stitch_patch_scratch_bytes(self._h)

    def decode_block(self, k, block_ptr, scratch_ptr):
        """Decodes changed block K into the memory at BLOCK_PTR, which holds
        the block's base bytes (a copy anywhere: blocks are independent).
        SCRATCH_PTR: scratch_bytes() bytes. Thread-safe per block."""
        d = L.Diag()
        check(lib.stitch_patch_decode_block(self._h, k, c_void_p(block_ptr),
                                            c_void_p(scratch_ptr), byref(d)),
              d, "version %d" % self.vinfo.version)

    def apply(self, ptrs, sizes, threads=0):
        """Decodes every changed block in place: PTRS[i] and SIZES[i] are
        manifest tensor i's memory. Digests are the caller's to check."""
        n = len(ptrs)
        cp = (c_void_p * max(n, 1))(*ptrs)
        cs = (c_uint64 * max(n, 1))(*sizes)
        d = L.Diag()
        check(lib.stitch_patch_apply(self._h, cp, cs, threads, byref(d)), d,
              "version %d" % self.vinfo.version)


class Prepared:
    """An engine's next version, prepared beside its memory
    (stitch_prepared_new, stitch/engine.h): the store's plan from HELD to
    TO, every chunk verified, every block decoded against PTRS (tensor i of
    TO's manifest, SIZES[i] bytes, only read), kept per tensor as a list
    of changes or a whole copy, every result digest checked. On a digest
    mismatch the StitchError (EDIGEST) carries .bad, the indices of the
    tensors that did not match. Owns its memory until close()."""

    def __init__(self, store, held, held_id, to, ptrs, sizes, threads=0):
        n = len(ptrs)
        cp = (c_void_p * max(n, 1))(*ptrs)
        cs = (c_uint64 * max(n, 1))(*sizes)
        bad = (ctypes.c_uint8 * max(n, 1))()
        hid = None
        if held_id:
            hid = L.Digest()
            ctypes.memmove(hid.b, bytes(held_id), 32)
        h, d = c_void_p(), L.Diag()
        rc = lib.stitch_prepared_new(store.handle, held,
                                     byref(hid) if hid is not None else None,
                                     to, cp, cs, threads, bad, byref(h),
                                     byref(d))
        try:
            check(rc, d)
        except StitchError as e:
            e.bad = [i for i in range(n) if bad[i]]
            raise
        self._h = h

    def close(self):
        if getattr(self, "_h", None):
            lib.stitch_prepared_free(self._h)
            self._h = None

    __del__ = close

    def info(self):
        i = L.PreparedInfo()
        lib.stitch_prepared_summary(self._h, byref(i))
        return {"from": i.from_, "to": i.to, "to_id": i.to_id.raw(),
                "tensors": i.n_tensors, "steps": i.steps, "blocks": i.blocks,
                "bytes": i.fetched, "changes": i.changes, "whole": i.whole,
                "held_bytes": i.held_bytes, "old_bytes": i.old_bytes,
                "committed": bool(i.committed)}

    def tensor(self, i):
        """Tensor I's change: (n, width, pos, val, old, whole, whole_old),
        addresses (0 for none) into memory this object owns."""
        t = L.PreparedTensor()
        lib.stitch_prepared_tensor_at(self._h, i, byref(t))
        return (t.sp.n, t.sp.width, t.sp.pos or 0, t.sp.val or 0,
                t.old or 0, t.whole or 0, t.whole_old or 0)

    def _write(self, fn, ptrs, threads):
        n = len(ptrs)
        cp = (c_void_p * max(n, 1))(*ptrs)
        d = L.Diag()
        check(fn(self._h, cp, threads, byref(d)), d)

    def commit(self, ptrs, threads=0):
        """Writes the changes into PTRS (the addresses prepared against)."""
        self._write(lib.stitch_prepared_commit, ptrs, threads)

    def revert(self, ptrs, threads=0):
        """Puts back what commit() overwrote."""
        self._write(lib.stitch_prepared_revert, ptrs, threads)


__all__ = ["version", "StitchError", "PublicKey", "SecretKey", "keygen",
           "Checkpoint", "write_checkpoint", "build_view", "tensor_digest",
           "tensor_digests", "tensor_digests_patched", "publish", "publish_opts",
           "Store", "Patch", "Prepared", "VersionInfo"]
