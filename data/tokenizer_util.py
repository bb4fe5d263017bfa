"""Shared helpers for the dataset scripts: the GPT-2 tokenizer and the llm.c shard format.

Tokenizer: GPT-2 BPE through tiktoken, either from tiktoken's registry (downloads the two
vocabulary files on first use) or offline from a directory holding encoder.json and vocab.bpe
(the exact files tiktoken pins by sha256; ../shared/tokenizer/gpt2 next to the repository).

Shard format (llm.c): a header of 256 int32 -- [0] magic 20240520, [1] version 1, [2] token
count, the rest 0 -- then `count` uint16 tokens. Every document is preceded by EOT (50256).
"""
import os
import sys

import numpy as np

SHARD_MAGIC = 20240520
SHARD_VERSION = 1
SHARD_HEADER_INTS = 256
SHARD_HEADER_BYTES = SHARD_HEADER_INTS * 4
EOT = 50256                 # <|endoftext|>, placed before every document
GPT2_VOCAB_SIZE = 50257

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_VOCAB_DIR = os.path.normpath(os.path.join(REPO_ROOT, "..", "shared", "tokenizer", "gpt2"))

# sha256 of the two files as pinned by tiktoken's registry entry for "gpt2"
VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"

# GPT-2's pre-tokenization regex. Prefer tiktoken's own copy so offline and registry encodings
# are identical; the literal is the original GPT-2 pattern for older tiktoken releases.
try:
    from tiktoken_ext.openai_public import r50k_pat_str as GPT2_PAT_STR
except ImportError:  # pragma: no cover
    GPT2_PAT_STR = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def die(msg):
    """Bad user input: one line on stderr, exit code 1."""
    sys.stdout.flush()
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def get_encoding(vocab_dir=None):
    """The GPT-2 tiktoken Encoding: offline from vocab_dir, else from tiktoken's registry."""
    try:
        import tiktoken
    except ImportError:
        die("the GPT-2 tokenizer needs the tiktoken package, which is not installed (hint: pip install tiktoken)")
    if vocab_dir is None:
        try:
            return tiktoken.get_encoding("gpt2")
        except Exception as e:  # network or cache failure
            die(f"cannot load the GPT-2 tokenizer from tiktoken's registry ({type(e).__name__}); "
                f"hint: pass --vocab-dir {DEFAULT_VOCAB_DIR} to load it offline")
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    bpe_path = os.path.join(vocab_dir, "vocab.bpe")
    json_path = os.path.join(vocab_dir, "encoder.json")
    for p in (bpe_path, json_path):
        if not os.path.isfile(p):
            die(f"--vocab-dir: expected GPT-2 file '{p}', not found "
                f"(hint: the offline copy lives in {DEFAULT_VOCAB_DIR})")
    try:
        ranks = data_gym_to_mergeable_bpe_ranks(
            vocab_bpe_file=bpe_path, encoder_json_file=json_path,
            vocab_bpe_hash=VOCAB_BPE_SHA256, encoder_json_hash=ENCODER_JSON_SHA256)
    except ValueError as e:
        die(f"--vocab-dir: '{vocab_dir}' does not hold the GPT-2 files tiktoken pins "
            f"(sha256 mismatch: {str(e).splitlines()[0]})")
    return tiktoken.Encoding(
        name="gpt2_offline",
        pat_str=GPT2_PAT_STR,
        mergeable_ranks=ranks,
        special_tokens={"<|endoftext|>": EOT},
        explicit_n_vocab=GPT2_VOCAB_SIZE,
    )


def tokens_with_eot(ids):
    """EOT followed by the given token ids, as uint16."""
    out = np.empty(len(ids) + 1, dtype=np.uint16)
    out[0] = EOT
    out[1:] = ids
    return out


def encode_document(enc, text):
    """EOT followed by the document's tokens, as uint16. Special-token text inside a document
    is encoded as ordinary text, never as EOT."""
    return tokens_with_eot(enc.encode_ordinary(text))


