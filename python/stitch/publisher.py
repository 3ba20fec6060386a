"""The trainer side: publish the served view of the FP32 masters as the next
version after every optimizer step (docs/python.md).

Per step the masters are copied once, into one contiguous host buffer laid
out as a safetensors image (u64 header length, JSON header, data) that
libstitch parses in place, so no temporary file holds the masters. The view
is built from that image by libstitch (delta-stable scales from the previous
view) and published with stitch_publish. By default everything runs on the
training thread, so the time it takes is the stall it causes. With
background=True only the copy does: the view and the publish run on a
worker thread (libstitch releases the GIL, as every ctypes call does) while
training goes on, and the next publish waits for it before refilling the
image. Either way the stall is measured and reported.
"""
import concurrent.futures
import json
import os
import struct
import threading
import time
from dataclasses import dataclass, field

from . import binding as B


@dataclass
class PublishResult:
    version: int
    id: str
    stall_s: float        # wall time inside publish(): the training stall
    copy_s: float         # masters -> host image
    view_s: float         # view build
    publish_s: float      # diff, encode, chunks, manifest, latest
    view_bytes: int
    scales_changed: int   # quantization blocks whose scale moved
    objects: list = field(default_factory=list)
    wait_s: float = 0.0   # background: waiting for the previous publish
    background: bool = False  # view and publish ran off the training thread


def named_tensors(src):
    """(name, tensor) pairs from a Module (its state_dict: parameters and
    persistent buffers, what an engine loads), a dict, or pairs."""
    import torch
    if isinstance(src, torch.nn.Module):
        items = list(src.state_dict().items())
    elif isinstance(src, dict):
        items = list(src.items())
    else:
        items = list(src)
    seen = set()
    for name, t in items:
        if not isinstance(name, str) or not isinstance(t, torch.Tensor):
            raise TypeError("expected (name, tensor) pairs, got (%r, %s)"
                            % (name, type(t).__name__))
        if name in seen:
            raise ValueError("tensor name %r appears twice" % name)
        seen.add(name)
    return items


class MasterImage:
    """One contiguous host buffer holding the masters as a safetensors
    image, parsed by libstitch once per layout and refilled every step.
    Tensors are ordered widest dtype first, so each one's offset is aligned
    for its dtype (the data region starts 8-aligned and has no holes)."""

    def __init__(self, items, metadata=None, pin=False):
        import torch
        self.layout = layout_of(items)
        order = sorted(range(len(items)),
                       key=lambda i: -items[i][1].element_size())
        header, off, self.slots = {}, 0, []
        if metadata:
            header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
        for i in order:
            name, t = items[i]
            n = t.numel() * t.element_size()
            header[name] = {"dtype": B.st_dtype(t.dtype),
                            "shape": list(t.shape),
                            "data_offsets": [off, off + n]}
            self.slots.append((i, off, n))
            off += n
        hj = json.dumps(header, separators=(",", ":")).encode()
        hj += b" " * (-(8 + len(hj)) % 8)
        self.data_start = 8 + len(hj)
        total = self.data_start + off
        self.buf = torch.empty(total, dtype=torch.uint8, pin_memory=pin)
        head = struct.pack("<Q", len(hj)) + hj
        self.buf[:len(head)].copy_(torch.frombuffer(bytearray(head),
                                                    dtype=torch.uint8))
        self.ckpt = None

    def fill(self, items):
        import torch
        base = self.data_start
        with torch.no_grad():
            for i, off, n in self.slots:
                t = items[i][1]
                if n == 0:
                    continue
                dst = self.buf[base + off: base + off + n].view(t.dtype)
                dst.view(t.shape).copy_(t.detach())
        if self.ckpt is None:  # parsed once: later fills change data only
            self.ckpt = B.Checkpoint.parse(self.buf, self.buf.data_ptr(),
                                           self.buf.numel())
        return self.ckpt


def layout_of(items):
    return tuple((n, str(t.dtype), tuple(t.shape)) for n, t in items)


