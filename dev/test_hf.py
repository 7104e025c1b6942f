#!/usr/bin/env python3
"""Test of dev/hf.py (run by dev/tests/60_ecosystem.sh):

    /usr/bin/python3 dev/test_hf.py WORK_DIR C_FORWARD_BINARY

1. A random small model (every tensor random, biases and LayerNorms too; V 300, padded 384) is
   exported; transformers.GPT2LMHeadModel loads it and its logits equal train_gpt2.py's forward
   and the C forward (the CPU trainer's, via C_FORWARD_BINARY) within 1e-4.
2. Importing the export gives back the model file byte for byte.
3. The bf16 (v5) file of the same model exports as bfloat16, loads, gives the forward of the
   bf16-rounded weights within 1e-4, and imports back (--bf16) byte for byte.
4. A model made and saved by transformers itself (vocab 50257, safetensors and pytorch_model.bin)
   imports, and train_gpt2.py's forward on the import equals transformers' logits within 1e-4.
5. Bad inputs give one "error:" line naming the file.
"""
import contextlib
import io
import os
import subprocess
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "dev"))
import train_gpt2 as ref  # noqa: E402
import hf as hf_tool  # noqa: E402  (dev/hf.py, called in-process after the first command-line runs)

TOL = 1e-4
HF = [sys.executable, os.path.join(ROOT, "dev", "hf.py")]
failures = []


def report(what, err, tol=TOL):
    ok = err <= tol
    print(f"{'ok  ' if ok else 'FAIL'} {what}: max abs error {err:.3g} (tolerance {tol:g})")
    if not ok:
        failures.append(what)


def expect(cond, what):
    print(f"{'ok  ' if cond else 'FAIL'} {what}")
    if not cond:
        failures.append(what)


def run(*args):
    r = subprocess.run(list(args), capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"command failed: {' '.join(args)}\n{r.stdout}{r.stderr}")
    return r.stdout


