#!/usr/bin/env python3
"""Loss curves of several runs in one figure, as the paper compares its runs.

Reads each RUN_DIR/metrics.jsonl (one JSON object per line, llmc/logger.h). Train lines carry
"train_loss" (skipped steps carry "skipped" and are left out), val lines "val_loss"; both carry
"step" and "tokens" (older logs without "tokens": step x the run's tokens per step, from
tokens_per_s x ms). A resumed run cuts its logs at the resume step before it appends; should a
step still appear twice (logs from before that), the last line of a step wins.

  python3 scripts/plot_runs.py out/fp32 out/fp8 out/geofp8 --baseline out/fp32 --out runs.png

Panels in a 2 x 2 grid (unused ones left out), every one against tokens: (1) train loss, raw
(thin) and smoothed by an exponential moving average (--smooth, the weight of the past;
de-biased as in Adam so the first points are not pulled to 0 and the curve does not lag its
first values), and val loss, with the last quarter zoomed in an inset when there are several
runs; (2) with several runs, the difference to the baseline: val loss in percent of the
baseline's at the same step (the paper's gap to FP32) and the smoothed train loss likewise,
against the noise it must clear: runs that share a --labels name are seeds of one mode, drawn
as their mean (±1 std shaded), and the band around 0 is the baseline's seed spread (±1 std) or,
with one baseline seed, "single seed: ±0.5%" (--noise-floor), a floor assumed, not measured;
(3) where runs logged them,
the communication figures: the fidelity RelL2 of the compressed gradient (--fidelity-every
steps; a log axis only where it spans over 20x) and the bytes sent per step; (4) where geofp8 or
kfac runs logged them, the fair figures of the geometry units: RelL2 of geo on its units over
RelL2 of plain fp8 with error feedback of its own on the same units, over windows
(window_rel_l2_geo / window_rel_l2_geo_fp8ef at each window's last step) and on the one-step
fidelity steps (dotted); below 1, the geometry path errs less; the legend gives the first and
last window's ratio, and a second axis the fp8+EF path's own RelL2 on those units (dashed), so a
ratio's rise over training is read beside the errors it divides. Each run has its own colour, line
style and marker, the baseline a wider line beneath the others, so coinciding runs stay apart;
the title gives each run's key settings from its newest checkpoint (-c, the model, ranks,
tokens per step, lr).

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

STATE_MAGIC = 20250302  # llmc/checkpoint.h, a state file's first int64
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
    run = {"train": {}, "val": {}, "rel_l2": {}, "bytes": {}, "win_ratio": {}, "step_ratio": {}, "geo_fp8_err": {}}
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
            if v["window_rel_l2_geo_fp8ef"] is not None:
                run["geo_fp8_err"][step] = v["window_rel_l2_geo_fp8ef"]
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


def read_settings(run_dir):
    """{key: value} of the run's settings as its newest checkpoint holds them (the state file of
    rank 0: the key=value text after its 512-byte header, llmc/checkpoint.h); {} without one."""
    try:
        names = sorted(n for n in os.listdir(run_dir) if n.startswith("state_") and n.endswith("_00000.bin"))
        if not names:
            return {}
        with open(os.path.join(run_dir, names[-1]), "rb") as f:
            header = f.read(512)
            if len(header) < 512 or int.from_bytes(header[:8], "little") != STATE_MAGIC:
                return {}
            size = int.from_bytes(header[72:80], "little")  # int64 h[9]: the settings' length
            text = f.read(min(size, 1 << 20)).decode("utf-8", "replace")
    except OSError:
        return {}
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def settings_line(label, st):
    """A run's key settings for the figure's title: "fp8: -c fp8 (e4m3), C=768 L=12, 8 ranks,
    524288 tokens/step, lr 0.0006"; the label alone without a checkpoint."""
    if not st:
        return label
    comm = st.get("comm", "?")
    if comm not in ("fp32", "bf16") and "fp8-format" in st:
        comm += f" ({st['fp8-format']})"
    model = " ".join(w for w in st.get("model_config", "").split() if w.split("=")[0] in ("C", "L"))
    parts = [f"-c {comm}", model, f"{st.get('world_size', '?')} ranks" if st.get("virtual-ranks", "0") == "0"
             else f"{st['virtual-ranks']} ranks", f"{st.get('total-batch', '?')} tokens/step", f"lr {float(st['lr']):g}" if cli_util.FLOAT_RE.match(st.get("lr", "")) else "lr ?"]
    return f"{label}: " + ", ".join(p for p in parts if p)


