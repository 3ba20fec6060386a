"""The engine side: patch an engine's own tensors in place with each
verified version, in two phases (docs/python.md).

prepare() runs while the engine serves and writes nothing into its
tensors: libstitch (stitch_prepared_new, stitch/engine.h) plans from the
version they hold, verifies every chunk against the manifest, decodes
every changed block against the tensors into private memory, keeps per
tensor the elements that change (positions, new and old values; several
steps compose into one list), and checks every result's digest by
streaming the tensor with the list laid over it. commit() is the pause:
a scatter of the lists into the tensors, on their device (every list of
a device in one stitch_gpu_apply_batch, the apply kernel for CUDA
tensors when libstitch was built with CUDA, else torch's scatter_; the
adapter's `scatter` option); a failure midway writes the old values
back. apply() is the two in a row.
"""
import ctypes
import re
import time

from . import _lib as L
from . import binding as B
from ._lib import StitchError, check, lib


class DigestMismatch(StitchError):
    """The patched tensors do not digest to the manifest's; they were put
    back. .tensors names the ones that differed."""

    def __init__(self, message, tensors):
        e = L.error("EDIGEST", message)
        super().__init__(e.code, e.name, message)
        self.tensors = tensors


_INT = {}  # element width -> torch dtype of that width, filled on first use


_GPU = []


def _gpu_available():
    """Whether libstitch's stitch_gpu_* run on a CUDA device (asked once)."""
    if not _GPU:
        _GPU.append(bool(lib.stitch_gpu_available()))
    return _GPU[0]


def _int_dtype(w):
    import torch
    if not _INT:
        _INT.update({1: torch.uint8, 2: torch.int16, 4: torch.int32,
                     8: torch.int64})
    return _INT[w]


def _wrap(ptr, nbytes, dtype):
    """A torch tensor over NBYTES of C memory at PTR (no copy); valid while
    that memory is."""
    import torch
    return torch.frombuffer((ctypes.c_char * nbytes).from_address(ptr),
                            dtype=dtype)


def _inplace_count(t):
    """torch's count of in-place writes to T's storage; None for an
    inference-mode tensor, which keeps none (its address is still
    checked)."""
    try:
        return t._version
    except RuntimeError:
        return None


class _Change:
    """One tensor's prepared change: a list (pos int64, val and old at the
    element width) or a whole copy (val; old None over version 0). For a
    tensor on a GPU (or with a host mirror), dpos and dval are the list on
    its device, put there by prepare, and dold its old values when
    libstitch writes it (_Batch)."""
    __slots__ = ("target", "pos", "val", "old", "w", "dpos", "dval", "dold")

    def __init__(self, target, pos, val, old, w):
        self.target, self.pos, self.val, self.old, self.w = \
            target, pos, val, old, w
        self.dpos = self.dval = self.dold = None

    def nbytes(self):
        n = 0
        for t in (self.pos, self.val, self.old):
            if t is not None:  # Tensor.nbytes is missing in torch 1.13
                n += t.numel() * t.element_size()
        return n


_WARM = set()  # the CUDA devices _warm_kernels ran on


def _warm_kernels(dev):
    """Runs the batch kernels once on DEV, on scratch memory. The first
    launch of a kernel in a process loads its module (CUDA loads lazily),
    which would otherwise land in the first pause; prepare pays it."""
    if dev in _WARM:
        return
    import torch
    z = torch.zeros(5, dtype=torch.int16, device=dev)  # tensors z[0:2] and
    pos = torch.ones(1, dtype=torch.int64, device=dev)  # z[2:4]; z[4]: 0
    one = torch.ones(1, dtype=torch.int16, device=dev)
    lists = (L.GpuList * 2)(  # a checked list (the fused pass), a plain one
        L.GpuList(16, 1, pos.data_ptr(), z[4:].data_ptr(), one.data_ptr()),
        L.GpuList(16, 1, pos.data_ptr(), None, one.data_ptr()))
    data = (ctypes.c_void_p * 2)(z.data_ptr(), z[2:].data_ptr())
    nbytes = (ctypes.c_uint64 * 2)(4, 4)
    d = L.Diag()
    with torch.cuda.device(dev):
        check(lib.stitch_gpu_apply_batch(lists, data, nbytes, 2,
                                         ctypes.byref(d)), d, "warm-up")
    _WARM.add(dev)


