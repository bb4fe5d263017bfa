"""Tests for scripts/plot_runs.py on synthetic runs: the numbers of its side table (the smoothed
train loss against an independent closed form, the val gap to the baseline, tokens from the
"tokens" field and, in older logs, from tokens_per_s x ms, a resumed run's repeated steps,
skipped steps left out, the mean RelL2 and bytes), the PNG it writes, a live run's unfinished last
line skipped with one warning, its one-line errors (a step of 1e400, a loss that is a string,
--out into a missing directory, ...) with nothing written, and a property test: 40 seeded
mutations of the arguments and metrics files never end in a traceback.

Prints "PASS name" / "FAIL name: detail" / "SKIP name: reason" lines; exits 1 on any failure.

    python3 test/test_plot_runs.py
"""
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "test"))
import testlib  # noqa: E402

SCRIPT = os.path.join(REPO, "scripts", "plot_runs.py")
sys.path.insert(0, os.path.join(REPO, "scripts"))
import plot_runs  # noqa: E402

check = testlib.Checks()


def write_run(path, lines):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for r in lines:
            f.write(json.dumps(r) + "\n")


def ema_closed_form(xs, w):
    """The de-biased EMA's last value, written as a weighted mean: sum w^(n-j) x_j / sum w^(n-j)."""
    n = len(xs)
    weights = [w ** (n - 1 - j) for j in range(n)]
    return sum(a * b for a, b in zip(weights, xs)) / sum(weights)


