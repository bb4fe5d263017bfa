#!/usr/bin/env python3
"""Predicted step time of data-parallel train_llama on N GPUs, per gradient communication mode:
an alpha-beta model of the collectives the engine sends, on top of phase times measured on 1 GPU.

    python3 scripts/scaling_model.py --model llama600m --run fp32=out/p1_fp32 --run fp8=out/p1_fp8 \\
        --run geofp8=out/p1_geofp8 --accum 2 --gpus 8,16,32,64 --out scaling_model.png

Inputs
  --run MODE=DIR   a 1-GPU run of train_llama in that -c mode (TRAIN_LLAMA_TEST_NCCL=1 makes it run
                   every collective of the mode on a one-rank communicator), with the per-GPU batch
                   of the run to predict and --bucket-mb 0 (a bucketed step's t_comm_ms is only
                   what the backward did not hide; such a run is refused). From DIR/metrics.jsonl, mean over the steps after
                   --skip-steps: t_forward_ms, t_backward_ms, t_optimizer_ms, and the mode's codec
                   time t_comm_ms - t_nccl_ms (amax, quantize, whiten, decode, unwhiten and the
                   factor refreshes at their rate). DIR/geofp8_layers.txt, when there, names the
                   geometry units. Modes without a run are predicted only with --estimate.
  --estimate       no GPU run: compute from FLOPs at --mfu of --peak-tflops (6·params·tokens plus
                   causal attention), the optimizer at --opt-ms, each codec from the bytes its
                   kernels touch per parameter at --hbm-gbs. Assumptions, printed as such.
  --model          a preset of llmc/llama.h (read from that file), for the parameter count, the
                   units and the geometry units' input widths; --tokens the tokens per GPU per step
                   (--estimate only).
  link             --alpha-us per-hop latency, --busbw-gbs NCCL bus bandwidth (as nccl-tests
                   reports it: algorithm bandwidth times 2(N-1)/N for an all-reduce), --algo ring
                   (latency 2(N-1)α per all-reduce), tree (2·log2(N)·α) or auto (the faster).

The collectives of one step (llmc/gradcomm.cuh; P parameters, U units, G amax groups: U, or one
per 512-element block for fp8block):
  fp32      all-reduce 4P bytes                     bf16     all-reduce 2P
  fp8, fp8block, geofp8, kfac (native sum): all-reduce 4G (MAX of the amaxes), all-reduce P (the
            FP8 SUM), all-reduce 24U (saturation counters); geofp8 adds, every --refresh steps, a
            4·d_in·(r+8)+8 byte all-reduce (the sketch) and a 4·(d_in·r+r+2) byte broadcast (the
            factor) per geometry unit
  every mode: a 4-byte all-reduce (the non-finite flag) before, and the step's loss.
An all-reduce of S bytes on N GPUs takes latency + 2(N-1)/N · S / busbw; a broadcast log2(N)·α + S / busbw.

Work per GPU: by default every N runs the 1-GPU runs' batch (weak scaling); --global-tokens G
keeps the global batch fixed, as the paper does (512 sequences), so fwd and bwd scale by
(G / N) / (the runs' tokens per step) and the micro-steps with them.

Step time without overlap (--bucket-mb 0): fwd + bwd + codec + collectives + opt.
With overlap (bucketed communication on its own stream): the last micro-step's backward
(bwd / --accum) hands out --buckets equal buckets at even intervals; bucket i's codec share and
collectives start when it is ready and the previous bucket's are done; the step waits for the
last one: fwd + (bwd - bwd_last) + max(bwd_last, finish) + refresh + flag + opt. The codec is
assumed not to slow the backward it overlaps (it shares the GPU; a measured overlapped run says by
how much). geofp8's refresh steps go out in buckets too (llmc/gradcomm.cuh), but each unit's
refresh holds up the backward (rank 0 waits for its factorization before the host queues more of
the backward), so the refresh collectives (amortized over --refresh K) are added, never hidden.
kfac's refresh steps go out after the backward, so its overlapped time is ((K - 1) · overlapped +
without overlap) / K: with --refresh 1, no kfac step overlaps.

Prints, for each N: the predicted ms per step of each mode and its gain over fp32 (positive is
faster, as in the paper), with and without overlap; for llama600m at 64 GPUs the paper's own
figures next to it (GIFT abstract: geofp8 7.6% faster than fp32, Euclidean fp8 10.79%). Then the
figure (needs matplotlib). The defaults describe one GH200 per node on InfiniBand NDR (400 Gb/s,
50 GB/s per direction; nccl-tests all_reduce_perf busbw 40-50 GB/s at large sizes on one-GPU NDR
nodes, e.g. https://saturncloud.io/blog/crusoe-nccl-cluster-validation and the NDR figures of
https://github.com/stas00/ml-engineering/blob/master/network/README.md): busbw 45 GB/s; α 4 µs
per hop is an assumption (switch, NIC and NCCL's per-step overhead), not a cited figure.
"""
import argparse
import math
import os
import re
import sys

