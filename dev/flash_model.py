#!/usr/bin/env python3
"""flash_model.py — a performance model of the flash attention kernels (llmc/flash_attention.cuh):
per kernel and head size, the tensor-core FLOPs and shared-memory bytes of one inner-loop tile,
the ceiling each implies on an H200, the causal work and the products that are recomputed, and the
resulting modelled TFLOP/s at a causal shape, for the kernels as built and for a proposed design.

  python3 dev/flash_model.py                    # causal T=4096, HS 64 and 128: as built, proposed
  python3 dev/flash_model.py -t 2048 --hs 128 --csv

What it counts, per block and inner-loop tile (Bq query rows, Bk keys, W warps, each warp owning
Bq/W rows of the block's queries, or Bk/W rows of its keys in the dK/dV kernel):
  flops     2·rows·cols·HS per tile product (mma.sync m16n8k16: bf16 operands, fp32 accumulators)
  smem      bytes read from shared memory by the products (every warp reads the whole of a B
            operand tile; an A operand held in registers costs nothing, one read from shared memory
            costs its warp's rows), plus the bytes the tile's loads write there (cp.async)
Ceilings: tensor = --mma-tflops; shared memory = flops per smem byte x 128 bytes per clock per SM
x SMs x clock. The model is the lower of the two, times the causal fraction of the tiles a block
computes that lie under the diagonal (a diagonal tile is computed whole), times the useful share of
the products (the backward's useful work is 5 products per tile, FlashAttention-2's count; the
engine's two-kernel backward computes 7). It is a ceiling: no latency, occupancy (printed beside it),
softmax or load-issue limit is in it, so a GPU's measurement lands below it by a factor that the
first run calibrates (--efficiency scales every modelled figure). Not yet measured on a GPU.

The tile configuration is read from llmc/flash_attention.cuh (FLASH_TILE, FLASH_WARPS and the
dK/dV kernel's query tile FlashBwdTile<HS>::BQ), the registers per thread from
dev/cuda/ptxas_report.txt; the proposed design (issue: a one-pass backward with 32 rows per warp,
a 128-query forward) is a table in this file (PROPOSED).
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


def read_config(header_path):
    """FLASH_TILE, FLASH_WARPS and the dK/dV query tile per head size, from the kernel source."""
    try:
        text = open(header_path).read()
    except OSError as e:
        die(f"cannot read '{header_path}' ({e.strerror})")
    tile = re.search(r"static const int FLASH_TILE = (\d+);", text)
    warps = re.search(r"static const int FLASH_WARPS = (\d+);", text)
    bq = re.search(r"struct FlashBwdTile \{ static const int BQ = HS == (\d+) \? (\d+) : (\d+); \};", text)
    if not (tile and warps and bq):
        die(f"'{header_path}': cannot find FLASH_TILE, FLASH_WARPS and FlashBwdTile<HS>::BQ (the model reads them)")
    bq_hs, bq_then, bq_else = (int(x) for x in bq.groups())
    return dict(tile=int(tile.group(1)), warps=int(warps.group(1)), bq=lambda hs: bq_then if hs == bq_hs else bq_else)


def read_registers(report_path):
    """{(kernel, HS): registers per thread} from the ptxas report; {} when it is missing."""
    regs = {}
    try:
        lines = open(report_path).read().splitlines()
    except OSError:
        return regs
    for line in lines:
        m = re.match(r"(\d+)\s+\d+\s+\d+\s+\d+\s+\d+\s+void (flash_\w+_kernel)<(\d+)>", line)
        if m:
            regs[(m.group(2), int(m.group(3)))] = int(m.group(1))
    return regs


def kernels_as_built(cfg, hs):
    """The engine's three kernels: per tile, the products (rows, cols, k) and the shared-memory
    bytes read by them and written by the loads; the block's shared memory; the useful products."""
    T, W = cfg["tile"], cfg["warps"]
    BQ = cfg["bq"](hs)
    P = hs + 8  # padded rows
    tile_bytes = lambda rows: rows * hs * BF16  # noqa: E731
    return [
        # forward: Q in registers; per key tile S = Q K^T, O += P V, each warp reading all of K and V
        dict(kernel="flash_forward_kernel", phase="forward", warps=W, rows=T, cols=T,
             products=[(T, T, hs), (T, T, hs)], useful=2,
             smem_read=W * (tile_bytes(T) + tile_bytes(T)), smem_write=2 * tile_bytes(T),
             smem_block=3 * T * P * BF16, work="query"),
        # dQ: per key tile S = Q K^T, dP = dO V^T, dQ += dS K; K read twice and V once by every
        # warp, dO once from shared memory (each warp its own rows)
        dict(kernel="flash_backward_dq_kernel", phase="backward", warps=W, rows=T, cols=T,
             products=[(T, T, hs), (T, T, hs), (T, T, hs)], useful=None,
             smem_read=W * (2 * tile_bytes(T) + tile_bytes(T)) + tile_bytes(T), smem_write=2 * tile_bytes(T),
             smem_block=4 * T * P * BF16, work="query"),
        # dK, dV: per query tile of BQ, S^T = K Q^T, dV += P^T dO, dP^T = V dO^T, dK += dS^T Q; Q and
        # dO each read twice by every warp, K and V once from shared memory (each warp its rows)
        dict(kernel="flash_backward_dkv_kernel", phase="backward", warps=W, rows=T, cols=BQ,
             products=[(T, BQ, hs)] * 4, useful=None,
             smem_read=W * (2 * tile_bytes(BQ) + 2 * tile_bytes(BQ)) + 2 * tile_bytes(T) + W * 2 * BQ * 4,
             smem_write=2 * tile_bytes(BQ) + 2 * BQ * 4,
             smem_block=(2 * T + 4 * BQ) * P * BF16 + 4 * BQ * 4, work="key"),
    ]


