"""testlib.py — helpers of the Python and shell tests.

bound(): the tolerance check, in the format of test_bound (test/test_util.h):
"PASS|FAIL <name>: measured <value>, bound <bound>[ (<detail>)]", which dev/tolerance_sweep.py
reads to find each bound's worst case.
checkpoint_tensors(): a model checkpoint's nine tensors by name (llmc/checkpoint.h layout).
Checks: check(name, ok, detail) prints "PASS name" or "FAIL name: detail" and counts failures.
The Python tools' error convention (scripts/cli_util.py): tool_in_process() runs a tool's main as
its __main__ does; one_error_line() is the verdict on what a refusal printed; BAD_ARGS and
BAD_JSON_VALUES are what the property tests mutate arguments and input files into.

From Python:  sys.path.insert(0, "test"); from testlib import bound; ok = bound(name, value, 1e-3)
From a shell: python3 test/testlib.py NAME VALUE BOUND [DETAIL]   (exit status 1 when it fails;
              a VALUE that is not a number fails and is shown)
              python3 test/testlib.py --same-run DIR_A DIR_B STEP   (exit status 0 when two runs
              wrote the same checkpoint at STEP and the same metrics: same_run(); else prints why;
              --same-model: the model file and the metrics only, same_model_and_metrics();
              --same-metrics DIR_A DIR_B: the metrics alone, metrics_difference())
              python3 test/testlib.py --small-model   (prints the flags of the small test model,
              after writing its data if missing: small_model_flags(); --small-model-dir: its data
              directory)

The small test model. Most training runs of the tests use the tiny preset with a vocabulary of
SMALL_VOCAB tokens instead of GPT-2's 50257 (--vocab-size), on the bundled KJV shards with every
token renumbered: the SMALL_VOCAB - 1 most frequent train tokens by rank, all others one shared
last token (87% of the train tokens keep their identity). The layers are tiny's; wte and
lm_head shrink from 2 x 6.4M to 2 x 131k parameters, so the steps (whose cost on this model is
mostly per parameter: optimizer, gradient communication, checkpoints) run about six times
faster (20 steps of -c fp8 with fidelity: 8.9 s against 1.5 s on one core). Runs that need GPT-2's vocabulary itself (export, sampling, the GPU check's curves) keep it.
"""
import math
import os
import sys

# the tests run on the environment's OpenBLAS kernels, never the engine's choice of them
# (llmc/blas_select.h; test/test_blas_select.sh tests that choice itself)
os.environ["TRAIN_LLAMA_BLAS_AUTO"] = "0"

CHECKPOINT_HEADER_BYTES = 1024  # int32[256]: magic, version, V, Vp, C, L, NH, NKV, FF, T, step, crc, ...


def bound(name, measured, limit, detail=""):
    """Passes when measured <= limit; NaN fails. Prints one line; returns the verdict."""
    ok = measured <= limit  # False for NaN
    print("%s %s: measured %.3e, bound %.3g%s" % ("PASS" if ok else "FAIL", name, measured, limit,
                                                   " (%s)" % detail if detail else ""), flush=True)
    return ok


class Checks:
    """check = Checks(); check("name", ok, "detail"); ...; sys.exit(1 if check.failed else 0)"""

    def __init__(self):
        self.failed = 0

    def __call__(self, name, ok, detail=""):
        print(f"PASS {name}" if ok else f"FAIL {name}: {detail}", flush=True)
        self.failed += 0 if ok else 1
        return ok


# adversarial argument values: numbers out of range, not finite, not integers, overflowing,
# words, empty, paths that are not what is expected
BAD_ARGS = ["", "0", "-1", "-0.5", "1", "0.5", "5", "2.0", "1e3", "1e400", "-1e400", "nan", "inf", "-inf", "abc", " 5", "1_0",
            "99999999999999999999999", "/nonexistent/dir/x", "/", "/dev/null", "--", "-x", "0x10", "1,2", ",", "."]
# adversarial JSON values (for an input file's fields): wrong types, non-finite, huge, empty
BAD_JSON_VALUES = [None, True, False, "x", "0.5", "", -1, 0, 1, 1e308, -1e308, 10 ** 400, float("nan"), float("inf"),
                   float("-inf"), [], {}, [1], {"a": 1}, 0.5, -0.0]


def one_error_line(status, stderr):
    """A refusal by the tools' convention: exit status 1, stderr's last line "error: ...", one
    such line, and no traceback."""
    lines = stderr.strip().splitlines()
    return (status == 1 and bool(lines) and lines[-1].startswith("error: ") and
            sum(1 for l in lines if l.startswith("error:")) == 1 and "Traceback" not in stderr)


