"""Local text files -> llm.c token shards (GPT-2 BPE).

    python data/prepare_text.py notes/*.txt --out-dir data/mytext --name mytext \
        --vocab-dir ../shared/tokenizer/gpt2 --doc-split blank

Each input file is split into documents (--doc-split):
    file           the whole file is one document
    blank          paragraphs separated by blank lines
    regex:PATTERN  split at every match of PATTERN (re.MULTILINE); the matched text is dropped,
                   so use a lookahead to keep a heading, e.g. 'regex:^(?=Chapter )'
Every document is stripped of surrounding whitespace; empty documents are dropped. Each
document is encoded as EOT (50256) followed by its tokens.

Output: {name}_val_000000.bin with the first documents (whole documents, about --val-tokens
tokens, at least one document), then {name}_train_000001.bin, ... with the rest, --shard-size
tokens per train shard. Inputs are read in the order given (globs sorted).
"""
import glob
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))
import cli_util  # noqa: E402
from tokenizer_util import (Progress, ShardWriter, check_out_dir, check_shard_size, die, encode_document, get_encoding,
                            refuse_existing_shards, remove_stale_shards, tokens_with_eot)

ENCODE_BATCH_DOCS = 512     # documents handed to tiktoken's threaded batch encoder at once
GLOB_CHARS = "*?["


def expand_inputs(inputs):
    """Files named on the command line, globs expanded (sorted). Errors name the argument."""
    paths = []
    for arg in inputs:
        if any(c in arg for c in GLOB_CHARS):
            matches = sorted(p for p in glob.glob(arg) if os.path.isfile(p))
            if not matches:
                die(f"input '{arg}': no file matches (expected text files)")
            paths.extend(matches)
        elif os.path.isdir(arg):
            die(f"input '{arg}': is a directory, expected a text file "
                f"(hint: pass '{os.path.join(arg, '*.txt')}')")
        elif not os.path.isfile(arg):
            die(f"input '{arg}': no such file")
        else:
            paths.append(arg)
    return paths


def make_splitter(doc_split):
    """Returns text -> list of documents for a --doc-split value."""
    if doc_split == "file":
        pieces = lambda text: [text]
    elif doc_split == "blank":
        blank_line = re.compile(r"\n[ \t\r\f\v]*\n")
        pieces = blank_line.split
    elif doc_split.startswith("regex:"):
        pattern = doc_split[len("regex:"):]
        if not pattern:
            die("--doc-split: expected regex:PATTERN with a non-empty PATTERN, found 'regex:'")
        try:
            rx = re.compile(pattern, re.MULTILINE)
        except re.error as e:
            die(f"--doc-split: '{pattern}' is not a valid Python regular expression ({e})")
        pieces = rx.split
    else:
        die(f"--doc-split: expected 'file', 'blank' or 'regex:PATTERN', found '{doc_split}'")

    def split(text):
        # re.split also returns the text of capture groups (possibly None); keep only strings
        docs = (d.strip() for d in pieces(text) if isinstance(d, str))
        return [d for d in docs if d]
    return split


def read_documents(paths, split):
    docs = []
    for path in paths:
        try:
            with open(path, "r", encoding="utf-8") as f:
                text = f.read()
        except UnicodeDecodeError as e:
            die(f"input '{path}': expected UTF-8 text, found an invalid byte at offset {e.start}")
        except OSError as e:
            die(f"input '{path}': cannot read ({e.strerror})")
        docs.extend(split(text))
    return docs


def encode_documents(enc, docs, threads):
    """Yields the EOT-prefixed uint16 token array of each document, in order."""
    for i in range(0, len(docs), ENCODE_BATCH_DOCS):
        batch = docs[i:i + ENCODE_BATCH_DOCS]
        if threads > 1 and len(batch) > 1:
            for ids in enc.encode_ordinary_batch(batch, num_threads=threads):
                yield tokens_with_eot(ids)
        else:
            for doc in batch:
                yield encode_document(enc, doc)


