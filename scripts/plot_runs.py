#!/usr/bin/env python3
"""Loss curves of several runs in one figure, as the paper compares its runs.

Reads each RUN_DIR/metrics.jsonl (one JSON object per line, llmc/logger.h). Train lines carry
"train_loss" (skipped steps carry "skipped" and are left out), val lines "val_loss"; both carry
"step" and "tokens" (older logs without "tokens": step x the run's tokens per step, from
tokens_per_s x ms). A resumed run cuts its logs at the resume step before it appends; should a
step still appear twice (logs from before that), the last line of a step wins.

  python3 scripts/plot_runs.py out/fp32 out/fp8 out/geofp8 --baseline out/fp32 --out runs.png

Panels: (1) train loss, smoothed by an exponential moving average (--smooth, the weight of the
past; de-biased as in Adam so the first points are not pulled to 0), and val loss against tokens;
(2) each run's val loss relative to the baseline's at the same step, in percent (the paper's gap
to FP32); (3) where runs logged them, the communication figures: the fidelity RelL2 of the
compressed gradient (--fidelity-every steps) and the bytes sent per step; (4) where geofp8 or
kfac runs logged them, the fair figures of the geometry units: the windowed ratio geo / fp8+EF
(window_rel_l2_geo / window_rel_l2_geo_fp8ef, at each window's last step, solid) and the one-step
ratio geo / fp8+EF on the fidelity steps (dotted); below 1, the geometry path errs less than plain
fp8 with error feedback of its own would have.

Prints first a table of the numbers it plots, one row per run: steps, tokens, the last smoothed
train loss, the last val loss and its step, the gap to the baseline at the last common val step,
the mean RelL2, the mean bytes per step and the mean windowed ratio geo / fp8+EF. Needs
matplotlib for the figure (not for the table).
"""
import math
import os
import sys

import cli_util
from cli_util import die

# the numbers read from a metrics line: each absent, null (the engine's NaN or Inf) or finite
NUMBER_FIELDS = ("tokens", "train_loss", "val_loss", "comm_bytes", "fidelity_rel_l2", "tokens_per_s", "ms",
                 "window_rel_l2_geo", "window_rel_l2_geo_fp8ef", "fidelity_rel_l2_geo", "fidelity_rel_l2_geo_fp8ef")


