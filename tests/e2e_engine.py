#!/usr/bin/env python3
"""e2e_engine.py: a stand-in OpenAI-compatible engine for
tests/e2e_trainer_engine.sh that holds a model's served tensors in torch
(CPU) and patches them in place through stitch.EngineAdapter.

  e2e_engine.py --port-file FILE --store DIR --swarm PREFIX.pub

DIR is the stitchd node's --data store. The engine starts empty: its
tensors are allocated (zeroed, the layout of the first version it is told
to load) at the first prepare or reload, and never reallocated after that.
Its hooks follow docs/stitchd.md's contract:

  POST /prepare         {"version": v, "weights": FILE} (stitchd's
                        --engine-prepare hook, called while the engine
                        serves): EngineAdapter.prepare(v) over DIR, writing
                        nothing the completions read; 200 {"version",
                        "prepare_s", "stats"}, else 500
  POST /commit          {"version": v, ...} (--engine-reload with a prepare
                        hook: the pause): EngineAdapter.commit() of what
                        was prepared for v, in place; 200 {"version",
                        "pause_s", "stats"}; 409 when nothing is prepared
                        for v or the tensors moved since (EMISMATCH:
                        nothing written, prepare again); else 500
  POST /reload          {"version": v, "weights": FILE} (the single hook,
                        without --engine-prepare): EngineAdapter.apply(v),
                        prepare and commit in one call; as /commit
  POST /v1/completions  a completion whose body names the version the
                        tensors hold ("version") and their digests
                        ("tensor_digests", name -> hex, with the binding's
                        tensor digest), plus "in_place" (every tensor still
                        at the address it was allocated at)
  GET  /state           {"version", "reloads": [{"version", "pause_s",
                        "stats"}, ...] (one per commit or reload),
                        "prepares": [{"version", "prepare_s"}, ...]}

Every request is logged on stderr.
"""
import argparse
import threading
import time

import torch

import stitch
from engine_http import JsonHandler, serve


class Stale(Exception):
    """The commit hook's 409: nothing prepared for that version, or the
    tensors moved since the prepare; nothing was written."""


class Engine:
    # Locks, always taken in this order: `adapter_lock` (one prepare,
    # commit or reload at a time), then `lock` (the tensors: completions
    # read them under it, a commit writes them under it). A prepare holds
    # only the first, so completions go on while it decodes.
    def __init__(self, store, swarm):
        self.store, self.swarm = store, swarm
        self.adapter_lock = threading.Lock()
        self.lock = threading.Lock()
        self.tensors = None   # name -> CPU tensor: the live weights
        self.ptrs = None      # their addresses at allocation
        self.adapter = None
        self.reloads = []
        self.prepares = []

    def _ensure(self, version):
        """Allocates the tensors at the first call (under self.lock)."""
        if self.tensors is None:
            self.tensors = stitch.tensors_for(self.store, self.swarm,
                                              version=version)
            self.ptrs = {n: t.data_ptr() for n, t in self.tensors.items()}
            self.adapter = stitch.EngineAdapter(self.tensors, self.store,
                                                self.swarm, version=0)

    def _committed(self, pause):
        stats = dict(self.adapter.last_stats)
        self.reloads.append({"version": self.adapter.version,
                             "pause_s": pause, "stats": stats})
        return self.adapter.version, pause, stats

    def prepare(self, version):
        with self.adapter_lock:
            with self.lock:
                self._ensure(version)
            got = self.adapter.prepare(version=version)  # serving meanwhile
            stats = dict(self.adapter.last_stats)
            self.prepares.append({"version": got,
                                  "prepare_s": stats["prepare_s"]})
            return got, stats

    def commit(self, version):
        with self.adapter_lock, self.lock:
            if self.adapter is None or self.adapter.prepared() != version:
                raise Stale("nothing prepared for version %d" % version)
            try:
                pause = self.adapter.commit()
            except stitch.StitchError as e:
                if e.name == "EMISMATCH":
                    raise Stale(str(e)) from None
                raise
            return self._committed(pause)

    def reload(self, version):
        with self.adapter_lock, self.lock:
            self._ensure(version)
            return self._committed(self.adapter.apply(version=version))

    def snapshot(self):
        with self.lock:
            if self.tensors is None:
                return 0, {}, True
            names = sorted(self.tensors)
            items = []
            for n in names:
                t = self.tensors[n]
                items.append((stitch.binding.st_dtype(t.dtype), list(t.shape),
                              t.data_ptr(), t.numel() * t.element_size()))
            dg = stitch.tensor_digests(items)
            in_place = all(self.tensors[n].data_ptr() == self.ptrs[n]
                           for n in names)
            return (self.adapter.version,
                    {n: d.hex() for n, d in zip(names, dg)}, in_place)


class Handler(JsonHandler):
    def do_GET(self):
        eng = self.server.engine
        if self.path == "/state":
            with eng.lock:
                v = eng.adapter.version if eng.adapter else 0
                self.reply(200, {"version": v, "reloads": eng.reloads,
                                 "prepares": eng.prepares})
        else:
            self.not_found()

    def do_POST(self):
        eng = self.server.engine
        req = self.body()
        if req is None:
            self.reply(400, {"error": "body is not JSON"})
        elif self.path == "/v1/completions":
            version, digests, in_place = eng.snapshot()
            self.reply(200, {
                "id": "cmpl-%d" % time.monotonic_ns(),
                "object": "text_completion",
                "model": "e2e-stand-in",
                "choices": [{"index": 0, "text": " ok",
                             "finish_reason": "stop"}],
                "version": version,
                "tensor_digests": digests,
                "in_place": in_place})
        elif self.path in ("/prepare", "/commit", "/reload"):
            hook = self.path[1:]
            try:
                version = int(req["version"])
                if hook == "prepare":
                    got, stats = eng.prepare(version)
                    out = {"version": got, "prepare_s": stats["prepare_s"],
                           "stats": stats}
                else:
                    got, pause, stats = (eng.commit if hook == "commit"
                                         else eng.reload)(version)
                    out = {"version": got, "pause_s": pause, "stats": stats}
            except Stale as e:
                self.reply(409, {"error": "%s: stale: %s" % (hook, e)})
                return
            except (KeyError, ValueError, TypeError,
                    stitch.StitchError) as e:
                self.reply(500, {"error": "%s: %s: %s"
                                 % (hook, type(e).__name__, e)})
                return
            self.reply(200, out)
        else:
            self.not_found()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--swarm", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    serve(Handler, Engine(a.store, a.swarm), a.port_file)


if __name__ == "__main__":
    main()
