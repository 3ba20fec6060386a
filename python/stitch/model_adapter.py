"""Two-phase apply for an inference engine's model, whatever its sharding
(docs/python.md "Engines: vLLM and SGLang").

An engine's model rarely holds the served view's tensors as they are: a
tensor-parallel worker keeps a shard of each, and fused parameters (vLLM's
qkv_proj, gate_up_proj) are built from several checkpoint tensors. The one
piece of code that knows that mapping is the engine's own
model.load_weights(iterable of (checkpoint name, full tensor)), which every
vLLM and SGLang model has. So ModelAdapter works in one of two ways:

- "direct": the model's parameters (and buffers) are the view's tensors one
  for one (same names, dtypes and shapes: no tensor parallelism, no
  fusion), and an EngineAdapter accepts them. The adapter patches them in
  place; the commit is a scatter.
- "load_weights": a CPU mirror of the whole served view (tensors_for's
  layout) is what an EngineAdapter patches. prepare() decodes and
  verifies against the mirror and writes nothing; commit() scatters the
  changes into the mirror, then feeds each tensor that changed, whole,
  through model.load_weights, which shards and fuses it as the engine's
  loader does. Memory: the full view in host memory on every worker
  (a 7B BF16 model: 14 GB per worker, 8 workers on a node: 112 GB),
  plus prepare's lists (about 12 B per changed element). The pause is the
  mirror's scatter plus a load_weights of every changed tensor: a host to
  device copy of this worker's shard of them, which for a dense optimizer
  step is nearly the whole shard.

Nothing here imports an engine.
"""
import threading
import time

from . import _lib as L
from . import binding as B
from ._lib import StitchError
from .engine import EngineAdapter, tensors_for

MODES = ("auto", "direct", "load_weights")


def _nbytes(t):
    return t.numel() * t.element_size()  # Tensor.nbytes: missing in 1.13


def _own_tensors(model):
    """The model's parameters and buffers by name (a tied parameter once,
    under its first name, as named_parameters gives it)."""
    own = dict(model.named_buffers())
    own.update(model.named_parameters())
    return own


def _one_for_one(model, vi):
    """The model's tensors for VI's manifest, when every manifest tensor is
    one of them with the same dtype and shape; else None and why."""
    own = _own_tensors(model)
    out = {}
    for name, dt, shape, _, _ in vi.tensors():
        t = own.get(name)
        if t is None:
            return None, "the model has no tensor '%s'" % name
        if B.st_dtype(t.dtype) != dt or tuple(t.shape) != shape:
            return None, ("'%s' is %s%s in the model, %s%s in the view"
                          % (name, B.st_dtype(t.dtype), list(t.shape), dt,
                             list(shape)))
        out[name] = t
    return out, None


def _sync_devices(model):
    """The pause ends when a device's writes land."""
    import torch
    if any(p.device.type == "cuda" for p in model.parameters()):
        torch.cuda.synchronize()


