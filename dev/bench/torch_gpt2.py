#!/usr/bin/env python3
"""GPT-2 training steps in plain PyTorch, written the way a PyTorch user writes them, as a peer
for train_gpt2's step times (dev/gpu_first_run.sh puts both in one table).

The model is GPT-2 (pre-LayerNorm blocks, GELU tanh MLP, tied token embedding and classifier) with
F.scaled_dot_product_attention(is_causal=True); a step is forward under bf16 autocast, backward,
clipping at 1.0 and AdamW (fused where the installed PyTorch offers it on this device); torch.compile
unless --compile 0. The data is the same kind of shard the trainers read (dev/data/tiny_shard.py:
pseudo-random tokens), taken B*T+1 tokens at a time in order, or random tokens from --seed without
--data. Each B runs --steps steps; a step's time is the wall time from the end of the previous one
to a torch.cuda.synchronize() after its optimizer step (as train_gpt2's step ms); the figure per B is
the median of steps --from..--steps (1-based), so the compile and warm-up steps stay out.

Where a feature is missing (PyTorch 1.13 on a CPU, as on the project's test machine) the script
says so and goes on without it: no torch.compile (before 2.0), the causal softmax written out (no
SDPA before 2.0), AdamW unfused. --compile 1 on a PyTorch without torch.compile is an error.

    python3 dev/bench/torch_gpt2.py [--B 64,32,16,8] [--T 1024] [--layers 12 --channels 768 --heads 12]
        [--vocab 50257] [--steps 10] [--from 4] [--data SHARD.bin] [--compile auto|0|1] [--eager-B 64,8]
        [--device auto|cuda|cpu] [--json OUT.json]

Prints one line per run and, with --json, writes {"runs": [{"mode", "B", "T", "median_ms", ...}]}.
--eager-B also times the same model without torch.compile at those B (after the compiled runs).
"""
import argparse
import inspect
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HEADER_BYTES = 1024  # the shard header: 256 int32 (magic 20240520, version 1, token count)
SHARD_MAGIC = 20240520


def parse_ints(text, flag):
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        vals = []
    if not vals or min(vals) < 1:
        sys.exit("torch_gpt2.py: error: %s %s: want positive integers separated by commas" % (flag, text))
    return vals


def version_at_least(major, minor):
    parts = torch.__version__.split("+")[0].split(".")
    try:
        return (int(parts[0]), int(parts[1])) >= (major, minor)
    except (ValueError, IndexError):
        return False


HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")
HAVE_COMPILE = hasattr(torch, "compile") and version_at_least(2, 0)


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        if HAVE_SDPA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # PyTorch before 2.0: the causal softmax written out
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = att @ v
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, L, C, NH, V, T):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2
        for name, p in self.named_parameters():
            if name.endswith(".weight") and p.dim() == 2:
                # GPT-2's init; the residual projections scaled by 1/sqrt(2L)
                std = 0.02 / math.sqrt(2 * L) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
                nn.init.normal_(p, mean=0.0, std=std)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def read_tokens(path):
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < HEADER_BYTES:
        sys.exit("torch_gpt2.py: error: --data %s: shorter than the 1024-byte shard header" % path)
    header = torch.frombuffer(bytearray(raw[:HEADER_BYTES]), dtype=torch.int32)
    n = int(header[2])
    if int(header[0]) != SHARD_MAGIC or len(raw) < HEADER_BYTES + 2 * n:
        sys.exit("torch_gpt2.py: error: --data %s: not a token shard (magic %d, %d tokens, %d bytes)"
                 % (path, int(header[0]), n, len(raw)))
    toks = torch.frombuffer(bytearray(raw[HEADER_BYTES:HEADER_BYTES + 2 * n]), dtype=torch.int16)
    return toks.to(torch.int32) & 0xFFFF  # uint16 tokens


