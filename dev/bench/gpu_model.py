#!/usr/bin/python3
"""Performance model of train_gpt2's GPU step (everything it prints is MODELLED, not measured).

For a GPT-2 size and a micro-batch (B, T), the step of train_gpt2.cu (one GPU, ZeRO 0, BF16,
-r 1, -w 1, one micro-step per step unless --accum) is listed kernel by kernel as train_gpt2.cu
launches it: FLOPs (tensor-core and CUDA-core fp32), bytes moved to and from HBM, launches and
host synchronisations. Each kernel's time is a roofline:

    t = max(tc_flops / P_tc + fp32_flops / P_fp32,  bytes / BW) + launches * t_launch

at the datasheet peaks ("roofline") and again at assumed attainable fractions of them ("derated",
the fractions in DERATE, engineering assumptions stated as such). Host synchronisations add
t_sync each. Summed to step time, tokens/s and MFU (PaLM's model FLOPs per token, 6 N + 12 L C T,
over the bf16 dense tensor-core peak).

Two steps are modelled: "before" (the trainer as it was when issue 12 was filed: scalar attention
with (B, NH, T, T) probabilities and fp32 score gradients, 2-byte accesses, separate LayerNorm
parameter-gradient passes, per-tensor AdamW, two-kernel norms, a blocking encoder copy) and
"after" (flash attention on tensor cores as issue 12 item 1 builds it, 128-bit one-pass kernels,
one multi-tensor AdamW launch, one-kernel norm and column sums, no blocking copy). llm.c's
published throughput is printed beside them, with its source.

    python3 dev/bench/gpu_model.py [--model 124M] [--B 64] [--T 1024] [--gpu H100] [--accum 1]
    python3 dev/bench/gpu_model.py --all        # every size on both GPUs, summary table
    python3 dev/bench/gpu_model.py --markdown   # the summary as a Markdown table (README)
"""
import argparse
import sys

# ---------------------------------------------------------------------------------------------
# Hardware constants, each with its source.
GPUS = {
    # NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column): BF16 Tensor Core 1,979 TFLOPS
    # "with sparsity" (footnote: half without), so 989.4 TFLOPS dense; FP32 67 TFLOPS; GPU memory
    # bandwidth 3.35 TB/s. Same numbers, dense/sparse split, in the NVIDIA H100 (Hopper)
    # architecture whitepaper's comparison table (989.4 dense BF16, 66.9 FP32), as reproduced at
    # https://glennklockwood.com/garden/processors/h100 .
    "H100": {"name": "H100 SXM 80GB", "tc": 989.4e12, "fp32": 66.9e12, "bw": 3.35e12,
             "src": "NVIDIA H100 datasheet / Hopper whitepaper: 989.4 TFLOPS BF16 dense, 66.9 TFLOPS FP32, 3.35 TB/s"},
    # NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM column): BF16 Tensor Core 312 TFLOPS
    # (624 with sparsity), FP32 19.5 TFLOPS, GPU memory bandwidth 2,039 GB/s.
    "A100": {"name": "A100 SXM 80GB", "tc": 312e12, "fp32": 19.5e12, "bw": 2.039e12,
             "src": "NVIDIA A100 80GB datasheet: 312 TFLOPS BF16 dense, 19.5 TFLOPS FP32, 2,039 GB/s"},
}
# Cost of one kernel launch on the GPU's timeline: 5 us. NVIDIA's CUDA Graphs blog (developer.nvidia
# .com/blog/cuda-graphs) describes per-kernel launch overheads of a few microseconds; a measured
# 4-6 us per launch of the driver/runtime path is reported at susun-blog.com/blog/pegainfer-3-cuda-graph.
T_LAUNCH = 5e-6
# A host synchronisation drains the GPU's queue; it is refilled one launch later at the earliest,
# plus the host's own work in between: 2 launches' worth (an assumption built on T_LAUNCH).
T_SYNC = 2 * T_LAUNCH
# The attainable fractions of the peaks used by the "derated" column: ENGINEERING ASSUMPTIONS, not
# sourced constants. cuBLASLt GEMMs of these shapes reach roughly 3/4 of the dense peak; 128-bit
# streaming kernels ~85% of HBM bandwidth; kernels with 2-byte scalar accesses (the "before"
# kernels, LDG.E.U16 in their SASS) issue 8x the load instructions and are taken at half of HBM
# bandwidth; scalar fp32 dot-product loops (the old attention) at half of the FP32 peak.
DERATE = {"tc": 0.75, "bw128": 0.85, "bw16": 0.50, "fp32": 0.50}

