#!/usr/bin/env python3
"""study.py — does a gradient-communication mode train better than Euclidean FP8? A grid of runs
with N virtual ranks, every mode paired by seed with fp32, then a table of paired statistics and
a figure.

The grid: modes x seeds x N (--ranks) x lr x steps. Every cell (N, lr, steps) also runs fp32 for
each seed: the same initialization, data and global batch, so that only the communication
differs. Model (--model): the small test model by default (tiny's layers, the bundled KJV text
renumbered to 1000 tokens; test/testlib.py --small-model), or a preset on --train-data /
--val-data (default: the bundled KJV text, GPT-2 tokens). A run: N logical ranks (--virtual-ranks N)
of one micro-batch of B x T tokens each (-b 1, -t --seq-len, default 32), so N B T tokens per
step; lr with 5 warmup steps and the cosine schedule; the val loss at the last step
(-m max(1, 4096 / (N B T))); the fidelity figures every 5 steps (--fidelity-every 5, or the run's
steps if fewer; --fidelity-window 10).

Engines (--engine): cpu runs train_llama_cpu, its N logical ranks in --procs processes, several
runs side by side; gpu runs train_llama, one process on one GPU holding all N logical ranks, one
run at a time by default (the same numerics as N GPUs; the N - 1 other ranks' gradients and
error-feedback state must fit in the GPU's memory, which the trainer checks).

  python3 scripts/study.py                                  the default grid (below), into out/study
  python3 scripts/study.py --ranks 64 --steps 50 --seeds 1,2,3 --jobs 2
  python3 scripts/study.py --engine gpu --model d12 --seq-len 1024 --ranks 32 --train-data 'data/owt/train_*.bin' \\
      --val-data 'data/owt/val_*.bin' --out out/study_d12
  python3 scripts/study.py --report-only                    the table and figure of what has finished

--modes "NAME|FLAGS[|LRS];..." (or a file with one such line per mode) replaces the mode list;
FLAGS are the trainer's (-c, --fp8-format, --fp8-ef, --geofp8-*, --fp8-reduce), LRS optionally
restricts the mode to some of the --lr values (comma list; in the default list, a mode whose
LRS holds none of the --lr values is left out). The default list settles the cases
where Euclidean FP8 measurably hurts (docs/gradient_communication.md): at lr 3e-3 in E5M2 and at
1e-2 in E4M3, plain fp8, fp8 with error feedback on every unit (--fp8-ef 1, the control),
geofp8 on every linear unit (p auto, refresh 1) without and with --fp8-ef 1 on the rest (lm_head,
the norms, the embedding), and at 3e-3 the two-phase E5M2 sum (the mechanism: no rounding at
every combine); 8 seeds, 256 ranks, 200 steps. "Every linear unit" is every layer's qkv, proj,
fc1 and fc2 of the --model.

The table, one row per (N, lr, steps, mode), over the seeds where the mode and fp32 finished:
  val loss         mean ± std
  vs fp32          the paired difference of the val loss in % of fp32's, mean ± std, and
                   t = mean / (std / sqrt(n)) (beyond 2 or so: beyond seed noise; the 95% point of
                   Student's t is printed with the table)
  recovered        1 - d / d_fp8 per seed, d_fp8 the paired difference of the plain fp8 mode of the
                   same format and lr (a mode "-c fp8 [--fp8-format F]"): the share of fp8's gap
                   the mode removes, mean ± standard error over the seeds where fp8's gap is
                   positive (their count if not all)
  grad err / fp8   the whole gradient's RelL2 (mean of fidelity_rel_l2 over the run) over plain
                   fp8's on the same seed, mean ± std
  geo win / fp8+EF the geometry units' windowed RelL2 over plain fp8 with its own error feedback
                   on the same units (window_rel_l2_geo / window_rel_l2_geo_fp8ef, mean over
                   the run's windows), mean ± std; geofp8 and kfac only
  slope            the regression slope of the communicated gradient onto the exact one
                   (fidelity_slope, mean over the run), mean ± std: below 1, the sum shrinks it
The figure (--figure, default OUT/study.png): per cell, the paired difference vs fp32 with its
standard error, and the gradient error ratio.

Resumable: a run whose metrics.jsonl holds its last step's val loss is not run again (a run
cut short starts afresh). Runs go side by side, --jobs at a time, each in --procs processes of
one thread (the core budget is jobs x procs); a line per finished run with the elapsed time and
an ETA. Every argument is checked first (one "error:" line, exit 1); a run that fails is
reported and the others go on (exit 1 at the end).
"""
import json
import math
import os
import shlex
import subprocess
import sys
import time

