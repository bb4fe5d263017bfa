"""testlib.py — helpers of the Python and shell tests.

bound(): the tolerance check, in the format of test_bound (test/test_util.h):
"PASS|FAIL <name>: measured <value>, bound <bound>[ (<detail>)]", which dev/tolerance_sweep.py
reads to find each bound's worst case.
checkpoint_tensors(): a model checkpoint's nine tensors by name (llmc/checkpoint.h layout).
Checks: check(name, ok, detail) prints "PASS name" or "FAIL name: detail" and counts failures.

From Python:  sys.path.insert(0, "test"); from testlib import bound; ok = bound(name, value, 1e-3)
From a shell: python3 test/testlib.py NAME VALUE BOUND [DETAIL]   (exit status 1 when it fails;
              a VALUE that is not a number fails and is shown)
              python3 test/testlib.py --same-run DIR_A DIR_B STEP   (exit status 0 when two runs
              wrote the same checkpoint at STEP and the same metrics: same_run(); else prints why)
"""
import math
import sys

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


def same_metrics(dir_a, dir_b):
    """Whether two runs' metrics.jsonl hold the same rows, every field but the times (t_*, ms,
    tokens_per_s, eta_s, mfu) and how the step went out (comm_buckets_overlapped) compared
    exactly; False when either is empty or missing."""
    import json
    skip = ("ms", "tokens_per_s", "eta_s", "mfu", "comm_buckets_overlapped")

    def rows(d):
        with open(d + "/metrics.jsonl") as f:
            return [{k: v for k, v in json.loads(l).items() if not k.startswith("t_") and k not in skip} for l in f]
    try:
        a, b = rows(dir_a), rows(dir_b)
    except (OSError, ValueError):
        return False
    return a == b and len(a) > 0


def same_run(dir_a, dir_b, step):
    """Whether two runs ended alike: the model and every rank's state file of checkpoint `step`
    byte for byte, and same_metrics(). Returns (verdict, what differs)."""
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
    if not same_metrics(dir_a, dir_b):
        return False, "metrics.jsonl rows differ"
    return True, ""


def main(argv):
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
