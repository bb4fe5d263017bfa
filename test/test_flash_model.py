"""Tests for dev/flash_model.py on hand-computed configurations: the figures of the as-built
forward kernel at HS 64 (FLOPs and shared-memory bytes per tile, their ratio, the H200 ceiling
from shared memory), the causal fraction of a two-block sequence, the configuration read from the
kernel source (a header with other tile constants changes the figures as computed by hand), and
its one-line errors.

Prints "PASS name" / "FAIL name: detail" lines; exits 1 on any failure.

    python3 test/test_flash_model.py
"""
import csv
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "test"))
sys.path.insert(0, os.path.join(REPO, "dev"))
import testlib  # noqa: E402
import flash_model  # noqa: E402

SCRIPT = os.path.join(REPO, "dev", "flash_model.py")
check = testlib.Checks()


def rows_of(*args):
    r = subprocess.run([sys.executable, SCRIPT, "--csv", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = [l for l in r.stdout.splitlines() if "," in l]
    table = list(csv.DictReader(lines)) if r.returncode == 0 else []
    return r.returncode, table, r.stderr


def main():
    rc, table, err = rows_of("-t", "4096", "--hs", "64")
    fwd = [r for r in table if r["design"] == "as built" and r["kernel"] == "flash_forward_kernel"]
    # by hand: 2 products of 2*64*64*64 FLOPs; each of 4 warps reads the K and V tiles
    # (64*64*2 bytes each), the loads write both: 4*(8192+8192) + 2*8192 = 81920 bytes; 12.8
    # FLOP/B x (132 SMs x 128 B x 1.98e9 /s = 33.45 TB/s) = 428 TFLOP/s
    ok = rc == 0 and len(fwd) == 1 and fwd[0]["flops/tile"] == "1048576" and fwd[0]["smem B/tile"] == "81920" and \
        fwd[0]["flop/B"] == "12.8" and fwd[0]["smem TF/s"] == "428"
    check("flash_model_forward_hs64_by_hand", ok, f"rc {rc} {fwd} {err}")
    # causal T=128 in 64 x 64 tiles: block 0 computes 64 x 64, block 1 64 x 128: 12288 pairs for
    # 128*129/2 = 8256 under the diagonal
    got = flash_model.causal_fraction(128, 64, 64)
    check("flash_model_causal_fraction_by_hand", abs(got - 8256 / 12288) < 1e-12, f"{got} vs {8256 / 12288}")
    check("flash_model_causal_fraction_one_tile", abs(flash_model.causal_fraction(64, 64, 64) - 2080 / 4096) < 1e-12)

    # the configuration comes from the header: tiles of 32 and 2 warps
    with tempfile.TemporaryDirectory() as tmp:
        header = os.path.join(tmp, "fa.cuh")
        with open(header, "w") as f:
            f.write("static const int FLASH_WARPS = 2;\nstatic const int FLASH_TILE = 32;\n"
                    "struct FlashBwdTile { static const int BQ = HS == 128 ? 16 : 32; };\n")
        rc, table, err = rows_of("--header", header, "--hs", "64", "-t", "4096")
        fwd = [r for r in table if r["design"] == "as built" and r["kernel"] == "flash_forward_kernel"]
        # 2 x 2*32*32*64 = 262144 FLOPs; 2 warps x (4096 + 4096) + 2 x 4096 = 24576 bytes: 10.7 FLOP/B
        ok = rc == 0 and len(fwd) == 1 and fwd[0]["flops/tile"] == "262144" and fwd[0]["smem B/tile"] == "24576" and fwd[0]["flop/B"] == "10.7"
        check("flash_model_reads_the_header", ok, f"rc {rc} {fwd} {err}")
        open(header, "w").write("nothing here\n")
        r = subprocess.run([sys.executable, SCRIPT, "--header", header], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        check("flash_model_refuses_header_without_config", testlib.one_error_line(r.returncode, r.stderr) and "cannot find FLASH_TILE" in r.stderr,
              f"rc {r.returncode} {r.stderr.strip()}")
    for name, args, want in [("head_size", ["--hs", "48"], "--hs: expected head sizes among"),
                             ("efficiency", ["--efficiency", "2"], "--efficiency"),
                             ("seq_len", ["-t", "0"], "-t/--seq-len")]:
        r = subprocess.run([sys.executable, SCRIPT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        check(f"flash_model_refuses_{name}", testlib.one_error_line(r.returncode, r.stderr) and want in r.stderr, f"rc {r.returncode} {r.stderr.strip()}")
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
