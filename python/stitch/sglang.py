"""SGLang: every tensor-parallel worker brings its own shard of the model to
each Stitch version, in two phases, through SGLang's custom weight loader
(docs/python.md "Engines: vLLM and SGLang").

    engine = sglang.Engine(model_path=..., tp_size=2,
                           custom_weight_loader=["stitch.sglang.load_weights"])
    # or: python -m sglang.launch_server ... \\
    #         --custom-weight-loader stitch.sglang.load_weights
    ctl = stitch.sglang.SGLangController(engine)
    ctl.init("store", "trainer.pub", version=1, follow_s=1.0)
    ctl.prepare()            # not needed with follow_s: workers prepare alone
    pauses = ctl.commit()    # flushes SGLang's cache after the weights change

What this relies on in SGLang (sgl-project/sglang, read through the search
index's copies; none of it was run here):
- python/sglang/srt/model_executor/model_runner.py (at 0005834cdb2a),
  ModelRunner.update_weights_from_tensor(named_tensors, load_format): when
  load_format is one of server_args.custom_weight_loader (the
  --custom-weight-loader import paths), it runs
  dynamic_import(load_format)(self.model, named_tensors) in every
  tensor-parallel worker's process, after moving the tensors to the
  worker's device. Its return value is dropped: the call answers
  (True, "Success").
- Engine.update_weights_from_tensor(named_tensors, load_format=None,
  flush_cache=True) sends the same list to every rank and waits; the
  scheduler (scheduler_update_weights_mixin.py) flushes the cache on
  success when flush_cache is set, then barriers the TP group. The
  tokenizer manager holds its model_update_lock's writer lock for the call
  (tokenizer_communicator_mixin.py: "weight sync cannot run while requests
  are in progress") unless the engine is paused: every call here waits for
  running requests to finish.
- An exception out of the loader is not caught on the way (model_runner,
  tp_worker, scheduler) and stops the scheduler; so load_weights below
  never raises for a Stitch command: each worker writes its outcome to a
  report file that the controller reads. There is no other channel back:
  SGLang's collective_rpc only runs Scheduler methods and returns
  success/message.

Commands travel as the name of one 1-byte tensor, "__stitch__/" + JSON.
Nothing imports SGLang: the controller takes any object with SGLang's
update_weights_from_tensor signature.
"""
import json
import os
import socket
import tempfile
import uuid

from . import _lib as L
from .model_adapter import ModelAdapter, error_summary

PREFIX = "__stitch__/"
LOADER = "stitch.sglang.load_weights"
_OPS = ("init", "prepare", "wait", "commit", "discard", "status")


# ---- the worker side: SGLang's custom weight loader ----------------------

def _ranks():
    """(global rank, tensor-parallel rank) of this process, where known."""
    rank = tp = None
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            rank = dist.get_rank()
    except Exception:
        pass
    try:
        from sglang.srt.distributed import get_tensor_model_parallel_rank
        tp = get_tensor_model_parallel_rank()
    except Exception:  # not inside SGLang
        pass
    return rank, tp


def _run(model, op, args):
    ad = getattr(model, "_stitch_adapter", None)
    if op == "init":
        if ad is not None:
            ad.unfollow()
        follow_s = args.pop("follow_s", None)
        args["swarm_pub"] = _pub_of(args["swarm_pub"])
        ad = ModelAdapter(model, **args)
        model._stitch_adapter = ad
        if follow_s:
            ad.follow(follow_s)
        return ad.status()
    if ad is None:
        raise RuntimeError("stitch: no init on this worker yet")
    if op == "prepare":
        return ad.prepare(args.get("version"),
                          background=bool(args.get("background")))
    if op == "wait":
        return ad.wait(args.get("timeout"))
    if op == "commit":
        return ad.commit()
    if op == "discard":
        return ad.discard()
    return ad.status()


def _report(model, cmd, body):
    rank, tp = _ranks()
    body.update(seq=cmd["seq"], nonce=cmd["nonce"], rank=rank, tp_rank=tp,
                host=socket.gethostname(), pid=os.getpid())
    d = cmd["reports"]
    path = os.path.join(d, "%s-%d-%x.json" % (body["host"], body["pid"],
                                              id(model)))
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(body, f)
    os.replace(tmp, path)  # the controller never reads half a report


def load_weights(model, named_tensors):
    """SGLang's custom weight loader (--custom-weight-loader
    stitch.sglang.load_weights). A "__stitch__/" name is a command for this
    worker's ModelAdapter; its outcome goes to the command's report
    directory, never up as an exception. Any other (name, tensor) goes to
    the model's own load_weights, as SGLang's default path would."""
    rest = []
    for name, t in named_tensors:
        if not name.startswith(PREFIX):
            rest.append((name, t))
            continue
        try:
            cmd = json.loads(name[len(PREFIX):])
        except ValueError:
            continue  # not ours to answer: no report directory
        try:
            if cmd.get("op") not in _OPS:
                raise ValueError("stitch: unknown op %r" % cmd.get("op"))
            body = {"ok": True,
                    "result": _run(model, cmd["op"], dict(cmd["args"]))}
        except Exception as e:
            body = {"ok": False, "error": error_summary(e)}
        try:
            _report(model, cmd, body)
        except Exception as e:  # the controller will miss this worker
            import sys
            print("stitch.sglang: cannot write a report to %s: %s"
                  % (cmd.get("reports"), e), file=sys.stderr)
    if rest:
        model.load_weights(rest)