# llm.c's published throughput for GPT-2 124M (B 64, T 1024 per GPU, cuDNN flash attention), per GPU.
LLMC = {
    "A100": (10e9 / (90 * 60) / 8, "llm.c discussion #481 (github.com/karpathy/llm.c/discussions/481): GPT-2 124M "
             "on 10B tokens in ~90 min on one 8X A100 80GB SXM node, 'up to ~60% model flops utilization'"),
    "H100": (10e9 / (45 * 60) / 8, "modded-nanogpt README (github.com/KellerJordan/modded-nanogpt): 'the llm.c GPT-2 "
             "replication ... 45 minutes' on 8xH100 for 10B tokens"),
}

MODELS = {  # name: (L, C, NH)
    "124M": (12, 768, 12),
    "350M": (24, 1024, 16),
    "774M": (36, 1280, 20),
    "1558M": (48, 1600, 25),
}
V, VP, MAXT = 50257, 50304, 1024
X, F, I = 2, 4, 4  # bytes of bf16, fp32, int32


def num_params(L, C):
    return VP * C + MAXT * C + L * (12 * C * C + 13 * C) + 2 * C


def matmul_weight_params(L, C):
    """Parameters that take part in matmuls (the four weight matrices per layer and the tied wte head)."""
    return L * 12 * C * C + VP * C


class Kernel:
    def __init__(self, name, launches=1, tc=0.0, fp32=0.0, bytes_=0.0, narrow=False, syncs=0, host_s=0.0, phase=""):
        self.name, self.launches, self.tc, self.fp32, self.bytes = name, launches, tc, fp32, bytes_
        self.narrow = narrow  # 2-byte scalar accesses (derated bandwidth)
        self.syncs, self.host_s, self.phase = syncs, host_s, phase

    def time(self, gpu, derated):
        d = DERATE if derated else {"tc": 1.0, "bw128": 1.0, "bw16": 1.0, "fp32": 1.0}
        compute = self.tc / (gpu["tc"] * d["tc"]) + self.fp32 / (gpu["fp32"] * d["fp32"])
        bw = gpu["bw"] * (d["bw16"] if self.narrow else d["bw128"])
        return max(compute, self.bytes / bw) + self.launches * T_LAUNCH + self.syncs * T_SYNC + self.host_s


def matmul(name, BT, K, N, bias=False, aux_write=False, beta=False, phase=""):
    """out (BT, N) = inp (BT, K) w (N, K)^T on cuBLASLt: reads inp and w, writes out (reads it too when beta=1)."""
    b = X * (BT * K + K * N + BT * N) + (X * N if bias else 0) + (X * BT * N if aux_write else 0)
    b += X * BT * N if beta else 0
    return Kernel(name, 1, tc=2.0 * BT * K * N, bytes_=b, phase=phase)


def matmul_w(name, BT, K, N, phase=""):
    """dweight (N, K) += dout (BT, N)^T inp (BT, K): reads both, read-modify-writes dweight."""
    return Kernel(name, 1, tc=2.0 * BT * K * N, bytes_=X * (BT * K + BT * N + 2 * K * N), phase=phase)