class _Batch:
    """The lists on one device that libstitch writes, in one call of
    stitch_gpu_apply_batch (stitch_gpu_ref_apply_batch on the CPU): the
    kernels' launches and synchronisations once for the device, not once
    per tensor. Every list carries its old values, so the call also checks
    that each element it overwrites holds what prepare read; it writes all
    or nothing. The arrays are built by prepare: commit writes only at the
    addresses prepare read (the generation check)."""

    def __init__(self, dev, changes):
        n = len(changes)
        self.dev, self.changes = dev, changes
        if dev.type == "cuda":
            _warm_kernels(dev)
        self.fwd, self.back = (L.GpuList * n)(), (L.GpuList * n)()
        self.data = (ctypes.c_void_p * n)()
        self.nbytes = (ctypes.c_uint64 * n)()
        for k, c in enumerate(changes):
            on_dev = c.dpos is not None
            if on_dev and c.dold is None:  # the base check's old values,
                c.dold = c.old.to(c.dpos.device)  # for batched lists only
            pos = c.dpos if on_dev else c.pos
            val = (c.dval if on_dev else c.val).data_ptr()
            old = (c.dold if on_dev else c.old).data_ptr()
            w, m = c.w * 8, pos.numel()
            self.fwd[k] = L.GpuList(w, m, pos.data_ptr(), old, val)
            self.back[k] = L.GpuList(w, m, pos.data_ptr(), val, old)
            t = c.target.tensor
            self.data[k] = t.data_ptr()
            self.nbytes[k] = t.numel() * t.element_size()

    def write(self, undo=False):
        """Writes the new values (UNDO: the old ones back). Raises
        StitchError, naming the tensor, with every tensor as it was."""
        lists, n, d = self.back if undo else self.fwd, len(self.changes), \
            L.Diag()
        if self.dev.type == "cpu":
            rc = lib.stitch_gpu_ref_apply_batch(lists, self.data, self.nbytes,
                                                n, ctypes.byref(d))
        else:
            import torch
            with torch.cuda.device(self.dev):
                rc = lib.stitch_gpu_apply_batch(lists, self.data, self.nbytes,
                                                n, ctypes.byref(d))
        if rc < 0:
            msg = d.msg.decode(errors="replace")
            m = re.match(r"list (\d+): ", msg)
            if m and int(m.group(1)) < n:
                name = self.changes[int(m.group(1))].target.name
                msg = "tensor '%s': %s" % (name, msg[m.end():])
            raise StitchError(rc, L.errname(rc), "commit%s: %s"
                              % (" (undo)" if undo else "", msg))


class _Prepared:
    """What prepare() leaves for commit(): the C object that owns the
    memory, the changes over it (those written in batches, and the rest
    one by one), and the generation the tensors were at."""

    def __init__(self, handle, to, to_id, targets, changes, batches, rest,
                 generation, stats):
        self.handle, self.to, self.to_id = handle, to, to_id
        self.targets, self.changes = targets, changes
        self.batches, self.rest = batches, rest
        self.generation, self.stats = generation, stats

    def close(self):
        self.changes, self.targets, self.batches, self.rest = [], [], [], []
        if self.handle is not None:
            self.handle.close()
            self.handle = None