def tool_in_process(main, argv, cwd):
    """Runs main(argv) under cli_util.run in directory cwd (a mutated relative path then lands
    there, not in the repository), as the tool's __main__ does; returns (status, stdout, stderr).
    An exception that escapes cli_util.run (a traceback the user would see) gives status None,
    with the traceback in stderr."""
    import contextlib
    import io
    import os
    import traceback
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts"))
    import cli_util
    out, err = io.StringIO(), io.StringIO()
    status = None
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli_util.run(main, argv)
            except SystemExit as e:
                status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:
                traceback.print_exc(file=err)
    finally:
        os.chdir(here)
    return status, out.getvalue(), err.getvalue()


def property_verdict(status, stderr):
    """What a property test accepts from a tool on mutated input: success, or a refusal by the
    convention (one_error_line)."""
    return (status == 0 and "Traceback" not in stderr) or one_error_line(status, stderr)


def tree_snapshot(root, skip=()):
    """{relative path: (mode, bytes)} of every file under root (directories as None), but the
    entries named in skip: for checking that a tool wrote nothing outside its own output."""
    import os
    snap = {}
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        if rel in skip:
            dirs[:] = []
            continue
        dirs[:] = [x for x in dirs if os.path.normpath(os.path.join(rel, x)) not in skip]
        for x in dirs:
            snap[os.path.normpath(os.path.join(rel, x))] = None
        for x in files:
            p = os.path.normpath(os.path.join(rel, x))
            if p in skip:
                continue
            with open(os.path.join(d, x), "rb") as f:
                snap[p] = (os.stat(os.path.join(d, x)).st_mode, f.read())
    return snap


