#!/usr/bin/env python3
"""flash_model.py — a performance model of the flash attention kernels (llmc/flash_attention.cuh):
per kernel and head size, the tensor-core FLOPs and shared-memory bytes of one inner-loop tile,
the ceiling each implies on an H200, the causal work, occupancy, and the resulting modelled
TFLOP/s at a causal shape, for the kernels as built and, from the same command, for the
engine's earlier two-kernel design ("before").

  python3 dev/flash_model.py                    # causal T=4096, HS 64 and 128: as built, before
  python3 dev/flash_model.py -t 2048 --hs 128 --csv
  python3 dev/flash_model.py --check            # no spills, launch-bound occupancy met (exit 1 if not)

What it counts, per block and inner-loop tile (the forward: a query block against one key tile;
the backward: a key block against one query tile):
  flops     2·rows·cols·HS per tile product (mma.sync m16n8k16: bf16 operands, fp32 accumulators)
  smem      bytes read from shared memory by the products (every warp reads the whole of a B
            operand tile; an A operand held in registers costs nothing, one read from shared memory
            costs its warp's rows), plus the bytes the tile's loads and dSᵀ write there
Ceilings: tensor = --mma-tflops; shared memory = flops per smem byte x 128 bytes per clock per SM
x SMs x clock. The model is the lower of the two, times the causal fraction of the work the
kernel computes that lies under the diagonal (at a warp's granularity where a warp skips tiles
above its rows), times the useful share of the products (the backward's useful work is 5 products
per tile pair; the earlier design computed 7). It is a ceiling: no latency, occupancy (printed
beside it), softmax, load-issue or global-memory limit is in it (the one-pass backward also moves
2 x BQ x HS fp32 of dQ sums per tile pair through L2, not counted), so a GPU's measurement lands
below it by a factor that the first run calibrates (--efficiency scales every modelled figure).
Not yet measured on a GPU.

The as-built tiles are read from llmc/flash_attention.cuh (struct FlashFwdTile and FlashBwdTile),
the registers and spills per thread from dev/cuda/ptxas_report.txt (make ptxas-report); the
earlier design's tiles and registers are a table in this file (BEFORE).
"""
import argparse
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import cli_util  # noqa: E402
from cli_util import die  # noqa: E402

# H200 SXM (the H100's SM), by the vendor's datasheet and published reports of the part, none of
# it measured by this project yet: 132 SMs; a 1.98 GHz SM clock under
# load; 32 banks x 4 bytes of shared memory per clock per SM; 64K 32-bit registers and 228 KB of
# shared memory per SM (227 KB to one block). The mma.sync (HMMA) dense bf16 rate is an
# assumption: about two thirds of the 989 TFLOP/s that wgmma reaches by the datasheet.
H200 = dict(sms=132, clock_ghz=1.98, smem_bytes_per_clk=128, regs_per_sm=65536, smem_per_sm=228 * 1024, max_blocks_per_sm=32)
MMA_TFLOPS = 660.0
BF16 = 2

# The engine's earlier design (until this model's as-built rows replaced it): 64 x 64 tiles, 4
# warps of 16 rows; a forward with Q in registers; a dQ kernel and a dK/dV kernel (query tiles
# of 32 at HS 128, else 64) that each recompute S and dP (7 products). Registers per thread from
# its ptxas report (CUDA 13.0, sm_90).
BEFORE = dict(tile=64, warps=4, bq={16: 64, 32: 64, 64: 64, 128: 32},
              regs={("forward", 16): 96, ("forward", 32): 128, ("forward", 64): 129, ("forward", 128): 208,
                    ("dq", 16): 128, ("dq", 32): 136, ("dq", 64): 169, ("dq", 128): 235,
                    ("dkv", 16): 107, ("dkv", 32): 158, ("dkv", 64): 170, ("dkv", 128): 241})


def c_value(expr, hs):
    """The value of a tile constant's initializer: a number, true / false, `HS == n` / `HS != n`,
    or `HS == n ? a : <initializer>`."""
    e = expr.strip()
    if re.fullmatch(r"\d+", e):
        return int(e)
    if e in ("true", "false"):
        return e == "true"
    m = re.fullmatch(r"HS\s*(==|!=)\s*(\d+)", e)
    if m:
        return (hs == int(m.group(2))) == (m.group(1) == "==")
    m = re.fullmatch(r"HS\s*(==|!=)\s*(\d+)\s*\?\s*(\d+)\s*:\s*(.+)", e, re.S)
    if m:
        return int(m.group(3)) if (hs == int(m.group(2))) == (m.group(1) == "==") else c_value(m.group(4), hs)
    raise ValueError(expr)


