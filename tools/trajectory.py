#!/usr/bin/env python3
"""Real training trajectory for Stitch: a tiny GPT trained with PyTorch, one served view per step.

Trains a small Llama-style transformer (token embedding, N blocks of RMSNorm + causal self-attention with RoPE +
RMSNorm + SwiGLU MLP, final RMSNorm, untied lm_head) on FP32 master weights with torch.optim.Adam/AdamW at RL
learning rates, on a synthetic but learnable next-token task. After every optimizer step it writes the served
view of the masters to OUT/step_NNNN.safetensors (step_0000 is the view before the first RL step).

  python3 tools/trajectory.py --out DIR [--steps 10] [--size small] [--view bf16|fp8|nvfp4|f32] [--lr 1e-6]

Views: f32 writes the masters; bf16 is param.to(torch.bfloat16) (round to nearest even); fp8 and nvfp4 go
through the C CLI `stitch view --to KIND [--prev PREV_VIEW] IN OUT`, so the delta-stable scale policy lives
in one place (libstitch). Tensor names follow Hugging Face Llama (model.layers.0.self_attn.q_proj.weight, ...).

One line per step goes to stderr: step, training loss, and the fraction of view elements that differ from the
previous step's view (an NVFP4 byte holds two elements; scale tensors count as elements too). --summary FILE
also writes the per-step figures as JSON. Deterministic for a given --seed, --threads and torch build.
See docs/trajectories.md.
"""
import argparse
import json
import math
import os
import re
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

# name: (dim, layers, heads, ffn, vocab, seq, batch)
SIZES = {
    "tiny": (128, 2, 4, 352, 512, 64, 8),  # ~0.5 M parameters
    "small": (256, 4, 4, 704, 1024, 64, 8),  # ~3.7 M
    "medium": (512, 8, 8, 1408, 4096, 128, 8),  # ~29 M
    "large": (1024, 12, 16, 2816, 8192, 128, 4),  # ~170 M
}


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, cos, sin):
    # x: [B, H, T, D]; rotate the two halves (the Llama/HF convention).
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Attention(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.hd = heads, dim // heads
        self.q_proj = torch.nn.Linear(dim, dim, bias=False)
        self.k_proj = torch.nn.Linear(dim, dim, bias=False)
        self.v_proj = torch.nn.Linear(dim, dim, bias=False)
        self.o_proj = torch.nn.Linear(dim, dim, bias=False)

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        q, k, v = (p(x).view(b, t, self.heads, self.hd).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, d))


class MLP(torch.nn.Module):
    def __init__(self, dim, ffn):
        super().__init__()
        self.gate_proj = torch.nn.Linear(dim, ffn, bias=False)
        self.up_proj = torch.nn.Linear(dim, ffn, bias=False)
        self.down_proj = torch.nn.Linear(ffn, dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(torch.nn.Module):
    def __init__(self, dim, heads, ffn):
        super().__init__()
        self.input_layernorm = RMSNorm(dim)
        self.self_attn = Attention(dim, heads)
        self.post_attention_layernorm = RMSNorm(dim)
        self.mlp = MLP(dim, ffn)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Inner(torch.nn.Module):
    def __init__(self, dim, layers, heads, ffn, vocab):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(vocab, dim)
        self.layers = torch.nn.ModuleList(Block(dim, heads, ffn) for _ in range(layers))
        self.norm = RMSNorm(dim)


class TinyGPT(torch.nn.Module):
    """State dict names match Hugging Face LlamaForCausalLM."""

    def __init__(self, dim, layers, heads, ffn, vocab, seq):
        super().__init__()
        self.model = Inner(dim, layers, heads, ffn, vocab)
        self.lm_head = torch.nn.Linear(dim, vocab, bias=False)
        hd = dim // heads
        inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        ang = torch.outer(torch.arange(seq, dtype=torch.float32), inv)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)
        for name, p in self.named_parameters():  # HF initializer_range 0.02; norms start at 1
            if p.dim() >= 2:
                torch.nn.init.normal_(p, mean=0.0, std=0.02)

    def forward(self, ids):
        t = ids.shape[1]
        cos, sin = self.cos[:t], self.sin[:t]
        x = self.model.embed_tokens(ids)
        for blk in self.model.layers:
            x = blk(x, cos, sin)
        return self.lm_head(self.model.norm(x))