import glob

import cli_util
from cli_util import die

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# --model: layers and longest sequence (llmc/llama.h's presets; "small" is tiny's layers)
MODELS = {"small": (4, 256), "tiny": (4, 256), "d12": (12, 1024), "llama300m": (16, 4096), "llama600m": (16, 2048)}
# the trainer's default data (llmc/train_config.h), for a preset without --train-data / --val-data
DEFAULT_DATA = ("data/kjv/kjv_train_*.bin", "data/kjv/kjv_val_*.bin")
ENGINES = {"cpu": "train_llama_cpu", "gpu": "train_llama"}


def default_modes(layers):
    """The default mode list (the docstring), geofp8 on every linear unit of a model of `layers` layers."""
    linear = ",".join(f"layers.{l}.{u}" for l in range(layers) for u in ("qkv", "proj", "fc1", "fc2"))
    geo = f"--geofp8-power auto --geofp8-refresh 1 --geofp8-layers {linear}"
    return [
        "fp8 e5m2|-c fp8 --fp8-format e5m2|3e-3",
        "fp8+EF e5m2|-c fp8 --fp8-format e5m2 --fp8-ef 1|3e-3",
        f"geofp8 e5m2|-c geofp8 --fp8-format e5m2 {geo}|3e-3",
        f"geofp8+EF e5m2|-c geofp8 --fp8-format e5m2 {geo} --fp8-ef 1|3e-3",
        "fp8 twophase e5m2|-c fp8 --fp8-format e5m2 --fp8-reduce twophase|3e-3",
        "fp8 e4m3|-c fp8|1e-2",
        "fp8+EF e4m3|-c fp8 --fp8-ef 1|1e-2",
        f"geofp8 e4m3|-c geofp8 {geo}|1e-2",
        f"geofp8+EF e4m3|-c geofp8 {geo} --fp8-ef 1|1e-2",
    ]


# flags the grid sets itself, refused in a mode's FLAGS
GRID_FLAGS = {"-b", "--batch-size", "-t", "--seq-len", "-d", "--total-batch", "-x", "--steps", "-l", "--lr", "-u", "--warmup",
              "--seed", "-o", "--output-dir", "--virtual-ranks", "-v", "--val-every", "-m", "--val-batches", "-e", "--model", "-i",
              "--train-data", "-j", "--val-data", "--vocab-size", "-y", "--resume", "--overwrite", "-n", "--checkpoint-every"}
COMMS = ("bf16", "fp8", "fp8block", "geofp8", "kfac")
B, WARMUP, VAL_TOKENS, FID_EVERY, FID_WINDOW = 1, 5, 4096, 5, 10


def comma_list(kind, what):
    """argparse type: a comma list of kind(item), each item checked, no repeats."""
    def parse(s):
        items = s.split(",")
        if any(x.strip() == "" for x in items):
            raise cli_util.argparse.ArgumentTypeError(f"expected a comma list of {what}, found '{s}'")
        out = [kind(x.strip()) for x in items]
        if len(set(out)) != len(out):
            raise cli_util.argparse.ArgumentTypeError(f"expected a comma list of {what} without repeats, found '{s}'")
        return out
    return parse


def lr_value(s):
    x = cli_util.positive_float(s)
    if x > 10:
        raise cli_util.argparse.ArgumentTypeError(f"expected a learning rate in (0, 10], found {s}")
    return x


class Mode:
    def __init__(self, name, flags, lrs):
        self.name, self.flags, self.lrs = name, flags, lrs
        toks = flags
        self.comm = toks[toks.index("-c") + 1]
        self.fmt = toks[toks.index("--fp8-format") + 1] if "--fp8-format" in toks else "e4m3"
        plain = [t for t in toks if t not in ("-c", "fp8", "--fp8-format", "e4m3", "e5m2")]
        self.is_plain_fp8 = self.comm == "fp8" and not plain
        self.tag = "".join(c if c.isalnum() or c in ".-" else "_" for c in name)


