#!/usr/bin/env python3
"""PyTorch reference for train_gpt2: the GPT-2 of docs/design.md section 1 written out op by op.

It builds (or loads) a model, reads the file formats of docs/formats.md, and writes the files
the C/CUDA trainers are tested against: model .bin (fp32 v3 / bf16 v5), the debug state of the
first batch (x, y, logits, loss, all 16 gradients) and the per-step losses of a hand-written AdamW.
With `--replicas R --sync-every H` it simulates DiLoCo in one process: R replicas, each with its own
AdamW on its own B rows of an R*B-row batch, averaged every H steps by an outer Nesterov-momentum
SGD step on the pseudo-gradient (`--outer-lr`, `--outer-momentum`, from step `--sync-start` on);
`--drop k@s` / `--rejoin k@s` take replica k out of the run from step s / back in at step s
(elastic replicas: what the survivors of a lost replica log; see --help and replica_schedule).
Everything is float32 and single-threaded by default so runs are repeatable. Only torch, numpy and
the standard library are used; it runs on torch 1.13 and newer. `--selftest` checks the
hand-written parts (gradients, bf16 rounding, file I/O, AdamW, the DiLoCo outer step) against
independent math.
"""
import argparse
import copy
import math
import os
import re
import struct
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

# the file writers shared with the data scripts
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "dev", "data"))
from data_common import header_bytes, write_atomic  # noqa: E402

MODEL_MAGIC, SHARD_MAGIC, STATE_MAGIC = 20240326, 20240520, 20240327
HEADER_INTS = 256
HEADER_BYTES = 4 * HEADER_INTS
PARAM_NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
               "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}   # the "2-D" weight matrices
RESIDUAL_PROJ = {"attprojw", "fcprojw"}
LN_EPS = 1e-5


class FormatError(Exception):
    """A file that is not what it claims to be; the message names the file."""


# ----------------------------------------------------------------------------------------------
# config and parameters

def padded_vocab(V):
    return (V + 127) // 128 * 128


def config_from_descriptor(desc, channels=None, heads=None, vocab=50257, max_seq=1024):
    m = re.fullmatch(r"d(\d+)", desc)
    if not m or int(m.group(1)) < 1:
        raise ValueError(f"bad model descriptor {desc!r} (want dN, e.g. d12)")
    L = int(m.group(1))
    C, NH = {12: (768, 12), 24: (1024, 16), 36: (1280, 20), 48: (1600, 25)}.get(L, (64 * L, L))
    C = channels if channels is not None else C
    NH = heads if heads is not None else NH
    cfg = dict(T_max=max_seq, V=vocab, L=L, NH=NH, C=C, Vp=padded_vocab(vocab))
    check_config(cfg, desc)
    return cfg


def check_config(cfg, where):
    if min(cfg.values()) < 1 or cfg["C"] % cfg["NH"] or cfg["Vp"] < cfg["V"]:
        raise FormatError(f"{where}: invalid model config {cfg}")


def param_shapes(cfg):
    Vp, T, L, C = cfg["Vp"], cfg["T_max"], cfg["L"], cfg["C"]
    return {"wte": (Vp, C), "wpe": (T, C), "ln1w": (L, C), "ln1b": (L, C),
            "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C), "attprojw": (L, C, C), "attprojb": (L, C),
            "ln2w": (L, C), "ln2b": (L, C), "fcw": (L, 4 * C, C), "fcb": (L, 4 * C),
            "fcprojw": (L, C, 4 * C), "fcprojb": (L, C), "lnfw": (C,), "lnfb": (C,)}


def init_params(cfg):
    """GPT-2 init, drawn in file order from torch's global generator (seeded by the caller)."""
    params = {}
    for name, shape in param_shapes(cfg).items():
        if name in ("ln1w", "ln2w", "lnfw"):
            t = torch.ones(shape)
        elif name in ("wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"):
            std = 0.02 / math.sqrt(2 * cfg["L"]) if name in RESIDUAL_PROJ else 0.02
            t = torch.randn(shape) * std
        else:
            t = torch.zeros(shape)
        params[name] = t
    params["wte"][cfg["V"]:] = 0.0
    return params


# ----------------------------------------------------------------------------------------------
# the model, written out op by op

def gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def layernorm(x, w, b):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)          # biased variance
    return (x - mean) / torch.sqrt(var + LN_EPS) * w + b


def attention(qkv, NH):
    """qkv (B,T,3C) in order q,k,v; head h is columns h*hs..(h+1)*hs of each. Returns (B,T,C)."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // NH
    q, k, v = [t.reshape(B, T, NH, hs).transpose(1, 2) for t in qkv.split(C, dim=-1)]
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))      # (B,NH,T,T)
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(future, float("-inf"))
    att = torch.softmax(scores, dim=-1)
    return (att @ v).transpose(1, 2).reshape(B, T, C)


def forward(P, cfg, idx):
    """idx (B,T) int64 -> logits (B,T,V) over the real vocabulary only."""
    T = idx.shape[1]
    x = P["wte"][idx] + P["wpe"][:T]
    for l in range(cfg["L"]):
        h = layernorm(x, P["ln1w"][l], P["ln1b"][l])
        qkv = h @ P["qkvw"][l].t() + P["qkvb"][l]
        x = x + attention(qkv, cfg["NH"]) @ P["attprojw"][l].t() + P["attprojb"][l]
        h = layernorm(x, P["ln2w"][l], P["ln2b"][l])
        h = gelu(h @ P["fcw"][l].t() + P["fcb"][l])
        x = x + h @ P["fcprojw"][l].t() + P["fcprojb"][l]
    x = layernorm(x, P["lnfw"], P["lnfb"])
    return x @ P["wte"][:cfg["V"]].t()


def loss_and_grads(P, cfg, x, y):
    """Mean cross-entropy over all B*T targets, its gradients (dict), and the logits."""
    for t in P.values():
        t.grad = None
        t.requires_grad_(True)
    logits = forward(P, cfg, x)
    loss = F.cross_entropy(logits.reshape(-1, cfg["V"]), y.reshape(-1))
    loss.backward()
    grads = {n: P[n].grad.detach().clone() for n in PARAM_NAMES}
    for t in P.values():
        t.requires_grad_(False)
        t.grad = None
    return loss.detach(), grads, logits.detach()


# ----------------------------------------------------------------------------------------------
# AdamW by hand, in the order the C trainer follows

class AdamW:
    def __init__(self, P, lr, wd, clip, b1=0.9, b2=0.95, eps=1e-8):
        self.lr, self.wd, self.clip, self.b1, self.b2, self.eps = lr, wd, clip, b1, b2, eps
        self.m = {n: torch.zeros_like(t) for n, t in P.items()}
        self.v = {n: torch.zeros_like(t) for n, t in P.items()}
        self.t = 0

    def step(self, P, grads):
        """Clip by the global norm over all grads, then one AdamW update. Returns the norm."""
        norm = torch.sqrt(sum((grads[n] * grads[n]).sum() for n in PARAM_NAMES))
        scale = self.clip / norm if norm > self.clip else torch.ones((), dtype=norm.dtype)
        self.update(P, grads, scale)
        return float(norm)

    def update(self, P, grads, scale):
        """The AdamW update of the tensors in grads (times scale), one step more."""
        self.t += 1
        c1, c2 = 1.0 - self.b1 ** self.t, 1.0 - self.b2 ** self.t
        for n in [n for n in PARAM_NAMES if n in grads]:
            g = grads[n] * scale
            m, v, p = self.m[n], self.v[n], P[n]
            m.mul_(self.b1).add_((1.0 - self.b1) * g)
            v.mul_(self.b2).add_((1.0 - self.b2) * g * g)
            wd = self.wd if n in DECAYED else 0.0
            p.sub_(self.lr * ((m / c1) / (torch.sqrt(v / c2) + self.eps) + wd * p))


# ----------------------------------------------------------------------------------------------
# Muon (torch.optim.Muon's semantics, PyTorch 2.9) on each layer's four block matrices, AdamW on the
# rest; everything in fp32

MUON_MATRICES = ("qkvw", "attprojw", "fcw", "fcprojw")
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def newton_schulz(U, steps=5, eps=1e-7):
    """The quintic Newton-Schulz iteration toward the orthogonal factor of U (rows x cols as stored):
    X = U / max(|U|_F, eps), worked on as its wide orientation (transposed when rows > cols), then
    `steps` times S = X X^T, X = a X + (b S + c S S) X, and turned back."""
    a, b, c = NS_COEFFICIENTS
    X = U / torch.clamp(torch.linalg.norm(U), min=eps)
    tall = U.shape[0] > U.shape[1]
    if tall:
        X = X.t()
    for _ in range(steps):
        S = X @ X.t()
        X = a * X + (b * S + c * (S @ S)) @ X
    return X.t() if tall else X


class Muon:
    """Muon on every layer's qkvw, attprojw, fcw, fcprojw (each layer's slice one matrix; with
    split_qkv, qkvw's slice is three C x C matrices, its q, k and v rows), AdamW at lr on everything
    else (wte, which the classifier shares, wpe, biases, LayerNorm). After the global clip, a matrix's
    gradient G: M = mu M + (1 - mu) G; U = (1 - mu) G + mu M (Nesterov);
    W = W (1 - muon_lr wd) - muon_lr sqrt(max(1, rows / cols)) NS5(U)."""

    def __init__(self, P, lr, wd, clip, muon_lr=0.02, momentum=0.95, split_qkv=False):
        self.adamw = AdamW(P, lr, wd, clip)
        self.muon_lr, self.mu, self.split_qkv = muon_lr, momentum, split_qkv
        self.momentum = {n: torch.zeros_like(P[n]) for n in MUON_MATRICES}

    @property
    def t(self):
        return self.adamw.t

    @t.setter
    def t(self, value):
        self.adamw.t = value

    def step(self, P, grads):
        """Clip by the global norm over all grads, then one step. Returns the norm."""
        rest = {n: g for n, g in grads.items() if n not in MUON_MATRICES}
        norm = torch.sqrt(sum((grads[n] * grads[n]).sum() for n in PARAM_NAMES))
        scale = self.adamw.clip / norm if norm > self.adamw.clip else torch.ones((), dtype=norm.dtype)
        self.adamw.update(P, rest, scale)
        for n in MUON_MATRICES:
            for layer in range(P[n].shape[0]):
                W, g, M = P[n][layer], grads[n][layer] * scale, self.momentum[n][layer]
                parts = 3 if n == "qkvw" and self.split_qkv else 1
                for w, gp, m in zip(W.chunk(parts), g.chunk(parts), M.chunk(parts)):  # views: updated in place
                    self.matrix_step(w, gp, m)
        return float(norm)

    def matrix_step(self, W, g, M):
        """One matrix's update in place: W with its clipped gradient g and momentum M."""
        mu, lr, wd = self.mu, self.muon_lr, self.adamw.wd
        M.mul_(mu).add_((1.0 - mu) * g)
        O = newton_schulz((1.0 - mu) * g + mu * M)
        ratio = math.sqrt(max(1.0, W.shape[0] / W.shape[1]))
        W.mul_(1.0 - lr * wd).sub_(lr * ratio * O)