def step_kernels(size, B, T, after, accum=1, att_bwd_launches=2):
    """The kernels of one optimizer step (accum micro-steps), in launch order, grouped (one Kernel
    per kernel kind per micro-step, launches counted in it)."""
    L, C, NH = MODELS[size]
    BT, N = B * T, num_params(L, C)
    narrow = not after
    ks = []
    # ---- forward
    fwd = []
    fwd.append(Kernel("encoder forward", 1, bytes_=I * BT + X * BT * C + X * T * C + X * BT * C, narrow=narrow,
                      phase="fwd"))
    fwd.append(Kernel("layernorm forward (ln1 of layer 0)", 1, bytes_=2 * X * BT * C + 2 * F * BT, narrow=narrow,
                      phase="fwd"))
    lay = []  # one layer's forward
    lay.append(matmul("matmul qkv (+bias)", BT, C, 3 * C, bias=True, phase="fwd"))
    causal = B * T * T * C  # FLOPs of one causal (T x T x hs per head) matmul pair-half: B NH T^2/2 hs 2
    probs = B * NH * T * T // 2  # causal half of the (B, NH, T, T) probabilities
    if after:
        lay.append(Kernel("attention forward (flash, tensor cores)", 1, tc=2.0 * causal, fp32=5.0 * probs,
                          bytes_=X * BT * 3 * C + X * BT * C + F * B * NH * T, phase="fwd"))
    else:
        # q.k computed twice (statistics pass and probability pass) and P.V: 3 causal products on CUDA cores;
        # probabilities written (causal half) and read back for P.V.
        lay.append(Kernel("attention forward (scalar, T x T probs)", 1, fp32=3.0 * 2 * causal + 5.0 * probs,
                          bytes_=X * BT * 3 * C + 2 * X * probs + X * BT * C, narrow=True, phase="fwd"))
    lay.append(matmul("matmul attn proj (+bias)", BT, C, C, bias=True, phase="fwd"))
    lay.append(Kernel("residual + layernorm forward (ln2)", 1, bytes_=4 * X * BT * C + 2 * F * BT, narrow=narrow,
                      phase="fwd"))
    lay.append(matmul("matmul fc (+bias, GELU epilogue, pre saved)", BT, C, 4 * C, bias=True, aux_write=True,
                      phase="fwd"))
    lay.append(matmul("matmul fc proj (+bias)", BT, 4 * C, C, bias=True, phase="fwd"))
    lay.append(Kernel("residual + layernorm forward (next ln1 / lnf)", 1, bytes_=4 * X * BT * C + 2 * F * BT,
                      narrow=narrow, phase="fwd"))
    fwd += scale_layer(lay, L)
    fwd.append(matmul("matmul logits (wte head)", BT, C, VP, phase="fwd"))
    # classifier: before, two HBM passes over the logits (statistics, then gradient) and a write;
    # after, one HBM read (the row's second read hits L2: a 100 KB row per block) and one write.
    passes = 1 if after else 2
    fwd.append(Kernel("fused classifier (softmax, loss, dlogits)", 1, bytes_=(passes + 1) * X * BT * VP + 2 * I * BT,
                      narrow=narrow, phase="fwd"))
    fwd.append(Kernel("loss accumulate", 1, bytes_=F * BT, phase="fwd"))
    # ---- backward
    bwd = []
    bwd.append(matmul("matmul logits backward dinp", BT, VP, C, phase="bwd"))
    bwd.append(matmul_w("matmul logits backward dwte", BT, C, VP, phase="bwd"))
    bwd.append(Kernel("memset dresidual", 1, bytes_=X * BT * C, phase="bwd"))
    bwd.append(ln_backward("layernorm backward (lnf)", BT, C, after))
    lb = []
    lb.append(Kernel("gelu forward (recompute, -r 1)", 1, bytes_=2 * X * BT * 4 * C, narrow=narrow, phase="bwd"))
    for nm, K, Nout, gelu in (("fc proj", 4 * C, C, True), ("fc", C, 4 * C, False)):
        lb.append(matmul("matmul %s backward dinp%s" % (nm, " (dGELU epilogue)" if gelu else ""), BT, Nout, K,
                         aux_write=gelu, phase="bwd"))
        lb.append(matmul_w("matmul %s backward dweight" % nm, BT, K, Nout, phase="bwd"))
        lb.append(bias_backward("bias backward (%s)" % nm, BT, Nout, after))
    lb.append(ln_backward("layernorm backward (ln2)", BT, C, after))
    lb.append(matmul("matmul attn proj backward dinp", BT, C, C, phase="bwd"))
    lb.append(matmul_w("matmul attn proj backward dweight", BT, C, C, phase="bwd"))
    lb.append(bias_backward("bias backward (attn proj)", BT, C, after))
    if after:
        lb.append(Kernel("attention backward (flash, recompute P)", att_bwd_launches, tc=5.0 * causal,
                         fp32=10.0 * probs, bytes_=X * BT * 3 * C * 2 + 3 * X * BT * C + 2 * F * B * NH * T,
                         phase="bwd"))
    else:
        # query kernel: dy.v and dq (2 causal products), reads probs twice, writes and re-reads fp32 dpre;
        # key kernel: dk and dv (2 products), walks columns of probs and dpre with stride T: each element
        # costs a 32-byte sector shared by the block's 4 warps (4 adjacent columns): x4 for bf16, x2 for fp32.
        byts = X * BT * 3 * C * 2 + X * BT * C * 2 + 2 * X * probs + 2 * F * probs + 4 * X * probs + 2 * F * probs
        lb.append(Kernel("attention backward (scalar, T x T dpre)", 2, fp32=4.0 * causal + 4.0 * probs, bytes_=byts,
                         narrow=True, phase="bwd"))
    lb.append(matmul("matmul qkv backward dinp", BT, 3 * C, C, phase="bwd"))
    lb.append(matmul_w("matmul qkv backward dweight", BT, C, 3 * C, phase="bwd"))
    lb.append(bias_backward("bias backward (qkv)", BT, 3 * C, after))
    lb.append(ln_backward("layernorm backward (ln1)", BT, C, after))
    bwd += scale_layer(lb, L)
    # encoder backward: dwte rows of the batch's tokens (read-modify-write, at most min(BT, V) rows) and dwpe
    rows = min(BT, V)
    enc_bytes = 2 * X * BT * C + 2 * X * rows * C + 2 * X * T * C + 3 * I * BT
    host = (BT + V) * 1e-9  # host bucket building: ~1 ns per token and per vocabulary entry (assumption)
    if after:  # buckets built while the forward runs, copied asynchronously from pinned memory
        bwd.append(Kernel("encoder backward (wte, wpe)", 2, bytes_=enc_bytes, phase="bwd"))
    else:  # the host builds the buckets after backward reaches the encoder, then a blocking pageable copy
        bwd.append(Kernel("encoder backward (wte, wpe; blocking copy)", 2, bytes_=enc_bytes, narrow=True, syncs=1,
                          host_s=host, phase="bwd"))
    micro = fwd + bwd
    # the training loop's device wait per micro-step (issue 12 item 4 would remove it; not done)
    micro.append(Kernel("wait per micro-step", 0, syncs=1, phase="bwd"))
    for k in micro:
        k.launches *= accum
        k.tc *= accum
        k.fp32 *= accum
        k.bytes *= accum
        k.syncs *= accum
        k.host_s *= accum
        ks.append(k)
    # ---- update
    ks.append(Kernel("zero grads (memset)", 1, bytes_=X * N, phase="upd"))
    ks.append(Kernel("global grad norm", 1 if after else 2, bytes_=X * N, narrow=narrow, syncs=1, phase="upd"))
    adam_bytes = N * (X + 2 * F + 2 * F + 2 * F + X)  # grad, master r/w, m r/w, v r/w, param write
    ks.append(Kernel("AdamW" + (" (multi-tensor)" if after else " (per tensor)"), 1 if after else 16,
                     fp32=12.0 * N, bytes_=adam_bytes, narrow=narrow, phase="upd"))
    ks.append(Kernel("loss to host", 0, syncs=1, phase="upd"))
    return ks