def parse_modes(spec, lr_grid, strict=True):
    """Modes from "NAME|FLAGS[|LRS];..." or a file of such lines; one error line on a bad one.
    strict False (the default list): an LRS value outside --lr is dropped, and a mode left with
    none is left out."""
    if os.path.isfile(spec):
        entries = [l.strip() for l in cli_util.read_text(spec, "--modes").splitlines() if l.strip() and not l.strip().startswith("#")]
        where = f"--modes: file '{spec}'"
    else:
        entries = [e.strip() for e in spec.split(";")]
        where = "--modes"
    modes = []
    for e in entries:
        parts = e.split("|")
        if len(parts) not in (2, 3) or not parts[0].strip() or not parts[1].strip():
            die(f"{where}: expected entries NAME|FLAGS or NAME|FLAGS|LRS (e.g. 'fp8+EF|-c fp8 --fp8-ef 1|3e-3'), found '{e}'")
        name = parts[0].strip()
        try:
            flags = shlex.split(parts[1])
        except ValueError as err:
            die(f"{where}: mode '{name}': cannot split its flags '{parts[1]}' ({err})")
        if "-c" not in flags or flags.index("-c") + 1 >= len(flags) or flags[flags.index("-c") + 1] not in COMMS:
            die(f"{where}: mode '{name}': expected -c with one of {{{','.join(COMMS)}}} in its flags (fp32 is the baseline every cell runs), "
                f"found '{parts[1].strip()}'")
        own = sorted({f.split("=")[0] for f in flags if f.split("=")[0] in GRID_FLAGS})
        if own:
            die(f"{where}: mode '{name}': {', '.join(own)} is set by the grid (--ranks, --lr, --steps, --seeds), not by a mode")
        lrs = lr_grid
        if len(parts) == 3:
            try:
                lrs = comma_list(lr_value, "learning rates")(parts[2])
            except cli_util.argparse.ArgumentTypeError as err:
                die(f"{where}: mode '{name}': LRS: {err}")
            missing = [x for x in lrs if x not in lr_grid]
            if not strict:
                lrs = [x for x in lrs if x in lr_grid]
                if not lrs:
                    continue
            elif missing:
                die(f"{where}: mode '{name}': lr {missing[0]:g} is not in --lr ({','.join(f'{x:g}' for x in lr_grid)})")
        if any(m.name == name for m in modes):
            die(f"{where}: two modes named '{name}'")
        modes.append(Mode(name, flags, lrs))
    if not modes:
        die(f"{where}: no modes")
    return modes


def cell_dir(out, n, lr, steps):
    return os.path.join(out, f"n{n}_lr{lr:g}_x{steps}")


def finished(run_dir, steps):
    """The run's final val loss, or None when it has not finished."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        return None
    val = None
    with open(path, errors="replace") as f:
        for line in f:
            if f'"step": {steps},' in line and "val_loss" in line:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if r.get("step") == steps and cli_util.is_number(r.get("val_loss")):
                    val = float(r["val_loss"])
    return val


def run_figures(run_dir, steps):
    """{val, rel, slope, win} of a finished run (NaN where not logged)."""
    rows = [r for _, r in cli_util.read_jsonl(os.path.join(run_dir, "metrics.jsonl"), "metrics.jsonl")]
    def mean(vals):
        vals = [float(v) for v in vals if cli_util.is_number(v) and math.isfinite(v)]
        return sum(vals) / len(vals) if vals else math.nan
    return {
        "val": finished(run_dir, steps),
        "rel": mean(r.get("fidelity_rel_l2") for r in rows if "train_loss" in r),
        "slope": mean(r.get("fidelity_slope") for r in rows if "train_loss" in r),
        "win": mean(r["window_rel_l2_geo"] / r["window_rel_l2_geo_fp8ef"] for r in rows
                    if cli_util.is_number(r.get("window_rel_l2_geo")) and cli_util.is_number(r.get("window_rel_l2_geo_fp8ef"))
                    and r["window_rel_l2_geo_fp8ef"] > 0),
    }


def command(args, model, flags, n, lr, steps, seed, run_dir):
    """The trainer's command line of one run; `model` is the model and data flags."""
    T = args.seq_len
    cmd = [args.bin] + model + ["-b", str(B), "-t", str(T), "-d", str(n * B * T), "-x", str(steps), "-l", f"{lr:g}", "-u", str(min(WARMUP, steps)),
                                "-v", str(steps), "-m", str(max(1, VAL_TOKENS // (n * B * T))), "-s", "0", "-n", "-1", "--seed", str(seed)]
    if n != args.procs:
        cmd += ["--virtual-ranks", str(n)]
    if flags != ["-c", "fp32"]:
        cmd += ["--fidelity-every", str(min(FID_EVERY, steps)), "--fidelity-window", str(FID_WINDOW)]
    cmd += flags + ["-o", run_dir, "--overwrite", "1"]
    if args.procs > 1:
        cmd = ["mpirun"] + (["--allow-run-as-root"] if os.geteuid() == 0 else []) + ["--oversubscribe", "-np", str(args.procs)] + cmd
    return cmd


def mean_std(xs):
    n = len(xs)
    if n == 0:
        return math.nan, math.nan
    m = sum(xs) / n
    return m, (math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1)) if n > 1 else math.nan)


T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23, 15: 2.13, 20: 2.09, 30: 2.04}


