#!/usr/bin/env python3
"""export_hf.py — a train_llama checkpoint (model_*.bin of either engine) as a Hugging Face
LlamaForCausalLM folder: config.json, model.safetensors, generation_config.json and the GPT-2
tokenizer files (vocab.json, merges.txt, tokenizer_config.json, special_tokens_map.json).

  python3 scripts/export_hf.py out/run/model_00000300.bin out/run/hf [--dtype bfloat16]
      [--tokenizer-dir ../shared/tokenizer/gpt2]

The engine's model is Hugging Face's Llama: RMSNorm (eps 1e-5, llmc/rmsnorm.h), RoPE with
rotate-half pairs and theta 10000 (llmc/rope.h, no permutation of q/k rows), grouped-query
attention, SwiGLU, untied lm_head, no biases. The flat layout (llmc/llama.h) maps one to one:
qkvw rows are q_proj | k_proj | v_proj, fc1w rows are gate_proj | up_proj. The vocabulary is
trimmed from the padded Vp rows to the V real ones (the padded rows are never used).
Needs numpy, safetensors and (for --dtype bfloat16) ml_dtypes; not torch.
"""
import argparse
import json
import os
import shutil
import sys
import zlib

import numpy as np

MODEL_MAGIC, VERSION, HEADER_INTS = 20250301, 1, 256
RMSNORM_EPS, ROPE_THETA = 1e-5, 10000.0   # llmc/rmsnorm.h, llmc/rope.h
EOT = 50256                               # GPT-2's <|endoftext|>


def fail(msg):
    print("error: " + msg, file=sys.stderr)
    sys.exit(1)