def scale_layer(kernels, L):
    for k in kernels:
        k.launches *= L
        k.tc *= L
        k.fp32 *= L
        k.bytes *= L
        k.name += " x%d layers" % L
    return kernels


def ln_backward(name, BT, C, after):
    chunks = -(-BT // 256)
    if after:  # one kernel: dinp (read-modify-write), dweight and dbias partials, last block sums them in order
        return Kernel(name, 1, bytes_=4 * X * BT * C + 2 * F * BT + 2 * 2 * F * chunks * C, phase="bwd")
    # input kernel (dout, inp, dinp r/w) + parameter partials (dout, inp again) + two finishing kernels
    b = 4 * X * BT * C + 2 * F * BT + 2 * X * BT * C + 2 * F * BT + 2 * 2 * F * chunks * C
    return Kernel(name, 4, bytes_=b, narrow=True, phase="bwd")


def bias_backward(name, BT, OC, after):
    chunks = -(-BT // 256)
    b = X * BT * OC + 2 * F * chunks * OC + 2 * X * OC
    return Kernel(name, 1 if after else 2, bytes_=b, narrow=not after, phase="bwd")


def model_flops_per_token(size, T):
    L, C, _ = MODELS[size]
    return 6 * num_params(L, C) + 12 * L * C * T  # PaLM (Chowdhery et al. 2022), appendix B


def summarize(size, B, T, gpu_key, after, accum=1):
    gpu = GPUS[gpu_key]
    ks = step_kernels(size, B, T, after, accum)
    tokens = B * T * accum
    out = {}
    for derated in (False, True):
        t = sum(k.time(gpu, derated) for k in ks)
        out["derated" if derated else "roofline"] = (t, tokens / t, model_flops_per_token(size, T) * tokens / t / gpu["tc"])
    out["launches"] = sum(k.launches for k in ks)
    out["syncs"] = sum(k.syncs for k in ks)
    out["bytes"] = sum(k.bytes for k in ks)
    out["flops"] = sum(k.tc + k.fp32 for k in ks)
    return out, ks


def per_kernel_table(size, B, T, gpu_key, accum):
    gpu = GPUS[gpu_key]
    print("MODELLED (not measured): GPT-2 %s, B %d, T %d, %d micro-step(s), on %s" % (size, B, T, accum, gpu["name"]))
    print("  constants: %s; launch %.0f us; sync %.0f us; derated = %s (assumptions)" %
          (gpu["src"], T_LAUNCH * 1e6, T_SYNC * 1e6, DERATE))
    for after in (False, True):
        s, ks = summarize(size, B, T, gpu_key, after, accum)
        print("\n== %s" % ("after (this issue's step)" if after else "before (the step when issue 12 was filed)"))
        print("%-62s %8s %10s %10s %9s %9s" % ("kernel", "launches", "GFLOP", "MB", "roof ms", "derat ms"))
        for k in ks:
            print("%-62s %8d %10.1f %10.1f %9.3f %9.3f" % (k.name[:62], k.launches, (k.tc + k.fp32) / 1e9,
                                                           k.bytes / 1e6, k.time(gpu, False) * 1e3,
                                                           k.time(gpu, True) * 1e3))
        for kind in ("roofline", "derated"):
            t, tps, mfu = s[kind]
            print("  %-8s step %8.2f ms  %10.0f tokens/s  MFU %5.1f%%" % (kind, t * 1e3, tps, mfu * 100))
        print("  launches %d, host syncs %d, HBM %.1f GB, %.1f TFLOP" %
              (s["launches"], s["syncs"], s["bytes"] / 1e9, s["flops"] / 1e12))


def summary_rows(B, T, accum):
    rows = []
    for gpu_key in ("H100", "A100"):
        for size in MODELS:
            b, _ = summarize(size, B, T, gpu_key, False, accum)
            a, _ = summarize(size, B, T, gpu_key, True, accum)
            rows.append((gpu_key, size, b, a))
    return rows


def print_summary(B, T, accum, markdown):
    rows = summary_rows(B, T, accum)
    head = ("GPU", "model", "before tok/s", "before MFU", "after tok/s", "after MFU", "after launches", "llm.c tok/s")
    if markdown:
        print("Modelled, not measured (`dev/bench/gpu_model.py`, derated roofline), B %d, T %d per GPU:\n" % (B, T))
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
    else:
        print("MODELLED (not measured), derated roofline, B %d, T %d, %d micro-step(s)" % (B, T, accum))
        print("%-5s %-6s %12s %10s %12s %10s %14s %12s" % head)
    for gpu_key, size, b, a in rows:
        llmc = "%.0f" % LLMC[gpu_key][0] if size == "124M" else "-"
        cells = (gpu_key, size, "%.0f" % b["derated"][1], "%.1f%%" % (100 * b["derated"][2]), "%.0f" % a["derated"][1],
                 "%.1f%%" % (100 * a["derated"][2]), "%d" % a["launches"], llmc)
        if markdown:
            print("| " + " | ".join(cells) + " |")
        else:
            print("%-5s %-6s %12s %10s %12s %10s %14s %12s" % cells)
    print("\nllm.c figures (published, per GPU, 8-GPU runs):")
    for gpu_key in ("H100", "A100"):
        print("  %s: %.0f tokens/s -- %s" % (gpu_key, LLMC[gpu_key][0], LLMC[gpu_key][1]))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="124M", choices=sorted(MODELS))
    p.add_argument("--B", type=int, default=64)
    p.add_argument("--T", type=int, default=1024)
    p.add_argument("--gpu", default="H100", choices=sorted(GPUS))
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--all", action="store_true")
    p.add_argument("--markdown", action="store_true")
    a = p.parse_args()
    if a.all or a.markdown:
        print_summary(a.B, a.T, a.accum, a.markdown)
    else:
        per_kernel_table(a.model, a.B, a.T, a.gpu, a.accum)
    return 0


if __name__ == "__main__":
    sys.exit(main())
