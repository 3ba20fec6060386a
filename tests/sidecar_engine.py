#!/usr/bin/env python3
"""sidecar_engine.py: a stand-in for an OpenAI-compatible engine, for
tests/sidecar.sh and tests/sidecar_prepare.sh. Standard library only.

  sidecar_engine.py --port-file FILE [--reload-delay-ms N]

Listens on 127.0.0.1 on a free port and writes the port to FILE.

  POST /v1/completions  {"prompt": ..., "sleep_ms": N}: waits N ms (a slow
                        generation), answers a completion naming the
                        version it serves ("version"), the SHA-256 of
                        the weights file it loaded ("weights_sha256") and
                        the version a prepare is working on ("preparing",
                        null when none).
                        With "stream": true, server-sent events in a
                        chunked body: a first event, then (with "hold":
                        FILE) nothing until FILE exists, then "tokens"
                        more (default 3) and "data: [DONE]"
  GET  /blob?mb=N       N MiB of a fixed pattern, with a Content-Length
  POST /reload          {"version": v, "weights": FILE}: "loads" FILE
                        (hashes it) after --reload-delay-ms, then serves v
  POST /prepare         {"version": v, "weights": FILE} (the sidecar's
                        prepare hook, docs/stitchd.md): while serving,
                        waits for the "prepare_hold" file (if set) and
                        "prepare_delay_ms", then fails with a 500 if
                        "fail_prepares" says so (one fewer each time), else
                        hashes FILE and keeps (v, hash) prepared
  POST /commit          {"version": v}: serves the prepared v; a 409 when
                        nothing is prepared for v, or "stale_commits" says
                        so (one fewer each time; what was prepared is
                        dropped, as an engine whose tensors moved would)
  POST /control         sets the knobs above ({"prepare_delay_ms": N,
                        "prepare_hold": FILE|null, "fail_prepares": N,
                        "stale_commits": N}: the keys given)
  GET|POST /echo        {"headers": [[name, value], ...]}: the request's
                        headers as they arrived; the answer carries
                        hop-by-hop and X-Stitch-* headers of its own (a
                        proxy must drop them) and "X-Engine-Keep: yes"
  GET  /v1/models       one model
  GET  /state           {"version", "weights_sha256", "reloads", "preparing",
                        "prepares": [[v, status], ...],
                        "commits": [[v, status], ...]}

Anything else is 404. Every request is logged on stderr.
"""
import argparse
import hashlib
import json
import os
import threading
import time

from engine_http import JsonHandler, serve


class Engine:
    def __init__(self, delay_ms):
        self.lock = threading.Lock()
        self.version = 0
        self.sha = None
        self.reloads = []
        self.delay_ms = delay_ms
        self.prepared = None   # (version, sha) ready to commit
        self.preparing = None  # the version a prepare works on
        self.prepares, self.commits = [], []
        self.knobs = {"prepare_delay_ms": 0, "prepare_hold": None,
                      "fail_prepares": 0, "stale_commits": 0}


