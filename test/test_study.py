"""Tests for scripts/study.py on a tiny grid (the small test model, 2 virtual ranks in one
process, 3 steps, seeds 1 and 2, modes fp8 and fp8 with --fp8-ef 1, two runs side by side: six
runs of about a second): the table's numbers against an independent recomputation from the
runs' metrics.jsonl (the paired difference to fp32 of the same seed, its t, the share of fp8's
gap recovered per seed, the whole-gradient error ratio, the slope), the PNG it writes, a second
invocation that runs nothing and prints the same table, --dry-run after a run is removed, the
commands of --engine gpu with a preset (train_llama, all ranks in one process, one run at a time),
the refusal of a directory that holds another engine's runs, and its one-line refusals of bad
arguments with nothing written. (test_cuda_emulated.sh runs --engine gpu through dev/emu.)

Prints "PASS name" / "FAIL name: detail" lines; exits 1 on any failure.

    python3 test/test_study.py
"""
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "test"))
import testlib  # noqa: E402

SCRIPT = os.path.join(REPO, "scripts", "study.py")
BIN = os.path.join(REPO, "train_llama_cpu")
check = testlib.Checks()
MODES = "fp8|-c fp8;fp8+EF|-c fp8 --fp8-ef 1"
GRID = ["--modes", MODES, "--seeds", "1,2", "--ranks", "2", "--lr", "3e-3", "--steps", "3", "--jobs", "2"]


