#!/usr/bin/env python3
"""import_hf.py — a Hugging Face LlamaForCausalLM folder (a local path) as a train_llama model
checkpoint, model_*.bin, that either engine starts from with -e (export_hf.py in reverse).

  python3 scripts/import_hf.py path/to/hf_folder out/init/model_00000000.bin [--step 0] [--replace]
  ./train_llama_cpu -e out/init/model_00000000.bin -o out/finetune ...

The folder holds config.json and the weights as safetensors: model.safetensors, or shards with
model.safetensors.index.json (float32, bfloat16 or float16; read as float32, exactly). A folder
with only pytorch_model*.bin (a torch pickle) is refused: save it with safe_serialization=True.

What the engine's model holds, and what is refused with one line naming the setting: Llama with
RMSNorm eps 1e-5, RoPE theta 10000 without scaling, head size hidden_size / num_attention_heads
(even), SwiGLU (hidden_act silu), no biases, an untied lm_head, and a vocabulary of at most 65536
tokens (the shards' tokens are uint16). The vocabulary is padded with zero rows to a multiple of
128 (Vp), as the engine pads its own; the data must be tokenized with the model's own tokenizer
(GPT-2's, for the engine's bundled data and data/ scripts). An export of a train_llama
checkpoint imports back bitwise (pass its --step).
Needs numpy and safetensors (and ml_dtypes for bfloat16 weights); not torch.
"""
import json
import os
import zlib

import numpy as np

import cli_util
from cli_util import die as fail
from export_hf import HEADER_INTS, MODEL_MAGIC, RMSNORM_EPS, ROPE_THETA, VERSION

MAX_VOCAB = 65536  # the shards' tokens are uint16 (llmc/dataloader.h); --vocab-size's bound


def padded_vocab(V):
    return (V + 127) // 128 * 128  # llmc/llama.h llama_padded_vocab


def read_config(folder):
    """The engine's config (V, C, L, NH, NKV, FF, T) from config.json; one line per setting the
    engine cannot hold."""
    path = os.path.join(folder, "config.json")
    cfg = cli_util.read_json(path, dict, "hf_folder")
    where = f"hf_folder: '{path}'"

    def get(key, kind=int, default=None):
        if key not in cfg or cfg[key] is None:
            if default is not None:
                return default
            fail(f"{where}: '{key}' is missing (expected {'an integer' if kind is int else 'a number'})")
        v = cfg[key]
        if not cli_util.finite_number(v) or (kind is int and not isinstance(v, int)):
            fail(f"{where}: '{key}' is {cli_util.describe(v)}, expected {'an integer' if kind is int else 'a number'}")
        return v

    arch = cfg.get("architectures") or []
    if cfg.get("model_type") != "llama" and "LlamaForCausalLM" not in (arch if isinstance(arch, list) else []):
        fail(f"{where}: model_type is {cli_util.describe(cfg.get('model_type'))}, expected 'llama' (a LlamaForCausalLM)")
    V, C, L = get("vocab_size"), get("hidden_size"), get("num_hidden_layers")
    NH, FF, T = get("num_attention_heads"), get("intermediate_size"), get("max_position_embeddings")
    NKV = get("num_key_value_heads", default=NH)
    for key, v in (("vocab_size", V), ("hidden_size", C), ("num_hidden_layers", L), ("num_attention_heads", NH),
                   ("num_key_value_heads", NKV), ("intermediate_size", FF), ("max_position_embeddings", T)):
        if v <= 0:
            fail(f"{where}: '{key}' is {v}, expected a positive integer")
    if V > MAX_VOCAB:
        fail(f"{where}: vocab_size {V}, expected at most {MAX_VOCAB} (the engine's tokens are uint16)")
    if C % NH:
        fail(f"{where}: hidden_size {C} is not a multiple of num_attention_heads {NH}")
    HS = C // NH
    head_dim = get("head_dim", default=HS)
    if head_dim != HS:
        fail(f"{where}: head_dim {head_dim}, expected hidden_size / num_attention_heads = {HS} (the engine's head size)")
    if HS % 2:
        fail(f"{where}: head size {HS} is odd, expected an even one (RoPE rotates pairs)")
    if NH % NKV:
        fail(f"{where}: num_attention_heads {NH} is not a multiple of num_key_value_heads {NKV}")
    if T > (1 << 20) or C > (1 << 16) or L > 4096 or FF > (1 << 20):
        fail(f"{where}: sizes out of the engine's range (max_position_embeddings <= 2^20, hidden_size <= 65536, "
             f"num_hidden_layers <= 4096, intermediate_size <= 2^20)")
    eps, theta = get("rms_norm_eps", float, RMSNORM_EPS), get("rope_theta", float, ROPE_THETA)
    if eps != RMSNORM_EPS:
        fail(f"{where}: rms_norm_eps {eps}, expected {RMSNORM_EPS} (the engine's RMSNorm, llmc/rmsnorm.h)")
    if theta != ROPE_THETA:
        fail(f"{where}: rope_theta {theta}, expected {ROPE_THETA:g} (the engine's RoPE, llmc/rope.h)")
    settings = [("rope_scaling", None, "no RoPE scaling"), ("tie_word_embeddings", False, "an untied lm_head"),
                ("attention_bias", False, "no biases"), ("mlp_bias", False, "no biases"), ("hidden_act", "silu", "SwiGLU")]
    for key, want, what in settings:
        got = cfg.get(key, want if key != "tie_word_embeddings" else True)  # transformers ties embeddings by default
        if got != want:
            fail(f"{where}: {key} is {json.dumps(got)}, expected {json.dumps(want)} (the engine's model has {what})")
    return dict(V=V, Vp=padded_vocab(V), C=C, L=L, NH=NH, NKV=NKV, FF=FF, T=T, HS=HS)