def read_checkpoint(path):
    """(config dict, flat float32 weights); every problem is one line naming the file."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            header = np.frombuffer(f.read(HEADER_INTS * 4), dtype="<i4")
            if header.size != HEADER_INTS:
                fail(f"'{path}' is not a train_llama model checkpoint: {size} bytes, shorter than the {HEADER_INTS * 4}-byte header")
            if header[0] != MODEL_MAGIC:
                fail(f"'{path}' is not a train_llama model checkpoint: magic {header[0]}, expected {MODEL_MAGIC}")
            if header[1] != VERSION:
                fail(f"'{path}' has checkpoint version {header[1]}, expected {VERSION}")
            V, Vp, C, L, NH, NKV, FF, T = (int(x) for x in header[2:10])
            if min(V, Vp, C, L, NH, NKV, FF, T) <= 0 or Vp < V or C % NH or NH % NKV or header[12] != 0:
                fail(f"'{path}' has an invalid model header (V={V} Vp={Vp} C={C} L={L} NH={NH} NKV={NKV} FF={FF} T={T} dtype={header[12]})")
            HS = C // NH
            shapes = [("wte", (Vp, C)), ("ln1w", (L, C)), ("ln2w", (L, C)), ("qkvw", (L, (NH + 2 * NKV) * HS, C)),
                      ("projw", (L, C, NH * HS)), ("fc1w", (L, 2 * FF, C)), ("fc2w", (L, C, FF)), ("lnfw", (C,)),
                      ("lm_head", (Vp, C))]
            n = sum(int(np.prod(s)) for _, s in shapes)
            if size != HEADER_INTS * 4 + 4 * n:
                fail(f"'{path}' has {size} bytes, expected {HEADER_INTS * 4 + 4 * n} for its model (truncated or corrupted)")
            payload = f.read(4 * n)
    except OSError as e:
        fail(f"cannot read '{path}' ({e.strerror})")
    crc = int(np.array([header[11]], dtype="<i4").view("<u4")[0])
    if zlib.crc32(payload) & 0xFFFFFFFF != crc:
        fail(f"'{path}' is corrupted: payload CRC-32 {zlib.crc32(payload) & 0xFFFFFFFF:08x}, the header says {crc:08x}")
    flat = np.frombuffer(payload, dtype="<f4")
    params, off = {}, 0
    for name, shape in shapes:
        k = int(np.prod(shape))
        params[name] = flat[off:off + k].reshape(shape)
        off += k
    config = dict(V=V, Vp=Vp, C=C, L=L, NH=NH, NKV=NKV, FF=FF, T=T, HS=HS, step=int(header[10]))
    return config, params


def hf_tensors(cfg, p):
    """Hugging Face parameter names -> arrays (vocabulary trimmed to V rows)."""
    V, L, NH, NKV, HS, FF = cfg["V"], cfg["L"], cfg["NH"], cfg["NKV"], cfg["HS"], cfg["FF"]
    out = {"model.embed_tokens.weight": p["wte"][:V], "model.norm.weight": p["lnfw"], "lm_head.weight": p["lm_head"][:V]}
    for l in range(L):
        pre = f"model.layers.{l}."
        q, k, v = np.split(p["qkvw"][l], [NH * HS, (NH + NKV) * HS])
        gate, up = np.split(p["fc1w"][l], [FF])
        out.update({pre + "input_layernorm.weight": p["ln1w"][l], pre + "post_attention_layernorm.weight": p["ln2w"][l],
                    pre + "self_attn.q_proj.weight": q, pre + "self_attn.k_proj.weight": k, pre + "self_attn.v_proj.weight": v,
                    pre + "self_attn.o_proj.weight": p["projw"][l], pre + "mlp.gate_proj.weight": gate,
                    pre + "mlp.up_proj.weight": up, pre + "mlp.down_proj.weight": p["fc2w"][l]})
    return out


def hf_config(cfg, dtype):
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": cfg["V"], "hidden_size": cfg["C"], "intermediate_size": cfg["FF"],
        "num_hidden_layers": cfg["L"], "num_attention_heads": cfg["NH"], "num_key_value_heads": cfg["NKV"],
        "head_dim": cfg["HS"], "max_position_embeddings": cfg["T"], "rms_norm_eps": RMSNORM_EPS,
        "rope_theta": ROPE_THETA, "rope_scaling": None, "hidden_act": "silu", "attention_bias": False,
        "mlp_bias": False, "tie_word_embeddings": False, "initializer_range": 0.02,
        "bos_token_id": EOT, "eos_token_id": EOT, "torch_dtype": dtype, "use_cache": True,
    }


def write_safetensors(path, tensors, dtype):
    """model.safetensors (bfloat16 rounded to nearest even by ml_dtypes)."""
    from safetensors.numpy import save_file
    if dtype == "bfloat16":
        import ml_dtypes
        tensors = {k: v.astype(ml_dtypes.bfloat16) for k, v in tensors.items()}
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, path, metadata={"format": "pt"})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("out_dir")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--tokenizer-dir", default=os.path.join(here, "..", "..", "shared", "tokenizer", "gpt2"),
                    help="GPT-2's encoder.json and vocab.bpe (or vocab.json and merges.txt)")
    a = ap.parse_args()
    cfg, params = read_checkpoint(a.checkpoint)
    vocab = next((os.path.join(a.tokenizer_dir, n) for n in ("vocab.json", "encoder.json") if os.path.isfile(os.path.join(a.tokenizer_dir, n))), None)
    merges = next((os.path.join(a.tokenizer_dir, n) for n in ("merges.txt", "vocab.bpe") if os.path.isfile(os.path.join(a.tokenizer_dir, n))), None)
    if vocab is None or merges is None:
        fail(f"--tokenizer-dir: '{a.tokenizer_dir}' holds no GPT-2 encoder.json/vocab.json and vocab.bpe/merges.txt")
    if cfg["V"] != EOT + 1:
        print(f"export_hf: note: the model's vocabulary has {cfg['V']} tokens, GPT-2's tokenizer {EOT + 1}")
    os.makedirs(a.out_dir, exist_ok=True)
    tmp = os.path.join(a.out_dir, "model.safetensors.tmp")
    write_safetensors(tmp, hf_tensors(cfg, params), a.dtype)
    os.replace(tmp, os.path.join(a.out_dir, "model.safetensors"))
    with open(os.path.join(a.out_dir, "config.json"), "w") as f:
        json.dump(hf_config(cfg, a.dtype), f, indent=2)
    with open(os.path.join(a.out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": EOT, "eos_token_id": EOT, "do_sample": False}, f, indent=2)
    shutil.copyfile(vocab, os.path.join(a.out_dir, "vocab.json"))
    shutil.copyfile(merges, os.path.join(a.out_dir, "merges.txt"))
    with open(os.path.join(a.out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer", "model_max_length": cfg["T"], "bos_token": "<|endoftext|>",
                   "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>", "add_prefix_space": False}, f, indent=2)
    with open(os.path.join(a.out_dir, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}, f, indent=2)
    print(f"export_hf: {a.checkpoint} (step {cfg['step']}, V={cfg['V']} C={cfg['C']} L={cfg['L']} NH={cfg['NH']} "
          f"NKV={cfg['NKV']} FF={cfg['FF']} T={cfg['T']}) -> {a.out_dir} ({a.dtype})")


if __name__ == "__main__":
    main()