def t95(df):
    """Student's t, two-sided 95%, for df degrees of freedom (the next tabulated df below)."""
    return T95[max(k for k in T95 if k <= df)] if df >= 1 else math.nan


def fmt_pm(m, s, digits=3, pct=False):
    if math.isnan(m):
        return "—"
    unit = "%" if pct else ""
    return f"{m:+.{digits}f}{unit} ± {s:.{digits}f}{unit}" if pct else (f"{m:.{digits}f} ± {s:.{digits}f}" if not math.isnan(s) else f"{m:.{digits}f}")


def report(args, modes, cells, seeds):
    """Prints the table; returns the figure's data [(cell title, [(mode, d mean, d se, ratio mean)])]."""
    fig = []
    what = "the small test model" if args.model == "small" else f"{args.model}"
    print(f"\nstudy: {what} on {ENGINES[args.engine]}, B={B} T={args.seq_len} per logical rank, {len(seeds)} seeds ({','.join(map(str, seeds))}); "
          f"paired by seed with fp32 of the same cell; t95 = Student's 95% point for n - 1 degrees of freedom\n")
    for n, lr, steps in cells:
        cd = cell_dir(args.out, n, lr, steps)
        here = [m for m in modes if lr in m.lrs]
        base = {s: run_figures(os.path.join(cd, f"fp32_s{s}"), steps) for s in seeds if finished(os.path.join(cd, f"fp32_s{s}"), steps) is not None}
        figs = {}
        for m in here:
            figs[m.name] = {s: run_figures(os.path.join(cd, f"{m.tag}_s{s}"), steps) for s in seeds
                            if finished(os.path.join(cd, f"{m.tag}_s{s}"), steps) is not None}
        print(f"### N = {n}, lr {lr:g}, {steps} steps ({n * B * args.seq_len} tokens per step)\n")
        print("| mode | seeds | val loss | vs fp32 (paired) | t (t95) | recovered of fp8's gap | grad err / fp8 | geo win / fp8+EF | slope |")
        print("|---|---|---|---|---|---|---|---|---|")
        vm, vs = mean_std([f["val"] for f in base.values()])
        print(f"| fp32 | {len(base)} | {fmt_pm(vm, vs, 5)} | — | — | — | — | — | — |")
        rows = []
        for m in here:
            got = figs[m.name]
            paired = [s for s in seeds if s in got and s in base]
            vals = [got[s]["val"] for s in paired]
            d = [100.0 * (got[s]["val"] - base[s]["val"]) / base[s]["val"] for s in paired]
            dm, ds = mean_std(d)
            tv = dm / (ds / math.sqrt(len(d))) if len(d) > 1 and ds > 0 else math.nan
            fp8 = next((x for x in here if x.is_plain_fp8 and x.fmt == m.fmt), None)
            share, ratio = [], []
            if fp8 is not None and fp8 is not m:
                g8 = figs[fp8.name]
                for s in paired:
                    if s not in g8:
                        continue
                    d8 = g8[s]["val"] - base[s]["val"]
                    if d8 > 0:
                        share.append(1.0 - (got[s]["val"] - base[s]["val"]) / d8)
                    if g8[s]["rel"] > 0:
                        ratio.append(got[s]["rel"] / g8[s]["rel"])
            sm, ss = mean_std(share)
            se = ss / math.sqrt(len(share)) if len(share) > 1 else math.nan
            share_s = "—" if not share else (f"{sm:+.2f} ± {se:.2f}" if not math.isnan(se) else f"{sm:+.2f}") + \
                ("" if len(share) == len(paired) else f" ({len(share)} of {len(paired)} seeds)")
            rm, rs = mean_std(ratio)
            wm, ws = mean_std([got[s]["win"] for s in paired if not math.isnan(got[s]["win"])])
            pm_, ps_ = mean_std([got[s]["slope"] for s in paired if not math.isnan(got[s]["slope"])])
            vmm, vss = mean_std(vals)
            t_s = "—" if math.isnan(tv) else f"{tv:+.2f} ({t95(len(d) - 1):.2f})"
            print(f"| {m.name} | {len(paired)} | {fmt_pm(vmm, vss, 5)} | {fmt_pm(dm, ds, 3, True)} | {t_s} | {share_s} | "
                  f"{fmt_pm(rm, rs, 3) if ratio else ('1' if m is fp8 and paired else '—')} | {fmt_pm(wm, ws, 3)} | {fmt_pm(pm_, ps_, 4)} |")
            rows.append((m.name, dm, ds / math.sqrt(len(d)) if len(d) > 1 else 0.0, rm if ratio else (1.0 if m is fp8 else math.nan)))
        print()
        fig.append((f"N {n}, lr {lr:g}, {steps} steps", rows))
    return fig