def study(args, cwd=REPO):
    p = subprocess.run([sys.executable, SCRIPT] + args, cwd=cwd, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"))
    return p.returncode, p.stdout, p.stderr


def table(out):
    rows = {}
    for line in out.splitlines():
        if line.startswith("| ") and not line.startswith("| mode "):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def numbers(cell):
    return [float(x) for x in re.findall(r"[-+]?[0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?", cell)]


def run_values(d):
    rows = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
    val = [r["val_loss"] for r in rows if r.get("step") == 3 and "val_loss" in r][-1]
    rel = [r["fidelity_rel_l2"] for r in rows if "train_loss" in r and "fidelity_rel_l2" in r]
    slope = [r["fidelity_slope"] for r in rows if "train_loss" in r and "fidelity_slope" in r]
    return val, sum(rel) / len(rel) if rel else math.nan, sum(slope) / len(slope) if slope else math.nan


def main():
    if not (os.path.isfile(BIN) and os.access(BIN, os.X_OK)):
        print("SKIP test_study: train_llama_cpu is not built (make train_llama_cpu)")
        return 0
    tmp = tempfile.mkdtemp(prefix="test_study_")
    try:
        out = os.path.join(tmp, "st")
        rc, so, se = study(GRID + ["--out", out])
        check("study_tiny_grid_runs", rc == 0 and "6 runs, 0 finished, 6 to do" in so and so.count("] n2_lr0.003_x3/") == 6
              and "ETA" in so, f"rc {rc}: {se.strip()[-300:]} {so[:300]}")
        rows = table(so)
        cell = os.path.join(out, "n2_lr0.003_x3")
        v = {(m, s): run_values(os.path.join(cell, f"{m}_s{s}")) for m in ("fp32", "fp8", "fp8_EF") for s in (1, 2)}
        # the independent recomputation: paired differences in %, their mean, std, t; the share
        ok, detail = "fp8" in rows and "fp8+EF" in rows and "fp32" in rows, ""
        for name, tag in (("fp8", "fp8"), ("fp8+EF", "fp8_EF")):
            if not ok:
                break
            d = [100 * (v[(tag, s)][0] - v[("fp32", s)][0]) / v[("fp32", s)][0] for s in (1, 2)]
            m = sum(d) / 2
            sd = math.sqrt(sum((x - m) ** 2 for x in d))
            got = numbers(rows[name][2])  # "+0.007% ± 0.015%"
            ok &= len(got) == 2 and abs(got[0] - m) <= 6e-4 and abs(got[1] - sd) <= 6e-4
            if sd > 0:
                t = numbers(rows[name][3])
                ok &= abs(t[0] - m / (sd / math.sqrt(2))) <= 6e-3 * max(1.0, abs(t[0])) and t[1] == 12.71
            val = numbers(rows[name][1])
            ok &= abs(val[0] - (v[(tag, 1)][0] + v[(tag, 2)][0]) / 2) <= 6e-6
            slope = numbers(rows[name][7])
            ok &= abs(slope[0] - (v[(tag, 1)][2] + v[(tag, 2)][2]) / 2) <= 6e-5 and 0.9 < slope[0] <= 1.01
            detail += f"{name}: diff {got} vs {m:.4f} ± {sd:.4f}; "
        if ok:
            # recovered share: per seed 1 - d_EF / d_fp8 where fp8's gap is positive
            share = [1 - (v[("fp8_EF", s)][0] - v[("fp32", s)][0]) / (v[("fp8", s)][0] - v[("fp32", s)][0]) for s in (1, 2)
                     if v[("fp8", s)][0] > v[("fp32", s)][0]]
            cellv = rows["fp8+EF"][4]
            if share:
                ok &= abs(numbers(cellv)[0] - sum(share) / len(share)) <= 6e-3 and (len(share) == 2 or "(1 of 2 seeds)" in cellv)
            else:
                ok &= cellv == "—"
            ratio = [v[("fp8_EF", s)][1] / v[("fp8", s)][1] for s in (1, 2)]
            ok &= abs(numbers(rows["fp8+EF"][5])[0] - sum(ratio) / 2) <= 6e-4 and rows["fp8"][5] == "1"
            detail += f"share {cellv} vs {share}; ratio {rows['fp8+EF'][5]} vs {ratio}"
        check("study_table_matches_recomputation", ok, detail or so[-600:])
        png = os.path.join(out, "study.png")
        check("study_figure_written", os.path.isfile(png) and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n", png)
        # resumable: nothing to do, the same table
        rc2, so2, se2 = study(GRID + ["--out", out])
        check("study_resume_runs_nothing", rc2 == 0 and "6 finished, 0 to do" in so2 and table(so2) == rows, f"rc {rc2}: {se2[-200:]} {so2[:200]}")
        shutil.rmtree(os.path.join(cell, "fp8_EF_s2"))
        rc3, so3, _ = study(GRID + ["--out", out, "--dry-run"])
        cmds = [l for l in so3.splitlines() if l.startswith(BIN)]
        check("study_dry_run_lists_the_missing_run", rc3 == 0 and len(cmds) == 1 and "--fp8-ef 1" in cmds[0] and "--seed 2" in cmds[0]
              and "--virtual-ranks 2" in cmds[0], so3[-400:])
        # --engine gpu, listed: train_llama with all N ranks in one process (no mpirun), one run at a
        # time; a preset on the bundled data (absolute globs: the runs start in the repository root)
        fresh_gpu = os.path.join(tmp, "gpu")
        rc4, so4, se4 = study(GRID[:-2] + ["--engine", "gpu", "--bin", BIN, "--model", "d12", "--seq-len", "64", "--out", fresh_gpu, "--dry-run"])
        cmds = [shlex.split(l) for l in so4.splitlines() if l.startswith(BIN)]
        want = ["-e", "d12", "-i", os.path.join(REPO, "data/kjv/kjv_train_*.bin"), "-j", os.path.join(REPO, "data/kjv/kjv_val_*.bin"), "-b", "1", "-t", "64", "-d", "128"]
        check("study_gpu_engine_dry_run", rc4 == 0 and len(cmds) == 6 and all(c[1:len(want) + 1] == want and "--virtual-ranks" in c
              and c[c.index("--virtual-ranks") + 1] == "2" for c in cmds) and "1 at a time x 1 process on the GPU" in so4
              and "mpirun" not in so4 and not os.path.exists(fresh_gpu), f"rc {rc4}: {se4[-200:]} {so4[-400:]}")
        # a directory holds one setup: the cpu runs above refuse a gpu study
        rc5, _, se5 = study(GRID + ["--out", out, "--engine", "gpu", "--bin", BIN])
        check("study_refuses_other_setup_in_out", testlib.one_error_line(rc5, se5) and "holds the runs of another study setup: engine cpu (now gpu)" in se5,
              f"rc {rc5}: {se5[-300:]}")
        # refusals: one error line, exit 1, nothing written
        bad = [
            (["--engine", "gpu", "--bin", BIN, "--procs", "2"], "--engine gpu runs each run as one process"),
            (["--seq-len", "300"], "expected at most 256"), (["--train-data", "data/kjv/kjv_train_*.bin"], "the small model trains on its own text"),
            (["--model", "d12", "--val-data", os.path.join(tmp, "none_*.bin")], "--val-data: no file matches"),
            (["--engine", "tpu"], "--engine"),
            (["--ranks", "0"], "--ranks"), (["--seeds", "1,1"], "--seeds"), (["--lr", "0"], "--lr"), (["--steps", "-1"], "--steps"),
            (["--modes", "fp8"], "--modes"), (["--modes", "x|-c fp32"], "-c"), (["--modes", "x|-c fp8 -l 1e-3"], "-l is set by the grid"),
            (["--modes", "x|-c fp8|1e-2"], "lr 0.01 is not in --lr"), (["--ranks", "3", "--procs", "2"], "--procs"),
            (["--figure", os.path.join(tmp, "f.txt")], "--figure"), (["--bin", os.path.join(tmp, "nope")], "--bin"),
            (["--jobs", "0"], "--jobs"), (["--modes", "a|-c fp8;a|-c fp8 --fp8-ef 1"], "two modes named"),
        ]
        fresh = os.path.join(tmp, "fresh")
        for args, want in bad:
            argv = ["--seeds", "1", "--ranks", "2", "--lr", "3e-3", "--steps", "3", "--out", fresh] + args
            rc, so, se = study(argv)
            check(f"study_refuses {' '.join(args)[:50]}", testlib.one_error_line(rc, se) and want in se and not os.path.exists(fresh),
                  f"rc {rc}, stderr {se.strip()[-200:]}")
        open(os.path.join(tmp, "afile"), "w").close()
        rc, so, se = study(["--out", os.path.join(tmp, "afile")])
        check("study_refuses_out_that_is_a_file", testlib.one_error_line(rc, se) and "--out" in se, se[-200:])
        rc, so, se = study(["--help"])
        opts = [l for l in so.splitlines() if re.match(r"  --", l)]
        check("study_help_gives_defaults", rc == 0 and not se and len(opts) >= 10, f"rc {rc} {se[-200:]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
