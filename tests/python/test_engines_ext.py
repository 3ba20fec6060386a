#!/usr/bin/env python3
"""The engine extensions (docs/python.md "Engines: vLLM and SGLang")
against stand-in workers, with no vLLM or SGLang installed.

The stand-ins copy what the extensions rely on in each engine:
- vLLM: a Worker class with model_runner.model; the extension is mixed in
  as WorkerWrapperBase.init_worker does (a check that the worker class has
  none of the extension's attributes, then the extension appended to its
  __bases__); collective_rpc runs the method on every worker, in rank
  order, and a worker's exception comes back as a RuntimeError naming it
  (vLLM's multiprocessing executor).
- SGLang: Engine.update_weights_from_tensor serializes the list once per
  rank and each rank's ModelRunner.update_weights_from_tensor moves it to
  the device and calls dynamic_import(load_format)(model, tensors) when
  load_format is one of server_args.custom_weight_loader; an exception
  from the loader propagates (in SGLang it stops the scheduler), so the
  test fails on one.
- The model: a tensor-parallel rank r of k, named and loaded as vLLM's
  Llama is (load_weights with stacked_params_mapping): the embedding and
  lm_head keep rows [r*n/k, (r+1)*n/k), o_proj and down_proj those
  columns, qkv_proj is built from the q, k and v checkpoint tensors (each
  one's rows for the rank, one after another) and gate_up_proj from gate
  and up; norms are whole; rotary_emb.inv_freq is skipped.

Each worker's tensors are checked bit for bit against slices of the
trainer's served view cut here independently of the model's loader (and
that check is shown to catch a loader that takes the wrong rows).
Checked: init, prepare (nothing written, to the model or the mirror),
commit on 2 workers; only the tensors that changed are loaded; a wrong
base (a corrupted mirror, or a corrupted parameter in the direct mode) is
refused with nothing written; catching up over several versions; a
background prepare; a load that fails midway and is finished by a second
commit; a worker that starts with no known version; the direct mode on an
unsharded model; SGLang's path, the following mode included.

Plain script (ctest runs it): exit 0 pass, 1 fail, 77 skip (no torch or
safetensors). STITCH_SEED=N replays a run; the seed is printed.
STITCH_TEST_DEVICE=cuda puts the stand-ins' parameters on the GPU.
"""
import importlib
import os
import pickle
import shutil
import sys
import tempfile
import time

import harness

SEED = harness.start()  # exits 77 without torch or safetensors
import torch
from safetensors.torch import load_file
from harness import check, raw

import stitch
from stitch import DigestMismatch, Publisher, StitchError
from stitch import sglang as SG
from stitch.vllm import StitchWorkerExtension

DEVICE = os.environ.get("STITCH_TEST_DEVICE", "cpu")

H, KV, I, V = 32, 8, 48, 64  # hidden, k/v rows, MLP, vocab
K = 2                        # tensor-parallel workers
LAYERS = 2
P = "model.layers.%d."


# ---- the trainer: HF Llama names ---------------------------------------

class Lin(torch.nn.Module):
    def __init__(self, o, i):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(o, i) * 0.1)

    def forward(self, x):
        return x @ self.weight.t()


