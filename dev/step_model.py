#!/usr/bin/env python3
"""step_model.py — what the kernel changes made since the last GPU run (commit c950ed2, one H200,
2026-12-04) are expected to take off a training step of llama300m (B 4, T 4096) and llama600m
(B 4, T 2048): each change's kernels, their time a step as measured there, the time modelled
after the change, and the step that leaves. A prediction to check on a GPU, not a measurement.

  python3 dev/step_model.py            # the table, a row per change and model
  python3 dev/step_model.py --csv
  python3 dev/step_model.py --attention flash_sm90   # and the step on the wgmma kernels

How each change is modelled, from the time its kernels took on the H200:
  flash launch orders   the forward and backward as measured at c950ed2 (16 calls a step each),
                        times dev/flash_model.py's ratio of the new order to the old for the same
                        kernel (the model counts no waits for a dQ turn; see its header), with
                        the spills the kernel had before setmaxnreg
  flash backward        the backward in its new order, times flash_model's ratio of the kernel
  without spills        without spills to the kernel with the earlier ones (the model moves each spilled
                        byte through L1 once a tile: 712 bytes a thread at HS 128 and 184 at HS
                        64 from the ptxas report, where the SASS's tile loop moves 236 to 408 at
                        HS 128, so the gain may be smaller)
  flash backward, K     (HS <= 64) the backward without spills, times flash_model's ratio of the
  and V in registers    kernel with each warp's K and V A fragments held in registers (8 of its
                        96 ldmatrix.x4 a tile at HS 64 left out) to the kernel that reads them
  flash softmax in      the forward and backward as above, times flash_model's ratio of its
  fewer instructions    "ex2" softmax (FFMA, max, ex2.approx, add a score; the mask on the diagonal
                        tiles only; the forward's rescale skipped at the i.i.d. scores' rate) with
                        the spills of the ptxas report now, to the "exp2f" one with none: the FP32
                        instructions only. The tile loops' integer and
                        address instructions, which fell more (the loads unrolled), are not in
                        the model: the gain is a floor, the spill a ceiling (flash_model's header)
  flash forward, a      the forward as above, times flash_model's ratio of the kernel with a full
  full and an empty     and an empty mbarrier per (K, V) stage (no wait a tile: STAGE_WAIT_CLK) to
  barrier per stage     the one with a barrier of the block at each tile (BARRIER_CLK); the warps'
                        extra overlap within a block is not credited (flash_model's header)
  flash backward, one   the backward as above, times flash_model's ratio of the kernel with one
  barrier a tile        barrier of its compute warps a tile (the query buffers' copies announced
                        on mbarriers, modelled without a wait; dSᵀ in two buffers) and the spills
                        of the ptxas report now, to the one with two and the spills before
  flash on wgmma        (--attention flash_sm90 only: train_llama's opt-in) the forward and the
  (flash_sm90)          backward as above, times flash_model's ratio of the wgmma kernel
                        (llmc/flash_forward_sm90.cuh, flash_backward_sm90.cuh) to the mma.sync
                        one as built (each a floor of its own: flash_model's header)
  rmsnorm backward      the row kernel (ncu, 5ec15b9; unchanged until now) and the dweight
  in one pass           kernel (c950ed2), 2 L + 1 calls a step; after: the bytes the one pass
                        moves (16 an element, against 22, plus the partials written and read) at
                        the rate the two kernels reached
  cross-entropy row     the backward (ncu, 5ec15b9; unchanged until now), once a step; after: 6
  in shared memory      bytes an element against 10 (the logits read once, not twice) at the rate
                        it reached. If its second read had come from L2 rather than HBM, or one
                        block an SM (against two) leaves HBM idle between the passes, the gain
                        is smaller: the least likely part of the table
  flash row dots        ncu, 5ec15b9 (llama300m; at llama600m below the profile's top 30, not
                        modelled), 16 calls a step; after: its bytes (dO and O, lse in, the rows
                        out) at the rmsnorm backward's measured rate
  Muon's S and P       Newton–Schulz as timed by bench_small_kernels at c950ed2 (autotuned), per
  in column blocks      group of L matrices; after: the same rate on the flops left (X Xᵀ and
                        S S at 5/8, so 4 m²n + 2 m³ becomes 3.25 m²n + 1.25 m³ an iteration),
                        plus the two mirror copies (3/8 of S and of P read and written, bf16)
                        at 3 TB/s
  Muon's memory passes  the momentum, the norm pass, X and the update (ncu, 5ec15b9; at
  in W's orientation    llama600m the norm pass and the wide matrices' X and update fell below the
                        profile's top 30 and are taken at the rate each reached at llama300m);
                        after: the momentum as measured (the same 16 bytes an element, now also
                        summing U²), X (6 bytes) and the update (12) at the momentum's rate, with
                        no transposes
  global norm, 16-byte  the sum of squares (ncu, 5ec15b9), once a step; after: its 4 bytes an
  loads                 element at the momentum's rate
  rmsnorm forward,      the forward (ncu, 5ec15b9; unchanged until now), 2 L + 1 calls a step;
  row in registers      after: its 6 bytes an element (x read once, out written) at the
                        momentum's rate
The changes do not interact, so the savings add. The step times come from
dev/gpu_results_c950ed2.txt; the ncu times from the profile of 5ec15b9 (two steps, each kernel
alone: docs/gpu.md); the Newton–Schulz times from dev/bench_small_kernels_c950ed2.txt.
"""
import csv
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))
sys.path.insert(0, os.path.join(REPO, "dev"))
import cli_util  # noqa: E402
import flash_model as fm  # noqa: E402

