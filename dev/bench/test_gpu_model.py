#!/usr/bin/python3
"""Checks dev/bench/gpu_model.py's arithmetic against closed forms written out here by hand, and
its modelled target (124M, B 64, T 1024, H100: MFU >= 40% after issue 12). Exits 1 on a mismatch."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_model as gm  # noqa: E402

failures = []


def expect(what, got, want, rel=1e-12):
    ok = abs(got - want) <= rel * max(abs(want), 1.0)
    print("%-4s %-64s got %.6g want %.6g" % ("ok" if ok else "FAIL", what, got, want))
    if not ok:
        failures.append(what)


for size, (L, C, NH) in gm.MODELS.items():
    for B, T in ((64, 1024), (4, 64), (16, 1024)):
        for after in (False, True):
            ks = gm.step_kernels(size, B, T, after)
            tag = "%s B%d T%d %s" % (size, B, T, "after" if after else "before")
            tokens = B * T
            # weight matmuls: forward 2 N_w per token, backward 4 N_w (dinp and dweight)
            n_w = L * 12 * C * C + gm.VP * C
            expect(tag + ": matmul FLOPs = 6 N_w tokens", sum(k.tc for k in ks if k.name.startswith("matmul")),
                   6 * n_w * tokens)
            # parameter count of GPT-2 (124M: 124,475,904 with the padded vocabulary)
            if size == "124M":
                expect("124M parameters", gm.num_params(L, C), 124475904)
            # AdamW with master weights: 2 (grad) + 8 (master r/w) + 8 (m) + 8 (v) + 2 (param) bytes each
            adam = [k for k in ks if k.name.startswith("AdamW")][0]
            expect(tag + ": AdamW bytes = 28 N", adam.bytes, 28 * gm.num_params(L, C))
            expect(tag + ": AdamW launches", adam.launches, 1 if after else 16)
            # the first LayerNorm: reads and writes (B T C) bf16, writes mean and rstd fp32
            ln = [k for k in ks if k.name.startswith("layernorm forward")][0]
            expect(tag + ": layernorm forward bytes", ln.bytes, 4 * B * T * C + 8 * B * T)
            # launches per step, counted by hand from train_gpt2.cu: before 34 L + 33, after 24 L + 14
            expect(tag + ": launches", sum(k.launches for k in ks), 24 * L + 14 if after else 34 * L + 33)
            att_tc = sum(k.tc for k in ks if k.name.startswith("attention"))
            att_fp32 = sum(k.fp32 for k in ks if k.name.startswith("attention"))
            if after:
                # causal attention on tensor cores: forward QK^T and PV (2 B T^2 C per layer), backward
                # 4 more and QK^T recomputed (3): 7 B T^2 C per layer
                expect(tag + ": flash attention tensor-core FLOPs", att_tc, 7 * B * T * T * C * L)
            else:
                expect(tag + ": scalar attention tensor-core FLOPs", att_tc, 0)
                # q.k twice + P.V forward, 4 products backward, each B T^2 C; plus the elementwise work
                expect(tag + ": scalar attention fp32 FLOPs", att_fp32,
                       (10 * B * T * T * C + 9 * B * NH * (T * T // 2)) * L)

# one kernel's time by hand: the 124M logits matmul on an H100 at the roofline is compute bound
B, T, C = 64, 1024, 768
k = gm.matmul("x", B * T, C, gm.VP)
expect("logits matmul roofline time on H100 (s)", k.time(gm.GPUS["H100"], False),
       2.0 * B * T * C * gm.VP / 989.4e12 + 5e-6)
# a memory-bound kernel: time = bytes / bandwidth + launch
k = gm.Kernel("y", 1, bytes_=1e9)
expect("1 GB streaming kernel on A100, derated (s)", k.time(gm.GPUS["A100"], True), 1e9 / (2.039e12 * 0.85) + 5e-6)
# MFU: PaLM's 6 N + 12 L C T per token
expect("124M model FLOPs per token at T 1024", gm.model_flops_per_token("124M", 1024),
       6 * 124475904 + 12 * 12 * 768 * 1024)

s, _ = gm.summarize("124M", 64, 1024, "H100", True)
mfu = s["derated"][2]
print("%-4s modelled MFU after, 124M B64 T1024 H100 (derated): %.1f%% (target >= 40%%)" %
      ("ok" if mfu >= 0.40 else "FAIL", 100 * mfu))
if mfu < 0.40:
    failures.append("MFU target")
b, _ = gm.summarize("124M", 64, 1024, "H100", False)
print("     before: %.1f%%, speed-up %.2fx (modelled)" % (100 * b["derated"][2], b["derated"][0] / s["derated"][0]))
if failures:
    print("FAILED: %d checks" % len(failures))
    sys.exit(1)
print("all gpu_model checks passed")