def write_shard(path, tokens):
    """Write one llm.c shard. Written to a temporary name and renamed, so an interrupted run
    never leaves a half-written shard under the final name."""
    tokens = np.asarray(tokens)
    assert tokens.ndim == 1
    assert tokens.size == 0 or int(tokens.max()) < 2**16, "token id does not fit in uint16"
    header = np.zeros(SHARD_HEADER_INTS, dtype=np.int32)
    header[0] = SHARD_MAGIC
    header[1] = SHARD_VERSION
    header[2] = tokens.size
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(header.tobytes())
            f.write(tokens.astype(np.uint16).tobytes())
        os.replace(tmp, path)
    except BaseException:  # a full disk: no half shard under either name
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def read_shard(path):
    """Read an llm.c shard back as a uint16 array (checks magic, version and size)."""
    with open(path, "rb") as f:
        data = f.read()
    header = np.frombuffer(data[:SHARD_HEADER_BYTES], dtype=np.int32)
    assert header.size == SHARD_HEADER_INTS, f"{path}: shorter than the header"
    assert header[0] == SHARD_MAGIC, f"{path}: magic {header[0]}"
    assert header[1] == SHARD_VERSION, f"{path}: version {header[1]}"
    count = int(header[2])
    assert len(data) == SHARD_HEADER_BYTES + 2 * count, f"{path}: size {len(data)} vs count {count}"
    return np.frombuffer(data[SHARD_HEADER_BYTES:], dtype=np.uint16)


def existing_shards(out_dir, name):
    """The shards {name}_val_*.bin and {name}_train_*.bin already in out_dir, sorted ([] when it
    does not exist): an earlier run's, which a new run must not mix with its own."""
    import glob
    return sorted(glob.glob(os.path.join(glob.escape(out_dir), f"{glob.escape(name)}_val_*.bin")) +
                  glob.glob(os.path.join(glob.escape(out_dir), f"{glob.escape(name)}_train_*.bin")))


def refuse_existing_shards(out_dir, name, overwrite):
    """One error line when out_dir holds shards of this name and --overwrite was not given; the
    list of them otherwise (removed after the new run, where it did not write them again)."""
    old = existing_shards(out_dir, name)
    if old and not overwrite:
        die(f"--out-dir: '{out_dir}' holds {len(old)} shard(s) named {name}_* of an earlier run "
            f"({os.path.basename(old[0])}{', ...' if len(old) > 1 else ''}); pass --overwrite to replace them, "
            f"or another --out-dir or --name")
    return old


def remove_stale_shards(old, written):
    """The earlier run's shards the new run did not write again, removed (a glob of the directory
    would read them as this data's); prints how many."""
    stale = [p for p in old if p not in set(written)]
    for p in stale:
        os.remove(p)
    if stale:
        print(f"removed {len(stale)} shard(s) of an earlier run that this one did not write again")


# A run reads a shard only if it holds one micro-batch, B*T tokens, plus the last one's target:
# 2 tokens at the least (-b 1 -t 1), and 257 for the smallest preset at its own sequence length
# (tiny, T 256, at -b 1).
MIN_SHARD_TOKENS = 2
PRESET_SHARD_TOKENS = 257


def check_shard_size(n):
    """--shard-size: refused below what any run can read; a warning, before anything is written,
    below what the smallest preset reads at its own sequence length, naming the runs that can."""
    if n < MIN_SHARD_TOKENS:
        die(f"--shard-size: expected at least {MIN_SHARD_TOKENS} tokens (a run reads a shard of at least -b * -t * ranks + 1 tokens), found {n}")
    if n < PRESET_SHARD_TOKENS:
        print(f"warning: --shard-size {n}: only runs with -b * -t * ranks <= {n - 1} can read these shards (the smallest preset, tiny, "
              f"needs {PRESET_SHARD_TOKENS} tokens at its own -t 256 and -b 1)", file=sys.stderr, flush=True)


def check_out_dir(path):
    """--out-dir: a directory, or a path whose nearest existing ancestor is a writable directory
    (the missing ones are made at the first shard). Returns the directories that will be made."""
    if not path:
        die("--out-dir: expected a directory name, found ''")
    missing, d = [], os.path.abspath(path)
    while not os.path.exists(d):
        missing.append(d)
        d = os.path.dirname(d)
    if not os.path.isdir(d):
        die(f"--out-dir: '{d}' is not a directory (expected a directory for '{path}')")
    if not os.access(d, os.W_OK | os.X_OK):
        die(f"--out-dir: cannot write into '{d}' (permission denied)")
    return missing