def write_figure(path, fig):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        cli_util.warn(f"matplotlib is not installed: no figure ({path}); the table above has the numbers")
        return
    fig = [c for c in fig if c[1]]
    if not fig:
        cli_util.warn(f"no finished pairs yet: no figure ({path})")
        return
    f, axes = plt.subplots(len(fig), 2, figsize=(11, 1.2 + 0.45 * max(len(c[1]) for c in fig) * len(fig)), squeeze=False)
    for row, (title, rows) in zip(axes, fig):
        names = [r[0] for r in rows][::-1]
        y = range(len(names))
        row[0].barh(list(y), [r[1] for r in rows][::-1], xerr=[r[2] for r in rows][::-1], color="tab:blue", alpha=0.7)
        row[0].axvline(0, color="k", lw=0.8)
        row[0].set_yticks(list(y), names)
        row[0].set_xlabel("val loss vs fp32, paired (%), ± s.e.")
        row[0].set_title(title, fontsize=9)
        row[1].barh(list(y), [r[3] for r in rows][::-1], color="tab:orange", alpha=0.7)
        row[1].axvline(1, color="k", lw=0.8)
        row[1].set_yticks(list(y), [""] * len(names))
        row[1].set_xlabel("whole-gradient RelL2 / plain fp8's (same seed)")
    f.tight_layout()
    with cli_util.atomic_path(path) as tmp:
        f.savefig(tmp, format=cli_util.figure_format(path), dpi=110)
    print(f"figure: {path}")