def hf_cli(*args):
    """dev/hf.py's main() in this process (saves a torch start-up per call): (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            hf_tool.main(list(args))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def hf_ok(*args):
    code, out, err = hf_cli(*args)
    if code != 0:
        sys.exit(f"dev/hf.py {' '.join(args)} failed: {out}{err}")
    return out


def random_model(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    P = {}
    for name, shape in ref.param_shapes(cfg).items():
        t = torch.randn(shape, generator=g) * 0.1
        if name in ("ln1w", "ln2w", "lnfw"):
            t = 1.0 + t
        P[name] = t
    P["wte"][cfg["V"]:] = 0.0
    return P


def hf_logits(hf_dir, idx):
    from transformers import GPT2LMHeadModel
    m = GPT2LMHeadModel.from_pretrained(hf_dir, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        return m(idx).logits, m


def c_logits(binary, model, idx, work):
    B, T = idx.shape
    tok = os.path.join(work, "tokens.i32")
    out = os.path.join(work, "c_logits.f32")
    idx.numpy().astype("<i4").tofile(tok)
    run(binary, model, tok, str(B), str(T), out)
    return torch.from_numpy(np.fromfile(out, dtype="<f4")).reshape(B, T, -1)


def bad_input(what, args, name):
    code, _, err = hf_cli(*args)
    lines = err.strip().splitlines()
    ok = code != 0 and len(lines) == 1 and lines[0].startswith("error:") and name in lines[0]
    expect(ok, f"rejects {what}: {lines[-1] if lines else '(no message)'}")


def main():
    work, c_forward = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    torch.manual_seed(0)
    cfg = dict(T_max=32, V=300, L=2, NH=4, C=64, Vp=ref.padded_vocab(300))
    P = random_model(cfg, 1)
    m32, m16 = os.path.join(work, "m.bin"), os.path.join(work, "m16.bin")
    ref.write_model(m32, P, cfg)
    ref.write_model(m16, P, cfg, bf16=True)
    idx = torch.randint(0, cfg["V"], (3, 24))

    # 1. fp32 export (the command line, as a user runs it): transformers vs PyTorch reference vs C
    d32 = os.path.join(work, "hf32")
    print(run(*HF, "export", m32, d32).strip())
    hf, model = hf_logits(d32, idx)
    expect(model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(), "lm_head tied to wte")
    with torch.no_grad():
        pt = ref.forward(ref.load_model(m32)[0], cfg, idx)
    c = c_logits(c_forward, m32, idx, work)
    expect(hf.shape == pt.shape == c.shape, f"logits shapes {tuple(hf.shape)} {tuple(pt.shape)} {tuple(c.shape)}")
    report("fp32 export: transformers vs train_gpt2.py logits", (hf - pt).abs().max().item())
    report("fp32 export: transformers vs C forward logits", (hf - c).abs().max().item())

    # 2. import of the export: the same bytes
    back = os.path.join(work, "back.bin")
    print(run(*HF, "import", d32, back).strip())
    expect(open(back, "rb").read() == open(m32, "rb").read(), "import(export(m.bin)) == m.bin byte for byte")

    # 3. bf16 (v5)
    d16 = os.path.join(work, "hf16")
    print(hf_ok("export", m16, d16).strip())
    from safetensors import safe_open
    with safe_open(os.path.join(d16, "model.safetensors"), "pt") as f:
        dtypes = {f.get_tensor(k).dtype for k in f.keys()}
    expect(dtypes == {torch.bfloat16}, f"bf16 export stores bfloat16 tensors ({dtypes})")
    hf16, _ = hf_logits(d16, idx)
    with torch.no_grad():
        pt16 = ref.forward(ref.load_model(m16)[0], cfg, idx)
    report("bf16 export: transformers vs train_gpt2.py logits (bf16 weights)", (hf16 - pt16).abs().max().item())
    report("bf16 export: transformers vs C forward logits (bf16 weights)",
           (hf16 - c_logits(c_forward, m16, idx, work)).abs().max().item())
    back16 = os.path.join(work, "back16.bin")
    hf_ok("import", d16, back16, "--bf16")
    expect(open(back16, "rb").read() == open(m16, "rb").read(), "import --bf16 of the bf16 export == m16.bin")

    # 4. a model saved by transformers itself, GPT-2's real vocabulary size
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(5)
    own = GPT2LMHeadModel(GPT2Config(vocab_size=50257, n_positions=48, n_embd=32, n_layer=2, n_head=2)).eval()
    with torch.no_grad():
        for p in own.parameters():
            p.add_(torch.randn_like(p) * 0.05)   # biases and LayerNorms away from their init
    idx2 = torch.randint(0, 50257, (2, 40))
    with torch.no_grad():
        want = own(idx2).logits
    for safe in (True, False):
        d = os.path.join(work, "own_st" if safe else "own_pt")
        own.save_pretrained(d, safe_serialization=safe)
        out = os.path.join(work, "own.bin")
        print(hf_ok("import", d, out).strip())
        Q, qcfg = ref.load_model(out)
        expect(qcfg["Vp"] == 50304 and Q["wte"][50257:].abs().max().item() == 0.0, "vocab padded to 50304 with zeros")
        with torch.no_grad():
            got = ref.forward(Q, qcfg, idx2)
        report(f"import of transformers' own save ({'safetensors' if safe else 'pytorch_model.bin'}): "
               "train_gpt2.py vs transformers logits", (got - want).abs().max().item())

    # 5. bad inputs
    short = os.path.join(work, "short.bin")
    open(short, "wb").write(open(m32, "rb").read()[:-8])
    bad_input("a truncated model", ["export", short, os.path.join(work, "x")], short)
    bad_input("a missing model", ["export", os.path.join(work, "nope.bin"), os.path.join(work, "x")], "nope.bin")
    bad_input("a dir without a model", ["import", work, os.path.join(work, "y.bin")], work)
    expect(not os.path.exists(os.path.join(work, "y.bin")), "no output after a failed import")

    print(f"{len(failures)} failures" if failures else "all hf checks passed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