def read_tiles(text, name, fields, hs):
    """{field: value} of `struct name { static const ... };` at head size hs, or None."""
    m = re.search(r"struct %s \{(.*?)\n\};" % name, text, re.S)
    if not m:
        return None
    values = {}
    for decl in re.findall(r"static const (?:int|bool) ([^;]+);", m.group(1)):
        for part in decl.split(","):
            key, _, init = part.partition("=")
            try:
                values[key.strip()] = c_value(init, hs)
            except ValueError:
                return None
    return values if all(f in values for f in fields) else None


FWD_FIELDS = ("BQ", "WARPS", "BK", "STAGES", "MIN_BLOCKS", "Q_REGS")
BWD_FIELDS = ("BK", "WARPS", "BQ", "MIN_BLOCKS")


def read_config(header_path, hss):
    """{hs: (forward tiles, backward tiles)} from the kernel source."""
    try:
        text = open(header_path).read()
    except OSError as e:
        die(f"cannot read '{header_path}' ({e.strerror})")
    cfg = {}
    for hs in hss:
        fwd = read_tiles(text, "FlashFwdTile", FWD_FIELDS, hs)
        bwd = read_tiles(text, "FlashBwdTile", BWD_FIELDS, hs)
        if fwd is None or bwd is None:
            die(f"'{header_path}': cannot find struct FlashFwdTile ({', '.join(FWD_FIELDS)}) and FlashBwdTile "
                f"({', '.join(BWD_FIELDS)}) (the model reads them)")
        cfg[hs] = (fwd, bwd)
    return cfg


def read_ptxas(report_path):
    """{(kernel, HS): (registers per thread, spill bytes stored + loaded)} from the ptxas report;
    {} when it is missing."""
    regs = {}
    try:
        lines = open(report_path).read().splitlines()
    except OSError:
        return regs
    for line in lines:
        m = re.match(r"(\d+)\s+\d+\s+\d+\s+(\d+)\s+(\d+)\s+void (flash_\w+_kernel)<(\d+)>", line)
        if m:
            regs[(m.group(4), int(m.group(5)))] = (int(m.group(1)), int(m.group(2)) + int(m.group(3)))
    return regs


def kernels_as_built(fwd, bwd, hs, ptxas):
    """The engine's two kernels: per tile, the products (rows, cols, k), the shared-memory bytes
    read by them and written there, the block's shared memory, its threads and launch bound."""
    tb = lambda rows: rows * hs * BF16  # noqa: E731  a (rows, HS) bf16 tile
    P = hs + 8  # padded rows
    BQ, BK, W = fwd["BQ"], fwd["BK"], fwd["WARPS"]
    R = BQ // W
    # forward: per key tile S = Q K^T, O += P V; every warp reads all of K and V; Q from
    # registers (Q_REGS) or its rows from shared memory at every tile
    f = dict(kernel="flash_forward_kernel", phase="forward", warps=W, products=[(BQ, BK, hs)] * 2,
             smem_read=(0 if fwd["Q_REGS"] else tb(BQ)) + W * 2 * tb(BK), smem_write=2 * tb(BK),
             smem_block=(BQ + 2 * fwd["STAGES"] * BK) * P * BF16, min_blocks=fwd["MIN_BLOCKS"],
             causal=lambda T: causal_fraction(T, R, BK))
    # backward: a block of KB keys (16 per warp) against a query tile of QB: S^T = K Q^T and
    # dP^T = V dO^T (K, V rows from shared memory, each warp its own; Q, dO read by every warp),
    # dV += P^T dO and dK += dS^T Q (dO, Q read by every warp), dS^T written to shared memory,
    # then dQ = dS K by a grid of RG x CG warps (each reads 16 rows of dS and DC columns of K)
    KB, QB, WB = bwd["BK"], bwd["BQ"], bwd["WARPS"]
    RG = QB // 16
    CG = WB // RG
    DC = hs // CG
    smem_read = (tb(KB) + WB * tb(QB)) + WB * tb(QB) + (tb(KB) + WB * tb(QB)) + WB * tb(QB) + \
        (WB * 16 * KB * BF16 + WB * KB * DC * BF16) + WB * 2 * QB * 4
    b = dict(kernel="flash_backward_kernel", phase="backward", warps=WB, products=[(KB, QB, hs)] * 5,
             smem_read=smem_read, smem_write=2 * tb(QB) + KB * QB * BF16 + 2 * QB * 4,
             smem_block=(2 * KB + 4 * QB) * P * BF16 + KB * (QB + 8) * BF16 + 4 * QB * 4 + 16, min_blocks=bwd["MIN_BLOCKS"],
             # four products skip a warp's 16 keys above the query tile; dQ runs on the whole block
             causal=lambda T: 5 / (4 / causal_fraction(T, QB, 16) + 1 / causal_fraction(T, QB, KB)))
    for k in (f, b):
        k["regs"], k["spills"] = ptxas.get((k["kernel"], hs), (None, None))
    return [f, b]