class _Target:
    """One engine tensor. Its address is read at each use, so an engine
    that swaps a tensor's storage never has a stale pointer written to.
    A tensor off the CPU (or any, with host_mirror) is read through a host
    mirror: a copy that prepare decodes and digests against, refreshed
    from the tensor when its address or torch's count of its in-place
    writes moved since the mirror last matched it."""
    __slots__ = ("name", "tensor", "dtype", "shape", "mirrored", "mirror",
                 "mirror_of", "mirror_copies")

    def __init__(self, name, t, mirrored=None):
        import torch
        if not isinstance(t, torch.Tensor):
            raise TypeError("%s: expected a torch tensor, got %s"
                            % (name, type(t).__name__))
        self.name, self.tensor = name, t
        self.dtype = B.st_dtype(t.dtype)
        self.shape = tuple(t.shape)
        self.mirrored = (t.device.type != "cpu" if mirrored is None
                         else mirrored)
        self.mirror, self.mirror_of, self.mirror_copies = None, None, 0
        self.check()

    def check(self):
        t = self.tensor
        if t.device.type not in ("cpu", "cuda"):
            raise ValueError("%s: on %s; the adapter patches CPU and CUDA "
                             "tensors" % (self.name, t.device))
        if not t.is_contiguous() or tuple(t.shape) != self.shape:
            raise ValueError("%s: not contiguous or reshaped; patching writes "
                             "its bytes in place" % self.name)

    def _stamp(self):
        return (self.tensor.data_ptr(), _inplace_count(self.tensor))

    def host(self):
        """The tensor prepare reads: itself on the CPU, else its mirror,
        copied from the device first when it no longer matches."""
        if not self.mirrored:
            return self.tensor
        if self.mirror is None or self.mirror_of != self._stamp():
            import torch
            pin = self.tensor.device.type == "cuda"
            self.mirror = torch.empty(self.shape, dtype=self.tensor.dtype,
                                      pin_memory=pin)
            self.mirror.copy_(self.tensor)
            self.mirror_of = self._stamp()
            self.mirror_copies += 1
        return self.mirror

    @property
    def ptr(self):
        return self.host().data_ptr()

    def flat_bytes(self, t=None):
        import torch
        t = self.tensor if t is None else t
        return t.reshape(-1).view(torch.uint8)


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
    """EngineAdapter(named_tensors, store_dir, swarm_pub, version=None,
    threads=0)

    named_tensors: name -> CPU or CUDA torch tensor, dtypes as the served
    view has them (bfloat16; float8_e4m3fn plus float32 NAME_scale for
    fp8; uint8 packed NVFP4 plus NAME_scale and NAME_scale_2). Tensors the
    manifest does not name are left alone.
    version: what the tensors hold. None: identified by their digests among
    the store's versions, else 0 (nothing: the first apply starts from an
    anchor, which writes every byte).
    threads: for prepare's decoding and digests (0: every CPU).
    host_mirror: None reads tensors off the CPU through a host mirror (see
    the module's doc) and CPU tensors in place; True mirrors every tensor
    (the tests run the GPU path's logic on CPU tensors so).
    scatter: how commit() writes a list. "auto": libstitch's apply
    (stitch_gpu_apply) for CUDA tensors when libstitch runs its kernels
    on this machine, torch's scatter_ otherwise; "torch": always torch;
    "stitch": always libstitch's (its C reference on CPU tensors, its
    kernels on CUDA tensors, EINVAL at commit when it has none).
    """

    def __init__(self, named_tensors, store_dir, swarm_pub, version=None,
                 threads=0, host_mirror=None, scatter="auto"):
        if scatter not in ("auto", "torch", "stitch"):
            raise L.error("EINVAL", "scatter: %r is not auto, torch or "
                          "stitch" % (scatter,))
        self.scatter = scatter
        self.store_dir = store_dir
        self.swarm = B.PublicKey.of(swarm_pub)
        self.threads = threads
        self.targets = {n: _Target(n, t, host_mirror)
                        for n, t in named_tensors.items()}
        self.version, self.id = 0, None
        self.last_pause_s = 0.0
        self.last_stats = {}
        self._generation = 0  # one more at each commit
        self._prepared = None
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

    def _tensors_of(self, vi):
        """The targets of VI's manifest tensors, in its order, checked."""
        out = []
        for name, dt, shape, nbytes, _ in vi.tensors():
            t = self.targets.get(name)
            if t is None:
                raise L.error("EMISMATCH", "version %d has tensor '%s',"
                              " which the engine does not" % (vi.version, name))
            if t.dtype != dt or t.shape != shape:
                raise L.error("EMISMATCH",
                              "tensor '%s': the engine's is %s%s, version %d"
                              " has %s%s" % (name, t.dtype, list(t.shape),
                                             vi.version, dt, list(shape)))
            t.check()
            out.append(t)
        return out

    def _generation_of(self, targets):
        """What commit() checks: the adapter's commit count, and each
        tensor's address and torch's count of its in-place writes
        (Tensor._version). Writes through other paths (a raw pointer) are
        not seen: the engine must not make them between the phases."""
        return (self._generation,
                tuple((t.tensor.data_ptr(), _inplace_count(t.tensor))
                      for t in targets))

    def prepare(self, version=None):
        """Prepares the move to VERSION (default the store's latest) while
        the engine serves: writes nothing into the tensors, which must not
        change until commit(). Plans, verifies every chunk, decodes every
        block into private memory, keeps the changes and checks every
        result's digest (DigestMismatch, naming the tensors, when the
        tensors do not hold the version the adapter claims). Replaces a
        prepared version not committed yet. Returns the version prepared;
        last_stats tells what it holds."""
        self.discard()
        t0 = time.perf_counter()
        with B.Store(self.store_dir, self.swarm) as s:
            to = s.latest() if version is None else version
            if to == 0:
                raise L.error("ENOTFOUND",
                              "%s holds no version yet" % self.store_dir)
            vi = s.find(to)
            if vi is None:
                raise L.error("ENOTFOUND", "%s holds no version %d"
                              % (self.store_dir, to))
            targets = self._tensors_of(vi)
            generation = self._generation_of(targets)
            stats = {"from": self.version, "to": to, "steps": 0, "blocks": 0,
                     "bytes": 0, "changes": 0, "whole": 0, "undo_bytes": 0,
                     "held_bytes": 0}
            handle, changes = None, []
            if to != self.version:
                names = [m[0] for m in vi.tensors()]
                try:
                    handle = B.Prepared(s, self.version, self.id, to,
                                        [t.ptr for t in targets],
                                        [m[3] for m in vi.tensors()],
                                        self.threads)
                except StitchError as e:
                    if e.name != "EDIGEST":
                        raise
                    raise DigestMismatch(str(e), [names[i] for i in e.bad]) \
                        from None
                info = handle.info()
                for k in ("steps", "blocks", "bytes", "changes", "whole",
                          "held_bytes"):
                    stats[k] = info[k]
                stats["undo_bytes"] = info["old_bytes"]
                changes = self._changes(handle, targets, vi.tensors())
            batches, rest = self._batches(changes)
            self._prepared = _Prepared(handle, vi.version, vi.id, targets,
                                       changes, batches, rest, generation,
                                       stats)
        stats["prepare_s"] = time.perf_counter() - t0
        self.last_stats = dict(stats)
        return to

    @staticmethod
    def _changes(handle, targets, mts):
        import torch
        out = []
        for i, t in enumerate(targets):
            n, w, pos, val, old, whole, whole_old = handle.tensor(i)
            nbytes = mts[i][3]
            if whole:
                out.append(_Change(t, None, _wrap(whole, nbytes, torch.uint8),
                                   _wrap(whole_old, nbytes, torch.uint8)
                                   if whole_old else None, 1))
            elif n:
                dt = _int_dtype(w)
                c = _Change(t, _wrap(pos, n * 8, torch.int64),
                            _wrap(val, n * w, dt), _wrap(old, n * w, dt), w)
                dev = t.tensor.device
                if t.mirrored or dev.type == "cuda":  # the list goes to the
                    c.dpos, c.dval = c.pos.to(dev), c.val.to(dev)  # device
                out.append(c)
        return out

    def _batches(self, changes):
        """The lists libstitch writes (the scatter option), one _Batch per
        device, and the changes written one by one: whole copies, torch's
        scatters, and lists on tensors that share memory with another."""
        groups, rest = {}, []
        for c in changes:
            dev = c.target.tensor.device
            if (c.pos is not None and self._stitch_writes(c, dev)
                    and (dev.type == "cpu" or _gpu_available())):
                groups.setdefault(dev, []).append(c)
            else:
                rest.append(c)
        batches = []
        for dev, cs in groups.items():
            spans = sorted((c.target.tensor.data_ptr(), k)
                           for k, c in enumerate(cs))
            shared, end, last = set(), 0, None
            for ptr, k in spans:  # tied weights: written one by one
                t = cs[k].target.tensor
                if last is not None and ptr < end:
                    shared.update((last, k))
                stop = ptr + t.numel() * t.element_size()
                if stop > end:
                    end, last = stop, k
            rest += [c for k, c in enumerate(cs) if k in shared]
            cs = [c for k, c in enumerate(cs) if k not in shared]
            if cs:
                batches.append(_Batch(dev, cs))
        return batches, rest

    def discard(self):
        """Drops a prepared version without committing it."""
        if self._prepared is not None:
            self._prepared.close()
            self._prepared = None

    def prepared(self):
        """The version prepared and waiting for commit(), else None."""
        return self._prepared.to if self._prepared is not None else None

    def _scatter(self, c, old=False, into=None):
        """Writes change C (or, with OLD, what it replaces) into its tensor,
        on the tensor's device (or into INTO, its host mirror)."""
        flat = c.target.flat_bytes(into)
        src = c.old if old else c.val
        if c.pos is None:
            flat.copy_(src)
            return
        dev = flat.device  # scatter_: 2-3x quicker than index_put_ on CPU
        if c.dpos is not None and not old and into is None:
            pos, src = c.dpos, c.dval
        else:
            pos, src = c.pos.to(dev), src.to(dev)
        if into is None and self._stitch_writes(c, dev):
            self._lib_apply(c, flat, pos, src)
        else:
            flat.view(_int_dtype(c.w)).scatter_(0, pos, src)

    def _stitch_writes(self, c, dev):
        """Whether libstitch's apply writes change C (the scatter option)."""
        if self.scatter == "torch" or c.w not in (1, 2, 4):
            return False  # stitch_gpu_list has no 64-bit width
        if self.scatter == "stitch":
            return True
        return dev.type == "cuda" and _gpu_available()

    def _lib_apply(self, c, flat, pos, src):
        """stitch_gpu_apply on the tensor's device (stitch_gpu_ref_apply on
        the CPU): positions are uint64 in the C API, int64 here, and never
        negative. No base check (old_v NULL): commit() checked the
        generation, and the undo writes the old values through here too."""
        gl = L.GpuList(c.w * 8, pos.numel(), pos.data_ptr(), None,
                       src.data_ptr())
        d = L.Diag()
        what = "commit of tensor '%s'" % c.target.name
        if flat.device.type == "cpu":
            check(lib.stitch_gpu_ref_apply(ctypes.byref(gl), flat.data_ptr(),
                                           flat.numel(), ctypes.byref(d)),
                  d, what)
            return
        if not _gpu_available():
            raise L.error("EINVAL", "%s: scatter='stitch' on a %s tensor, "
                          "but libstitch runs no kernels here (built "
                          "without CUDA, or no device)" % (what, flat.device))
        import torch
        with torch.cuda.device(flat.device):
            check(lib.stitch_gpu_apply(ctypes.byref(gl), flat.data_ptr(),
                                       flat.numel(), ctypes.byref(d)),
                  d, what)

    @staticmethod
    def _sync(changes):
        """Waits for the device's writes: the pause ends when they land."""
        import torch
        if any(c.target.tensor.device.type == "cuda" for c in changes):
            torch.cuda.synchronize()

    def commit(self):
        """The pause: writes the prepared changes into the tensors, after
        checking that they are still at the generation prepare() read
        (else StitchError EMISMATCH, nothing written: prepare again).
        A failure midway writes the old values back, so the tensors hold
        the version they held, and raises. Returns the pause in seconds;
        the adapter's version is then the prepared one. Once per prepare:
        another commit, or one without prepare, is StitchError EINVAL."""
        t0 = time.perf_counter()
        pr = self._prepared
        if pr is None:
            raise L.error("EINVAL", "commit: nothing is prepared (call "
                          "prepare() first; a prepared version commits once)")
        self._prepared = None
        try:
            if self._generation_of(pr.targets) != pr.generation:
                raise L.error(
                    "EMISMATCH",
                    "commit of version %d: the tensors changed since "
                    "prepare() (another commit, a new storage, or an "
                    "in-place write); nothing was written, prepare again"
                    % pr.to)
            import torch
            done, batched = [], []
            try:
                with torch.no_grad():  # parameters that require grad too
                    for b in pr.batches:
                        b.write()  # all or nothing
                        batched.append(b)
                    for c in pr.rest:
                        done.append(c)  # before the write: a partial one too
                        self._scatter(c)
                    self._sync(pr.changes)
            except BaseException:
                with torch.no_grad():
                    for c in reversed(done):
                        if c.old is not None:  # None: the tensors held nothing
                            self._scatter(c, old=True)
                    for b in reversed(batched):
                        b.write(undo=True)
                    self._sync(pr.changes)
                raise
            self.last_pause_s = time.perf_counter() - t0
            t1 = time.perf_counter()
            self._follow_mirrors(pr)
            mirror_s = time.perf_counter() - t1
        finally:
            pr.close()
        self.version, self.id = pr.to, pr.to_id
        self._generation += 1
        self.last_stats = dict(pr.stats, pause_s=self.last_pause_s,
                               mirror_s=mirror_s)
        return self.last_pause_s

    def _follow_mirrors(self, pr):
        """After the pause: each host mirror takes the same change, so the
        next prepare reads it without a copy from the device."""
        import torch
        with torch.no_grad():
            for c in pr.changes:
                t = c.target
                if t.mirror is not None and t.mirror_of is not None:
                    self._scatter(c, into=t.mirror)
            for t in pr.targets:
                if t.mirror is not None:
                    t.mirror_of = t._stamp()

    def apply(self, version=None):
        """prepare(VERSION) then commit(): brings the tensors to VERSION
        (default the store's latest), in place. Returns the pause, the
        commit's; last_stats has prepare_s beside pause_s. Raises
        StitchError (DigestMismatch after a bad patch) with the tensors
        as they were."""
        self.prepare(version)
        return self.commit()