class Task:
    """Synthetic, learnable next-token data: a sparse random Markov chain (each token has 4 likely successors),
    and in half of the sequences the second half repeats the first (learnable only through attention)."""

    def __init__(self, vocab, seq, seed):
        self.vocab, self.seq = vocab, seq
        self.g = torch.Generator().manual_seed(seed * 1000003 + 17)
        self.succ = torch.randint(0, vocab, (vocab, 4), generator=self.g)
        self.prob = torch.softmax(torch.randn(vocab, 4, generator=self.g) * 1.5, dim=-1)

    def batch(self, n):
        seqs = torch.empty(n, self.seq, dtype=torch.long)
        seqs[:, 0] = torch.randint(0, self.vocab, (n,), generator=self.g)
        for t in range(1, self.seq):
            choice = torch.multinomial(self.prob[seqs[:, t - 1]], 1, generator=self.g).squeeze(1)
            seqs[:, t] = self.succ[seqs[:, t - 1], choice]
        copy = torch.rand(n, generator=self.g) < 0.5
        h = self.seq // 2
        seqs[copy, h:2 * h] = seqs[copy, :h]
        return seqs


# --- safetensors bytes, dtype-agnostic (numpy has no bf16/fp8) ------------------------------------------------
ITEMSIZE = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2,
            "U16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I8": 1, "U8": 1, "BOOL": 1}