# the models' shapes: N = B T rows of C, L layers, NH heads of HS, and the (rows, cols) of each
# group of matrices Muon orthogonalizes
PRESETS = {
    "llama300m": dict(B=4, T=4096, C=1024, L=16, NH=16, HS=64,
                      groups={"qkv": (3072, 1024), "proj": (1024, 1024), "fc1": (5632, 1024), "fc2": (1024, 2816)}),
    "llama600m": dict(B=4, T=2048, C=1536, L=16, NH=12, HS=128,
                      groups={"qkv": (4608, 1536), "proj": (1536, 1536), "fc1": (8192, 1536), "fc2": (1536, 4096)}),
}
# measured on the H200 (ms): the step at c950ed2; per call the flash kernels at c950ed2
# (dev/flash_measured.csv, 59539db's kernels); the rmsnorm row kernel, the cross-entropy backward
# and the row dots from the ncu profile of 5ec15b9 (time over 2 steps / calls); the dweight kernel
# and each Newton–Schulz group (5 iterations, batch L) from bench_small_kernels at c950ed2
MEASURED = {
    "llama300m": dict(step=107.3, flash_fwd=0.675, flash_bwd=2.161, rms_row=6.49 / 66, rms_dw=0.0404,
                      ce=5.67 / 2, rowdot=1.90 / 32, ns={"qkv": 2.1181, "proj": 0.9184, "fc1": 3.5619, "fc2": 1.8781},
                      passes=dict(momentum=1.82 / 2, norm=0.70 / 2, x_tall=0.89 / 2, x_wide=0.39 / 2, apply_tall=1.43 / 2,
                                  apply_wide=0.62 / 2), grad_norm=0.97 / 2, params=308577280, rms_fwd=2.89 / 66),
    "llama600m": dict(step=101.4, flash_fwd=0.290, flash_bwd=1.03, rms_row=5.05 / 66, rms_dw=0.0315,
                      ce=2.86 / 2, rowdot=None, ns={"qkv": 6.7336, "proj": 2.8838, "fc1": 11.2508, "fc2": 6.0169},
                      passes=dict(momentum=3.98 / 2, norm=None, x_tall=1.94 / 2, x_wide=None, apply_tall=3.18 / 2,
                                  apply_wide=None), grad_norm=1.90 / 2, params=607569408, rms_fwd=2.63 / 66),
}
# bytes an element of Muon's memory passes, version 1: the momentum (G and M read, M and U
# written), the norm (U read), X (U read, X written), the update (X, W read, W and its bf16 copy
# written)
PASS_BYTES = dict(momentum=16, norm=4, x=6, apply=12)
TARGETS = {"llama300m": 100.0, "llama600m": 85.0}  # issue 42's step targets, ms
SPILL_BEFORE = {64: 64 + 120, 128: 328 + 384}  # the backward's spill bytes stored + loaded a thread before setmaxnreg (ptxas, 3a86691)
SPILL_SETMAXNREG = {64: 0, 128: 0}  # and with it, before the softmax in fewer instructions (ptxas, 4d18147)
SPILL_SOFTMAX = {64: 12 + 24, 128: 0}  # and after it, before one barrier a tile (ptxas, 596392e)
MIRROR_TBS = 3.0     # the Gram mirror's copy, TB/s (a transpose through shared memory; set, not measured)
NS_STEPS = 5         # Newton–Schulz iterations (every Muon preset)
RMS_SLAB = 32        # rows per dweight partial (llmc/rmsnorm.cuh RMSNORM_DW_SLAB)
GRAM_BLOCKS = 4      # column blocks of X Xᵀ (llmc/muon.cuh MUON_GRAM_BLOCKS)


