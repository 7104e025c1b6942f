#!/usr/bin/python3
"""Performance model of train_gpt2's GPU step (everything it prints is MODELLED, not measured).

For a GPT-2 size and a micro-batch (B, T), one optimizer step of train_gpt2.cu (one GPU, ZeRO 0,
BF16, -r 1, -w 1) is listed kernel by kernel as the code launches it, with the attention path
(-at ours | cudnn) and the GELU path (-ge 1: cuBLASLt epilogues, -ge 0: our GELU kernels) chosen.
Each kernel's time comes from its own kind of evidence:

- our flash-attention kernels (llmc/attention.cuh): FLOPs as executed, counted by walking the
  kernels' tile loops (diagonal tiles partly done, tiles above the diagonal skipped, the backward's
  7 tile matmuls); per warp and tile, the shared-memory wavefronts, issued instructions and HMMAs
  of their sm_90 SASS (ATT_SASS, bank conflicts computed from the kernels' addresses in
  smem_wavefronts); blocks per SM from ptxas registers and shared memory. Time is the slowest of
  the tensor, shared-memory, issue and HBM pipes (no cuBLASLt derate applied to them);
- cuDNN attention (-at cudnn): published cuDNN SDPA throughput at head size 64 (CUDNN_ATT);
- cuBLASLt matmuls: FLOPs over the dense peak times a GEMM efficiency (GEMM_EFF);
- memory-bound kernels: bytes over HBM bandwidth times a streaming efficiency (BW_EFF).
Every hardware constant and derate names its public source next to it; what is an assumption says so.

    python3 dev/bench/gpu_model.py [--model 124M] [--B 64] [--T 1024] [--gpu H100] [--at ours] [--ge 1]
    python3 dev/bench/gpu_model.py --summary        # 124M and 1558M, both attention paths, H100 and A100
    python3 dev/bench/gpu_model.py --llmc           # against llm.c's published runs (A100, H100)
    python3 dev/bench/gpu_model.py --json          # the figures dev/gpu_first_run.sh compares with
    python3 dev/bench/gpu_model.py --check-sass CUBIN [PTXAS_LOG]   # ATT_SASS against the SASS
"""
import argparse
import json
import sys

# ---------------------------------------------------------------------------------------------
# Hardware constants, each with its source.
GPUS = {
    # NVIDIA H100 datasheet (SXM): BF16 tensor 1,979 TFLOPS "with sparsity" (989.4 dense), FP32
    # 66.9 TFLOPS, HBM 3.35 TB/s. 132 SMs, 4 tensor cores per SM, 512 dense BF16 FMA per tensor
    # core per clock, 1.83 GHz (the clock that makes 989.4): glennklockwood.com/garden/peak-FLOPS.
    # Shared memory per SM 228 KB (227 KB per block), 64K registers, 64 warps: CUDA C++ Programming
    # Guide, "Compute capability 9.0" of the technical specifications table.
    "H100": {"name": "H100 SXM 80GB", "tc": 989.4e12, "fp32": 66.9e12, "bw": 3.35e12, "sms": 132, "clock": 1.83e9,
             "smem_sm": 228 * 1024, "regs_sm": 65536, "warps_sm": 64,
             # L2: 50 MB (NVIDIA H100 Tensor Core GPU Architecture whitepaper, H100 SXM5)
             "l2": 50e6,
             # mma.sync (HMMA, what wmma compiles to) is taken at the Ampere per-SM rate, 2048 dense
             # FLOP per clock, half of what wgmma reaches: an ASSUMPTION, consistent with
             # FlashAttention-2 (mma.sync) reaching about 35% of the H100 peak (FlashAttention-3
             # paper, arXiv 2407.08608, abstract) where it reaches 50-73% on A100 (FlashAttention-2
             # paper, arXiv 2307.08691, abstract). Not binding here: our kernels wait on shared memory.
             "hmma_flop_clk_sm": 2048.0,
             "src": "H100 datasheet 989.4 TFLOPS BF16 dense, 66.9 FP32, 3.35 TB/s; 132 SMs at 1.83 GHz"},
    # NVIDIA A100 80GB datasheet (SXM): BF16 312 TFLOPS dense, FP32 19.5, HBM 2,039 GB/s; 108 SMs at
    # 1.41 GHz boost (NVIDIA A100 whitepaper, table 1), 1024 dense FMA per SM per clock (312e12 /
    # (108 x 1.41e9 x 2)); 164 KB shared memory per SM, 64K registers, 64 warps (CUDA C++ Programming
    # Guide, compute capability 8.0). mma.sync runs at the full A100 rate.
    "A100": {"name": "A100 SXM 80GB", "tc": 312e12, "fp32": 19.5e12, "bw": 2.039e12, "sms": 108, "clock": 1.41e9,
             "smem_sm": 164 * 1024, "regs_sm": 65536, "warps_sm": 64, "hmma_flop_clk_sm": 2048.0,
             "l2": 40e6,  # NVIDIA A100 Tensor Core GPU Architecture whitepaper: 40 MB L2
             "src": "A100 80GB datasheet 312 TFLOPS BF16 dense, 19.5 FP32, 2,039 GB/s; 108 SMs at 1.41 GHz"},
}
# Shared memory: 32 banks of 4 bytes, one 128-byte wavefront per SM per clock (CUDA C++ Programming
# Guide, "Shared Memory" of compute capability 5.x and later: successive 32-bit words in successive
# banks, each bank 32 bits per clock). Issue: 4 schedulers per SM, one warp instruction each per clock
# (NVIDIA Hopper and Ampere whitepapers, SM diagrams: four processing blocks per SM).
SMEM_WAVEFRONT_B = 128
ISSUE_PER_CLK_SM = 4
HMMA_FLOP = 2 * 16 * 8 * 16  # HMMA.16816: one m16n8k16 multiply-accumulate
# Global-load latency a block waits out at each tile (the loads are synchronous, then __syncthreads):
# 1000 clocks, an ASSUMPTION of the order of HBM latency; it only matters where few blocks share an SM.
LOAD_LATENCY_CLK = 1000
# Cost of one kernel launch on the GPU's timeline: 5 us. NVIDIA's CUDA Graphs blog (developer.nvidia.com
# /blog/cuda-graphs): per-kernel launch overheads of a few microseconds.
T_LAUNCH = 5e-6
T_SYNC = 2 * T_LAUNCH  # a host synchronisation drains the queue: 2 launches' worth (ASSUMPTION)

