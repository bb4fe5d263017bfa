#!/usr/bin/env python3
"""flash_model.py — a performance model of the flash attention kernels (llmc/flash_forward.cuh, llmc/flash_backward.cuh),
calibrated on their times as measured on an H200: it explains where a kernel's time goes (pipes,
waits, the causal tail) for the kernels as built and for the earlier designs timed the same day.

  python3 dev/flash_model.py                       # the kernels as built at dev_attention's shapes
  python3 dev/flash_model.py --shape llama300m --csv
  python3 dev/flash_model.py --shape 1:8192:16:16:128   # B:T:NH:NKV:HS
  python3 dev/flash_model.py --calibration         # every measured row: measured ms, modelled ms, ratio
  python3 dev/flash_model.py --check               # registers fit the launch bounds and setmaxnreg (spills: a warning)
  python3 dev/flash_model.py --ablation --shape llama300m,llama600m   # the wgmma kernels with a part left out

The model. A call's time is the end of its last block, plus the host's launch of each kernel
(LAUNCH_US: dev_attention times each call alone, from an idle stream). The blocks, each with its
own work (a causal block row or column has more tiles the further it lies from the diagonal), take
the SMs' block slots in launch order as slots free up; the k blocks on one SM share its pipes, so
a block's time is k x its work + its latency, k following the blocks that come and go (the causal
tail: the longest blocks of the last heads start late). One block, per inner-loop tile:
  pipes    the tensor-core (mma.sync), ldmatrix, exp (MUFU), FP32 and other shared-memory work of
           every warp that computes the tile, each at its pipe's rate, ADDED: the warps of a block
           are in the same phase of the tile (barriers align them), so at one block per SM (the
           backward, 8 compute warps) the pipes take turns; two blocks per SM (the forward) are not
           aligned with each other, and OVERLAP_TWO_BLOCKS of the smaller pipes' time hides
           under the largest. Register spills move through L1 at the shared memory's rate.
  waits    what the block waits for in series: barriers (as built, the forward has none a tile:
           its stages' mbarriers, STAGE_WAIT_CLK; the backward one, against two before, its
           query buffers' mbarriers modelled the same); at 5ec15b9, lse and D loaded from L2
           every tile, the turn poll, dQ's read-modify-write (8 dependent L2 round trips a
           thread), fences; at the dQ writer designs the writer warp runs beside the compute
           warps (its poll and fences hidden while it keeps up), so a block takes the longer of
           the two.
The backward adds its small kernels (the counters' memset, D, the dQ conversion) at HBM speed.

Measured, set and fitted:
  measured  the pipe rates (H200, 1980 MHz under load: mma.sync m16n8k16 bf16 620 TFLOP/s,
            ldmatrix.x4 127.7 bytes and exp2f 15.8 results per clock per SM); every time in
            dev/flash_measured.csv (dev_attention --bench-only, 2026-12-04) and the ablation of
            5ec15b9's backward (ABLATION_5EC15B9); the FP32 instructions of the softmax per score
            element, counted in the kernels' SASS (cuobjdump -sass, CUDA 13.0, sm_90); spill bytes
            from ptxas
  set       from that ablation: FENCE_CLK and L2_ROUND_TRIP_CLK; from the datasheet or the
            architecture: FP32 issue, shared-memory bytes per clock, HBM bandwidth; round values
            in a range where the fit does not move: LAUNCH_US, BLOCK_START_CLK
  fitted    OVERLAP_TWO_BLOCKS, BARRIER_CLK, KB0_SUM_READ_CLK, by a grid search that minimises the
            largest |log(modelled / measured)| over the plain-commit rows of the table
  modelled  everything else: each tile's work from the tile constants and the code's structure,
            the occupancy, the tail, the small kernels. The model is not a simulator: no
            instruction dependency, cache, bank conflict, or wait between blocks for a dQ turn
            is in it (the 2026-12-04 analysis found the turn order causes no real waiting), and
            no integer, address or branch instruction: the as-built tile loops issue about half
            the instructions of 4d18147's (SASS, a warp's tile below the diagonal: forward 1411
            -> 694 at HS 64 and 1181 -> 637 at HS 128, backward 1582 -> 864 and 1278 -> 738),
            of which the model credits only the FP32 ones (SOFTMAX), so its gain is a floor.
            The backward's spill bytes count as L1 traffic every tile, where the HS 64 kernel's
            40 (ptxas) are mostly outside its tile loop (one 4-byte load in it): a ceiling.
--calibration prints every row it models with its ratio; the plain commits land within 20% (0.89
to 1.13), the 5ec15b9 ablation within 10%, the other ablations within 20%. Known misses: ee719c5
without the writer's global work is modelled 13 to 19% slow at T >= 2048 (the model puts that
design's extra cost in key block 0's sum read, where the measurement says the writer's global
work slows every block), and the backward at HS 128 is modelled 5 to 11% slow (spill traffic
taken as unhidden).

The as-built tiles are read from llmc/flash_common.cuh (struct FlashFwdTile and FlashBwdTile;
the backward's structure is 59539db's, the dQ writer warp with red.global.add), the registers and
spills from dev/cuda/ptxas_report.txt (make ptxas-report); the measured designs' tiles,
registers and spills are a table in this file (DESIGNS).
"""
import csv
import heapq
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import cli_util  # noqa: E402
from cli_util import die  # noqa: E402

# ---------------------------------------------------------------------------------------------
# the GPU. H200 SXM (the datasheet): 132 SMs, 64K 32-bit registers and 228 KB of shared memory per
# SM (227 KB to one block), at most 32 blocks per SM. Measured on it (2026-12-04): the SM clock
# under load, the mma.sync m16n8k16 bf16 rate of the whole GPU, ldmatrix.x4 bytes per clock per
# SM, exp2f results per clock per SM.
H200 = dict(sms=132, clock_ghz=1.98, regs_per_sm=65536, smem_per_sm=228 * 1024, max_blocks_per_sm=32)
MMA_TFLOPS = 620.0
LDSM_BYTES_PER_CLK = 127.7
# wgmma's rate (llmc/flash_forward_sm90.cuh's products), not measured on its own: the rate of the
# 8192³ cuBLASLt bf16 GEMM dev_attention measured beside the kernels (a wgmma kernel)
WGMMA_TFLOPS = 818.2
EXP_PER_CLK = 15.8
# FP32 instructions (FMUL, FADD, FFMA, FMNMX, FSETP, FSEL, F2FP) per clock per SM: one warp
# instruction per sub-partition per clock, the issue rate (the architecture; not measured)
FP32_WARP_INSTR_PER_CLK = 4.0
# bytes per clock per SM of shared-memory stores, plain loads, cp.async fills and L1 spill
# traffic (32 banks x 4 bytes; ldmatrix's measured rate is the one above)
SMEM_BYTES_PER_CLK = 128.0
# HBM3e bandwidth (the datasheet's 4.8 TB/s), for the backward's small kernels
HBM_TBS = 4.8
BF16, FP32 = 2, 4

# The softmax's FP32 instructions, counted in the SASS of the tile loops (cuobjdump -sass, CUDA
# 13.0), per score element (and the forward's per half row tile), by the kernels' softmax:
#   "exp2f"  every measured design: 3 FMUL (the scale, and exp2f's range reduction, which also adds
#            an FSETP), 2 FADD, FMNMX, FSETP, FSEL (the mask, on every tile) and half an F2FP (a
#            bf16 pair), 8.5; 7 per half row tile (max, correction, sum); the backward's FFMA,
#            FSETP, 4 FMUL, FADD and 1.5 F2FP, 8.5 as well
#   "ex2"    as built (AS_BUILT_SOFTMAX): ex2.approx.ftz (flash_exp2) without exp2f's range
#            reduction, scale and max subtracted in one FFMA, the forward's mask on its diagonal
#            tiles only (counted: a tile below the diagonal): the forward's FFMA, FMNMX, FADD and
#            half an F2FP, 3.5, and 7 per half row tile (with the rescale's vote); the backward's 5.5
# The forward adds an FMUL per output element (the rescale) on the share fwd_rescale of its tiles:
# all of them before; as built a row tile skips it when no row's max rose, which depends on the
# data: on i.i.d. scores 38% of the tiles below the diagonal at T 2048 (BK 32) and T 4096 (BK 64)
# skip (each row's max rises on key tile k >= 1 with odds 1 / (k + 1); a row tile of 16 rows
# skips with (k / (k + 1))^16), so 0.62 rescale; attention whose largest scores sit on a few keys
# skips more. The integer, address and branch instructions of a tile are not counted (see the
# header: what the model leaves out).
SOFTMAX = {"exp2f": dict(fwd_score=8.5, fwd_row_half=7, fwd_rescale=1.0, bwd_score=8.5),
           "ex2": dict(fwd_score=3.5, fwd_row_half=7, fwd_rescale=0.62, bwd_score=5.5)}
