#!/usr/bin/env python3
"""Step-time improvement over fp32 communication against GPU count (the paper's Figure 5).

Reads the runs of scripts/slurm/scaling_sweep.sh: one directory per run named
<model>_<mode>_<N>gpu under --root, each with the trainer's metrics.jsonl (one JSON object per
step with the fields step, ms, tokens_per_s, comm_bytes; validation and skipped-step lines carry no
"ms" and are ignored). A run's step time is the mean "ms" over the steps after the first
--skip-steps (warm-up); the mean, not the median, so the GeoFP8 factor refreshes (every 50 steps)
count at their real rate. Improvement of a mode = (t_fp32 - t_mode) / t_fp32 * 100 %: positive is
faster than fp32, as in the paper.

    python3 scripts/plot_scaling.py --root $OUT_ROOT/scaling --out scaling.png

Prints a table of step times, improvements and bytes sent per step; the mean phase times of each
run (forward, backward, communication and within it the NCCL calls, the whitening, the factor
refresh; optimizer), when its metrics carry them (train_llama); and, where fp32, fp8 and geofp8
ran at the same GPU count, the fraction of the FP8 saving GeoFP8 keeps,
(t_fp32 - t_geofp8) / (t_fp32 - t_fp8). Then writes the figure (one panel per model; needs
matplotlib, the tables do not).
"""
import json
import math
import os
import re
import sys

import cli_util

RUN_DIR = re.compile(r"^(?P<model>.+)_(?P<mode>fp32|bf16|fp8block|fp8|geofp8|kfac)_(?P<gpus>\d+)gpu$")
LABELS = {"bf16": "BF16", "fp8": "Euclidean FP8", "fp8block": "Euclidean FP8 (per block)", "geofp8": "GeoFP8", "kfac": "K-FAC FP8"}
MARKERS = {"bf16": "s", "fp8": "o", "fp8block": "v", "geofp8": "D", "kfac": "^"}


# phase columns: (header, metrics fields summed)
PHASES = [("fwd", ["t_forward_ms"]), ("bwd", ["t_backward_ms"]), ("comm", ["t_comm_ms"]), ("nccl", ["t_nccl_ms"]),
          ("whiten", ["t_whiten_ms", "t_unwhiten_ms"]), ("refresh", ["t_refresh_ms"]), ("opt", ["t_optimizer_ms"])]


