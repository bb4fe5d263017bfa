"""OpenWebText -> llm.c token shards (GPT-2 BPE), tokenized in parallel.

Online, from the Hugging Face hub (needs the `datasets` package and network):
    python data/openwebtext.py --out-dir data/openwebtext
Offline, from local text (a .txt file = one document, a .jsonl file = one document per line
in its "text" field, or a directory searched recursively for both, in sorted path order):
    python data/openwebtext.py --local owt/ --out-dir data/openwebtext --vocab-dir ../shared/tokenizer/gpt2

Output in --out-dir: openwebtext_val_000000.bin, then openwebtext_train_000001.bin, ...
Shard 0 is validation: by default the first --shard-size tokens of the stream, as in llm.c;
with --val-docs N, the first N whole documents instead. Train shards hold --shard-size tokens
each (the last one fewer). Every document is EOT (50256) followed by its tokens. Output is
identical for any --workers (documents keep their order).
"""
import argparse
import itertools
import json
import multiprocessing as mp
import os
import sys

from tokenizer_util import ShardWriter, die, encode_document, get_encoding

HF_DATASET = "Skylion007/openwebtext"
LOCAL_SUFFIXES = (".txt", ".jsonl")

_worker_enc = None  # each pool worker builds its own tokenizer once


def _worker_init(vocab_dir):
    global _worker_enc
    _worker_enc = get_encoding(vocab_dir)


def _worker_encode(text):
    return encode_document(_worker_enc, text)


def local_files(path):
    """The files --local names, in a fixed order."""
    if os.path.isdir(path):
        files = []
        for root, dirs, names in os.walk(path):
            dirs.sort()
            files.extend(os.path.join(root, n) for n in sorted(names) if n.endswith(LOCAL_SUFFIXES))
        if not files:
            die(f"--local: directory '{path}' holds no .txt or .jsonl file")
        return files
    if not os.path.exists(path):
        die(f"--local: '{path}' does not exist (expected a .txt or .jsonl file or a directory)")
    if not path.endswith(LOCAL_SUFFIXES):
        die(f"--local: expected a .txt or .jsonl file or a directory, found '{path}'")
    return [path]


def iter_local_documents(files):
    for path in files:
        if path.endswith(".txt"):
            with open(path, "r", encoding="utf-8", errors="replace") as f:
                yield f.read()
            continue
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    die(f"--local: '{path}' line {lineno}: expected a JSON object, found invalid JSON ({e.msg})")
                if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                    die(f"--local: '{path}' line {lineno}: expected an object with a string \"text\" field")
                yield row["text"]


def iter_hub_documents(streaming, load_proc):
    try:
        import datasets  # imported here so the offline path never needs it
    except ImportError:
        die("reading OpenWebText from the hub needs the `datasets` package, which is not installed "
            "(hint: pip install datasets, or pass --local PATH for local text)")
    kwargs = dict(split="train", streaming=streaming)
    if not streaming:
        kwargs["num_proc"] = load_proc
    try:
        ds = datasets.load_dataset(HF_DATASET, **kwargs)
    except ValueError as e:
        # older `datasets` releases run the repository's loading script only when asked to
        if "trust_remote_code" not in str(e):
            raise
        ds = datasets.load_dataset(HF_DATASET, trust_remote_code=True, **kwargs)
    for row in ds:
        yield row["text"]


def main(argv=None):
    ap = argparse.ArgumentParser(description="OpenWebText -> llm.c token shards")
    ap.add_argument("--out-dir", default="data/openwebtext", help="output directory (default data/openwebtext)")
    ap.add_argument("--name", default="openwebtext", help="shard file name prefix (default openwebtext)")
    ap.add_argument("--local", default=None,
                    help="read local .txt / .jsonl file or directory instead of the hub")
    ap.add_argument("--vocab-dir", default=None,
                    help="directory with encoder.json + vocab.bpe (offline); default: tiktoken registry")
    ap.add_argument("--shard-size", type=int, default=100_000_000, help="tokens per shard (default 100M)")
    ap.add_argument("--val-docs", type=int, default=0,
                    help="documents in the val shard (default 0: the first --shard-size tokens, as in llm.c)")
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1),
                    help="tokenizer processes (default: cores - 1)")
    ap.add_argument("--chunksize", type=int, default=16, help="documents per task handed to a worker (default 16)")
    ap.add_argument("--streaming", action="store_true", help="hub only: stream instead of downloading first")
    ap.add_argument("--load-proc", type=int, default=8, help="hub only: processes for the download/prepare step")
    args = ap.parse_args(argv)

    if args.shard_size <= 0:
        die(f"--shard-size: expected a positive token count, found {args.shard_size}")
    if args.val_docs < 0:
        die(f"--val-docs: expected a count >= 0, found {args.val_docs}")
    if args.workers <= 0:
        die(f"--workers: expected a positive count, found {args.workers}")
    if args.chunksize <= 0:
        die(f"--chunksize: expected a positive count, found {args.chunksize}")
    if not args.name or os.sep in args.name:
        die(f"--name: expected a file name prefix without '{os.sep}', found '{args.name}'")

    if args.local is not None:
        docs = iter_local_documents(local_files(args.local))
    else:
        docs = iter_hub_documents(args.streaming, args.load_proc)
    get_encoding(args.vocab_dir)  # fail here, once, rather than in every worker

    writer = ShardWriter(args.out_dir, args.name, args.shard_size, val_exact=(args.val_docs == 0))
    n_docs = 0
    # Documents are read in the main process, a batch at a time, so a bad input line stops the
    # run with its one-line error here rather than inside the pool's feeder thread.
    # On such an error the shards already written are removed: nothing is left half done.
    batch_docs = args.workers * args.chunksize * 8
    try:
        with mp.Pool(args.workers, initializer=_worker_init, initargs=(args.vocab_dir,)) as pool:
            while True:
                batch = list(itertools.islice(docs, batch_docs))
                if not batch:
                    break
                for tokens in pool.imap(_worker_encode, batch, chunksize=args.chunksize):
                    if args.val_docs > 0 and n_docs == args.val_docs:
                        writer.end_val()
                    writer.add(tokens)
                    n_docs += 1
    except (SystemExit, KeyboardInterrupt):
        for p in writer.paths:
            os.remove(p)
        raise
    if n_docs == 0:
        die(f"input: expected documents, found none in {args.local or HF_DATASET}")
    if n_docs <= args.val_docs:
        die(f"input: found {n_docs} document(s), need more than --val-docs {args.val_docs} "
            f"so that some go to train")
    paths = writer.close()
    if len(paths) < 2:
        for p in paths:
            os.remove(p)
        die(f"input: found only {writer.val_tokens:,} tokens, all of which fit in the val shard "
            f"(hint: lower --shard-size, or pass --val-docs)")
    print(f"{n_docs:,} documents: val {writer.val_tokens:,} tokens, "
          f"train {writer.train_tokens:,} tokens in {len(paths) - 1} shard(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
