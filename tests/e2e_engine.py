#!/usr/bin/env python3
"""e2e_engine.py: a stand-in OpenAI-compatible engine for
tests/e2e_trainer_engine.sh that holds a model's served tensors in torch
(CPU) and patches them in place through stitch.EngineAdapter.

  e2e_engine.py --port-file FILE --store DIR --swarm PREFIX.pub

DIR is the stitchd node's --data store. The engine starts empty: its
tensors are allocated (zeroed, the layout of the first version it is told
to load) at the first reload, and never reallocated after that.

  POST /reload          {"version": v, "weights": FILE} (stitchd's reload
                        hook): EngineAdapter.apply(v) over DIR, in place;
                        200 {"version", "pause_s", "stats"}, else 500
  POST /v1/completions  a completion whose body names the version the
                        tensors hold ("version") and their digests
                        ("tensor_digests", name -> hex, with the binding's
                        tensor digest), plus "in_place" (every tensor still
                        at the address it was allocated at)
  GET  /state           {"version", "reloads"}

Every request is logged on stderr.
"""
import argparse
import threading
import time

import torch

import stitch
from engine_http import JsonHandler, serve


class Engine:
    def __init__(self, store, swarm):
        self.store, self.swarm = store, swarm
        self.lock = threading.Lock()
        self.tensors = None   # name -> CPU tensor: the live weights
        self.ptrs = None      # their addresses at allocation
        self.adapter = None
        self.reloads = []

    def reload(self, version):
        with self.lock:
            if self.tensors is None:
                self.tensors = stitch.tensors_for(self.store, self.swarm,
                                                  version=version)
                self.ptrs = {n: t.data_ptr() for n, t in self.tensors.items()}
                self.adapter = stitch.EngineAdapter(self.tensors, self.store,
                                                    self.swarm, version=0)
            pause = self.adapter.apply(version=version)
            stats = dict(self.adapter.last_stats)
            self.reloads.append({"version": self.adapter.version,
                                 "pause_s": pause, "stats": stats})
            return self.adapter.version, pause, stats

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
                self.reply(200, {"version": v, "reloads": eng.reloads})
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
        elif self.path == "/reload":
            try:
                version = int(req["version"])
                got, pause, stats = eng.reload(version)
            except (KeyError, ValueError, TypeError,
                    stitch.StitchError) as e:
                self.reply(500, {"error": "reload: %s: %s"
                                 % (type(e).__name__, e)})
                return
            self.reply(200, {"version": got, "pause_s": pause,
                             "stats": stats})
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