# cuBLASLt GEMM efficiency at GPT-2 shapes (M = B T = 65536, K and N 768-50304): fraction of the dense
# peak. H100 0.70, A100 0.80: ASSUMPTIONS bracketed by public measurements: FlashAttention-2 trains
# GPT-style models at 225 TFLOPS per A100, 72% of peak end to end (arXiv 2307.08691, section 4.2),
# so its GEMMs run above 72% there; on H100 the cuBLAS 12.0 blog (developer.nvidia.com/blog/new-cublas-
# 12-0-features-and-matrix-multiplication-performance-on-nvidia-hopper-gpus) shows BF16 GEMMs below
# the dense peak at LLM shapes. The single largest uncertainty of the step: dev/gpu_first_run.sh
# measures it.
GEMM_EFF = {"H100": 0.70, "A100": 0.80}
# Streaming kernels (128-bit, coalesced): 84% of the HBM peak, as measured on H100 SXM for coalesced
# loads with Nsight Compute (mikamirai.com/blog/gpu-memory-bandwidth: 2.8 of 3.35 TB/s); the same
# fraction is ASSUMED for A100.
BW_EFF = 0.84
# cuDNN SDPA, BF16, head size 64, TFLOP/s counted as FlashAttention counts them (causal = half the
# dense FLOPs; backward 2.5 x forward), read from the bar labels of the FlashAttention-3 paper
# (arXiv 2407.08608), figure 5 (forward, causal, head dim 64, H100 80GB SXM5) and figure 6 (backward,
# head dim 64; that figure has no causal mask: its value is scaled by cuDNN's causal / non-causal
# forward ratio at the same length, 288 / 373). Keyed by sequence length (nearest used).
CUDNN_ATT = {
    "H100": {512: (225.0, 266.0 * 225 / 335), 1024: (288.0, 348.0 * 288 / 373), 2048: (334.0, 395.0 * 334 / 395)},
    # No published cuDNN figure for A100 at these shapes: FlashAttention-2's lower bound on A100,
    # "50-73% of the theoretical maximum FLOPs/s" (arXiv 2307.08691, abstract), 50% of 312 (ASSUMPTION
    # that cuDNN on A100 is no better than FlashAttention-2 at short sequences).
    "A100": {1024: (156.0, 156.0)},
}