def table_rows(out):
    rows = {}
    for line in out.splitlines():
        if line.startswith("| ") and not line.startswith("| run "):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def main():
    tmp = tempfile.mkdtemp(prefix="test_plot_runs_")
    per_step = 4096
    # base: constant train loss 3.0 (its EMA is 3.0 exactly), val 3.0 then 2.5
    base = [{"step": s, "tokens": s * per_step, "train_loss": 3.0, "comm_bytes": 1000.0} for s in range(1, 21)]
    base += [{"step": 10, "tokens": 10 * per_step, "val_loss": 3.0}, {"step": 20, "tokens": 20 * per_step, "val_loss": 2.5}]
    # geo: a falling loss, a skipped step 7 (left out), a resume that repeats steps 15..16 with
    # other values (the last wins), fidelity lines and 250 bytes a step; val 3.3 then 2.6
    geo_losses = {s: 4.0 - 0.05 * s for s in range(1, 21) if s != 7}
    geo = []
    for s in range(1, 21):
        if s == 7:
            geo.append({"step": 7, "skipped": 1, "nonfinite_rank": 0})
            continue
        r = {"step": s, "tokens": s * per_step, "train_loss": 99.0 if s in (15, 16) else geo_losses[s], "comm_bytes": 250.0}
        if s % 5 == 0:
            r["fidelity_rel_l2"] = 0.01 * s
        if s in (10, 20):  # fair figures' windows: ratios 0.5 and 0.6; step 15's is null (NaN in the run), left out
            r.update(window_steps=10, window_rel_l2_geo=0.01 + 0.002 * s, window_rel_l2_geo_fp8ef=0.06 if s == 10 else 0.0833333333333)
        geo.append(r)
    geo += [{"step": 15, "tokens": 15 * per_step, "train_loss": geo_losses[15], "comm_bytes": 250.0, "fidelity_rel_l2": 0.15,
             "window_rel_l2_geo": None, "window_rel_l2_geo_fp8ef": 0.05},
            {"step": 16, "tokens": 16 * per_step, "train_loss": geo_losses[16], "comm_bytes": 250.0}]
    geo += [{"step": 10, "tokens": 10 * per_step, "val_loss": 3.3}, {"step": 20, "tokens": 20 * per_step, "val_loss": 2.6}]
    # old: no "tokens" field (tokens = step x tokens_per_s x ms / 1000 = step x 2048)
    old = [{"step": s, "train_loss": 5.0, "tokens_per_s": 20480.0, "ms": 100.0, "comm_bytes": 0} for s in range(1, 11)]
    old += [{"step": 10, "val_loss": 4.0}]
    write_run(os.path.join(tmp, "base"), base)
    write_run(os.path.join(tmp, "geo"), geo)
    write_run(os.path.join(tmp, "old"), old)
    png = os.path.join(tmp, "runs.png")
    r = subprocess.run([sys.executable, SCRIPT, os.path.join(tmp, "base"), os.path.join(tmp, "geo"), os.path.join(tmp, "old"),
                        "--baseline", os.path.join(tmp, "base"), "--smooth", "0.8", "--out", png],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rows = table_rows(r.stdout)
    check("plot_runs_exit_and_rows", r.returncode in (0, 1) and set(rows) == {"base", "geo", "old"}, r.stdout[-300:] + r.stderr[-300:])
    if set(rows) != {"base", "geo", "old"}:
        return 1
    want_geo = ema_closed_form([geo_losses[s] for s in sorted(geo_losses)], 0.8)
    check("plot_runs_smoothed_train_loss", abs(float(rows["base"][2]) - 3.0) < 1e-6 and abs(float(rows["geo"][2]) - want_geo) < 1e-6,
          f"base {rows['base'][2]} (3.0), geo {rows['geo'][2]} ({want_geo:.6f})")
    check("plot_runs_val_and_gap", rows["geo"][3] == "2.600000" and rows["geo"][4] == "20" and rows["geo"][5] == "+4.000" and
          rows["base"][5] == "+0.000" and rows["old"][5] == "+33.333", f"geo {rows['geo'][3:6]} base {rows['base'][5]} old {rows['old'][5]}")
    check("plot_runs_tokens", rows["geo"][1] == str(20 * per_step) and rows["old"][1] == str(10 * 2048),
          f"geo {rows['geo'][1]}, old {rows['old'][1]} (derived from tokens_per_s x ms)")
    want_rel = sum([0.05, 0.10, 0.15, 0.20]) / 4  # steps 5, 10, 15 (the resumed line), 20
    check("plot_runs_comm_means", abs(float(rows["geo"][6]) - want_rel) < 1e-6 and rows["geo"][7] == "250" and rows["base"][7] == "1000",
          f"RelL2 {rows['geo'][6]} ({want_rel}), bytes {rows['geo'][7]} / {rows['base'][7]}")
    check("plot_runs_window_ratio_mean", rows["geo"][8] == "0.5500" and rows["base"][8] == "-",
          f"geo {rows['geo'][8]} (0.5500: windows 0.03/0.06 and 0.05/0.0833), base {rows['base'][8]}")
    try:
        import matplotlib  # noqa: F401
        ok = r.returncode == 0 and os.path.isfile(png) and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n" and os.path.getsize(png) > 20000
        check("plot_runs_png_written", ok, f"rc {r.returncode} {r.stderr[-200:]}")
    except ImportError:
        print("SKIP plot_runs_png_written: matplotlib not importable (the table was checked)")

    figure_checks(tmp, base, geo)

    # errors: one line naming the file, exit 1
    r = subprocess.run([sys.executable, SCRIPT, os.path.join(tmp, "nothing")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    check("plot_runs_missing_run", r.returncode == 1 and r.stderr.count("\n") == 1 and "nothing/metrics.jsonl" in r.stderr, r.stderr)
    with open(os.path.join(tmp, "geo", "metrics.jsonl"), "a") as f:
        f.write("garbage\n")
    r = subprocess.run([sys.executable, SCRIPT, os.path.join(tmp, "geo")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    check("plot_runs_garbage_line", r.returncode == 1 and f"line {len(geo) + 1} is not a JSON object: 'garbage'" in r.stderr, r.stderr)
    r = subprocess.run([sys.executable, SCRIPT, os.path.join(tmp, "base"), "--baseline", os.path.join(tmp, "old")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    check("plot_runs_baseline_not_a_run", r.returncode == 1 and "--baseline" in r.stderr, r.stderr)
    live_run(tmp, base)
    refusals(tmp, base)
    property_test(tmp, geo)
    shutil.rmtree(tmp)
    return 1 if check.failed else 0


def figure_checks(tmp, base_lines, geo_lines):
    """The figure itself (make_figure, in process): panels for 1 and 2 runs and with the
    communication and fair figures; two coinciding runs told apart by colour and line style, the
    baseline wider; every x axis tokens; log y only for RelL2 spanning over 20x; the title from the
    runs' settings (a state file's key=value text)."""
    try:
        import matplotlib
    except ImportError:
        print("SKIP plot_runs_figure: matplotlib not importable")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plain = [{"step": s, "tokens": 100 * s, "train_loss": 3.0 - 0.01 * s} for s in range(1, 31)] + [{"step": 30, "tokens": 3000, "val_loss": 2.8}]
    write_run(os.path.join(tmp, "fig_a"), plain)
    write_run(os.path.join(tmp, "fig_b"), plain)  # the same curve: coinciding runs
    a, b = (plot_runs.read_run(os.path.join(tmp, n)) for n in ("fig_a", "fig_b"))

    def panels(fig):
        return [ax for ax in fig.axes if ax.get_xlabel() or ax.get_title()]
    fig = plot_runs.make_figure([a], ["a"], 0, 0.8, [{}])
    check("plot_runs_figure_one_run_one_panel", len(panels(fig)) == 1 and len(fig.axes) == 1, f"{len(fig.axes)} axes")
    plt.close(fig)
    fig = plot_runs.make_figure([a, b], ["a", "b"], 0, 0.8, [{}, {}])
    lines = [l for l in fig.axes[0].get_lines() if l.get_label().endswith("train (EMA 0.8)")]
    styles = {(l.get_color(), l.get_linestyle()) for l in lines}
    widths = [l.get_linewidth() for l in lines]
    check("plot_runs_figure_two_runs_two_panels", len(fig.axes) == 2 and fig.axes[1].get_title() == "difference to a" and
          len(fig.axes[0].child_axes) == 1, f"{[ax.get_title() for ax in fig.axes]}, {len(fig.axes[0].child_axes)} insets")
    check("plot_runs_figure_coinciding_runs_distinct", len(lines) == 2 and len(styles) == 2 and widths[0] > widths[1],
          f"styles {styles} widths {widths}")
    diff = [l for l in fig.axes[1].get_lines() if l.get_label() == "b train (EMA)"]
    check("plot_runs_figure_difference_zero", len(diff) == 1 and max(abs(y) for y in diff[0].get_ydata()) == 0.0, f"{diff}")
    plt.close(fig)
    runs = [plot_runs.read_run(os.path.join(tmp, n)) for n in ("base", "geo")]
    st = {"comm": "geofp8", "fp8-format": "e4m3", "model_config": "C=128 L=4 NH=4", "world_size": "2", "virtual-ranks": "0",
          "total-batch": "4096", "lr": "0.00300000003"}
    state = os.path.join(tmp, "fig_state")
    os.makedirs(state)
    text = "".join(f"{k}={v}\n" for k, v in st.items()).encode()
    header = [0] * 64
    header[0], header[9] = plot_runs.STATE_MAGIC, len(text)
    with open(os.path.join(state, "state_00000020_00000.bin"), "wb") as f:
        f.write(b"".join(h.to_bytes(8, "little", signed=True) for h in header) + text + b"\0" * 64)
    fig = plot_runs.make_figure(runs, ["base", "geo"], 0, 0.8, [{}, plot_runs.read_settings(state)])
    titles = [ax.get_title() for ax in panels(fig) if ax.get_title()]
    xlabels = {ax.get_xlabel() for ax in fig.axes if ax.get_xlabel()}
    comm = [ax for ax in fig.axes if ax.get_title() == "communication"]
    check("plot_runs_figure_all_panels", titles == ["train (smoothed) and val loss", "difference to base", "communication",
                                                    "geometry units: geo vs fp8+EF on the same units"], f"{titles}")
    check("plot_runs_figure_x_axis_tokens", xlabels == {"tokens"}, f"{xlabels}")
    # RelL2 0.05..0.20 (4x): a linear axis
    check("plot_runs_figure_narrow_range_linear", comm and comm[0].get_yscale() == "linear", comm and comm[0].get_yscale())
    title = fig._suptitle.get_text() if fig._suptitle else ""
    check("plot_runs_figure_title_settings", title == "base\ngeo: -c geofp8 (e4m3), C=128 L=4, 2 ranks, 4096 tokens/step, lr 0.003", repr(title))
    plt.close(fig)
    # the 2 x 2 grid: loss and difference on top, communication and geometry units below; the raw
    # loss drawn thin beneath its EMA; the geometry panel names its first and last ratio and draws
    # fp8+EF's own error on the geometry units where logged
    fig = plot_runs.make_figure(runs, ["base", "geo"], 0, 0.8, [{}, {}])
    pos = {ax.get_title(): (round(ax.get_position().x0, 1) < 0.5, round(ax.get_position().y0, 1) > 0.4) for ax in panels(fig) if ax.get_title()}
    check("plot_runs_figure_two_by_two", pos == {"train (smoothed) and val loss": (True, True), "difference to base": (False, True),
                                                 "communication": (True, False), "geometry units: geo vs fp8+EF on the same units": (False, False)},
          f"{pos}; size {tuple(fig.get_size_inches())}")
    raw = [l for l in fig.axes[0].get_lines() if l.get_label() == "geo train (raw)"]
    ema = [l for l in fig.axes[0].get_lines() if l.get_label() == "geo train (EMA 0.8)"]
    g = runs[1]
    want = [g["train"][st_][1] for st_ in sorted(g["train"])]
    check("plot_runs_figure_raw_loss_thin", len(raw) == 1 and len(ema) == 1 and list(raw[0].get_ydata()) == want and
          raw[0].get_linewidth() < ema[0].get_linewidth(), f"{len(raw)} raw lines")
    fair = [ax for ax in fig.axes if ax.get_title().startswith("geometry units")][0]
    ratios = [g["win_ratio"][st_] for st_ in sorted(g["win_ratio"])]
    lab = [l.get_label() for l in fair.get_lines() if "over windows" in l.get_label()]
    errs = [l for ax in fig.axes for l in ax.get_lines() if l.get_label() == "geo: fp8+EF RelL2 on the geometry units"]
    check("plot_runs_figure_geometry_first_last_and_fp8_error",
          lab == ["geo: over windows (%.2f at the first, %.2f at the last)" % (ratios[0], ratios[-1])] and len(errs) == 1 and
          list(errs[0].get_ydata()) == [g["geo_fp8_err"][st_] for st_ in sorted(g["geo_fp8_err"])] and len(ratios) >= 2, f"{lab}, {len(errs)}")
    plt.close(fig)
    # the noise band: one baseline seed -> "single seed" at ±0.5%; seeds sharing a label -> mean ± std
    fig = plot_runs.make_figure([a, b], ["a", "b"], 0, 0.8, [{}, {}])
    bands = [c for c in fig.axes[1].collections if "single seed" in c.get_label()]
    ys = bands[0].get_paths()[0].vertices[:, 1] if bands else []
    check("plot_runs_noise_band_single_seed", len(bands) == 1 and abs(max(ys) - 0.5) < 1e-12 and abs(min(ys) + 0.5) < 1e-12 and
          bands[0].get_label() == "single seed: ±0.5% noise floor (assumed, not measured)", f"{[c.get_label() for c in fig.axes[1].collections]}")
    plt.close(fig)
    seeds = []
    for k, (name, v) in enumerate((("s_a1", 2.0), ("s_a2", 2.2), ("s_b1", 2.4), ("s_b2", 2.6))):
        write_run(os.path.join(tmp, name), [{"step": 1, "tokens": 100, "train_loss": 3.0}, {"step": 10, "tokens": 1000, "val_loss": v}])
        seeds.append(plot_runs.read_run(os.path.join(tmp, name)))
    fig = plot_runs.make_figure(seeds, ["A", "A", "B", "B"], 0, 0.8, [{}] * 4)
    band = [c for c in fig.axes[1].collections if c.get_label() == "A: ±1 std of 2 seeds"]
    gap = [l for l in fig.axes[1].get_lines() if l.get_label() == "B val (mean of 2 seeds)"]
    sd_pct = 100.0 * math.sqrt(0.02) / 2.1  # std of 2.0 and 2.2 (n - 1) over their mean
    check("plot_runs_noise_band_seeds", len(band) == 1 and abs(max(band[0].get_paths()[0].vertices[:, 1]) - sd_pct) < 1e-9 and
          len(gap) == 1 and abs(gap[0].get_ydata()[0] - 100.0 * (2.5 - 2.1) / 2.1) < 1e-9,
          f"{[c.get_label() for c in fig.axes[1].collections]}, {[l.get_label() for l in fig.axes[1].get_lines()]}")
    plt.close(fig)
    wide = [dict(r, fidelity_rel_l2=0.001 * 10 ** (r["step"] // 5)) if "fidelity_rel_l2" in r else r for r in geo_lines]
    write_run(os.path.join(tmp, "fig_wide"), wide)
    fig = plot_runs.make_figure([plot_runs.read_run(os.path.join(tmp, "fig_wide"))], ["w"], 0, 0.8, [{}])
    comm = [ax for ax in fig.axes if ax.get_title() == "communication"]
    check("plot_runs_figure_wide_range_log", comm and comm[0].get_yscale() == "log", comm and comm[0].get_yscale())
    plt.close(fig)


def plot(*args):
    r = subprocess.run([sys.executable, SCRIPT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return r.returncode, r.stdout, r.stderr


def live_run(tmp, base):
    """A run still writing its last line: that line is skipped with one warning, the rest plotted."""
    d = os.path.join(tmp, "live")
    write_run(d, base)
    png = os.path.join(tmp, "live.png")

    def plot(*argv):  # in process: matplotlib is imported once for the three figures
        return testlib.tool_in_process(plot_runs.main, list(argv), tmp)
    rc0, out0, _ = plot(d, "--out", png)
    path = os.path.join(d, "metrics.jsonl")
    with open(path, "a") as f:
        f.write('{"step": 21, "tokens": 86016, "train_lo')
    rc, out, err = plot(d, "--out", png)
    lines = err.strip().splitlines()
    check("plot_runs_live_run_unfinished_line_skipped", rc == 0 and rc0 == 0 and table_rows(out) == table_rows(out0) and
          len(lines) == 1 and lines[0] == f"warning: '{path}' line {len(base) + 1} is unfinished (no newline at the end; "
          "a run still writing it?): skipped", f"rc {rc}: {err.strip()}")
    # a complete last line without its newline yet is a line like the others
    with open(path, "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in base) + json.dumps({"step": 21, "tokens": 86016, "train_loss": 3.0}))
    rc, out, err = plot(d, "--out", png)
    check("plot_runs_live_run_complete_last_line_read", rc == 0 and table_rows(out)["live"][0] == "21" and not err.strip(),
          f"rc {rc} {table_rows(out)}: {err.strip()}")


def refusals(tmp, base):
    """One error line naming the file and line (or the flag), exit 1, no figure, nothing else
    written."""
    d = os.path.join(tmp, "bad")
    out = os.path.join(tmp, "bad.png")
    cases = [("step_1e400", '{"step": 1e400, "train_loss": 3.0, "tokens": 1}', "line 3 is not a metrics line (expected a JSON "
              "object with an integer step >= 0, found step inf)"),
             ("step_string", '{"step": "3", "train_loss": 3.0}', 'found step "3"'),
             ("step_fraction", '{"step": 2.5, "train_loss": 3.0}', "found step 2.5"),
             ("loss_string", '{"step": 3, "train_loss": "low", "tokens": 1}', 'line 3: "train_loss" is "low", expected a finite number or null'),
             ("loss_true", '{"step": 3, "val_loss": true, "tokens": 1}', 'line 3: "val_loss" is true, expected a finite number or null'),
             ("tokens_inf", '{"step": 3, "train_loss": 3.0, "tokens": Infinity}', 'line 3: "tokens" is inf'),
             ("tokens_negative", '{"step": 3, "train_loss": 3.0, "tokens": -5}', 'line 3: "tokens" is -5, expected a count >= 0'),
             ("line_is_a_list", '[3, 2.5]', "line 3 is not a JSON object: a list"),
             ("timing_overflow", '{"step": 3, "train_loss": 3.0, "tokens_per_s": 1e308, "ms": 1e308}', "has no tokens field")]
    for name, line, want in cases:
        rows = base[:2] if name != "timing_overflow" else [{k: v for k, v in r.items() if k != "tokens"} for r in base[:2]]
        write_run(d, rows)
        path = os.path.join(d, "metrics.jsonl")
        with open(path, "a") as f:
            f.write(line + "\n")
        before = testlib.tree_snapshot(tmp)
        rc, _, err = plot(d, "--out", out)
        check(f"plot_runs_refuses_{name}", testlib.one_error_line(rc, err) and f"'{path}'" in err and want in err and
              testlib.tree_snapshot(tmp) == before, f"rc {rc}: {err.strip()}")
    write_run(d, base)
    for name, argv, want in [("out_missing_dir", ["--out", os.path.join(tmp, "nope", "x.png")],
                              f"error: argument --out: the directory of '{os.path.join(tmp, 'nope', 'x.png')}' does not exist"),
                             ("out_is_a_directory", ["--out", tmp], f"error: argument --out: '{tmp}' is a directory"),
                             ("out_is_a_device", ["--out", "/dev/null"], "error: argument --out: '/dev/null' exists and is not a regular file"),
                             ("out_not_a_figure", ["--out", os.path.join(tmp, "x.txt")], "error: argument --out: expected a figure file name"),
                             ("smooth_nan", ["--smooth", "nan"], "error: argument --smooth: expected a finite number, found 'nan'"),
                             ("smooth_one", ["--smooth", "1"], "error: --smooth: expected a number in [0, 1), found 1.0"),
                             ("labels_count", ["--labels", "a,b"], "error: --labels: expected 1 names, found 2"),
                             ("unknown_flag", ["--bogus"], "error: unrecognized arguments: --bogus")]:
        before = testlib.tree_snapshot(tmp)
        rc, _, err = plot(d, *argv)
        check(f"plot_runs_refuses_{name}", testlib.one_error_line(rc, err) and err.startswith(want) and
              testlib.tree_snapshot(tmp) == before, f"rc {rc}: {err.strip()}")
    # the figure goes out under a temporary name and is renamed: mode 0644, no temporary left
    rc, _, err = plot(d, "--out", out)
    left = [n for n in os.listdir(tmp) if n.startswith(".bad.png")]
    check("plot_runs_figure_atomic_0644", rc == 0 and os.stat(out).st_mode & 0o777 == 0o644 and not left, f"rc {rc} {left} {err.strip()}")


def property_test(tmp, geo):
    """40 seeded mutations of two runs' metrics files and of the arguments: each run plots or
    ends in one error line, exit 1; never a traceback (in process, as the command runs it)."""
    rng = random.Random(29)
    fields = ["step", "tokens", "train_loss", "val_loss", "comm_bytes", "fidelity_rel_l2", "skipped", "window_rel_l2_geo",
              "window_rel_l2_geo_fp8ef", "tokens_per_s", "ms"]
    bad = []
    for i in range(40):
        runs = []
        for j in range(2):
            d = os.path.join(tmp, "prop", f"{i}_{j}")
            rows = [dict(r) for r in geo[:12]] + [{"step": 10, "tokens": 40960, "val_loss": 3.3}]
            lines = None
            for _ in range(rng.randrange(3)):
                r = rng.choice(rows)
                key = rng.choice(fields)
                if rng.random() < 0.2:
                    r.pop(key, None)
                else:
                    r[key] = rng.choice(testlib.BAD_JSON_VALUES)
            write_run(d, rows)
            if rng.random() < 0.15:  # cut at a random byte, or bytes that are not UTF-8
                p = os.path.join(d, "metrics.jsonl")
                data = open(p, "rb").read()
                open(p, "wb").write(data[:rng.randrange(len(data))] if rng.random() < 0.5 else data[:30] + b"\xff\x00" + data[30:])
            runs.append(d)
        argv = runs + ["--baseline", runs[0], "--smooth", "0.8", "--labels", "a,b", "--out", os.path.join(tmp, "prop", "p.png")]
        if rng.random() < 0.3:
            k = rng.randrange(len(argv))
            argv[k] = rng.choice(testlib.BAD_ARGS)
        status, _, err = testlib.tool_in_process(plot_runs.main, argv, os.path.join(tmp, "prop"))
        if not testlib.property_verdict(status, err):
            bad.append(f"{argv}: status {status} {err.strip()[-400:]}")
    check("plot_runs_property_no_traceback (40 mutations)", not bad, "; ".join(bad[:2]))


if __name__ == "__main__":
    sys.exit(main())