def checkpoint_tensors(path):
    """{name: float32 array} of a model_*.bin, in the flat layout of llmc/llama.h."""
    import numpy as np
    header = np.fromfile(path, dtype="<i4", count=CHECKPOINT_HEADER_BYTES // 4)
    V, Vp, C, L, NH, NKV, FF, T = (int(x) for x in header[2:10])
    HS = C // NH
    shapes = [("wte", (Vp, C)), ("ln1w", (L, C)), ("ln2w", (L, C)), ("qkvw", (L, (NH + 2 * NKV) * HS, C)),
              ("projw", (L, C, NH * HS)), ("fc1w", (L, 2 * FF, C)), ("fc2w", (L, C, FF)), ("lnfw", (C,)),
              ("lm_head", (Vp, C))]
    flat = np.fromfile(path, dtype="<f4", offset=CHECKPOINT_HEADER_BYTES)
    out, off = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        out[name] = flat[off:off + n].reshape(shape).astype(np.float64)
        off += n
    assert off == flat.size, "%s: %d floats after the header, layout has %d" % (path, flat.size, off)
    return out


def metrics_difference(dir_a, dir_b):
    """How two runs' metrics.jsonl differ: "" when they hold the same rows, every field but the
    times (t_*, ms, tokens_per_s, eta_s, mfu) and how the step went out (comm_buckets_overlapped)
    compared exactly; else one phrase naming the first differing row and field (either file
    empty or missing is a difference)."""
    import json
    skip = ("ms", "tokens_per_s", "eta_s", "mfu", "comm_buckets_overlapped")

    def rows(d):
        with open(d + "/metrics.jsonl") as f:
            return [{k: v for k, v in json.loads(l).items() if not k.startswith("t_") and k not in skip} for l in f]
    try:
        a, b = rows(dir_a), rows(dir_b)
    except (OSError, ValueError) as e:
        return "metrics.jsonl unreadable (%s)" % e
    if not a:
        return "%s/metrics.jsonl has no rows" % dir_a
    for i, (ra, rb) in enumerate(zip(a, b)):
        for k in sorted(set(ra) | set(rb)):
            if ra.get(k, "(absent)") != rb.get(k, "(absent)"):
                return "metrics.jsonl row %d (step %s) field %s: %.200s against %.200s" % (
                    i + 1, ra.get("step"), k, ra.get(k, "(absent)"), rb.get(k, "(absent)"))
    if len(a) != len(b):
        return "metrics.jsonl has %d rows against %d" % (len(a), len(b))
    return ""


def same_run(dir_a, dir_b, step):
    """Whether two runs ended alike: the model and every rank's state file of checkpoint `step`
    byte for byte, and the same metrics (metrics_difference). Returns (verdict, what differs)."""
    import filecmp
    import glob
    import os
    tag = "%08d" % step
    names = ["model_%s.bin" % tag] + sorted(os.path.basename(p) for p in glob.glob(os.path.join(dir_a, "state_%s_*.bin" % tag)))
    if not os.path.isfile(os.path.join(dir_a, names[0])):
        return False, "%s has no %s" % (dir_a, names[0])
    differ = [n for n in names if not os.path.isfile(os.path.join(dir_b, n)) or
              not filecmp.cmp(os.path.join(dir_a, n), os.path.join(dir_b, n), shallow=False)]
    if differ:
        return False, "files differ: " + " ".join(differ)
    differ = metrics_difference(dir_a, dir_b)
    return differ == "", differ


SMALL_VOCAB = 1000
SMALL_DATA_SOURCE = ("data/kjv/kjv_train_000001.bin", "data/kjv/kjv_val_000000.bin")
SHARD_HEADER_INTS = 256  # llm.c shard header: int32[256] (magic, version, token count, ...)


def small_vocab_data(out_dir, root="."):
    """Writes out_dir/{train_000001,val_000000}.bin, the KJV shards renumbered to SMALL_VOCAB
    tokens (see the module comment), unless they are already there; deterministic bytes. Safe when
    several tests call it at once: each file is written under a private name and renamed."""
    import os
    import numpy as np
    names = ("train_000001.bin", "val_000000.bin")
    if all(os.path.isfile(os.path.join(out_dir, n)) for n in names):
        return
    os.makedirs(out_dir, exist_ok=True)
    src = [os.path.join(root, p) for p in SMALL_DATA_SOURCE]
    train = np.fromfile(src[0], dtype="<u2", offset=4 * SHARD_HEADER_INTS)
    counts = np.bincount(train, minlength=1 << 16)
    top = np.argsort(-counts, kind="stable")[:SMALL_VOCAB - 1]  # ties by token id
    remap = np.full(1 << 16, SMALL_VOCAB - 1, dtype="<u2")
    remap[top] = np.arange(SMALL_VOCAB - 1, dtype="<u2")
    for path, name in zip(src, names):
        header = np.fromfile(path, dtype="<i4", count=SHARD_HEADER_INTS)
        tokens = np.fromfile(path, dtype="<u2", offset=4 * SHARD_HEADER_INTS)
        tmp = os.path.join(out_dir, ".%s.%d" % (name, os.getpid()))
        with open(tmp, "wb") as f:
            header.tofile(f)
            remap[tokens].tofile(f)
        os.replace(tmp, os.path.join(out_dir, name))


def small_model_dir(root="."):
    """The small model's data directory, root/build/testdata/kjv_v<SMALL_VOCAB> (written when
    missing): train_000001.bin and val_000000.bin."""
    import os
    root = os.path.abspath(root)
    d = os.path.join(root, "build", "testdata", "kjv_v%d" % SMALL_VOCAB)
    small_vocab_data(d, root)
    return d


def small_model_flags(root="."):
    """The engine flags of the small test model: tiny, --vocab-size SMALL_VOCAB, its train and
    val shards (small_model_dir), as one line."""
    d = small_model_dir(root)
    return "-e tiny --vocab-size %d -i %s/train_*.bin -j %s/val_*.bin" % (SMALL_VOCAB, d, d)


def same_model_and_metrics(dir_a, dir_b, step):
    """Whether two runs wrote the same model file at `step` byte for byte and the same metrics
    (metrics_difference); their state files may be laid out differently (--virtual-ranks). Returns
    (verdict, what differs)."""
    import filecmp
    import os
    name = "model_%08d.bin" % step
    a, b = os.path.join(dir_a, name), os.path.join(dir_b, name)
    if not os.path.isfile(a) or not os.path.isfile(b):
        return False, "%s missing in %s or %s" % (name, dir_a, dir_b)
    if not filecmp.cmp(a, b, shallow=False):
        return False, name + " differs"
    differ = metrics_difference(dir_a, dir_b)
    return differ == "", differ


def main(argv):
    if len(argv) == 5 and argv[1] == "--same-model":
        ok, why = same_model_and_metrics(argv[2], argv[3], int(argv[4]))
        if not ok:
            print(why)
        return 0 if ok else 1
    if len(argv) == 2 and argv[1] == "--small-model":
        print(small_model_flags())
        return 0
    if len(argv) == 2 and argv[1] == "--small-model-dir":
        print(small_model_dir())
        return 0
    if len(argv) == 4 and argv[1] == "--same-metrics":
        differ = metrics_difference(argv[2], argv[3])
        if differ:
            print(differ)
        return 1 if differ else 0
    if len(argv) == 5 and argv[1] == "--same-run":
        ok, why = same_run(argv[2], argv[3], int(argv[4]))
        if not ok:
            print(why)
        return 0 if ok else 1
    if len(argv) not in (4, 5):
        print("usage: python3 test/testlib.py NAME VALUE BOUND [DETAIL]", file=sys.stderr)
        return 2
    name, value, limit = argv[1], argv[2], float(argv[3])
    detail = argv[4] if len(argv) == 5 else ""
    try:
        measured = float(value)
    except ValueError:
        print("FAIL %s: not a number: %s" % (name, " ".join(value.split())[:200]), flush=True)
        return 1
    if math.isnan(measured):
        measured = math.inf
    return 0 if bound(name, measured, limit, detail) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
