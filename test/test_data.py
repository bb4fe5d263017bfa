"""Tests for the dataset scripts in data/ (numpy + tiktoken only; no pytest).

Prints "PASS name" / "FAIL name: detail" / "SKIP name: reason" lines and exits 1 on any
failure. The GPT-2 tokenizer comes from ../shared/tokenizer/gpt2 when present (offline),
else from tiktoken's registry; tests that need it skip when neither is available.

    python3 test/test_data.py
"""
import json
import os
import shutil
import random
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "data")
sys.path.insert(0, DATA)
import tokenizer_util as tu  # noqa: E402
sys.path.insert(0, os.path.join(REPO, "test"))
import testlib  # noqa: E402

VOCAB_DIR = tu.DEFAULT_VOCAB_DIR if os.path.isdir(tu.DEFAULT_VOCAB_DIR) else None
KJV_TXT = os.path.normpath(os.path.join(REPO, "..", "shared", "corpus", "kjv.txt"))
KJV_DIR = os.path.join(DATA, "kjv")

failed = 0


def check(name, ok, detail=""):
    global failed
    if ok:
        print(f"PASS {name}")
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")
    sys.stdout.flush()


def skip(name, reason):
    print(f"SKIP {name}: {reason}")
    sys.stdout.flush()


def load_encoding():
    try:
        return tu.get_encoding(VOCAB_DIR)
    except SystemExit:  # registry unreachable; get_encoding printed why
        return None


def run_script(script, *args):
    """Runs data/<script> with the tokenizer source; returns (returncode, stdout, stderr)."""
    cmd = [sys.executable, os.path.join(DATA, script), *args]
    if VOCAB_DIR is not None:
        cmd += ["--vocab-dir", VOCAB_DIR]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def shard_header(path):
    with open(path, "rb") as f:
        return np.frombuffer(f.read(tu.SHARD_HEADER_BYTES), dtype=np.int32)


def expected_stream(enc, docs):
    return np.concatenate([tu.encode_document(enc, d) for d in docs])


def split_on_eot(tokens):
    """Documents of a shard: token runs after each EOT (the shard must start with EOT)."""
    idx = np.flatnonzero(tokens == tu.EOT)
    bounds = list(idx) + [tokens.size]
    return [tokens[bounds[i] + 1:bounds[i + 1]] for i in range(len(idx))]


def is_one_error_line(stderr):
    return stderr.startswith("error: ") and stderr.endswith("\n") and stderr.count("\n") == 1


# ----------------------------------------------------------------------------

def test_tokenizer(enc):
    cases = [
        ("hello_world", "Hello world", [15496, 995]),
        ("space_the", " the", [262]),
        ("punctuation_newline", "Hello, world!\n", [15496, 11, 995, 0, 198]),
        ("multi_token_word", " tokenization", [11241, 1634]),
    ]
    for name, text, ids in cases:
        got = enc.encode_ordinary(text)
        check(f"tokenizer_encode_{name}", got == ids, f"{text!r} -> {got}, expected {ids}")
    check("tokenizer_eot", enc.eot_token == tu.EOT and enc.n_vocab == tu.GPT2_VOCAB_SIZE and
          enc.encode("<|endoftext|>", allowed_special="all") == [tu.EOT],
          f"eot {enc.eot_token} n_vocab {enc.n_vocab}")
    # special-token text inside a document stays ordinary text
    check("tokenizer_encode_document_ordinary",
          list(tu.encode_document(enc, "a<|endoftext|>b")).count(tu.EOT) == 1, "EOT inside document text")


def test_tokenizer_table(enc):
    path = os.path.join(DATA, "gpt2_tokenizer.bin")
    if not os.path.exists(path):
        check("tokenizer_table_exists", False, f"{path} missing (run data/make_tokenizer_table.py)")
        return
    with open(path, "rb") as f:
        data = f.read()
    header = np.frombuffer(data[:1024], dtype=np.uint32)
    ok = header[0] == 20240328 and header[1] == 2 and header[2] == 50257 and header[3] == 50256
    check("tokenizer_table_header", ok, f"header {header[:4]}")
    pos, pieces = 1024, []
    while pos < len(data):
        n = data[pos]
        pieces.append(data[pos + 1:pos + 1 + n])
        pos += 1 + n
    check("tokenizer_table_entries", len(pieces) == 50257 and pos == len(data), f"{len(pieces)} entries")
    ids = [0, 11, 198, 262, 995, 15496, 31373, 50255, 50256]
    bad = [i for i in ids if i < len(pieces) and pieces[i] != enc.decode_single_token_bytes(i)]
    check("tokenizer_table_bytes", not bad and pieces[15496] == b"Hello" and pieces[50256] == b"<|endoftext|>",
          f"mismatched ids {bad}")
    # the committed table is exactly what the script writes now
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "t.bin")
        rc, _, err = run_script("make_tokenizer_table.py", "--out", out)
        same = rc == 0 and open(out, "rb").read() == data
        check("tokenizer_table_regenerates_identically", same, f"rc {rc} {err.strip()}")