def gram_share(blocks):
    """The share of X Xᵀ's flops in `blocks` column blocks of width w = m / blocks, block j from its
    diagonal block down: sum over j of (m - j w) w / m² = (blocks + 1) / (2 blocks)."""
    return (blocks + 1) / (2.0 * blocks)


def flash_ratios(name, spill=None, kv_regs=False, softmax=False, stages=False, landed=False):
    """(forward, backward) new / old modelled time of the kernels as built, each change in turn,
    the earlier ones with the "exp2f" softmax: the launch orders, with the spills before setmaxnreg
    and K, V read from shared memory; spill given: (1, the backward in its new order with `spill`
    bytes / with those); kv_regs: (1, the backward in its new order with K and V in registers where
    the tiles say so / without), both with `spill` bytes; softmax: the "ex2" softmax with the
    spills of the report now / the "exp2f" one with SPILL_SETMAXNREG, forward and backward, the
    forward with a barrier of the block at each tile and the backward with two; stages: (the
    forward as built, with its stages' mbarriers / with that barrier, 1); landed: (1, the backward
    as built, one barrier a tile / two)."""
    p = PRESETS[name]
    shape = (p["B"], p["T"], p["NH"], p["NH"], p["HS"])
    hs = p["HS"]
    cfg = fm.read_config(os.path.join(REPO, "llmc", "flash_common.cuh"), [hs])
    ptxas = fm.read_ptxas(os.path.join(REPO, "dev", "cuda", "ptxas_report.txt"))
    f_now, b_now = cfg[hs]
    f_block, b_block = dict(f_now, SYNC="block"), dict(b_now, SYNC="block")
    f, built = dict(f_block, SOFTMAX="exp2f"), dict(b_block, SOFTMAX="exp2f")
    b = dict(built, KV_REGS=False)
    fregs = ptxas.get(("flash_forward_kernel", hs), (None, None))[0]
    bregs, spill_now = ptxas.get(("flash_backward_kernel", hs), (None, 0))
    if landed:
        new, old = (fm.model_backward(t, hs, shape, fm.AS_BUILT_DQ, fm.H200, bregs, sp, (), "block")["ms"]
                    for t, sp in ((b_now, spill_now or 0), (b_block, SPILL_SOFTMAX[hs])))
        return 1.0, new / old
    if stages:
        new, old = (fm.model_forward(t, hs, shape, fm.H200, fregs, "tile")["ms"] for t in (f_now, f_block))
        return new / old, 1.0
    if softmax:
        fwd = [fm.model_forward(t, hs, shape, fm.H200, fregs, "tile")["ms"] for t in (f_block, f)]
        bwd = [fm.model_backward(t, hs, shape, fm.AS_BUILT_DQ, fm.H200, bregs, s, (), "block")["ms"]
               for t, s in ((b_block, SPILL_SOFTMAX[hs]), (built, SPILL_SETMAXNREG[hs]))]
        return fwd[0] / fwd[1], bwd[0] / bwd[1]
    if kv_regs:
        new, old = (fm.model_backward(t, hs, shape, fm.AS_BUILT_DQ, fm.H200, bregs, spill, (), "block")["ms"] for t in (built, b))
        return 1.0, new / old
    if spill is not None:
        new, old = (fm.model_backward(b, hs, shape, fm.AS_BUILT_DQ, fm.H200, bregs, s, (), "block")["ms"] for s in (spill, SPILL_BEFORE[hs]))
        return 1.0, new / old
    fwd = [fm.model_forward(f, hs, shape, fm.H200, fregs, order)["ms"] for order in ("head", "tile")]
    bwd = [fm.model_backward(b, hs, shape, fm.AS_BUILT_DQ, fm.H200, bregs, SPILL_BEFORE[hs], (), order)["ms"] for order in ("head", "block")]
    return fwd[1] / fwd[0], bwd[1] / bwd[0]


