"""testlib.py — the tolerance check of the Python and shell tests, in the format of test_bound
(test/test_util.h): "PASS|FAIL <name>: measured <value>, bound <bound>[ (<detail>)]", which
dev/tolerance_sweep.py reads to find each bound's worst case.

From Python:  sys.path.insert(0, "test"); from testlib import bound; ok = bound(name, value, 1e-3)
From a shell: python3 test/testlib.py NAME VALUE BOUND [DETAIL]   (exit status 1 when it fails;
              a VALUE that is not a number fails and is shown)
"""
import math
import sys


def bound(name, measured, limit, detail=""):
    """Passes when measured <= limit; NaN fails. Prints one line; returns the verdict."""
    ok = measured <= limit  # False for NaN
    print("%s %s: measured %.3e, bound %.3g%s" % ("PASS" if ok else "FAIL", name, measured, limit,
                                                   " (%s)" % detail if detail else ""), flush=True)
    return ok


def main(argv):
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
