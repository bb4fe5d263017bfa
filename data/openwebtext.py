"""OpenWebText -> llm.c token shards (GPT-2 BPE), tokenized in parallel.

Online, from the Hugging Face hub (needs the `datasets` package and network):
    python data/openwebtext.py --out-dir data/openwebtext
Without network, the hub's copy in the Hugging Face cache (HF_HOME) is read with
HF_DATASETS_OFFLINE=1; otherwise the hub is probed first (HF_ENDPOINT, HUB_PROBE_S seconds) and an
unreachable one is one error line at once, not minutes of retries.
Offline, from local text (a .txt file = one document, a .jsonl file = one document per line
in its "text" field, or a directory searched recursively for both, in sorted path order):
    python data/openwebtext.py --local owt/ --out-dir data/openwebtext --vocab-dir ../shared/tokenizer/gpt2

Output in --out-dir: openwebtext_val_000000.bin, then openwebtext_train_000001.bin, ...
Shard 0 is validation: by default the first --shard-size tokens of the stream, as in llm.c;
with --val-docs N, the first N whole documents instead. Train shards hold --shard-size tokens
each (the last one fewer). Every document is EOT (50256) followed by its tokens. Output is
identical for any --workers (documents keep their order). Every bad argument, input or
environment problem is one line "error: ..." and exit status 1 (scripts/cli_util.py), and the
shards written before it are removed.
"""
import itertools
import json
import multiprocessing as mp
import os
import sys
import threading
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))
import cli_util  # noqa: E402
from cli_util import die, int_in  # noqa: E402
from tokenizer_util import (Progress, ShardWriter, check_out_dir, check_shard_size, encode_document, get_encoding,  # noqa: E402
                            refuse_existing_shards, remove_stale_shards)

HF_DATASET = "Skylion007/openwebtext"
LOCAL_SUFFIXES = (".txt", ".jsonl")
HUB_PROBE_S = 5.0         # how long the hub may take to answer before it counts as unreachable
HUB_HINT = ("hint: with the dataset in the Hugging Face cache (HF_HOME), set HF_DATASETS_OFFLINE=1; "
            "else pass --local PATH with the text as .txt / .jsonl files")
CACHE_HINT = ("hint: fetch it once where the hub is reachable (the cache is HF_HOME), "
              "or pass --local PATH with the text as .txt / .jsonl files")
SHARD_TOKENS_MAX = 2 ** 31 - 1  # the shard header's token count is an int32

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


def env_flag(name):
    return os.environ.get(name, "").upper() in ("1", "ON", "YES", "TRUE")


def hub_unreachable(timeout=HUB_PROBE_S):
    """None when the hub (HF_ENDPOINT) answers within timeout seconds (any HTTP status counts),
    else why not. In a thread, so that a name lookup that hangs cannot hold the run."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    why = [f"no answer within {timeout:g} s"]

    def probe():
        try:
            urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout).close()
            why[0] = None
        except urllib.error.HTTPError:
            why[0] = None
        except Exception as e:  # URLError, a timeout, an SSL failure: all mean no data from there
            why[0] = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout + 1.0)
    return None if why[0] is None else f"{endpoint}: {why[0]}"


def open_hub_dataset(streaming, load_proc):
    """The hub's OpenWebText (datasets.load_dataset), or one error line with a hint."""
    try:
        import datasets  # imported here so the offline path never needs it
    except ImportError:
        die("reading OpenWebText from the hub needs the `datasets` package, which is not installed "
            "(hint: pip install datasets, or pass --local PATH for local text)")
    offline = env_flag("HF_DATASETS_OFFLINE") or env_flag("HF_HUB_OFFLINE")
    if not offline:
        why = hub_unreachable()
        if why is not None:
            die(f"cannot reach the Hugging Face hub to fetch {HF_DATASET} ({why}); {HUB_HINT}")
    kwargs = dict(split="train", streaming=streaming)
    if not streaming:
        kwargs["num_proc"] = load_proc
    try:
        try:
            return datasets.load_dataset(HF_DATASET, **kwargs)
        except ValueError as e:
            # older `datasets` releases run the repository's loading script only when asked to
            if "trust_remote_code" not in str(e):
                raise
            return datasets.load_dataset(HF_DATASET, trust_remote_code=True, **kwargs)
    except Exception as e:  # the library's many network and cache errors: one line, not its traceback
        where = "from the Hugging Face cache (HF_DATASETS_OFFLINE is set)" if offline else "from the Hugging Face hub"
        die(f"cannot load {HF_DATASET} {where} ({type(e).__name__}: {first_line(e)}); {CACHE_HINT if offline else HUB_HINT}")