def read_run(path, skip_steps):
    """Mean step time (ms), mean bytes sent per step, steps used, mean phase times {header: ms}
    (empty when the metrics have none); None if nothing usable."""
    ms, comm, phases = [], [], {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                print(f"warning: {path}:{n}: not JSON ({e}); line ignored", file=sys.stderr)
                continue
            if "ms" not in rec or "step" not in rec or rec.get("skipped"):
                continue
            if rec["step"] <= skip_steps:
                continue
            ms.append(float(rec["ms"]))
            comm.append(float(rec.get("comm_bytes", float("nan"))))
            for name, fields in PHASES:
                if any(f in rec for f in fields):
                    phases.setdefault(name, []).append(sum(float(rec.get(f, 0.0)) for f in fields))
    if not ms:
        return None
    return sum(ms) / len(ms), sum(comm) / len(comm), len(ms), {k: sum(v) / len(v) for k, v in phases.items() if len(v) == len(ms)}


def collect(root, skip_steps):
    """{model: {mode: {gpus: (ms, bytes, steps, phases)}}}"""
    runs = {}
    if not os.path.isdir(root):
        sys.exit(f"error: --root '{root}' is not a directory (expected the scaling runs, e.g. $OUT_ROOT/scaling)")
    for name in sorted(os.listdir(root)):
        m = RUN_DIR.match(name)
        path = os.path.join(root, name, "metrics.jsonl")
        if not m or not os.path.isfile(path):
            continue
        r = read_run(path, skip_steps)
        if r is None:
            print(f"warning: {path} has no step past --skip-steps {skip_steps}; run ignored", file=sys.stderr)
            continue
        runs.setdefault(m["model"], {}).setdefault(m["mode"], {})[int(m["gpus"])] = r
    if not runs:
        sys.exit(f"error: no <model>_<mode>_<N>gpu/metrics.jsonl under '{root}' (run scripts/slurm/scaling_sweep.sh first)")
    return runs


def improvements(runs):
    """{model: {mode: [(gpus, improvement %)]}} against fp32 at the same GPU count."""
    out = {}
    for model, modes in runs.items():
        base = modes.get("fp32", {})
        if not base:
            print(f"warning: {model} has no fp32 runs; nothing to compare against", file=sys.stderr)
            continue
        for mode, by_gpus in modes.items():
            if mode == "fp32":
                continue
            pts = [(g, 100.0 * (base[g][0] - by_gpus[g][0]) / base[g][0]) for g in sorted(by_gpus) if g in base]
            if pts:
                out.setdefault(model, {})[mode] = pts
    return out


def print_table(runs, imp):
    print(f"{'model':<12} {'mode':<9} {'GPUs':>5} {'ms/step':>10} {'vs fp32':>9} {'GB sent/step':>13} {'steps':>6}")
    for model in sorted(runs):
        for mode in sorted(runs[model], key=lambda m: (m != "fp32", m)):
            for g in sorted(runs[model][mode]):
                ms, comm, n, _ = runs[model][mode][g]
                d = dict(imp.get(model, {}).get(mode, [])).get(g)
                rel = f"{d:+8.2f}%" if d is not None else f"{'-':>9}"
                gb = f"{comm / 1e9:13.3f}" if not math.isnan(comm) else f"{'-':>13}"
                print(f"{model:<12} {mode:<9} {g:>5} {ms:>10.1f} {rel} {gb} {n:>6}")


def fp8_saving_kept(runs):
    """[(model, gpus, t_fp32, t_fp8, t_geofp8, kept)]: kept = (t_fp32 - t_geofp8) / (t_fp32 - t_fp8),
    None where fp8 saved nothing."""
    out = []
    for model in sorted(runs):
        modes = runs[model]
        for g in sorted(set(modes.get("fp32", {})) & set(modes.get("fp8", {})) & set(modes.get("geofp8", {}))):
            t32, t8, tgeo = modes["fp32"][g][0], modes["fp8"][g][0], modes["geofp8"][g][0]
            kept = (t32 - tgeo) / (t32 - t8) if t32 - t8 > 0 else None
            out.append((model, g, t32, t8, tgeo, kept))
    return out


def print_phases(runs, kept):
    rows = [(model, mode, g, r[3]) for model in sorted(runs) for mode in sorted(runs[model]) for g, r in sorted(runs[model][mode].items())
            if r[3]]
    if rows:
        print()
        print(f"{'model':<12} {'mode':<9} {'GPUs':>5} " + " ".join(f"{name:>8}" for name, _ in PHASES) + "   (mean ms per step)")
        for model, mode, g, ph in rows:
            print(f"{model:<12} {mode:<9} {g:>5} " + " ".join(f"{ph[name]:8.1f}" if name in ph else f"{'-':>8}" for name, _ in PHASES))
    for model, g, t32, t8, tgeo, k in kept:
        share = f"{100.0 * k:.0f}%" if k is not None else "n/a (fp8 is not faster than fp32)"
        print(f"{model} at {g} GPUs: fp32 {t32:.1f} ms, fp8 {t8:.1f} ms, geofp8 {tgeo:.1f} ms: geofp8 keeps {share} of the FP8 saving")


def plot(imp, out):
    try:
        import matplotlib
    except ImportError:
        sys.exit(f"error: writing {out} needs matplotlib (pip install matplotlib); the tables above do not")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = sorted(imp)
    fig, axes = plt.subplots(1, len(models), figsize=(5.2 * len(models), 4.0), squeeze=False)
    for ax, model in zip(axes[0], models):
        for mode in sorted(imp[model], key=lambda m: list(LABELS).index(m) if m in LABELS else 99):
            gpus, vals = zip(*imp[model][mode])
            ax.plot(gpus, vals, marker=MARKERS.get(mode, "o"), label=LABELS.get(mode, mode))
        ax.axhline(0.0, color="gray", linewidth=0.8)
        ax.set_xscale("log", base=2)
        all_gpus = sorted({g for pts in imp[model].values() for g, _ in pts})
        ax.set_xticks(all_gpus)
        ax.set_xticklabels([str(g) for g in all_gpus])
        ax.set_xlabel("GPUs")
        ax.set_ylabel("step-time improvement over FP32 (%)")
        ax.set_title(model)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=150)
    print(f"wrote {out}")


def main():
    ap = cli_util.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", required=True, help="directory holding the <model>_<mode>_<N>gpu runs (required)")
    ap.add_argument("--out", default="scaling.png", help="figure file (.png, .pdf, .svg; default scaling.png)")
    ap.add_argument("--skip-steps", type=int, default=10, help="warm-up steps left out of the mean (default 10)")
    args = ap.parse_args()
    runs = collect(args.root, args.skip_steps)
    imp = improvements(runs)
    print_table(runs, imp)
    print_phases(runs, fp8_saving_kept(runs))
    if not imp:
        sys.exit("error: no mode has an fp32 run at the same GPU count to compare with")
    plot(imp, args.out)


if __name__ == "__main__":
    main()