import cli_util
from cli_util import die, fraction, int_in, nonnegative_float, positive_float

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ["fp32", "bf16", "fp8", "fp8block", "geofp8", "kfac"]
BLOCK = 512            # fp8block's elements per scale (llmc/geofp8.h GEOFP8_BLOCK)
OVERSAMPLE = 8         # sketch columns beyond r (GEOFP8_OVERSAMPLE)
VOCAB, VOCAB_PADDED = 50257, 50304
PAPER_64 = {"geofp8": 7.6, "fp8": 10.79}  # GIFT: step time reduction against fp32, llama600m, 64 GH200
# bytes each mode's kernels read and write per parameter (--estimate): fp32 averages (read, write);
# bf16 encodes and decodes; the FP8 modes read G for the amax, quantize with error feedback (G,
# residual in and out, codes out), decode (codes in, G out)
CODEC_BYTES = {"fp32": 8, "bf16": 12, "fp8": 22, "fp8block": 22, "geofp8": 22, "kfac": 22}


def read_presets(path=os.path.join(REPO, "llmc", "llama.h")):
    """{name: dict(C, L, NH, NKV, FF, T)} from the preset table of llmc/llama.h."""
    pat = re.compile(r'\{"(\w+)",\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+)\}')
    out = {}
    with open(path) as f:
        for m in pat.finditer(f.read()):
            out[m.group(1)] = dict(zip(["C", "L", "NH", "NKV", "FF", "T"], map(int, m.groups()[1:])))
    return out


def model_shapes(p):
    """(parameters, units, {unit kind: d_in}) of a preset, as llmc/llama.h lays them out."""
    C, L, NH, NKV, FF = p["C"], p["L"], p["NH"], p["NKV"], p["FF"]
    HS = C // NH
    qkv, hsnh = (NH + 2 * NKV) * HS, HS * NH
    params = 2 * VOCAB_PADDED * C + L * (2 * C + qkv * C + C * hsnh + 2 * FF * C + FF * C) + C
    return params, 6 * L + 3, {"qkv": C, "proj": hsnh, "fc1": C, "fc2": FF, "lm_head": C}


def read_run(d, skip):
    """Mean phase times (ms) of a 1-GPU run, and its geometry units (names) if listed."""
    path = os.path.join(d, "metrics.jsonl")
    if not os.path.isfile(path):
        die(f"--run: {path} not found (expected a train_llama run directory with metrics.jsonl)")
    keys = ["t_forward_ms", "t_backward_ms", "t_optimizer_ms", "t_comm_ms", "t_nccl_ms"]
    acc = {k: [] for k in keys}
    tokens = 0.0
    for k, r in cli_util.read_jsonl(path, "--run"):
        step = r.get("step", 0)
        if not (cli_util.finite_number(step) and step >= 0):
            die(f"--run: {path} line {k}: \"step\" is {cli_util.describe(step)}, expected a step number >= 0")
        if "train_loss" not in r or r.get("skipped") or step <= skip:
            continue
        if not all(cli_util.is_number(r.get(x)) for x in keys):
            die(f"--run: {path} step {step} lacks the phase times {keys} (a train_llama run, not train_llama_cpu)")
        bad = [x for x in keys if not (cli_util.finite_number(r[x]) and 0 <= r[x] < 1e12)]
        if bad:
            die(f"--run: {path} step {step}: \"{bad[0]}\" is {r[bad[0]]!r}, expected milliseconds in [0, 1e12)")
        if r.get("comm_buckets_overlapped", 0):
            die(f"--run: {path} step {step} was communicated in buckets during the backward "
                f"(comm_buckets_overlapped {cli_util.describe(r['comm_buckets_overlapped'])}): its phase times overlap; "
                f"calibrate with --bucket-mb 0")
        for x in keys:
            acc[x].append(float(r[x]))
        t = r.get("tokens")
        if t is not None and not (cli_util.finite_number(t) and t >= 0):
            die(f"--run: {path} step {step}: \"tokens\" is {cli_util.describe(t)}, expected a count >= 0")
        if t is not None and step > 0:
            tokens = t / step
    if not acc["t_forward_ms"]:
        die(f"--run: {path} has no step after --skip-steps {skip}")
    m = {x: sum(v) / len(v) for x, v in acc.items()}
    if m["t_forward_ms"] + m["t_backward_ms"] <= 0:
        die(f"--run: {path}: the forward and backward take 0 ms on every step, expected measured times")
    layers = []
    lp = os.path.join(d, "geofp8_layers.txt")
    if os.path.isfile(lp):
        layers = [l.split()[0] for l in cli_util.read_text(lp, "--run").splitlines() if l.strip() and not l.startswith("#")]
    return {"fwd": m["t_forward_ms"], "bwd": m["t_backward_ms"], "opt": m["t_optimizer_ms"],
            "codec": max(0.0, m["t_comm_ms"] - m["t_nccl_ms"]), "layers": layers, "tokens": tokens}