def sm90_ratios(name):
    """(forward, backward) the wgmma kernels' modelled time / the mma.sync kernels' as built."""
    p = PRESETS[name]
    shape, hs = (p["B"], p["T"], p["NH"], p["NH"], p["HS"]), p["HS"]
    header = os.path.join(REPO, "llmc", "flash_common.cuh")
    f_now, b_now = fm.read_config(header, [hs])[hs]
    fs, bs = fm.read_sm90_tiles(header, hs), fm.read_sm90_tiles(header, hs, "backward")
    reg = fm.read_ptxas(os.path.join(REPO, "dev", "cuda", "ptxas_report.txt"))
    regs = {k: reg.get((k, hs), (None, 0)) for k in ("flash_forward_kernel", "flash_backward_kernel", "flash_forward_sm90_kernel",
                                                      "flash_backward_sm90_kernel")}
    fwd = (fm.model_forward_sm90(fs, hs, shape, fm.H200, regs["flash_forward_sm90_kernel"][0])["ms"] /
           fm.model_forward(f_now, hs, shape, fm.H200, regs["flash_forward_kernel"][0], "tile")["ms"])
    bregs, bspill = regs["flash_backward_kernel"]
    bwd = (fm.model_backward_sm90(bs, hs, shape, fm.H200, regs["flash_backward_sm90_kernel"][0])["ms"] /
           fm.model_backward(b_now, hs, shape, fm.AS_BUILT_DQ, fm.H200, bregs, bspill or 0, (), "block")["ms"])
    return fwd, bwd