class Norm(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(1 + 0.1 * torch.randn(n))

    def forward(self, x):
        return x * self.weight


class Rotary(torch.nn.Module):
    def __init__(self):
        super().__init__()  # persistent: in the state_dict, so in the view
        self.register_buffer("inv_freq", torch.rand(H // 4))


class Attn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj, self.k_proj = Lin(H, H), Lin(KV, H)
        self.v_proj, self.o_proj = Lin(KV, H), Lin(H, H)
        self.rotary_emb = Rotary()

    def forward(self, x):
        q = self.q_proj(x)
        kv = torch.cat([self.k_proj(x), self.v_proj(x)], -1)
        return self.o_proj(torch.cat([q[..., :2 * KV] * kv, q[..., 2 * KV:]],
                                     -1))


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj, self.up_proj = Lin(I, H), Lin(I, H)
        self.down_proj = Lin(H, I)

    def forward(self, x):
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(x))
                              * self.up_proj(x))


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = Norm(H), Norm(H)
        self.input_layernorm.weight.requires_grad_(False)  # never changes
        self.self_attn, self.mlp = Attn(), Mlp()

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(V, H)
        self.layers = torch.nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = Norm(H)


class Llama(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = Inner()
        self.lm_head = Lin(V, H)

    def forward(self, ids):
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x)
        return self.lm_head(self.model.norm(x))


class Trainer:
    def __init__(self, tmp, name):
        self.store = os.path.join(tmp, "store-" + name)
        self.pub = os.path.join(tmp, "tr.pub")
        self.model = Llama()
        # BF16 at 1e-5: a few percent of the elements move per step.
        self.opt = torch.optim.Adam(
            [p for p in self.model.parameters() if p.requires_grad], lr=1e-5)
        self.p = Publisher(self.store, os.path.join(tmp, "tr.key"),
                           view="bf16", keep=16)
        self.views = {}

    def publish(self):
        v = self.p.publish(self.model).version
        self.views[v] = load_file(os.path.join(
            self.store, "publisher", "view-%020d.safetensors" % v))
        return v

    def step(self):
        x = torch.randint(0, V, (4, 8))
        loss = torch.nn.functional.cross_entropy(
            self.model(x).reshape(-1, V), x.roll(1, 1).reshape(-1))
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return self.publish()

    def changed(self, a, b):
        """Names whose bytes differ between the views of A and B."""
        va, vb = self.views[a], self.views[b]
        return sorted(n for n in vb
                      if n not in va or not torch.equal(raw(va[n]),
                                                        raw(vb[n])))


# ---- the engine's model: a tensor-parallel rank, as vLLM's Llama ---------

def _put(root, dotted, p, buffer=False):
    """Registers P at DOTTED under ROOT, making the modules on the way."""
    *path, leaf = dotted.split(".")
    m = root
    for part in path:
        if not hasattr(m, part):
            m.add_module(part, torch.nn.Module())
        m = getattr(m, part)
    if buffer:
        m.register_buffer(leaf, p)
    else:
        m.register_parameter(leaf, p)


class TPModel(torch.nn.Module):
    """Rank R of a K-way tensor-parallel Llama, named as vLLM's, loaded
    through load_weights as vLLM's LlamaModel does. BROKEN: the v rows of
    qkv_proj come from the next rank (what the shard check must catch)."""

    STACKED = [(".qkv_proj", ".q_proj", "q"), (".qkv_proj", ".k_proj", "k"),
               (".qkv_proj", ".v_proj", "v"),
               (".gate_up_proj", ".gate_proj", 0),
               (".gate_up_proj", ".up_proj", 1)]

    def __init__(self, r, k, device=DEVICE, broken=False):
        super().__init__()
        self.r, self.k, self.broken = r, k, broken
        self.loaded = []       # every name load_weights was given
        self.fail_after = None  # raise after that many loaded tensors

        def param(shape, loader):
            p = torch.nn.Parameter(torch.zeros(shape, dtype=torch.bfloat16,
                                               device=device),
                                   requires_grad=False)
            p.weight_loader = loader  # as vLLM sets it on its parameters
            return p

        _put(self, "model.embed_tokens.weight", param((V // k, H), self._rows))
        for i in range(LAYERS):
            for n in ("input_layernorm", "post_attention_layernorm"):
                _put(self, P % i + n + ".weight", param((H,), self._whole))
            _put(self, P % i + "self_attn.qkv_proj.weight",
                 param(((H + 2 * KV) // k, H), self._qkv))
            _put(self, P % i + "self_attn.o_proj.weight",
                 param((H, H // k), self._cols))
            _put(self, P % i + "mlp.gate_up_proj.weight",
                 param((2 * I // k, H), self._gate_up))
            _put(self, P % i + "mlp.down_proj.weight",
                 param((H, I // k), self._cols))
            # vLLM keeps its rotary tables as a buffer of its own.
            _put(self, P % i + "self_attn.rotary_emb.cos_sin_cache",
                 torch.zeros(4, dtype=torch.float32, device=device), True)
        _put(self, "model.norm.weight", param((H,), self._whole))
        _put(self, "lm_head.weight", param((V // k, H), self._rows))

    # weight_loaders: narrow the full checkpoint tensor to this rank
    def _rows(self, p, w):
        n = w.shape[0] // self.k
        p.data.copy_(w.narrow(0, self.r * n, n))

    def _cols(self, p, w):
        n = w.shape[1] // self.k
        p.data.copy_(w.narrow(1, self.r * n, n))

    def _whole(self, p, w):
        p.data.copy_(w)

    def _qkv(self, p, w, shard):
        q, kv = H // self.k, KV // self.k
        off, n = {"q": (0, q), "k": (q, kv), "v": (q + kv, kv)}[shard]
        r = (self.r + 1) % self.k if self.broken and shard == "v" else self.r
        p.data.narrow(0, off, n).copy_(w.narrow(0, r * n, n))

    def _gate_up(self, p, w, shard):
        n = I // self.k
        p.data.narrow(0, shard * n, n).copy_(w.narrow(0, self.r * n, n))

    def load_weights(self, weights):
        params = dict(self.named_parameters())
        done = set()
        for name, w in weights:
            if self.fail_after is not None and len(done) >= self.fail_after:
                raise RuntimeError("injected: load_weights fails at %s" % name)
            self.loaded.append(name)
            if "rotary_emb.inv_freq" in name:
                continue
            for pname, wname, shard in self.STACKED:
                if wname in name:
                    name = name.replace(wname, pname)
                    params[name].weight_loader(params[name], w, shard)
                    break
            else:
                params[name].weight_loader(params[name], w)
            done.add(name)
        return done


def expected_shards(view, r, k):
    """Rank R's tensors cut from VIEW here, not by the model's loader."""
    def rows(t):
        n = t.shape[0] // k
        return t[r * n:(r + 1) * n]

    def cols(t):
        n = t.shape[1] // k
        return t[:, r * n:(r + 1) * n]

    emb = "model.embed_tokens.weight"
    out = {emb: rows(view[emb]), "model.norm.weight": view["model.norm.weight"],
           "lm_head.weight": rows(view["lm_head.weight"])}
    for i in range(LAYERS):
        p = P % i
        for n in ("input_layernorm", "post_attention_layernorm"):
            out[p + n + ".weight"] = view[p + n + ".weight"]
        a = p + "self_attn."
        out[a + "qkv_proj.weight"] = torch.cat(
            [rows(view[a + x + "_proj.weight"]) for x in "qkv"])
        out[a + "o_proj.weight"] = cols(view[a + "o_proj.weight"])
        m = p + "mlp."
        out[m + "gate_up_proj.weight"] = torch.cat(
            [rows(view[m + "gate_proj.weight"]),
             rows(view[m + "up_proj.weight"])])
        out[m + "down_proj.weight"] = cols(view[m + "down_proj.weight"])
    return out


def shard_errors(model, view):
    """Parameters of MODEL that differ from their slices of VIEW."""
    want = expected_shards(view, model.r, model.k)
    got = dict(model.named_parameters())
    bad = [n for n in want if n not in got
           or not torch.equal(raw(got[n]), raw(want[n]))]
    return bad + sorted(set(got) - set(want))


def snapshot(model):
    return {n: raw(t).clone() for n, t in model.state_dict().items()}


def moved(model, snap):
    now = snapshot(model)
    return [n for n in snap if not torch.equal(now[n], snap[n])]


def mirror_snapshot(ad):
    return {n: raw(t).clone() for n, t in (ad.mirror or {}).items()}


def mirror_moved(ad, snap):
    return [n for n in snap if not torch.equal(raw(ad.mirror[n]), snap[n])]


# ---- the vLLM stand-in ----------------------------------------------------

class ModelRunner:
    def __init__(self, model):
        self.model = model


class WorkerBase:
    """The attributes of vllm.v1.worker.worker_base.WorkerBase and
    gpu_worker.Worker an extension must not collide with."""

    def __init__(self, rank, model):
        self.rank, self.local_rank = rank, rank
        self.device = torch.device(DEVICE)
        self.model_config = None
        self.model_runner = ModelRunner(model)

    def init_device(self):
        pass

    def load_model(self):
        pass

    def get_model(self):
        return self.model_runner.model

    def execute_model(self, scheduler_output):
        return None

    def check_health(self):
        return None

    def shutdown(self):
        return None


def inject(worker_class, ext):
    """WorkerWrapperBase.init_worker's mixing: no attribute of EXT (but
    dunders) may exist on the worker class; EXT joins its __bases__."""
    if ext in worker_class.__bases__:
        return
    for attr in dir(ext):
        if attr.startswith("__"):
            continue
        assert not hasattr(worker_class, attr), \
            "Worker class %s already has an attribute %s" % (worker_class,
                                                               attr)
    worker_class.__bases__ = worker_class.__bases__ + (ext,)


def vllm_workers(k, broken=False):
    # A fresh class each time: the mixing changes the class itself.
    cls = type("Worker", (WorkerBase,), {})
    inject(cls, StitchWorkerExtension)
    return [cls(r, TPModel(r, k, broken=broken)) for r in range(k)]


def collective_rpc(workers, method, args=(), kwargs=None):
    """Every worker runs METHOD; results in rank order. As vLLM's
    multiprocessing executor, a failure comes back as RuntimeError
    "Worker failed with error '...'", after every worker ran."""
    out, err = [], None
    for w in workers:
        try:
            out.append(getattr(w, method)(*args, **(kwargs or {})))
        except Exception as e:
            err = err or e
            out.append(None)
    if err is not None:
        raise RuntimeError("Worker failed with error '%s: %s', please check "
                           "the stack trace above for the root cause"
                           % (type(err).__name__, err))
    return out


def rpc_fails(workers, method, contains, what, args=()):
    try:
        collective_rpc(workers, method, args)
    except RuntimeError as e:
        check(contains in str(e), "%s: raised '%s', want '%s'"
              % (what, e, contains))
        return str(e)
    check(False, "%s: no error raised" % what)


def start_from(workers, tr, v):
    """The engine started from version V's weights (as vLLM loads a
    checkpoint: through load_weights)."""
    for w in workers:
        w.model_runner.model.load_weights(list(tr.views[v].items()))
        w.model_runner.model.loaded.clear()


def exact(workers, tr, v, what):
    for w in workers:
        bad = shard_errors(w.model_runner.model, tr.views[v])
        check(not bad, "%s: worker %d differs from v%d's slices: %s"
              % (what, w.rank, v, bad))


def test_vllm(tmp):
    tr = Trainer(tmp, "vllm")
    v1 = tr.publish()
    workers = vllm_workers(K)
    start_from(workers, tr, v1)
    exact(workers, tr, v1, "vllm start")
    st = collective_rpc(workers, "stitch_init", (tr.store, tr.pub, v1))
    check([s["mode"] for s in st] == ["load_weights"] * K
          and [s["version"] for s in st] == [v1] * K
          and all(s["mirror_bytes"] > 0 for s in st),
          "vllm init: %s" % st)

    # prepare writes nothing: not the shards, not the mirrors
    v2 = tr.step()
    snaps = [snapshot(w.model_runner.model) for w in workers]
    msnaps = [mirror_snapshot(w._stitch_adapter) for w in workers]
    sums = collective_rpc(workers, "stitch_prepare")
    want = tr.changed(v1, v2)
    n_all = len(tr.views[v2])
    check(all(s["version"] == v2 and s["from"] == v1 and s["changes"] > 0
              and s["tensors"] == len(want) and s["prepare_s"] > 0
              for s in sums),
          "vllm prepare: %s (want %d tensors)" % (sums, len(want)))
    check(0 < len(want) < n_all, "vllm: the view changed %d of %d tensors: "
          "not sparse" % (len(want), n_all))
    for w, s, m in zip(workers, snaps, msnaps):
        check(not moved(w.model_runner.model, s),
              "vllm prepare wrote into worker %d: %s"
              % (w.rank, moved(w.model_runner.model, s)))
        check(not mirror_moved(w._stitch_adapter, m),
              "vllm prepare wrote into worker %d's mirror" % w.rank)
    check(collective_rpc(workers, "stitch_version") == [v1] * K,
          "vllm: prepare moved the version")

    pauses = collective_rpc(workers, "stitch_commit")
    check(all(p > 0 for p in pauses), "vllm commit: pauses %s" % pauses)
    check(collective_rpc(workers, "stitch_version") == [v2] * K,
          "vllm: not at v%d after the commit" % v2)
    exact(workers, tr, v2, "vllm commit")
    for w in workers:
        got = sorted(w.model_runner.model.loaded)
        check(got == want, "vllm worker %d loaded %s, the view changed %s"
              % (w.rank, got, want))
        w.model_runner.model.loaded.clear()
    rpc_fails(workers, "stitch_commit", "nothing is prepared",
              "vllm: a second commit")

    # A wrong base: worker 1's mirror holds a byte the version does not.
    # In a tensor no block of the delta covers, the digests catch it; in a
    # changed block, the decoder may (the changes it finds are not the
    # index's): either way a DigestMismatch naming the tensor. Nothing is
    # written.
    v3 = tr.step()
    ad1 = workers[1]._stitch_adapter
    for name, error in (("model.layers.1.input_layernorm.weight",
                         "DigestMismatch"),
                        ("model.layers.1.mlp.up_proj.weight",
                         "DigestMismatch")):
        good = ad1.mirror[name].clone()
        ad1.mirror[name].view(torch.uint8).reshape(-1)[5] ^= 0x10
        snaps = [snapshot(w.model_runner.model) for w in workers]
        msg = rpc_fails(workers, "stitch_prepare", error,
                        "vllm: a corrupted mirror (%s)" % name)
        check(msg is None or name in msg, "vllm refusal names %s" % msg)
        for w, s in zip(workers, snaps):
            check(not moved(w.model_runner.model, s),
                  "vllm: a refused prepare wrote into worker %d" % w.rank)
        check(collective_rpc(workers, "stitch_version") == [v2] * K,
              "vllm: a refused prepare moved a version")
        ad1.mirror[name].copy_(good)
    # a mirror gone wrong is rebuilt by an init at the version held
    ad1.mirror["model.norm.weight"].view(torch.uint8).reshape(-1)[0] ^= 1
    collective_rpc(workers, "stitch_discard")
    collective_rpc(workers, "stitch_init", (tr.store, tr.pub, v2))
    collective_rpc(workers, "stitch_prepare")
    collective_rpc(workers, "stitch_commit")
    exact(workers, tr, v3, "vllm after the refusal")

    # catching up over several versions, one prepare
    for _ in range(3):
        v = tr.step()
    sums = collective_rpc(workers, "stitch_prepare")
    check(all(s["steps"] >= 1 and s["version"] == v
              and s["tensors"] == len(tr.changed(v3, v))
              for s in sums), "vllm catch-up: %s" % sums)
    collective_rpc(workers, "stitch_commit")
    exact(workers, tr, v, "vllm catch-up to v%d" % v)

    # background: the call returns at once; the commit collects it
    v = tr.step()
    check(collective_rpc(workers, "stitch_prepare", (None, True))
          == [None] * K, "vllm background prepare returned a summary")
    collective_rpc(workers, "stitch_commit")
    exact(workers, tr, v, "vllm background prepare")

    # a load that fails midway on worker 0 is finished by a second commit
    was, v = v, tr.step()
    collective_rpc(workers, "stitch_prepare")
    m0 = workers[0].model_runner.model
    m0.fail_after = 2
    msg = rpc_fails(workers, "stitch_commit", "injected",
                    "vllm: a failing load_weights")
    m0.fail_after = None
    check(collective_rpc(workers, "stitch_version") == [None, v],
          "vllm: after a failed load the versions are %s"
          % collective_rpc(workers, "stitch_version"))
    check(shard_errors(m0, tr.views[was]) and shard_errors(m0, tr.views[v]),
          "vllm: the failed load left worker 0 at one version (the test "
          "did not fail midway)")
    workers[0].stitch_commit()
    check(workers[0].stitch_version() == v, "vllm: the retry did not finish")
    exact(workers, tr, v, "vllm after a retried commit")

    # a worker that starts with nothing known loads every tensor once
    fresh = vllm_workers(K)
    collective_rpc(fresh, "stitch_init", (tr.store, tr.pub))
    check(collective_rpc(fresh, "stitch_version") == [0] * K,
          "vllm fresh: version %s" % collective_rpc(fresh, "stitch_version"))
    sums = collective_rpc(fresh, "stitch_prepare")
    check(all(s["load"] == n_all for s in sums), "vllm fresh: %s" % sums)
    collective_rpc(fresh, "stitch_commit")
    exact(fresh, tr, v, "vllm fresh workers")
    return tr


def test_checker_fails(tr):
    """The shard check catches a loader that takes the wrong rows."""
    v = max(tr.views)
    for k in (K, 4):
        ws = vllm_workers(k, broken=True)
        start_from(ws, tr, v)
        for w in ws:
            bad = shard_errors(w.model_runner.model, tr.views[v])
            check(bad and all("qkv_proj" in n for n in bad),
                  "checker: a broken qkv loader (rank %d of %d) passed: %s"
                  % (w.rank, k, bad))


class FlatModel(torch.nn.Module):
    """An unsharded, unfused model: its tensors are the view's one for one
    (the direct mode)."""

    def __init__(self, view):
        super().__init__()
        for n, t in view.items():
            z = torch.zeros(t.shape, dtype=t.dtype, device=DEVICE)
            if "rotary_emb" in n:
                _put(self, n, z, buffer=True)
            else:
                _put(self, n, torch.nn.Parameter(z, requires_grad=False))

    def load_weights(self, weights):
        own = dict(self.named_parameters())
        own.update(self.named_buffers())
        for n, w in weights:
            own[n].data.copy_(w)


def test_direct(tr):
    v = max(tr.views)
    cls = type("Worker", (WorkerBase,), {})
    inject(cls, StitchWorkerExtension)
    w = cls(0, FlatModel(tr.views[v]))
    m = w.model_runner.model
    m.load_weights(tr.views[v].items())   # started from v's weights
    st = w.stitch_init(tr.store, tr.pub)  # None: found by digests
    if DEVICE == "cpu":
        check(st["mode"] == "direct" and st["mirror_bytes"] == 0,
              "direct: %s" % st)
    check(st["version"] == v, "direct: found v%s, want v%d"
          % (st["version"], v))

    def same(v, what):
        own = dict(m.named_parameters())
        own.update(m.named_buffers())
        bad = [n for n, t in tr.views[v].items()
               if not torch.equal(raw(own[n]), raw(t))]
        check(not bad, "%s: differs from v%d: %s" % (what, v, bad))

    v2 = tr.step()
    snap = snapshot(m)
    s = w.stitch_prepare()
    check(s["version"] == v2 and s["tensors"] == len(tr.changed(v, v2)),
          "direct prepare: %s" % s)
    check(not moved(m, snap), "direct prepare wrote %s" % moved(m, snap))
    check(w.stitch_commit() > 0 and w.stitch_version() == v2,
          "direct: not at v%d" % v2)
    same(v2, "direct commit")

    v3 = tr.step()
    own = dict(m.named_parameters())
    for name in ("model.layers.0.input_layernorm.weight",   # no block
                 "model.layers.0.self_attn.o_proj.weight"):  # changed
        own[name].data.view(torch.uint8).reshape(-1)[7] ^= 0x08
        snap = snapshot(m)
        try:
            w.stitch_prepare()
            check(False, "direct: a corrupted %s was prepared" % name)
        except DigestMismatch as e:
            check(e.tensors == [name], "direct mismatch names %s" % e.tensors)
        check(not moved(m, snap), "direct: a refused prepare wrote")
        own[name].data.view(torch.uint8).reshape(-1)[7] ^= 0x08
    w.stitch_prepare()
    w.stitch_commit()
    same(v3, "direct after the refusal")


# ---- the SGLang stand-in ---------------------------------------------------

class ServerArgs:
    def __init__(self, tp_size):
        self.tp_size, self.pp_size = tp_size, 1
        self.custom_weight_loader = [SG.LOADER]


def dynamic_import(path):
    """sglang.srt.utils.dynamic_import."""
    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


class SGModelRunner:
    """ModelRunner.update_weights_from_tensor's dispatch."""

    def __init__(self, model, tp_rank, server_args):
        self.model, self.tp_rank = model, tp_rank
        self.server_args = server_args

    def update_weights_from_tensor(self, named_tensors, load_format=None):
        named_tensors = [(n, t.to(DEVICE)) for n, t in named_tensors]
        if load_format in self.server_args.custom_weight_loader:
            dynamic_import(load_format)(self.model, named_tensors)
        elif load_format is None:
            self.model.load_weights(named_tensors)
        else:
            raise NotImplementedError(load_format)
        return True, "Success"


class SGEngine:
    """sglang.Engine: the list is serialized once per rank and every
    rank's runner loads it; the cache is flushed on success."""

    def __init__(self, k, broken=False):
        self.server_args = ServerArgs(k)
        self.runners = [SGModelRunner(TPModel(r, k, broken=broken), r,
                                      self.server_args) for r in range(k)]
        self.flushes = 0

    def update_weights_from_tensor(self, named_tensors, load_format=None,
                                   flush_cache=True):
        blob = pickle.dumps(named_tensors)
        res = [r.update_weights_from_tensor(pickle.loads(blob), load_format)
               for r in self.runners]
        ok = all(s for s, _ in res)
        if ok and flush_cache:
            self.flushes += 1
        return ok, "Success"


def sg_exact(engine, tr, v, what):
    for r in engine.runners:
        bad = shard_errors(r.model, tr.views[v])
        check(not bad, "%s: rank %d differs from v%d's slices: %s"
              % (what, r.tp_rank, v, bad))


def test_sglang(tmp):
    tr = Trainer(tmp, "sglang")
    v1 = tr.publish()
    eng = SGEngine(K)
    # Tensors that are not commands pass through to the model's loader.
    eng.update_weights_from_tensor(list(tr.views[v1].items()),
                                   load_format=SG.LOADER)
    sg_exact(eng, tr, v1, "sglang start")
    for r in eng.runners:
        r.model.loaded.clear()
    ctl = SG.SGLangController(eng, report_dir=os.path.join(tmp, "reports"))
    st = ctl.init(tr.store, tr.pub, version=v1)
    check(len(st) == K and all(s["mode"] == "load_weights"
                               and s["version"] == v1 for s in st),
          "sglang init: %s" % st)

    v2 = tr.step()
    snaps = [snapshot(r.model) for r in eng.runners]
    flushes = eng.flushes
    sums = ctl.prepare()
    want = tr.changed(v1, v2)
    check(all(s["version"] == v2 and s["tensors"] == len(want) for s in sums),
          "sglang prepare: %s" % sums)
    for r, s in zip(eng.runners, snaps):
        check(not moved(r.model, s), "sglang prepare wrote into rank %d"
              % r.tp_rank)
    check(eng.flushes == flushes, "sglang: a prepare flushed the cache")
    pauses = ctl.commit()
    check(len(pauses) == K and all(p > 0 for p in pauses)
          and eng.flushes == flushes + 1,
          "sglang commit: pauses %s, flushes %d" % (pauses, eng.flushes))
    check(ctl.version() == [v2] * K, "sglang: versions %s" % ctl.version())
    sg_exact(eng, tr, v2, "sglang commit")
    for r in eng.runners:
        check(sorted(r.model.loaded) == want, "sglang rank %d loaded %s"
              % (r.tp_rank, sorted(r.model.loaded)))
    try:
        ctl.commit()
        check(False, "sglang: a second commit passed")
    except StitchError as e:
        check(e.name == "EINVAL" and "nothing is prepared" in str(e),
              "sglang second commit: %s %s" % (e.name, e))

    # a wrong base on rank 0: DigestMismatch, nothing written anywhere
    v3 = tr.step()
    name = "model.layers.0.input_layernorm.weight"
    eng.runners[0].model._stitch_adapter.mirror[name].view(
        torch.uint8).reshape(-1)[3] ^= 0x20
    snaps = [snapshot(r.model) for r in eng.runners]
    try:
        ctl.prepare()
        check(False, "sglang: a corrupted mirror was prepared")
    except DigestMismatch as e:
        check(e.tensors == [name], "sglang mismatch names %s" % e.tensors)
    for r, s in zip(eng.runners, snaps):
        check(not moved(r.model, s), "sglang: a refused prepare wrote")
    ctl.init(tr.store, tr.pub, version=v2)
    ctl.prepare()
    ctl.commit()
    sg_exact(eng, tr, v3, "sglang after the refusal")

    # following: the workers prepare alone; only the commit is a call
    ctl.init(tr.store, tr.pub, version=v3, follow_s=0.05)
    v = tr.step()
    end = time.time() + 60  # a bound on waiting, not a timing check
    while time.time() < end:
        st = ctl.status()
        if all(s["prepared"] == v for s in st):
            break
        time.sleep(0.05)
    check(all(s["prepared"] == v and s["following"] for s in st),
          "sglang follow: %s" % st)
    ctl.commit()
    sg_exact(eng, tr, v, "sglang following")
    for r in eng.runners:
        r.model._stitch_adapter.unfollow()

    # background through the loader, then a broken engine must be seen
    v = tr.step()
    check(ctl.prepare(background=True) == [None] * K,
          "sglang background returned a summary")
    check(all(s["version"] == v for s in ctl.wait()), "sglang wait")
    ctl.commit()
    sg_exact(eng, tr, v, "sglang background")

    bad = SGEngine(K, broken=True)
    bad.update_weights_from_tensor(list(tr.views[v].items()))
    check(all(shard_errors(r.model, tr.views[v]) for r in bad.runners),
          "checker: sglang's broken loader passed")


def main():
    tmp = tempfile.mkdtemp(prefix="stitch-engines-ext-")
    try:
        stitch.keygen(os.path.join(tmp, "tr"))
        tr = test_vllm(tmp)
        test_checker_fails(tr)
        test_direct(tr)
        test_sglang(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # Neither engine may be needed: nothing imported one on the way.
    check("vllm" not in sys.modules and "sglang" not in sys.modules,
          "an engine was imported: %s" % [m for m in sys.modules
                                           if m.split(".")[0] in
                                           ("vllm", "sglang")])
    return harness.finish(SEED)


if __name__ == "__main__":
    sys.exit(main())