def tokens_at(run, steps):
    """[(tokens, step)] of the steps the run's train log places in tokens."""
    return [(run["train"][s][0], s) for s in steps if s in run["train"]]


def seed_groups(labels):
    """[(label, [run indices])]: runs that share a label are seeds of one mode, in first order."""
    groups = {}
    for i, l in enumerate(labels):
        groups.setdefault(l, []).append(i)
    return list(groups.items())


def group_val(runs, idx):
    """{step: (tokens, mean, std)} of the val loss over the runs idx, at the steps all of them have
    (std with n - 1; 0 for one run)."""
    steps = set(runs[idx[0]]["val"])
    for i in idx[1:]:
        steps &= set(runs[i]["val"])
    out = {}
    for s in sorted(steps):
        xs = [runs[i]["val"][s][1] for i in idx]
        m = sum(xs) / len(xs)
        sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
        out[s] = (runs[idx[0]]["val"][s][0], m, sd)
    return out


def noise_band(ax, runs, labels, base_i, floor, style, markers):
    """The difference panel's val gaps with the noise they must clear: around 0, the baseline's
    seed spread (±1 std of its seeds' val loss, in percent of their mean) where it has several
    seeds, else a band of ±floor % marked "single seed"; each other mode's gap of its seeds' mean,
    ±1 std of its seeds where it has several."""
    groups = seed_groups(labels)
    base_label = labels[base_i]
    base_idx = dict(groups)[base_label]
    base = group_val(runs, base_idx)
    if not base:
        return
    bs = sorted(base)
    xs = [base[s][0] for s in bs]
    if len(base_idx) > 1:
        band = [100.0 * base[s][2] / base[s][1] if base[s][1] else 0.0 for s in bs]
        ax.fill_between(xs, [-b for b in band], band, color="gray", alpha=0.25, lw=0,
                        label=f"{base_label}: ±1 std of {len(base_idx)} seeds")
    else:
        ax.fill_between(xs, [-floor] * len(xs), [floor] * len(xs), color="gray", alpha=0.2, lw=0,
                        label=f"single seed: ±{floor:g}% noise floor (assumed, not measured)")
    for k, (label, idx) in enumerate(groups):
        if label == base_label:
            continue
        g = group_val(runs, idx)
        steps = [s for s in sorted(g) if s in base and base[s][1]]
        if not steps:
            continue
        st = style(idx[0])
        gx = [g[s][0] for s in steps]
        gy = [100.0 * (g[s][1] - base[s][1]) / base[s][1] for s in steps]
        seeds = f"mean of {len(idx)} seeds" if len(idx) > 1 else "single seed"
        ax.plot(gx, gy, marker=markers[idx[0] % len(markers)], ms=4, label=f"{label} val ({seeds})", **st)
        if len(idx) > 1:
            sd = [100.0 * g[s][2] / base[s][1] for s in steps]
            ax.fill_between(gx, [y - d for y, d in zip(gy, sd)], [y + d for y, d in zip(gy, sd)], color=st["color"], alpha=0.15, lw=0)