def allreduce_ms(S, N, alpha_us, busbw, algo):
    """ring: 2(N-1) hops of latency; tree: 2·log2(N); auto: the faster of the two (NCCL's tuner
    picks per message size); the bandwidth term is the bus bandwidth's definition for both."""
    if N <= 1:
        return 0.0
    hops = {"ring": 2 * (N - 1), "tree": 2 * math.ceil(math.log2(N))}
    h = hops[algo] if algo in hops else min(hops.values())
    return h * alpha_us * 1e-3 + 2.0 * (N - 1) / N * S / (busbw * 1e9) * 1e3


def broadcast_ms(S, N, alpha_us, busbw):
    return 0.0 if N <= 1 else math.ceil(math.log2(N)) * alpha_us * 1e-3 + S / (busbw * 1e9) * 1e3


def collectives(mode, P, U, geo_din, r, refresh):
    """The step's collectives: [(kind, bytes, per_bucket)]; per_bucket: split over buckets when
    overlapped (the gradient payload and its amaxes), else sent once per step (amortized refreshes)."""
    if mode == "fp32":
        return [("allreduce", 4.0 * P, True)]
    if mode == "bf16":
        return [("allreduce", 2.0 * P, True)]
    G = U if mode != "fp8block" else math.ceil(P / BLOCK) + U
    out = [("allreduce", 4.0 * G, True), ("allreduce", float(P), True), ("allreduce", 24.0 * U, True)]
    if mode == "geofp8":
        for d in geo_din:  # amortized over the refresh interval
            k = min(r + OVERSAMPLE, d)
            out.append(("allreduce", (4.0 * d * k + 8) / refresh, False))
            out.append(("broadcast", 4.0 * (d * r + r + 2) / refresh, False))
    return out


def comm_ms(colls, N, a):
    t = 0.0
    for kind, S, _ in colls:
        t += allreduce_ms(S, N, a.alpha_us, a.busbw_gbs, a.algo) if kind == "allreduce" else broadcast_ms(S, N, a.alpha_us, a.busbw_gbs)
    return t


def per_gpu_work(ph, N, a):
    """(scale of fwd and bwd, micro-steps) on N GPUs: the run's own batch per GPU, or with
    --global-tokens G the share G / N of it (fixed global batch, as the paper's Figure 5)."""
    if not a.global_tokens:
        return 1.0, a.accum
    if not ph.get("tokens"):
        die("--global-tokens: a --run's metrics.jsonl has no \"tokens\" field to scale from")
    f = a.global_tokens / N / ph["tokens"]
    if not math.isfinite(a.accum * f):
        die(f"--global-tokens {a.global_tokens:g}: {f:g} times the runs' {ph['tokens']:g} tokens per step on {N} GPUs is out of range")
    return f, max(1, round(a.accum * f))


def step_ms(ph, colls, N, a, overlap):
    """Predicted ms per step of one mode on N GPUs (ph: fwd, bwd, codec, opt in ms)."""
    flag = allreduce_ms(4.0, N, a.alpha_us, a.busbw_gbs, a.algo)
    f, accum = per_gpu_work(ph, N, a)
    fwd, bwd = ph["fwd"] * f, ph["bwd"] * f
    if not overlap:
        return fwd + bwd + ph["codec"] + comm_ms(colls, N, a) + flag + ph["opt"]
    nb = a.buckets
    bwd_last = bwd / accum
    per_bucket = [(k, S / nb, True) for k, S, split in colls if split]
    once = [c for c in colls if not c[2]]
    c_bucket = ph["codec"] / nb + comm_ms(per_bucket, N, a)
    finish = 0.0
    for i in range(1, nb + 1):
        finish = max(bwd_last * i / nb, finish) + c_bucket
    return fwd + (bwd - bwd_last) + max(bwd_last, finish) + comm_ms(once, N, a) + flag + ph["opt"]