# llm.c's published throughput for GPT-2 124M (B 64, T 1024 per GPU, cuDNN attention, 8 GPUs, ZeRO 1).
LLMC = {
    "A100": (10e9 / (90 * 60) / 8, "llm.c discussion #481 (github.com/karpathy/llm.c/discussions/481): GPT-2 124M "
             "on 10B tokens in ~90 min on one 8X A100 80GB SXM node"),
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


def model_flops_per_token(size, T):
    L, C, _ = MODELS[size]
    return 6 * num_params(L, C) + 12 * L * C * T  # PaLM (Chowdhery et al. 2022), appendix B


# ---------------------------------------------------------------------------------------------
# Shared-memory wavefronts of one warp-wide access, from the byte address of each lane: the
# accesses are served in phases of 128 bytes (32 lanes of 4 bytes, 16 of 8, 8 of 16); within a
# phase a bank serves one 4-byte word per wavefront, lanes reading the same word share it.
def smem_wavefronts(byte_addrs, width):
    per_phase = max(1, SMEM_WAVEFRONT_B // max(width, 4))
    total = 0
    for p in range(0, len(byte_addrs), per_phase):
        banks = {}
        for a in byte_addrs[p:p + per_phase]:
            for w in range(a // 4, (a + max(width, 4) - 1) // 4 + 1):
                banks.setdefault(w % 32, set()).add(w)
        total += max(len(s) for s in banks.values())
    return total


ATT_LDB, ATT_LDF = 72, 68  # llmc/attention.cuh: bf16 tile row stride, fp32 scratch row stride


def att_access_costs():
    """Wavefronts per instruction of each shared-memory access kind of the attention kernels, from
    the addresses the code computes (lane = 2 r + half owns row r of a warp's 16; wmma fragments:
    lane = 4 g + t holds row g, column pair t). The wmma fragment loads are generic LD.E in the SASS
    (the pointers lost the shared address space) and are served by shared memory like LDS. MOVM (a
    warp-wide transpose of a row-major B fragment) is taken as one wavefront of the same pipe: an
    ASSUMPTION, no public figure gives its cost; without it the ceilings rise by 10-16%."""
    lanes = range(32)
    score_lds = [4 * ((l // 2) * ATT_LDF + 2 * 0 + l % 2) for l in lanes]          # sS[r*68 + 2i + half]
    p_sts16 = [2 * ((l // 2) * ATT_LDB + 2 * 0 + l % 2) for l in lanes]            # sP[r*72 + 2i + half]
    acc_sts64 = [4 * ((l // 4) * ATT_LDF + 2 * (l % 4)) for l in lanes]            # wmma store, ldm 68
    frag_ld32 = [2 * ((l // 4) * ATT_LDB + 2 * (l % 4)) for l in lanes]            # wmma load, ldm 72
    tile_sts128 = [2 * ((l // 8) * ATT_LDB + (l % 8) * 8) for l in lanes]          # att_load_tile
    bcast_lds = [4 * (2 * 0 + l % 2) for l in lanes]                               # sL[c], sD[c] (key pass)
    return {"LDS score": smem_wavefronts(score_lds, 4), "STS.U16 P/dS": smem_wavefronts(p_sts16, 2),
            "STS.64 accumulator": smem_wavefronts(acc_sts64, 8), "LD.E fragment": smem_wavefronts(frag_ld32, 4),
            "MOVM": 1, "STS.128 tile": smem_wavefronts(tile_sts128, 16), "LDS lse/delta": smem_wavefronts(bcast_lds, 4)}


# Per warp and visited tile of each kernel, from its sm_90 SASS (nvdisasm of build/gpu/keep_train_gpt2_
# BF16/train_gpt2.compute_90.cubin, `make gpu-nvcc-check`): instruction counts split into a part per
# 16-wide sub-tile j the warp multiplies ("per_j") and a part per tile ("fixed"). Read from the loop
# bodies: the Q K^T loop (16 LD.E, 8 HMMA, 4 STS.64 per j), the forward's P V loops (per j and
# output block: 8 LD.E, 4 MOVM, 2 HMMA; the P fragment reloaded for each of the 4 blocks), the
# backward's dS K / P^T dout / dS^T Q loops (per j: 20 LD.E, 16 MOVM, 8 HMMA), the softmax code
# (LDS of the fp32 scores, STS.U16 of P or dS), the tile loads (8 STS.128 per thread for two tiles).
# "instr" is the issued instructions: the outer loop body of the SASS, its inner loops at their trip
# counts (an upper estimate: the remainder paths of unrolled loops are counted once).
ATT_SASS = {
    "attention_forward_flash_kernel": {
        "regs": 128, "smem": 45056, "launch_bounds_min_blocks": 4,
        "per_j": {"HMMA": 16, "LD.E fragment": 16 + 4 * 8, "MOVM": 4 * 4, "STS.64 accumulator": 4},
        "fixed": {"LDS score": 3 * 32, "STS.U16 P/dS": 32, "STS.64 accumulator": 4 * 4, "STS.128 tile": 8},
        "instr_per_j": 45 + 83, "instr_fixed": 2269 - 4 * (45 + 83),
        "hbm": "reads Q once, K and V once per query block at or below the diagonal; writes out and lse"},
    "attention_backward_query_flash_kernel": {
        "regs": 160, "smem": 45056, "launch_bounds_min_blocks": 1,
        "per_j": {"HMMA": 24, "LD.E fragment": 16 + 16 + 20, "MOVM": 16, "STS.64 accumulator": 8},
        "fixed": {"LDS score": 2 * 32, "STS.U16 P/dS": 32, "STS.128 tile": 8},
        "instr_per_j": 41 + 41 + 53, "instr_fixed": 1762 - 4 * (41 + 41 + 53),
        "hbm": "reads Q, dout, out once, K and V once per query block; writes dq and delta"},
    "attention_backward_key_flash_kernel": {
        "regs": 168, "smem": 54784, "launch_bounds_min_blocks": 1,
        "per_j": {"HMMA": 32, "LD.E fragment": 16 + 16 + 20 + 20, "MOVM": 32, "STS.64 accumulator": 8},
        "fixed": {"LDS score": 2 * 32, "LDS lse/delta": 2 * 32, "STS.U16 P/dS": 2 * 32, "STS.128 tile": 8},
        "instr_per_j": 41 + 45 + 54.5 + 54.5, "instr_fixed": 2494 - 4 * (41 + 45 + 54.5 + 54.5),
        "hbm": "reads K and V once, Q, dout, lse, delta once per key block; writes dk and dv"},
}
ATT_WARPS, ATT_TILE = 4, 64


def blocks_per_sm(kernel, gpu):
    """Resident blocks of 4 warps: registers (allocated per warp in units of 256), shared memory
    (plus 1 KB the runtime reserves per block), and the 64-warp limit."""
    k = ATT_SASS[kernel] if kernel in ATT_SASS else FA2_SASS[kernel]
    regs_warp = -(-k["regs"] * 32 // 256) * 256
    by_regs = gpu["regs_sm"] // (regs_warp * ATT_WARPS)
    by_smem = gpu["smem_sm"] // (k["smem"] + 1024)
    return max(0, min(by_regs, by_smem, gpu["warps_sm"] // ATT_WARPS))


def att_tile_visits(kind, B, NH, T):
    """Walks the kernel's loops as the code does (llmc/attention.cuh): returns (warp-tile visits,
    sub-tiles multiplied). Forward and query pass: warp w of query block qb visits key blocks
    kb <= qb, multiplying 4 sub-tiles, w + 1 on the diagonal, none when its rows are all padding.
    Key pass: warp w of key block kb visits query blocks qb >= kb, sub-tiles jlo .. jhi - 1 with
    jlo = w on the diagonal, jhi = 4 or fewer in the last, partial block."""
    nb = -(-T // ATT_TILE)
    visits = subs = 0
    for qb_or_kb in range(nb):
        for w in range(ATT_WARPS):
            if kind == "key":
                kb = qb_or_kb
                for qb in range(kb, nb):
                    jlo = w if qb == kb else 0
                    jhi = min(4, (T - qb * ATT_TILE + 15) // 16)
                    visits += 1
                    subs += max(0, jhi - jlo)
            else:
                qb = qb_or_kb
                active = qb * ATT_TILE + w * 16 < T
                for kb in range(qb + 1):
                    visits += 1
                    subs += 0 if not active else (w + 1 if kb == qb else 4)
    return visits * B * NH, subs * B * NH


def att_executed_flops(B, NH, T):
    """Tensor-core FLOPs as executed: (forward, backward query pass, backward key pass)."""
    out = []
    for kind, kern in (("fwd", "attention_forward_flash_kernel"), ("query", "attention_backward_query_flash_kernel"),
                       ("key", "attention_backward_key_flash_kernel")):
        _, subs = att_tile_visits(kind, B, NH, T)
        out.append(subs * ATT_SASS[kern]["per_j"]["HMMA"] * HMMA_FLOP)
    return tuple(out)


def att_hbm_bytes(kind, B, NH, T, C):
    """HBM bytes of one launch (one layer): tiles re-read per block from L2 are counted once per
    visit as the loads are issued (an upper bound on HBM traffic; L2 holds a head's K and V)."""
    hs = C // NH
    nb = -(-T // ATT_TILE)
    tiles = B * NH * nb * (nb + 1) // 2  # (block, tile) pairs visited
    tile = ATT_TILE * hs * X
    if kind == "fwd":
        return B * NH * nb * tile + 2 * tiles * tile + X * B * T * C + F * B * NH * T
    if kind == "query":
        return 3 * B * NH * nb * tile + 2 * tiles * tile + X * B * T * C + F * B * NH * T
    return 2 * B * NH * nb * tile + 2 * tiles * tile + tiles * 2 * F * ATT_TILE + 2 * X * B * T * C


def our_attention_kernel(kind, kern, B, T, C, NH, gpu):
    """(seconds, details) of one launch of one of our attention kernels."""
    k = ATT_SASS[kern]
    cost = att_access_costs()
    visits, subs = att_tile_visits(kind, B, NH, T)
    wf_j = sum(n * cost[op] for op, n in k["per_j"].items() if op != "HMMA")
    wf_fixed = sum(n * cost[op] for op, n in k["fixed"].items())
    wavefronts = subs * wf_j + visits * wf_fixed
    hmma = subs * k["per_j"]["HMMA"]
    instr = subs * k["instr_per_j"] + visits * k["instr_fixed"]
    sm_clk = gpu["sms"] * gpu["clock"]
    t_smem = wavefronts / sm_clk
    t_issue = instr / (ISSUE_PER_CLK_SM * sm_clk)
    t_tc = hmma * HMMA_FLOP / (gpu["hmma_flop_clk_sm"] * sm_clk)
    t_hbm = att_hbm_bytes(kind, B, NH, T, C) / (gpu["bw"] * BW_EFF)
    # latency: a block waits LOAD_LATENCY_CLK at each tile; its busy time per tile is its warps'
    # wavefronts (the binding pipe); n resident blocks hide it when n x busy >= busy + latency
    n = blocks_per_sm(kern, gpu)
    busy = ATT_WARPS * (wf_j * 4 + wf_fixed)
    hide = min(1.0, n * busy / (busy + LOAD_LATENCY_CLK)) if n else 0.0
    pipes = {"tensor": t_tc, "shared memory": t_smem, "issue": t_issue, "HBM": t_hbm}
    bound = max(pipes, key=pipes.get)
    t = pipes[bound] / hide
    flops = hmma * HMMA_FLOP
    return t, {"bound": bound, "pipes": pipes, "blocks_per_sm": n, "latency_hidden": hide, "flops": flops,
               "wavefronts_per_hmma": wavefronts / hmma, "instr_per_hmma": instr / hmma,
               "ceiling_tflops": flops / t / 1e12}


# ---------------------------------------------------------------------------------------------
# The mma.sync kernels (llmc/attention_fa2.cuh, attention_fa2_backward.cuh): what -at ours runs in
# BF16 at head size 64 (every GPT-2 size; their head-size-32 and -128 instances are not modelled;
# --at wmma models the kernels above, which the trainer no longer runs; the FP32 build and other
# head sizes take the CUDA-core fallback, not modelled). Per warp
# and (block, tile) pair: static counts of the tile loop's body in the sm_90 SASS (the backward:
# its inner, query-tile loop; "per_kb": what its outer, key-tile loop adds per key tile), every
# branch counted as taken (an upper estimate: the forward's 4 Q-fragment LDSM run on its first
# tile only, the backward's 8 K/V-fragment LDSM on the first query tile, its dq running sum takes
# one of two store paths), never-executed "@!PT" instructions (nvcc's padding beside LDGSTS) not
# counted. LDSM = ldmatrix.x4 (.trans or not), LDGSTS = 16-byte cp.async, STS = 32-bit stores
# (the backward's dS^T tile, lse and delta), STS.128 = zero fill of padding rows, LDS = 32- and
# 64-bit loads (lse, delta). Recounted by --check-sass (the cubin of dev/cuda/check_attention_fa2_
# sass.sh or of train_gpt2.cu: the same code).
FA2_SASS = {
    "attention_forward_fa2_kernel": {
        "regs": 168, "smem": 40960,
        "loop": {"HMMA": 64, "LDSM": 36, "LDGSTS": 8, "STS": 0, "STS.128": 8, "LDS": 0, "instr": 652},
        "per_kb": None},
    "attention_backward_fa2_kernel": {
        "regs": 241, "smem": 58368,
        "loop": {"HMMA": 160, "LDSM": 92, "LDGSTS": 8, "STS": 18, "STS.128": 8, "LDS": 40, "instr": 1436},
        "per_kb": {"HMMA": 0, "LDSM": 0, "LDGSTS": 16, "STS": 0, "STS.128": 16, "LDS": 0, "instr": 690}},
}
FA2_OPS = ("HMMA", "LDSM", "LDGSTS", "STS", "STS.128", "LDS", "instr")
FA2_INSTANCE = "ILi64E"  # the kernels are templates on the head size: the GPT-2 instance, head size 64
# Shared-memory wavefronts of one warp instruction without conflicts: ldmatrix.x4 reads 4 matrices
# of 8 rows of 16 bytes (512 B), a 16-byte cp.async per lane writes 512 B, the zero fill 512 B; a
# 32-bit store of 32 distinct words, and the lse/delta loads (4 distinct words per warp), one.
# LDSM and STS are multiplied by the kernel's worst n-way from the emulator (FA2_BANKS).
FA2_WAVEFRONTS = {"LDSM": 4, "LDGSTS": 4, "STS": 1, "STS.128": 4, "LDS": 1}
# The emulator's bank conflicts (emucc --check: the "cuda_emu banks:" lines of build/gpu/
# attention_emu_check --fa2-quick, dev/tests/53_attention_fa2.sh): worst n-way over each kernel's
# ldmatrix and shared-store sites (37 sites over head sizes 32, 64 and 128, all 1-way; 4- or 8-way
# without the swizzle). --check-banks recounts them from such a file.
FA2_BANKS = {"attention_forward_fa2_kernel": 1.0, "attention_backward_fa2_kernel": 1.0}


def fa2_pairs(B, NH, T):
    """((block, tile) pairs, key tiles) of one launch: per (b, h), nb (nb + 1) / 2 pairs of 64-row
    tiles at or below the diagonal (the diagonal tile computed whole), nb = ceil(T / 64)."""
    nb = -(-T // ATT_TILE)
    return B * NH * nb * (nb + 1) // 2, B * NH * nb


def fa2_hbm_bytes(kind, B, NH, T, C, gpu):
    """HBM bytes of one launch: every input read once and every output written once; each re-read
    of a head's tiles is taken as an L2 hit (ASSUMPTION: a head's q, k, v and dout are 512 KB at T
    1024). The backward's dq running sums (fp32, 256 B per query row, read and written once per
    pair: an upper bound) miss L2 in the proportion by which the resident blocks' sums exceed it."""
    if kind == "fwd":
        return X * B * T * 3 * C + X * B * T * C + F * B * NH * T
    pairs, _ = fa2_pairs(B, NH, T)
    g = GPUS[gpu]
    resident = min(B * NH, blocks_per_sm("attention_backward_fa2_kernel", g) * g["sms"])
    miss = max(0.0, 1.0 - g["l2"] / (resident * T * ATT_TILE * F))
    # qkv, dout twice (delta, tiles), out, lse, delta written and read; dqkv written; dq sums
    return (X * B * T * (3 + 2 + 1 + 3) * C + 3 * F * B * NH * T
            + miss * pairs * 2 * ATT_TILE * ATT_TILE * F)


def fa2_kernel(kind, kern, B, T, C, NH, gpu_key):
    """(seconds, details) of one launch of a mma.sync kernel: the slowest of the tensor, shared-
    memory, issue and HBM pipes over every warp's counts (FA2_SASS), divided by the wave
    utilisation: the backward runs one block per (b, h), all alike, so the busiest SM runs
    ceil(B NH / SMs) of them (ASSUMPTION: one block alone drives an SM as fast as two). cp.async
    double buffering is taken to hide the tile loads (ASSUMPTION; two or more blocks per SM)."""
    g = GPUS[gpu_key]
    k = FA2_SASS[kern]
    pairs, kblocks = fa2_pairs(B, NH, T)
    per_kb = k["per_kb"] or {}
    n = {op: ATT_WARPS * (pairs * k["loop"][op] + kblocks * per_kb.get(op, 0)) for op in FA2_OPS}
    wavefronts = sum(n[op] * w * (FA2_BANKS[kern] if op in ("LDSM", "STS") else 1.0)
                     for op, w in FA2_WAVEFRONTS.items())
    sm_clk = g["sms"] * g["clock"]
    pipes = {"tensor": n["HMMA"] * HMMA_FLOP / (g["hmma_flop_clk_sm"] * sm_clk), "shared memory": wavefronts / sm_clk,
             "issue": n["instr"] / (ISSUE_PER_CLK_SM * sm_clk),
             "HBM": fa2_hbm_bytes(kind, B, NH, T, C, gpu_key) / (g["bw"] * BW_EFF)}
    blocks = B * NH if kind == "bwd" else kblocks
    util = 1.0 if kind == "fwd" else (blocks / g["sms"]) / -(-blocks // g["sms"])
    bound = max(pipes, key=pipes.get)
    t = pipes[bound] / util
    flops = n["HMMA"] * HMMA_FLOP
    return t, {"bound": bound, "pipes": pipes, "blocks_per_sm": blocks_per_sm(kern, g), "utilisation": util,
               "flops": flops, "wavefronts_per_hmma": wavefronts / n["HMMA"], "instr_per_hmma": n["instr"] / n["HMMA"],
               "ceiling_tflops": flops / t / 1e12}


# ---------------------------------------------------------------------------------------------
# ATT_SASS against the SASS itself (make test: gpu_model_sass_counts): the loop bodies of each
# kernel's nvdisasm listing, recounted. A kernel change that moves these counts fails the check
# until ATT_SASS is updated.
ATT_MATMULS = {  # per sub-tile j: (score-like matmuls: S or dP, product matmuls through MOVM)
    "attention_forward_flash_kernel": (1, 1), "attention_backward_query_flash_kernel": (2, 1),
    "attention_backward_key_flash_kernel": (2, 2)}


def sass_listing(text, kernel, skip_never=False):
    """The instructions [(opcode, operands)] of the first kernel whose .text section name contains
    `kernel` in an nvdisasm listing, and the loops among them: [(first, end)] index ranges, one per
    backward branch. skip_never: instructions predicated @!PT (never executed) left out."""
    import re
    lines = text.split("\n")
    start = next(i for i, l in enumerate(lines) if l.startswith(".text.") and kernel in l)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].strip().startswith(".section")), len(lines))
    ins, labels = [], {}
    op = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
    for l in lines[start:end]:
        m = re.match(r"^(\.L_x_\d+):", l.strip())
        if m:
            labels[m.group(1)] = len(ins)
            continue
        m = op.search(l)
        if m and not (skip_never and (m.group(1) or "").strip() == "@!PT"):
            ins.append((m.group(2), m.group(3)))
    loops = []
    for k, (o, args) in enumerate(ins):
        m = re.search(r"(\.L_x_\d+)", args)
        if o.startswith("BRA") and m and m.group(1) in labels and labels[m.group(1)] <= k:
            loops.append((labels[m.group(1)], k + 1))
    return ins, loops


def sass_loops(text, kernel):
    """[(body opcode counts, length)] of every loop (a backward branch) of the kernel in an
    nvdisasm listing, innermost first by length."""
    import collections
    ins, spans = sass_listing(text, kernel)
    loops = [(collections.Counter(x[0] for x in ins[a:b]), b - a) for a, b in spans]
    return sorted(loops, key=lambda x: x[1])


def sass_recount(text, kernel):
    """The ATT_SASS entries recounted from the SASS: per_j LD.E / MOVM / STS.64 / HMMA from the
    inner matmul loops, fixed LDS and STS.U16 from the outer tile loop, and the instructions per
    full tile (outer body + inner bodies at their extra trips: 4 for the per-j loops, 4 / j-unroll
    for the product loops)."""
    loops = sass_loops(text, kernel)
    outer = max((l for l in loops if l[0]["BAR.SYNC.DEFER_BLOCKING"]), key=lambda l: l[1])
    inner = [l for l in loops if l[0]["HMMA.16816.F32.BF16"] and l[1] < 200]
    ns, npv = ATT_MATMULS[kernel]
    scores = [l for l in inner if not l[0]["MOVM.16.MT88"]]
    prods = [l for l in inner if l[0]["MOVM.16.MT88"]]
    if not scores or not prods:
        raise ValueError("%s: no score or product loop found in the SASS" % kernel)

    def per_hmma(group, opc):
        return sum(l[0][opc] for l in group) / sum(l[0]["HMMA.16816.F32.BF16"] for l in group)
    got = {"per_j HMMA": 8 * (ns + npv),
           "per_j LD.E fragment": 8 * ns * per_hmma(scores, "LD.E") + 8 * npv * per_hmma(prods, "LD.E"),
           "per_j MOVM": 8 * npv * per_hmma(prods, "MOVM.16.MT88"),
           "per_j STS.64 accumulator": 8 * ns * per_hmma(scores, "STS.64"),
           "fixed LDS": outer[0]["LDS"], "fixed STS.U16": outer[0]["STS.U16"],
           "fixed STS.64 accumulator": outer[0]["STS.64"] - sum(l[0]["STS.64"] for l in scores + prods)}
    instr = outer[1]
    for c, n in scores:
        instr += 3 * n
    for c, n in prods:
        j_per_body = c["HMMA.16816.F32.BF16"] / 8 if kernel != "attention_forward_flash_kernel" else \
            c["HMMA.16816.F32.BF16"] / 2
        instr += (4 / j_per_body - 1) * n
    got["instructions per full tile"] = instr
    k = ATT_SASS[kernel]
    want = {"per_j HMMA": k["per_j"]["HMMA"], "per_j LD.E fragment": k["per_j"]["LD.E fragment"],
            "per_j MOVM": k["per_j"]["MOVM"], "per_j STS.64 accumulator": k["per_j"]["STS.64 accumulator"],
            "fixed LDS": k["fixed"].get("LDS score", 0) + k["fixed"].get("LDS lse/delta", 0),
            "fixed STS.U16": k["fixed"]["STS.U16 P/dS"],
            "fixed STS.64 accumulator": k["fixed"].get("STS.64 accumulator", 0),
            "instructions per full tile": 4 * k["instr_per_j"] + k["instr_fixed"]}
    return got, want


def fa2_op(opcode):
    """The FA2_SASS category of a SASS opcode (None: counted in "instr" only)."""
    if opcode.startswith("HMMA"):
        return "HMMA"
    for pre in ("LDSM", "LDGSTS"):
        if opcode.startswith(pre):
            return pre
    return {"STS": "STS", "STS.128": "STS.128", "LDS": "LDS", "LDS.64": "LDS"}.get(opcode)


def fa2_sass_recount(text, kernel):
    """FA2_SASS's counts recounted from an nvdisasm listing: the tile loop is the longest loop with
    HMMA and no inner loop with HMMA (the forward's only one, the backward's inner loop); the
    backward's per_kb is its outer loop (the longest with HMMA) less the inner. "@!PT" skipped."""
    import collections
    ins, loops = sass_listing(text, kernel + FA2_INSTANCE, skip_never=True)
    mm = [(a, b) for a, b in loops if any(fa2_op(o) == "HMMA" for o, _ in ins[a:b])]

    def count(a, b):
        c = collections.Counter(fa2_op(o) for o, _ in ins[a:b])
        return {o: (b - a if o == "instr" else c[o]) for o in FA2_OPS}
    inner = min(mm, key=lambda x: x[1] - x[0])
    outer = max(mm, key=lambda x: x[1] - x[0])
    got = {"loop": count(*inner)}
    if outer != inner:
        o, i = count(*outer), got["loop"]
        got["per_kb"] = {op: o[op] - i[op] for op in FA2_OPS}
    return got


def check_banks(path):
    """FA2_BANKS against the emulator's "cuda_emu banks:" lines in a file (stderr of an emucc --check
    run of the fa2 kernels): the worst n-way per kernel. 0 when each agrees, 1 otherwise."""
    import re
    worst = {}
    for line in open(path):
        m = re.search(r"cuda_emu banks: kernel (\S+) at .*, (\d+)-way worst", line)
        if m and m.group(1) in FA2_BANKS:
            worst[m.group(1)] = max(worst.get(m.group(1), 0), int(m.group(2)))
    bad = 0
    for kernel, want in FA2_BANKS.items():
        got = worst.get(kernel)
        ok = got == want
        bad += not ok
        print("%-4s %-40s worst n-way bank conflict: emulator %s  model %g" % ("ok" if ok else "FAIL", kernel, got, want))
    return 1 if bad else 0


def check_sass(cubin, ptxas_log=None):
    """Recounts ATT_SASS from the cubin (nvdisasm) and the registers from the ptxas -v log: 0 when
    every count agrees, 1 otherwise (one line per count)."""
    import os
    import re
    import subprocess
    # dev/gpu_kernels beside this file, or under the current directory (a copy of the model elsewhere)
    for d in (os.path.join(os.getcwd(), "dev", "gpu_kernels"),
              os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu_kernels")):
        sys.path.insert(0, d)
    import sass_report
    text = subprocess.run([sass_report.find_nvdisasm(None), "-c", cubin], capture_output=True, text=True,
                          check=True).stdout
    bad = 0
    for kernel in ATT_SASS:
        got, want = sass_recount(text, kernel)
        for key in want:
            ok = abs(got[key] - want[key]) <= 1e-9 * max(1, abs(want[key]))
            bad += not ok
            print("%-4s %-40s %-28s SASS %8.1f  model %8.1f" % ("ok" if ok else "FAIL", kernel, key, got[key],
                                                                  want[key]))
    for kernel, k in FA2_SASS.items():
        got = fa2_sass_recount(text, kernel)
        for part in ("loop", "per_kb"):
            for op in FA2_OPS:
                g, w = (got.get(part) or {}).get(op), (k[part] or {}).get(op)
                if g is None and w is None:
                    continue
                bad += g != w
                print("%-4s %-40s %-28s SASS %8s  model %8s" % ("ok" if g == w else "FAIL", kernel, part + " " + op, g, w))
    if ptxas_log:
        regs = {}
        name = None
        for line in open(ptxas_log):
            m = re.search(r"Compiling entry function '([^']+)' for 'sm_90'", line)
            name = m.group(1) if m else (None if "Compiling entry" in line else name)
            m = re.search(r"Used (\d+) registers", line)
            if m and name:
                regs[name] = int(m.group(1))
        for kernel, k in list(ATT_SASS.items()) + list(FA2_SASS.items()):
            got = [v for n, v in regs.items() if kernel + (FA2_INSTANCE if kernel in FA2_SASS else "") in n]
            ok = got == [k["regs"]]
            bad += not ok
            print("%-4s %-40s %-28s ptxas %s  model %d" % ("ok" if ok else "FAIL", kernel, "registers (sm_90)", got,
                                                             k["regs"]))
    return 1 if bad else 0


# ---------------------------------------------------------------------------------------------
class Kernel:
    """One kernel kind of the step: launches, FLOPs, bytes, and how its time is modelled ("gemm",
    "stream", "ours" (mma.sync) and "wmma" with a fixed time from their SASS models, "cudnn" with a
    published rate)."""

    def __init__(self, name, launches=1, flops=0.0, bytes_=0.0, how="stream", fixed_s=0.0, syncs=0, phase="",
                 detail=None):
        self.name, self.launches, self.flops, self.bytes, self.how = name, launches, flops, bytes_, how
        self.fixed_s, self.syncs, self.phase, self.detail = fixed_s, syncs, phase, detail

    def time(self, gpu):
        g = GPUS[gpu]
        if self.how == "gemm":
            body = max(self.flops / (g["tc"] * GEMM_EFF[gpu]), self.bytes / (g["bw"] * BW_EFF))
        elif self.how in ("ours", "wmma", "cudnn"):
            body = self.fixed_s
        else:
            body = self.bytes / (g["bw"] * BW_EFF)
        return body + self.launches * T_LAUNCH + self.syncs * T_SYNC

    def bound(self, gpu):
        if self.how in ("ours", "wmma"):
            return self.detail["bound"]
        if self.how == "cudnn":
            return "published cuDNN rate"
        if self.how == "gemm":
            g = GPUS[gpu]
            return "tensor" if self.flops / (g["tc"] * GEMM_EFF[gpu]) >= self.bytes / (g["bw"] * BW_EFF) else "HBM"
        return "HBM"


def matmul(name, BT, K, N, bias=False, aux_write=False, aux_read=False, phase=""):
    """out (BT, N) = inp (BT, K) w (N, K)^T on cuBLASLt: reads inp and w, writes out (+ bias, aux)."""
    b = X * (BT * K + K * N + BT * N) + (X * N if bias else 0) + (X * BT * N if aux_write or aux_read else 0)
    return Kernel(name, 1, flops=2.0 * BT * K * N, bytes_=b, how="gemm", phase=phase)


def matmul_w(name, BT, K, N, phase=""):
    """dweight (N, K) += dout (BT, N)^T inp (BT, K): reads both, read-modify-writes dweight."""
    return Kernel(name, 1, flops=2.0 * BT * K * N, bytes_=X * (BT * K + BT * N + 2 * K * N), how="gemm", phase=phase)


def cudnn_rates(gpu, T):
    table = CUDNN_ATT[gpu]
    return table[min(table, key=lambda t: abs(t - T))]


def attention_kernels(B, T, C, NH, gpu, at):
    """(forward kernels, backward kernels) of one layer."""
    causal = 2.0 * B * T * T * C  # FlashAttention's count: forward 4 B NH T^2 hs / 2
    if at == "cudnn":
        fwd_r, bwd_r = cudnn_rates(gpu, T)
        return ([Kernel("attention forward (cuDNN SDPA)", 1, flops=causal, how="cudnn", fixed_s=causal / (fwd_r * 1e12),
                        phase="fwd")],
                [Kernel("attention backward (cuDNN SDPA)", 1, flops=2.5 * causal, how="cudnn",
                        fixed_s=2.5 * causal / (bwd_r * 1e12), phase="bwd")])
    g = GPUS[gpu]
    out = []
    if at == "ours":  # the mma.sync kernels (BF16, head size 64)
        for kind, kern, nm in (("fwd", "attention_forward_fa2_kernel", "attention forward (ours, mma.sync)"),
                               ("bwd", "attention_backward_fa2_kernel", "attention backward (ours, mma.sync)")):
            t, d = fa2_kernel(kind, kern, B, T, C, NH, gpu)
            out.append(Kernel(nm, 1, flops=d["flops"], bytes_=fa2_hbm_bytes(kind, B, NH, T, C, gpu), how="ours", fixed_s=t,
                              phase=kind, detail=d))
        return out[:1], out[1:]
    for kind, kern, nm in (("fwd", "attention_forward_flash_kernel", "attention forward (wmma, flash)"),
                           ("query", "attention_backward_query_flash_kernel", "attention backward query pass (wmma)"),
                           ("key", "attention_backward_key_flash_kernel", "attention backward key pass (wmma)")):
        t, d = our_attention_kernel(kind, kern, B, T, C, NH, g)
        out.append(Kernel(nm, 1, flops=d["flops"], bytes_=att_hbm_bytes(kind, B, NH, T, C), how="wmma", fixed_s=t,
                          phase="fwd" if kind == "fwd" else "bwd", detail=d))
    return out[:1], out[1:]


def step_kernels(size, B, T, gpu="H100", at="ours", ge=1, accum=1):
    """The kernels of one optimizer step (accum micro-steps), in launch order, one Kernel per kind
    (launches counted in it)."""
    L, C, NH = MODELS[size]
    BT, N = B * T, num_params(L, C)
    att_f, att_b = attention_kernels(B, T, C, NH, gpu, at)
    fwd = [Kernel("encoder forward", 1, bytes_=I * BT + X * BT * C + X * T * C + X * BT * C, phase="fwd"),
           Kernel("layernorm forward (ln1 of layer 0)", 1, bytes_=2 * X * BT * C + 2 * F * BT, phase="fwd")]
    lay = [matmul("matmul qkv (+bias)", BT, C, 3 * C, bias=True, phase="fwd")] + att_f
    lay.append(matmul("matmul attn proj (+bias)", BT, C, C, bias=True, phase="fwd"))
    lay.append(Kernel("residual + layernorm forward (ln2)", 1, bytes_=4 * X * BT * C + 2 * F * BT, phase="fwd"))
    if ge:
        lay.append(matmul("matmul fc (+bias, GELU epilogue, pre saved)", BT, C, 4 * C, bias=True, aux_write=True,
                          phase="fwd"))
    else:
        lay.append(matmul("matmul fc (+bias)", BT, C, 4 * C, bias=True, phase="fwd"))
        lay.append(Kernel("gelu forward (ours, -ge 0)", 1, bytes_=2 * X * BT * 4 * C, phase="fwd"))
    lay.append(matmul("matmul fc proj (+bias)", BT, 4 * C, C, bias=True, phase="fwd"))
    lay.append(Kernel("residual + layernorm forward (next ln1 / lnf)", 1, bytes_=4 * X * BT * C + 2 * F * BT,
                      phase="fwd"))
    fwd += scale_layer(lay, L)
    fwd.append(matmul("matmul logits (wte head)", BT, C, VP, phase="fwd"))
    # one HBM read of the logits (the row's second read hits L2: a 100 KB row per block) and one write
    fwd.append(Kernel("fused classifier (softmax, loss, dlogits)", 1, bytes_=2 * X * BT * VP + 2 * I * BT, phase="fwd"))
    fwd.append(Kernel("loss accumulate", 1, bytes_=F * BT, phase="fwd"))
    bwd = [matmul("matmul logits backward dinp", BT, VP, C, phase="bwd"),
           matmul_w("matmul logits backward dwte", BT, C, VP, phase="bwd"),
           Kernel("memset dresidual", 1, bytes_=X * BT * C, phase="bwd"),
           ln_backward("layernorm backward (lnf)", BT, C)]
    lb = [Kernel("gelu forward (recompute, -r 1)", 1, bytes_=2 * X * BT * 4 * C, phase="bwd")]
    if ge:
        lb.append(matmul("matmul fc proj backward dinp (dGELU epilogue)", BT, C, 4 * C, aux_read=True, phase="bwd"))
    else:
        lb.append(matmul("matmul fc proj backward dinp", BT, C, 4 * C, phase="bwd"))
        lb.append(Kernel("gelu backward (ours, -ge 0)", 1, bytes_=3 * X * BT * 4 * C, phase="bwd"))
    lb.append(matmul_w("matmul fc proj backward dweight", BT, 4 * C, C, phase="bwd"))
    lb.append(bias_backward("bias backward (fc proj)", BT, C))
    lb.append(matmul("matmul fc backward dinp", BT, 4 * C, C, phase="bwd"))
    lb.append(matmul_w("matmul fc backward dweight", BT, C, 4 * C, phase="bwd"))
    lb.append(bias_backward("bias backward (fc)", BT, 4 * C))
    lb.append(ln_backward("layernorm backward (ln2)", BT, C))
    lb.append(matmul("matmul attn proj backward dinp", BT, C, C, phase="bwd"))
    lb.append(matmul_w("matmul attn proj backward dweight", BT, C, C, phase="bwd"))
    lb.append(bias_backward("bias backward (attn proj)", BT, C))
    lb += att_b
    lb.append(matmul("matmul qkv backward dinp", BT, 3 * C, C, phase="bwd"))
    lb.append(matmul_w("matmul qkv backward dweight", BT, C, 3 * C, phase="bwd"))
    lb.append(bias_backward("bias backward (qkv)", BT, 3 * C))
    lb.append(ln_backward("layernorm backward (ln1)", BT, C))
    bwd += scale_layer(lb, L)
    rows = min(BT, V)  # dwte rows of the batch's tokens (read-modify-write) and dwpe
    bwd.append(Kernel("encoder backward (wte, wpe)", 2, bytes_=2 * X * BT * C + 2 * X * rows * C + 2 * X * T * C
                      + 3 * I * BT, phase="bwd"))
    micro = fwd + bwd
    micro.append(Kernel("wait per micro-step", 0, syncs=1, phase="bwd"))
    ks = []
    for k in micro:
        for attr in ("launches", "flops", "bytes", "fixed_s", "syncs"):
            setattr(k, attr, getattr(k, attr) * accum)
        ks.append(k)
    ks.append(Kernel("zero grads (memset)", 1, bytes_=X * N, phase="upd"))
    ks.append(Kernel("global grad norm", 1, bytes_=X * N, syncs=1, phase="upd"))
    # grad, master r/w, m r/w, v r/w, param write
    ks.append(Kernel("AdamW (multi-tensor)", 1, bytes_=N * (X + 2 * F + 2 * F + 2 * F + X), phase="upd"))
    ks.append(Kernel("loss to host", 0, syncs=1, phase="upd"))
    return ks


def scale_layer(kernels, L):
    for k in kernels:
        for attr in ("launches", "flops", "bytes", "fixed_s"):
            setattr(k, attr, getattr(k, attr) * L)
        k.name += " x%d layers" % L
    return kernels


def ln_backward(name, BT, C):
    """dinp (read-modify-write), dout, inp, mean/rstd; dweight and dbias partials per 256-row chunk."""
    chunks = -(-BT // 256)
    return Kernel(name, 1, bytes_=4 * X * BT * C + 2 * F * BT + 2 * 2 * F * chunks * C, phase="bwd")


def bias_backward(name, BT, OC):
    chunks = -(-BT // 256)
    return Kernel(name, 1, bytes_=X * BT * OC + 2 * F * chunks * OC + 2 * X * OC, phase="bwd")


def summarize_step(size, B, T, gpu="H100", at="ours", ge=1, accum=1):
    ks = step_kernels(size, B, T, gpu, at, ge, accum)
    t = sum(k.time(gpu) for k in ks)
    tokens = B * T * accum
    return {"step_s": t, "tokens_per_s": tokens / t,
            "mfu": model_flops_per_token(size, T) * tokens / t / GPUS[gpu]["tc"],
            "launches": sum(k.launches for k in ks), "syncs": sum(k.syncs for k in ks),
            "bytes": sum(k.bytes for k in ks), "flops": sum(k.flops for k in ks),
            "bound": max(ks, key=lambda k: k.time(gpu)).name}, ks


def summarize(size, B, T, gpu_key, after=True, accum=1):
    """The interface of the previous model (dev/bench/diloco_scale.py): {"derated": (s, tok/s, MFU)}
    for the step with our attention; `after` is ignored (the "before" step is no longer modelled)."""
    s, ks = summarize_step(size, B, T, gpu_key, "ours", 1, accum)
    return {"derated": (s["step_s"], s["tokens_per_s"], s["mfu"]), "launches": s["launches"]}, ks


# ---------------------------------------------------------------------------------------------
def group_of(name):
    n = name.split(" x")[0]
    for key in ("matmul", "attention", "layernorm", "AdamW", "classifier", "gelu", "bias backward", "encoder"):
        if key in n:
            return key
    return "other"


def per_kernel_table(size, B, T, gpu, at, ge, accum):
    s, ks = summarize_step(size, B, T, gpu, at, ge, accum)
    print("MODELLED (not measured): GPT-2 %s, B %d, T %d, -at %s -ge %d, %d micro-step(s), on %s" %
          (size, B, T, at, ge, accum, GPUS[gpu]["name"]))
    print("  %s; GEMM efficiency %.2f, streaming %.2f of HBM (sources in the file)" %
          (GPUS[gpu]["src"], GEMM_EFF[gpu], BW_EFF))
    print("%-58s %8s %9s %9s %9s  %s" % ("kernel", "launches", "GFLOP", "MB", "ms", "bound by"))
    for k in ks:
        print("%-58s %8d %9.1f %9.1f %9.3f  %s" % (k.name[:58], k.launches, k.flops / 1e9, k.bytes / 1e6,
                                                   k.time(gpu) * 1e3, k.bound(gpu)))
    print("  step %.2f ms, %.0f tokens/s, MFU %.1f%% (6N + 12LCT over the dense BF16 peak); launches %d, "
          "host syncs %d; longest kernel: %s" % (s["step_s"] * 1e3, s["tokens_per_s"], 100 * s["mfu"], s["launches"],
                                                s["syncs"], s["bound"]))
    if at in ("ours", "wmma"):
        L, C, NH = MODELS[size]
        print("\n  our attention kernels, one layer (from the SASS, %s):" % ("FA2_SASS" if at == "ours" else "ATT_SASS"))
        for k in ks:
            if k.how == at:
                d = k.detail
                print("  %-44s %6.3f ms/layer  ceiling %5.0f TFLOP/s executed  bound: %s; %.1f wavefronts and %.1f "
                      "instructions per HMMA; %d blocks/SM" % (k.name.split(" x")[0], k.time(gpu) * 1e3 / L,
                                                              d["ceiling_tflops"], d["bound"], d["wavefronts_per_hmma"],
                                                              d["instr_per_hmma"], d["blocks_per_sm"]))


def summary_rows():
    rows = []
    for gpu in ("H100", "A100"):
        for size, B in (("124M", 64), ("1558M", 16)):
            for at in ("ours", "wmma", "cudnn"):
                s, _ = summarize_step(size, B, 1024, gpu, at)
                rows.append((gpu, size, B, at, s))
    return rows


def print_summary():
    print("MODELLED (not measured), T 1024, -ge 1, one GPU:\n")
    print("| GPU | model | B | -at | step ms | tokens/s | MFU | longest kernel kind |")
    print("|---|---|---|---|---|---|---|---|")
    for gpu, size, B, at, s in summary_rows():
        print("| %s | %s | %d | %s | %.1f | %.0f | %.1f%% | %s |" % (gpu, size, B, at, s["step_s"] * 1e3,
                                                                  s["tokens_per_s"], 100 * s["mfu"],
                                                                  s["bound"].split(" x")[0]))


def groups(ks, gpu):
    out = {}
    for k in ks:
        out[group_of(k.name)] = out.get(group_of(k.name), 0.0) + k.time(gpu)
    return out


def print_llmc():
    print("MODELLED with our kernels and cuDNN attention (-at cudnn), 124M, B 64, T 1024, one GPU, against")
    print("llm.c's published per-GPU throughput (8-GPU runs, ZeRO 1, cuDNN attention):\n")
    for gpu in ("H100", "A100"):
        s, ks = summarize_step("124M", 64, 1024, gpu, "cudnn")
        llmc, src = LLMC[gpu]
        diff = s["tokens_per_s"] / llmc - 1
        print("%s: modelled %.0f tokens/s (%.1f ms), llm.c %.0f tokens/s (%.1f ms): model %+.0f%%  [%s]" %
              (gpu, s["tokens_per_s"], s["step_s"] * 1e3, llmc, 64 * 1024 / llmc * 1e3, 100 * diff, src))
        gap = 64 * 1024 / llmc - s["step_s"]
        g = groups(ks, gpu)
        print("   modelled ms by kind: " + ", ".join("%s %.1f" % (k, v * 1e3) for k, v in sorted(g.items(),
                                                                                           key=lambda x: -x[1])))
        gemm_flops = sum(k.flops for k in ks if k.how == "gemm")
        need = gemm_flops / (GPUS[gpu]["tc"] * max(1e-9, g["matmul"] + gap)) if g["matmul"] + gap > 0 else 0
        print("   gap %.1f ms; if the matmuls alone carried it, cuBLASLt would run at %.0f%% of peak (model: %.0f%%)" %
              (gap * 1e3, 100 * need, 100 * GEMM_EFF[gpu]))


def model_json(B_list=(8, 16, 32, 64), T=1024):
    """Figures dev/gpu_first_run.sh compares its measurements with, 124M: dev/cuda/attention.cu's
    timing shape (B 8, NH 12, T 1024; forward and backward of the fa2 (mma.sync) and flash (wmma)
    versions) and the step at each B with both attention paths."""
    out = {"note": "MODELLED by dev/bench/gpu_model.py, not measured", "T": T, "gpus": {}}
    L, C, NH = MODELS["124M"]
    for gpu in GPUS:
        g = {"attention_ms": {}, "step_ms": {}}
        for at, name in (("ours", "fa2"), ("wmma", "flash")):
            fk, bk = attention_kernels(8, T, C, NH, gpu, at)
            g["attention_ms"][name + " forward"] = fk[0].fixed_s * 1e3
            g["attention_ms"][name + " backward"] = sum(k.fixed_s for k in bk) * 1e3
        for at in ("ours", "cudnn"):
            for B in B_list:
                s, _ = summarize_step("124M", B, T, gpu, at)
                g["step_ms"]["-at %s B %d" % (at, B)] = s["step_s"] * 1e3
        out["gpus"][gpu] = g
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="124M", choices=sorted(MODELS))
    p.add_argument("--B", type=int, default=64)
    p.add_argument("--T", type=int, default=1024)
    p.add_argument("--gpu", default="H100", choices=sorted(GPUS))
    p.add_argument("--at", default="ours", choices=("ours", "wmma", "cudnn"))
    p.add_argument("--ge", type=int, default=1, choices=(0, 1))
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--summary", action="store_true")
    p.add_argument("--llmc", action="store_true")
    p.add_argument("--json", action="store_true")
    p.add_argument("--check-banks", metavar="FILE", help="FA2_BANKS against the emulator's 'cuda_emu banks:' lines")
    p.add_argument("--check-sass", nargs="+", metavar=("CUBIN", "PTXAS_LOG"),
                   help="recount ATT_SASS from the sm_90 cubin (and the registers from the ptxas -v log)")
    a = p.parse_args()
    if a.check_sass:
        return check_sass(*a.check_sass[:2])
    if a.check_banks:
        return check_banks(a.check_banks)
    if a.B < 1 or a.T < 1 or a.accum < 1:
        sys.exit("gpu_model.py: error: --B, --T and --accum must be positive")
    if a.json:
        print(json.dumps(model_json(), indent=1, sort_keys=True))
    elif a.summary:
        print_summary()
    elif a.llmc:
        print_llmc()
    else:
        per_kernel_table(a.model, a.B, a.T, a.gpu, a.at, a.ge, a.accum)
    return 0


if __name__ == "__main__":
    sys.exit(main())