class Publisher:
    """Publisher(store_dir, key_path, view="bf16"|"fp8"|"nvfp4", **options)

    options: fp8_block (fp8 only), metadata (dict of strings for the view's
    __metadata__), model (what hook() publishes), work_dir (where the view
    is built; default STORE/publisher), background (publish() returns once
    the masters are copied, with a Future of the PublishResult), and
    stitch_publish's options: chunk_bytes, max_chain, anchor_ratio,
    cumulative_every (None: never), keep, threads, time_unix, fastest
    (True: deltas in the fastest coding, docs/codec.md "The fastest
    mode").
    """

    def __init__(self, store_dir, key_path, view="bf16", fp8_block=0,
                 metadata=None, model=None, work_dir=None, background=False,
                 **publish_options):
        if view not in B.VIEW_KINDS:
            raise ValueError("view must be one of %s, not %r"
                             % (", ".join(B.VIEW_KINDS), view))
        self.store_dir = os.fspath(store_dir)
        self.key = B.SecretKey.read(key_path)
        self.view, self.fp8_block = view, fp8_block
        self.metadata, self.model = metadata, model
        self.opts = B.publish_opts(**publish_options)
        self.work_dir = work_dir or os.path.join(self.store_dir, "publisher")
        self.last = None
        self._image = None
        self._prev = self._resume_prev()
        self._pool = None
        self._job = None
        self._lock = threading.Lock()  # last, across the worker thread
        if background:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="stitch-publish")

    def _resume_prev(self):
        """After a restart, the store's copy of the latest view (proto/
        store.md) keeps scales stable across it, if it is of our kind."""
        if not os.path.isdir(os.path.join(self.store_dir, "manifests")):
            return None
        with B.Store(self.store_dir, self.key.public) as s:
            v = s.latest()
        path = os.path.join(self.store_dir, "publisher",
                            "view-%020d.safetensors" % v)
        if v == 0 or not os.path.exists(path):
            return None
        ck = B.Checkpoint.open(path)
        m = ck.metadata() or {}
        if m.get("stitch.view") != self.view or \
                m.get("stitch.fp8_block", "0") != str(self.fp8_block):
            ck.close()
            return None
        return ck

    def publish(self, src=None, on_publish=None):
        """Publishes SRC (a Module, a dict or (name, tensor) pairs; default
        the model given at construction) as the next version. Call it after
        optimizer.step(). Returns a PublishResult with the stall; with
        background=True, a concurrent.futures.Future of it, as soon as the
        masters are copied (SRC may change from then on). A background
        publish that failed raises here, at the next call, or in wait().
        ON_PUBLISH(result) is called once the version is published (on the
        worker thread, in the background)."""
        t0 = time.perf_counter()
        items = named_tensors(src if src is not None else self._need_model())
        self.wait()  # the image is the job's until it is done
        t1 = time.perf_counter()
        masters = self._capture(items)
        t2 = time.perf_counter()
        if self._pool is None:
            return self._finish(masters, t2 - t0, 0.0, t2 - t1, on_publish)
        self._job = self._pool.submit(self._finish, masters, t2 - t0,
                                      t1 - t0, t2 - t1, on_publish)
        return self._job

    def wait(self):
        """Waits for a background publish in flight, if any, and returns
        its PublishResult (None when there is none), or raises its error."""
        job, self._job = self._job, None
        return job.result() if job is not None else None

    def _capture(self, items):
        """The one copy of the step: the masters into the host image."""
        if self._image is None or self._image.layout != layout_of(items):
            pin = any(t.is_cuda for _, t in items)
            if self._image is not None and self._image.ckpt is not None:
                self._image.ckpt.close()
            self._image = MasterImage(items, self.metadata, pin=pin)
        return self._image.fill(items)

    def _finish(self, masters, stall_s, wait_s, copy_s, on_publish):
        """View, then publish: on the training thread, or the worker."""
        t1 = time.perf_counter()
        os.makedirs(self.work_dir, exist_ok=True)
        path = os.path.join(self.work_dir, "building-view.safetensors")
        stats = B.build_view(masters, path, self.view, self._prev,
                             self.fp8_block)
        view = B.Checkpoint.open(path)
        # The mapping outlives the name: no view file is left behind, and
        # this step's view is the next step's PREV.
        os.unlink(path)
        t2 = time.perf_counter()
        try:
            r = B.publish(self.store_dir, self.key, view, self.opts)
        except BaseException:
            view.close()
            raise
        if self._prev is not None:
            self._prev.close()
        self._prev = view
        t3 = time.perf_counter()
        background = self._pool is not None
        result = PublishResult(
            version=r["version"], id=r["id"],
            stall_s=stall_s if background else stall_s + t3 - t1,
            copy_s=copy_s, view_s=t2 - t1, publish_s=t3 - t2,
            view_bytes=r["view_bytes"],
            scales_changed=stats["scales_changed"], objects=r["objects"],
            wait_s=wait_s, background=background)
        with self._lock:
            self.last = result
        if on_publish is not None:
            on_publish(result)
        return result

    def _need_model(self):
        if self.model is None:
            raise ValueError("nothing to publish: pass the model (or named "
                             "tensors) to publish() or Publisher(model=...)")
        return self.model

    def hook(self, optimizer, model=None, on_publish=None):
        """Publishes after every optimizer.step(), through a step post-hook:
            Publisher(store, key).hook(optimizer, model)
        ON_PUBLISH(result), if given, is called after each version (on the
        worker thread, in the background). Returns the hook's handle
        (handle.remove() detaches it)."""
        src = model if model is not None else self._need_model()
        if not isinstance(src, dict) and not hasattr(src, "state_dict"):
            src = list(src)  # a generator would be spent after one step

        def post(opt, args, kwargs):
            self.publish(src, on_publish)

        return optimizer.register_step_post_hook(post)

    def close(self):
        """Waits for a background publish (raising its error) and lets go
        of the image, the previous view and the worker."""
        try:
            self.wait()
        finally:
            self._release()

    def _release(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._prev is not None:
            self._prev.close()
            self._prev = None
        if self._image is not None and self._image.ckpt is not None:
            self._image.ckpt.close()
        self._image = None
