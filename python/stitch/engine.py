"""The engine side: patch an engine's own tensors in place with each
verified version (docs/python.md).

The adapter never holds a second copy of the model. At a point the engine
chooses (between batches) apply() plans from the version its tensors hold
to the store's latest, and for each step:
  1. adds every chunk of the step's object to a patch; each is checked
     against the manifest's size and hash before anything is touched;
  2. decodes each block the patch changes into a private copy, and writes
     into the tensors only the elements that differ, keeping their old
     values (the undo: a few percent of the model per step, not a copy);
  3. digests every tensor of the manifest and compares with the manifest.
A failure in 2 or 3 writes the undo back, so the tensors hold exactly the
version they held before the step, and raises.
"""
import os
import threading
import time

from . import _lib as L
from . import binding as B
from ._lib import StitchError


class DigestMismatch(StitchError):
    """The patched tensors do not digest to the manifest's; they were put
    back. .tensors names the ones that differed."""

    def __init__(self, message, tensors):
        e = L.error("EDIGEST", message)
        super().__init__(e.code, e.name, message)
        self.tensors = tensors


_INT = {}  # element width -> torch integer dtype, filled on first use


def _width(dtype, off, ln):
    """Element width for comparing a block: the dtype's, unless the block
    is not aligned to it (packed nibbles: bytes)."""
    import torch
    if not _INT:
        _INT.update({1: torch.uint8, 2: torch.int16, 4: torch.int32,
                     8: torch.int64})
    w = B.dtype_size(dtype)
    return w if w in _INT and off % w == 0 and ln % w == 0 else 1


def _restore(flats, u):
    ti, off, ln, w, idx, old = u
    if idx is None:
        flats[ti][off:off + ln].copy_(old)
    else:
        flats[ti][off:off + ln].view(_INT[w])[idx.long()] = old


class _Target:
    """One engine tensor. Its address is read at each use, so an engine
    that swaps a tensor's storage never has a stale pointer written to."""
    __slots__ = ("name", "tensor", "dtype", "shape")

    def __init__(self, name, t):
        import torch
        if not isinstance(t, torch.Tensor):
            raise TypeError("%s: expected a torch tensor, got %s"
                            % (name, type(t).__name__))
        self.name, self.tensor = name, t
        self.dtype = B.st_dtype(t.dtype)
        self.shape = tuple(t.shape)
        self.check()

    def check(self):
        t = self.tensor
        if t.device.type != "cpu":
            raise ValueError("%s: on %s; the adapter patches CPU tensors "
                             "(the GPU path has its own kernels)"
                             % (self.name, t.device))
        if not t.is_contiguous() or tuple(t.shape) != self.shape:
            raise ValueError("%s: not contiguous or reshaped; patching writes "
                             "its bytes in place" % self.name)

    @property
    def ptr(self):
        return self.tensor.data_ptr()

    def flat_bytes(self):
        import torch
        return self.tensor.reshape(-1).view(torch.uint8)


def tensors_for(store_dir, swarm_pub, version=None):
    """Zeroed CPU tensors laid out as VERSION's manifest says (default the
    latest): what an engine with no weights yet can hand the adapter."""
    import torch
    with B.Store(store_dir, swarm_pub) as s:
        v = s.find(version if version is not None else s.latest())
        if v is None:
            raise L.error("ENOTFOUND", "%s holds no version %s"
                              % (store_dir, version))
        return {name: torch.zeros(shape, dtype=B.torch_dtype(dt))
                for name, dt, shape, _, _ in v.tensors()}