def read_run(run_dir):
    """{"train": {step: (tokens, loss)}, "val": {step: (tokens, loss)}, "rel_l2": {step: x},
    "bytes": {step: x}, "win_ratio": {step: x}, "step_ratio": {step: x}} of one run directory.
    A last line still being written (a live run) is skipped with a warning."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        die(f"'{path}' not found; expected a run directory written with -o")
    run = {"train": {}, "val": {}, "rel_l2": {}, "bytes": {}, "win_ratio": {}, "step_ratio": {}}
    per_step = None
    for k, r in cli_util.read_jsonl(path):
        step = r.get("step")
        if not (cli_util.is_number(step) and (isinstance(step, int) or (math.isfinite(step) and step.is_integer()))
                and 0 <= step < 2 ** 53):
            die(f"'{path}' line {k} is not a metrics line (expected a JSON object with an integer step >= 0, "
                f"found step {cli_util.describe(step) if 'step' in r else 'none'})")
        step = int(step)
        v = {}
        for key in NUMBER_FIELDS:
            x = r.get(key)
            if x is not None and not cli_util.finite_number(x):
                die(f"'{path}' line {k}: \"{key}\" is {cli_util.describe(x)}, expected a finite number or null")
            v[key] = None if x is None else float(x)
        if v["tokens"] is not None and v["tokens"] < 0:
            die(f"'{path}' line {k}: \"tokens\" is {r['tokens']!r}, expected a count >= 0")
        if per_step is None and v["tokens_per_s"] and v["ms"]:
            x = v["tokens_per_s"] * v["ms"] / 1e3
            per_step = float(round(x)) if math.isfinite(x) and x > 0 else None
        tokens = v["tokens"]
        if v["train_loss"] is not None and not r.get("skipped"):
            run["train"][step] = (tokens, v["train_loss"])
            if v["comm_bytes"] is not None:
                run["bytes"][step] = v["comm_bytes"]
            if v["fidelity_rel_l2"] is not None:
                run["rel_l2"][step] = v["fidelity_rel_l2"]
            for key, geo, ref in (("win_ratio", "window_rel_l2_geo", "window_rel_l2_geo_fp8ef"),
                                  ("step_ratio", "fidelity_rel_l2_geo", "fidelity_rel_l2_geo_fp8ef")):
                if v[geo] is not None and v[ref] is not None and v[ref] > 0:
                    run[key][step] = v[geo] / v[ref]
        if v["val_loss"] is not None:
            run["val"][step] = (tokens, v["val_loss"])
    for key in ("train", "val"):
        for step, (tokens, loss) in list(run[key].items()):
            if tokens is None:
                if per_step is None:
                    die(f"'{path}' has no tokens field and no step timing to derive tokens per step from")
                run[key][step] = (step * per_step, loss)
    if not run["train"] and not run["val"]:
        die(f"'{path}' holds no train or val loss")
    return run


def smooth(values, weight):
    """Exponential moving average with Adam's bias correction (weight = the past's share)."""
    out, avg = [], 0.0
    for i, v in enumerate(values, 1):
        avg = weight * avg + (1.0 - weight) * v
        out.append(avg / (1.0 - weight ** i) if weight > 0 else v)
    return out


def gap_percent(run, base):
    """{step: 100 (val - val_base) / val_base} at the val steps both runs have."""
    return {s: 100.0 * (run["val"][s][1] - base["val"][s][1]) / base["val"][s][1]
            for s in sorted(set(run["val"]) & set(base["val"])) if base["val"][s][1] != 0}


def main(argv=None):
    ap = cli_util.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="run directories (each with metrics.jsonl)")
    ap.add_argument("--baseline", help="the run the gaps are relative to (one of the runs; default: the first)")
    ap.add_argument("--labels", help="comma list of names for the runs (default: the directory names)")
    ap.add_argument("--smooth", type=cli_util.finite_float, default=0.9, help="EMA weight of the past for train loss, in [0, 1) (0.9)")
    ap.add_argument("--out", type=cli_util.figure_file, default="runs.png", help="the figure (.png, .pdf or .svg)")
    a = ap.parse_args(argv)
    if not 0.0 <= a.smooth < 1.0:
        die(f"--smooth: expected a number in [0, 1), found {a.smooth}")
    labels = a.labels.split(",") if a.labels else [os.path.basename(os.path.normpath(r)) for r in a.runs]
    if len(labels) != len(a.runs):
        die(f"--labels: expected {len(a.runs)} names, found {len(labels)}")
    runs = [read_run(r) for r in a.runs]
    norm = [os.path.normpath(r) for r in a.runs]
    base_i = 0
    if a.baseline:
        if os.path.normpath(a.baseline) not in norm:
            die(f"--baseline: '{a.baseline}' is not one of the runs given")
        base_i = norm.index(os.path.normpath(a.baseline))
    base = runs[base_i]

    # the table of what is plotted
    print(f"baseline: {labels[base_i]}")
    print("| run | steps | tokens | train loss (smoothed, last) | val loss (last) | val step | gap to baseline % | mean RelL2 | bytes/step |"
          " window geo/fp8+EF |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, run in zip(labels, runs):
        steps = sorted(run["train"])
        sm = smooth([run["train"][s][1] for s in steps], a.smooth) if steps else []
        last_val = max(run["val"]) if run["val"] else None
        gaps = gap_percent(run, base)
        gap = gaps[max(gaps)] if gaps else float("nan")
        rel = [run["rel_l2"][s] for s in sorted(run["rel_l2"])]
        byts = [run["bytes"][s] for s in sorted(run["bytes"])]
        win = list(run["win_ratio"].values())
        print("| %s | %d | %d | %s | %s | %s | %s | %s | %s | %s |" % (
            label, steps[-1] if steps else 0, run["train"][steps[-1]][0] if steps else 0,
            "%.6f" % sm[-1] if sm else "-", "%.6f" % run["val"][last_val][1] if last_val is not None else "-",
            last_val if last_val is not None else "-", "%+.3f" % gap if not math.isnan(gap) else "-",
            "%.4e" % (sum(rel) / len(rel)) if rel else "-", "%.0f" % (sum(byts) / len(byts)) if byts else "-",
            "%.4f" % (sum(win) / len(win)) if win else "-"))
    sys.stdout.flush()

    try:
        import matplotlib
    except ImportError:
        die(f"writing {a.out} needs matplotlib (pip install matplotlib); the table above does not")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    has_comm = any(r["rel_l2"] or any(r["bytes"].values()) for r in runs)
    has_fair = any(r["win_ratio"] or r["step_ratio"] for r in runs)
    panels = 2 + has_comm + has_fair
    fig, axes = plt.subplots(1, panels, figsize=(5.4 * panels, 4.5))
    ax_fair = axes[-1] if has_fair else None
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, run) in enumerate(zip(labels, runs)):
        c = colors[i % len(colors)]
        steps = sorted(run["train"])
        if steps:
            axes[0].plot([run["train"][s][0] for s in steps], smooth([run["train"][s][1] for s in steps], a.smooth),
                         color=c, lw=1.2, label=f"{label} train (EMA {a.smooth:g})")
        vs = sorted(run["val"])
        if vs:
            axes[0].plot([run["val"][s][0] for s in vs], [run["val"][s][1] for s in vs], "o--", color=c, ms=3, label=f"{label} val")
        gaps = gap_percent(run, base)
        if gaps and i != base_i:
            axes[1].plot([run["val"][s][0] for s in gaps], list(gaps.values()), "o-", color=c, ms=3, label=label)
        if has_comm and any(v > 0 for v in run["rel_l2"].values()):  # (fp32 logs 0: nothing compressed)
            rs = [st for st in sorted(run["rel_l2"]) if run["rel_l2"][st] > 0]
            axes[2].plot(rs, [run["rel_l2"][s] for s in rs], "o-", color=c, ms=3, label=f"{label} RelL2")
        if has_comm and any(run["bytes"].values()):
            ax_b = axes[2].twinx() if not hasattr(axes[2], "_bytes_axis") else axes[2]._bytes_axis
            axes[2]._bytes_axis = ax_b
            bs = sorted(run["bytes"])
            ax_b.plot(bs, [run["bytes"][s] / 1e6 for s in bs], ":", color=c, lw=1, label=f"{label} MB/step")
            ax_b.set_ylabel("MB sent per step per rank (dotted)")
        if has_fair and run["win_ratio"]:
            ws = sorted(run["win_ratio"])
            ax_fair.plot(ws, [run["win_ratio"][s] for s in ws], "o-", color=c, ms=3, label=f"{label} window")
        if has_fair and run["step_ratio"]:
            ss = sorted(run["step_ratio"])
            ax_fair.plot(ss, [run["step_ratio"][s] for s in ss], ":", color=c, lw=1, label=f"{label} one step")
    axes[0].set(xlabel="tokens", ylabel="loss", title="train (smoothed) and val loss")
    axes[0].legend(fontsize=7)
    axes[1].axhline(0.0, color="gray", lw=0.8)
    axes[1].set(xlabel="tokens", ylabel=f"val loss vs {labels[base_i]} (%)", title=f"gap to {labels[base_i]}")
    if len(runs) > 1:
        if axes[1].get_legend_handles_labels()[0]:
            axes[1].legend(fontsize=7)
    else:
        axes[1].text(0.5, 0.5, "one run: nothing to compare with", ha="center", va="center", transform=axes[1].transAxes)
        axes[1].set(xticks=[], yticks=[])
    for ax in axes[:2]:  # token counts as 50 k, 2 M, 1 G
        ax.xaxis.set_major_formatter(matplotlib.ticker.EngFormatter())
    if has_comm:
        axes[2].set(xlabel="step", ylabel="fidelity RelL2 (solid)", title="communication")
        if any(r["rel_l2"] for r in runs):
            axes[2].set_yscale("log")
            axes[2].legend(fontsize=7, loc="upper left")
    if has_fair:
        ax_fair.axhline(1.0, color="gray", lw=0.8)
        ax_fair.set(xlabel="step", ylabel="RelL2 geo / RelL2 fp8+EF", title="geometry units: geo against plain fp8 with EF")
        ax_fair.legend(fontsize=7)
    fig.tight_layout()
    with cli_util.atomic_path(a.out) as tmp:
        fig.savefig(tmp, dpi=120, format=cli_util.figure_format(a.out))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    cli_util.run(main)