def estimate_phases(mode, P, preset, a):
    """--estimate: phase times (ms) from FLOPs and bytes (assumptions, not measurements)."""
    C, L, T = preset["C"], preset["L"], min(a.seq or preset["T"], preset["T"])
    flops = 6.0 * P * a.tokens + 6.0 * L * C * T * a.tokens  # causal attention: 2·T·C per layer and token forward, 3x with the backward
    compute = flops / (a.mfu * a.peak_tflops * 1e12) * 1e3
    codec = CODEC_BYTES[mode] * P / (a.hbm_gbs * 1e9) * 1e3
    return {"fwd": compute / 3, "bwd": 2 * compute / 3, "opt": a.opt_ms, "codec": codec, "tokens": a.tokens}


def geo_input_widths(layers, widths, default_units):
    names = layers or default_units
    out = []
    for n in names:
        kind = n.split(".")[-1]
        if kind not in widths:
            die(f"geometry unit '{n}': expected layers.<l>.qkv|proj|fc1|fc2 or lm_head")
        out.append(widths[kind])
    return out


def gpu_list(s):
    """--gpus: a comma list of GPU counts."""
    try:
        gpus = [cli_util.parse_int(x, 1, MAX_GPUS) for x in s.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma list of GPU counts in [1, {MAX_GPUS}], found '{s}'")
    return gpus


MAX_GPUS = 1 << 20
MAX_BUCKETS = 10000   # the overlap model steps through the buckets one by one


def main(argv=None):
    ap = cli_util.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="llama600m", help="a preset of llmc/llama.h")
    ap.add_argument("--run", action="append", default=[], metavar="MODE=DIR", help="a 1-GPU run in that -c mode (repeat; default: none)")
    ap.add_argument("--estimate", action="store_true", help="no GPU run: compute the phase times from FLOPs and bytes")
    ap.add_argument("--skip-steps", type=cli_util.nonnegative_int, default=2, help="warm-up steps of each run left out of the means")
    ap.add_argument("--gpus", type=gpu_list, default="8,16,32,64", help="comma list of GPU counts to predict")
    ap.add_argument("--alpha-us", type=nonnegative_float, default=4.0, help="per-hop latency in microseconds")
    ap.add_argument("--busbw-gbs", type=positive_float, default=45.0, help="NCCL bus bandwidth in GB/s (as nccl-tests reports it)")
    ap.add_argument("--algo", choices=["ring", "tree", "auto"], default="auto", help="all-reduce latency model (auto: the faster)")
    ap.add_argument("--accum", type=cli_util.positive_int, default=1, help="micro-steps per step of the runs (only the last one's backward overlaps)")
    ap.add_argument("--global-tokens", type=nonnegative_float, default=0.0,
                    help="fixed global batch in tokens: each GPU count gets its share of the runs' work (0: the runs' batch per GPU)")
    ap.add_argument("--buckets", type=int_in(0, MAX_BUCKETS), default=0, help="buckets of the overlapped path (0: 25 MB of fp32 each)")
    ap.add_argument("--rank", type=int_in(1, 4096), default=32, help="geofp8 low rank r (GEOFP8_RANK_MAX 4096)")
    ap.add_argument("--refresh", type=cli_util.positive_int, default=50, help="geofp8 refresh interval")
    ap.add_argument("--geo-units", default="", help="comma list of geometry units (default: the run's geofp8_layers.txt, else every fc2)")
    ap.add_argument("--tokens", type=int_in(1, 2 ** 53), default=16384, help="tokens per GPU per step (--estimate; the paper: 512·2048 / 64)")
    ap.add_argument("--seq", type=cli_util.nonnegative_int, default=0, help="sequence length (--estimate; default the preset's)")
    ap.add_argument("--mfu", type=fraction, default=0.4, help="model FLOPs utilization in (0, 1]")
    ap.add_argument("--peak-tflops", type=positive_float, default=989.0, help="bf16 dense peak (H100/GH200: 989)")
    ap.add_argument("--hbm-gbs", type=positive_float, default=4000.0, help="GH200 HBM3: about 4000 GB/s")
    ap.add_argument("--opt-ms", type=nonnegative_float, default=20.0, help="optimizer time per step in ms (--estimate)")
    ap.add_argument("--out", type=cli_util.figure_file, help="figure of the predicted gains (.png, .pdf or .svg; needs matplotlib)")
    a = ap.parse_args(argv)

    presets = read_presets()
    if a.model not in presets:
        die(f"--model: expected one of {', '.join(presets)}, found '{a.model}'")
    gpus = a.gpus
    preset = presets[a.model]
    P, U, widths = model_shapes(preset)
    if a.buckets == 0:
        a.buckets = max(1, math.ceil(4.0 * P / 25e6))
    phases = {}
    for spec in a.run:
        mode, _, d = spec.partition("=")
        if mode not in MODES or not d:
            die(f"--run: expected MODE=DIR with MODE one of {', '.join(MODES)}, found '{spec}'")
        phases[mode] = read_run(d, a.skip_steps)
    if not phases and not a.estimate:
        die("give --run MODE=DIR (1-GPU runs; fp32 at least) or --estimate")
    if a.estimate:
        for m in MODES:
            phases.setdefault(m, estimate_phases(m, P, preset, a))
    if "fp32" not in phases:
        die("--run fp32=DIR is needed: the gains are against fp32")
    layers = [x for x in a.geo_units.split(",") if x] or phases.get("geofp8", {}).get("layers", [])
    geo_din = geo_input_widths(layers, widths, [f"layers.{l}.fc2" for l in range(preset["L"])])
    modes = [m for m in MODES if m in phases]

    src = "estimated (--estimate)" if a.estimate and not a.run else "1-GPU runs"
    print(f"{a.model}: {P / 1e6:.1f}M parameters, {U} units, {len(geo_din)} geometry units; phases from {src}; "
          f"link: busbw {a.busbw_gbs:g} GB/s, alpha {a.alpha_us:g} us, {a.algo}; overlap: {a.buckets} buckets, accum {a.accum}; "
          + (f"fixed global batch {a.global_tokens:g} tokens" if a.global_tokens else "the runs' batch per GPU at every N"))
    for m in modes:
        ph = phases[m]
        print(f"  {m:<8} fwd {ph['fwd']:.1f} bwd {ph['bwd']:.1f} codec {ph['codec']:.2f} opt {ph['opt']:.1f} ms")
    print()
    head = "| GPUs | " + " | ".join(f"{m} ms (gain)" for m in modes) + " | overlapped: " + " | ".join(modes) + " |"
    print(head)
    print("|" + "---|" * (1 + 2 * len(modes)))
    table = {}
    for N in gpus:
        row = []
        for ov in (False, True):
            base = step_ms(phases["fp32"], collectives("fp32", P, U, geo_din, a.rank, a.refresh), N, a, ov)
            for m in modes:
                t = step_ms(phases[m], collectives(m, P, U, geo_din, a.rank, a.refresh), N, a, ov)
                if ov and m == "kfac":  # a refresh step goes out after the backward, not in buckets
                    t_after = step_ms(phases[m], collectives(m, P, U, geo_din, a.rank, a.refresh), N, a, False)
                    t = ((a.refresh - 1) * t + t_after) / a.refresh
                gain = 100.0 * (base - t) / base if base > 0 else math.nan
                table[(N, m, ov)] = (t, gain)
                row.append(f"{t:.1f} ({gain:+.1f}%)" if m != "fp32" else f"{t:.1f}")
        print(f"| {N} | " + " | ".join(row) + " |", flush=True)
    if a.model == "llama600m" and 64 in gpus:
        print()
        for m, paper in PAPER_64.items():
            if (64, m, False) in table:
                print(f"llama600m at 64 GPUs, {m}: predicted {table[(64, m, False)][1]:+.2f}% (overlapped {table[(64, m, True)][1]:+.2f}%); "
                      f"the paper measured {paper:+.2f}%")
    if a.out:
        try:
            import matplotlib
        except ImportError:
            die(f"--out {a.out} needs matplotlib (pip install matplotlib); the table above does not")
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 4))
        for m in modes:
            if m == "fp32":
                continue
            for ov, ls in ((False, "-"), (True, "--")):
                ax.plot(gpus, [table[(N, m, ov)][1] for N in gpus], ls, marker="o", label=f"{m}{' overlapped' if ov else ''}")
        if a.model == "llama600m":
            for m, paper in PAPER_64.items():
                ax.plot([64], [paper], "k*", markersize=9)
                ax.annotate(f"paper {m}", (64, paper), textcoords="offset points", xytext=(-60, 4), fontsize=7)
        ax.axhline(0, color="gray", lw=0.5)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs")
        ax.set_ylabel("step time gain over fp32 (%)")
        ax.set_title(f"{a.model}: predicted ({src})")
        ax.legend(fontsize=7)
        fig.tight_layout()
        with cli_util.atomic_path(a.out) as tmp:
            fig.savefig(tmp, dpi=120, format=cli_util.figure_format(a.out))
        print(f"wrote {a.out}")
    return table


if __name__ == "__main__":
    cli_util.run(main)