def read_raw(path):
    """-> (metadata dict, {name: (dtype, shape, numpy array of unsigned ints, one per element)})."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    hdr = json.loads(buf[8:8 + n])
    meta = hdr.pop("__metadata__", {}) or {}
    base = 8 + n
    out = {}
    for name, info in hdr.items():
        a, b = info["data_offsets"]
        size = ITEMSIZE[info["dtype"]]
        arr = np.frombuffer(buf, dtype="<u%d" % size, count=(b - a) // size, offset=base + a)
        out[name] = (info["dtype"], info["shape"], arr)
    return meta, out


def change_count(old, new, meta, groups=None):
    """Elements of NEW's tensors that differ from OLD (tensors absent in OLD count fully). -> (changed, total).
    groups, if a dict, gets [changed, total] per tensor name with layer numbers replaced by '*'."""
    nvfp4 = meta.get("stitch.view") == "nvfp4"
    changed = total = 0
    for name, (dt, shape, arr) in new.items():
        packed = nvfp4 and dt == "U8"  # E2M1 pairs; nvfp4 scales are F8_E4M3/F32
        prev = old.get(name) if old is not None else None
        if prev is None or prev[0] != dt or prev[1] != shape:
            c = n = arr.size * (2 if packed else 1)
        elif packed:
            x = np.bitwise_xor(arr, prev[2])
            c, n = int(np.count_nonzero(x & 0x0F)) + int(np.count_nonzero(x & 0xF0)), 2 * arr.size
        else:
            c, n = int(np.count_nonzero(arr != prev[2])), arr.size
        changed += c
        total += n
        if groups is not None:
            g = groups.setdefault(re.sub(r"\.\d+\.", ".*.", name), [0, 0])
            g[0] += c
            g[1] += n
    return changed, total


UMASK = os.umask(0)
os.umask(UMASK)


def write_view(model, kind, out_path, prev_path, args):
    """Writes the served view of the model's masters to out_path atomically."""
    tmp = "%s.tmp.%d" % (out_path, os.getpid())
    sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    try:
        if kind in ("f32", "bf16"):
            if kind == "bf16":
                sd = {k: v.to(torch.bfloat16) for k, v in sd.items()}
            save_file(sd, tmp, metadata={"stitch.view": kind} if kind == "bf16" else None)
        else:
            with tempfile.TemporaryDirectory(dir=os.path.dirname(out_path)) as d:
                masters = os.path.join(d, "masters.safetensors")
                save_file(sd, masters)
                cmd = [args.stitch, "view", "--to", kind]
                if args.fp8_block is not None and kind == "fp8":
                    cmd += ["--fp8-block", str(args.fp8_block)]
                if prev_path is not None:
                    cmd += ["--prev", prev_path]
                cmd += [masters, tmp]
                r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                if r.returncode != 0:
                    raise RuntimeError("%s failed (exit %d): %s" % (" ".join(cmd), r.returncode,
                                                                     (r.stderr or r.stdout).strip()))
        os.chmod(tmp, 0o666 & ~UMASK)  # safetensors writes 0600; a view is meant to be served
        os.replace(tmp, out_path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder (created); step_NNNN.safetensors go there")
    ap.add_argument("--steps", type=int, default=10, help="RL optimizer steps (views written: steps+1)")
    ap.add_argument("--size", choices=sorted(SIZES), default="small")
    ap.add_argument("--view", choices=["bf16", "fp8", "nvfp4", "f32"], default="bf16")
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--optim", choices=["adam", "adamw"], default="adam")
    ap.add_argument("--wd", type=float, default=0.0, help="weight decay (adamw: decoupled; adam: L2)")
    ap.add_argument("--betas", default="0.9,0.999")
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--clip", type=float, default=1.0, help="gradient norm clip, 0 = off")
    ap.add_argument("--pretrain-steps", type=int, default=200,
                    help="steps at --pretrain-lr before step 0 (not written), so the RL phase starts from a "
                         "trained model, as RL fine-tuning does; its optimizer state is dropped")
    ap.add_argument("--pretrain-lr", type=float, default=1e-3)
    ap.add_argument("--batch", type=int, default=None, help="sequences per step (default: per --size)")
    ap.add_argument("--seq", type=int, default=None, help="sequence length (default: per --size)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (results depend on it)")
    ap.add_argument("--stitch", default="build/bin/stitch", help="stitch CLI, for --view fp8|nvfp4")
    ap.add_argument("--fp8-block", type=int, default=None, help="passed to stitch view (fp8 only)")
    ap.add_argument("--summary", default=None, help="also write per-step figures as JSON to this file")
    ap.add_argument("--quiet", action="store_true", help="no per-step lines")
    args = ap.parse_args(argv)
    if args.steps < 0 or args.pretrain_steps < 0:
        ap.error("--steps and --pretrain-steps must be >= 0")

    dim, layers, heads, ffn, vocab, seq, batch = SIZES[args.size]
    seq = args.seq or seq
    batch = args.batch or batch
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    model = TinyGPT(dim, layers, heads, ffn, vocab, seq)
    nparams = sum(p.numel() for p in model.parameters())
    task = Task(vocab, seq, args.seed)
    betas = tuple(float(b) for b in args.betas.split(","))

    def make_opt(lr, wd):
        cls = torch.optim.AdamW if args.optim == "adamw" else torch.optim.Adam
        return cls(model.parameters(), lr=lr, betas=betas, eps=args.eps, weight_decay=wd, foreach=False)

    def train_step(opt):
        ids = task.batch(batch)
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), ids[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        return loss.item()

    def log(msg):
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    if args.view in ("fp8", "nvfp4") and not os.access(args.stitch, os.X_OK):
        sys.exit("trajectory: --view %s needs the stitch CLI, not found at %s (--stitch PATH)" %
                 (args.view, args.stitch))
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    log("trajectory: %s model, %d parameters (dim %d, %d layers, vocab %d), view %s, %s lr %g wd %g, "
        "batch %dx%d, seed %d" % (args.size, nparams, dim, layers, vocab, args.view, args.optim, args.lr,
                                  args.wd, batch, seq, args.seed))
    loss = float("nan")
    if args.pretrain_steps:
        opt = make_opt(args.pretrain_lr, 0.0)
        for i in range(args.pretrain_steps):
            loss = train_step(opt)
            if i == 0:
                first = loss
        log("pretrain: %d steps at lr %g, loss %.4f -> %.4f (%.1f s)" %
            (args.pretrain_steps, args.pretrain_lr, first, loss, time.time() - t0))
        del opt

    opt = make_opt(args.lr, args.wd)
    steps = []
    prev_path = prev_raw = None
    for step in range(args.steps + 1):
        ts = time.time()
        if step > 0:
            loss = train_step(opt)
        path = os.path.join(args.out, "step_%04d.safetensors" % step)
        write_view(model, args.view, path, prev_path, args)
        meta, raw = read_raw(path)
        groups = {}
        changed, total = change_count(prev_raw, raw, meta, groups)
        frac = changed / total if total else 0.0
        rec = {"step": step, "loss": loss, "changed": changed, "elements": total, "fraction": frac,
               "bytes": os.path.getsize(path), "seconds": round(time.time() - ts, 3),
               "tensors": {k: {"changed": c, "elements": n} for k, (c, n) in sorted(groups.items())}}
        steps.append(rec)
        log("step %04d loss %.6f changed %.6f (%d/%d) %.2fs" % (step, loss, frac, changed, total,
                                                                time.time() - ts))
        prev_path, prev_raw = path, raw
    if steps[1:]:
        fr = [s["fraction"] for s in steps[1:]]
        log("trajectory: %d steps in %.1f s; changed per step: mean %.6f min %.6f max %.6f" %
            (args.steps, time.time() - t0, sum(fr) / len(fr), min(fr), max(fr)))
    if args.summary:
        summary = {k: getattr(args, k) for k in ("size", "view", "lr", "optim", "wd", "seed", "pretrain_steps",
                                                 "pretrain_lr", "clip", "threads")}
        summary.update(parameters=nparams, batch=batch, seq=seq, torch=torch.__version__, steps=steps)
        tmp = args.summary + ".tmp"
        with open(tmp, "w") as f:
            json.dump(summary, f, indent=1)
        os.replace(tmp, args.summary)
    return 0



if __name__ == "__main__":
    sys.exit(main())