def make_optimizer(model, device):
    kwargs = dict(lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    fused = device.type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters
    if fused:
        kwargs["fused"] = True
    return torch.optim.AdamW(model.parameters(), **kwargs), fused


def time_steps(model, step_fn, tokens, B, T, steps, device):
    """Runs `steps` steps; returns each step's ms and the last loss."""
    need = B * T + 1
    if tokens.numel() < need:
        sys.exit("torch_gpt2.py: error: --data has %d tokens, fewer than B*T+1 = %d" % (tokens.numel(), need))
    pos, out, loss = 0, [], None
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        if pos + need > tokens.numel():
            pos = 0
        chunk = tokens[pos:pos + need].to(device=device, dtype=torch.long)
        pos += B * T
        x, y = chunk[:-1].view(B, T), chunk[1:].view(B, T)
        loss = step_fn(x, y)
        sync()
        t1 = time.perf_counter()
        out.append((t1 - t0) * 1e3)
        t0 = t1
    return out, float(loss)


def main():
    ap = argparse.ArgumentParser(description="GPT-2 training steps in PyTorch (a peer for train_gpt2)")
    ap.add_argument("--B", default="64,32,16,8")
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--channels", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--from", dest="first", type=int, default=4, help="first step (1-based) of the median")
    ap.add_argument("--data", default="")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--compile", default="auto", choices=("auto", "0", "1"))
    ap.add_argument("--eager-B", default="")
    ap.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    Bs = parse_ints(a.B, "--B")
    eager_Bs = parse_ints(a.eager_B, "--eager-B") if a.eager_B else []
    if a.T < 1 or a.layers < 1 or a.vocab < 2 or a.heads < 1 or a.channels % a.heads:
        sys.exit("torch_gpt2.py: error: --T, --layers, --vocab must be positive and --channels a multiple of --heads")
    if not 1 <= a.first <= a.steps:
        sys.exit("torch_gpt2.py: error: --from %d: must be in 1..--steps (%d)" % (a.first, a.steps))
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_gpt2.py: error: --device cuda: this PyTorch sees no CUDA GPU")
    device = torch.device("cuda" if a.device == "cuda" or (a.device == "auto" and torch.cuda.is_available()) else "cpu")
    if a.compile == "1" and not HAVE_COMPILE:
        sys.exit("torch_gpt2.py: error: --compile 1: PyTorch %s has no torch.compile (2.0 and later)" % torch.__version__)
    use_compile = HAVE_COMPILE if a.compile == "auto" else a.compile == "1"

    torch.manual_seed(a.seed)
    if a.data:
        try:
            tokens = read_tokens(a.data)
        except OSError as e:
            sys.exit("torch_gpt2.py: error: --data %s: %s" % (a.data, e.strerror))
        if int(tokens.max()) >= a.vocab:
            sys.exit("torch_gpt2.py: error: --data %s: token %d is not below --vocab %d" % (a.data, int(tokens.max()), a.vocab))
    else:
        tokens = torch.randint(0, a.vocab, (max(Bs + eager_Bs) * a.T * 4 + 1,), dtype=torch.int32)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    # the vocabulary padded to a multiple of 128 (as nanoGPT does, and train_gpt2: 50257 -> 50304)
    Vp = (a.vocab + 127) // 128 * 128
    model = GPT2(a.layers, a.channels, a.heads, Vp, a.T).to(device)
    opt, fused = make_optimizer(model, device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    nparams = sum(p.numel() for p in model.parameters())  # the tied matrix once
    print("torch_gpt2: PyTorch %s on %s | GPT-2 L %d C %d NH %d V %d (padded %d) T %d, %d parameters | bf16 autocast | "
          "attention %s | AdamW %s | %s" % (torch.__version__, name, a.layers, a.channels, a.heads, a.vocab, Vp, a.T, nparams,
                             "SDPA (is_causal)" if HAVE_SDPA else "written out (no SDPA before 2.0)",
                             "fused" if fused else "unfused", "torch.compile" if use_compile else
                             "eager" + ("" if HAVE_COMPILE else " (no torch.compile before 2.0)")), flush=True)

    def make_step(fwd):
        def step(x, y):
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
                loss = fwd(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.detach()
        return step

    def write_json():  # after every run: a run cut short by a time limit leaves the finished ones
        if a.json:
            with open(a.json + ".tmp", "w") as f:
                json.dump({"torch": torch.__version__, "device": name, "sdpa": HAVE_SDPA, "fused_adamw": fused,
                           "compile": use_compile, "parameters": nparams, "runs": runs}, f, indent=1)
            os.replace(a.json + ".tmp", a.json)

    plan = [("compile" if use_compile else "eager", B) for B in Bs] + [("eager", B) for B in eager_Bs if use_compile]
    compiled = torch.compile(model) if use_compile else None
    runs, compile_error = [], None
    while plan:
        mode, B = plan.pop(0)
        if mode == "compile" and compile_error:  # it failed once: every B would fail the same way
            runs.append({"mode": mode, "B": B, "T": a.T, "median_ms": None, "error": "not tried: " + compile_error})
            continue
        step = make_step(compiled if mode == "compile" else model)
        try:
            ms, loss = time_steps(model, step, tokens, B, a.T, a.steps, device)
        except Exception as e:  # out of memory at this B, a compiler failure: said, and the others still run
            msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
            print("torch_gpt2: %s B %d: FAILED: %s" % (mode, B, msg), flush=True)
            runs.append({"mode": mode, "B": B, "T": a.T, "median_ms": None, "error": msg})
            if mode == "compile" and "out of memory" not in msg.lower():
                compile_error = msg  # then eager at every B instead
                plan = [(m, b) for m, b in plan if m == "compile"] + [("eager", b) for b in Bs if ("eager", b) not in plan]\
                    + [(m, b) for m, b in plan if m == "eager"]
            opt.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
            write_json()
            continue
        med = statistics.median(ms[a.first - 1:])
        print("torch_gpt2: %s B %d T %d: %.2f ms per step (median of steps %d-%d; first step %.0f ms), loss %.4f"
              % (mode, B, a.T, med, a.first, a.steps, ms[0], loss), flush=True)
        runs.append({"mode": mode, "B": B, "T": a.T, "median_ms": round(med, 3), "first_step_ms": round(ms[0], 1),
                     "step_ms": [round(x, 3) for x in ms], "loss": loss})
        write_json()
    write_json()
    return 0 if all(r["median_ms"] is not None for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