class EngineAdapter:
    """EngineAdapter(named_tensors, store_dir, swarm_pub, version=None)

    named_tensors: name -> CPU torch tensor, dtypes as the served view has
    them (bfloat16; float8_e4m3fn plus float32 NAME_scale for fp8; uint8
    packed NVFP4 plus NAME_scale and NAME_scale_2). Tensors the manifest
    does not name are left alone.
    version: what the tensors hold. None: identified by their digests among
    the store's versions, else 0 (nothing: the first apply starts from an
    anchor, which writes every byte).
    """

    def __init__(self, named_tensors, store_dir, swarm_pub, version=None,
                 threads=0):
        self.store_dir = store_dir
        self.swarm = B.PublicKey.of(swarm_pub)
        self.threads = threads
        self.targets = {n: _Target(n, t) for n, t in named_tensors.items()}
        self.version, self.id = 0, None
        self.last_pause_s = 0.0
        self.last_stats = {}
        with B.Store(store_dir, self.swarm) as s:
            if version is None:
                self._adopt(s)
            elif version > 0:
                v = s.find(version)
                if v is None:
                    raise L.error("ENOTFOUND", "%s holds no version %d"
                                      % (store_dir, version))
                self.version, self.id = v.version, v.id

    def _adopt(self, s):
        """Newest version whose every tensor digest the tensors match."""
        cache = {}
        for v in reversed(s.versions()):
            if self._digests_match(v, cache):
                self.version, self.id = v.version, v.id
                return

    def _digests_match(self, v, cache):
        mts = v.tensors()
        for name, dt, shape, nbytes, _ in mts:
            t = self.targets.get(name)
            if t is None or t.dtype != dt or t.shape != shape:
                return False
        todo = [m for m in mts if m[0] not in cache]
        got = B.tensor_digests([(dt, shape, self.targets[n].ptr, nb)
                                for n, dt, shape, nb, _ in todo], self.threads)
        cache.update((m[0], g) for m, g in zip(todo, got))
        return all(cache[n] == dg for n, _, _, _, dg in mts)

    def pending(self):
        """The store's latest version, when newer than what is held, else
        None."""
        with B.Store(self.store_dir, self.swarm) as s:
            latest = s.latest()
        return latest if latest > self.version else None

    def apply(self, version=None):
        """Brings the tensors to VERSION (default the store's latest), in
        place. Returns the pause in seconds (all of it is spent here, at
        the caller's safe point). Raises StitchError (DigestMismatch after a
        bad patch) with the tensors back at the last version reached."""
        t0 = time.perf_counter()
        stats = {"steps": 0, "blocks": 0, "undo_bytes": 0, "bytes": 0,
                 "verify_s": 0.0, "patch_s": 0.0, "digest_s": 0.0}
        with B.Store(self.store_dir, self.swarm) as s:
            to = s.latest() if version is None else version
            if to == 0:
                raise L.error("ENOTFOUND",
                                  "%s holds no version yet" % self.store_dir)
            if to != self.version:
                for v, obj, nbytes in s.plan(self.version, self.id, to):
                    self._step(s, v, obj, stats)
                    stats["bytes"] += nbytes
        self.last_pause_s = time.perf_counter() - t0
        stats["pause_s"] = self.last_pause_s
        self.last_stats = stats
        return self.last_pause_s

    def _step(self, s, version, obj, stats):
        vi = s.find(version)
        mts = vi.tensors()
        ptrs, flats = [], []
        for name, dt, shape, nbytes, _ in mts:
            t = self.targets.get(name)
            if t is None:
                raise L.error("EMISMATCH", "version %d has tensor '%s',"
                                  " which the engine does not" % (version, name))
            if t.dtype != dt or t.shape != shape:
                raise L.error("EMISMATCH",
                                  "tensor '%s': the engine's is %s%s, version %d"
                                  " has %s%s" % (name, t.dtype, list(t.shape),
                                                 version, dt, list(shape)))
            t.check()
            ptrs.append(t.ptr)
            flats.append(t.flat_bytes())
        t0 = time.perf_counter()
        patch = s.patch(version, obj)  # every chunk verified here
        t1 = time.perf_counter()
        stats["verify_s"] += t1 - t0
        undo = []
        try:
            blocks = patch.blocks()
            stats["blocks"] += len(blocks)
            try:
                self._patch_blocks(patch, blocks, mts, flats, undo)
                t2 = time.perf_counter()
                stats["patch_s"] += t2 - t1
                self._verify(vi, mts, ptrs)
                stats["digest_s"] += time.perf_counter() - t2
            except BaseException:
                for u in undo:
                    _restore(flats, u)
                raise
        finally:
            patch.close()
        stats["undo_bytes"] += sum((u[4].nbytes if u[4] is not None else 0) +
                                   u[5].nbytes for u in undo)
        self.version, self.id = vi.version, vi.id
        stats["steps"] += 1

    def _patch_blocks(self, patch, blocks, mts, flats, undo):
        """Decodes each changed block into a private copy, then writes only
        the elements that differ into the tensor, keeping their old values
        (4 + w bytes per changed element of w bytes). A 2^20-symbol block
        of a real step nearly always holds a change, so undoing whole blocks
        would copy about the whole model. Blocks are independent and run on
        a thread pool (ctypes and torch release the GIL)."""
        import torch
        from concurrent.futures import ThreadPoolExecutor
        if not blocks:
            return
        big = max(ln for _, _, ln in blocks)
        sbytes = max(patch.scratch_bytes(), 1)
        local = threading.local()
        keep_old = self.version > 0  # nothing to put back over version 0

        def one(k):
            ti, off, ln = blocks[k]
            if not hasattr(local, "buf"):
                local.buf = torch.empty(big if keep_old else 0, dtype=torch.uint8)
                local.scratch = torch.empty(sbytes, dtype=torch.uint8)
            live = flats[ti][off:off + ln]
            if not keep_old:  # nothing to put back: decode in place
                patch.decode_block(k, live.data_ptr(), local.scratch.data_ptr())
                return None
            new = local.buf[:ln]
            new.copy_(live)
            patch.decode_block(k, new.data_ptr(), local.scratch.data_ptr())
            w = _width(mts[ti][1], off, ln)
            lv, nv = live.view(_INT[w]), new.view(_INT[w])
            idx = (lv != nv).nonzero().reshape(-1)
            if idx.numel() * (4 + w) >= ln:  # dense block: keep it whole
                entry = (ti, off, ln, 1, None, live.clone())
                live.copy_(new)
                return entry
            entry = (ti, off, ln, w, idx.to(torch.int32), lv[idx].clone())
            lv[idx] = nv[idx]
            return entry

        workers = self.threads or os.cpu_count() or 1
        with ThreadPoolExecutor(max_workers=min(workers, len(blocks))) as ex:
            futs = [ex.submit(one, k) for k in range(len(blocks))]
            err = None
            for f in futs:  # every block finishes, so the undo is complete
                try:
                    u = f.result()
                    if u is not None:
                        undo.append(u)
                except BaseException as e:  # noqa: B902 - re-raised below
                    err = err or e
        if err is not None:
            raise err

    def _verify(self, vi, mts, ptrs):
        got = B.tensor_digests([(dt, shape, ptrs[i], nb)
                                for i, (_, dt, shape, nb, _) in enumerate(mts)],
                               self.threads)
        bad = [mts[i][0] for i in range(len(mts)) if got[i] != mts[i][4]]
        if bad:
            raise DigestMismatch(
                "version %d: %d tensor(s) do not match the manifest's digest "
                "after the patch (first: '%s'); the engine's tensors were not "
                "at version %d as claimed. They were put back."
                % (vi.version, len(bad), bad[0], self.version), bad)
