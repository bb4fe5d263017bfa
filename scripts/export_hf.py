#!/usr/bin/env python3
"""export_hf.py — a train_llama checkpoint (model_*.bin of either engine) as a Hugging Face
LlamaForCausalLM folder: config.json, model.safetensors, generation_config.json and the GPT-2
tokenizer files (vocab.json, merges.txt, tokenizer_config.json, special_tokens_map.json).

  python3 scripts/export_hf.py out/run/model_00000300.bin out/run/hf [--dtype bfloat16]
      [--tokenizer-dir ../shared/tokenizer/gpt2] [--replace]

The folder must be new or empty; --replace writes over a non-empty one and removes the weight
files another export left there (STALE_FILES: pytorch_model*.bin, *.safetensors, *.index.json,
tokenizer.json, ...), so that a loader finds only these weights; other files stay. The files are
written in a hidden folder beside (or inside) the target and moved in once all are complete,
mode 0644: a failed export leaves the folder as it was.

The engine's model is Hugging Face's Llama: RMSNorm (eps 1e-5, llmc/rmsnorm.h), RoPE with
rotate-half pairs and theta 10000 (llmc/rope.h, no permutation of q/k rows), grouped-query
attention, SwiGLU, untied lm_head, no biases. The flat layout (llmc/llama.h) maps one to one:
qkvw rows are q_proj | k_proj | v_proj, fc1w rows are gate_proj | up_proj. The vocabulary is
trimmed from the padded Vp rows to the V real ones (the padded rows are never used).
Needs numpy, safetensors and (for --dtype bfloat16) ml_dtypes; not torch.
"""
import fnmatch
import json
import math
import os
import shutil
import tempfile
import zlib

import numpy as np

import cli_util
from cli_util import die as fail

MODEL_MAGIC, VERSION, HEADER_INTS = 20250301, 1, 256
RMSNORM_EPS, ROPE_THETA = 1e-5, 10000.0   # llmc/rmsnorm.h, llmc/rope.h
EOT = 50256                               # GPT-2's <|endoftext|>
# what a loader of the folder would read besides this export's files: other exports' weights,
# shard indexes, a fast tokenizer (preferred over vocab.json + merges.txt). Hugging Face names
# only: a stray --replace must not remove a run's model_*.bin checkpoints.
STALE_FILES = ("pytorch_model*.bin", "*.safetensors", "*.index.json", "tf_model.h5", "flax_model*.msgpack", "*.gguf",
               "consolidated*.pth", "adapter_model.*", "adapter_config.json", "tokenizer.json", "added_tokens.json")
DIR_MODE = 0o755


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
            n = sum(math.prod(s) for _, s in shapes)  # Python ints: a forged header cannot wrap around
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
        k = math.prod(shape)
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


def check_out_dir(out_dir, replace, checkpoint):
    """The folder may be new (its parent exists), empty, or non-empty with --replace; never a
    file, never the checkpoint's own run directory."""
    if not out_dir:
        fail("out_dir: expected a folder name, found ''")
    if os.path.lexists(out_dir) and not os.path.isdir(out_dir):
        fail(f"out_dir: '{out_dir}' exists and is not a directory (expected a new or empty folder)")
    if os.path.isdir(out_dir):
        if os.path.isdir(os.path.dirname(checkpoint) or ".") and os.path.samefile(out_dir, os.path.dirname(checkpoint) or "."):
            fail(f"out_dir: '{out_dir}' is the checkpoint's own directory; expected a folder of its own "
                 f"(e.g. {os.path.join(out_dir, 'hf')})")
        try:
            entries = sorted(os.listdir(out_dir))
        except OSError as e:
            fail(f"out_dir: cannot list '{out_dir}' ({e.strerror})")
        if entries and not replace:
            fail(f"out_dir: '{out_dir}' is not empty ({len(entries)} entries: {', '.join(entries[:3])}"
                 f"{', ...' if len(entries) > 3 else ''}); pass --replace to write the export over it")
        where = out_dir
    else:
        where = os.path.dirname(os.path.abspath(out_dir))
        if not os.path.isdir(where):
            fail(f"out_dir: the parent directory of '{out_dir}' does not exist (expected an existing directory '{where}')")
    if not os.access(where, os.W_OK | os.X_OK):
        fail(f"out_dir: cannot write into '{where}' (permission denied)")


