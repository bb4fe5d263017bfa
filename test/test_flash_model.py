"""Tests for dev/flash_model.py: the work per warp and tile of the as-built forward at HS 64 and
backward at HS 128 against hand counts (which match the FP32, HMMA and LDSM counts of the
kernels' SASS), the header's tile expressions (nested and ordered comparisons of HS), the warps a
causal forward block row computes, the block schedule of the causal tail on small cases worked by
hand, the configuration read from the kernel source (a header with other tiles changes the
counts), the calibration (every plain-commit row of dev/flash_measured.csv within 20%, the docs'
table the one the script prints), --check against ptxas reports with a spill (a warning), too many
registers and a missing kernel, the report `make ptxas-report` writes now against the committed
one, and the one-line errors.

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


def run(*args):
    r = subprocess.run([sys.executable, SCRIPT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return r.returncode, r.stdout, r.stderr


def rows_of(*args):
    rc, out, err = run("--csv", *args)
    table = list(csv.DictReader([l for l in out.splitlines() if "," in l])) if rc == 0 else []
    return rc, table, err


def row(table, shape, direction):
    got = [r for r in table if r["shape"] == shape and r["direction"] == direction]
    return got[0] if len(got) == 1 else None


def run_check(report, hs="16,32,64,128"):
    rc, out, err = run("--check", "--hs", hs, "--ptxas", report)
    return rc, out + err


def main():
    header = os.path.join(REPO, "llmc", "flash_common.cuh")
    cfg = flash_model.read_config(header, [64, 128])
    # by hand, the HS 64 forward (128 queries, 4 warps of 32 rows: M = 2 row tiles, 64-key tiles,
    # Q in registers): S and P V each 2 row tiles x 8 n tiles x 4 k steps = 64 mma; K and V each
    # 4 x 4 ldmatrix.x4; exp: 32 lanes x 2 row tiles x (32 scores + 2 corrections) = 2176; FP32
    # (the "ex2" softmax, a tile below the diagonal): 2 x (3.5 x 32 + 0.62 x 32 + 14) = 291.68,
    # the rescale's 32 FMUL a row tile on 62% of the tiles (the SASS of that path of its tile loop:
    # 316 FP32 instructions with both rescales, 128 HMMA, 32 LDSM, 68 MUFU); the measured designs'
    # "exp2f" softmax: 2 x (8.5 x 32 + 32 + 14) = 636 (their SASS: 636)
    got = flash_model.fwd_warp_tile(cfg[64][0], 64)
    ok = {k: v for k, v in got.items() if k != "fp32"} == dict(mma=128, ldsm=32, exp=2176) and abs(got["fp32"] - 291.68) < 1e-9
    check("flash_model_forward_hs64_by_hand", ok, f"{got}")
    got = flash_model.fwd_warp_tile(dict(cfg[64][0], SOFTMAX="exp2f"), 64)
    check("flash_model_forward_hs64_exp2f_by_hand", got == dict(mma=128, ldsm=32, exp=2176, fp32=636), f"{got}")
    # by hand, the HS 128 backward (128 keys, 8 warps, query tiles of 32; dQ on 2 x 4 warps of
    # 16 rows x 32 columns): the four products 4 x 4 n tiles x 8 k steps = 128 mma; Sᵀ and dPᵀ
    # 8 x (1 + 2) ldmatrix.x4 each, dV and dK 2 x 8 each: 80; exp 16 x 32 = 512; FP32 5.5 x 16 =
    # 88; dQ = dS K: 8 k steps x 4 n tiles = 32 mma, 8 x (1 + 2) = 24 ldmatrix.x4 (the SASS of
    # its tile loop: 160 HMMA, 104 LDSM, 88 FP32)
    four, dq = flash_model.bwd_warp_tile(cfg[128][1], 128)
    ok = (four["mma"], four["ldsm"], four["exp"], four["fp32"], dq["mma"], dq["ldsm"]) == (128, 80, 512, 88, 32, 24)
    check("flash_model_backward_hs128_by_hand", ok, f"{four} {dq}")
    # by hand, the wgmma backward at HS 64 (128 keys, query tiles of 128: two sub-tiles of 64 a
    # warpgroup; K and V in registers): a warpgroup's sub-tile, 4 products of 2 x 64 x 64 x 64 =
    # 2097152 FLOPs, its shared-memory operands 4 x 64 x 64 x 2 bytes (Q and dO twice each), dSᵀ
    # 64 x 64 x 2, lse and D 4 warps x 16 x 32 x 8: 57344 bytes (73728 with K and V read from shared
    # memory too); 4096 exp; FP32 4 x 5.5 x 32 = 704. The tile's rest: dQ 2 x 128 x 128 x 64 FLOPs; its
    # two 64 x 64 blocks read 2 x 2 x 64 x 128 x 2 bytes of dSᵀ and K, the part stored and read
    # 2 x 128 x 64 x 4, the fills 2 x 128 x 64 x 2 + 128 x 8: 164864
    b = flash_model.read_sm90_tiles(flash_model.os.path.join(REPO, "llmc", "flash_common.cuh"), 64, "backward")
    sub, rest = (flash_model.sm90_bwd_wg_sub(b, 64), flash_model.sm90_bwd_tile_rest(b, 64)) if b else ({}, {})
    ok = b is not None and (b["BQ"], b["BK"], b["KV_REGS"]) == (128, 128, True) and \
        sub == dict(wgmma=2097152, smem=57344, exp=4096, fp32=704.0) and rest == dict(wgmma=2097152, smem=164864) and \
        flash_model.sm90_bwd_wg_sub(dict(b, KV_REGS=False), 64)["smem"] == 73728
    check("flash_model_backward_sm90_hs64_by_hand", ok, f"{b} {sub} {rest}")
    # by hand, a warpgroup's key tile of the wgmma forward at HS 128 (BK 64, one block an SM, Q in
    # registers), in SM clocks at 818.2 TFLOP/s over 132 SMs at 1.98 GHz (3130.6 FLOPs a clock): S
    # and P V 2 x 2 x 64 x 64 x 128 FLOPs = 669.9; K and V read 2 x 64 x 128 x 2 bytes at 128 a
    # clock = 256 (Q's 64 rows 128 more where read from shared memory); 4 x 32 x 34 exp at 15.8 =
    # 275.4; 4 x (3.5 x 32 + 0.62 x 64 + 14) FP32 at 4 = 165.7; added 1367.0, less the pipeline's
    # hidden part, the shorter of P V (334.9) and the softmax (441.1): 1032.1 (1160.1 with Q read)
    f = flash_model.read_sm90_tiles(flash_model.os.path.join(REPO, "llmc", "flash_common.cuh"), 128)
    got = (flash_model.sm90_wg_clk(f, 128, flash_model.H200, 1), flash_model.sm90_wg_clk(dict(f, Q_REGS=False), 128, flash_model.H200, 1)) if f else None
    check("flash_model_forward_sm90_pipeline_hs128_by_hand", got is not None and (f["BK"], f["Q_REGS"]) == (64, True) and
          abs(got[0] - 1032.1) < 0.1 and abs(got[1] - 1160.1) < 0.1, f"{f} {got}")
    # by hand, the same tile with a part left out (dev_attention --ablate's variants): without P V,
    # S alone 334.9, K's reads 128, the exp and FP32 as above, nothing hidden: 904.1; without the
    # scores' exponentials, 4 x 32 x 2 row corrections 16.2 exp, the pipeline hiding the softmax
    # (182.0 < 334.9): 669.9 + 256 + 16.2 + 165.7 - 182.0 = 925.9. The HS 64 backward's rest without
    # the dQ product (the writer still reads the stage: 32768 + the fills 33792), without the
    # writer's reads (the product's 65536 + the stage stored 32768 + 33792), without both (33792);
    # a sub-tile without its exponentials: exp 0, the rest as above
    got = (flash_model.sm90_wg_clk(f, 128, flash_model.H200, 1, ("pv",)), flash_model.sm90_wg_clk(f, 128, flash_model.H200, 1, ("exp",))) if f else None
    rests = [flash_model.sm90_bwd_tile_rest(b, 64, sk) for sk in (("dq",), ("dq_sum",), ("dq", "dq_sum"))] if b else []
    ok = got is not None and abs(got[0] - 904.1) < 0.1 and abs(got[1] - 925.9) < 0.1 and \
        rests == [dict(wgmma=0, smem=66560), dict(wgmma=2097152, smem=132096), dict(wgmma=0, smem=33792)] and \
        flash_model.sm90_bwd_wg_sub(b, 64, ("exp",)) == dict(sub, exp=0)
    check("flash_model_sm90_parts_left_out_by_hand", ok, f"{got} {rests}")
    # --ablation: each variant of dev_attention --ablate, against the kernel as built, whose time
    # is the main table's; a part left out never costs time, both dQ parts left out save the most
    # of the three; docs/gpu.md quotes the table (the prediction the GPU run is held to)
    rc, out, err = run("--ablation", "--shape", "llama300m,llama600m")
    _, main_rows, _ = rows_of("--shape", "llama300m,llama600m")
    abl = [l.strip("| ").split(" | ") for l in out.splitlines() if l.startswith("| llama")]
    by = {(r[0], r[1], r[2]): (float(r[3]), float(r[4])) for r in abl}
    want = [(sh, d, v) for sh in ("llama300m", "llama600m") for d, vs in (("forward_sm90", ("as_built", "no_exp", "no_pv")),
            ("backward_sm90", ("as_built", "no_exp", "no_dq_product", "no_dq_sum", "no_dq"))) for v in vs]
    ok = rc == 0 and sorted(by) == sorted(want) and all(
        abs(by[(sh, d, "as_built")][0] - float(row(main_rows, sh, d)["ms"])) < 1e-4 for sh in ("llama300m", "llama600m") for d in ("forward_sm90", "backward_sm90")) and \
        all(0 < x[1] <= 1.0 for x in by.values()) and \
        all(by[(sh, "backward_sm90", "no_dq")][1] <= min(by[(sh, "backward_sm90", v)][1] for v in ("no_dq_product", "no_dq_sum")) for sh in ("llama300m", "llama600m"))
    check("flash_model_ablation_table", ok, f"rc {rc} {err.strip()} {sorted(by)}")
    docs = open(os.path.join(REPO, "docs", "gpu.md")).read()
    missing = [l for l in out.splitlines() if l.startswith("| llama") and l not in docs]
    check("flash_model_ablation_in_gpu", rc == 0 and not missing, f"docs/gpu.md lacks {missing[:2]}")
    # the variants it models are the ones dev_attention --ablate times, by name
    src = open(os.path.join(REPO, "dev", "cuda", "attention.cu")).read()
    timed = {(("backward_sm90" if d == "bwd" else "forward_sm90"), v) for d, v in re.findall(r'variant\((fwd|bwd), Skip<[^>]*>\(\), "(\w+)"\)', src)}
    modelled = {(d, v) for d, vs in flash_model.SM90_ABLATIONS.items() for v, _ in vs} | {(d, "as_built") for d in flash_model.SM90_ABLATIONS}
    check("flash_model_ablation_names_are_dev_attentions", len(timed) == 8 and timed == modelled, f"dev_attention {sorted(timed)}, model {sorted(modelled)}")
    hdr = os.path.join(tempfile.mkdtemp(), "flash_common.cuh")
    shutil.copy(header, hdr)
    rc, out, err = run("--ablation", "--shape", "llama300m", "--header", hdr)
    check("flash_model_ablation_without_wgmma_sources", rc == 1 and err.count("\n") == 1 and "no wgmma kernel source" in err, f"rc {rc} {err!r}")
    shutil.rmtree(os.path.dirname(hdr))
    rc, out, err = run("--ablation", "--shape", "1:256:4:4:32")
    check("flash_model_ablation_refuses_other_head_sizes", rc == 1 and err.count("\n") == 1 and "--ablation: no shape of head size 64 or 128" in err,
          f"rc {rc} {err!r}")
    # the tile expressions of the header: ordered comparisons and nested conditionals
    cv = flash_model.c_value
    ok = (cv("HS >= 64 ? 4 : 8", 64), cv("HS >= 64 ? 4 : 8", 32), cv("HS == 128 ? 32 : HS == 16 ? 128 : 64", 16),
          cv("HS == 128 ? 32 : HS == 16 ? 128 : 64", 64), cv("HS != 128", 128), cv("HS < 32", 16)) == (4, 8, 128, 64, False, True)
    check("flash_model_tile_expressions", ok)
    # causal T = 256 in 128-query blocks of 4 warps of 32 rows over 64-key tiles: block 0 computes
    # tile 0 with 4 warps and tile 1 (keys 64..127) with warps 2 and 3; block 1 tiles 0..2 with 4
    # warps, tile 3 (keys 192..255) with warps 2 and 3
    f = dict(BQ=128, WARPS=4, BK=64)
    got = [flash_model.fwd_active_warps(f, 256, qt) for qt in (0, 1)]
    check("flash_model_causal_warps_by_hand", got == [[4, 2], [4, 4, 4, 2]], f"{got}")
    # the schedule: 3 blocks of work 10 on one SM of 2 slots: two share it (20 clocks), the
    # third runs alone (10): 30; works 10 and 30 sharing: the first ends at 20 with a third of
    # the second done, the second alone ends at 40; a latency adds to the block's time unshared
    got = [flash_model.tail_clk([(10, 0)] * 3, 1, 2), flash_model.tail_clk([(10, 0), (30, 0)], 1, 2),
           flash_model.tail_clk([(10, 5), (10, 5)], 2, 1)]
    check("flash_model_schedule_by_hand", all(abs(g - w) < 1e-9 for g, w in zip(got, [30, 40, 15])), f"{got}")

    with tempfile.TemporaryDirectory() as tmp:
        # the configuration comes from the header: other tiles, conditionals
        fake = os.path.join(tmp, "fa.cuh")
        with open(fake, "w") as fh:
            fh.write("template <int HS>\nstruct FlashFwdTile {\n    static const int BQ = 64, WARPS = HS >= 64 ? 4 : 2, BK = 32, STAGES = 2, MIN_BLOCKS = 1;\n"
                     "    static const bool Q_REGS = HS != 128;\n};\ntemplate <int HS>\nstruct FlashBwdTile {\n"
                     "    static const int BK = 64, WARPS = 4, BQ = HS == 128 ? 16 : HS == 64 ? 32 : 64, MIN_BLOCKS = 1, DQ_STAGES = 2;\n};\n")
        open(os.path.join(tmp, "none.txt"), "w").close()  # a report without kernels: no registers known
        rc, table, err = rows_of("--header", fake, "--shape", "1:256:2:2:64", "--ptxas", os.path.join(tmp, "none.txt"))
        # forward: M = 1 row tile of 16; 2 x 1 x 4 n tiles x 4 k steps = 32 mma; 2 x 4 x 2 = 16
        # ldmatrix.x4 (Q in registers); one warp's tile: 32 mma at 4096 FLOPs / (620e12 / (132 x
        # 1.98e9)) = 1.727 clocks each; the block of 4 warps, alone on its SM: 221 clocks of mma
        # backward (BQ 32 at HS 64; dQ on 2 x 2 warps of 16 rows x 32 columns): four products of 4
        # n tiles x 4 k steps, dQ 4 k steps x 4 n tiles: 80 mma a warp, 4 warps: 553 clocks
        fr, br = row(table, "1:256:2:2:64", "forward"), row(table, "1:256:2:2:64", "backward")
        ok = rc == 0 and fr is not None and br is not None and fr["mma clk"] == "221" and br["mma clk"] == "553"
        check("flash_model_reads_the_header", ok, f"rc {rc} {table} {err}")
        open(fake, "w").write("nothing here\n")
        rc, out, err = run("--header", fake)
        check("flash_model_refuses_header_without_config", testlib.one_error_line(rc, err) and "cannot find struct FlashFwdTile" in err,
              f"rc {rc} {err.strip()}")

        # --check on reports: the committed one passes (the backward's spills warn; each of the 6
        # backward kernels' setmaxnreg fits the registers it was launched with); a spill
        # elsewhere warns, 255 registers at HS 32 (one block of 256 threads where the launch
        # bound asks 2), a missing kernel and a wgmma backward launched with 160 registers a
        # thread (one block still fits; its setmaxnreg would wait for ever) fail
        committed = open(REPORT).read()
        rc, out = run_check(REPORT)
        check("flash_model_check_committed_report", rc == 0 and out.count("PASS") == 18 and out.count("setmaxnreg takes") == 6,
              f"rc {rc} {out.strip()}")
        cases = [("spill", lambda l: l if "flash_forward_kernel<128>" not in l else "251   0      0      8       8       " + l.split(None, 5)[5],
                  0, "WARN flash_forward_kernel<128>: 16 spill bytes"),
                 ("registers", lambda l: l if "flash_forward_kernel<32>" not in l else "255   0      0      0       0       " + l.split(None, 5)[5],
                  1, r"FAIL flash_forward_kernel<32>: 255 registers x 256 threads, [\d.]+ KB shared: 1 blocks per SM"),
                 ("missing_kernel", lambda l: "" if "flash_backward_kernel<32>" in l else l, 1, "not in the ptxas report"),
                 ("setmaxnreg_pool", lambda l: l if "flash_backward_sm90_kernel<64," not in l else "160   0      0      0       0       " + l.split(None, 5)[5],
                  1, r"PASS flash_backward_sm90_kernel<64>: 160 registers x 384 threads.*\nFAIL flash_backward_sm90_kernel<64>: setmaxnreg "
                     r"takes 256 x 232 \+ 128 x 40 = 64512 registers of the block's 160 x 384 = 61440 \(setmaxnreg.inc waits")]
        for name, edit, want_rc, want in cases:
            bad = os.path.join(tmp, name + ".txt")
            open(bad, "w").write("\n".join(edit(l) for l in committed.splitlines()) + "\n")
            rc, out = run_check(bad)
            check(f"flash_model_check_{name}", rc == want_rc and re.search(want, out) is not None, f"rc {rc} {out.strip()}")

        # the report as the compiler writes it now: the same kernel lines as the committed one
        if shutil.which("nvcc") is None or shutil.which("make") is None:
            print("SKIP flash_model_ptxas_report_current: needs nvcc and make (the CUDA toolkit)")
        else:
            fresh = os.path.join(tmp, "ptxas_report.txt")
            r = subprocess.run(["make", "-s", "ptxas-report", f"PTXAS_REPORT={fresh}", f"BUILD={tmp}/build"], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
            lines = lambda text: [l for l in text.splitlines() if l and not l.startswith("#")]  # noqa: E731
            now = open(fresh).read() if os.path.exists(fresh) else ""
            ok = r.returncode == 0 and lines(now) == lines(committed) and r.stdout.count("PASS flash_") == 18
            diff = [l for l in lines(now) if l not in lines(committed)][:3]
            check("flash_model_ptxas_report_current", ok, f"rc {r.returncode}; new lines {diff}; {r.stdout.strip()[-300:]}")

    # the calibration: a line for every row of the measured table whose variant is a plain
    # commit, each within 20%; docs/gpu.md quotes the table it ends with
    rc, out, err = run("--calibration")
    measured = [l for l in open(os.path.join(REPO, "dev", "flash_measured.csv")).read().splitlines() if l and not l.startswith("#")]
    plain = [r for r in csv.DictReader(measured) if re.fullmatch(r"[0-9a-f]{7}", r["variant"])]
    got = [l.split(",") for l in out.splitlines() if re.match(r"[0-9a-f]{7},", l)]
    ratios = [float(g[6]) for g in got]
    check("flash_model_calibration_within_20_percent", rc == 0 and len(got) == len(plain) and len(plain) >= 32 and
          all(0.8 <= x <= 1.2 for x in ratios), f"rc {rc}, {len(got)} of {len(plain)} rows, ratios {min(ratios, default=0)}..{max(ratios, default=0)} {err}")
    table = [l for l in out.splitlines() if l.startswith("| ")]
    docs = open(os.path.join(REPO, "docs", "gpu.md")).read()
    missing = [l for l in table if l not in docs]
    check("flash_model_figures_in_gpu", len(table) == 6 and not missing, f"docs/gpu.md lacks {missing or table}")

    for name, args, want in [("head_size", ["--check", "--hs", "48"], "--hs: expected head sizes among"),
                             ("shape", ["--shape", "llama9b"], "--shape: expected a name"),
                             ("shape_numbers", ["--shape", "4:0:16:16:64"], "--shape: '4:0:16:16:64' needs"),
                             ("measured", ["--calibration", "--measured", os.path.join(REPO, "no_such.csv")], "--measured: cannot read"),
                             ("missing_report_in_check", ["--check", "--ptxas", os.path.join(REPO, "no_such_report.txt")], "--ptxas: cannot read"),
                             ("missing_report", ["--ptxas", os.path.join(REPO, "no_such_report.txt")], "--ptxas: cannot read"),
                             ("measured_without_calibration", ["--measured", os.path.join(REPO, "no_such.csv")], "--measured: cannot read")]:
        rc, out, err = run(*args)
        check(f"flash_model_refuses_{name}", testlib.one_error_line(rc, err) and want in err, f"rc {rc} {err.strip()}")
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