def read_tensors(folder):
    """{name: float32 array} of every safetensors file of the folder (one, or the shards of an index)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file
    try:
        import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy, which safetensors then loads)
    except ImportError:
        pass
    index = os.path.join(folder, "model.safetensors.index.json")
    single = os.path.join(folder, "model.safetensors")
    if os.path.isfile(index):
        wmap = cli_util.read_json(index, dict, "hf_folder").get("weight_map")
        if not isinstance(wmap, dict) or not all(isinstance(v, str) and os.path.basename(v) == v for v in wmap.values()):
            fail(f"hf_folder: '{index}' has no weight_map of tensor names to file names in the folder")
        files = sorted(set(wmap.values()))
    elif os.path.isfile(single):
        files = ["model.safetensors"]
    else:
        names = sorted(os.listdir(folder))
        torch_only = any(n.startswith("pytorch_model") and n.endswith(".bin") for n in names)
        fail(f"hf_folder: '{folder}' holds no model.safetensors or model.safetensors.index.json" +
             (" (only pytorch_model*.bin, a torch pickle: save the model with safe_serialization=True)" if torch_only else ""))
    tensors = {}
    for name in files:
        path = os.path.join(folder, name)
        try:
            part = load_file(path)
        except (SafetensorError, OSError, ValueError, TypeError) as e:
            fail(f"hf_folder: '{path}' cannot be read as safetensors ({str(e).splitlines()[0][:200] if str(e) else type(e).__name__})")
        for k, v in part.items():
            if v.dtype.kind != "f" and v.dtype.name != "bfloat16":
                fail(f"hf_folder: '{path}' tensor '{k}' has dtype {v.dtype.name}, expected float32, bfloat16 or float16")
            tensors[k] = v.astype(np.float32)
    return tensors


def engine_params(cfg, t):
    """The flat layout of llmc/llama.h (wte, ln1w, ln2w, qkvw, projw, fc1w, fc2w, lnfw, lm_head)
    from Hugging Face's names; every tensor present with its shape, none left over."""
    V, Vp, C, L, NH, NKV, FF, HS = (cfg[k] for k in ("V", "Vp", "C", "L", "NH", "NKV", "FF", "HS"))
    used = set()

    def take(name, shape):
        if name not in t:
            fail(f"hf_folder: tensor '{name}' is missing (expected shape {shape})")
        if tuple(t[name].shape) != shape:
            fail(f"hf_folder: tensor '{name}' has shape {tuple(t[name].shape)}, expected {shape}")
        used.add(name)
        return t[name]

    def vocab_rows(name):
        rows = np.zeros((Vp, C), dtype=np.float32)
        rows[:V] = take(name, (V, C))
        return rows

    layers = {k: [] for k in ("ln1w", "ln2w", "qkvw", "projw", "fc1w", "fc2w")}
    for l in range(L):
        pre = f"model.layers.{l}."
        layers["ln1w"].append(take(pre + "input_layernorm.weight", (C,)))
        layers["ln2w"].append(take(pre + "post_attention_layernorm.weight", (C,)))
        layers["qkvw"].append(np.concatenate([take(pre + "self_attn.q_proj.weight", (NH * HS, C)),
                                              take(pre + "self_attn.k_proj.weight", (NKV * HS, C)),
                                              take(pre + "self_attn.v_proj.weight", (NKV * HS, C))]))
        layers["projw"].append(take(pre + "self_attn.o_proj.weight", (C, NH * HS)))
        layers["fc1w"].append(np.concatenate([take(pre + "mlp.gate_proj.weight", (FF, C)), take(pre + "mlp.up_proj.weight", (FF, C))]))
        layers["fc2w"].append(take(pre + "mlp.down_proj.weight", (C, FF)))
    parts = [vocab_rows("model.embed_tokens.weight")] + [np.stack(layers[k]) for k in ("ln1w", "ln2w", "qkvw", "projw", "fc1w", "fc2w")]
    parts += [take("model.norm.weight", (C,)), vocab_rows("lm_head.weight")]
    extra = sorted(k for k in t if k not in used and not k.endswith("rotary_emb.inv_freq"))  # a buffer older exports saved
    if extra:
        fail(f"hf_folder: tensor '{extra[0]}' has no place in the engine's model ({len(extra)} such; biases and other "
             f"parameters are not part of it)")
    return np.concatenate([p.reshape(-1) for p in parts]).astype("<f4")