def write_folder(out_dir, writers):
    """writers: {file name: function(path) writing it}. Every file is written into a hidden
    folder first (in out_dir when it exists, else beside it), given mode 0644, then moved in; a
    new folder is renamed into place whole. Stale weight files (STALE_FILES) are removed last."""
    exists = os.path.isdir(out_dir)
    stage = tempfile.mkdtemp(prefix=".export_hf.", dir=out_dir if exists else os.path.dirname(os.path.abspath(out_dir)))
    try:
        for name, write in writers.items():
            path = os.path.join(stage, name)
            write(path)
            os.chmod(path, cli_util.FILE_MODE)
        if not exists:
            os.chmod(stage, DIR_MODE)
            os.rename(stage, out_dir)
            return
        for name in writers:
            os.replace(os.path.join(stage, name), os.path.join(out_dir, name))
        os.rmdir(stage)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    for name in sorted(os.listdir(out_dir)):
        path = os.path.join(out_dir, name)
        if name not in writers and os.path.isfile(path) and any(fnmatch.fnmatch(name, p) for p in STALE_FILES):
            os.remove(path)
            print(f"export_hf: removed the stale {path}")


def json_writer(obj):
    def write(path):
        with open(path, "w") as f:
            json.dump(obj, f, indent=2)
    return write


def main(argv=None):
    ap = cli_util.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("out_dir", help="a new or empty folder (or any, with --replace)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32", help="dtype of the exported weights")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--tokenizer-dir", default=os.path.join(here, "..", "..", "shared", "tokenizer", "gpt2"),
                    help="GPT-2's encoder.json and vocab.bpe (or vocab.json and merges.txt)")
    ap.add_argument("--replace", action="store_true",
                    help="write over a non-empty out_dir, removing the weight files of an earlier export")
    a = ap.parse_args(argv)
    check_out_dir(a.out_dir, a.replace, a.checkpoint)
    vocab = next((os.path.join(a.tokenizer_dir, n) for n in ("vocab.json", "encoder.json") if os.path.isfile(os.path.join(a.tokenizer_dir, n))), None)
    merges = next((os.path.join(a.tokenizer_dir, n) for n in ("merges.txt", "vocab.bpe") if os.path.isfile(os.path.join(a.tokenizer_dir, n))), None)
    if vocab is None or merges is None:
        fail(f"--tokenizer-dir: '{a.tokenizer_dir}' holds no GPT-2 encoder.json/vocab.json and vocab.bpe/merges.txt")
    if a.dtype == "bfloat16":
        try:
            import ml_dtypes  # noqa: F401
        except ImportError:
            fail("--dtype bfloat16 needs the ml_dtypes package (pip install ml_dtypes)")
    try:
        import safetensors.numpy  # noqa: F401
    except ImportError:
        fail("writing model.safetensors needs the safetensors package (pip install safetensors)")
    cfg, params = read_checkpoint(a.checkpoint)
    if cfg["V"] != EOT + 1:
        print(f"export_hf: note: the model's vocabulary has {cfg['V']} tokens, GPT-2's tokenizer {EOT + 1}")
    special = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}
    write_folder(a.out_dir, {
        "model.safetensors": lambda path: write_safetensors(path, hf_tensors(cfg, params), a.dtype),
        "config.json": json_writer(hf_config(cfg, a.dtype)),
        "generation_config.json": json_writer({"bos_token_id": EOT, "eos_token_id": EOT, "do_sample": False}),
        "vocab.json": lambda path: shutil.copyfile(vocab, path),
        "merges.txt": lambda path: shutil.copyfile(merges, path),
        "tokenizer_config.json": json_writer(dict({"tokenizer_class": "GPT2Tokenizer", "model_max_length": cfg["T"]}, **special,
                                                  add_prefix_space=False)),
        "special_tokens_map.json": json_writer(special),
    })
    print(f"export_hf: {a.checkpoint} (step {cfg['step']}, V={cfg['V']} C={cfg['C']} L={cfg['L']} NH={cfg['NH']} "
          f"NKV={cfg['NKV']} FF={cfg['FF']} T={cfg['T']}) -> {a.out_dir} ({a.dtype})")


if __name__ == "__main__":
    cli_util.run(main)
