#!/usr/bin/env python3
"""tolerance_sweep.py — the worst case of every tolerance in the tests, over the settings that
change floating-point summation order: OpenMP thread counts, OpenBLAS kernels (OPENBLAS_CORETYPE,
every kernel family this CPU can run) and compiler targets (-march, which decides FMA
contraction in the engine's own loops).

Every tolerance check prints "PASS|FAIL <name>: measured <value>, bound <bound>" (test_bound in
test/test_util.h, bound() in test/testlib.py). This script runs the chosen test programs under
each setting, keeps the largest measured value per check, and prints, when a program's last
setting is done, its table sorted by margin (bound / worst measured): a bound's comment in the
test quotes that worst case. Failures of checks without a bound (bitwise equalities, structure)
under any setting are listed at the end.

    python3 dev/tolerance_sweep.py                              # C++ tests, 1/2/4 threads, all kernels, native build
    python3 dev/tolerance_sweep.py --march native,x86-64-v2     # also a build without FMA
    python3 dev/tolerance_sweep.py --threads 1 test/test_mpi.sh test/test_comm_modes.sh
    python3 dev/tolerance_sweep.py "build/emu/dev_geofp8 --small"   # after test/test_cuda_emulated.sh built it

Programs are test binaries by name (test_model, built under build/ or build/sweep-<march>/),
test scripts (test/*.sh, test/*.py) or any command with a path ("build/emu/dev_geofp8 --small");
scripts and commands run from the repository root with the native build. The shell tests fix
their own thread count (one OpenMP thread per rank), so give them --threads 1. One line per
finished setting, a table per program. Exit status 1 if any check failed under any setting.
"spread" is worst / least over the settings: how much summation order moves that figure.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DEFAULT_PROGRAMS = ["test_layers", "test_model", "test_optim", "test_geofp8"]
LINE = re.compile(r"^(PASS|FAIL) (\S+): measured (\S+), bound (\S+)")

# OpenBLAS kernel families for x86-64, each with the CPU flags its kernels need (a kernel
# forced on a CPU without them would fault). Zen and Haswell share kernels but not blocking.
CORES = [
    ("Prescott", {"pni"}),
    ("Nehalem", {"sse4_2"}),
    ("Sandybridge", {"avx"}),
    ("Haswell", {"avx2", "fma"}),
    ("Zen", {"avx2", "fma"}),
    ("SkylakeX", {"avx512f", "avx512bw", "avx512dq", "avx512vl"}),
    ("Cooperlake", {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_bf16"}),
]


def cpu_flags():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def openblas_core_name(core):
    """The kernel family OpenBLAS really uses when OPENBLAS_CORETYPE=core (asked in a child
    process, since OpenBLAS reads the variable once when it loads)."""
    code = ("import ctypes, ctypes.util; lib = ctypes.CDLL(ctypes.util.find_library('openblas') or 'libopenblas.so.0'); "
            "lib.openblas_get_corename.restype = ctypes.c_char_p; print(lib.openblas_get_corename().decode())")
    env = dict(os.environ, OPENBLAS_CORETYPE=core)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return r.stdout.strip().lower() if r.returncode == 0 else ""


def usable_cores(wanted):
    flags = cpu_flags()
    out = []
    for name, need in CORES:
        if wanted and name not in wanted:
            continue
        if not need <= flags:
            continue
        if openblas_core_name(name) == name.lower():
            out.append(name)
    return out


def build(march):
    """The C++ tests built for -march=<march> under build/sweep-<march> (native: build/)."""
    if march == "native":
        return os.path.join(ROOT, "build")
    out = os.path.join(ROOT, "build", "sweep-" + march)
    flags = "-O3 -march=%s -std=c++17 -fopenmp -Wall -Wextra -Wno-unused-function" % march
    targets = [os.path.join("build", "sweep-" + march, p) for p in DEFAULT_PROGRAMS]
    subprocess.run(["make", "--no-print-directory", "-s", "BUILD=" + os.path.relpath(out, ROOT), "CXXFLAGS=" + flags] + targets,
                   cwd=ROOT, check=True)
    return out


def run_one(cmd, env, timeout):
    t0 = time.time()
    try:
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        text, rc = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        text, rc = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""), 124
    found, other_fails = [], []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            found.append((m.group(2), float(m.group(3)), float(m.group(4)), m.group(1) == "FAIL"))
        elif line.startswith("FAIL "):
            other_fails.append(line[5:].strip())
    return found, other_fails, rc, time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("programs", nargs="*", help="test binaries (test_model) or scripts (test/test_mpi.sh)")
    ap.add_argument("--threads", default="1,2,4", help="OMP_NUM_THREADS values (default 1,2,4)")
    ap.add_argument("--cores", default="", help="OPENBLAS_CORETYPE values (default: every family this CPU runs)")
    ap.add_argument("--march", default="native", help="-march targets for the C++ tests (default native)")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per program run")
    args = ap.parse_args()

    programs = args.programs or DEFAULT_PROGRAMS
    threads = [int(t) for t in args.threads.split(",") if t]
    cores = usable_cores(set(c for c in args.cores.split(",") if c))
    marches = [m for m in args.march.split(",") if m]
    if not cores:
        print("tolerance_sweep: no OpenBLAS kernel family could be forced (is OpenBLAS built with DYNAMIC_ARCH?)")
        return 1
    print("kernels: %s; threads: %s; builds: %s" % (" ".join(cores), " ".join(map(str, threads)), " ".join(marches)))

    dirs = {m: build(m) for m in marches}
    failed = []         # (check, measured, bound, setting) of failed bounds
    failed_checks = []  # FAIL lines of checks without a bound (bitwise, structural)
    settings = []
    for p in programs:
        built = "/" not in p  # a test binary by name: one build per -march; else run as given
        for march in (marches if built else ["native"]):
            for core in cores:
                for th in threads:
                    settings.append((p, march, core, th))
    worst, least = {}, {}  # of the program being swept: check -> (measured, bound, setting); smallest
    for i, (p, march, core, th) in enumerate(settings, 1):
        if p.endswith(".sh"):
            cmd = ["bash", p]
        elif p.endswith(".py"):
            cmd = [sys.executable, p]
        elif "/" in p:
            cmd = shlex.split(p)
        else:
            cmd = [os.path.join(dirs[march], p)]
        env = dict(os.environ, OMP_NUM_THREADS=str(th), OMP_WAIT_POLICY="passive", OPENBLAS_CORETYPE=core)
        found, other_fails, rc, secs = run_one(cmd, env, args.timeout)
        tag = "%s %s %d thr %s" % (core, march, th, os.path.basename(shlex.split(p)[0]))
        closest = None
        for name, v, b, bad in found:
            if name not in worst or not (v <= worst[name][0]):
                worst[name] = (v, b, tag)
            least[name] = min(least.get(name, v), v)
            if bad:
                failed.append((name, v, b, tag))
            margin = b / v if v > 0 else float("inf")
            if closest is None or margin < closest[0]:
                closest = (margin, name)
        for line in other_fails:
            failed_checks.append((line, tag))
        note = "" if rc in (0, 77) else ", exit %d" % rc
        print("[%d/%d] %-44s %3d bounds, %d failed, %d other checks failed, closest margin %s, %.0f s%s" % (
            i, len(settings), tag, len(found), sum(1 for f in found if f[3]), len(other_fails),
            "%.1fx (%s)" % closest if closest else "-", secs, note), flush=True)
        if i == len(settings) or settings[i][0] != p:  # the program's last setting: its table
            print_table(p, worst, least)
            worst, least = {}, {}

    for name, v, b, tag in failed:
        print("FAILED under %s: %s measured %.3e, bound %.3g" % (tag, name, v, b))
    for line, tag in failed_checks:
        print("FAILED under %s: %s" % (tag, line))
    return 1 if failed or failed_checks else 0


def print_table(program, worst, least):
    """Every bound of one program, closest to its bound first."""
    print("\n%-58s %10s %10s %8s %7s  %s" % ("check (" + program + ")", "bound", "worst", "margin", "spread", "worst at"))
    rows = sorted(worst.items(), key=lambda kv: kv[1][1] / kv[1][0] if kv[1][0] > 0 else float("inf"))
    for name, (v, b, tag) in rows:
        margin = b / v if v > 0 else float("inf")
        spread = v / least[name] if least[name] > 0 else float("inf")
        print("%-58s %10.3g %10.3e %7.1fx %6.1fx  %s" % (name, b, v, margin, spread, tag))
    print(flush=True)


if __name__ == "__main__":
    sys.exit(main())