AS_BUILT_SOFTMAX = "ex2"
FWD_FP32_PER_OUT = 1

# ---------------------------------------------------------------------------------------------
# waits, in SM clocks
# A __threadfence after stores to L2. The ablation of 5ec15b9's backward: without the fence after
# the dQ update, 0.22 / 0.45 ms less at llama300m / hs128_t4096 over 512 / 1024 tiles a block
# slot: 860 / 870 clocks a tile, 800 without the 8% causal tail.
FENCE_CLK = 800
# A load that waits on L2 (ld.global.cg after a store, the turn poll's volatile load). The same
# ablation: without the dQ product and its read-modify-write, 1.44 / 2.50 ms = 5570 / 4830 clocks
# a tile less, of which the dQ product's pipes are 1210: 8 dependent round trips of 545 / 450, 500
# / 420 without the tail. Without the turn poll (a round trip, a fence and a barrier): 1240 / 1330
# clocks a tile less.
L2_ROUND_TRIP_CLK = 430
# One barrier of the block with the skew of the warps it aligns. Fitted.
BARRIER_CLK = 250
# The forward's wait a tile where each (K, V) stage has a full and an empty mbarrier instead of a
# barrier of the block ("stage", as built; every measured design: "block"). Set: 0. A warp waits
# there only for a tile whose loads were issued two tiles earlier (four stages), or for the slowest
# warp once it is a tile ahead of it; the model has no load latency and no skew between warps, so neither is in
# it, and the change is modelled as BARRIER_CLK less a tile (a ceiling of that part of the gain).
# The other part, one warp's exponentials under another's products within the block, is not
# credited (OVERLAP_TWO_BLOCKS is unchanged): a floor.
STAGE_WAIT_CLK = 0
# A block's start: its first tiles' loads from memory before the first product (about one loaded
# HBM round trip). Set.
BLOCK_START_CLK = 3000
# The share of the smaller pipes' time that hides under the largest when two blocks share an SM.
# Fitted (on the forward rows: the backward runs one block per SM).
OVERLAP_TWO_BLOCKS = 0.25
# ee719c5 / 36b4dc0: key block 0's dQ writer reads each tile's fp32 sum (4 batches of 8 loads in
# flight a lane) and writes bf16 dQ. Fitted on those commits' backward rows: about 4 times 4
# round trips; the loads follow other SMs' red.global.add to the same lines (not measured apart).
KB0_SUM_READ_CLK = 8000
# The host's launch of one kernel, inside each timed call. Set.
LAUNCH_US = 3.0

# The ablation of 5ec15b9's backward (copies of the kernel with parts removed, ms per call,
# 2026-12-04, one run each): without the fence after the dQ update; and without the turn poll;
# and without the dQ product and its read-modify-write.
ABLATION_5EC15B9 = [("5ec15b9-fence", "llama300m", 3.57), ("5ec15b9-fence", "hs128_t4096", 6.43),
                    ("5ec15b9-fence-poll", "llama300m", 3.25), ("5ec15b9-fence-poll", "hs128_t4096", 5.74),
                    ("5ec15b9-fence-poll-dq", "llama300m", 1.81), ("5ec15b9-fence-poll-dq", "hs128_t4096", 3.24)]

# dev_attention's benchmark shapes: (B, T, NH, NKV, HS)
SHAPES = {"d12": (4, 1024, 12, 12, 64), "llama300m": (4, 4096, 16, 16, 64), "llama600m": (4, 2048, 12, 12, 128),
          "hs128_t4096": (4, 4096, 16, 16, 128)}

# The designs measured on 2026-12-04: each commit's tile structs (as its header wrote them), its
# backward's dQ structure, and ptxas's registers and spill bytes (stored + loaded) per thread
# (CUDA 13.0, sm_90). The dQ structures:
#   serial       5ec15b9: after dQ = dS K every thread waits for the tile's turn (poll, fence,
#                barrier), reads, adds and stores its 8 float2 of the fp32 sum (each load waits
#                for the store before it), fences and passes the turn; key block 0 writes bf16;
#                lse and D are loaded from global memory every tile; 3 barriers a tile, 4 with a turn
#   writer_bf16  ee719c5, 36b4dc0: the compute warps leave dQ's part in a shared stage and go on;
#                a 9th warp waits for the turn, adds the part by red.global.add, fences and passes
#                the turn; key block 0's writer reads the sum and writes bf16 dQ; lse and D come by
#                cp.async with the tile; 2 barriers a tile
#   writer_red   59539db: every writer adds its part (key block 0's too); a conversion kernel
#                writes bf16 dQ after the backward
FWD_5EC15B9 = "BQ = 128, WARPS = HS == 128 ? 4 : 8, BK = HS == 128 ? 32 : 64, STAGES = 3, MIN_BLOCKS = 2, Q_REGS = HS != 128"
BWD_5EC15B9 = "BK = 128, WARPS = 8, BQ = HS == 128 ? 32 : HS == 16 ? 128 : 64, MIN_BLOCKS = 1"
DESIGNS = {
    "5ec15b9": dict(fwd=FWD_5EC15B9, bwd=BWD_5EC15B9 + ", DQ_STAGES = 0", dq="serial",
                    ptxas={("forward", 64): (128, 0), ("forward", 128): (253, 0), ("backward", 64): (214, 0), ("backward", 128): (245, 0)}),
    "ee719c5": dict(fwd=FWD_5EC15B9, bwd=BWD_5EC15B9 + ", DQ_STAGES = 2", dq="writer_bf16",
                    ptxas={("forward", 64): (128, 0), ("forward", 128): (253, 0), ("backward", 64): (168, 168), ("backward", 128): (168, 628)}),
    "36b4dc0": dict(fwd=FWD_5EC15B9, bwd=BWD_5EC15B9 + ", DQ_STAGES = 2", dq="writer_bf16",
                    ptxas={("forward", 64): (128, 0), ("forward", 128): (253, 0), ("backward", 64): (168, 184), ("backward", 128): (168, 624)}),
    "59539db": dict(fwd=FWD_5EC15B9.replace("WARPS = HS == 128 ? 4 : 8", "WARPS = HS >= 64 ? 4 : 8"),
                    bwd=BWD_5EC15B9 + ", DQ_STAGES = 2", dq="writer_red",
                    ptxas={("forward", 64): (254, 0), ("forward", 128): (253, 0), ("backward", 64): (168, 184), ("backward", 128): (168, 760)}),
}
NEWEST = "59539db"           # the newest measured design: the docs quote its rows
AS_BUILT_DQ = "writer_red"   # the backward's dQ structure in llmc/flash_backward.cuh now
# the forward's launch order: "head" (every measured design): head by head, each head's query
# tiles longest first; "tile" (llmc/flash_attention.cuh now): the longest tile of every head first
AS_BUILT_FWD_ORDER = "tile"
# the forward's wait at each key tile (SYNC): "block" (every measured design): __syncthreads;
# "stage" (llmc/flash_forward.cuh now): a full and an empty mbarrier per stage (STAGE_WAIT_CLK)
AS_BUILT_FWD_SYNC = "stage"
# the backward's compute barriers a tile (SYNC): "block" (every measured design with a writer
# warp): two, one where the tile's copies have landed, one where every warp's dSᵀ is in; "landed"
# (llmc/flash_backward.cuh now): the second only, the copies announced on an mbarrier per query
# buffer (their wait is modelled as none, as the forward's STAGE_WAIT_CLK) and dSᵀ in two buffers
AS_BUILT_BWD_SYNC = "landed"
# the backward's tickets: "head" (every measured design): per (b, kv head) the last key block down
# to block 0; "block" (llmc/flash_backward.cuh now): key block 0 of every (b, kv head), then 1, ...
# (the waits for the dQ turns are not modelled: in the steady state there are none)
AS_BUILT_BWD_ORDER = "block"