def write_checkpoint(path, cfg, flat, step):
    """The model file of llmc/checkpoint.h: int32[256] header, then the fp32 payload."""
    payload = flat.tobytes()
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:11] = [MODEL_MAGIC, VERSION, cfg["V"], cfg["Vp"], cfg["C"], cfg["L"], cfg["NH"], cfg["NKV"], cfg["FF"], cfg["T"], step]
    header[11] = np.array([zlib.crc32(payload) & 0xFFFFFFFF], dtype="<u4").view("<i4")[0]
    with cli_util.atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(header.tobytes())
            f.write(payload)


def main(argv=None):
    ap = cli_util.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("hf_folder", help="a local LlamaForCausalLM folder: config.json and safetensors weights")
    ap.add_argument("out", type=cli_util.output_file, help="the model_*.bin to write (its directory must exist)")
    ap.add_argument("--step", type=cli_util.nonnegative_int, default=0, help="the step written in the header (default 0)")
    ap.add_argument("--replace", action="store_true", help="write over an existing out file")
    a = ap.parse_args(argv)
    if not os.path.isdir(a.hf_folder):
        fail(f"hf_folder: '{a.hf_folder}' is not a directory (expected a Hugging Face model folder)")
    if os.path.lexists(a.out) and not a.replace:
        fail(f"out: '{a.out}' exists; pass --replace to write over it, or another name")
    try:
        import safetensors.numpy  # noqa: F401
    except ImportError:
        fail("reading safetensors weights needs the safetensors package (pip install safetensors)")
    cfg = read_config(a.hf_folder)
    flat = engine_params(cfg, read_tensors(a.hf_folder))
    if not np.isfinite(flat).all():
        fail(f"hf_folder: '{a.hf_folder}' has non-finite weights ({int((~np.isfinite(flat)).sum())} values)")
    write_checkpoint(a.out, cfg, flat, a.step)
    print(f"import_hf: {a.hf_folder} (V={cfg['V']} C={cfg['C']} L={cfg['L']} NH={cfg['NH']} NKV={cfg['NKV']} "
          f"FF={cfg['FF']} T={cfg['T']}) -> {a.out} (step {a.step}, Vp={cfg['Vp']})")


if __name__ == "__main__":
    cli_util.run(main)