def test_prepare_text(enc, tmp):
    paras = [
        "The first paragraph has a few words in it.",
        "Second paragraph: numbers 12345 and punctuation!?",
        "Third one.\nIt spans two lines.",
        "Fourth paragraph, the last, with unicode: caf\u00e9 \u2014 na\u00efve.",
    ]
    src = os.path.join(tmp, "in.txt")
    with open(src, "w", encoding="utf-8") as f:
        f.write("\n\n".join(paras) + "\n")
    sizes = [len(enc.encode_ordinary(p)) + 1 for p in paras]

    # blank-line split; val target just over the first document: val = doc 0 only
    out = os.path.join(tmp, "blank")
    rc, so, se = run_script("prepare_text.py", src, "--out-dir", out, "--name", "t",
                            "--doc-split", "blank", "--val-tokens", str(sizes[0] + 2))
    val_path, train_path = os.path.join(out, "t_val_000000.bin"), os.path.join(out, "t_train_000001.bin")
    check("prepare_text_runs", rc == 0 and os.path.exists(val_path) and os.path.exists(train_path),
          f"rc {rc} stderr {se.strip()}")
    if rc != 0:
        return
    h = shard_header(val_path)
    val, train = tu.read_shard(val_path), tu.read_shard(train_path)
    check("prepare_text_header", h[0] == 20240520 and h[1] == 1 and h[2] == val.size and
          os.path.getsize(val_path) == 1024 + 2 * val.size and not h[3:].any(), f"header {h[:4]}")
    check("prepare_text_val_first_doc", np.array_equal(val, expected_stream(enc, paras[:1])),
          f"val {val.size} tokens")
    check("prepare_text_train_rest", np.array_equal(train, expected_stream(enc, paras[1:])),
          f"train {train.size} tokens")
    decoded = enc.decode(np.concatenate([val, train]).tolist())
    check("prepare_text_decodes_to_input", decoded == "".join("<|endoftext|>" + p for p in paras),
          repr(decoded[:80]))
    check("prepare_text_prints_counts", f"val {val.size:,} tokens" in so and f"train {train.size:,} tokens" in so,
          so.strip())

    # progress: a line per --progress-every seconds off a terminal (here every document), with
    # the rates and the ETA (the number of documents is known); none with 0
    out = os.path.join(tmp, "progress")
    rc, so, se = run_script("prepare_text.py", src, "--out-dir", out, "--name", "t", "--doc-split", "blank",
                            "--progress-every", "1e-9")
    lines = [l for l in so.splitlines() if l.startswith("tokenizing: ")]
    check("prepare_text_progress_lines", rc == 0 and len(lines) == 4 and lines[0].startswith("tokenizing: 1 document of 4 (25.0%), ")
          and lines[-1].startswith("tokenizing: 4 documents of 4 (100.0%), ") and all("tokens/s" in l and "ETA" in l for l in lines),
          f"rc {rc} {lines} {se.strip()}")
    rc, so, se = run_script("prepare_text.py", src, "--out-dir", os.path.join(tmp, "progress0"), "--name", "t", "--doc-split", "blank",
                            "--progress-every", "0")
    check("prepare_text_progress_off", rc == 0 and "tokenizing:" not in so, so)

    # a second run into the same --out-dir and --name: refused, nothing changed (before: the
    # earlier run's extra train shards stayed beside the new ones, and a glob read both);
    # --overwrite replaces them and removes the ones it did not write again
    out = os.path.join(tmp, "again")
    run_script("prepare_text.py", src, "--out-dir", out, "--name", "t", "--doc-split", "blank", "--val-tokens", "1", "--shard-size", "7")
    before = {n: open(os.path.join(out, n), "rb").read() for n in os.listdir(out)}
    rc, so, se = run_script("prepare_text.py", src, "--out-dir", out, "--name", "t", "--doc-split", "blank", "--val-tokens", "1")
    after = {n: open(os.path.join(out, n), "rb").read() for n in os.listdir(out)}
    check("prepare_text_refuses_earlier_shards", rc == 1 and is_one_error_line(se) and f"--out-dir: '{out}' holds {len(before)} shard(s) named t_*" in se
          and "pass --overwrite" in se and before == after and len(before) > 2, f"rc {rc} {se!r} {len(before)} files")
    rc, so, se = run_script("prepare_text.py", src, "--out-dir", out, "--name", "t", "--doc-split", "blank", "--val-tokens", "1", "--overwrite")
    names = sorted(os.listdir(out))
    check("prepare_text_overwrite_removes_stale_shards", rc == 0 and names == ["t_train_000001.bin", "t_val_000000.bin"] and
          f"removed {len(before) - 2} shard(s) of an earlier run" in so, f"rc {rc} {names} {se.strip()}")

    # val takes whole documents: a target in the middle of doc 1 rounds to the nearer boundary
    out = os.path.join(tmp, "valsel")
    target = sizes[0] + sizes[1] * 3 // 4
    rc, _, se = run_script("prepare_text.py", src, "--out-dir", out, "--name", "t",
                           "--doc-split", "blank", "--val-tokens", str(target))
    val = tu.read_shard(os.path.join(out, "t_val_000000.bin")) if rc == 0 else np.zeros(0)
    check("prepare_text_val_whole_documents", rc == 0 and np.array_equal(val, expected_stream(enc, paras[:2])),
          f"rc {rc} val {val.size} tokens, doc sizes {sizes}")

    # train shards of --shard-size tokens, documents continuing across shard boundaries
    out = os.path.join(tmp, "sharded")
    rc, _, se = run_script("prepare_text.py", src, "--out-dir", out, "--name", "t",
                           "--doc-split", "blank", "--val-tokens", "1", "--shard-size", "7")
    files = sorted(os.listdir(out)) if rc == 0 else []
    train_files = [f for f in files if "_train_" in f]
    parts = [tu.read_shard(os.path.join(out, f)) for f in train_files]
    n_train = sum(sizes[1:])
    check("prepare_text_shard_size",
          rc == 0 and files[0] == "t_train_000001.bin" and "t_val_000000.bin" in files and
          all(p.size == 7 for p in parts[:-1]) and 0 < parts[-1].size <= 7 and len(parts) == -(-n_train // 7) and
          np.array_equal(np.concatenate(parts), expected_stream(enc, paras[1:])),
          f"rc {rc} files {files}")

    # --doc-split file: every file one document, in argument order (globs sorted)
    a, b, c = (os.path.join(tmp, n) for n in ("b_doc.txt", "a_doc.txt", "c_doc.txt"))
    texts = {a: "File B text.\n\nStill file B.", b: "File A text.", c: "File C."}
    for p, t in texts.items():
        with open(p, "w") as f:
            f.write(t + "\n")
    out = os.path.join(tmp, "filesplit")
    rc, _, se = run_script("prepare_text.py", a, os.path.join(tmp, "[ac]_doc.txt"), "--out-dir", out,
                           "--name", "f", "--doc-split", "file", "--val-tokens", "1")
    ok = rc == 0
    if ok:
        stream = np.concatenate([tu.read_shard(os.path.join(out, "f_val_000000.bin")),
                                 tu.read_shard(os.path.join(out, "f_train_000001.bin"))])
        ok = np.array_equal(stream, expected_stream(enc, [texts[a], texts[b], texts[c]]))
    check("prepare_text_doc_split_file", ok, f"rc {rc} {se.strip()}")

    # --doc-split regex: split before headings, keeping them (lookahead)
    src2 = os.path.join(tmp, "headings.txt")
    with open(src2, "w") as f:
        f.write("preface line\n## One\nalpha\n## Two\nbeta\n## Three\ngamma\n")
    out = os.path.join(tmp, "regex")
    rc, _, se = run_script("prepare_text.py", src2, "--out-dir", out, "--name", "r",
                           "--doc-split", "regex:^(?=## )", "--val-tokens", "1")
    ok = rc == 0
    if ok:
        stream = np.concatenate([tu.read_shard(os.path.join(out, "r_val_000000.bin")),
                                 tu.read_shard(os.path.join(out, "r_train_000001.bin"))])
        docs = ["preface line", "## One\nalpha", "## Two\nbeta", "## Three\ngamma"]
        ok = np.array_equal(stream, expected_stream(enc, docs))
    check("prepare_text_doc_split_regex", ok, f"rc {rc} {se.strip()}")


def test_prepare_text_errors(tmp):
    missing = os.path.join(tmp, "does_not_exist.txt")
    out = os.path.join(tmp, "err_out")
    # --out-dir an existing file: one line, from the shared runner, before any tokenizing (before:
    # a FileExistsError traceback after the whole input was tokenized)
    src = os.path.join(tmp, "two_docs.txt")
    with open(src, "w") as f:
        f.write("one document.\n\nanother document.\n")
    a_file = os.path.join(tmp, "a_plain_file")
    with open(a_file, "w") as f:
        f.write("x")
    rc, so, se = run_script("prepare_text.py", src, "--out-dir", a_file, "--name", "e", "--doc-split", "blank", "--progress-every", "1e-9")
    check("prepare_text_error_out_dir_is_a_file", rc == 1 and is_one_error_line(se) and f"--out-dir: '{a_file}' is not a directory" in se
          and "tokenizing" not in so, f"rc {rc} stdout {so!r} stderr {se!r}")
    # --shard-size 1: no run reads a shard of 1 token; refused, nothing written. Below the smallest
    # preset's 257: a warning naming the runs that can read it, before the first shard
    rc, _, se = run_script("prepare_text.py", src, "--out-dir", out, "--name", "e", "--doc-split", "blank", "--shard-size", "1")
    check("prepare_text_error_shard_size_one", rc == 1 and is_one_error_line(se) and "--shard-size: expected at least 2 tokens" in se
          and not os.path.exists(out), f"rc {rc} stderr {se!r}")
    rc, so, se = run_script("prepare_text.py", src, "--out-dir", out, "--name", "e", "--doc-split", "blank", "--shard-size", "100")
    check("prepare_text_small_shard_size_warns", rc == 0 and "warning: --shard-size 100: only runs with -b * -t * ranks <= 99 can read" in se
          and so.startswith("wrote"), f"rc {rc} stderr {se!r}")
    shutil.rmtree(out, ignore_errors=True)
    # val taking most of the input (the default --val-tokens 65536 on a small input): a warning
    # before the first shard is written
    many = os.path.join(tmp, "many_docs.txt")
    with open(many, "w") as f:
        f.write("\n\n".join(f"Document number {i} has a few words." for i in range(40)) + "\n")
    rc, so, se = run_script("prepare_text.py", many, "--out-dir", out, "--name", "e", "--doc-split", "blank")
    check("prepare_text_val_takes_most_warns", rc == 0 and "warning: --val-tokens 65,536: the val shard takes " in se
          and "(39 of 40 documents)" in se and so.startswith("wrote"), f"rc {rc} stdout {so[:200]!r} stderr {se!r}")
    shutil.rmtree(out, ignore_errors=True)
    rc, _, se = run_script("prepare_text.py", missing, "--out-dir", out, "--name", "e")
    check("prepare_text_error_missing_file", rc == 1 and is_one_error_line(se) and missing in se and
          not os.path.exists(out), f"rc {rc} stderr {se!r}")

    rc, _, se = run_script("prepare_text.py", os.path.join(tmp, "nomatch_*.txt"), "--out-dir", out, "--name", "e")
    check("prepare_text_error_no_glob_match", rc == 1 and is_one_error_line(se) and "nomatch_*.txt" in se,
          f"rc {rc} stderr {se!r}")

    blank = os.path.join(tmp, "blank.txt")
    with open(blank, "w") as f:
        f.write("\n   \n\n")
    rc, _, se = run_script("prepare_text.py", blank, "--out-dir", out, "--name", "e")
    check("prepare_text_error_empty_input", rc == 1 and is_one_error_line(se) and blank in se and
          not os.path.exists(out), f"rc {rc} stderr {se!r}")

    one = os.path.join(tmp, "one_doc.txt")
    with open(one, "w") as f:
        f.write("only one document\n")
    rc, _, se = run_script("prepare_text.py", one, "--out-dir", out, "--name", "e")
    check("prepare_text_error_single_document", rc == 1 and is_one_error_line(se) and "--doc-split" in se,
          f"rc {rc} stderr {se!r}")

    rc, _, se = run_script("prepare_text.py", one, "--out-dir", out, "--name", "e", "--doc-split", "lines")
    check("prepare_text_error_bad_doc_split", rc == 1 and is_one_error_line(se) and "--doc-split" in se,
          f"rc {rc} stderr {se!r}")

    rc, _, se = run_script("prepare_text.py", one, "--out-dir", out, "--name", "e", "--doc-split", "regex:(")
    check("prepare_text_error_bad_regex", rc == 1 and is_one_error_line(se) and "--doc-split" in se,
          f"rc {rc} stderr {se!r}")


def make_owt_docs(n):
    rng = np.random.default_rng(1337)
    words = ["alpha", "beta", "gamma", "delta", "news", "river", "Paris", "2019", "isn't", "\u00e9t\u00e9",
             "the", "of", "and", "data", "model", ",", ".", "!", "\n"]
    return [" ".join(rng.choice(words, size=int(rng.integers(5, 80)))) for _ in range(n)]


def test_openwebtext(enc, tmp):
    docs = make_owt_docs(300)
    src = os.path.join(tmp, "owt.jsonl")
    with open(src, "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d, "id": 0}) + "\n")
    ref = expected_stream(enc, docs)
    shard = 1000

    # llm.c layout: val = the first shard_size tokens, then train shards of shard_size
    out = os.path.join(tmp, "owt")
    rc, so, se = run_script("openwebtext.py", "--local", src, "--out-dir", out,
                            "--workers", "2", "--chunksize", "4", "--shard-size", str(shard), "--progress-every", "1e-9")
    # progress off a terminal: a line per document here, rates but no ETA (a local file's
    # number of documents is not known ahead)
    lines = [l for l in so.splitlines() if l.startswith("tokenizing: ")]
    check("openwebtext_progress_lines", rc == 0 and len(lines) == 300 and lines[-1].startswith("tokenizing: 300 documents, ") and
          "documents/s" in lines[-1] and "tokens/s" in lines[-1] and "ETA" not in lines[-1], f"rc {rc} {len(lines)} lines {lines[-1:]}")
    files = sorted(os.listdir(out)) if os.path.isdir(out) else []
    ok = rc == 0 and files and files[-1] == "openwebtext_val_000000.bin" and files[0] == "openwebtext_train_000001.bin"
    check("openwebtext_local_runs", ok, f"rc {rc} files {files[:3]} stderr {se.strip()}")
    if not ok:
        return
    order = ["openwebtext_val_000000.bin"] + [f for f in files if "_train_" in f]
    parts = [tu.read_shard(os.path.join(out, f)) for f in order]
    stream = np.concatenate(parts)
    check("openwebtext_token_count", stream.size == ref.size and len(parts) == -(-ref.size // shard),
          f"{stream.size} tokens in {len(parts)} shards, expected {ref.size}")
    check("openwebtext_shard_sizes", all(p.size == shard for p in parts[:-1]) and 0 < parts[-1].size <= shard,
          f"sizes {[p.size for p in parts]}")
    check("openwebtext_matches_single_process", np.array_equal(stream, ref), "tokens differ from a direct encode")
    check("openwebtext_names_in_order", order[1:] == [f"openwebtext_train_{i:06d}.bin" for i in range(1, len(parts))],
          f"{order}")

    # the same --out-dir again: refused naming the earlier shards; --overwrite with larger shards
    # leaves only the new ones
    rc, _, se = run_script("openwebtext.py", "--local", src, "--out-dir", out, "--workers", "2", "--shard-size", str(shard))
    check("openwebtext_refuses_earlier_shards", rc == 1 and is_one_error_line(se) and f"holds {len(files)} shard(s) named openwebtext_*" in se
          and sorted(os.listdir(out)) == files, f"rc {rc} {se!r}")
    rc, so, se = run_script("openwebtext.py", "--local", src, "--out-dir", out, "--workers", "2", "--shard-size", str(4 * shard), "--overwrite")
    left = sorted(os.listdir(out))
    check("openwebtext_overwrite_removes_stale_shards", rc == 0 and len(left) == -(-ref.size // (4 * shard)) and
          np.array_equal(np.concatenate([tu.read_shard(os.path.join(out, f)) for f in ["openwebtext_val_000000.bin"] + left[:-1]]), ref),
          f"rc {rc} {left} {se.strip()}")

    # --val-docs: the first N whole documents are val; a directory of .txt documents works too
    d = os.path.join(tmp, "owt_txt")
    os.makedirs(d)
    for i, doc in enumerate(docs[:40]):
        with open(os.path.join(d, f"doc_{i:03d}.txt"), "w") as f:
            f.write(doc)
    out = os.path.join(tmp, "owt2")
    rc, _, se = run_script("openwebtext.py", "--local", d, "--out-dir", out, "--workers", "2",
                           "--shard-size", "500", "--val-docs", "5")
    ok = rc == 0
    if ok:
        val = tu.read_shard(os.path.join(out, "openwebtext_val_000000.bin"))
        train = np.concatenate([tu.read_shard(os.path.join(out, f)) for f in sorted(os.listdir(out)) if "_train_" in f])
        ok = np.array_equal(val, expected_stream(enc, docs[:5])) and np.array_equal(train, expected_stream(enc, docs[5:40]))
    check("openwebtext_val_docs_txt_dir", ok, f"rc {rc} {se.strip()}")

    # a bad line after shards were already written: one error line and no shard left behind
    bad = os.path.join(tmp, "bad.jsonl")
    with open(bad, "w") as f:
        for doc in docs:
            f.write(json.dumps({"text": doc}) + "\n")
        f.write(json.dumps({"body": "no text"}) + "\n")
    out = os.path.join(tmp, "owt3")
    rc, so, se = run_script("openwebtext.py", "--local", bad, "--out-dir", out, "--workers", "2",
                            "--chunksize", "4", "--shard-size", "500")
    check("openwebtext_error_bad_jsonl", rc == 1 and is_one_error_line(se) and bad in se and
          f"line {len(docs) + 1}" in se and "wrote" in so and
          not (os.path.isdir(out) and os.listdir(out)), f"rc {rc} stderr {se!r}")


STUB_DATASETS = """import os
def load_dataset(name, **kw):  # stands in for the datasets package: the Hub cannot be reached
    open(os.environ["STUB_MARK"], "w").write(name)
    raise ConnectionError("Couldn't reach '%s' on the Hub (LocalEntryNotFoundError)\\nmore" % name)
"""


def test_openwebtext_offline(tmp):
    """Without network the hub path fails in seconds with one line and the hint (the cache with
    HF_DATASETS_OFFLINE=1, or --local); it writes nothing. A stand-in `datasets` module gets the
    script past its import, so that the probe of the hub is what is tested; it records whether
    load_dataset was reached."""
    stub = os.path.join(tmp, "stub")
    os.makedirs(stub)
    with open(os.path.join(stub, "datasets.py"), "w") as f:
        f.write(STUB_DATASETS)
    mark, out = os.path.join(tmp, "stub_called"), os.path.join(tmp, "owt_hub")
    listener = socket.socket()  # accepts connections (the kernel's backlog) and never answers
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    silent = f"http://127.0.0.1:{listener.getsockname()[1]}"
    refused = socket.socket()
    refused.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
    closed = f"http://127.0.0.1:{refused.getsockname()[1]}"
    hub_hint = "set HF_DATASETS_OFFLINE=1; else pass --local PATH"
    cases = [("hub_as_configured", {}, None, hub_hint),  # this machine's own network, whatever it is
             ("hub_refused", {"HF_ENDPOINT": closed}, f"cannot reach the Hugging Face hub to fetch Skylion007/openwebtext ({closed}: "
              "URLError: [Errno 111] Connection refused)", hub_hint),
             ("hub_silent", {"HF_ENDPOINT": silent}, f"({silent}: TimeoutError: timed out)", hub_hint),
             ("cache_miss", {"HF_DATASETS_OFFLINE": "1"}, "cannot load Skylion007/openwebtext from the Hugging Face cache "
              "(HF_DATASETS_OFFLINE is set) (ConnectionError: Couldn't reach", "or pass --local PATH")]
    must_reach = {"hub_refused": False, "hub_silent": False, "cache_miss": True}  # load_dataset called (the stub's mark)?
    for name, env_extra, want, hint in cases:
        env = {k: v for k, v in os.environ.items() if k not in ("HF_ENDPOINT", "HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")}
        env.update(env_extra, PYTHONPATH=stub, STUB_MARK=mark)
        if os.path.exists(mark):
            os.remove(mark)
        t = time.time()
        p = subprocess.run([sys.executable, os.path.join(DATA, "openwebtext.py"), "--out-dir", out], capture_output=True, text=True,
                           timeout=60, env=env)
        took = time.time() - t
        reached = os.path.exists(mark)
        check(f"openwebtext_offline_{name}_fails_fast ({took:.1f} s)", took < 20 and is_one_error_line(p.stderr) and p.returncode == 1 and
              (want is None or want in p.stderr) and hint in p.stderr and reached == must_reach.get(name, reached)
              and not os.path.exists(out), f"rc {p.returncode} stub reached {reached}: {p.stderr.strip()}")
    listener.close()
    refused.close()
    try:
        import datasets  # noqa: F401
    except ImportError:
        p = subprocess.run([sys.executable, os.path.join(DATA, "openwebtext.py"), "--out-dir", out], capture_output=True, text=True, timeout=60)
        check("openwebtext_offline_no_datasets_package", p.returncode == 1 and is_one_error_line(p.stderr) and
              "needs the `datasets` package" in p.stderr and "--local PATH" in p.stderr and not os.path.exists(out), p.stderr.strip())


def test_openwebtext_errors(tmp):
    """Bad arguments: one error line naming the flag, exit 1, nothing written."""
    a_file = os.path.join(tmp, "a_file")
    with open(a_file, "w") as f:
        f.write("x")
    src = os.path.join(tmp, "one.jsonl")
    with open(src, "w") as f:
        f.write('{"text": "a b c"}\n')
    out = os.path.join(tmp, "owt_err")
    for name, args, want in [("shard_size_zero", ["--shard-size", "0"], "error: argument --shard-size: expected an integer in [1, 2147483647], found 0"),
                             ("shard_size_float", ["--shard-size", "1e3"], "error: argument --shard-size: expected an integer, found '1e3'"),
                             ("shard_size_over_int32", ["--shard-size", "3000000000"], "error: argument --shard-size: expected an integer in [1, "),
                             ("shard_size_one", ["--shard-size", "1"], "error: --shard-size: expected at least 2 tokens"),
                             ("workers_zero", ["--workers", "0"], "error: argument --workers: expected an integer in [1, 1024], found 0"),
                             ("val_docs_negative", ["--val-docs=-1"], "error: argument --val-docs: expected an integer in [0, "),
                             ("unknown_flag", ["--bogus"], "error: unrecognized arguments: --bogus"),
                             ("out_dir_under_a_file", ["--out-dir", os.path.join(a_file, "x")], f"error: --out-dir: '{a_file}' is not a directory"),
                             ("out_dir_empty", ["--out-dir", ""], "error: --out-dir: expected a directory name, found ''")]:
        argv = ["--local", src, "--out-dir", out] + args
        before = testlib.tree_snapshot(tmp)
        p = subprocess.run([sys.executable, os.path.join(DATA, "openwebtext.py"), *argv], capture_output=True, text=True, timeout=60)
        check(f"openwebtext_refuses_{name}", p.returncode == 1 and is_one_error_line(p.stderr) and p.stderr.startswith(want) and
              testlib.tree_snapshot(tmp) == before, f"rc {p.returncode}: {p.stderr.strip()}")


def test_openwebtext_property(tmp):
    """30 seeded mutations of the arguments and the input lines: each run writes its shards or
    ends in one error line, exit 1, never a traceback, and a refused run leaves no shard (in
    process, as the command runs it; one tokenizer worker)."""
    import openwebtext
    rng = random.Random(29)
    docs = make_owt_docs(30)
    flags = ["--shard-size", "--val-docs", "--workers", "--chunksize", "--name", "--out-dir", "--local", "--vocab-dir"]
    bad = []
    for i in range(30):
        src = os.path.join(tmp, "prop", f"in_{i}.jsonl")
        os.makedirs(os.path.dirname(src), exist_ok=True)
        rows = [{"text": d} for d in docs]
        kind = rng.randrange(3)
        if kind == 0:
            rows[rng.randrange(len(rows))]["text"] = rng.choice(testlib.BAD_JSON_VALUES)
        elif kind == 1:
            rows[rng.randrange(len(rows))] = rng.choice(testlib.BAD_JSON_VALUES)
        data = "".join(json.dumps(r) + "\n" for r in rows).encode()
        if rng.random() < 0.2:
            data = data[:rng.randrange(len(data))] if rng.random() < 0.5 else data[:50] + b"\xff\xfe" + data[50:]
        with open(src, "wb") as f:
            f.write(data)
        out = os.path.join(tmp, "prop", f"out_{i}")
        argv = ["--local", src, "--out-dir", out, "--workers", "1", "--shard-size", "300"] + (["--vocab-dir", VOCAB_DIR] if VOCAB_DIR else [])
        if kind == 2:
            flag = rng.choice(flags)
            # relative paths only: --out-dir / would write shards there, --local / read the whole disk
            argv += [flag, rng.choice([v for v in testlib.BAD_ARGS + ["1", "3", "100"] if not v.startswith("/")])]
        before = testlib.tree_snapshot(tmp, skip=(os.path.relpath(out, tmp),))
        status, _, err = testlib.tool_in_process(openwebtext.main, argv, os.path.join(tmp, "prop"))
        after = testlib.tree_snapshot(tmp, skip=(os.path.relpath(out, tmp),))
        left = os.listdir(out) if os.path.isdir(out) else []
        if not testlib.property_verdict(status, err) or (status != 0 and left) or (after != before and argv[-2] != "--out-dir"):
            bad.append(f"{argv[6:]} kind {kind}: status {status}, left {left[:2]}: {err.strip()[-300:]}")
    check("openwebtext_property_no_traceback (30 mutations)", not bad, "; ".join(bad[:2]))


def test_kjv(enc):
    val_path = os.path.join(KJV_DIR, "kjv_val_000000.bin")
    train_path = os.path.join(KJV_DIR, "kjv_train_000001.bin")
    shards = {}
    for path in (val_path, train_path):
        name = os.path.basename(path)
        if not os.path.exists(path):
            check(f"kjv_{name}_valid", False, "missing (run data/make_default_dataset.sh)")
            continue
        h = shard_header(path)
        size = os.path.getsize(path)
        tokens = np.fromfile(path, dtype=np.uint16, offset=1024)
        ok = (h[0] == 20240520 and h[1] == 1 and size == 1024 + 2 * int(h[2]) and tokens.size == h[2] and
              tokens.size > 0 and tokens[0] == tu.EOT and int(tokens.max()) < 50257)
        check(f"kjv_{name}_valid", ok, f"header {h[:3]} size {size} max token {tokens.max() if tokens.size else None}")
        shards[path] = tokens
    if len(shards) != 2:
        return
    val, train = shards[val_path], shards[train_path]
    n_docs = [int((val == tu.EOT).sum()), int((train == tu.EOT).sum())]
    check("kjv_documents_are_books", n_docs[0] >= 1 and sum(n_docs) == 66 and 30_000 < val.size < 100_000,
          f"documents val/train {n_docs}, val {val.size} tokens")
    if enc is None:
        skip("kjv_decodes_to_source", "no tokenizer")
        return
    docs = [enc.decode(d.tolist()) for d in split_on_eot(val) + split_on_eot(train)]
    check("kjv_first_books", docs[0].startswith("Genesis 1\n") and docs[-1].startswith("Revelation 1\n"),
          f"{docs[0][:20]!r} ... {docs[-1][:20]!r}")
    if not os.path.exists(KJV_TXT):
        skip("kjv_decodes_to_source", f"{KJV_TXT} not present")
        return
    with open(KJV_TXT, encoding="utf-8") as f:
        source = f.read()
    missing = [i for i, d in enumerate(docs) if d not in source]
    check("kjv_decodes_to_source", not missing and sum(len(d) for d in docs) > 0.99 * len(source.strip()),
          f"documents not found in kjv.txt: {missing[:5]}")
    # the bundled shards are exactly what data/make_default_dataset.sh writes now
    if VOCAB_DIR is None:
        skip("kjv_regenerates_identically", "offline GPT-2 files not present")
        return
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.run(["bash", os.path.join(DATA, "make_default_dataset.sh"), tmp],
                           capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHON": sys.executable})
        same = p.returncode == 0 and all(
            open(os.path.join(tmp, os.path.basename(q)), "rb").read() == open(q, "rb").read() for q in shards)
        check("kjv_regenerates_identically", same, f"rc {p.returncode} {p.stderr.strip()}")


def main():
    enc = load_encoding()
    if enc is None:
        for name in ("tokenizer", "tokenizer_table", "prepare_text", "openwebtext"):
            skip(name, "GPT-2 tokenizer unavailable (no ../shared/tokenizer/gpt2, registry unreachable)")
    else:
        test_tokenizer(enc)
        test_tokenizer_table(enc)
        with tempfile.TemporaryDirectory() as tmp:
            test_prepare_text(enc, tmp)
            test_prepare_text_errors(tmp)
            test_openwebtext(enc, tmp)
            test_openwebtext_property(tmp)
    with tempfile.TemporaryDirectory() as tmp:
        test_openwebtext_offline(tmp)
        test_openwebtext_errors(tmp)
    test_kjv(enc)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