class Handler(JsonHandler):
    extra_headers = (("X-Engine", "stand-in"),)

    def stream(self, req, version):
        """A streamed completion, as OpenAI-compatible engines send one."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def event(data):
            b = ("data: %s\n\n" % data).encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(b), b))
            self.wfile.flush()

        event(json.dumps({"index": 0, "text": "first", "version": version}))
        hold = req.get("hold")
        for _ in range(600):  # 30 s: past the test client's timeout
            if not hold or os.path.exists(hold):
                break
            time.sleep(0.05)
        for i in range(int(req.get("tokens", 3))):
            event(json.dumps({"index": i + 1, "text": " t%d" % i}))
        event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")

    def echo(self):
        """The request's headers, and a reply with headers no proxy may
        relay: those named by Connection, the standard hop-by-hop ones and
        X-Stitch-* (the sidecar stamps its own)."""
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        body = (json.dumps({"headers": self.headers.items()}) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (("Connection", "X-Engine-Hop, x-engine-hop2"),
                     ("X-Engine-Hop", "1"), ("X-ENGINE-HOP2", "2"),
                     ("Keep-Alive", "timeout=5"),
                     ("Proxy-Connection", "keep-alive"),
                     ("Upgrade", "h2c"), ("Trailer", "X-T"),
                     ("X-Stitch-Version", "999"), ("x-stitch-engine", "1"),
                     ("X-Engine-Keep", "yes")):
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        eng = self.server.engine
        if self.path == "/echo":
            self.echo()
        elif self.path.startswith("/blob?mb="):
            n = int(self.path.split("=", 1)[1]) << 20
            piece = bytes(range(256)) * 256
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(n))
            self.end_headers()
            for _ in range(n // len(piece)):
                self.wfile.write(piece)
        elif self.path == "/v1/models":
            self.reply(200, {"object": "list",
                             "data": [{"id": "stand-in", "object": "model"}]})
        elif self.path == "/state":
            with eng.lock:
                self.reply(200, {"version": eng.version,
                                 "weights_sha256": eng.sha,
                                 "reloads": eng.reloads,
                                 "preparing": eng.preparing,
                                 "prepares": eng.prepares,
                                 "commits": eng.commits})
        else:
            self.not_found()

    def do_POST(self):
        eng = self.server.engine
        if self.path == "/echo":
            self.echo()
            return
        req = self.body()
        if req is None:
            self.reply(400, {"error": "body is not JSON"})
        elif self.path == "/v1/completions":
            with eng.lock:
                version, sha = eng.version, eng.sha
                preparing = eng.preparing
            if req.get("stream"):
                self.stream(req, version)
                return
            time.sleep(min(int(req.get("sleep_ms", 0)), 10000) / 1000.0)
            with eng.lock:
                if eng.version != version:  # a reload ran under a request
                    version = -1
            self.reply(200, {
                "id": "cmpl-%d" % time.monotonic_ns(),
                "object": "text_completion",
                "model": "stand-in",
                "choices": [{"index": 0, "text": " ok",
                             "finish_reason": "stop"}],
                "prompt": req.get("prompt"),
                "version": version,
                "weights_sha256": sha,
                "preparing": preparing})
        elif self.path == "/reload":
            try:
                with open(req["weights"], "rb") as f:
                    sha = hashlib.sha256(f.read()).hexdigest()
                version = int(req["version"])
            except (KeyError, OSError, ValueError, TypeError) as e:
                self.reply(400, {"error": "reload: %s" % e})
                return
            time.sleep(eng.delay_ms / 1000.0)
            with eng.lock:
                eng.version, eng.sha = version, sha
                eng.reloads.append(version)
            self.reply(200, {"version": version, "weights_sha256": sha})
        elif self.path == "/prepare":
            self.prepare(eng, req)
        elif self.path == "/commit":
            self.commit(eng, req)
        elif self.path == "/control":
            with eng.lock:
                for k, v in req.items():
                    if k not in eng.knobs:
                        self.reply(400, {"error": "no knob " + k})
                        return
                    eng.knobs[k] = v
                self.reply(200, eng.knobs)
        else:
            self.not_found()

    def prepare(self, eng, req):
        """The prepare hook: slow, and meanwhile completions are served."""
        try:
            version = int(req["version"])
            weights = req["weights"]
        except (KeyError, ValueError, TypeError) as e:
            self.reply(400, {"error": "prepare: %s" % e})
            return
        with eng.lock:
            eng.preparing = version
            hold = eng.knobs["prepare_hold"]
            delay = eng.knobs["prepare_delay_ms"]
        for _ in range(1200):  # 60 s at most
            if not hold or os.path.exists(hold):
                break
            time.sleep(0.05)
        time.sleep(delay / 1000.0)
        with eng.lock:
            eng.preparing = None
            fail = eng.knobs["fail_prepares"] > 0
            if fail:
                eng.knobs["fail_prepares"] -= 1
                eng.prepares.append([version, 500])
        if fail:
            self.reply(500, {"error": "prepare: told to fail"})
            return
        try:
            with open(weights, "rb") as f:
                sha = hashlib.sha256(f.read()).hexdigest()
        except OSError as e:
            with eng.lock:
                eng.prepares.append([version, 400])
            self.reply(400, {"error": "prepare: %s" % e})
            return
        with eng.lock:
            eng.prepared = (version, sha)
            eng.prepares.append([version, 200])
        self.reply(200, {"version": version, "weights_sha256": sha})

    def commit(self, eng, req):
        """The commit hook: quick; 409 when the prepared patch is stale."""
        try:
            version = int(req["version"])
        except (KeyError, ValueError, TypeError) as e:
            self.reply(400, {"error": "commit: %s" % e})
            return
        with eng.lock:
            if eng.knobs["stale_commits"] > 0:
                eng.knobs["stale_commits"] -= 1
                eng.prepared = None
            if eng.prepared is None or eng.prepared[0] != version:
                eng.commits.append([version, 409])
                code, body = 409, {"error": "nothing prepared for version %d"
                                   % version}
            else:
                eng.version, eng.sha = eng.prepared
                eng.prepared = None
                eng.commits.append([version, 200])
                code, body = 200, {"version": version}
        self.reply(code, body)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--reload-delay-ms", type=int, default=50)
    a = ap.parse_args()
    serve(Handler, Engine(a.reload_delay_ms), a.port_file)


if __name__ == "__main__":
    main()