def c_value(expr, hs):
    """The value of a tile constant's initializer at head size hs: a number, true / false, a
    comparison of HS with a number (==, !=, <, <=, >, >=), or `comparison ? a : <initializer>`."""
    e = expr.strip()
    if re.fullmatch(r"\d+", e):
        return int(e)
    if e in ("true", "false"):
        return e == "true"
    ops = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b,
           "<": lambda a, b: a < b, ">": lambda a, b: a > b}
    cmp = r"HS\s*(==|!=|<=|>=|<|>)\s*(\d+)"
    m = re.fullmatch(cmp, e)
    if m:
        return ops[m.group(1)](hs, int(m.group(2)))
    m = re.fullmatch(cmp + r"\s*\?\s*(\d+)\s*:\s*(.+)", e, re.S)
    if m:
        return int(m.group(3)) if ops[m.group(1)](hs, int(m.group(2))) else c_value(m.group(4), hs)
    raise ValueError(expr)


def parse_fields(decls, hs):
    """{name: value} of comma-separated `NAME = initializer` declarations at head size hs."""
    values = {}
    for part in decls.split(","):
        key, eq, init = part.partition("=")
        if not eq:
            raise ValueError(part)
        values[key.strip()] = c_value(init, hs)
    return values


def read_tiles(text, name, fields, hs):
    """{field: value} of `struct name { static const ... };` at head size hs, or None."""
    m = re.search(r"struct %s \{(.*?)\n\};" % name, text, re.S)
    if not m:
        return None
    values = {}
    for decl in re.findall(r"static const (?:int|bool) ([^;]+);", m.group(1)):
        try:
            values.update(parse_fields(decl, hs))
        except ValueError:
            return None
    return values if all(f in values for f in fields) else None


FWD_FIELDS = ("BQ", "WARPS", "BK", "STAGES", "MIN_BLOCKS", "Q_REGS")
BWD_FIELDS = ("BK", "WARPS", "BQ", "MIN_BLOCKS", "DQ_STAGES")


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
        fwd["SOFTMAX"] = bwd["SOFTMAX"] = AS_BUILT_SOFTMAX
        fwd["SYNC"], bwd["SYNC"] = AS_BUILT_FWD_SYNC, AS_BUILT_BWD_SYNC
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
        m = re.match(r"(\d+)\s+\d+\s+\d+\s+(\d+)\s+(\d+)\s+void (flash_\w+_kernel)<(\d+)(?:, 0)?>", line)  # (the wgmma kernels' SKIP 0)
        if m:
            regs[(m.group(4), int(m.group(5)))] = (int(m.group(1)), int(m.group(2)) + int(m.group(3)))
    return regs


# ---------------------------------------------------------------------------------------------
# the work of one warp on one tile: mma.sync m16n8k16 count, ldmatrix.x4 count, exp results, FP32
# warp instructions, other shared-memory bytes


def mma_clk(hw):
    """SM clocks of one mma.sync m16n8k16 (4096 FLOPs) at the measured rate."""
    return 2 * 16 * 8 * 16 / (MMA_TFLOPS * 1e12 / (hw["sms"] * hw["clock_ghz"] * 1e9))


def pipe_clk(w, hw):
    """{pipe: SM clocks} of the work w at each pipe's rate (wgmma: its FLOPs, on the mma pipe)."""
    wgmma = w.get("wgmma", 0) / (WGMMA_TFLOPS * 1e12 / (hw["sms"] * hw["clock_ghz"] * 1e9))
    return dict(mma=w.get("mma", 0) * mma_clk(hw) + wgmma, ldsm=w.get("ldsm", 0) * 512 / LDSM_BYTES_PER_CLK,
                exp=w.get("exp", 0) / EXP_PER_CLK, fp32=w.get("fp32", 0) / FP32_WARP_INSTR_PER_CLK,
                smem=w.get("smem", 0) / SMEM_BYTES_PER_CLK)


def pipes_added(w, hw, blocks, hidden=0.0):
    """SM clocks of the work w: the pipes added, less `hidden` clocks the kernel overlaps by its own
    structure, less OVERLAP_TWO_BLOCKS of the rest beyond the largest pipe when two or more blocks
    share the SM."""
    p = pipe_clk(w, hw)
    total, largest = sum(p.values()) - hidden, max(p.values())
    return total - (OVERLAP_TWO_BLOCKS if blocks >= 2 else 0.0) * max(0.0, total - largest)