def kernels_before(hs):
    """The earlier design (BEFORE): forward, dQ and dK/dV kernels on 64 x 64 tiles."""
    T, W, BQ = BEFORE["tile"], BEFORE["warps"], BEFORE["bq"][hs]
    P = hs + 8
    tb = lambda rows: rows * hs * BF16  # noqa: E731
    r = lambda name: BEFORE["regs"][(name, hs)]  # noqa: E731
    return [
        dict(kernel="forward (before)", phase="forward", warps=W, products=[(T, T, hs)] * 2,
             smem_read=W * 2 * tb(T), smem_write=2 * tb(T), smem_block=3 * T * P * BF16, regs=r("forward"),
             causal=lambda t: causal_fraction(t, T, T)),
        # dQ: S = Q K^T, dP = dO V^T, dQ += dS K; K read twice and V once by every warp, dO once
        dict(kernel="dq (before)", phase="backward", warps=W, products=[(T, T, hs)] * 3,
             smem_read=W * 3 * tb(T) + tb(T), smem_write=2 * tb(T), smem_block=4 * T * P * BF16, regs=r("dq"),
             causal=lambda t: causal_fraction(t, T, T)),
        # dK, dV: S^T, dV += P^T dO, dP^T, dK += dS^T Q; Q and dO read twice by every warp
        dict(kernel="dkv (before)", phase="backward", warps=W, products=[(T, BQ, hs)] * 4,
             smem_read=W * 4 * tb(BQ) + 2 * tb(T) + W * 2 * BQ * 4, smem_write=2 * tb(BQ) + 2 * BQ * 4,
             smem_block=(2 * T + 4 * BQ) * P * BF16 + 4 * BQ * 4, regs=r("dkv"),
             causal=lambda t: causal_fraction(t, BQ, T)),
    ]


