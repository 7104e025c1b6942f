#!/usr/bin/env python3
"""Hugging Face interop for GPT-2 models in llm.c's model format.

    /usr/bin/python3 dev/hf.py export MODEL.bin OUT_DIR [--dtype float32|bfloat16]
    /usr/bin/python3 dev/hf.py import HF_DIR MODEL.bin [--bf16]

export writes OUT_DIR/config.json and OUT_DIR/model.safetensors, which
transformers.GPT2LMHeadModel.from_pretrained(OUT_DIR) loads. A fp32 (v3) model exports as
float32, a bf16 (v5) one as bfloat16 (the same bits) unless --dtype says otherwise. The padded
vocabulary rows are dropped, and the output head is tied to wte (no lm_head.weight).

import reads a local Hugging Face GPT-2 directory of any size (config.json and model.safetensors,
a sharded model.safetensors.index.json, or pytorch_model.bin) and writes our model file: fp32
(v3), or bf16 (v5) with --bf16, wte padded with zero rows to a multiple of 128.

Hugging Face's GPT-2 stores its linear layers as Conv1D, weight (in, out); ours are (out, in), so
qkvw, attprojw, fcw and fcprojw are transposed both ways. Needs torch and safetensors (and
transformers only to load the result); `make deps` installs them.
"""
import argparse
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "dev", "data"))

import torch  # noqa: E402

import train_gpt2 as ref  # noqa: E402  (llm.c model file reader/writer, parameter names)
from data_common import write_atomic  # noqa: E402

# our per-layer tensor -> (Hugging Face name inside block l, transposed?)
LAYER_MAP = {
    "ln1w": ("ln_1.weight", False), "ln1b": ("ln_1.bias", False),
    "qkvw": ("attn.c_attn.weight", True), "qkvb": ("attn.c_attn.bias", False),
    "attprojw": ("attn.c_proj.weight", True), "attprojb": ("attn.c_proj.bias", False),
    "ln2w": ("ln_2.weight", False), "ln2b": ("ln_2.bias", False),
    "fcw": ("mlp.c_fc.weight", True), "fcb": ("mlp.c_fc.bias", False),
    "fcprojw": ("mlp.c_proj.weight", True), "fcprojb": ("mlp.c_proj.bias", False),
}
GLOBAL_MAP = {"wte": "transformer.wte.weight", "wpe": "transformer.wpe.weight",
              "lnfw": "transformer.ln_f.weight", "lnfb": "transformer.ln_f.bias"}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class ConvertError(Exception):
    """A problem with an input; the message names the file."""


def need_safetensors():
    try:
        import safetensors.torch as st
    except ImportError:
        raise ConvertError("dev/hf.py needs the safetensors package (run `make deps`)")
    return st


def model_version(path):
    with open(path, "rb") as f:
        head = f.read(8)
    return int.from_bytes(head[4:8], "little") if len(head) == 8 else None


def hf_config(cfg, dtype_name):
    eot = 50256 if cfg["V"] == 50257 else cfg["V"] - 1
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "vocab_size": cfg["V"], "n_positions": cfg["T_max"], "n_ctx": cfg["T_max"],
        "n_embd": cfg["C"], "n_layer": cfg["L"], "n_head": cfg["NH"], "n_inner": None,
        "activation_function": "gelu_new", "layer_norm_epsilon": ref.LN_EPS,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
        "initializer_range": 0.02, "scale_attn_weights": True, "use_cache": True,
        "tie_word_embeddings": True, "bos_token_id": eot, "eos_token_id": eot,
        "torch_dtype": dtype_name,
    }


def to_hf_state(P, cfg, dtype):
    """Our parameters (fp32 tensors) -> a Hugging Face GPT2LMHeadModel state dict."""
    sd = {}
    for name, key in GLOBAL_MAP.items():
        sd[key] = P[name][:cfg["V"]] if name == "wte" else P[name]
    for l in range(cfg["L"]):
        for name, (key, transpose) in LAYER_MAP.items():
            t = P[name][l]
            sd[f"transformer.h.{l}.{key}"] = t.t() if transpose else t
    # each tensor its own copy: safetensors refuses tensors that share memory (the layers of one
    # of our tensors are views of it)
    return {k: v.to(dtype).contiguous().clone() for k, v in sd.items()}


def export(model_path, out_dir, dtype_name):
    st = need_safetensors()
    try:
        P, cfg = ref.load_model(model_path)
    except FileNotFoundError:
        raise ConvertError(f"{model_path}: no such file")
    except ref.FormatError as e:
        raise ConvertError(str(e))
    if dtype_name is None:
        dtype_name = "bfloat16" if model_version(model_path) == 5 else "float32"
    sd = to_hf_state(P, cfg, DTYPES[dtype_name])
    os.makedirs(out_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp_model", suffix=".safetensors", dir=out_dir)
    os.close(fd)
    try:
        st.save_file(sd, tmp, metadata={"format": "pt"})
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)   # mkstemp makes 0600; give the usual mode
        os.replace(tmp, os.path.join(out_dir, "model.safetensors"))
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    text = json.dumps(hf_config(cfg, dtype_name), indent=2) + "\n"
    write_atomic(os.path.join(out_dir, "config.json"), [text.encode()])
    n = sum(v.numel() for v in sd.values())
    print(f"wrote {out_dir}/config.json and model.safetensors: L {cfg['L']} C {cfg['C']} NH {cfg['NH']} "
          f"V {cfg['V']} T_max {cfg['T_max']}, {n} parameters, {dtype_name}")