class ModelAdapter:
    """ModelAdapter(model, store_dir, swarm_pub, version=None, mode="auto",
    threads=0, after_load=None)

    model: a torch module with load_weights(iterable of (name, tensor)),
    named as the served view names its tensors (the checkpoint's names).
    version: what the model holds. "direct": None finds it by digests, as
    EngineAdapter does. "load_weights": V builds the mirror at V from the
    store and trusts that the model holds V (it was started from V's
    weights); None means unknown, and the first commit loads every
    tensor.
    mode: "auto" picks "direct" when the model's tensors are the view's
    one for one and an EngineAdapter takes them, else "load_weights".
    threads: prepare's decoding threads (0: every CPU; several workers on
    one host share them).
    after_load: called after each load_weights in the commit (vLLM:
    process_weights_after_loading).

    When the store holds no version yet, the mode and the mirror are set
    up at the first prepare.
    """

    def __init__(self, model, store_dir, swarm_pub, version=None,
                 mode="auto", threads=0, after_load=None):
        if mode not in MODES:
            raise ValueError("mode %r: one of %s" % (mode, ", ".join(MODES)))
        if mode != "direct" and not callable(getattr(model, "load_weights",
                                                     None)):
            raise TypeError("%s has no load_weights(weights)"
                            % type(model).__name__)
        self.model, self.store_dir = model, store_dir
        self.swarm = B.PublicKey.of(swarm_pub)
        self.threads, self.after_load = threads, after_load
        self.requested_mode, self.mode = mode, None
        self.mode_why = None
        self.ad = None        # the EngineAdapter: over the model or the mirror
        self.mirror = None    # "load_weights": name -> CPU tensor
        self.mirror_bytes = 0
        self._version = 0     # what the model holds; None: mixed
        self._dirty = []      # names the model does not hold as the mirror
        self._changed = None  # names the prepared version changes
        self.last_stats = {}
        self._mu = threading.Lock()   # one prepare or commit at a time
        self._bg = None               # a background prepare: [thread, out]
        self._follow = None           # [thread, stop event, last outcome]
        self._init_version = version
        with B.Store(store_dir, self.swarm) as s:
            vi = s.find(version if version else s.latest())
            if version and vi is None:
                raise L.error("ENOTFOUND", "%s holds no version %d"
                              % (store_dir, version))
            layout = vi.version if vi is not None else None
        if layout is not None:
            self._setup(layout, version)

    # ---- set-up ------------------------------------------------------

    def _setup(self, layout_version, version):
        """Picks the mode from LAYOUT_VERSION's manifest and builds the
        adapter; VERSION as in __init__."""
        with B.Store(self.store_dir, self.swarm) as s:
            vi = s.find(layout_version)
            own, why = _one_for_one(self.model, vi)
        if own is not None and self.requested_mode != "load_weights":
            try:
                self.ad = EngineAdapter(own, self.store_dir, self.swarm,
                                        version=version, threads=self.threads)
                self.mode, self._version = "direct", self.ad.version
                self.mode_why = "the model's tensors are the view's"
                return
            except ValueError as e:  # e.g. tensors the adapter cannot patch
                why = str(e)
        if self.requested_mode == "direct":
            raise L.error("EMISMATCH", "mode 'direct': %s" % why)
        self.mode, self.mode_why = "load_weights", why
        self.mirror = tensors_for(self.store_dir, self.swarm, layout_version)
        self.mirror_bytes = sum(_nbytes(t) for t in self.mirror.values())
        self.ad = EngineAdapter(self.mirror, self.store_dir, self.swarm,
                                version=0, threads=self.threads)
        if version:  # the model was started from VERSION's weights
            self.ad.apply(version)
            self._version = version
        else:
            self._version = 0
            self._dirty = list(self.mirror)

    # ---- state -------------------------------------------------------

    @property
    def version(self):
        """The version the model holds: 0 nothing known, None mixed (a
        commit failed inside load_weights; commit() again finishes it)."""
        return self._version

    def pending(self):
        """The store's latest version when newer than the model's."""
        with B.Store(self.store_dir, self.swarm) as s:
            latest = s.latest()
        held = self._version if self.ad is None else self.ad.version
        return latest if latest > (held or 0) else None

    def prepared(self):
        """The version prepared and waiting for commit(), else None."""
        return None if self.ad is None else self.ad.prepared()

    def status(self):
        """What the adapter holds, for a worker's report."""
        bg = self._bg
        fo = self._follow
        return {"version": self._version, "mode": self.mode,
                "prepared": self.prepared(),
                "preparing": bool(bg and bg[0].is_alive()),
                "following": bool(fo and fo[0].is_alive()),
                "follow_last": fo[2] if fo else None,
                "reload": len(self._dirty), "mirror_bytes": self.mirror_bytes}

    # ---- prepare -----------------------------------------------------

    def _changed_names(self, s, held, to):
        """TO's tensors whose digest differs from HELD's (all over 0)."""
        new = s.find(to).tensors()
        old = {} if not held else {m[0]: m[4] for m in s.find(held).tensors()}
        return [m[0] for m in new if old.get(m[0]) != m[4]]

    def _prepare_locked(self, version):
        t0 = time.perf_counter()
        if self.ad is None:
            with B.Store(self.store_dir, self.swarm) as s:
                latest = s.latest()
            if not latest:
                raise L.error("ENOTFOUND",
                              "%s holds no version yet" % self.store_dir)
            self._setup(version or latest, self._init_version)
        held = self.ad.version
        to = self.ad.prepare(version)
        with B.Store(self.store_dir, self.swarm) as s:
            changed = self._changed_names(s, held, to)
        self._changed = changed
        st = self.ad.last_stats
        if self.mode == "direct":
            load = changed
        else:
            mark = set(changed) | set(self._dirty)
            load = [n for n in self.mirror if n in mark]
        out = {"version": to, "from": held, "mode": self.mode,
               "steps": int(st.get("steps", 0)),
               "changes": int(st.get("changes", 0)),
               "tensors": len(changed), "load": len(load),
               "held_bytes": int(st.get("held_bytes", 0)),
               "mirror_bytes": self.mirror_bytes,
               "prepare_s": time.perf_counter() - t0}
        self.last_stats = dict(out)
        return out

    def prepare(self, version=None, background=False):
        """Prepares VERSION (default the store's latest) while the engine
        serves: writes nothing into the model (nor the mirror). Verifies
        every chunk and every result's digest (DigestMismatch: the model,
        or the mirror, does not hold what the adapter thinks; nothing was
        written). Returns {version, from, mode, steps, changes (elements),
        tensors (that change), load (fed to load_weights at the commit),
        held_bytes, mirror_bytes, prepare_s}.

        background: run it on a thread and return None at once; wait()
        gives the outcome, and commit() waits for it. A prepare already
        running finishes first."""
        self.wait(raise_error=False)
        if not background:
            with self._mu:
                return self._prepare_locked(version)
        box = {}

        def run():
            try:
                with self._mu:
                    box["out"] = self._prepare_locked(version)
            except BaseException as e:  # handed to wait() / commit()
                box["err"] = e

        t = threading.Thread(target=run, name="stitch-prepare", daemon=True)
        self._bg = [t, box]
        t.start()
        return None

    def wait(self, timeout=None, raise_error=True):
        """Waits for a background prepare; returns its summary (None when
        none was started, or TIMEOUT passed) and raises its error."""
        bg = self._bg
        if bg is None:
            return None
        bg[0].join(timeout)
        if bg[0].is_alive():
            return None
        self._bg = None
        if "err" in bg[1]:
            if raise_error:
                raise bg[1]["err"]
            return None
        return bg[1].get("out")

    def discard(self):
        """Drops what is prepared."""
        self.wait(raise_error=False)
        with self._mu:
            if self.ad is not None:
                self.ad.discard()
            self._changed = None

    # ---- commit ------------------------------------------------------

    def commit(self):
        """The pause: writes the prepared version into the model and
        returns the pause in seconds. A background prepare is waited for
        first (its error raises here).

        "direct": EngineAdapter.commit(), all or nothing.
        "load_weights": the mirror takes the changes (all or nothing),
        then each changed tensor goes through load_weights. If that
        raises, the model holds some tensors of each version: version
        becomes None and commit() again, with nothing prepared, loads
        them all again from the mirror (which holds the new version); a
        later prepare carries them too."""
        self.wait()
        with self._mu:
            return self._commit_locked()

    def _commit_locked(self):
        t0 = time.perf_counter()
        if self.ad is None:
            raise L.error("EINVAL", "commit: nothing is prepared")
        if self.mode == "direct":
            self.ad.commit()
            self._version = self.ad.version
            self._changed = None
            self.last_stats = dict(self.ad.last_stats)
            return self.ad.last_pause_s
        if self.ad.prepared() is None and not self._dirty:
            raise L.error("EINVAL", "commit: nothing is prepared (call "
                          "prepare() first; a prepared version commits once)")
        if self.ad.prepared() is not None:
            self.ad.commit()  # the mirror; restores itself on a failure
            mark = set(self._dirty) | set(self._changed or ())
            self._dirty = [n for n in self.mirror if n in mark]
            self._changed = None
        names = self._dirty
        t1 = time.perf_counter()
        try:
            self._load(names)
        except BaseException:
            self._version = None
            raise
        self._dirty = []
        self._version = self.ad.version
        pause = time.perf_counter() - t0
        self.last_stats = dict(self.ad.last_stats, pause_s=pause,
                               mirror_s=t1 - t0,
                               load_s=time.perf_counter() - t1,
                               loaded=len(names))
        return pause

    def _load(self, names):
        """Feeds NAMES, whole, from the mirror through the model's own
        loader, which shards and fuses them. The mirror's tensors are
        passed as they are (no copy): a loader that wrote into them would
        be caught by the next prepare's digests."""
        import torch
        if not names:
            return
        with torch.no_grad():
            self.model.load_weights([(n, self.mirror[n]) for n in names])
            if self.after_load is not None:
                self.after_load()
        _sync_devices(self.model)

    def apply(self, version=None):
        """prepare(VERSION) then commit(); returns the pause."""
        self.prepare(version)
        return self.commit()

    # ---- following the store -----------------------------------------

    def follow(self, poll_s=1.0):
        """Prepares each new version on a thread of its own as the store
        gets it, checking every POLL_S seconds, so that a commit finds it
        ready and no prepare call goes through the engine (SGLang takes
        its weight-update lock, which waits for running requests, for
        every call). A failed prepare is kept in status()["follow_last"]
        and tried again when a newer version arrives."""
        self.unfollow()
        stop = threading.Event()
        state = [None, stop, None]

        def loop():
            tried = None
            while not stop.wait(poll_s):
                try:
                    latest = self.pending()
                    if latest is None or latest == tried or \
                            latest == self.prepared():
                        continue
                    if self._bg is not None or not self._mu.acquire(False):
                        continue  # a prepare or a commit is under way
                    try:
                        tried = latest
                        state[2] = self._prepare_locked(latest)
                    finally:
                        self._mu.release()
                except Exception as e:  # kept for status()
                    state[2] = {"error": "%s: %s" % (type(e).__name__, e)}

        state[0] = threading.Thread(target=loop, name="stitch-follow",
                                    daemon=True)
        self._follow = state
        state[0].start()

    def unfollow(self):
        fo, self._follow = self._follow, None
        if fo is not None:
            fo[1].set()
            fo[0].join()


def error_summary(e):
    """A plain dict for an error, for reports that cross a process."""
    out = {"type": type(e).__name__, "message": str(e)}
    if isinstance(e, StitchError):
        out["name"] = e.name
    if getattr(e, "tensors", None) is not None:
        out["tensors"] = list(e.tensors)
    return out