def causal_fraction(T, rows, cols):
    """Useful (under-diagonal) share of the tiles a causal loop computes: a block of `rows`
    queries visits the key tiles of `cols` up to its diagonal, whole (the same count for key
    blocks visiting query tiles, with rows and cols exchanged)."""
    if T <= 0:
        return 0.0
    computed = 0
    nb = -(-T // rows)
    for i in range(nb):
        lo, hi = i * rows, min(T, (i + 1) * rows)
        computed += (hi - lo) * (-(-hi // cols) * cols)  # rows x keys up to the last tile it touches
    useful = T * (T + 1) / 2
    return useful / computed


def blocks_per_sm(k, hw):
    """Resident blocks per SM by registers (allocated per thread in units of 8), shared memory
    and the hardware limit; None without a register count."""
    threads = 32 * k["warps"]
    by_smem = hw["smem_per_sm"] // k["smem_block"]
    if not k.get("regs"):
        return None
    by_regs = hw["regs_per_sm"] // (-(-k["regs"] // 8) * 8 * threads)
    return min(by_regs, by_smem, hw["max_blocks_per_sm"])


def model(k, T, hw, mma_tflops, efficiency):
    flops = sum(2 * m * n * kk for m, n, kk in k["products"])
    smem = k["smem_read"] + k["smem_write"]
    smem_tbs = hw["sms"] * hw["smem_bytes_per_clk"] * hw["clock_ghz"] * 1e9 / 1e12  # TB/s
    smem_ceiling = flops / smem * smem_tbs  # TFLOP/s
    causal = k["causal"](T)
    return dict(flops=flops, smem=smem, intensity=flops / smem, tensor=mma_tflops, smem_ceiling=smem_ceiling,
                causal=causal, blocks=blocks_per_sm(k, hw), ceiling=min(mma_tflops, smem_ceiling) * causal * efficiency)


def check(cfg, ptxas, hw):
    """Lines for --check: every as-built kernel is in the ptxas report, spills nothing and fits
    its launch bound's blocks per SM; (lines, all ok)."""
    lines, ok = [], True
    for hs, (fwd, bwd) in sorted(cfg.items()):
        for k in kernels_as_built(fwd, bwd, hs, ptxas):
            if k["regs"] is None:
                lines.append(f"FAIL {k['kernel']}<{hs}>: not in the ptxas report (make ptxas-report)")
                ok = False
                continue
            blocks = blocks_per_sm(k, hw)
            good = k["spills"] == 0 and blocks >= k["min_blocks"]
            ok &= good
            lines.append(f"{'PASS' if good else 'FAIL'} {k['kernel']}<{hs}>: {k['regs']} registers, {k['spills']} spill bytes, "
                         f"{blocks} blocks ({blocks * k['warps']} warps) per SM, launch bound {k['min_blocks']}")
    return lines, ok


def main(argv=None):
    ap = cli_util.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-t", "--seq-len", type=cli_util.int_in(1, 1 << 20), default=4096, help="causal sequence length")
    ap.add_argument("--hs", default="64,128", help="comma list of head sizes (16, 32, 64, 128)")
    ap.add_argument("--mma-tflops", type=cli_util.positive_float, default=MMA_TFLOPS,
                    help="dense bf16 mma.sync rate of the whole GPU (an assumption until measured)")
    ap.add_argument("--efficiency", type=cli_util.fraction, default=1.0,
                    help="measured / modelled of a first GPU run, applied to every modelled figure")
    ap.add_argument("--header", default=os.path.join(REPO, "llmc", "flash_attention.cuh"), help="the kernels' source")
    ap.add_argument("--ptxas", default=os.path.join(REPO, "dev", "cuda", "ptxas_report.txt"), help="registers per thread (make ptxas-report)")
    ap.add_argument("--csv", action="store_true", help="CSV rows instead of the table")
    ap.add_argument("--check", action="store_true",
                    help="only check the as-built kernels against the ptxas report: no spills, launch-bound blocks per SM (exit 1 if not)")
    a = ap.parse_args(argv)
    try:
        hss = [int(x) for x in a.hs.split(",")]
    except ValueError:
        die(f"--hs: expected a comma list of head sizes, found '{a.hs}'")
    if not hss or any(h not in (16, 32, 64, 128) for h in hss):
        die(f"--hs: expected head sizes among 16, 32, 64, 128, found '{a.hs}'")
    cfg = read_config(a.header, hss)
    ptxas = read_ptxas(a.ptxas)
    if a.check and not os.path.isfile(a.ptxas):
        die(f"--ptxas: cannot read '{a.ptxas}' (make ptxas-report writes it)")
    if a.check:
        lines, ok = check(cfg, ptxas, H200)
        print("\n".join(lines))
        return 0 if ok else 1
    head = ["design", "kernel", "HS", "flops/tile", "smem B/tile", "flop/B", "tensor TF/s", "smem TF/s", "causal",
            "regs", "blocks/SM", "smem KB/block", "modelled TF/s"]
    rows = []
    totals = {}
    for hs in hss:
        for design, ks in (("as built", kernels_as_built(*cfg[hs], hs, ptxas)), ("before", kernels_before(hs))):
            for k in ks:
                m = model(k, a.seq_len, H200, a.mma_tflops, a.efficiency)
                rows.append([design, k["kernel"], hs, m["flops"], m["smem"], "%.1f" % m["intensity"], "%.0f" % m["tensor"],
                             "%.0f" % m["smem_ceiling"], "%.3f" % m["causal"], k["regs"] if k["regs"] else "-",
                             m["blocks"] if m["blocks"] is not None else "-", "%.1f" % (k["smem_block"] / 1024), "%.0f" % m["ceiling"]])
                # a phase's time: each kernel does its products at its ceiling; useful FLOPs are the
                # forward's 2 and the backward's 5 products per tile pair
                t = totals.setdefault((design, hs, k["phase"]), [0.0, 0])
                t[0] += len(k["products"]) / m["ceiling"]
                t[1] = 2 if k["phase"] == "forward" else 5
    if a.csv:
        import csv
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(head)
        w.writerows(rows)
    else:
        print(f"causal T={a.seq_len}, H200: {H200['sms']} SMs at {H200['clock_ghz']} GHz, shared memory "
              f"{H200['smem_bytes_per_clk']} B/clock/SM, mma.sync {a.mma_tflops:g} TFLOP/s (assumed), efficiency {a.efficiency:g}")
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(str(x) for x in r) + " |")
    print("phase figures (useful FLOPs: 2 products a tile pair forward, 5 backward; modelled, not measured):")
    for (design, hs, phase), (time, useful) in sorted(totals.items(), key=lambda kv: (kv[0][1], kv[0][2] != "forward", kv[0][0])):
        print(f"  HS {hs} {phase:8s} {design:9s} {useful / time:6.0f} TFLOP/s")
    return 0


if __name__ == "__main__":
    cli_util.run(main)