def first_line(e):
    lines = str(e).strip().splitlines()
    return lines[0][:200] if lines else "no message"


def iter_hub_documents(ds):
    rows = iter(ds)
    while True:
        try:
            row = next(rows)
        except StopIteration:
            return
        except Exception as e:  # a stream that breaks off
            die(f"reading {HF_DATASET} failed ({type(e).__name__}: {first_line(e)}); {HUB_HINT}")
        if not isinstance(row, dict) or not isinstance(row.get("text"), str):
            die(f"{HF_DATASET}: expected rows with a string \"text\" field, found {cli_util.describe(row)}")
        yield row["text"]


def remove_output(paths, made):
    """The shards written, and the directories made for them when empty now."""
    for p in paths:
        if os.path.exists(p):
            os.remove(p)
    for d in made:  # innermost first
        if os.path.isdir(d) and not os.listdir(d):
            os.rmdir(d)


def main(argv=None):
    ap = cli_util.ArgumentParser(description="OpenWebText -> llm.c token shards")
    ap.add_argument("--out-dir", default="data/openwebtext", help="output directory (default data/openwebtext)")
    ap.add_argument("--name", default="openwebtext", help="shard file name prefix (default openwebtext)")
    ap.add_argument("--local", default=None,
                    help="read local .txt / .jsonl file or directory instead of the hub")
    ap.add_argument("--vocab-dir", default=None,
                    help="directory with encoder.json + vocab.bpe (offline); default: tiktoken registry")
    ap.add_argument("--shard-size", type=int_in(1, SHARD_TOKENS_MAX), default=100_000_000, help="tokens per shard (default 100M)")
    ap.add_argument("--val-docs", type=int_in(0, 2 ** 62), default=0,
                    help="documents in the val shard (default 0: the first --shard-size tokens, as in llm.c)")
    ap.add_argument("--workers", type=int_in(1, 1024), default=max(1, (os.cpu_count() or 2) - 1),
                    help="tokenizer processes (default: cores - 1)")
    ap.add_argument("--chunksize", type=int_in(1, 1 << 20), default=16, help="documents per task handed to a worker (default 16)")
    ap.add_argument("--streaming", action="store_true", help="hub only: stream instead of downloading first")
    ap.add_argument("--load-proc", type=int_in(1, 1024), default=8, help="hub only: processes for the download/prepare step")
    ap.add_argument("--overwrite", action="store_true", help="replace the shards of an earlier run of this --name in --out-dir")
    ap.add_argument("--progress-every", type=cli_util.nonnegative_float, default=30.0,
                    help="seconds between progress lines when not on a terminal (0 = none; default 30)")
    args = ap.parse_args(argv)

    if not args.name or os.sep in args.name:
        die(f"--name: expected a file name prefix without '{os.sep}', found '{args.name}'")
    check_shard_size(args.shard_size)
    made = check_out_dir(args.out_dir)
    old = refuse_existing_shards(args.out_dir, args.name, args.overwrite)

    total = None  # documents, when the source knows them (a downloaded dataset): the ETA
    if args.local is not None:
        docs = iter_local_documents(local_files(args.local))
    else:
        ds = open_hub_dataset(args.streaming, args.load_proc)
        try:
            total = len(ds)
        except TypeError:  # a stream
            total = None
        docs = iter_hub_documents(ds)
    get_encoding(args.vocab_dir)  # fail here, once, rather than in every worker

    writer = ShardWriter(args.out_dir, args.name, args.shard_size, val_exact=(args.val_docs == 0))
    n_docs = 0
    progress = Progress("tokenizing", total, args.progress_every)
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
                    progress.update(tokens.size)
    except BaseException:  # a bad line, a full disk, ^C: no shard of a half-done run stays
        progress.close()
        remove_output(writer.paths, made)
        raise
    progress.close()
    if n_docs == 0:
        remove_output(writer.paths, made)
        die(f"input: expected documents, found none in {args.local or HF_DATASET}")
    if n_docs <= args.val_docs:
        remove_output(writer.paths, made)
        die(f"input: found {n_docs} document(s), need more than --val-docs {args.val_docs} "
            f"so that some go to train")
    paths = writer.close()
    if len(paths) < 2:
        remove_output(paths, made)
        die(f"input: found only {writer.val_tokens:,} tokens, all of which fit in the val shard "
            f"(hint: lower --shard-size, or pass --val-docs)")
    remove_stale_shards(old, paths)
    print(f"{n_docs:,} documents: val {writer.val_tokens:,} tokens, "
          f"train {writer.train_tokens:,} tokens in {len(paths) - 1} shard(s)")
    return 0


if __name__ == "__main__":
    cli_util.run(main)