# ---- the controller side ------------------------------------------------

class SGLangController:
    """SGLangController(engine, workers=None, report_dir=None)

    engine: sglang.Engine, or anything with its
    update_weights_from_tensor(named_tensors, load_format=, flush_cache=).
    workers: how many processes run the loader (default the engine's
    server_args tp_size x pp_size); every call waits for that many reports.
    report_dir: where workers report (default a new temporary directory;
    it must be one the workers see: the same host, or a shared file
    system)."""

    def __init__(self, engine, workers=None, report_dir=None):
        self.engine = engine
        if workers is None:
            sa = getattr(engine, "server_args", None)
            if sa is None:
                raise ValueError("workers: the engine has no server_args; "
                                 "say how many workers run the loader")
            workers = int(sa.tp_size) * int(getattr(sa, "pp_size", 1) or 1)
        self.workers = workers
        self._own_dir = report_dir is None
        if report_dir is None:
            report_dir = tempfile.mkdtemp(prefix="stitch-sglang-")
        os.makedirs(report_dir, exist_ok=True)
        self.report_dir = os.fspath(report_dir)
        self._nonce = uuid.uuid4().hex
        self._seq = 0

    def close(self):
        """Removes the report directory when the controller made it."""
        if self._own_dir:
            import shutil
            shutil.rmtree(self.report_dir, ignore_errors=True)

    def _call(self, op, flush_cache=False, **args):
        import torch
        self._seq += 1
        cmd = {"op": op, "seq": self._seq, "nonce": self._nonce,
               "reports": self.report_dir, "args": args}
        name = PREFIX + json.dumps(cmd, sort_keys=True)
        out = self.engine.update_weights_from_tensor(
            [(name, torch.zeros(1, dtype=torch.uint8))], load_format=LOADER,
            flush_cache=flush_cache)
        if isinstance(out, tuple) and out and out[0] is False:
            raise RuntimeError("stitch: SGLang refused the %s call: %s"
                               % (op, out[1] if len(out) > 1 else ""))
        reports = self._collect()
        if len(reports) != self.workers:
            raise RuntimeError(
                "stitch: %d of %d workers reported for %s (is the engine "
                "started with --custom-weight-loader %s, and %s readable "
                "here?)" % (len(reports), self.workers, op, LOADER,
                            self.report_dir))
        bad = [r for r in reports if not r["ok"]]
        if bad:
            raise _worker_error(op, bad)
        return [r["result"] for r in reports]

    def _collect(self):
        got = []
        for fn in os.listdir(self.report_dir):
            if not fn.endswith(".json"):
                continue
            try:
                with open(os.path.join(self.report_dir, fn)) as f:
                    r = json.load(f)
            except (OSError, ValueError):
                continue
            if r.get("nonce") == self._nonce and r.get("seq") == self._seq:
                got.append(r)
        got.sort(key=lambda r: (r["rank"] is None, r["rank"] or 0,
                                r["tp_rank"] or 0, r["pid"]))
        return got

    def init(self, store_dir, swarm_pub, version=None, mode="auto",
             threads=0, follow_s=None):
        """Wraps each worker's model in a ModelAdapter (see
        stitch.vllm.StitchWorkerExtension.stitch_init for the arguments).
        follow_s: each worker prepares every new version on its own thread
        as the store gets it, so that no prepare call (and no wait for
        running requests) is needed. Returns each worker's status."""
        return self._call("init", store_dir=os.fspath(store_dir),
                          swarm_pub=_pub_arg(swarm_pub), version=version,
                          mode=mode, threads=threads, follow_s=follow_s)

    def prepare(self, version=None, background=False):
        """Each worker's prepare summary (None each with background)."""
        return self._call("prepare", version=version, background=background)

    def wait(self, timeout=None):
        return self._call("wait", timeout=timeout)

    def commit(self, flush_cache=True):
        """The pause on every worker; SGLang flushes its cache after it
        (flush_cache), since cached prefixes were computed with the old
        weights. Returns each worker's pause in seconds."""
        return self._call("commit", flush_cache=flush_cache)

    def discard(self):
        return self._call("discard")

    def status(self):
        return self._call("status")

    def version(self):
        """Each worker's version (None: a commit failed midway there)."""
        return [s["version"] for s in self.status()]


def _pub_arg(pub):
    """A swarm key that crosses a process as JSON: a path, or "hex:" and
    the key's 32 bytes (_pub_of reads it back)."""
    if isinstance(pub, (str, os.PathLike)):
        return os.fspath(pub)
    from .binding import PublicKey
    return "hex:" + PublicKey.of(pub).hex()


def _pub_of(arg):
    return bytes.fromhex(arg[4:]) if arg.startswith("hex:") else arg


def _worker_error(op, bad):
    msg = "; ".join("worker %s: %s: %s" % (
        r["rank"] if r["rank"] is not None else r["pid"],
        r["error"].get("name", r["error"]["type"]), r["error"]["message"])
        for r in bad)
    msg = "stitch %s failed on %d worker(s): %s" % (op, len(bad), msg)
    names = {r["error"].get("name") for r in bad}
    if names == {"EDIGEST"}:
        from .engine import DigestMismatch
        tensors = sorted({t for r in bad for t in r["error"].get("tensors",
                                                                  [])})
        return DigestMismatch(msg, tensors)
    if len(names) == 1 and None not in names:
        return L.error(names.pop(), msg)
    return RuntimeError(msg)