def read_hf_tensors(hf_dir):
    """All tensors of a Hugging Face checkpoint directory, as {name: tensor}."""
    single = os.path.join(hf_dir, "model.safetensors")
    index = os.path.join(hf_dir, "model.safetensors.index.json")
    pt = os.path.join(hf_dir, "pytorch_model.bin")
    if os.path.isfile(single):
        return need_safetensors().load_file(single), single
    if os.path.isfile(index):
        st = need_safetensors()
        files = sorted(set(json.load(open(index))["weight_map"].values()))
        sd = {}
        for f in files:
            sd.update(st.load_file(os.path.join(hf_dir, f)))
        return sd, index
    if os.path.isfile(pt):
        return torch.load(pt, map_location="cpu"), pt
    raise ConvertError(f"{hf_dir}: no model.safetensors, model.safetensors.index.json or pytorch_model.bin")


def config_from_hf(hf_dir):
    path = os.path.join(hf_dir, "config.json")
    if not os.path.isfile(path):
        raise ConvertError(f"{path}: no such file")
    try:
        c = json.load(open(path))
    except ValueError as e:
        raise ConvertError(f"{path}: not JSON ({e})")
    if c.get("model_type", "gpt2") != "gpt2":
        raise ConvertError(f"{path}: model_type {c.get('model_type')!r}, not gpt2")
    act = c.get("activation_function", "gelu_new")
    if act not in ("gelu_new", "gelu_pytorch_tanh"):
        raise ConvertError(f"{path}: activation_function {act!r}; our GPT-2 uses the tanh GELU (gelu_new)")
    if c.get("n_inner") not in (None, 4 * c.get("n_embd", 0)):
        raise ConvertError(f"{path}: n_inner {c['n_inner']}; our GPT-2 uses 4 * n_embd")
    if abs(c.get("layer_norm_epsilon", 1e-5) - ref.LN_EPS) > 1e-12:
        raise ConvertError(f"{path}: layer_norm_epsilon {c['layer_norm_epsilon']}; ours is {ref.LN_EPS}")
    for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
        if c.get(flag):
            raise ConvertError(f"{path}: {flag} is set; our GPT-2 does not do that")
    try:
        V = int(c["vocab_size"])
        cfg = dict(T_max=int(c["n_positions"]), V=V, L=int(c["n_layer"]), NH=int(c["n_head"]), C=int(c["n_embd"]),
                   Vp=ref.padded_vocab(V))
    except (KeyError, TypeError, ValueError) as e:
        raise ConvertError(f"{path}: missing or bad GPT-2 size field ({e})")
    ref.check_config(cfg, path)
    return cfg


def from_hf_state(sd, cfg, where):
    """A Hugging Face state dict -> our parameters (fp32 tensors in our shapes)."""
    sd = {(k[len("transformer."):] if k.startswith("transformer.") else k): v for k, v in sd.items()}
    shapes = ref.param_shapes(cfg)

    def take(key, shape):
        if key not in sd:
            raise ConvertError(f"{where}: tensor {key} missing")
        t = sd[key].to(torch.float32)
        if tuple(t.shape) != tuple(shape):
            raise ConvertError(f"{where}: tensor {key} has shape {tuple(t.shape)}, config.json implies {tuple(shape)}")
        return t

    P = {}
    C, V = cfg["C"], cfg["V"]
    wte = take("wte.weight", (V, C))
    P["wte"] = torch.cat([wte, torch.zeros(cfg["Vp"] - V, C)])
    if "lm_head.weight" in sd and not torch.equal(sd["lm_head.weight"].to(torch.float32), wte):
        raise ConvertError(f"{where}: lm_head.weight differs from wte; our GPT-2 ties the output head to wte")
    P["wpe"] = take("wpe.weight", shapes["wpe"])
    P["lnfw"] = take("ln_f.weight", shapes["lnfw"])
    P["lnfb"] = take("ln_f.bias", shapes["lnfb"])
    for name, (key, transpose) in LAYER_MAP.items():
        one = shapes[name][1:]
        hf_shape = tuple(reversed(one)) if transpose else one
        layers = [take(f"h.{l}.{key}", hf_shape) for l in range(cfg["L"])]
        P[name] = torch.stack([t.t() if transpose else t for t in layers]).contiguous()
    return P


def import_(hf_dir, model_path, bf16):
    if not os.path.isdir(hf_dir):
        raise ConvertError(f"{hf_dir}: no such directory")
    cfg = config_from_hf(hf_dir)
    sd, where = read_hf_tensors(hf_dir)
    P = from_hf_state(sd, cfg, where)
    ref.write_model(model_path, P, cfg, bf16=bf16)
    n = sum(int(t.numel()) for t in P.values())
    print(f"wrote {model_path}: L {cfg['L']} C {cfg['C']} NH {cfg['NH']} V {cfg['V']} (padded {cfg['Vp']}) "
          f"T_max {cfg['T_max']}, {n} parameters, {'bf16 (v5)' if bf16 else 'fp32 (v3)'}")


def main(argv=None):
    ap = argparse.ArgumentParser(description="convert GPT-2 models between llm.c's .bin and Hugging Face")
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="MODEL.bin -> OUT_DIR/{config.json,model.safetensors}")
    e.add_argument("model")
    e.add_argument("out_dir")
    e.add_argument("--dtype", choices=sorted(DTYPES), help="tensor dtype (default: float32 for v3, bfloat16 for v5)")
    i = sub.add_parser("import", help="Hugging Face GPT-2 dir -> MODEL.bin")
    i.add_argument("hf_dir")
    i.add_argument("model")
    i.add_argument("--bf16", action="store_true", help="write a bf16 (v5) file instead of fp32 (v3)")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "export":
            export(a.model, a.out_dir, a.dtype)
        else:
            import_(a.hf_dir, a.model, a.bf16)
    except (ConvertError, ref.FormatError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