def kernels_proposed(hs):
    """The design the issue asks for: a forward of 128 queries per block over 4 warps (32 rows a
    warp) with a 3-stage K/V pipeline; a one-pass backward (dK, dV and dQ together: 5 products)
    over 128-key blocks of 4 warps (32 key rows a warp) and query tiles of 64, dQ written as
    per-block partial sums that a fixed-order pass adds (deterministic, no atomics; its traffic is
    not in the model), lse and D through shared memory."""
    Bq, Bk, W, stages = 128, 64, 4, 3
    P = hs + 8
    tb = lambda rows: rows * hs * BF16  # noqa: E731
    fwd = dict(kernel="forward (proposed)", phase="forward", warps=W, rows=Bq, cols=Bk,
               products=[(Bq, Bk, hs), (Bq, Bk, hs)], useful=2,
               smem_read=W * (tb(Bk) + tb(Bk)), smem_write=2 * tb(Bk),
               smem_block=(Bq + 2 * stages * Bk) * P * BF16, work="query")
    # one pass, block = 128 keys (32 per warp), over query tiles of 64: S^T = K Q^T, dP^T = V dO^T
    # (K, V in registers as A operands), dV += P^T dO, dK += dS^T Q (Q, dO read by every warp as B
    # operands, twice each), dQ_partial = dS K (dS^T through shared memory: written once, read as A
    # by every warp; K read as B by every warp) stored to a partial buffer
    Bkb, Bqb = 128, 64
    bwd = dict(kernel="backward one-pass (proposed)", phase="backward", warps=W, rows=Bkb, cols=Bqb,
               products=[(Bkb, Bqb, hs)] * 5, useful=5,
               smem_read=W * (2 * tb(Bqb) + 2 * tb(Bqb)) + W * tb(Bkb) + Bkb * Bqb * BF16 + W * 2 * Bqb * 4,
               smem_write=2 * tb(Bqb) + Bkb * Bqb * BF16 + 2 * Bqb * 4,
               smem_block=(2 * 2 * Bqb + Bkb) * P * BF16 + Bkb * (Bqb + 8) * BF16 + 2 * 2 * Bqb * 4, work="key")
    return [fwd, bwd]


def causal_fraction(T, rows, cols):
    """Useful (under-diagonal) share of the tiles the causal loop computes: a block of `rows`
    queries visits the key tiles up to its diagonal, whole (the same count for key blocks)."""
    if T <= 0:
        return 0.0
    computed = 0
    nb = -(-T // rows)
    for i in range(nb):
        lo, hi = i * rows, min(T, (i + 1) * rows)
        computed += (hi - lo) * (-(-hi // cols) * cols)  # rows x keys up to the last tile it touches
    useful = T * (T + 1) / 2
    return useful / computed


def model(k, hs, T, hw, mma_tflops, efficiency, regs):
    flops = sum(2 * m * n * kk for m, n, kk in k["products"])
    smem = k["smem_read"] + k["smem_write"]
    smem_tbs = hw["sms"] * hw["smem_bytes_per_clk"] * hw["clock_ghz"] * 1e9 / 1e12  # TB/s
    smem_ceiling = flops / smem * smem_tbs  # TFLOP/s
    r = regs.get((k["kernel"], hs))
    threads = 32 * k["warps"]
    by_regs = hw["regs_per_sm"] // (r * threads) if r else None
    by_smem = hw["smem_per_sm"] // k["smem_block"]
    blocks = min(x for x in (by_regs, by_smem, hw["max_blocks_per_sm"]) if x is not None)
    causal = causal_fraction(T, k["rows"], k["cols"])
    return dict(flops=flops, smem=smem, intensity=flops / smem, tensor=mma_tflops, smem_ceiling=smem_ceiling,
                causal=causal, regs=r, blocks=blocks, smem_block=k["smem_block"],
                ceiling=min(mma_tflops, smem_ceiling) * causal * efficiency)


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
    a = ap.parse_args(argv)
    try:
        hss = [int(x) for x in a.hs.split(",")]
    except ValueError:
        die(f"--hs: expected a comma list of head sizes, found '{a.hs}'")
    if not hss or any(h not in (16, 32, 64, 128) for h in hss):
        die(f"--hs: expected head sizes among 16, 32, 64, 128, found '{a.hs}'")
    cfg = read_config(a.header)
    regs = read_registers(a.ptxas)
    head = ["design", "kernel", "HS", "flops/tile", "smem B/tile", "flop/B", "tensor TF/s", "smem TF/s", "causal",
            "regs", "blocks/SM", "smem KB/block", "modelled TF/s"]
    rows = []
    totals = {}
    for hs in hss:
        for design, ks in (("as built", kernels_as_built(cfg, hs)), ("proposed", kernels_proposed(hs))):
            for k in ks:
                m = model(k, hs, a.seq_len, H200, a.mma_tflops, a.efficiency, regs)
                rows.append([design, k["kernel"], hs, m["flops"], m["smem"], "%.1f" % m["intensity"], "%.0f" % m["tensor"],
                             "%.0f" % m["smem_ceiling"], "%.3f" % m["causal"], m["regs"] if m["regs"] else "-", m["blocks"],
                             "%.1f" % (m["smem_block"] / 1024), "%.0f" % m["ceiling"]])
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