def make_optimizer(P, optimizer, lr, wd, clip, muon_lr=0.02, muon_momentum=0.95, muon_split_qkv=False):
    if optimizer == "muon":
        return Muon(P, lr, wd, clip, muon_lr, muon_momentum, muon_split_qkv)
    return AdamW(P, lr, wd, clip)


# ----------------------------------------------------------------------------------------------
# training: synchronous AdamW, or DiLoCo (R replicas simulated in one process, each with its own
# AdamW, averaged every H steps by an outer Nesterov-momentum SGD step)

def outer_nesterov(outer, buf, delta, lr, momentum, locals_):
    """One tensor's outer step: Nesterov momentum on the pseudo-gradient delta, every replica's local
    copy set to the new outer value; returns the squared norm of delta."""
    buf.mul_(momentum).add_(delta)
    outer.sub_(lr * (delta + momentum * buf))
    for t in locals_:
        t.copy_(outer)
    return float((delta.double() ** 2).sum())


def outer_step(outer, buf, local, lr, momentum, count=None):
    """One DiLoCo outer update, in place, on every tensor of `outer` (float32), in this order:
    delta = (sum over r = 0..R-1 of (outer - local[r])) / R; buf = momentum * buf + delta;
    outer = outer - lr * (delta + momentum * buf); then every local[r] = outer. This is
    torch.optim.SGD(lr, momentum, dampening=0, nesterov=True) with gradient delta. Returns the
    L2 norm of delta over all tensors (the pseudo-gradient, before the momentum)."""
    sq = 0.0
    for n in outer:
        delta = outer[n] - local[0][n]
        for rep in local[1:]:
            delta = delta + (outer[n] - rep[n])
        delta = delta / (count or len(local))  # count: only DROP_BUG 1 gives it
        sq += outer_nesterov(outer[n], buf[n], delta, lr, momentum, [rep[n] for rep in local])
    return math.sqrt(sq)


# the replica link's wire formats (--wire-format): what a receiver gets back from a run of fp32
# values, written from the definitions in docs/distributed.md

WIRE_BLOCK = 128
WIRE_LEVELS = {"int8": 127, "int4": 7}


