"""Tests for dev/step_model.py: its constants are the kernels' (the Gram matrix's column blocks
and the rmsnorm slab, read from llmc/muon.cuh and llmc/rmsnorm.cuh), the Gram share in closed
form against a count of the products muon_gram issues, every change saves time and the step row
is their sum, the flash ratios are flash_model.py's, Muon's memory passes in closed form, docs/gpu.md quotes the two step rows, and a
bad flag ends in one error line.

Prints "PASS name" / "FAIL name: detail" lines and exits 1 on any failure.

    python3 test/test_step_model.py
"""
import contextlib
import io
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "dev"))
sys.path.insert(0, os.path.join(REPO, "test"))
import step_model as sm  # noqa: E402
import testlib  # noqa: E402

check = testlib.Checks()


def header_int(path, name):
    m = re.search(r"static const int %s = (\d+);" % name, open(os.path.join(REPO, path)).read())
    return int(m.group(1)) if m else None


def main():
    got = header_int("llmc/muon.cuh", "MUON_GRAM_BLOCKS")
    check("step_model_gram_blocks_are_muon_cuh", got == sm.GRAM_BLOCKS, f"muon.cuh {got}, model {sm.GRAM_BLOCKS}")
    got = header_int("llmc/rmsnorm.cuh", "RMSNORM_DW_SLAB")
    check("step_model_rms_slab_is_rmsnorm_cuh", got == sm.RMS_SLAB, f"rmsnorm.cuh {got}, model {sm.RMS_SLAB}")

    # the Gram share: the products muon_gram issues (rows m - j w against w columns, K = n),
    # counted, against (blocks + 1) / (2 blocks), for each block count and a few m
    bad = []
    for blocks in (1, 2, 4, 8):
        for m in (128 * blocks, 1024, 1536):
            if m % blocks:
                continue
            w = m // blocks
            counted = sum((m - j * w) * w for j in range(blocks)) / (m * m)
            if abs(counted - sm.gram_share(blocks)) > 1e-12:
                bad.append((blocks, m, counted))
    check("step_model_gram_share_counted", not bad, f"{bad}")

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        table = sm.main(["--csv"])
    ok, detail = True, []
    for name in sm.PRESETS:
        mine = [r for r in table if r[0] == name]
        changes, step = mine[:-1], mine[-1]
        saved = [float(r[6]) for r in changes]
        ok &= all(s > 0 for s in saved)
        ok &= abs(sum(saved) - float(step[6])) < 0.01 * len(saved)
        ok &= abs(float(step[4]) - float(step[5]) - float(step[6])) < 0.06
        ok &= all(float(r[5]) < float(r[4]) for r in changes)
        detail.append(f"{name}: saved {saved}, step {step[4:]}")
    check("step_model_rows_add_up", ok, "; ".join(detail))

    # the flash rows: the measured time times flash_model's new / old ratio, each below 1
    rf, rb = sm.flash_ratios("llama300m")
    row = [r for r in table if r[0] == "llama300m" and r[2] == "flash backward"][0]
    want = 16 * sm.MEASURED["llama300m"]["flash_bwd"] * rb
    check("step_model_flash_ratio", 0.5 < rf < 1.0 and 0.5 < rb < 1.0 and abs(float(row[5]) - want) < 0.006,
          f"ratios {rf:.4f} {rb:.4f}, row {row[5]} against {want:.3f}")

    # Muon's memory passes: every Muon element moves 16 bytes in the momentum and 6 + 12 in X and
    # the update, all at the momentum's measured rate, so the passes take 34/16 of the momentum
    bad = []
    for name in sm.PRESETS:
        row = [r for r in table if r[0] == name and r[2] == "momentum, norm, X, update"][0]
        want = sm.MEASURED[name]["passes"]["momentum"] * 34 / 16
        if abs(float(row[5]) - want) > 0.006:
            bad.append(f"{name}: {row[5]} against {want:.3f}")
    check("step_model_muon_passes_closed_form", not bad, "; ".join(bad))

    # docs/gpu.md quotes the step rows: "107.3 -> 100.1" (before -> after)
    docs = open(os.path.join(REPO, "docs", "gpu.md")).read()
    missing = [f"{r[4]} → {r[5]} ms" for r in table if r[1] == "step" and f"{r[4]} → {r[5]} ms" not in docs]
    check("step_model_figures_in_gpu_md", not missing, f"docs/gpu.md lacks {missing}")

    # --attention flash_sm90: the same rows and per preset the wgmma kernels' two, each the flash
    # time as built times flash_model's wgmma / mma.sync ratio, the step less by their savings
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        wg = sm.main(["--csv", "--attention", "flash_sm90"])
    bad = []
    for name in sm.PRESETS:
        plain = [r for r in table if r[0] == name]
        mine = [r for r in wg if r[0] == name]
        extra = [r for r in mine if r[1] == "flash on wgmma (--attention flash_sm90)"]
        ratios = sm.sm90_ratios(name)
        if [r for r in mine[:-1] if r not in extra] != plain[:-1] or [r[2] for r in extra] != ["flash forward", "flash backward"]:
            bad.append(f"{name}: rows {[r[1] for r in mine]}")
            continue
        for r, ratio in zip(extra, ratios):
            if not 0.3 < ratio < 1.0 or abs(float(r[5]) - float(r[4]) * ratio) > 0.011:  # both printed to 0.01
                bad.append(f"{name} {r[2]}: {r[4]} -> {r[5]}, ratio {ratio:.4f}")
        saved = sum(float(r[6]) for r in extra)
        if abs(float(plain[-1][5]) - saved - float(mine[-1][5])) > 0.11:  # the steps printed to 0.1
            bad.append(f"{name}: step {plain[-1][5]} -> {mine[-1][5]}, saved {saved:.2f}")
        if f"{mine[-1][4]} → {mine[-1][5]} ms" not in docs:
            bad.append(f"docs/gpu.md lacks {mine[-1][4]} → {mine[-1][5]} ms")
    check("step_model_flash_sm90_rows", not bad, "; ".join(bad))

    r = subprocess.run([sys.executable, os.path.join(REPO, "dev", "step_model.py"), "--bogus"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    check("step_model_bad_flag_one_line", testlib.one_error_line(r.returncode, r.stderr), f"rc {r.returncode} {r.stderr!r}")
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