def fwd_warp_tile(f, hs):
    """One forward warp's work on one key tile (BQ / WARPS query rows, M row tiles of 16): S = Q Kᵀ
    and O += P V (each K and V fragment read once for the M row tiles; Q's fragments from registers
    or read at every tile), the online softmax (an exp per score and 2 corrections a row tile and
    lane; FP32 by the tiles' SOFTMAX, "exp2f" where they do not say)."""
    BK, M, sm = f["BK"], f["BQ"] // f["WARPS"] // 16, SOFTMAX[f.get("SOFTMAX", "exp2f")]
    return dict(mma=2 * M * (BK // 8) * (hs // 16), ldsm=2 * (hs // 16) * (BK // 16) + (0 if f["Q_REGS"] else (hs // 16) * M),
                exp=32 * M * (BK // 2 + 2),
                fp32=M * (sm["fwd_score"] * BK / 2 + sm["fwd_rescale"] * FWD_FP32_PER_OUT * hs / 2 + 2 * sm["fwd_row_half"]))


def bwd_warp_tile(b, hs):
    """One backward compute warp's work on one query tile: (Sᵀ = K Qᵀ, dV += Pᵀ dO, dPᵀ = V dOᵀ,
    dK += dSᵀ Q with the exp and dS, done when its 16 keys reach the tile; dQ's part = dS K, done
    always, on a grid of BQ/16 row x WARPS/(BQ/16) column warps)."""
    BQ, BK, W = b["BQ"], b["BK"], b["WARPS"]
    DC = hs // (W // (BQ // 16))
    kv = 0 if b.get("KV_REGS") else 1  # K's and V's A fragments read at every tile, or held in registers
    four = dict(mma=4 * (BQ // 8) * (hs // 16), ldsm=2 * (hs // 16) * (kv + BQ // 16) + 2 * (BQ // 16) * (hs // 16), exp=16 * BQ,
                fp32=SOFTMAX[b.get("SOFTMAX", "exp2f")]["bwd_score"] * BQ / 2,
                smem=16 * BQ * BF16 + (BQ // 4) * 32 * 8)  # dSᵀ stored; lse and D read (8 bytes a lane per column pair)
    dq = dict(mma=(BK // 16) * (DC // 8), ldsm=(BK // 16) * (1 + DC // 16))
    return four, dq


# ---------------------------------------------------------------------------------------------
# blocks


def blocks_per_sm(threads, regs, smem, hw, min_blocks):
    """Resident blocks per SM by registers, shared memory and the hardware limit; the launch
    bound's count where the registers are not known. Registers: a warp takes 32 x its count
    rounded up to 8, from the 16K of the sub-partition it runs on, the warps of the SM's blocks
    spread over 4 sub-partitions (so 9 warps leave 3 on one: at most 168 registers)."""
    by_smem = hw["smem_per_sm"] // smem
    if not regs:
        return min(min_blocks, by_smem)
    warps, per_warp = -(-threads // 32), 32 * (-(-regs // 8) * 8)
    by_regs = 0
    while -(-(by_regs + 1) * warps // 4) * per_warp <= hw["regs_per_sm"] // 4:
        by_regs += 1
    return min(by_regs, by_smem, hw["max_blocks_per_sm"])


def register_cap(threads, blocks, hw):
    """The registers per thread that leave `blocks` blocks of `threads` resident (as ptxas caps a
    kernel under __launch_bounds__(threads, blocks))."""
    return hw["regs_per_sm"] // 4 // (-(-blocks * -(-threads // 32) // 4) * 32) // 8 * 8


def fwd_smem(f, hs):
    return (f["BQ"] + 2 * f["STAGES"] * f["BK"]) * (hs + 8) * BF16


def bwd_barriers(b):
    """The backward's compute barriers a tile (b["SYNC"]; "block" where the tiles do not say)."""
    return 2 if b.get("SYNC", "block") == "block" else 1


def bwd_smem(b, hs):
    BQ, BK, landed = b["BQ"], b["BK"], bwd_barriers(b) == 1
    ds = (2 if landed else 1) * BK * (BQ + 8) * BF16  # dSᵀ, two buffers with the "landed" sync
    return (2 * BK + 4 * BQ) * (hs + 8) * BF16 + ds + 2 * BQ * 8 + b["DQ_STAGES"] * (BQ * (hs + 8) * FP32 + 16) + (16 if landed else 0) + 16


def fwd_active_warps(f, T, qt):
    """Per key tile of forward block row qt, the warps that compute it (a warp skips the tiles
    whose keys all lie above its rows)."""
    BQ, BK, W = f["BQ"], f["BK"], f["WARPS"]
    R, q0 = BQ // W, qt * BQ
    nkt = min(-(-T // BK), (q0 + BQ) // BK)
    return [sum(1 for w in range(W) if kt * BK <= q0 + w * R + R - 1) for kt in range(nkt)]


def fwd_wait_clk(f):
    """The forward's wait at each key tile: a barrier of the block, or the stages' mbarriers
    (f["SYNC"]; "block" where the tiles do not say)."""
    return BARRIER_CLK if f.get("SYNC", "block") == "block" else STAGE_WAIT_CLK


def forward_blocks(f, hs, T, hw, blocks):
    """{qt: (work, latency)} of every forward block row qt: the work of its tiles in SM clocks with
    the SM to itself; its barriers and start."""
    per_warp = pipes_added(fwd_warp_tile(f, hs), hw, blocks)
    fill = pipe_clk(dict(smem=2 * f["BK"] * hs * BF16), hw)["smem"]  # the K and V tiles cp.async writes
    out = {}
    for qt in range(-(-T // f["BQ"])):
        active = fwd_active_warps(f, T, qt)
        out[qt] = (sum(a * per_warp + fill for a in active), BLOCK_START_CLK + len(active) * fwd_wait_clk(f))
    return out


def backward_blocks(b, hs, T, group, dq, hw, spill, parts=()):
    """{kb: (0, time)} of every backward key block kb (one block per SM): per query tile the
    compute warps' pipes and waits and the dQ structure's; with a writer warp, the longer of the
    compute warps' and the writer's time. parts: what an ablation removed (fence, poll, dq: the dQ
    product and its read-modify-write, writer: the writer's global work, turn: the turn order)."""
    BQ, BK, W = b["BQ"], b["BK"], b["WARPS"]
    four, dqp = bwd_warp_tile(b, hs)
    c_four, c_dq = pipes_added(four, hw, 1), (pipes_added(dqp, hw, 1) if "dq" not in parts else 0.0)
    serial = dq == "serial"
    # Q, dO (and, by cp.async, their rows' lse and D) written to shared memory; dQ's part stored
    # and read back by the writer; the spill code sits in the tile loop (SASS), so every compute
    # thread moves its spill bytes through L1 once a tile
    smem = 2 * BQ * hs * BF16 + (0 if serial else BQ * 8 + 2 * BQ * hs * FP32) + 32 * W * (spill or 0)
    fill = pipe_clk(dict(smem=smem), hw)["smem"]
    chain = 2 * (hs // (W // (BQ // 16))) // 8  # float2 of the sum a thread reads and writes: 8
    out = {}
    for kb in range(-(-T // BK)):
        compute, writer, last = BLOCK_START_CLK, 0.0, 0.0
        for qi in range(kb * BK // BQ, -(-T // BQ)):
            q0 = qi * BQ
            active = sum(1 for w in range(W) if kb * BK + 16 * w <= q0 + BQ - 1)
            turn = q0 // BK - kb  # key blocks before this one in the tile's order
            tile = active * c_four + W * c_dq + fill
            if serial:
                tile += L2_ROUND_TRIP_CLK + 3 * BARRIER_CLK  # lse and D loaded, stored to shared memory
                if turn > 0 and "poll" not in parts:
                    tile += L2_ROUND_TRIP_CLK + FENCE_CLK + BARRIER_CLK
                if turn > 0 and "dq" not in parts:
                    tile += chain * L2_ROUND_TRIP_CLK
                if kb > 0 and "fence" not in parts:
                    tile += FENCE_CLK
                compute += tile
                continue
            compute += tile + bwd_barriers(b) * BARRIER_CLK
            w = 0.0
            if "writer" not in parts:
                if turn > 0 and "turn" not in parts:
                    w += L2_ROUND_TRIP_CLK + FENCE_CLK  # the poll
                if dq == "writer_bf16" and kb == 0:
                    w += KB0_SUM_READ_CLK
                if kb > 0 and "turn" not in parts:
                    w += FENCE_CLK  # before the turn passes on
            writer, last = writer + w, w
        out[kb] = (0.0, (max(compute, writer) + last) * group)
    return out


def tail_clk(blocks, sms, slots):
    """The clock at which the last block ends. blocks: (work, latency) per block in launch order,
    the work in SM clocks with the SM to itself. They take free block slots (`slots` per SM) in
    order, SM by SM for the first wave; the k blocks on one SM share it, each progressing at 1 /
    (k x work + latency) of itself per clock, k following the blocks that come and go."""
    blocks = list(blocks)
    nxt, end = 0, 0.0
    res = [[] for _ in range(sms)]  # per SM: [remaining fraction, work, latency] of each block on it
    last, version, heap = [0.0] * sms, [0] * sms, []

    def advance(sm, t):
        k = len(res[sm])
        for b in res[sm]:
            b[0] -= (t - last[sm]) / (k * b[1] + b[2])
        last[sm] = t

    def predict(sm):
        k = len(res[sm])
        version[sm] += 1
        if k:
            heapq.heappush(heap, (last[sm] + min(b[0] * (k * b[1] + b[2]) for b in res[sm]), sm, version[sm]))

    for _ in range(slots):
        for sm in range(sms):
            if nxt < len(blocks):
                res[sm].append([1.0, *blocks[nxt]])
                nxt += 1
    for sm in range(sms):
        predict(sm)
    while heap:
        t, sm, v = heapq.heappop(heap)
        if v != version[sm]:
            continue
        advance(sm, t)
        res[sm] = [b for b in res[sm] if b[0] > 1e-9]
        end = max(end, t)
        while len(res[sm]) < slots and nxt < len(blocks):
            res[sm].append([1.0, *blocks[nxt]])
            nxt += 1
        predict(sm)
    return end


def model_forward(f, hs, shape, hw=H200, regs=None, launch_order="head"):
    """The modelled forward call: ms, blocks per SM, ms without the tail (every slot busy to the
    end). launch_order: "head" or "tile" (AS_BUILT_FWD_ORDER)."""
    n = blocks_per_sm(32 * f["WARPS"], regs, fwd_smem(f, hs), hw, f["MIN_BLOCKS"])
    return forward_call(forward_blocks(f, hs, shape[1], hw, n), n, f["BQ"], shape, hw, launch_order)


# The wgmma forward (llmc/flash_forward_sm90.cuh; not yet measured): per key tile a warpgroup's 64
# rows, its products on the tensor cores at WGMMA_TFLOPS with their operands (its rows of Q, the K
# and V tiles) read from shared memory, no ldmatrix, and its four warps' softmax as the mma.sync
# forward's (one row tile each); the pipes added, as for mma.sync, less one overlap the kernel is
# built for: its pipeline issues tile kt's O += P V beside tile kt + 1's S = Q Kᵀ and computes tile
# kt + 1's softmax while it runs, so the smaller of that product and the softmax's exp and FP32
# hides (SM90_FWD_PIPELINE; FlashAttention-3's overlap within a warpgroup). No other asynchrony is
# credited (a warpgroup's exponentials under the other's products), so the figure stays a floor.
SM90_FIELDS = ("BQ", "WARPGROUPS", "BK", "STAGES", "MIN_BLOCKS")
SM90_FWD_PIPELINE = True


def sm90_wg_tile(f, hs, skip=()):
    """One warpgroup's work on one key tile: FLOPs of S = Q Kᵀ and O += P V, the bytes they read
    from shared memory (its rows of Q too, unless Q_REGS holds them in registers), the exp and FP32
    of its warps' softmax. skip: parts left out (SM90_ABLATIONS: "exp", the scores' exponentials;
    "pv", the product and its V reads)."""
    BK, sm = f["BK"], SOFTMAX[AS_BUILT_SOFTMAX]
    w = dict(wgmma=2 * 2 * 64 * BK * hs, smem=(0 if f.get("Q_REGS") else 64 * hs * BF16) + 2 * BK * hs * BF16,
             exp=4 * 32 * ((0 if "exp" in skip else BK // 2) + 2),
             fp32=4 * (sm["fwd_score"] * BK / 2 + sm["fwd_rescale"] * FWD_FP32_PER_OUT * hs / 2 + 2 * sm["fwd_row_half"]))
    if "pv" in skip:
        w["wgmma"] //= 2
        w["smem"] -= BK * hs * BF16
    return w


def sm90_wg_clk(f, hs, hw, blocks, skip=()):
    """SM clocks of one warpgroup's key tile (sm90_wg_tile): the pipes added, less the softmax or
    the P V product, whichever is shorter, where the pipeline hides it, less the two-block overlap."""
    w = sm90_wg_tile(f, hs, skip)
    p = pipe_clk(w, hw)
    hidden = 0.0
    if SM90_FWD_PIPELINE and "pv" not in skip:
        hidden = min(pipe_clk(dict(wgmma=2 * 64 * f["BK"] * hs), hw)["mma"], p["exp"] + p["fp32"])
    return pipes_added(w, hw, blocks, hidden)


def sm90_smem(f, hs):
    return 1024 + (f["BQ"] + 2 * f["STAGES"] * f["BK"]) * hs * BF16


def model_forward_sm90(f, hs, shape, hw=H200, regs=None, skip=()):
    """The modelled wgmma forward call (blocks launched as flash_forward_sm90: every head's last
    query tile first), as model_forward; skip as sm90_wg_tile's."""
    T, G, BQ, BK = shape[1], f["WARPGROUPS"], f["BQ"], f["BK"]
    n = blocks_per_sm(128 * G, regs, sm90_smem(f, hs), hw, f["MIN_BLOCKS"])
    per_wg = sm90_wg_clk(f, hs, hw, n, skip)
    fill = pipe_clk(dict(smem=2 * BK * hs * BF16), hw)["smem"]  # the K and V tiles cp.async writes
    per = {}
    for qt in range(-(-T // BQ)):
        q0 = qt * BQ
        active = [sum(1 for g in range(G) if kt * BK <= q0 + 64 * g + 63) for kt in range(min(-(-T // BK), (q0 + BQ) // BK))]
        per[qt] = (sum(a * per_wg + fill for a in active), BLOCK_START_CLK + len(active) * STAGE_WAIT_CLK)
    return forward_call(per, n, BQ, shape, hw, "tile")


# dev_attention --ablate's variants of the wgmma kernels (llmc/flash_common.cuh's FlashSkip): name,
# the parts the model leaves out for it. --ablation prints each one's modelled time against the
# kernel's as built: what the model says the part costs, before the GPU times it.
SM90_ABLATIONS = {"forward_sm90": (("no_exp", ("exp",)), ("no_pv", ("pv",))),
                  "backward_sm90": (("no_exp", ("exp",)), ("no_dq_product", ("dq",)), ("no_dq_sum", ("dq_sum",)), ("no_dq", ("dq", "dq_sum")))}


def ablation_rows(header, shapes, ptxas, hw=H200):
    """[shape, direction, variant, modelled ms, its time / the kernel's as built] for each wgmma
    kernel of each shape (head sizes 64 and 128) and each of its SM90_ABLATIONS, as built first."""
    rows = []
    for name, shape in shapes:
        hs = shape[4]
        for direction, tiles, model in (("forward_sm90", read_sm90_tiles(header, hs), model_forward_sm90),
                                         ("backward_sm90", read_sm90_tiles(header, hs, "backward"), model_backward_sm90)):
            if not tiles:
                continue
            regs = ptxas.get((f"flash_{direction}_kernel", hs), (None, None))[0]
            base = model(tiles, hs, shape, hw, regs)["ms"]
            rows.append([name, direction, "as_built", "%.4f" % base, "1.000"])
            for variant, skip in SM90_ABLATIONS[direction]:
                ms = model(tiles, hs, shape, hw, regs, skip)["ms"]
                rows.append([name, direction, variant, "%.4f" % ms, "%.3f" % (ms / base)])
    return rows


def read_sm90_tiles(header_path, hs, direction="forward"):
    """FlashFwdSm90Tile (FlashBwdSm90Tile) at head size hs from flash_forward_sm90.cuh
    (flash_backward_sm90.cuh) beside the header, or None (no such file, or a head size it does not take)."""
    fname, struct, fields = (("flash_forward_sm90.cuh", "FlashFwdSm90Tile", SM90_FIELDS) if direction == "forward" else
                             ("flash_backward_sm90.cuh", "FlashBwdSm90Tile", SM90_BWD_FIELDS))
    path = os.path.join(os.path.dirname(header_path), fname)
    if hs not in (64, 128) or not os.path.isfile(path):
        return None
    try:
        text = open(path).read()
    except OSError as e:
        die(f"cannot read '{path}' ({e.strerror})")
    return read_tiles(text, struct, fields, hs)


# The wgmma backward (llmc/flash_backward_sm90.cuh; not yet measured): a block's two compute
# warpgroups of 64 keys take each query tile 64 queries at a time (a sub-tile): Sᵀ, dPᵀ, dV and
# dK on the tensor cores at WGMMA_TFLOPS where the warpgroup's keys reach the sub-tile (their
# shared-memory operands read at 128 bytes a clock: K or V rows (not with KV_REGS: then A fragments
# in registers) and Q or dO for Sᵀ and dPᵀ, dO and Q for dV and dK, whose A is in registers), the
# exp and FP32 of the scores as the mma.sync
# backward's, dSᵀ stored; then both warpgroups' dQ part (dS K over the block's 128 keys, read from
# shared memory), stored to a stage the writer warpgroup reads; the tile's Q, dO and rows filled by
# cp.async; one barrier. The writer's turn waits run beside (none in the steady state) and are not
# in it. The pipes added, as for the forward: a floor.
SM90_BWD_FIELDS = ("BK", "BQ", "COMPUTE_WARPGROUPS", "DQ_STAGES")


def sm90_bwd_wg_sub(b, hs, skip=()):
    """One compute warpgroup's work on one 64-query sub-tile its keys reach (the four products);
    skip: "exp" leaves the exponentials out (SM90_ABLATIONS)."""
    operands = (4 if b.get("KV_REGS") else 6) * 64 * hs * BF16
    return dict(wgmma=4 * 2 * 64 * 64 * hs, smem=operands + 64 * 64 * BF16 + 4 * 16 * 32 * 8,  # operands; dSᵀ; lse and D
                exp=0 if "exp" in skip else 64 * 64, fp32=4 * SOFTMAX[AS_BUILT_SOFTMAX]["bwd_score"] * 32)


def sm90_bwd_tile_rest(b, hs, skip=()):
    """A block's work on one query tile besides the sub-tiles: the dQ part (both warpgroups), its
    stage stored and read, the tile's fills. skip: "dq" leaves the product and the stage's stores
    out, "dq_sum" the writer's reads of it (SM90_ABLATIONS; the writer's global sums and turns are
    not in the model, which has them run beside)."""
    BQ, BK = b["BQ"], b["BK"]
    blocks = BQ * hs // (64 * 64)  # the part's 64 x 64 blocks, one a warpgroup: each reads 64 x BK of dSᵀ and BK x 64 of K
    product, stage = blocks * 2 * 64 * BK * BF16, BQ * hs * FP32
    return dict(wgmma=0 if "dq" in skip else 2 * BQ * BK * hs,
                smem=(0 if "dq" in skip else product + stage) + (0 if "dq_sum" in skip else stage) + 2 * BQ * hs * BF16 + BQ * 8)


def sm90_bwd_smem(b, hs):
    return 1024 + (2 * b["BK"] * hs + 4 * b["BQ"] * hs + 2 * b["BK"] * b["BQ"]) * BF16 + b["DQ_STAGES"] * b["BQ"] * hs * FP32 + 2 * b["BQ"] * 8


def model_backward_sm90(b, hs, shape, hw=H200, regs=None, skip=()):
    """The modelled wgmma backward call (tickets as built: key block 0 of every head first), as
    model_backward; skip as sm90_bwd_wg_sub's and sm90_bwd_tile_rest's."""
    B, T, NH, NKV, _ = shape
    BQ, BK = b["BQ"], b["BK"]
    n = blocks_per_sm(128 * (b["COMPUTE_WARPGROUPS"] + 1), regs, sm90_bwd_smem(b, hs), hw, 1)
    sub, rest = pipes_added(sm90_bwd_wg_sub(b, hs, skip), hw, 1), pipes_added(sm90_bwd_tile_rest(b, hs, skip), hw, 1)
    per = {}
    for kb in range(-(-T // BK)):
        clk = BLOCK_START_CLK
        for qi in range(kb * BK // BQ, -(-T // BQ)):
            active = sum(1 for g in range(b["COMPUTE_WARPGROUPS"]) for q in range(BQ // 64) if kb * BK + 64 * g <= qi * BQ + 64 * q + 63)
            clk += active * sub + rest + BARRIER_CLK
        per[kb] = (0.0, clk * (NH // NKV))
    nkb = -(-T // BK)
    order = [per[t // (B * NKV)] for t in range(B * NKV * nkb)]
    clk = tail_clk(order, hw["sms"], n)
    extra = backward_small_ms(shape, "writer_red")
    to_ms = 1 / (hw["clock_ghz"] * 1e6)
    return dict(ms=clk * to_ms + extra, blocks_per_sm=n, no_tail_ms=sum(l for _, l in order) / hw["sms"] * to_ms + extra)


def forward_call(per, n, BQ, shape, hw, launch_order):
    """ms, blocks per SM and ms without the tail of a forward call whose block rows qt take
    per[qt] = (work, latency), n blocks an SM."""
    B, T, NH, NKV, _ = shape
    nqt = -(-T // BQ)
    if launch_order == "head":
        order = [per[nqt - 1 - x] for _ in range(B * NH) for x in range(nqt)]  # blockIdx.x 0: the last query rows
    else:
        order = [per[nqt - 1 - y] for y in range(nqt) for _ in range(B * NH)]  # blockIdx.y 0: every head's last query rows
    clk = tail_clk(order, hw["sms"], n)
    to_ms = 1 / (hw["clock_ghz"] * 1e6)
    launch = LAUNCH_US * 1e-3
    return dict(ms=clk * to_ms + launch, blocks_per_sm=n, no_tail_ms=sum(n * w + l for w, l in order) / (hw["sms"] * n) * to_ms + launch)


def backward_small_ms(shape, dq):
    """ms of the backward's small kernels and launches: D reads dO and O and writes (lse·log2 e, D)
    (5ec15b9: D); with writer_red the conversion reads fp32 dQ and writes bf16."""
    B, T, NH, _, hs = shape
    rows = B * NH * T
    small_bytes, kernels = 2 * rows * hs * BF16 + rows * (FP32 + (FP32 if dq == "serial" else 8)), 3
    if dq == "writer_red":
        small_bytes, kernels = small_bytes + rows * hs * (FP32 + BF16), 4
    return small_bytes / (HBM_TBS * 1e12) * 1e3 + kernels * LAUNCH_US * 1e-3


def model_backward(b, hs, shape, dq, hw=H200, regs=None, spill=0, parts=(), launch_order="head"):
    """The modelled backward call (the counters' memset, D, the backward, the dQ conversion): ms,
    blocks per SM, ms without the tail. launch_order: "head" or "block" (AS_BUILT_BWD_ORDER)."""
    B, T, NH, NKV, _ = shape
    threads = 32 * b["WARPS"] + (0 if dq == "serial" else 32 * b.get("WRITER_WARPS", 1))
    n = blocks_per_sm(threads, regs, bwd_smem(b, hs), hw, b["MIN_BLOCKS"])
    if n != 1:
        die(f"the backward model assumes one block per SM; the tiles at HS {hs} give {n}")
    per = backward_blocks(b, hs, T, NH // NKV, dq, hw, spill, parts)
    nkb = -(-T // b["BK"])
    if launch_order == "head":
        order = [per[nkb - 1 - t % nkb] for t in range(B * NKV * nkb)]  # tickets: the last key block of a head first
    else:
        order = [per[t // (B * NKV)] for t in range(B * NKV * nkb)]  # tickets: key block 0 of every head first
    clk = tail_clk(order, hw["sms"], 1)
    extra = backward_small_ms(shape, dq)
    to_ms = 1 / (hw["clock_ghz"] * 1e6)
    return dict(ms=clk * to_ms + extra, blocks_per_sm=n, no_tail_ms=sum(l for _, l in order) / hw["sms"] * to_ms + extra)


def causal_flops(shape, direction):
    """dev_attention's count: 4 B NH T² HS / 2 forward, 2.5 times that backward."""
    B, T, NH, NKV, hs = shape
    f = 4 * B * NH * T * T * hs / 2
    return f if direction == "forward" else 2.5 * f


# ---------------------------------------------------------------------------------------------
# the measured designs and variants


def design_tiles(name, hs):
    d = DESIGNS[name]
    return parse_fields(d["fwd"], hs), parse_fields(d["bwd"], hs)


# the +x / -x of dev/flash_measured.csv's variants (and of ABLATION_5EC15B9): (forward tile changes
# at HS 64, backward tile changes, parts removed)
VARIANT_EDITS = {
    "dq_stages3": ({}, {"DQ_STAGES": 3}, ()),
    "writer_global_work": ({}, {}, ("writer",)),
    "dq_product": ({}, {}, ("dq",)),
    "fwd_hs64_4warps_q_shared": ({"WARPS": 4, "Q_REGS": False}, {}, ()),
    "fwd_hs64_4warps_bk32_q_shared": ({"WARPS": 4, "Q_REGS": False, "BK": 32}, {}, ()),
    "fwd_hs64_q_shared": ({"Q_REGS": False}, {}, ()),
    "dq_turn_order": ({}, {}, ("turn",)),
    "fence": ({}, {}, ("fence",)),
    "poll": ({}, {}, ("poll",)),
    "dq": ({}, {}, ("dq",)),
}


def model_variant(variant, shape_name, direction, hw=H200):
    """Modelled ms of a measured row ("commit", "commit+x", "commit-x-y" at a benchmark shape), or
    None when the model does not know the commit, an edit or the shape."""
    m = re.fullmatch(r"([0-9a-f]{7})((?:[+-]\w+?)*)", variant)
    if not m or m.group(1) not in DESIGNS or shape_name not in SHAPES:
        return None
    shape = SHAPES[shape_name]
    hs = shape[4]
    f, b = design_tiles(m.group(1), hs)
    ptxas = DESIGNS[m.group(1)]["ptxas"]
    fregs = ptxas[("forward", hs)][0]
    parts = []
    for _, name in re.findall(r"([+-])([a-z0-9_]+?)(?=[+-]|$)", m.group(2)):
        if name not in VARIANT_EDITS:
            return None
        fe, be, pe = VARIANT_EDITS[name]
        if fe and hs == 64:
            f, fregs = dict(f, **fe), None  # its registers not known: the launch bound's occupancy
        b = dict(b, **be)
        parts += pe
    if direction == "forward":
        return model_forward(f, hs, shape, hw, fregs)["ms"]
    return model_backward(b, hs, shape, DESIGNS[m.group(1)]["dq"], hw, *ptxas[("backward", hs)], parts)["ms"]


def read_measured(path):
    """The rows of dev/flash_measured.csv (its comment lines skipped)."""
    try:
        lines = [l for l in open(path).read().splitlines() if l and not l.startswith("#")]
    except OSError as e:
        die(f"--measured: cannot read '{path}' ({e.strerror})")
    rows = list(csv.DictReader(lines))
    need = {"variant", "call", "shape", "direction", "ms"}
    if not rows or not need <= set(rows[0]):
        die(f"--measured: '{path}' has no rows with the columns {', '.join(sorted(need))}")
    for r in rows:
        try:
            r["ms"] = float(r["ms"])
        except (TypeError, ValueError):
            die(f"--measured: '{path}': ms '{r['ms']}' of variant {r['variant']} is not a number")
    return rows


def is_plain(variant):
    return re.fullmatch(r"[0-9a-f]{7}", variant) is not None


def calibration(measured_path, out=sys.stdout):
    """Prints, as each is modelled, every row of the table the model knows and the 5ec15b9
    ablation: measured ms, modelled ms, modelled / measured; then the newest design's rows at
    llama300m and hs128_t4096 (measured: the mean of its rows), the table docs/gpu.md quotes.
    Returns the ratios of the plain-commit rows."""
    rows = read_measured(measured_path)
    rows += [dict(variant=v, call="ablation", shape=s, direction="backward", ms=ms) for v, s, ms in ABLATION_5EC15B9]
    print("variant,call,shape,direction,measured_ms,modelled_ms,modelled/measured", file=out, flush=True)
    plain, cache = [], {}
    for r in rows:
        key = (r["variant"], r["shape"], r["direction"])
        if key not in cache:
            cache[key] = model_variant(*key)
        got = cache[key]
        if got is None:
            continue
        ratio = got / r["ms"]
        if is_plain(r["variant"]):
            plain.append(ratio)
        print(f"{r['variant']},{r['call']},{r['shape']},{r['direction']},{r['ms']:.4f},{got:.4f},{ratio:.3f}", file=out, flush=True)
    print(f"\n{NEWEST} (the kernels as built), measured (the mean of its rows) and modelled:", file=out)
    print("| shape | direction | measured ms | modelled ms | modelled / measured |", file=out)
    print("| --- | --- | --- | --- | --- |", file=out)
    for shape in ("llama300m", "hs128_t4096"):
        for direction in ("forward", "backward"):
            ms = [r["ms"] for r in rows if (r["variant"], r["shape"], r["direction"]) == (NEWEST, shape, direction)]
            if not ms:
                continue
            mean = sum(ms) / len(ms)
            got = cache.get((NEWEST, shape, direction)) or model_variant(NEWEST, shape, direction)
            print(f"| {shape} | {direction} | {mean:.3f} | {got:.3f} | {got / mean:.2f} |", file=out)
    return plain


def full_tile(phase, t, hs, spill=0, hw=H200):
    """{pipe: SM clocks, waits: SM clocks} of one block on one tile where every warp computes
    (as built: the forward with two blocks' overlap, the backward with the writer warp)."""
    if phase == "forward":
        w = {k: v * t["WARPS"] for k, v in fwd_warp_tile(t, hs).items()}
        w["smem"] = 2 * t["BK"] * hs * BF16
        p = pipe_clk(w, hw)
        total, largest = sum(p.values()), max(p.values())
        scale = (total - OVERLAP_TWO_BLOCKS * (total - largest)) / total if t["MIN_BLOCKS"] >= 2 else 1.0
        p = {k: v * scale for k, v in p.items()}
        p["waits"] = fwd_wait_clk(t)
        return p
    four, dq = bwd_warp_tile(t, hs)
    W, BQ = t["WARPS"], t["BQ"]
    w = {k: W * (four.get(k, 0) + dq.get(k, 0)) for k in set(four) | set(dq)}
    w["smem"] += 2 * BQ * hs * BF16 + BQ * 8 + 2 * BQ * hs * FP32 + 32 * W * spill
    p = pipe_clk(w, hw)
    p["waits"] = bwd_barriers(t) * BARRIER_CLK
    return p


# ---------------------------------------------------------------------------------------------
# the kernels as built


def as_built(cfg, ptxas, hs, header=None):
    """The as-built kernels at head size hs: [(kernel, phase, tiles, threads, launch bound, smem,
    registers, spill bytes)]; with header, the wgmma forward's too (where it takes hs)."""
    f, b = cfg[hs]
    out = []
    sm90 = read_sm90_tiles(header, hs) if header else None
    if sm90:
        regs, spill = ptxas.get(("flash_forward_sm90_kernel", hs), (None, None))
        out.append(dict(kernel="flash_forward_sm90_kernel", phase="forward_sm90", tiles=sm90, threads=128 * sm90["WARPGROUPS"],
                        min_blocks=sm90["MIN_BLOCKS"], smem=sm90_smem(sm90, hs), regs=regs, spill=spill))
    bsm90 = read_sm90_tiles(header, hs, "backward") if header else None
    if bsm90:
        regs, spill = ptxas.get(("flash_backward_sm90_kernel", hs), (None, None))
        out.append(dict(kernel="flash_backward_sm90_kernel", phase="backward_sm90", tiles=bsm90,
                        threads=128 * (bsm90["COMPUTE_WARPGROUPS"] + 1), min_blocks=1, smem=sm90_bwd_smem(bsm90, hs), regs=regs, spill=spill))
    for kernel, phase, t, threads, smem in (("flash_forward_kernel", "forward", f, 32 * f["WARPS"], fwd_smem(f, hs)),
                                            ("flash_backward_kernel", "backward", b, 32 * (b["WARPS"] + b.get("WRITER_WARPS", 1)),
                                             bwd_smem(b, hs))):
        regs, spill = ptxas.get((kernel, hs), (None, None))
        out.append(dict(kernel=kernel, phase=phase, tiles=t, threads=threads, min_blocks=t["MIN_BLOCKS"], smem=smem, regs=regs, spill=spill))
    return out


def setmaxnreg_pool(k):
    """A warp-specialised backward's registers after its setmaxnreg (PTX ISA, "setmaxnreg": the
    block's registers at launch are a pool; .dec gives to it, .inc waits until it can take from
    it): (registers the threads then hold, (compute threads, COMPUTE_REGS), (writer threads,
    WRITER_REGS)), or None for a kernel without them."""
    t = k["tiles"]
    if "COMPUTE_REGS" not in t or "WRITER_REGS" not in t:
        return None
    compute = 128 * t["COMPUTE_WARPGROUPS"] if "COMPUTE_WARPGROUPS" in t else 32 * t["WARPS"]
    writer = k["threads"] - compute
    return compute * t["COMPUTE_REGS"] + writer * t["WRITER_REGS"], (compute, t["COMPUTE_REGS"]), (writer, t["WRITER_REGS"])


def check(cfg, ptxas, hw, header=None):
    """Lines for --check: every as-built kernel is in the ptxas report and its registers and
    shared memory give the blocks per SM its launch bound asks (the backward block: (WARPS +
    WRITER_WARPS) x 32 threads), and a backward's setmaxnreg takes no more registers than the
    block was launched with (setmaxnreg_pool); spills are a WARN line (the model counts them as L1 traffic every tile).
    (lines, all ok)."""
    lines, ok = [], True
    for hs in sorted(cfg):
        for k in as_built(cfg, ptxas, hs, header):
            name = f"{k['kernel']}<{hs}>"
            if k["regs"] is None:
                lines.append(f"FAIL {name}: not in the ptxas report (make ptxas-report)")
                ok = False
                continue
            blocks = blocks_per_sm(k["threads"], k["regs"], k["smem"], hw, k["min_blocks"])
            good = blocks >= k["min_blocks"]
            ok &= good
            lines.append(f"{'PASS' if good else 'FAIL'} {name}: {k['regs']} registers x {k['threads']} threads, "
                         f"{k['smem'] / 1024:.1f} KB shared: {blocks} blocks per SM, launch bound {k['min_blocks']}")
            pool = setmaxnreg_pool(k)
            if pool:
                need, compute, writer = pool
                fits = need <= k["regs"] * k["threads"]
                ok &= fits
                lines.append(f"{'PASS' if fits else 'FAIL'} {name}: setmaxnreg takes {compute[0]} x {compute[1]} + {writer[0]} x "
                             f"{writer[1]} = {need} registers of the block's {k['regs']} x {k['threads']} = {k['regs'] * k['threads']}"
                             + ("" if fits else " (setmaxnreg.inc waits until the block's pool has them: here, for ever)"))
            if k["spill"]:
                lines.append(f"WARN {name}: {k['spill']} spill bytes a thread, stored + loaded (the launch bound caps it "
                             f"at {register_cap(k['threads'], k['min_blocks'], hw)} registers; the model counts them as L1 traffic every tile)")
    return lines, ok


def parse_shapes(text):
    """[(name, (B, T, NH, NKV, HS))] of --shape: benchmark shape names or B:T:NH:NKV:HS, commas between."""
    out = []
    for item in text.split(","):
        item = item.strip()
        if item in SHAPES:
            out.append((item, SHAPES[item]))
            continue
        try:
            B, T, NH, NKV, HS = (int(x) for x in item.split(":"))
        except ValueError:
            die(f"--shape: expected a name among {', '.join(SHAPES)} or B:T:NH:NKV:HS, found '{item}'")
        if min(B, T, NH, NKV) < 1 or NH % NKV or HS not in (16, 32, 64, 128) or T > 1 << 20:
            die(f"--shape: '{item}' needs B, T, NH, NKV >= 1, NKV dividing NH, T <= 1048576 and HS among 16, 32, 64, 128")
        out.append((item, (B, T, NH, NKV, HS)))
    return out


def main(argv=None):
    ap = cli_util.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default=",".join(SHAPES), help="comma list of shape names or B:T:NH:NKV:HS")
    ap.add_argument("--hs", default="16,32,64,128", help="--check: comma list of head sizes (16, 32, 64, 128)")
    ap.add_argument("--header", default=os.path.join(REPO, "llmc", "flash_common.cuh"), help="the kernels' source")
    ap.add_argument("--ptxas", default=os.path.join(REPO, "dev", "cuda", "ptxas_report.txt"), help="registers per thread (make ptxas-report)")
    ap.add_argument("--measured", default=os.path.join(REPO, "dev", "flash_measured.csv"), help="--calibration: the measured table")
    ap.add_argument("--csv", action="store_true", help="CSV rows instead of the table")
    ap.add_argument("--calibration", action="store_true",
                    help="every measured row the model knows: measured and modelled ms (exit 1 if a plain commit's row is off by more than 20%%)")
    ap.add_argument("--ablation", action="store_true",
                    help="the wgmma kernels' variants that dev_attention --ablate times (parts left out): modelled ms and ratio to the kernel as built")
    ap.add_argument("--check", action="store_true",
                    help="only check the as-built kernels against the ptxas report: launch-bound blocks per SM and the backward's setmaxnreg within its launch registers (exit 1 if not); spills warn")
    a = ap.parse_args(argv)
    # a file named on the command line must be there, whichever mode reads it (where the default
    # report is absent the model goes without registers)
    for flag, path in (("--ptxas", a.ptxas), ("--measured", a.measured)):
        if path != ap.get_default(flag[2:]) and not os.path.isfile(path):
            die(f"{flag}: cannot read '{path}' (no such file)")
    if a.calibration:
        plain = calibration(a.measured)
        worst = max((abs(r - 1) for r in plain), default=0.0)
        print(f"plain commits: {len(plain)} rows, modelled / measured {min(plain, default=0):.3f} to {max(plain, default=0):.3f}")
        return 0 if plain and worst <= 0.2 else 1
    try:
        hss = [int(x) for x in a.hs.split(",")]
    except ValueError:
        die(f"--hs: expected a comma list of head sizes, found '{a.hs}'")
    if not hss or any(h not in (16, 32, 64, 128) for h in hss):
        die(f"--hs: expected head sizes among 16, 32, 64, 128, found '{a.hs}'")
    if a.check:
        if not os.path.isfile(a.ptxas):
            die(f"--ptxas: cannot read '{a.ptxas}' (make ptxas-report writes it)")
        lines, ok = check(read_config(a.header, hss), read_ptxas(a.ptxas), H200, a.header)
        print("\n".join(lines))
        return 0 if ok else 1
    shapes = parse_shapes(a.shape)
    cfg = read_config(a.header, sorted({s[4] for _, s in shapes}))
    ptxas = read_ptxas(a.ptxas)
    if a.ablation:
        if not any(s[4] in (64, 128) for _, s in shapes):
            die(f"--ablation: no shape of head size 64 or 128 in '{a.shape}' (the wgmma kernels' head sizes)")
        rows = ablation_rows(a.header, shapes, ptxas)
        if not rows:
            die(f"--ablation: no wgmma kernel source (flash_forward_sm90.cuh, flash_backward_sm90.cuh) beside '{a.header}'")
        head = ["shape", "direction", "variant", "modelled ms", "x as built"]
        if a.csv:
            csv.writer(sys.stdout, lineterminator="\n").writerows([head] + rows)
        else:
            print("the wgmma kernels with parts left out (dev_attention --ablate's variants), modelled on an H200 as the kernels "
                  "as built: not yet measured on a GPU")
            print("| " + " | ".join(head) + " |")
            print("|" + "---|" * len(head))
            for r in rows:
                print("| " + " | ".join(r) + " |")
        return 0
    head = ["shape", "direction", "HS", "blocks/SM", "mma clk", "ldmatrix clk", "exp clk", "fp32 clk", "smem clk", "waits clk",
            "ms without tail", "ms", "causal TFLOP/s"]
    rows = []
    for name, shape in shapes:
        hs = shape[4]
        sm90 = read_sm90_tiles(a.header, hs)
        if sm90:  # the wgmma forward, beside the mma.sync kernels (not measured: a prediction)
            regs = ptxas.get(("flash_forward_sm90_kernel", hs), (None, None))[0]
            r = model_forward_sm90(sm90, hs, shape, H200, regs)
            w = {k: v * sm90["WARPGROUPS"] for k, v in sm90_wg_tile(sm90, hs).items()}
            w["smem"] += 2 * sm90["BK"] * hs * BF16
            p = pipe_clk(w, H200)
            total, largest = sum(p.values()), max(p.values())
            scale = (total - OVERLAP_TWO_BLOCKS * (total - largest)) / total if r["blocks_per_sm"] >= 2 else 1.0
            p = {k: v * scale for k, v in p.items()}
            sm90_row = [name, "forward_sm90", hs, r["blocks_per_sm"]] + ["%.0f" % p[x] for x in ("mma", "ldsm", "exp", "fp32", "smem")] + \
                       ["%.0f" % STAGE_WAIT_CLK, "%.4f" % r["no_tail_ms"], "%.4f" % r["ms"], "%.1f" % (causal_flops(shape, "forward") / r["ms"] / 1e9)]
        bsm90 = read_sm90_tiles(a.header, hs, "backward")
        if bsm90:  # the wgmma backward (not measured: a prediction)
            regs = ptxas.get(("flash_backward_sm90_kernel", hs), (None, None))[0]
            r = model_backward_sm90(bsm90, hs, shape, H200, regs)
            w = {k: v * bsm90["COMPUTE_WARPGROUPS"] * (bsm90["BQ"] // 64) for k, v in sm90_bwd_wg_sub(bsm90, hs).items()}
            for k, v in sm90_bwd_tile_rest(bsm90, hs).items():
                w[k] = w.get(k, 0) + v
            p = pipe_clk(w, H200)
            bsm90_row = [name, "backward_sm90", hs, r["blocks_per_sm"]] + ["%.0f" % p[x] for x in ("mma", "ldsm", "exp", "fp32", "smem")] + \
                        ["%.0f" % BARRIER_CLK, "%.4f" % r["no_tail_ms"], "%.4f" % r["ms"], "%.1f" % (causal_flops(shape, "backward") / r["ms"] / 1e9)]
        for k in as_built(cfg, ptxas, hs):
            t = k["tiles"]
            if k["phase"] == "forward":
                r = model_forward(t, hs, shape, H200, k["regs"], AS_BUILT_FWD_ORDER)
            else:
                r = model_backward(t, hs, shape, AS_BUILT_DQ, H200, k["regs"], k["spill"] or 0, (), AS_BUILT_BWD_ORDER)
            p = full_tile(k["phase"], t, hs, k["spill"] or 0)
            rows.append([name, k["phase"], hs, r["blocks_per_sm"]] + ["%.0f" % p[x] for x in ("mma", "ldsm", "exp", "fp32", "smem", "waits")] +
                        ["%.4f" % r["no_tail_ms"], "%.4f" % r["ms"], "%.1f" % (causal_flops(shape, k["phase"]) / r["ms"] / 1e9)])
            if sm90 and k["phase"] == "forward":
                rows.append(sm90_row)
            if bsm90 and k["phase"] == "backward":
                rows.append(bsm90_row)
    if a.csv:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(head)
        w.writerows(rows)
        return 0
    print(f"the kernels as built ({os.path.relpath(a.header, REPO)}), modelled on an H200 ({H200['sms']} SMs at {H200['clock_ghz']} GHz, "
          f"mma.sync {MMA_TFLOPS:g} TFLOP/s, ldmatrix.x4 {LDSM_BYTES_PER_CLK} B/clk/SM, exp {EXP_PER_CLK}/clk/SM: measured). "
          "clk: SM clocks of one block on one tile below the diagonal, per pipe (added, less the two-block overlap) "
          "and its waits; the forward's with the SM to itself. --calibration compares the model with the measured times. "
          f"forward_sm90: the wgmma forward (llmc/flash_forward_sm90.cuh, not yet measured), its products at {WGMMA_TFLOPS:g} TFLOP/s "
          "(the measured cuBLASLt GEMM's rate) on the mma column, no ldmatrix, its softmax hidden under the previous tile's "
          "P V product as far as that product lasts (its pipeline; the pipes' columns before that), no other asynchrony "
          "credited: a floor; backward_sm90: the wgmma backward (llmc/flash_backward_sm90.cuh, not yet measured), the same "
          "way without the pipeline.")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")
    return 0


if __name__ == "__main__":
    cli_util.run(main)