def _wire_blocks(x, levels):
    """x (float32, 1-D) cut into rows of WIRE_BLOCK (the last zero-filled, which leaves its absmax
    alone); returns (scales, integer codes) with scale = absmax / levels (NaNs left out) and codes
    rint(x / scale) clamped, 0 where the quotient is NaN or the scale 0."""
    n = x.size
    rows = np.zeros(-(-n // WIRE_BLOCK) * WIRE_BLOCK, np.float32)
    rows[:n] = x
    rows = rows.reshape(-1, WIRE_BLOCK)
    scales = np.where(np.isnan(rows), np.float32(0), np.abs(rows)).max(axis=1) / np.float32(levels)
    zero = scales == 0
    with np.errstate(invalid="ignore"):
        codes = np.rint(rows / np.where(zero, np.float32(1), scales)[:, None])
    codes = np.clip(np.where(np.isnan(codes), 0, codes), -levels, levels)
    codes[zero] = 0
    return scales.astype(np.float32), codes.astype(np.int32)


WIRE_TOPK_CHUNK = 4096


def _topk_chunks(x, density, mult):
    """--topk: per chunk of WIRE_TOPK_CHUNK values from x's start, (its start, the indices within
    it of the mult * ceil(density * len) values of largest magnitude (float32 product, at most
    len), equal magnitudes by lower index, in ascending order)."""
    for c in range(0, x.size, WIRE_TOPK_CHUNK):
        part = x[c:c + WIRE_TOPK_CHUNK]
        k = min(part.size, mult * int(np.ceil(np.float32(density) * np.float32(part.size))))
        by_size = np.lexsort((np.arange(part.size), -np.abs(part)))
        yield c, np.sort(by_size[:k])


def wire_roundtrip(x, fmt, density=0.0, mult=1):
    """The float32 values a receiver decodes from x sent in format fmt (density > 0: only the
    top-k values of each chunk, the rest 0)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if density > 0:
        out = np.zeros_like(x)
        for c, idx in _topk_chunks(x, density, mult):
            out[c + idx] = wire_roundtrip(x[c + idx], fmt)
        return out
    if fmt == "fp32":
        return x.copy()
    if fmt == "bf16":
        return bf16_bits_to_fp32(fp32_to_bf16_bits(x))
    scales, codes = _wire_blocks(x, WIRE_LEVELS[fmt])
    return (codes.astype(np.float32) * scales[:, None]).reshape(-1)[:x.size]


def wire_encode(x, fmt, density=0.0, mult=1):
    """The bytes of x in format fmt: fp32/bf16 little-endian values; int8/int4 the block scales
    (fp32) then the codes (int8 one a byte; int4 two a byte, even index in the low nibble).
    density > 0: per chunk, the kept indices (uint16) then their values in the format."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if density > 0:
        return b"".join(idx.astype("<u2").tobytes() + wire_encode(x[c + idx], fmt)
                        for c, idx in _topk_chunks(x, density, mult))
    if fmt == "fp32":
        return x.astype("<f4").tobytes()
    if fmt == "bf16":
        return fp32_to_bf16_bits(x).astype("<u2").tobytes()
    scales, codes = _wire_blocks(x, WIRE_LEVELS[fmt])
    codes = codes.reshape(-1)[:x.size]
    if fmt == "int8":
        packed = codes.astype(np.int8).tobytes()
    else:
        nib = (codes & 0xF).astype(np.uint8)
        if nib.size % 2:
            nib = np.append(nib, np.uint8(0))
        packed = (nib[0::2] | (nib[1::2] << 4)).astype(np.uint8).tobytes()
    return scales.astype("<f4").tobytes() + packed


def owned_layout(cfg, shards):
    """Each shard rank's owned elements as indices into the flat parameters (file order), -1 for
    padding: shards 0 (ZeRO 0) one rank that owns everything; else ZeRO 1/2 over `shards` ranks:
    units (per layer its 12 tensors, then wte, wpe, lnfw, lnfb), each cut into slices of
    ceil(size / shards), rank s owning slice s of every unit."""
    shapes = param_shapes(cfg)
    sizes = {n: int(np.prod(shapes[n])) for n in PARAM_NAMES}
    offsets = dict(zip(PARAM_NAMES, np.cumsum([0] + [sizes[n] for n in PARAM_NAMES])[:-1]))
    if shards == 0:
        return [np.arange(sum(sizes.values()))]
    L = cfg["L"]
    units = [(offsets[n] + l * (sizes[n] // L), sizes[n] // L) for l in range(L) for n in PARAM_NAMES[2:14]]
    units += [(offsets[n], sizes[n]) for n in ("wte", "wpe", "lnfw", "lnfb")]
    layout = []
    for s in range(shards):
        parts = []
        for start, size in units:
            k = -(-size // shards)
            piece = np.full(k, -1)
            lo, hi = min(s * k, size), min((s + 1) * k, size)
            piece[:hi - lo] = np.arange(start + lo, start + hi)
            parts.append(piece)
        layout.append(np.concatenate(parts))
    return layout


def wire_mean(msgs, fmt, layout, residuals, density=0.0):
    """The mean over the replicas of msgs (R flat float32 pseudo-gradients) as sent through the
    wire: for every shard's owned vector (padded to R equal slices), each replica adds its residual
    (error feedback, when residuals is a list) and sends slice j encoded to replica j, keeping what
    encoding lost as its new residual; replica j adds the R decoded slices in replica order in
    float32 and sends the encoded sum back to all (density > 0: top-k, the sum keeping R times as
    many values). Returns sum / R (float32, flat)."""
    R = len(msgs)
    total = np.zeros_like(msgs[0])
    for s, idx in enumerate(layout):
        k = -(-idx.size // R)
        pos = np.full(R * k, -1)
        pos[:idx.size] = idx
        have = pos >= 0
        decoded = []
        for r in range(R):
            m = np.zeros(R * k, np.float32)
            m[have] = msgs[r][pos[have]]
            if residuals is not None:
                res = residuals[r].setdefault(s, np.zeros(R * k, np.float32))
                if res.size != R * k:  # --drop/--rejoin changed R: the same per-element residual,
                    res = np.concatenate([res[:idx.size], np.zeros(R * k - idx.size, np.float32)])
                    res *= np.float32(DROP_BUG != 4)
                m = m + res           # padded to the new R slices (its padding is always 0)
            d = np.concatenate([wire_roundtrip(m[j * k:(j + 1) * k], fmt, density) for j in range(R)])
            if residuals is not None:
                residuals[r][s] = m - d
            decoded.append(d)
        for j in range(R):
            part = decoded[0][j * k:(j + 1) * k]
            for r in range(1, R):
                part = part + decoded[r][j * k:(j + 1) * k]
            got = wire_roundtrip(part, fmt, density, R)
            sl = pos[j * k:(j + 1) * k]
            total[sl[sl >= 0]] = got[sl >= 0]
    return total / np.float32(R)


def outer_step_wire(outer, buf, local, lr, momentum, fmt, layout, residuals, density=0.0):
    """outer_step with the pseudo-gradients' mean formed through wire_mean (--wire-format, --topk)."""
    flat = lambda d: np.concatenate([d[n].detach().numpy().reshape(-1) for n in PARAM_NAMES]).astype(np.float32)
    o = flat(outer)
    mean = wire_mean([o - flat(rep) for rep in local], fmt, layout, residuals, density)
    sq, off = 0.0, 0
    for n in PARAM_NAMES:
        k = outer[n].numel()
        delta = torch.from_numpy(mean[off:off + k].copy()).reshape(outer[n].shape)
        off += k
        sq += outer_nesterov(outer[n], buf[n], delta, lr, momentum, [rep[n] for rep in local])
    return math.sqrt(sq)


# elastic replicas (--drop k@s, --rejoin k@s): which replicas take part in each step

def replica_schedule(R, steps, H, S, drops=(), rejoins=()):
    """The replicas alive at each step t = 1..steps (a list, index t; index 0 unused), from the
    (k, s) pairs of --drop and --rejoin (k a replica 0..R-1, s a 1-based step). Replica k dropped at
    step s takes no part in step s and later ones (their losses, their outer syncs) until rejoined;
    rejoined at step s it takes part again from step s, starting from the outer parameters of the
    last sync (the C trainer rejoins a running replica after a sync; a resume from a checkpoint
    written without it rebuilds it at the checkpoint's step, inside a window or not). Raises
    ValueError naming the flag for anything else."""
    if (drops or rejoins) and not (R >= 2 and H > 0):
        raise ValueError(f"--drop/--rejoin need --replicas >= 2 and --sync-every > 0 (got --replicas {R}, "
                         f"--sync-every {H})")
    events = {}
    for flag, pairs in (("--drop", drops), ("--rejoin", rejoins)):
        for k, s in pairs:
            if not 0 <= k < R:
                raise ValueError(f"{flag} {k}@{s}: replica {k} out of range 0..{R - 1}")
            if not 1 <= s <= steps:
                raise ValueError(f"{flag} {k}@{s}: step {s} out of range 1..{steps} (--steps)")
            if flag == "--drop" and s <= S:
                raise ValueError(f"--drop {k}@{s}: steps 1..{S} are synchronous (--sync-start {S}); "
                                 f"a replica can only drop after step {S}")
            if (k, s) in events:
                raise ValueError(f"{flag} {k}@{s}: replica {k} already has a --drop or --rejoin at step {s}")
            events[(k, s)] = flag
    alive = [None] + [[] for _ in range(steps)]
    for k in range(R):
        up, mine = True, sorted((s, flag) for (r, s), flag in events.items() if r == k)
        for s, flag in mine:
            if flag == "--drop" and not up:
                raise ValueError(f"--drop {k}@{s}: replica {k} is already dropped at step {s}")
            if flag == "--rejoin" and up:
                raise ValueError(f"--rejoin {k}@{s}: replica {k} was not dropped before step {s}")
            up = flag == "--rejoin"
        for t in range(1, steps + 1):
            up = True
            for s, flag in mine:
                if s <= t:
                    up = flag == "--rejoin"
            if up:
                alive[t].append(k)
    for t in range(1, steps + 1):
        if not alive[t]:
            raise ValueError(f"--drop: every replica is dropped at step {t}; at least one must survive")
    return alive


def in_flight_after(t, H, S, overlap, steps, fragments=1):
    """--overlap: whether an exchange is still in flight after step t (a fragment's starts after a
    step t0 < steps it is due at and is applied after step t0 + overlap)."""
    return any(fragment_due(f, fragments, t0, H, S, steps) and t0 <= t < t0 + overlap
               for f in range(fragments) for t0 in range(1, steps))


# dev/test_ref_drop.py's planted bugs (--drop-bug): 1 the outer mean / R instead of / R', 2 a rejoined
# replica keeps its old AdamW moments, 3 its step count restarts, 4 residuals lost when R' changes,
# 5 a rejoined replica keeps its old residual
DROP_BUG = 0


# streaming fragments (--fragments F, docs/distributed.md): layer l belongs to fragment l * F // L,
# wte and wpe to fragment 0, lnfw and lnfb to fragment F - 1; fragment f syncs after the steps t
# with t - S - f * H // F a non-negative multiple of H, and every fragment after the last step.

def fragment_of_tensor(name, layer, L, F):
    if name in ("wte", "wpe"):
        return 0
    if name in ("lnfw", "lnfb"):
        return F - 1
    return layer * F // L


def fragment_masks(cfg, F, f):
    """Boolean masks (one per tensor, its shape) of the elements of fragment f."""
    L, masks = cfg["L"], {}
    for n, shape in param_shapes(cfg).items():
        m = torch.zeros(shape, dtype=torch.bool)
        if n in ("wte", "wpe", "lnfw", "lnfb"):
            m[...] = fragment_of_tensor(n, -1, L, F) == f
        else:
            for layer in range(L):
                m[layer] = fragment_of_tensor(n, layer, L, F) == f
        masks[n] = m
    return masks


FRAGMENT_OFFSET_BUG = 0  # dev/test_diloco.py's planted bug: fragments f > 0 this many steps late


def fragment_due(f, F, t, H, S, steps):
    d = t - S - f * H // F - (FRAGMENT_OFFSET_BUG if f > 0 else 0)
    return t > S and (t == steps or (d >= 0 and d % H == 0))


def fragment_layout(cfg, shards, F, f):
    """owned_layout's vectors cut down to fragment f's elements (the C trainer packs each rank's
    owned elements of one fragment in owned order, the padding of a unit's slice with its unit)."""
    flat_frag = np.concatenate([fragment_masks(cfg, F, f)[n].numpy().reshape(-1) for n in PARAM_NAMES])
    full = owned_layout(cfg, shards)
    if shards == 0:
        return [full[0][flat_frag[full[0]]]]
    shapes = param_shapes(cfg)
    L = cfg["L"]
    keep_units = [fragment_of_tensor(n, l, L, F) == f for l in range(L) for n in PARAM_NAMES[2:14]]
    keep_units += [fragment_of_tensor(n, -1, L, F) == f for n in ("wte", "wpe", "lnfw", "lnfb")]
    sizes = [int(np.prod(shapes[n])) // L for l in range(L) for n in PARAM_NAMES[2:14]]
    sizes += [int(np.prod(shapes[n])) for n in ("wte", "wpe", "lnfw", "lnfb")]
    out = []
    for vec in full:
        parts, off = [], 0
        for size, keep in zip(sizes, keep_units):
            k = -(-size // shards)
            if keep:
                parts.append(vec[off:off + k])
            off += k
        out.append(np.concatenate(parts))
    return out


def outer_fragment_delta(outer, local, masks, fmt=None, layout=None, residuals=None, density=0.0, divide=None):
    """The mean pseudo-gradient of one fragment (dict of tensors, zero outside masks): the plain mean
    over the replicas (fmt None; divide: the count it divides by, planted bug 1) or wire_mean's
    through the format (residuals updated)."""
    if fmt is not None:
        flat = lambda d: np.concatenate([d[n].detach().numpy().reshape(-1) for n in PARAM_NAMES]).astype(np.float32)
        o = flat(outer)
        mean = wire_mean([o - flat(rep) for rep in local], fmt, layout, residuals, density)
    out, off = {}, 0
    for n in PARAM_NAMES:
        k = outer[n].numel()
        if fmt is not None:
            delta = torch.from_numpy(mean[off:off + k].copy()).reshape(outer[n].shape)
        else:
            delta = outer[n] - local[0][n]
            for rep in local[1:]:
                delta = delta + (outer[n] - rep[n])
            delta = delta / (divide or len(local))
        off += k
        out[n] = torch.where(masks[n], delta, torch.zeros_like(delta))
    return out


def outer_fragment_apply(outer, buf, local, lr, momentum, masks, delta, snaps=None):
    """The Nesterov outer step with delta on the fragment's elements; each replica's values there
    become the new outer (snaps None), or (--overlap) the new outer plus what that replica's own
    steps added since its snapshot was taken when the exchange started. Returns the squared norm."""
    sq = 0.0
    for n in PARAM_NAMES:
        m, d = masks[n], delta[n]
        buf[n][m] = momentum * buf[n][m] + d[m]
        outer[n][m] = outer[n][m] - lr * (d[m] + momentum * buf[n][m])
        sq += float((d[m].double() ** 2).sum())
        for r, rep in enumerate(local):
            rep[n][m] = outer[n][m] if snaps is None else outer[n][m] + (rep[n][m] - snaps[r][n][m])
    return sq


def synchronous_step_wire(reps, opts, cfg, x, y, B, fmt, layout, residuals, density):
    """A synchronous step whose gradients cross the replicas through wire_mean (--sync-every 0
    with --wire-format/--topk): each replica's gradient on its own B rows (the C trainer sends the
    sum over a replica's ranks instead, the same values times the shard count: a power of two,
    which rounding and top-k carry exactly), their mean through the wire applied by every replica.
    Returns (the mean of the replicas' losses, the norm)."""
    R = len(reps)
    losses, msgs = [], []
    for r in range(R):
        loss_r, grads_r, _ = loss_and_grads(reps[0], cfg, x[r * B:(r + 1) * B], y[r * B:(r + 1) * B])
        losses.append(float(loss_r))
        msgs.append(np.concatenate([grads_r[n].numpy().reshape(-1) for n in PARAM_NAMES]).astype(np.float32))
    mean = wire_mean(msgs, fmt, layout, residuals, density)
    grads, off = {}, 0
    for n in PARAM_NAMES:
        k = reps[0][n].numel()
        grads[n] = torch.from_numpy(mean[off:off + k].copy()).reshape(reps[0][n].shape)
        off += k
    norms = [opt.step(rep, grads) for rep, opt in zip(reps, opts)]
    return sum(losses) / R, norms[0]


def train(P, cfg, tokens, B, T, steps, lr=1e-4, weight_decay=0.0, grad_clip=1.0, replicas=1,
          sync_every=0, outer_lr=0.7, outer_momentum=0.9, sync_start=0, on_first_batch=None,
          path="data", log=print, wire="fp32", feedback=True, wire_start=0, wire_shards=0, topk=0.0,
          fragments=1, overlap=0, drops=(), rejoins=(), optimizer="adamw", muon_lr=0.02, muon_momentum=0.95,
          muon_split_qkv=False):
    """Train `steps` AdamW steps; returns (losses, reps): each step's loss before its update and
    the R replicas' final parameters (reps[0] is P itself, updated in place; after the final
    outer sync all replicas are equal). Step t (1-based) reads the next global batch of R*B rows
    from batches(tokens, R*B, T); replica r's rows are [r*B, (r+1)*B). DiLoCo is active at step t
    when sync_every H > 0 and t > sync_start S: each replica then takes its own AdamW step on its
    own rows (logged loss and printed norm: the means over the replicas), and after step t with
    (t - S) % H == 0 or t == steps they sync through outer_step (outer state taken at the end of
    step S). Otherwise (synchronous) every replica's AdamW applies the gradient of the whole
    global batch.
    on_first_batch(x, y, logits, loss, grads), if given, gets the global batch of step 1 on the
    initial model (with steps <= 0 only that is done).
    wire (not fp32) or topk > 0: syncs after steps t > wire_start send the pseudo-gradients in that
    format, top-k when topk > 0 (outer_step_wire; feedback: with error feedback; wire_shards: the C
    trainer's ZeRO 1/2 shard group size whose owned slices are cut into the slices and blocks, 0 =
    ZeRO 0); with H = 0 the steps after wire_start send their gradients so (synchronous_step_wire).
    drops, rejoins: (k, s) pairs of --drop/--rejoin (replica_schedule, main's --help): a step's loss,
    norm and outer sync are over the replicas alive at it only (the mean over R' of them); a replica
    keeps its rows of the global batch; a rejoined one starts from the outer parameters with zero
    AdamW moments and residual, its AdamW step count the global step's."""
    R, H, S = replicas, sync_every, sync_start
    alive_at = replica_schedule(R, steps, H, S, drops, rejoins) if drops or rejoins else None
    for k, s in (rejoins if alive_at and overlap > 0 else []):
        if in_flight_after(s - 1, H, S, overlap, steps, fragments):
            raise ValueError(f"--rejoin {k}@{s}: with --overlap {overlap} an exchange is in flight after step "
                             f"{s - 1} (a replica rejoins only once the exchanges in flight have been applied)")
    residuals = [{} for _ in range(R)] if feedback else None
    compressed = wire != "fp32" or topk > 0
    layout = owned_layout(cfg, wire_shards) if compressed else None
    fragment_layouts = [fragment_layout(cfg, wire_shards, fragments, f) if compressed else None
                        for f in range(fragments)]
    frag_residuals = [[{} for _ in range(R)] if feedback else None for _ in range(fragments)]
    all_masks = [fragment_masks(cfg, fragments, f) for f in range(fragments)]
    pending = {}  # --overlap: fragment -> (the step its exchange started after, its mean, the replicas'
    # snapshots, the replicas it was over, their residuals before it)
    loader = batches(tokens, R * B, T, path)
    reps = [P] + [{n: t.clone() for n, t in P.items()} for _ in range(R - 1)]
    if steps <= 0:
        if on_first_batch is not None:
            x, y = next(loader)
            loss, grads, logits = loss_and_grads(P, cfg, x, y)
            on_first_batch(x, y, logits, loss, grads)
        return [], reps
    def new_optimizer(rep):
        return make_optimizer(rep, optimizer, lr, weight_decay, grad_clip, muon_lr, muon_momentum, muon_split_qkv)

    opts = [new_optimizer(rep) for rep in reps]
    outer = buf = None

    def take_outer():
        return ({n: P[n].clone() for n in PARAM_NAMES}, {n: torch.zeros_like(P[n]) for n in PARAM_NAMES})

    if H > 0 and S == 0:
        outer, buf = take_outer()
    losses = []
    for t in range(1, steps + 1):
        x, y = next(loader)
        active = H > 0 and t > S
        wire_now = not active and H == 0 and compressed and t > wire_start and R > 1
        if (not active and not wire_now) or (t == 1 and on_first_batch is not None):
            full = loss_and_grads(reps[0], cfg, x, y)
            if t == 1 and on_first_batch is not None:
                loss, grads, logits = full
                on_first_batch(x, y, logits, loss, grads)
        if wire_now:
            loss, norm = synchronous_step_wire(reps, opts, cfg, x, y, B, wire, layout, residuals, topk)
        elif not active:
            loss, grads, _ = full
            norms = [opt.step(rep, grads) for rep, opt in zip(reps, opts)]
            loss, norm = float(loss), norms[0]
        else:
            live = alive_at[t] if alive_at else range(R)
            if alive_at and log:
                for r in sorted(set(alive_at[t - 1] or range(R)) - set(live)):
                    log(f"replica {r} dropped: in no step from step {t} (1-based; the line 'step {t - 1}') on")
            for r in (live if alive_at and t > 1 else []):
                if r in alive_at[t - 1]:
                    continue
                # rejoined at step t: the outer parameters of the last sync, zero moments and residual
                if log:
                    log(f"replica {r} rejoins at step {t} (1-based; the line 'step {t - 1}')")
                for n in PARAM_NAMES:
                    reps[r][n].copy_(outer[n])
                if DROP_BUG != 2:
                    opts[r] = new_optimizer(reps[r])
                    opts[r].t = 0 if DROP_BUG == 3 else t - 1
                if residuals is not None and DROP_BUG != 5:
                    residuals[r] = {}
                for res in frag_residuals if DROP_BUG != 5 else []:  # (--overlap's exchanges)
                    if res is not None:
                        res[r] = {}
            rl, norms = [], []
            for r in live:
                loss_r, grads_r, _ = loss_and_grads(reps[r], cfg, x[r * B:(r + 1) * B], y[r * B:(r + 1) * B])
                norms.append(opts[r].step(reps[r], grads_r))
                rl.append(float(loss_r))
            loss, norm = sum(rl) / len(rl), sum(norms) / len(rl)
        losses.append(loss)
        if log:
            log(f"step {t - 1}: loss {loss:.6f} norm {norm:.4f}")
        if H > 0 and t == S:
            outer, buf = take_outer()
        if active and (fragments > 1 or overlap > 0):
            sq, applied = 0.0, False
            for f in sorted(pending):  # exchanges that started overlap steps ago (all after the last step)
                t0, delta, snaps, over, kept = pending[f]
                if t == steps or t >= t0 + overlap:
                    left = [r for r in over if not alive_at or r in alive_at[t]]
                    if left != over:  # dropped while it was in flight: the survivors redo it from the start
                        if compressed and t0 > wire_start:
                            res = frag_residuals[f]
                            for r in left:
                                res[r] = copy.deepcopy(kept[r])
                            delta = outer_fragment_delta(outer, [snaps[r] for r in left], all_masks[f], wire,
                                                         fragment_layouts[f], None if res is None else
                                                         [res[r] for r in left], topk)
                        else:
                            delta = outer_fragment_delta(outer, [snaps[r] for r in left], all_masks[f],
                                                         divide=R if DROP_BUG == 1 else None)
                    sq += outer_fragment_apply(outer, buf, reps, outer_lr, outer_momentum, all_masks[f], delta, snaps)
                    del pending[f]
                    applied = True
            for f in range(fragments):
                if not fragment_due(f, fragments, t, H, S, steps):
                    continue
                over = list(alive_at[t]) if alive_at else list(range(R))
                res = frag_residuals[f]
                kept = copy.deepcopy(res) if res is not None and alive_at else None
                if compressed and t > wire_start:
                    delta = outer_fragment_delta(outer, [reps[r] for r in over], all_masks[f], wire, fragment_layouts[f],
                                                 None if res is None else [res[r] for r in over], topk)
                else:
                    delta = outer_fragment_delta(outer, [reps[r] for r in over], all_masks[f],
                                                 divide=R if DROP_BUG == 1 and alive_at else None)
                if overlap > 0 and t != steps:
                    pending[f] = (t, delta, [{n: rep[n].clone() for n in PARAM_NAMES} for rep in reps], over, kept)
                else:
                    sq += outer_fragment_apply(outer, buf, reps, outer_lr, outer_momentum, all_masks[f], delta)
                    applied = True
            if log and applied:
                log(f"outer sync after step {t}: pseudo-gradient norm {math.sqrt(sq):.6f}")
        elif active and ((t - S) % H == 0 or t == steps):
            live = alive_at[t] if alive_at else range(R)
            sync = [reps[r] for r in live]
            if compressed and t > wire_start:
                pg = outer_step_wire(outer, buf, sync, outer_lr, outer_momentum, wire, layout,
                                     None if residuals is None else [residuals[r] for r in live], topk)
            else:
                pg = outer_step(outer, buf, sync, outer_lr, outer_momentum, R if DROP_BUG == 1 else None)
            if log:
                log(f"outer sync after step {t}: pseudo-gradient norm {pg:.6f}")
    return losses, reps


# ----------------------------------------------------------------------------------------------
# bf16: round-to-nearest-even on the fp32 bit pattern

def fp32_to_bf16_bits(a):
    """fp32 array -> uint16 bf16 bits. Add 0x7FFF plus the lowest kept bit, then drop 16 bits:
    above half rounds up, below half down, an exact half goes to the even kept value. Overflow
    past the largest finite value becomes inf as it should; NaN is kept a (quiet) NaN."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    rounded[nan] = ((bits[nan] >> 16) | 0x0040).astype(np.uint16)
    return rounded


def bf16_bits_to_fp32(b):
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


# ----------------------------------------------------------------------------------------------
# files

def write_model(path, P, cfg, bf16=False):
    h = header_bytes(MODEL_MAGIC, 5 if bf16 else 3, cfg["T_max"], cfg["V"], cfg["L"], cfg["NH"],
               cfg["C"], cfg["Vp"])
    chunks = [h]
    for n in PARAM_NAMES:
        a = P[n].detach().cpu().to(torch.float32).numpy().reshape(-1)
        chunks.append(fp32_to_bf16_bits(a).astype("<u2").tobytes() if bf16
                      else a.astype("<f4").tobytes())
    write_atomic(path, chunks)


def read_header(path, raw, magic, versions):
    if len(raw) < HEADER_BYTES:
        raise FormatError(f"{path}: file is {len(raw)} bytes, shorter than the 1024-byte header")
    h = np.frombuffer(raw[:HEADER_BYTES], dtype="<i4")
    if h[0] != magic:
        raise FormatError(f"{path}: bad magic {h[0]} (expected {magic})")
    if h[1] not in versions:
        raise FormatError(f"{path}: unsupported version {h[1]} (expected one of {versions})")
    return h


def load_model(path):
    with open(path, "rb") as f:
        raw = f.read()
    h = read_header(path, raw, MODEL_MAGIC, (3, 5))
    cfg = dict(T_max=int(h[2]), V=int(h[3]), L=int(h[4]), NH=int(h[5]), C=int(h[6]), Vp=int(h[7]))
    check_config(cfg, path)
    shapes = param_shapes(cfg)
    width = 4 if h[1] == 3 else 2
    numel = sum(int(np.prod(s)) for s in shapes.values())
    want = HEADER_BYTES + width * numel
    if len(raw) != want:
        raise FormatError(f"{path}: file is {len(raw)} bytes but the header implies {want}")
    if h[1] == 3:
        flat = np.frombuffer(raw, dtype="<f4", offset=HEADER_BYTES).astype(np.float32)
    else:
        flat = bf16_bits_to_fp32(np.frombuffer(raw, dtype="<u2", offset=HEADER_BYTES))
    P, off = {}, 0
    for n in PARAM_NAMES:
        k = int(np.prod(shapes[n]))
        P[n] = torch.from_numpy(flat[off:off + k].copy()).reshape(shapes[n])
        off += k
    return P, cfg


def load_shard(path, vocab):
    with open(path, "rb") as f:
        raw = f.read()
    h = read_header(path, raw, SHARD_MAGIC, (1,))
    ntok = int(h[2])
    if ntok < 0 or len(raw) != HEADER_BYTES + 2 * ntok:
        raise FormatError(f"{path}: file is {len(raw)} bytes but the header says {ntok} tokens "
                          f"({HEADER_BYTES + 2 * max(ntok, 0)} bytes)")
    toks = np.frombuffer(raw, dtype="<u2", offset=HEADER_BYTES).astype(np.int64)
    bad = np.nonzero(toks >= vocab)[0]
    if len(bad):
        i = int(bad[0])
        raise FormatError(f"{path}: token {toks[i]} >= vocab size {vocab} at token index {i} "
                          f"(byte offset {HEADER_BYTES + 2 * i})")
    return toks


def batches(tokens, B, T, path="data"):
    """Batch k starts where batch k-1 ended (k*B*T while it fits); when B*T+1 tokens no longer
    fit before the end, go back to position 0."""
    n = B * T
    if len(tokens) < n + 1:
        raise FormatError(f"{path}: {len(tokens)} tokens, need at least B*T+1 = {n + 1}")
    pos = 0
    while True:
        if pos + n + 1 > len(tokens):
            pos = 0
        chunk = torch.from_numpy(tokens[pos:pos + n + 1].copy())
        yield chunk[:-1].reshape(B, T), chunk[1:].reshape(B, T)
        pos += n


def write_state(path, x, y, logits, loss, grads):
    chunks = [header_bytes(STATE_MAGIC, 2, x.shape[0], x.shape[1]),
              x.numpy().astype("<i4").tobytes(), y.numpy().astype("<i4").tobytes(),
              logits.numpy().astype("<f4").tobytes(),
              np.array([float(loss)], dtype="<f4").tobytes()]
    chunks += [grads[n].numpy().astype("<f4").tobytes() for n in PARAM_NAMES]
    write_atomic(path, chunks)


# ----------------------------------------------------------------------------------------------
# self-test

def write_tmp(d, data):
    p = os.path.join(d, "shard.bin")
    with open(p, "wb") as f:
        f.write(data)
    return p


def selftest():
    failures = []

    def expect(cond, what):
        print(("ok   " if cond else "FAIL ") + what)
        if not cond:
            failures.append(what)

    # 1. bf16 rounding against hand-worked bit patterns
    cases = [(0x3F800000, 0x3F80), (0xBF800000, 0xBF80),   # +-1.0 exact
             (0x3F808000, 0x3F80), (0x3F818000, 0x3F82),   # exact halves: to even (down, up)
             (0x3F808001, 0x3F81), (0x3F807FFF, 0x3F80),   # just above / below half
             (0x7F7FFFFF, 0x7F80), (0x7F800000, 0x7F80),   # overflow to inf, inf stays
             (0x00000001, 0x0000), (0x80000000, 0x8000)]   # tiny denormal, -0
    got = fp32_to_bf16_bits(np.array([c[0] for c in cases], dtype=np.uint32).view(np.float32))
    expect(all(int(g) == c[1] for g, c in zip(got, cases)), f"bf16 rounding {[hex(g) for g in got]}")
    nan = fp32_to_bf16_bits(np.array([0x7FC00001, 0x7F800001], dtype=np.uint32).view(np.float32))
    expect(all(np.isnan(bf16_bits_to_fp32(nan))), "bf16 keeps NaN a NaN")

    # 2. ops against independent formulas
    torch.manual_seed(0)
    z = torch.randn(4, 10, dtype=torch.float64) * 3
    g_ref = torch.tensor([[0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
                           for v in row] for row in z.tolist()], dtype=torch.float64)
    expect(torch.allclose(gelu(z), g_ref, atol=1e-14), "gelu tanh formula")
    w, b = torch.randn(10, dtype=torch.float64), torch.randn(10, dtype=torch.float64)
    zs = z * 1e-3                  # variance ~1e-5, so a wrong eps shows
    expect(torch.allclose(layernorm(zs, w, b), F.layer_norm(zs, (10,), w, b, 1e-5), atol=1e-12),
           "layernorm (eps 1e-5) vs F.layer_norm")
    B_, T_, NH_, hs_ = 2, 5, 3, 4
    qkv = torch.randn(B_, T_, 3 * NH_ * hs_, dtype=torch.float64)
    ref = torch.zeros(B_, T_, NH_ * hs_, dtype=torch.float64)
    for bb in range(B_):
        for h in range(NH_):
            for t in range(T_):
                q = qkv[bb, t, h * hs_:(h + 1) * hs_]
                s = [float(q @ qkv[bb, u, NH_ * hs_ + h * hs_:NH_ * hs_ + (h + 1) * hs_]) / math.sqrt(hs_)
                     for u in range(t + 1)]
                e = [math.exp(v - max(s)) for v in s]
                for u in range(t + 1):
                    ref[bb, t, h * hs_:(h + 1) * hs_] += e[u] / sum(e) * qkv[bb, u, 2 * NH_ * hs_ + h * hs_:2 * NH_ * hs_ + (h + 1) * hs_]
    expect(torch.allclose(attention(qkv, NH_), ref, atol=1e-12), "causal attention vs loops")

    # 3. autograd gradients vs central finite differences, float64, tiny model
    cfg = dict(T_max=8, V=13, L=2, NH=2, C=8, Vp=128)
    torch.manual_seed(1)
    P = {n: t.double() for n, t in init_params(cfg).items()}
    stds = {n: float(P[n].std()) for n in ("wpe", "qkvw", "fcw", "attprojw", "fcprojw")}
    expect(bool((P["wte"][cfg["V"]:] == 0).all()) and abs(float(P["wte"][:cfg["V"]].std()) - 0.02) < 0.004
           and abs(stds["qkvw"] - 0.02) < 0.002 and abs(stds["fcprojw"] - 0.01) < 0.001
           and abs(stds["attprojw"] - 0.01) < 0.002 and bool((P["ln1w"] == 1).all() and (P["qkvb"] == 0).all()),
           f"GPT-2 init: padded wte rows zero, std 0.02, residual projections 0.02/sqrt(2L) {stds}")
    for n in PARAM_NAMES:        # make biases / LN params non-trivial so every path is exercised
        if n not in DECAYED:
            P[n] += 0.1 * torch.randn_like(P[n])
    P["wte"][cfg["V"]:] = 0.0
    x = torch.randint(0, cfg["V"], (2, 6))
    y = torch.randint(0, cfg["V"], (2, 6))
    loss, grads, logits = loss_and_grads(P, cfg, x, y)
    lse = torch.logsumexp(logits, dim=-1)
    manual = (lse - logits.gather(-1, y.unsqueeze(-1)).squeeze(-1)).mean()
    expect(abs(float(manual - loss)) < 1e-12, "loss = mean cross-entropy")
    expect(bool((grads["wte"][cfg["V"]:] == 0).all()), "padded wte rows get zero gradient")
    worst = 0.0
    gen = torch.Generator().manual_seed(2)
    for n in PARAM_NAMES:
        for _ in range(2):
            i = int(torch.randint(0, P[n].numel(), (1,), generator=gen))
            if n == "wte":
                i = i % (cfg["V"] * cfg["C"])
            flat = P[n].view(-1)
            old = float(flat[i])
            flat[i] = old + 1e-5
            lp = float(F.cross_entropy(forward(P, cfg, x).reshape(-1, cfg["V"]), y.reshape(-1)))
            flat[i] = old - 1e-5
            lm = float(F.cross_entropy(forward(P, cfg, x).reshape(-1, cfg["V"]), y.reshape(-1)))
            flat[i] = old
            fd = (lp - lm) / 2e-5
            an = float(grads[n].view(-1)[i])
            worst = max(worst, abs(fd - an) / max(1e-4, abs(fd) + abs(an)))
    expect(worst < 1e-5, f"autograd vs finite differences (worst rel err {worst:.2e})")

    # 4. hand AdamW (with clipping and decay) vs torch.optim.AdamW on clipped grads, float64
    opt = AdamW(P, lr=1e-2, wd=0.1, clip=0.5)
    ref_p = {n: P[n].clone().requires_grad_(True) for n in PARAM_NAMES}
    ref_opt = torch.optim.AdamW([{"params": [ref_p[n] for n in PARAM_NAMES if n in DECAYED], "weight_decay": 0.1},
                                 {"params": [ref_p[n] for n in PARAM_NAMES if n not in DECAYED], "weight_decay": 0.0}],
                                lr=1e-2, betas=(0.9, 0.95), eps=1e-8)
    for k in range(3):
        loss, grads, _ = loss_and_grads(P, cfg, x, y)
        norm = math.sqrt(sum(float((g ** 2).sum()) for g in grads.values()))
        got = opt.step(P, grads)
        scale = min(1.0, 0.5 / norm)
        for n in PARAM_NAMES:
            ref_p[n].grad = grads[n] * scale
        ref_opt.step()
        expect(abs(got - norm) < 1e-12 * norm, f"grad norm step {k}")
    diff = max(float((P[n] - ref_p[n].detach()).abs().max()) for n in PARAM_NAMES)
    expect(diff < 1e-12, f"hand AdamW vs torch.optim.AdamW (max diff {diff:.1e})")

    # 4b. Newton-Schulz against its closed form: for U = P diag(s) Q^T every step maps each singular
    # value x (of U / |U|_F) to a x + b x^3 + c x^5 and keeps the singular vectors; float64, a tall
    # and a wide matrix (the transposed path)
    for rows, cols in ((12, 5), (5, 12)):
        k = min(rows, cols)
        Pm = torch.linalg.qr(torch.randn(rows, k, dtype=torch.float64))[0]
        Qm = torch.linalg.qr(torch.randn(cols, k, dtype=torch.float64))[0]
        sv = torch.linspace(0.05, 2.0, k, dtype=torch.float64)
        x = sv / torch.sqrt((sv * sv).sum())
        a_, b_, c_ = NS_COEFFICIENTS
        for _ in range(5):
            x = a_ * x + b_ * x ** 3 + c_ * x ** 5
        want = Pm @ torch.diag(x) @ Qm.t()
        got = newton_schulz(Pm @ torch.diag(sv) @ Qm.t())
        err = float((got - want).abs().max())
        expect(err < 1e-10, f"Newton-Schulz {rows}x{cols} against the closed form (max diff {err:.1e})")
    # 4c. the Muon step against torch.optim.Muon where this torch has it (2.9 on: its Newton-Schulz
    # runs in bf16, so each step agrees to bf16's precision, 3e-2 of the step lr sqrt(max(1, rows /
    # cols)), and the weights after k steps within k of those)
    if hasattr(torch.optim, "Muon"):
        for rows, cols in ((48, 16), (16, 48)):  # tall (the lr ratio sqrt(3), the transposed path), wide
            W = torch.randn(rows, cols, dtype=torch.float32)
            ref = W.clone().requires_grad_(True)
            ref_opt = torch.optim.Muon([ref], lr=0.02, weight_decay=0.1, momentum=0.95, nesterov=True,
                                       adjust_lr_fn="original")
            mine = Muon({n: W.clone()[None] for n in MUON_MATRICES}, lr=1e-3, wd=0.1, clip=1.0)
            M = torch.zeros_like(W)
            for k in range(3):
                G = torch.randn(rows, cols, dtype=torch.float32)
                ref.grad = G.clone()
                ref_opt.step()
                mine.matrix_step(W, G, M)
            tol = 3 * 3e-2 * 0.02 * math.sqrt(max(1.0, rows / cols))
            err = float((W - ref.detach()).abs().max())
            expect(err < tol, f"Muon {rows}x{cols} vs torch.optim.Muon {torch.__version__}, 3 steps (max diff "
                              f"{err:.1e}, tol {tol:.1e})")
    else:
        print("skip  Muon vs torch.optim.Muon (this torch has no torch.optim.Muon; 2.9 and later do)")

    # 5. files: round trips and rejections
    with tempfile.TemporaryDirectory() as d:
        P32 = {n: t.float() for n, t in P.items()}
        path = os.path.join(d, "m.bin")
        write_model(path, P32, cfg)
        Q, cfg2 = load_model(path)
        expect(cfg2 == cfg and all(torch.equal(Q[n], P32[n]) for n in PARAM_NAMES), "fp32 model round trip")
        write_model(path, P32, cfg, bf16=True)
        expect(os.path.getsize(path) == HEADER_BYTES + 2 * sum(t.numel() for t in P32.values()), "bf16 file size")
        Q, _ = load_model(path)
        same = all(np.array_equal(Q[n].numpy(), bf16_bits_to_fp32(fp32_to_bf16_bits(P32[n].numpy())).reshape(Q[n].shape))
                   for n in PARAM_NAMES)
        rel = max(float(((Q[n] - P32[n]).abs() / P32[n].abs().clamp_min(1e-30)).max()) for n in PARAM_NAMES)
        expect(same and rel <= 2.0 ** -8, f"bf16 model round trip (max rel err {rel:.2e})")
        raw = open(path, "rb").read()

        def rejected(data, loader, what):
            p = os.path.join(d, "bad.bin")
            with open(p, "wb") as f:
                f.write(data)
            try:
                loader(p)
            except FormatError as e:
                expect(p in str(e), f"rejects {what}: {e}")
                return
            expect(False, f"rejects {what}")

        rejected(struct.pack("<i", 12345) + raw[4:], load_model, "model with bad magic")
        rejected(raw[:4] + struct.pack("<i", 4) + raw[8:], load_model, "model with bad version")
        rejected(raw[:-2], load_model, "truncated model")
        toks = np.array([1, 2, 12, 0, 5], dtype="<u2")
        good = header_bytes(SHARD_MAGIC, 1, 5) + toks.tobytes()
        expect(np.array_equal(load_shard(write_tmp(d, good), 13), toks), "shard round trip")
        rejected(header_bytes(SHARD_MAGIC + 1, 1, 5) + toks.tobytes(), lambda p: load_shard(p, 13), "shard with bad magic")
        rejected(good[:-2], lambda p: load_shard(p, 13), "truncated shard")
        rejected(good, lambda p: load_shard(p, 12), "shard token >= vocab")

    # 6. loader: consecutive batches, targets shifted by one, wrap to 0
    def starts(ntok, k):
        it = batches(np.arange(ntok), 2, 3)
        return [int(next(it)[0][0, 0]) for _ in range(k)]
    b = next(batches(np.arange(20), 2, 3))
    expect(b[0].tolist() == [[0, 1, 2], [3, 4, 5]] and b[1].tolist() == [[1, 2, 3], [4, 5, 6]],
           "data loader: x and y shifted by one")
    expect(starts(19, 5) == [0, 6, 12, 0, 6] and starts(18, 4) == [0, 6, 0, 6],
           "data loader: wraps exactly when B*T+1 tokens no longer fit")

    # 7. DiLoCo: the outer step vs torch.optim.SGD (Nesterov), then train() on a tiny float32 model
    torch.manual_seed(3)
    w0 = torch.randn(5, 7)
    outer, buf = {"w": w0.clone()}, {"w": torch.zeros_like(w0)}
    ref_w = w0.clone().requires_grad_(True)
    sgd = torch.optim.SGD([ref_w], lr=0.7, momentum=0.9, dampening=0, nesterov=True)
    pg_ok = True
    for k in range(3):
        local = [{"w": outer["w"] + 0.1 * torch.randn(5, 7)} for _ in range(3)]
        delta = sum((outer["w"] - rep["w"]) for rep in local) / 3
        ref_w.grad = delta.clone()
        sgd.step()
        pg = outer_step(outer, buf, local, 0.7, 0.9)
        pg_ok &= abs(pg - float(delta.norm())) < 1e-5 * float(delta.norm()) \
            and all(torch.equal(rep["w"], outer["w"]) for rep in local)
    diff = float((outer["w"] - ref_w.detach()).abs().max())
    expect(diff <= 1e-6 and pg_ok, f"DiLoCo outer step vs torch.optim.SGD(nesterov=True, momentum 0.9), "
           f"3 syncs (max diff {diff:.1e}); replicas reset to outer, pseudo-gradient norm")

    cfg = dict(T_max=8, V=32, L=1, NH=2, C=16, Vp=128)
    torch.manual_seed(4)
    P0 = init_params(cfg)
    toks = np.random.default_rng(4).integers(0, cfg["V"], 300).astype(np.int64)

    # lr 1e-3: the key part of qkvb has an exactly-zero true gradient, so AdamW turns rounding noise
    # (the outer step's, ~1e-9) into steps of size lr; at lr 1e-2 that drifts past 1e-6 in 5 steps
    def run(B, steps, **kw):
        P = {n: t.clone() for n, t in P0.items()}
        return train(P, cfg, toks, B, 8, steps, lr=1e-3, weight_decay=0.1, log=None, **kw)

    def maxdiff(A, Bp):
        return max(float((A[n] - Bp[n]).abs().max()) for n in PARAM_NAMES)

    l_sync, r_sync = run(2, 5)
    l_dl, r_dl = run(2, 5, sync_every=2, outer_lr=1.0, outer_momentum=0.0)
    dl = max(abs(u - v) for u, v in zip(l_sync, l_dl))
    dp = maxdiff(r_sync[0], r_dl[0])
    expect(len(l_dl) == 5 and dl <= 1e-6 and dp <= 1e-6,
           f"DiLoCo R=1, outer lr 1, momentum 0, H=2 == synchronous (loss diff {dl:.1e}, param diff {dp:.1e})")
    l_big, r_big = run(4, 4)
    l_pre, r_pre = run(2, 4, replicas=2, sync_every=2, sync_start=4)
    expect(l_pre == l_big and maxdiff(r_pre[0], r_big[0]) == 0 and maxdiff(r_pre[1], r_big[0]) == 0,
           "R=2 before --sync-start == synchronous run on the 2B-row global batch")
    x, y = next(batches(toks, 4, 8))
    own = [float(loss_and_grads({n: t.clone() for n, t in P0.items()}, cfg, x[r * 2:(r + 1) * 2],
                                y[r * 2:(r + 1) * 2])[0]) for r in range(2)]
    l2, r2 = run(2, 4, replicas=2, sync_every=2)
    expect(abs(l2[0] - (own[0] + own[1]) / 2) < 1e-6 and own[0] != own[1],
           f"R=2 DiLoCo step 1 loss {l2[0]:.6f} = mean of the replicas' own losses {own[0]:.6f}, {own[1]:.6f}")
    l2b, r2b = run(2, 2, replicas=2, sync_every=2)
    same = all(torch.equal(r2[0][n], r2[1][n]) and torch.equal(r2b[0][n], r2b[1][n]) for n in PARAM_NAMES)
    expect(same and l2b == l2[:2] and maxdiff(r2b[0], r_sync[0]) > 1e-4,
           "R=2 DiLoCo: both replicas hold identical params after a sync (steps 2 and 4)")

    print(f"selftest: {'FAILED ' + str(len(failures)) if failures else 'all passed'}")
    return 1 if failures else 0


# ----------------------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description="GPT-2 PyTorch reference for train_gpt2")
    ap.add_argument("--selftest", action="store_true", help="check the hand-written parts and exit")
    ap.add_argument("--model", help="build a fresh model from a descriptor dN (e.g. d12)")
    ap.add_argument("--load", help="load a model .bin (fp32 v3 or bf16 v5)")
    ap.add_argument("--channels", type=int, metavar="C", help="override the descriptor's channels")
    ap.add_argument("--heads", type=int, metavar="NH", help="override the descriptor's heads")
    ap.add_argument("--vocab", type=int, metavar="V", help="vocab size for --model (default 50257)")
    ap.add_argument("--max-seq", type=int, metavar="T_MAX", help="max sequence length for --model (default 1024)")
    ap.add_argument("--seed", type=int, default=1337, help="torch.manual_seed (default 1337)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--write-model", metavar="FILE", help="write the initial model, fp32 (v3)")
    ap.add_argument("--write-model-bf16", metavar="FILE", help="write the initial model, bf16 (v5)")
    ap.add_argument("--data", metavar="FILE", help="data shard to read batches from")
    ap.add_argument("--B", type=int, default=4, help="batch size (default 4)")
    ap.add_argument("--T", type=int, default=64, help="sequence length (default 64)")
    ap.add_argument("--write-state", metavar="FILE",
                    help="write the debug state of batch 0 (all R*B rows) on the initial model")
    ap.add_argument("--steps", type=int, default=0, help="AdamW steps to train (default 0)")
    ap.add_argument("--write-losses", metavar="FILE", help="write each step's loss (before its update)")
    ap.add_argument("--write-final", metavar="FILE",
                    help="write the fp32 model after training (replica 0, or with --drop the first replica "
                         "alive at the last step: the outer model after the last sync)")
    ap.add_argument("--lr", type=float, default=1e-4, help="constant learning rate (default 1e-4)")
    ap.add_argument("--weight-decay", type=float, default=0.0, help="decoupled, 2-D weights only (default 0)")
    ap.add_argument("--grad-clip", type=float, default=1.0, help="global grad-norm clip (default 1.0)")
    ap.add_argument("--replicas", type=int, default=1, metavar="R",
                    help="DiLoCo replicas simulated in one process; --B is rows per replica (default 1)")
    ap.add_argument("--sync-every", type=int, default=0, metavar="H",
                    help="DiLoCo outer sync every H steps; 0 = synchronous training (default 0)")
    ap.add_argument("--outer-lr", type=float, default=1.0, help="DiLoCo outer Nesterov SGD lr (default 1.0)")
    ap.add_argument("--outer-momentum", type=float, default=0.0, help="DiLoCo outer momentum (default 0.0)")
    ap.add_argument("--sync-start", type=int, default=0, metavar="S",
                    help="DiLoCo starts after step S; steps 1..S are synchronous (default 0)")
    ap.add_argument("--wire-format", default="fp32", choices=["fp32", "bf16", "int8", "int4"],
                    help="DiLoCo: the pseudo-gradients' format on the replica link (default fp32)")
    ap.add_argument("--error-feedback", type=int, default=1, choices=[0, 1],
                    help="--wire-format: keep what rounding lost and add it to the next sync (default 1)")
    ap.add_argument("--compress-start", type=int, default=0, metavar="S",
                    help="--wire-format: syncs after steps <= S stay fp32 (default 0)")
    ap.add_argument("--fragments", type=int, default=1, metavar="F",
                    help="--sync-every: streaming fragments, F groups of layers synced at staggered steps")
    ap.add_argument("--overlap", type=int, default=0, metavar="TAU",
                    help="--sync-every: a fragment's mean is computed after its step and applied TAU steps later")
    ap.add_argument("--fragment-offset-bug", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--topk", type=float, default=0.0, metavar="D",
                    help="DiLoCo: send the fraction D of each 4096-value chunk, largest first (default 0: all)")
    ap.add_argument("--wire-shards", type=int, default=0, metavar="DS",
                    help="--wire-format: slices and blocks cut as the C trainer's ZeRO 1/2 over DS shard "
                         "ranks (0: ZeRO 0, default)")
    ap.add_argument("--drop", action="append", default=[], metavar="k@s",
                    help="DiLoCo (--replicas >= 2, --sync-every > 0): replica k (0..R-1) takes no part in step "
                         "s (1-based, as in the logs; s > --sync-start) or any later one until a --rejoin: each such step's loss is "
                         "the mean over the surviving replicas' losses, each outer sync at or after step s "
                         "averages the pseudo-gradients over the R' survivors (sum / R'; with --wire-format the "
                         "slices are cut over the R' survivors in replica order, each keeping its own residual), "
                         "the outer parameters and momentum carry on, and every survivor keeps reading its own "
                         "rows of the R*B-row batches (no re-sharding). Step s is line s of --write-losses, printed as "
                         "'step s-1'. With --overlap, an exchange in flight when a replica it was over is dropped is "
                         "redone by the survivors from its start (their snapshots and residuals then), applied as "
                         "scheduled. With --fragments, each fragment's sync is over the replicas alive at it. "
                         "Repeatable, or comma-separated")
    ap.add_argument("--rejoin", action="append", default=[], metavar="k@s",
                    help="replica k, dropped earlier, takes part again from step s (the C trainer's live rejoin "
                         "comes after an outer sync, s-1 = --sync-start + a multiple of H; a resume from a "
                         "checkpoint written without replica k rejoins it at the checkpoint's step + 1, any "
                         "step): it starts from the outer parameters of the last sync, with zero AdamW moments (its step count, the bias "
                         "correction, the global step's), a zero residual, and the rows it would have read had "
                         "it never left; with --fragments, every fragment's outer parameters of its last sync. "
                         "Repeatable, or comma-separated")
    ap.add_argument("--optimizer", default="adamw", choices=["adamw", "muon"],
                    help="adamw, or muon on the block matrices with AdamW on the rest (default adamw)")
    ap.add_argument("--muon-lr", type=float, default=0.02, help="Muon's learning rate (default 0.02)")
    ap.add_argument("--muon-momentum", type=float, default=0.95, help="Muon's momentum (default 0.95)")
    ap.add_argument("--muon-split-qkv", type=int, default=0, choices=[0, 1],
                    help="Muon: each layer's qkvw as three C x C matrices, q, k, v (the C trainers' -mq; default 0)")
    ap.add_argument("--drop-bug", type=int, default=0, choices=[0, 1, 2, 3, 4, 5], help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.replicas < 1:
        ap.error(f"--replicas must be >= 1 (got {a.replicas})")
    if a.sync_every < 0:
        ap.error(f"--sync-every must be >= 0, 0 = synchronous (got {a.sync_every})")
    if a.sync_start < 0:
        ap.error(f"--sync-start must be >= 0 (got {a.sync_start})")
    if not 0.0 <= a.outer_momentum < 1.0:
        ap.error(f"--outer-momentum must be in [0, 1) (got {a.outer_momentum})")
    if not a.outer_lr > 0.0:
        ap.error(f"--outer-lr must be > 0 (got {a.outer_lr})")
    if a.fragments < 1 or (a.fragments > 1 and a.sync_every == 0):
        ap.error(f"--fragments must be >= 1, and > 1 only with --sync-every (got {a.fragments})")
    if a.overlap < 0 or (a.overlap > 0 and a.overlap >= a.sync_every):
        ap.error(f"--overlap must be >= 0 and below --sync-every (got {a.overlap})")
    global FRAGMENT_OFFSET_BUG, DROP_BUG
    FRAGMENT_OFFSET_BUG = a.fragment_offset_bug
    DROP_BUG = a.drop_bug
    # --drop/--rejoin (elastic replicas, the C trainer's -le 1): see replica_schedule and train()
    elastic = {}
    for flag, values in (("--drop", a.drop), ("--rejoin", a.rejoin)):
        elastic[flag] = []
        for item in ",".join(values).split(",") if values else []:
            m = re.fullmatch(r"\s*(\d+)@(-?\d+)\s*", item)
            if not m:
                ap.error(f"{flag}: want k@s (replica k, 1-based step s), comma-separated (got {item!r})")
            elastic[flag].append((int(m.group(1)), int(m.group(2))))
    if elastic["--drop"] or elastic["--rejoin"]:
        for k, s in elastic["--rejoin"] if a.overlap > 0 else []:
            if in_flight_after(s - 1, a.sync_every, a.sync_start, a.overlap, a.steps, a.fragments):
                ap.error(f"--rejoin {k}@{s}: with --overlap {a.overlap} an exchange is in flight after step {s - 1} "
                         "(a replica rejoins only once the exchanges in flight have been applied)")
        try:
            schedule = replica_schedule(a.replicas, a.steps, a.sync_every, a.sync_start,
                                        elastic["--drop"], elastic["--rejoin"])
        except ValueError as e:
            ap.error(str(e))

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    torch.use_deterministic_algorithms(True)
    if a.selftest:
        return selftest()
    if bool(a.model) == bool(a.load):
        ap.error("give exactly one of --model dN or --load FILE")
    if a.load:
        if any(v is not None for v in (a.channels, a.heads, a.vocab, a.max_seq)):
            ap.error("--channels/--heads/--vocab/--max-seq only apply to --model (a loaded file has its own)")
        P, cfg = load_model(a.load)
    else:
        cfg = config_from_descriptor(a.model, a.channels, a.heads,
                                     50257 if a.vocab is None else a.vocab,
                                     1024 if a.max_seq is None else a.max_seq)
        P = init_params(cfg)
    print(f"model: L={cfg['L']} C={cfg['C']} NH={cfg['NH']} V={cfg['V']} Vp={cfg['Vp']} T_max={cfg['T_max']}, "
          f"{sum(t.numel() for t in P.values())} parameters")
    if a.write_model:
        write_model(a.write_model, P, cfg)
    if a.write_model_bf16:
        write_model(a.write_model_bf16, P, cfg, bf16=True)
    if not (a.write_state or a.steps > 0):
        return 0
    if not a.data:
        ap.error("--write-state and --steps need --data")
    if not 1 <= a.T <= cfg["T_max"] or a.B < 1:
        ap.error(f"need B >= 1 and 1 <= T <= max-seq ({cfg['T_max']})")
    dump = (lambda x, y, logits, loss, grads: write_state(a.write_state, x, y, logits, loss, grads)) \
        if a.write_state else None
    losses, reps = train(P, cfg, load_shard(a.data, cfg["V"]), a.B, a.T, a.steps, a.lr, a.weight_decay,
                         a.grad_clip, a.replicas, a.sync_every, a.outer_lr, a.outer_momentum, a.sync_start,
                         on_first_batch=dump, path=a.data, wire=a.wire_format, feedback=bool(a.error_feedback),
                         wire_start=a.compress_start, wire_shards=a.wire_shards, topk=a.topk,
                         fragments=a.fragments, overlap=a.overlap, drops=elastic["--drop"],
                         rejoins=elastic["--rejoin"], optimizer=a.optimizer, muon_lr=a.muon_lr,
                         muon_momentum=a.muon_momentum, muon_split_qkv=bool(a.muon_split_qkv))
    if a.write_losses:
        write_atomic(a.write_losses, ["".join(f"{v:.9f}\n" for v in losses).encode()])
    if a.write_final:  # after the final sync every replica alive at the last step holds the outer model
        alive = schedule[a.steps] if elastic["--drop"] else [0]
        write_model(a.write_final, reps[alive[0]], cfg)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (FormatError, ValueError, OSError) as e:
        print(f"train_gpt2.py: error: {e}", file=sys.stderr)
        sys.exit(1)