class ShardWriter:
    """Collects document token arrays and writes {out_dir}/{name}_{split}_{index:06d}.bin.

    Shard 0 is validation. By default it takes whole documents until the caller calls
    end_val(); with val_exact=True it is instead filled with exactly shard_size tokens, as in
    llm.c's dataset scripts. Train shards (index 1, 2, ...) hold exactly shard_size tokens each
    (the last one fewer); a document that crosses a shard boundary continues in the next shard.
    """

    def __init__(self, out_dir, name, shard_size, val_exact=False):
        assert shard_size > 0
        self.out_dir, self.name, self.shard_size = out_dir, name, shard_size
        self.val_exact = val_exact
        self.index = 0              # index of the shard being filled; 0 = val
        self.parts, self.count = [], 0
        self.val_tokens = 0
        self.train_tokens = 0
        self.paths = []

    def _path(self):
        split = "val" if self.index == 0 else "train"
        return os.path.join(self.out_dir, f"{self.name}_{split}_{self.index:06d}.bin")

    def _flush(self):
        path = self._path()
        tokens = np.concatenate(self.parts) if self.parts else np.zeros(0, dtype=np.uint16)
        os.makedirs(self.out_dir, exist_ok=True)
        write_shard(path, tokens)
        self.paths.append(path)
        if self.index == 0:
            self.val_tokens = tokens.size
        else:
            self.train_tokens += tokens.size
        print(f"wrote {path}: {tokens.size:,} tokens")
        self.index += 1
        self.parts, self.count = [], 0

    def add(self, doc_tokens):
        if self.index == 0 and not self.val_exact:
            self.parts.append(doc_tokens)
            self.count += doc_tokens.size
            return
        while doc_tokens.size > 0:
            take = min(self.shard_size - self.count, doc_tokens.size)
            self.parts.append(doc_tokens[:take])
            self.count += take
            doc_tokens = doc_tokens[take:]
            if self.count == self.shard_size:
                self._flush()

    def end_val(self):
        """Close the val shard (whole-document mode)."""
        assert self.index == 0 and not self.val_exact
        self._flush()

    def close(self):
        """Write what is left; returns the list of shard paths written."""
        if self.count > 0 or self.index == 0:
            self._flush()
        return self.paths


class Progress:
    """Data preparation's progress: documents and tokens per second, and the ETA when the number
    of documents is known. On a terminal a tqdm bar on stderr (where tqdm is installed); else (a
    log file, a Slurm job's output) one plain line on stdout every `every` seconds. every <= 0: off.

      progress = Progress("tokenizing", total_docs)   # total_docs: None when unknown
      progress.update(tokens.size)                    # once per document
      progress.close()
    """

    def __init__(self, what, total=None, every=30.0):
        import time
        self.what, self.total, self.every, self.clock = what, total, every, time.monotonic
        self.docs = self.tokens = 0
        self.start = self.last = self.clock()
        self.bar = None
        if every > 0 and sys.stderr.isatty():
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, desc=what, unit=" docs", unit_scale=True, mininterval=0.5, file=sys.stderr)
            except ImportError:
                pass

    def line(self):
        elapsed = max(self.clock() - self.start, 1e-9)
        docs_s, tok_s = self.docs / elapsed, self.tokens / elapsed
        text = f"{self.what}: {self.docs:,} document{'' if self.docs == 1 else 's'}"
        if self.total:
            text += f" of {self.total:,} ({100.0 * self.docs / self.total:.1f}%)"
        text += f", {self.tokens:,} tokens, {docs_s:,.0f} documents/s, {tok_s:,.0f} tokens/s, {elapsed:.0f} s"
        if self.total and docs_s > 0:
            text += f", ETA {max(self.total - self.docs, 0) / docs_s:.0f} s"
        return text

    def update(self, tokens):
        self.docs += 1
        self.tokens += int(tokens)
        if self.bar is not None:
            self.bar.update(1)
            if self.docs % 1024 == 0:
                self.bar.set_postfix_str(f"{self.tokens / max(self.clock() - self.start, 1e-9):,.0f} tokens/s", refresh=False)
        elif self.every > 0 and self.clock() - self.last >= self.every:
            self.last = self.clock()
            print(self.line(), flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None