def make_figure(runs, labels, base_i, weight, settings, noise_floor=0.5):
    """The figure: (1) train (smoothed) and val loss, with the tail zoomed in an inset when there
    are several runs; (2) with several runs, the difference to the baseline: val loss and smoothed
    train loss in percent of the baseline's; (3) where logged, the communication: fidelity RelL2
    (and MB per step); (4) where logged, the geometry units' fair figures: RelL2 of geo on its
    units against plain fp8 with EF on the same units, over windows. Every x axis is tokens;
    log y only where the values span more than 20x; each run its own colour, line style and
    marker, the baseline a wider line beneath. The title carries each run's key settings."""
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    several = len(runs) > 1
    has_comm = any(any(v > 0 for v in r["rel_l2"].values()) or any(r["bytes"].values()) for r in runs)
    has_fair = any(r["win_ratio"] or r["step_ratio"] for r in runs)
    # a 2 x 2 grid: loss | difference / communication | geometry units; unused panels removed
    fig, grid = plt.subplots(2, 2, figsize=(11.0, 9.0), squeeze=False)
    ax_loss, ax_diff, ax_comm, ax_fair = grid[0][0], grid[0][1], grid[1][0], grid[1][1]
    for ax, used in ((ax_diff, several), (ax_comm, has_comm), (ax_fair, has_fair)):
        if not used:
            fig.delaxes(ax)
    ax_diff = ax_diff if several else None
    ax_comm = ax_comm if has_comm else None
    ax_fair = ax_fair if has_fair else None
    axes = [ax for ax in (ax_loss, ax_diff, ax_comm, ax_fair) if ax is not None]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles, markers = ["-", "--", "-.", ":"], ["o", "s", "^", "D", "v", "P"]

    def style(i):
        base = i == base_i
        return dict(color=colors[i % len(colors)], ls=styles[i % len(styles)], lw=2.4 if base else 1.3, zorder=2 if base else 3)

    base = runs[base_i]
    inset = ax_loss.inset_axes([0.45, 0.45, 0.5, 0.45]) if several else None
    base_smooth = {}
    if base["train"]:
        bs = sorted(base["train"])
        base_smooth = dict(zip(bs, smooth([base["train"][s][1] for s in bs], weight)))
    tails = []
    ax_fair_err = None
    for i, (label, run) in enumerate(zip(labels, runs)):
        st, mk = style(i), markers[i % len(markers)]
        steps = sorted(run["train"])
        sm = smooth([run["train"][s][1] for s in steps], weight) if steps else []
        x = [run["train"][s][0] for s in steps]
        if steps:
            ax_loss.plot(x, [run["train"][s][1] for s in steps], color=st["color"], lw=0.5, alpha=0.35, zorder=1,
                         label=f"{label} train (raw)")
            ax_loss.plot(x, sm, label=f"{label} train (EMA {weight:g})", **st)
            if inset is not None:
                inset.plot(x, sm, **st)
                tails.append((x, sm))
        vs = sorted(run["val"])
        if vs:
            ax_loss.plot([run["val"][s][0] for s in vs], [run["val"][s][1] for s in vs], marker=mk, ms=4, ls="none",
                         color=st["color"], zorder=4, label=f"{label} val")
        if ax_diff is not None and i != base_i and labels[i] != labels[base_i]:
            common = [k for k, s in enumerate(steps) if s in base_smooth and base_smooth[s] != 0]
            if common:
                ax_diff.plot([x[k] for k in common], [100.0 * (sm[k] - base_smooth[steps[k]]) / base_smooth[steps[k]] for k in common],
                             color=st["color"], ls=st["ls"], lw=0.9, alpha=0.7, label=f"{label} train (EMA)")
        if ax_comm is not None:
            rs = tokens_at(run, [s for s in sorted(run["rel_l2"]) if run["rel_l2"][s] > 0])  # fp32 logs 0: nothing compressed
            if rs:
                ax_comm.plot([t for t, _ in rs], [run["rel_l2"][s] for _, s in rs], marker=mk, ms=3, label=f"{label} RelL2", **st)
        if ax_fair is not None:
            ws = tokens_at(run, sorted(run["win_ratio"]))
            if ws:
                first, last = run["win_ratio"][ws[0][1]], run["win_ratio"][ws[-1][1]]
                ax_fair.plot([t for t, _ in ws], [run["win_ratio"][s] for _, s in ws], marker=mk, ms=4,
                             label=f"{label}: over windows ({first:.2f} at the first, {last:.2f} at the last)", **st)
            es = tokens_at(run, sorted(run["geo_fp8_err"]))
            if es:  # the plain fp8 path's own error on the geometry units, where logged
                if ax_fair_err is None:
                    ax_fair_err = ax_fair.twinx()
                ax_fair_err.plot([t for t, _ in es], [run["geo_fp8_err"][s] for _, s in es], color=st["color"], ls="--", lw=0.8,
                                 alpha=0.6, label=f"{label}: fp8+EF RelL2 on the geometry units")
            ss = tokens_at(run, sorted(run["step_ratio"]))
            if ss:
                ax_fair.plot([t for t, _ in ss], [run["step_ratio"][s] for _, s in ss], color=st["color"], ls=":", lw=0.9,
                             label=f"{label}: one step")
    if ax_diff is not None:
        noise_band(ax_diff, runs, labels, base_i, noise_floor, style, markers)
    ax_loss.set(xlabel="tokens", ylabel="loss", title="train (smoothed) and val loss")
    ax_loss.legend(fontsize=7, loc="lower left")
    if inset is not None and tails:
        x_hi = max(max(x) for x, _ in tails)
        x_lo = min(min(x) for x, _ in tails)
        cut = x_lo + 0.75 * (x_hi - x_lo)
        ys = [y for x, sm in tails for xx, y in zip(x, sm) if xx >= cut]
        if ys and cut < x_hi:
            pad = 0.1 * (max(ys) - min(ys)) or 0.01 * abs(max(ys)) or 0.01
            inset.set_xlim(cut, x_hi)
            inset.set_ylim(min(ys) - pad, max(ys) + pad)
        inset.set_title("last quarter", fontsize=7)
        inset.tick_params(labelsize=6)
        inset.xaxis.set_major_formatter(matplotlib.ticker.EngFormatter())
    if ax_diff is not None:
        ax_diff.axhline(0.0, color="gray", lw=0.8)
        ax_diff.set(xlabel="tokens", ylabel=f"loss vs {labels[base_i]} (%)", title=f"difference to {labels[base_i]}")
        if ax_diff.get_legend_handles_labels()[0]:
            ax_diff.legend(fontsize=7)
    if ax_comm is not None:
        ax_comm.set(xlabel="tokens", ylabel="fidelity RelL2", title="communication")
        vals = [v for r in runs for v in r["rel_l2"].values() if v > 0]
        if vals and max(vals) > 20 * min(vals):
            ax_comm.set_yscale("log")
        if any(any(r["bytes"].values()) for r in runs):
            ax_b = ax_comm.twinx()
            for i, run in enumerate(runs):
                bs = tokens_at(run, sorted(run["bytes"]))
                if bs and any(run["bytes"].values()):
                    ax_b.plot([t for t, _ in bs], [run["bytes"][s] / 1e6 for _, s in bs], color=style(i)["color"], ls=style(i)["ls"],
                              lw=0.8, alpha=0.5, label=f"{labels[i]} MB/step")
            ax_b.set_ylabel("MB sent per step per rank (thin)")
            ax_b.legend(fontsize=7, loc="lower right")
        if ax_comm.get_legend_handles_labels()[0]:
            ax_comm.legend(fontsize=7, loc="upper left")
    if ax_fair is not None:
        ax_fair.axhline(1.0, color="gray", lw=0.8)
        ax_fair.set(xlabel="tokens", ylabel="RelL2 of geo / RelL2 of fp8+EF", title="geometry units: geo vs fp8+EF on the same units")
        ax_fair.legend(fontsize=7, loc="upper left")
        if ax_fair_err is not None:
            ax_fair_err.set_ylabel("fp8+EF RelL2 on the geometry units (dashed)")
            ax_fair_err.legend(fontsize=7, loc="lower right")
    for ax in axes:  # token counts as 50 k, 2 M, 1 G
        ax.xaxis.set_major_formatter(matplotlib.ticker.EngFormatter())
    fig.suptitle("\n".join(settings_line(l, st) for l, st in zip(labels, settings)), fontsize=8)
    fig.tight_layout()
    return fig


def main(argv=None):
    ap = cli_util.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="run directories (each with metrics.jsonl)")
    ap.add_argument("--baseline", help="the run the gaps are relative to (one of the runs; default: the first)")
    ap.add_argument("--labels", help="comma list of names for the runs (default: the directory names); runs that share a "
                    "name are seeds of one mode: the difference panel shows their mean and ±1 std")
    ap.add_argument("--smooth", type=cli_util.finite_float, default=0.9, help="EMA weight of the past for train loss, in [0, 1) (0.9)")
    ap.add_argument("--noise-floor", type=cli_util.finite_float, default=0.5,
                    help="percent: the difference panel's band where the baseline has one seed (0.5)")
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
    if not 0.0 <= a.noise_floor <= 100.0:
        die(f"--noise-floor: expected a percent in [0, 100], found {a.noise_floor}")
    fig = make_figure(runs, labels, base_i, a.smooth, [read_settings(r) for r in a.runs], a.noise_floor)
    with cli_util.atomic_path(a.out) as tmp:
        fig.savefig(tmp, dpi=120, format=cli_util.figure_format(a.out))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    cli_util.run(main)