def main():
    ap = cli_util.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=cli_util.HelpFormatter)
    ap.add_argument("--modes", default=None, help="'NAME|FLAGS[|LRS];...' or a file with one per line (default: the list in the docstring)")
    ap.add_argument("--seeds", type=comma_list(lambda s: cli_util.int_in(0, 2 ** 63 - 1)(s), "seeds"), default=list(range(1, 9)), help="comma list (default: 1..8)")
    ap.add_argument("--ranks", type=comma_list(cli_util.int_in(1, 4096), "rank counts N in [1, 4096]"), default=[256], help="comma list of N (default: 256)")
    ap.add_argument("--lr", type=comma_list(lr_value, "learning rates"), default=[3e-3, 1e-2], help="comma list (default: 3e-3,1e-2)")
    ap.add_argument("--steps", type=comma_list(cli_util.int_in(1, 10 ** 7), "step counts"), default=[200], help="comma list (default: 200)")
    ap.add_argument("--engine", choices=sorted(ENGINES), default="cpu", help="cpu: train_llama_cpu; gpu: train_llama, all N ranks on one GPU")
    ap.add_argument("--model", choices=list(MODELS), default="small", help="the small test model or a preset")
    ap.add_argument("--seq-len", type=cli_util.int_in(1, 4096), default=32, help="T of each rank's micro-batch (at most the model's)")
    ap.add_argument("--train-data", default=None, help=f"glob of train shards, with a preset (default: {DEFAULT_DATA[0]})")
    ap.add_argument("--val-data", default=None, help=f"glob of val shards, with a preset (default: {DEFAULT_DATA[1]})")
    ap.add_argument("--jobs", type=cli_util.int_in(1, 1024), default=None, help="runs side by side (default: cores / --procs; gpu: 1)")
    ap.add_argument("--procs", type=cli_util.int_in(1, 1024), default=1, help="processes per run, cpu only (each N a multiple of it; > 1 runs under mpirun)")
    ap.add_argument("--out", default="out/study", help="directory of the runs")
    ap.add_argument("--figure", type=cli_util.figure_file, default=None, help="the figure (default: OUT/study.png)")
    ap.add_argument("--bin", default=None, help="the trainer (default: train_llama_cpu, or train_llama with --engine gpu)")
    ap.add_argument("--report-only", action="store_true", help="no runs: the table and figure of what has finished")
    ap.add_argument("--dry-run", action="store_true", help="list the runs still to do and their commands, run nothing")
    args = ap.parse_args()
    layers, max_t = MODELS[args.model]
    modes = parse_modes(args.modes, args.lr) if args.modes is not None else parse_modes(";".join(default_modes(layers)), args.lr, strict=False)
    if args.engine == "gpu" and args.procs > 1:
        die(f"--procs {args.procs}: --engine gpu runs each run as one process on one GPU, which holds all its logical ranks (expected 1)")
    if args.seq_len > max_t:
        die(f"--seq-len {args.seq_len}: expected at most {max_t}, the longest sequence of --model {args.model}")
    data = []
    for flag, given, default, short in (("--train-data", args.train_data, DEFAULT_DATA[0], "-i"), ("--val-data", args.val_data, DEFAULT_DATA[1], "-j")):
        if given is not None and args.model == "small":
            die(f"{flag}: the small model trains on its own text (test/testlib.py --small-model); give --model a preset to choose data")
        if args.model == "small":
            continue
        pattern = os.path.abspath(given) if given is not None else os.path.join(ROOT, default)  # the runs start in the repository root
        if not glob.glob(pattern):
            die(f"{flag}: no file matches '{given if given is not None else default}' (expected a glob of .bin token shards)")
        data += [short, pattern]
    args.bin = args.bin if args.bin is not None else os.path.join(ROOT, ENGINES[args.engine])
    for n in args.ranks:
        if n % args.procs:
            die(f"--ranks: N {n} is not a multiple of --procs {args.procs} (each process holds N / procs logical ranks)")
    if os.path.lexists(args.out) and not os.path.isdir(args.out):
        die(f"--out: '{args.out}' exists and is not a directory")
    parent = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(parent):
        die(f"--out: the directory above '{args.out}' does not exist (expected an existing directory '{parent}')")
    if not args.report_only and not (os.path.isfile(args.bin) and os.access(args.bin, os.X_OK)):
        die(f"--bin: '{args.bin}' is not an executable file (hint: make {ENGINES[args.engine]})")
    # what the runs in --out are of: a study's pairs only mean something within one engine, model and T
    setup = {"engine": args.engine, "model": args.model, "seq_len": args.seq_len, "train_data": data[1] if data else None, "val_data": data[3] if data else None}
    setup_path = os.path.join(args.out, "study.json")
    if os.path.isfile(setup_path):
        try:
            with open(setup_path) as f:
                before = json.load(f)
        except (OSError, ValueError) as e:
            die(f"--out: cannot read {setup_path} ({e}; expected the JSON this script writes)")
    elif os.path.isdir(args.out) and glob.glob(os.path.join(args.out, "n*_lr*_x*")):
        before = {"engine": "cpu", "model": "small", "seq_len": 32, "train_data": None, "val_data": None}  # before study.json
    else:
        before = setup
    if before != setup:
            diff = ", ".join(f"{k} {before.get(k)} (now {v})" for k, v in setup.items() if before.get(k) != v)
            die(f"--out: '{args.out}' holds the runs of another study setup: {diff} (choose another --out)")
    cores = os.cpu_count() or 1
    jobs = args.jobs or (1 if args.engine == "gpu" else max(1, cores // args.procs))
    cells = [(n, lr, steps) for n in args.ranks for lr in args.lr for steps in args.steps if any(lr in m.lrs for m in modes)]
    # the runs: fp32 first in each cell (the pairs' baseline), then the modes
    todo = []
    for n, lr, steps in cells:
        cd = cell_dir(args.out, n, lr, steps)
        for seed in args.seeds:
            for tag, flags in [("fp32", ["-c", "fp32"])] + [(m.tag, m.flags) for m in modes if lr in m.lrs]:
                d = os.path.join(cd, f"{tag}_s{seed}")
                if finished(d, steps) is None:
                    todo.append((d, (n, lr, steps, seed, flags)))
    total = sum(len(args.seeds) * (1 + sum(lr in m.lrs for m in modes)) for n, lr, steps in cells)
    where = f"{args.procs} process(es) of 1 thread ({cores} cores here)" if args.engine == "cpu" else "1 process on the GPU"
    print(f"study: {len(cells)} cells x {len(args.seeds)} seeds: {total} runs, {total - len(todo)} finished, {len(todo)} to do; "
          f"{jobs} at a time x {where}; {os.path.basename(args.bin)}, model {args.model}, T {args.seq_len}", flush=True)
    failed = []
    model = ["-e", args.model] + data
    if args.dry_run:
        model = ["<small model flags>"] if args.model == "small" else model
        for d, (n, lr, steps, seed, flags) in todo:
            print(" ".join(shlex.quote(x) for x in command(args, model, flags, n, lr, steps, seed, d)))
        return 0
    if todo and not args.report_only and args.model == "small":
        try:
            model = subprocess.run([sys.executable, os.path.join(ROOT, "test", "testlib.py"), "--small-model"], cwd=ROOT, check=True,
                                   capture_output=True, text=True).stdout.split()
        except subprocess.CalledProcessError as e:
            die(f"test/testlib.py --small-model could not write the small model's data: {(e.stderr or '').strip()[-200:]}")
        os.makedirs(args.out, exist_ok=True)
        if not os.path.isfile(setup_path):
            with open(setup_path, "w") as f:
                json.dump(setup, f)
        env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
        queue, running, done, t0 = list(todo), [], 0, time.time()
        while queue or running:
            while queue and len(running) < jobs:
                d, (n, lr, steps, seed, flags) = queue.pop(0)
                os.makedirs(os.path.dirname(d), exist_ok=True)
                log = open(d + ".log", "w")
                p = subprocess.Popen(command(args, model, flags, n, lr, steps, seed, d), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
                running.append((p, d, log, time.time(), steps))
            time.sleep(0.2)
            for item in list(running):
                p, d, log, start, steps = item
                if p.poll() is None:
                    continue
                running.remove(item)
                log.close()
                done += 1
                elapsed = time.time() - t0
                eta = elapsed / done * (len(todo) - done)
                ok = p.returncode == 0 and finished(d, steps) is not None
                status = "done" if ok else f"FAILED (exit {p.returncode}; see {d}.log)"
                if not ok:
                    failed.append(d)
                print(f"[{done}/{len(todo)}] {os.path.relpath(d, args.out)} {status} in {time.time() - start:.1f} s; "
                      f"elapsed {elapsed / 60:.1f} min, ETA {eta / 60:.1f} min", flush=True)
    fig = report(args, modes, cells, args.seeds)
    write_figure(args.figure or os.path.join(args.out, "study.png"), fig) if os.path.isdir(args.out) else None
    if failed:
        cli_util.warn(f"{len(failed)} run(s) failed: {', '.join(os.path.relpath(d, args.out) for d in failed[:5])}")
        return 1
    return 0


if __name__ == "__main__":
    cli_util.run(main)
