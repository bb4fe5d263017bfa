"""Writes the GPT-2 decode table the C++ engines read (llmc/tokenizer.h), in llm.c's format:

    header  256 uint32: [0] magic 20240328, [1] version 2, [2] vocab size (50257), [3] EOT id (50256)
    then for each token id 0..vocab_size-1: uint8 length, then `length` raw bytes

The bytes of a token are tiktoken's decode_single_token_bytes (a token may be part of a
multi-byte UTF-8 character). Default: offline from ../shared/tokenizer/gpt2 next to the repo.

    python data/make_tokenizer_table.py            # -> data/gpt2_tokenizer.bin
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))
import cli_util  # noqa: E402
from tokenizer_util import DEFAULT_VOCAB_DIR, EOT, REPO_ROOT, die, get_encoding

TABLE_MAGIC = 20240328
TABLE_VERSION = 2
TABLE_HEADER_INTS = 256
MAX_TOKEN_BYTES = 255       # the length is stored in one byte


def main(argv=None):
    ap = cli_util.ArgumentParser(description="write the GPT-2 decode table for the C++ engines")
    ap.add_argument("--vocab-dir", default=DEFAULT_VOCAB_DIR,
                    help="directory with encoder.json + vocab.bpe (default ../shared/tokenizer/gpt2 "
                         "from the repo root); pass '' to use tiktoken's registry")
    ap.add_argument("--out", default=os.path.join(REPO_ROOT, "data", "gpt2_tokenizer.bin"),
                    help="output path (default data/gpt2_tokenizer.bin)")
    args = ap.parse_args(argv)

    enc = get_encoding(args.vocab_dir or None)
    vocab_size = enc.n_vocab
    if enc.eot_token != EOT:
        die(f"--vocab-dir: expected the GPT-2 vocabulary with EOT {EOT}, found EOT {enc.eot_token}")

    header = np.zeros(TABLE_HEADER_INTS, dtype=np.uint32)
    header[0] = TABLE_MAGIC
    header[1] = TABLE_VERSION
    header[2] = vocab_size
    header[3] = EOT
    body = bytearray()
    for i in range(vocab_size):
        b = enc.decode_single_token_bytes(i)
        assert 0 < len(b) <= MAX_TOKEN_BYTES, f"token {i} has {len(b)} bytes"
        body.append(len(b))
        body += b

    tmp = args.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header.tobytes())
        f.write(bytes(body))
    os.replace(tmp, args.out)
    print(f"wrote {args.out}: {vocab_size} tokens, EOT {EOT}, {TABLE_HEADER_INTS * 4 + len(body):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