def rows(name, sm90=False):
    """[(change, kernels, calls a step, ms a step before, ms a step after)] for one preset; sm90:
    with the wgmma kernels' rows (--attention flash_sm90)."""
    p, m = PRESETS[name], MEASURED[name]
    N, C, L = p["B"] * p["T"], p["C"], p["L"]
    out = []
    rf, rb = flash_ratios(name)
    out.append(("flash launch orders", "flash forward", L, L * m["flash_fwd"], L * m["flash_fwd"] * rf))
    out.append(("flash launch orders", "flash backward", L, L * m["flash_bwd"], L * m["flash_bwd"] * rb))
    spill = SPILL_SETMAXNREG[p["HS"]]
    rs = flash_ratios(name, spill)[1]
    out.append(("flash backward without spills (setmaxnreg)", "flash backward", L, L * m["flash_bwd"] * rb, L * m["flash_bwd"] * rb * rs))
    rk = flash_ratios(name, spill, kv_regs=True)[1]
    bwd = L * m["flash_bwd"] * rb * rs
    if rk < 1.0:  # HS <= 64 (FlashBwdTile KV_REGS)
        out.append(("flash backward, K and V in registers", "flash backward", L, bwd, bwd * rk))
        bwd *= rk
    sf, sb = flash_ratios(name, softmax=True)
    fwd = L * m["flash_fwd"] * rf
    out.append(("flash softmax in fewer instructions", "flash forward", L, fwd, fwd * sf))
    out.append(("flash softmax in fewer instructions", "flash backward", L, bwd, bwd * sb))
    fwd *= sf
    bwd *= sb
    out.append(("flash forward, a full and an empty barrier per stage", "flash forward", L, fwd, fwd * flash_ratios(name, stages=True)[0]))
    out.append(("flash backward, one barrier a tile", "flash backward", L, bwd, bwd * flash_ratios(name, landed=True)[1]))
    if sm90:  # from the flash rows' last times
        fwd, bwd = out[-2][4], out[-1][4]
        wf, wb = sm90_ratios(name)
        out.append(("flash on wgmma (--attention flash_sm90)", "flash forward", L, fwd, fwd * wf))
        out.append(("flash on wgmma (--attention flash_sm90)", "flash backward", L, bwd, bwd * wb))
    # rmsnorm backward: bytes an element before (row: dout 2, x 4, dinp 4 + 4, bf16 copy 2; dweight: dout 2, x 4)
    calls = 2 * L + 1
    before = m["rms_row"] + m["rms_dw"]
    bytes_before = N * C * 22.0
    bytes_after = N * C * 16.0 + 2 * (-(-N // RMS_SLAB)) * C * 4.0
    out.append(("rmsnorm backward in one pass", "rmsnorm backward + dweight", calls, calls * before, calls * before * bytes_after / bytes_before))
    out.append(("cross-entropy row in shared memory", "cross-entropy backward", 1, m["ce"], m["ce"] * 6.0 / 10.0))
    if m["rowdot"] is not None:
        rate = bytes_before / (before * 1e-3)  # bytes a second the rmsnorm backward reached
        rows_n = p["B"] * p["NH"] * p["T"]
        rd_bytes = 2 * N * p["NH"] * p["HS"] * 2.0 + rows_n * (4 + 8)
        out.append(("flash row dots, 16 bytes a lane", "flash_rowdot", L, L * m["rowdot"], L * rd_bytes / rate * 1e3))
    ns_before = ns_after = 0.0
    for g, (r, c) in p["groups"].items():
        mm, nn = min(r, c), max(r, c)
        t = m["ns"][g]
        ns_before += t
        if mm % (GRAM_BLOCKS * 32) != 0:  # one product (llmc/muon.cuh: m a multiple of 4 x MUON_TILE)
            ns_after += t
            continue
        # an iteration: S = X Xᵀ 2 m²n and S S 2 m³ (blocks: the share below each), P X 2 m²n
        share = gram_share(GRAM_BLOCKS)
        ratio = (2.0 * share * mm * mm * nn + 2.0 * mm * mm * nn + 2.0 * share * mm ** 3) / (4.0 * mm * mm * nn + 2.0 * mm ** 3)
        # the two mirrors (S and P) read and write the blocks above the diagonal blocks, bf16
        mirror = 2 * NS_STEPS * L * (1.0 - share) * mm * mm * 2 * 2 / (MIRROR_TBS * 1e12) * 1e3
        ns_after += t * ratio + mirror
    out.append(("Muon's S and P in column blocks", "Newton–Schulz (4 groups)", 4, ns_before, ns_after))
    before, after = muon_passes(name)
    out.append(("Muon's memory passes in W's orientation", "momentum, norm, X, update", 4, before, after))
    mom_rate = muon_elements(name)[2] * PASS_BYTES["momentum"] / (m["passes"]["momentum"] * 1e-3)
    out.append(("global norm, 16-byte loads", "sum of squares", 1, m["grad_norm"], m["params"] * 4.0 / mom_rate * 1e3))
    out.append(("rmsnorm forward, row in registers", "rmsnorm forward", calls, calls * m["rms_fwd"], calls * N * C * 6.0 / mom_rate * 1e3))
    return out


def muon_elements(name):
    """(tall, wide, all) elements of the matrices Muon updates a step (wide: rows <= cols)."""
    p = PRESETS[name]
    tall = sum(r * c for r, c in p["groups"].values() if r > c) * p["L"]
    wide = sum(r * c for r, c in p["groups"].values() if r <= c) * p["L"]
    return tall, wide, tall + wide


def pass_bytes(name):
    """{kernel: bytes a step} of version 1's memory passes."""
    tall, wide, n = muon_elements(name)
    elems = dict(momentum=n, norm=n, x_tall=tall, x_wide=wide, apply_tall=tall, apply_wide=wide)
    return {k: e * PASS_BYTES[k.split("_")[0]] for k, e in elems.items()}


def muon_passes(name):
    """(before, after) ms a step of Muon's memory passes; a version-1 kernel below the profile's
    top 30 at the rate it reached at llama300m."""
    nbytes, ref_bytes, ref = pass_bytes(name), pass_bytes("llama300m"), MEASURED["llama300m"]["passes"]
    before = sum(t if t is not None else nbytes[k] / ref_bytes[k] * ref[k] for k, t in MEASURED[name]["passes"].items())
    mom = MEASURED[name]["passes"]["momentum"]
    rate = nbytes["momentum"] / (mom * 1e-3)  # bytes a second the momentum reached
    return before, mom + muon_elements(name)[2] * (PASS_BYTES["x"] + PASS_BYTES["apply"]) / rate * 1e3


def main(argv=None):
    ap = cli_util.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", action="store_true", help="CSV rows instead of the table")
    ap.add_argument("--attention", choices=("flash", "flash_sm90"), default="flash",
                    help="train_llama's attention: flash (the default's kernels) or flash_sm90 (the wgmma kernels' rows too)")
    a = ap.parse_args(argv)
    table = []
    for name in PRESETS:
        step = MEASURED[name]["step"]
        total = 0.0
        for change, kernels, calls, before, after in rows(name, a.attention == "flash_sm90"):
            total += before - after
            table.append([name, change, kernels, calls, "%.2f" % before, "%.2f" % after, "%.2f" % (before - after)])
        table.append([name, "step", f"measured {step:.1f} ms", "", "%.1f" % step, "%.1f" % (step - total), "%.2f" % total])
    head = ["model", "change", "kernels", "calls a step", "ms a step before", "ms a step after (modelled)", "saved"]
    if a.csv:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(head)
        w.writerows(table)
    else:
        print(f"Modelled, not measured: the changes since c950ed2 on one H200, --attention {a.attention} (see the header for how each is modelled); "
              "targets: " + ", ".join(f"{k} <= {v:g} ms" for k, v in TARGETS.items()))
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in table:
            print("| " + " | ".join(str(x) for x in r) + " |")
    return table


if __name__ == "__main__":
    cli_util.run(main)
