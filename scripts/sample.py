#!/usr/bin/env python3
"""sample.py — text from a checkpoint without training: the prompt encoded with GPT-2's tokenizer
(tiktoken; offline from ../shared/tokenizer/gpt2 when that folder exists), then the engine's own
sampler on the checkpoint's weights (train_llama_cpu -e CKPT -x 0 -s 1 --prompt-tokens IDS ...),
its token ids decoded back to text.

  python3 scripts/sample.py out/run/model_00000300.bin --prompt "And God said" [-g 64]
      [--temperature 0.8] [--top-k 40] [--seed 1337] [--ids] [--engine ./train_llama_cpu]
      [--data 'data/kjv/kjv_train_*.bin']

--temperature 0 is greedy decoding (the most likely token each time, as transformers'
generate(do_sample=False)); a seed gives the same text every time. The prompt and the sample
together are at most the model's T tokens of context (a longer one slides). --ids prints the
token ids (prompt, then sample) instead of text. --data: the engine validates its train shards
even for zero steps; the default suits GPT-2-vocabulary checkpoints.
"""
import argparse
import codecs
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))
sys.path.insert(0, os.path.join(REPO, "data"))
import cli_util  # noqa: E402
from cli_util import die as fail  # noqa: E402


def temperature(s):
    x = cli_util.nonnegative_float(s)
    if x > 100:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 100], found '{s}'")
    return x


def main():
    ap = cli_util.ArgumentParser(description="Sample text from a train_llama checkpoint (no training).",
                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("checkpoint", help="model_*.bin of either engine")
    ap.add_argument("--prompt", default="", help="text the sample continues (empty: from <|endoftext|>)")
    ap.add_argument("-g", "--gen-tokens", type=cli_util.int_in(1, 1 << 20), default=64, help="tokens to generate")
    ap.add_argument("--temperature", type=temperature, default=1.0, help="0 = greedy")
    ap.add_argument("--top-k", type=cli_util.int_in(0, 1 << 20), default=0, help="sample among the k most likely tokens (0 = all)")
    ap.add_argument("--seed", type=cli_util.int_in(0, 2 ** 64 - 1), default=1337, help="random seed of the sampler")
    ap.add_argument("--ids", action="store_true", help="print token ids instead of text")
    ap.add_argument("--engine", default=os.path.join(REPO, "train_llama_cpu"), help="the trainer binary that samples")
    ap.add_argument("--data", default=os.path.join(REPO, "data", "kjv", "kjv_train_*.bin"), help="train shards the engine validates (-i)")
    ap.add_argument("--vocab-dir", default=None, help="folder with GPT-2's encoder.json and vocab.bpe (default: ../shared/tokenizer/gpt2, else tiktoken's registry)")
    args = ap.parse_args()
    if not os.path.isfile(args.checkpoint):
        fail(f"checkpoint '{args.checkpoint}' is not a file")
    if not (os.path.isfile(args.engine) and os.access(args.engine, os.X_OK)):
        fail(f"--engine '{args.engine}' is not an executable file (hint: make train_llama_cpu)")
    from tokenizer_util import DEFAULT_VOCAB_DIR, get_encoding
    enc = get_encoding(args.vocab_dir or (DEFAULT_VOCAB_DIR if os.path.isdir(DEFAULT_VOCAB_DIR) else None))
    prompt = enc.encode(args.prompt, allowed_special={"<|endoftext|>"}) if args.prompt else []
    cmd = [args.engine, "-e", args.checkpoint, "-x", "0", "-v", "0", "-b", "1", "-s", "1", "-g", str(args.gen_tokens),
           "--temperature", repr(args.temperature), "--top-k", str(args.top_k), "--seed", str(args.seed),
           "--tokenizer", "none", "-i", args.data]
    if prompt:
        cmd += ["--prompt-tokens", ",".join(map(str, prompt))]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    # the engine prints each token as it is generated: the text goes out as it comes (a long -g
    # shows its progress), decoded incrementally (a character split across tokens waits for its
    # last byte), and ends the same as decoding every id at once
    err = tempfile.TemporaryFile()
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=env)
    except OSError as e:
        fail(f"--engine '{args.engine}' cannot be run ({e.strerror})")
    text = codecs.getincrementaldecoder("utf-8")(errors="replace")
    head, body, ids, started, ended = b"", b"", [], False, False
    while True:
        chunk = proc.stdout.read1(4096)
        if not chunk:
            break
        if not started:
            head += chunk
            if b"generating:\n---\n" not in head:
                continue
            started, chunk = True, head.split(b"generating:\n---\n", 1)[1]
        if ended:
            continue
        body += chunk
        if b"\n---\n" in body:
            body, ended = body.split(b"\n---\n", 1)[0] + b" ", True
        words = body.split(b" ")
        body = words.pop()  # an id not yet followed by its blank
        new = [int(w) for w in words if w.strip()]
        if new:
            sys.stdout.write((" " if ids else "") + " ".join(map(str, new)) if args.ids else text.decode(enc.decode_bytes(new)))
            sys.stdout.flush()
        ids += new
    rc = proc.wait()
    if rc != 0:
        err.seek(0)
        lines = [l for l in err.read().decode("utf-8", "replace").splitlines() if l.strip()]
        fail(f"the engine failed (exit {rc}): " + (lines[-1] if lines else "no message"))
    if not started or not ended:
        fail("the engine printed no sample (expected 'generating:' then the tokens between '---' lines)")
    if ids[:len(prompt)] != prompt or len(ids) != len(prompt) + args.gen_tokens:
        fail(f"the engine's sample holds {len(ids)} ids, expected the prompt's {len(prompt)} then {args.gen_tokens}")
    sys.stdout.write("\n" if args.ids else text.decode(b"", final=True) + "\n")

if __name__ == "__main__":
    cli_util.run(main)
