"""Tests for dev/flash_model.py on hand-computed configurations: the figures of the as-built
forward kernel at HS 64 and backward kernel at HS 128 (FLOPs and shared-memory bytes per tile,
their ratio, the H200 ceiling from shared memory), the causal fraction of a two-block sequence,
the configuration read from the kernel source (a header with other tile constants changes the
figures as computed by hand), --check against ptxas reports with a spill, too many registers and
a missing kernel, the report `make ptxas-report` writes now against the committed one (same
lines, and --check passes: no spills, every launch bound met), README's and docs/gpu.md's
modelled figures against the script's, and the one-line errors.

Prints "PASS name" / "FAIL name: detail" / "SKIP name: why" lines; exits 1 on any failure.

    python3 test/test_flash_model.py
"""
import csv
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "test"))
sys.path.insert(0, os.path.join(REPO, "dev"))
import testlib  # noqa: E402
import flash_model  # noqa: E402

SCRIPT = os.path.join(REPO, "dev", "flash_model.py")
REPORT = os.path.join(REPO, "dev", "cuda", "ptxas_report.txt")
check = testlib.Checks()


def rows_of(*args):
    r = subprocess.run([sys.executable, SCRIPT, "--csv", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = [l for l in r.stdout.splitlines() if "," in l]
    table = list(csv.DictReader(lines)) if r.returncode == 0 else []
    return r.returncode, table, r.stderr


def row(table, kernel):
    got = [r for r in table if r["design"] == "as built" and r["kernel"] == kernel]
    return got[0] if len(got) == 1 else None


def figures(r, flops, smem, intensity, smem_tflops=None):
    return r is not None and r["flops/tile"] == str(flops) and r["smem B/tile"] == str(smem) and r["flop/B"] == intensity and \
        (smem_tflops is None or r["smem TF/s"] == smem_tflops)


def run_check(report, hs="16,32,64,128"):
    r = subprocess.run([sys.executable, SCRIPT, "--check", "--hs", hs, "--ptxas", report], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    return r.returncode, r.stdout + r.stderr


def main():
    rc, table, err = rows_of("-t", "4096", "--hs", "64")
    fwd = row(table, "flash_forward_kernel")
    # by hand, the header's HS 64 forward (128 queries, 8 warps, 64-key tiles, Q in registers):
    # 2 products of 2*128*64*64 FLOPs = 2097152; each of 8 warps reads the K and V tiles
    # (64*64*2 = 8192 bytes each), the loads write both: 8*2*8192 + 2*8192 = 147456 bytes; 14.2
    # FLOP/B x (132 SMs x 128 B x 1.98e9 /s = 33.45 TB/s) = 476 TFLOP/s
    check("flash_model_forward_hs64_by_hand", rc == 0 and figures(fwd, 2097152, 147456, "14.2", "476"), f"rc {rc} {fwd} {err}")
    rc, table, err = rows_of("-t", "4096", "--hs", "128")
    bwd = row(table, "flash_backward_kernel")
    # by hand, the HS 128 backward (128 keys, 8 warps, query tiles of 32; dQ on 2 x 4 warps of
    # 16 rows x 32 columns): 5 products of 2*128*32*128 = 5242880 FLOPs; reads: K Qᵀ 32768 +
    # 8*8192, Pᵀ dO 8*8192, V dOᵀ 32768 + 8*8192, dSᵀ Q 8*8192, dS K 8*16*128*2 + 8*128*32*2,
    # lse and D 8*2*32*4: 428032; writes: Q and dO 2*8192, dSᵀ 128*32*2, lse and D 256: 24832;
    # 452864 bytes, 11.6 FLOP/B, 387 TFLOP/s
    check("flash_model_backward_hs128_by_hand", rc == 0 and figures(bwd, 5242880, 452864, "11.6", "387"), f"rc {rc} {bwd} {err}")
    # causal T=128 in 64 x 64 tiles: block 0 computes 64 x 64, block 1 64 x 128: 12288 pairs for
    # 128*129/2 = 8256 under the diagonal
    got = flash_model.causal_fraction(128, 64, 64)
    check("flash_model_causal_fraction_by_hand", abs(got - 8256 / 12288) < 1e-12, f"{got} vs {8256 / 12288}")
    check("flash_model_causal_fraction_one_tile", abs(flash_model.causal_fraction(64, 64, 64) - 2080 / 4096) < 1e-12)

    with tempfile.TemporaryDirectory() as tmp:
        # the configuration comes from the header: other tiles, a nested ternary
        header = os.path.join(tmp, "fa.cuh")
        with open(header, "w") as f:
            f.write("template <int HS>\nstruct FlashFwdTile {\n    static const int BQ = 64, WARPS = 4, BK = 32, STAGES = 2, MIN_BLOCKS = 1;\n"
                    "    static const bool Q_REGS = HS != 128;\n};\ntemplate <int HS>\nstruct FlashBwdTile {\n"
                    "    static const int BK = 64, WARPS = 4, BQ = HS == 128 ? 16 : HS == 64 ? 32 : 64, MIN_BLOCKS = 1;\n};\n")
        rc, table, err = rows_of("--header", header, "--hs", "64", "-t", "4096")
        # forward: 2 x 2*64*32*64 = 524288 FLOPs; Q in registers; 4 warps x 2 x 4096 + 2 x 4096 = 40960 bytes: 12.8 FLOP/B
        # backward (BQ 32 at HS 64; dQ on 2 x 2 warps of 16 rows x 32 columns): 5 x 2*64*32*64 =
        # 1310720 FLOPs; reads 8192 + 4*4096, 4*4096, 8192 + 4*4096, 4*4096, 4*16*64*2 + 4*64*32*2,
        # 4*2*32*4 = 107520; writes 2*4096 + 64*32*2 + 256 = 12544: 120064 bytes, 10.9 FLOP/B
        ok = rc == 0 and figures(row(table, "flash_forward_kernel"), 524288, 40960, "12.8") and \
            figures(row(table, "flash_backward_kernel"), 1310720, 120064, "10.9")
        check("flash_model_reads_the_header", ok, f"rc {rc} {table} {err}")
        open(header, "w").write("nothing here\n")
        r = subprocess.run([sys.executable, SCRIPT, "--header", header], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        check("flash_model_refuses_header_without_config", testlib.one_error_line(r.returncode, r.stderr) and "cannot find struct FlashFwdTile" in r.stderr,
              f"rc {r.returncode} {r.stderr.strip()}")

        # --check on reports: the committed one passes; a spill, 255 registers at HS 64 (one block
        # of 256 threads where the launch bound asks 2) and a missing kernel each fail
        committed = open(REPORT).read()
        rc, out = run_check(REPORT)
        check("flash_model_check_committed_report", rc == 0 and out.count("PASS") == 8, f"rc {rc} {out.strip()}")
        cases = [("spill", lambda l: l if "flash_forward_kernel<128>" not in l else "251   0      0      8       8       " + l.split(None, 5)[5], "16 spill bytes"),
                 ("registers", lambda l: l if "flash_forward_kernel<64>" not in l else "255   0      0      0       0       " + l.split(None, 5)[5], "1 blocks"),
                 ("missing_kernel", lambda l: "" if "flash_backward_kernel<32>" in l else l, "not in the ptxas report")]
        for name, edit, want in cases:
            bad = os.path.join(tmp, name + ".txt")
            open(bad, "w").write("\n".join(edit(l) for l in committed.splitlines()) + "\n")
            rc, out = run_check(bad)
            check(f"flash_model_check_fails_on_{name}", rc == 1 and "FAIL" in out and want in out, f"rc {rc} {out.strip()}")

        # the report as the compiler writes it now: the same kernel lines as the committed one
        if shutil.which("nvcc") is None or shutil.which("make") is None:
            print("SKIP flash_model_ptxas_report_current: needs nvcc and make (the CUDA toolkit)")
        else:
            fresh = os.path.join(tmp, "ptxas_report.txt")
            r = subprocess.run(["make", "-s", "ptxas-report", f"PTXAS_REPORT={fresh}", f"BUILD={tmp}/build"], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
            lines = lambda text: [l for l in text.splitlines() if l and not l.startswith("#")]  # noqa: E731
            now = open(fresh).read() if os.path.exists(fresh) else ""
            ok = r.returncode == 0 and lines(now) == lines(committed) and r.stdout.count("PASS flash_") == 8
            diff = [l for l in lines(now) if l not in lines(committed)][:3]
            check("flash_model_ptxas_report_current", ok, f"rc {r.returncode}; new lines {diff}; {r.stdout.strip()[-300:]}")
    # README and docs/gpu.md quote the as-built phase figures at causal T = 4096: they must be the
    # ones the script prints now (a kernel change that moves the model moves the docs with it)
    r = subprocess.run([sys.executable, SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    figs = {(hs, ph): v for hs, ph, v in re.findall(r"HS (\d+) (forward|backward) +as built +(\d+) TFLOP/s", r.stdout)}
    pair = lambda ph: f"{figs.get(('64', ph))} / {figs.get(('128', ph))}"  # noqa: E731
    quote = f"{pair('forward')} TFLOP/s forward and {pair('backward')} backward"
    for name, doc in (("readme", "README.md"), ("gpu", os.path.join("docs", "gpu.md"))):
        text = " ".join(open(os.path.join(REPO, doc)).read().split())  # line breaks as spaces
        check(f"flash_model_figures_in_{name}", len(figs) == 4 and quote in text, f"{doc} does not quote '{quote}' (rc {r.returncode})")
    for name, args, want in [("head_size", ["--hs", "48"], "--hs: expected head sizes among"),
                             ("efficiency", ["--efficiency", "2"], "--efficiency"),
                             ("seq_len", ["-t", "0"], "-t/--seq-len"),
                             ("missing_report_in_check", ["--check", "--ptxas", os.path.join(REPO, "no_such_report.txt")], "--ptxas: cannot read")]:
        r = subprocess.run([sys.executable, SCRIPT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        check(f"flash_model_refuses_{name}", testlib.one_error_line(r.returncode, r.stderr) and want in r.stderr, f"rc {r.returncode} {r.stderr.strip()}")
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