def main(argv=None):
    ap = cli_util.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inputs", nargs="+", help="text files or globs (quote globs)")
    ap.add_argument("--out-dir", required=True, help="output directory (created if missing)")
    ap.add_argument("--name", required=True, help="shard file name prefix")
    ap.add_argument("--vocab-dir", default=None,
                    help="directory with encoder.json + vocab.bpe (offline); default: tiktoken registry")
    ap.add_argument("--val-tokens", type=int, default=65536,
                    help="about this many tokens of whole documents go to the val shard (default 65536)")
    ap.add_argument("--shard-size", type=int, default=100_000_000,
                    help="tokens per train shard (default 100M)")
    ap.add_argument("--doc-split", default="file",
                    help="how a file splits into documents: file, blank, regex:PATTERN (default file)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="tokenizer threads (default: all cores)")
    ap.add_argument("--overwrite", action="store_true", help="replace the shards of an earlier run of this --name in --out-dir")
    ap.add_argument("--progress-every", type=float, default=30.0,
                    help="seconds between progress lines when not on a terminal (0 = none; default 30)")
    args = ap.parse_args(argv)
    if not (args.progress_every >= 0 and args.progress_every < float("inf")):
        die(f"--progress-every: expected a number of seconds >= 0, found {args.progress_every}")

    if args.val_tokens < 0:
        die(f"--val-tokens: expected a count >= 0, found {args.val_tokens}")
    check_shard_size(args.shard_size)
    if not args.name or os.sep in args.name:
        die(f"--name: expected a file name prefix without '{os.sep}', found '{args.name}'")
    if args.threads <= 0:
        die(f"--threads: expected a positive count, found {args.threads}")

    check_out_dir(args.out_dir)  # before the input is read and tokenized
    split = make_splitter(args.doc_split)
    paths = expand_inputs(args.inputs)
    docs = read_documents(paths, split)
    if len(docs) == 0:
        die(f"input: expected text, found no non-blank document in {len(paths)} file(s) "
            f"({', '.join(repr(p) for p in paths[:3])}{', ...' if len(paths) > 3 else ''})")
    if len(docs) == 1:
        die(f"input: found 1 document, need at least 2 (val + train) "
            f"(hint: --doc-split blank or regex:PATTERN splits a file into documents)")

    old = refuse_existing_shards(args.out_dir, args.name, args.overwrite)
    enc = get_encoding(args.vocab_dir)
    writer = ShardWriter(args.out_dir, args.name, args.shard_size)

    # Val takes whole documents from the start while the document's midpoint stays within
    # --val-tokens (so the total lands as close to the target as whole documents allow),
    # always at least one document and never the last one.
    # Every document is tokenized before any shard is written, so that the split is known first.
    progress = Progress("tokenizing", len(docs), args.progress_every)
    encoded = []
    for tokens in encode_documents(enc, docs, args.threads):
        progress.update(tokens.size)
        encoded.append(tokens)
    progress.close()
    val_docs, val_count = 0, 0
    for i, tokens in enumerate(encoded[:-1]):
        if val_docs > 0 and val_count + tokens.size / 2 > args.val_tokens:
            break
        val_docs, val_count = i + 1, val_count + tokens.size
    total = sum(t.size for t in encoded)
    if val_count > total / 2:
        cli_util.warn(f"--val-tokens {args.val_tokens:,}: the val shard takes {val_count:,} of the input's {total:,} tokens "
                      f"({val_docs:,} of {len(docs):,} documents), leaving {total - val_count:,} to train on "
                      f"(hint: a smaller --val-tokens)")
    for i, tokens in enumerate(encoded):
        if i == val_docs:
            writer.end_val()
        writer.add(tokens)
    writer.close()
    remove_stale_shards(old, writer.paths)

    n_train_shards = len(writer.paths) - 1
    print(f"{len(paths)} file(s), {len(docs):,} documents: "
          f"val {writer.val_tokens:,} tokens ({val_docs:,} document(s)), "
          f"train {writer.train_tokens:,} tokens ({len(docs) - val_docs:,} document(s), "
          f"{n_train_shards} shard(s))")
    return 0


if __name__ == "__main__":
    cli_util.run(main)
