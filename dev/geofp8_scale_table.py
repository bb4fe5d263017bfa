"""geofp8_scale_table.py — the rows of dev/geofp8_scale_study.sh (see its header for the columns).

  python3 dev/geofp8_scale_table.py row OUT N TAG NAME SEED      one run's row (and OUT/results.jsonl)
  python3 dev/geofp8_scale_table.py summary OUT N TAG NAME SEEDS  mean ± std over the seeds' rows
  python3 dev/geofp8_scale_table.py report OUT                    the whole table from OUT/results.jsonl,
                                                                  with paired t-tests over the seeds

In the report, a difference is marked * when it exceeds seed noise: the paired t statistic
mean / (std / sqrt(n)) over the n seeds is beyond the two-sided 95% point of Student's t with
n - 1 degrees of freedom (4.30 for 3 seeds).
"""
import json
import math
import os
import signal
import sys

signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # a reader that stops early (| head) ends the table quietly


def metrics(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return None


def val_loss(out, n, tag, seed):
    rows = metrics(os.path.join(out, f"n{n}_{tag}_s{seed}", "metrics.jsonl")) or []
    v = [r["val_loss"] for r in rows if r.get("val_loss") is not None]
    return v[-1] if v else math.nan


def mean_std(xs):
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    if not xs:
        return math.nan, math.nan, 0
    m = sum(xs) / len(xs)
    s = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else math.nan
    return m, s, len(xs)


def fmt(x, f="%.3f"):
    return "—" if x is None or not math.isfinite(x) else f % x


def row(out, n, tag, name, seed):
    rows = metrics(os.path.join(out, f"n{n}_{tag}_s{seed}", "metrics.jsonl"))
    if rows is None:
        print(f"| {n} | {name} | {seed} | no metrics.jsonl |")
        return 1
    val = val_loss(out, n, tag, seed)
    base, fp8 = val_loss(out, n, "fp32", seed), val_loss(out, n, "fp8", seed)
    dval = 100.0 * (val / base - 1.0) if tag != "fp32" else 0.0
    dfp8 = 100.0 * (fp8 / base - 1.0)
    # the share of fp8's gap removed: only where fp8 is worse than fp32 on this seed (else there is no gap)
    recover = 1.0 - dval / dfp8 if tag not in ("fp32", "fp8") and math.isfinite(dfp8) and dfp8 > 0 else math.nan
    win = [r["window_rel_l2_geo"] / r["window_rel_l2_geo_fp8ef"] for r in rows
           if r.get("window_rel_l2_geo") is not None and r.get("window_rel_l2_geo_fp8ef")]
    one = [r["fidelity_rel_l2_geo"] / r["fidelity_rel_l2_geo_fp8"] for r in rows
           if r.get("fidelity_rel_l2_geo") is not None and r.get("fidelity_rel_l2_geo_fp8")]
    ms = [r["ms"] for r in rows if r.get("ms") is not None and "train_loss" in r]
    rec = {"n": n, "tag": tag, "seed": seed, "val_loss": val, "dval_pct": dval, "recover": recover,
           "win_ratio_mean": sum(win) / len(win) if win else math.nan, "win_ratio_max": max(win) if win else math.nan,
           "step_ratio_mean": sum(one) / len(one) if one else math.nan, "s_per_step": sum(ms) / len(ms) / 1000 if ms else math.nan}
    with open(os.path.join(out, "names.txt"), "a") as f:
        f.write(f"{tag}\t{name}\n")
    with open(os.path.join(out, "results.jsonl"), "a") as f:
        f.write(json.dumps({k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in rec.items()}) + "\n")
    print(f"| {n} | {name} | {seed} | {fmt(val, '%.5f')} | {fmt(dval, '%+.3f%%')} | {fmt(recover, '%.2f')} | "
          f"{fmt(rec['win_ratio_mean'])} ({fmt(rec['win_ratio_max'])}) | {fmt(rec['step_ratio_mean'])} | {fmt(rec['s_per_step'], '%.2f')} |",
          flush=True)
    return 0


def summary(out, n, tag, name, seeds):
    recs = {}
    for r in metrics(os.path.join(out, "results.jsonl")) or []:
        if str(r["n"]) == str(n) and r["tag"] == tag and str(r["seed"]) in seeds.split():
            recs[str(r["seed"])] = r  # the newest row of each seed
    col = lambda k: mean_std([r.get(k) for r in recs.values()])
    def ms(k, f):
        m, s, c = col(k)
        return "—" if c == 0 else (f % m) + (" ± " + f % s if c > 1 else "")
    wmax = max((r["win_ratio_max"] for r in recs.values() if r.get("win_ratio_max") is not None), default=math.nan)
    print(f"| **{n}** | **{name}** | {len(recs)} seeds | {ms('val_loss', '%.5f')} | {ms('dval_pct', '%+.3f%%')} | {ms('recover', '%.2f')} | "
          f"{ms('win_ratio_mean', '%.3f')} ({fmt(wmax)}) | {ms('step_ratio_mean', '%.3f')} | {ms('s_per_step', '%.2f')} |", flush=True)
    return 0


T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}  # two-sided 95%, by degrees of freedom


def paired(xs):
    """'mean ± std' of paired differences, with * when they exceed seed noise (t-test)."""
    m, sd, n = mean_std(xs)
    if n == 0:
        return "—"
    if n == 1 or not sd > 0:
        return "%+.3f%%" % m
    t = m / (sd / math.sqrt(n))
    return "%+.3f ± %.3f%%%s" % (m, sd, " *" if abs(t) > T95.get(n - 1, 1.96) else "")


def report(out):
    recs = {}
    results = metrics(os.path.join(out, "results.jsonl"))
    if not results:
        print(f"error: {os.path.join(out, 'results.jsonl')}: missing, unreadable or empty (expected the rows of dev/geofp8_scale_study.sh)",
              file=sys.stderr)
        return 1
    for r in results:
        recs[(int(r["n"]), r["tag"], str(r["seed"]))] = r  # the newest row of each run
    names = {}
    for line in open(os.path.join(out, "names.txt")) if os.path.exists(os.path.join(out, "names.txt")) else []:
        tag, _, name = line.rstrip("\n").partition("\t")
        names[tag] = name
    def model_rel_l2(n, tag, seed):  # the whole gradient's RelL2, mean over the fidelity steps after step 10
        rows = metrics(os.path.join(out, f"n{n}_{tag}_s{seed}", "metrics.jsonl")) or []
        f = [r["fidelity_rel_l2"] for r in rows if r.get("fidelity_rel_l2") is not None and r["step"] > 10]
        return sum(f) / len(f) if f else math.nan
    print("| N | mode | seeds | val loss | vs fp32 (paired) | vs fp8 (paired) | window geo / fp8+EF: mean (max) | step geo / fp8 | model RelL2 | s/step |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    order = []
    for (n, tag, _) in recs:
        if (n, tag) not in order:
            order.append((n, tag))
    for n, tag in sorted(order, key=lambda k: (-k[0], order.index(k))):
        rows = {seed: r for (m, t, seed), r in recs.items() if m == n and t == tag}
        def diff(other):
            out_ = []
            for seed, r in rows.items():
                o = recs.get((n, other, seed))
                if o and r.get("val_loss") and o.get("val_loss"):
                    out_.append(100.0 * (r["val_loss"] / o["val_loss"] - 1.0))
            return out_
        vm, vs, vn = mean_std([r.get("val_loss") for r in rows.values()])
        wm, ws, wn = mean_std([r.get("win_ratio_mean") for r in rows.values()])
        wmax = max((r["win_ratio_max"] for r in rows.values() if r.get("win_ratio_max") is not None), default=math.nan)
        sm, ss, sn = mean_std([r.get("step_ratio_mean") for r in rows.values()])
        tm, _, _ = mean_std([r.get("s_per_step") for r in rows.values()])
        rm, rs, rn = mean_std([model_rel_l2(n, tag, seed) for seed in rows])
        rel = f"{fmt(rm)} ± {fmt(rs)}" if rn else "—"
        print(f"| {n} | {names.get(tag, tag)} | {len(rows)} | {fmt(vm, '%.5f')} ± {fmt(vs, '%.5f')} | "
              f"{paired(diff('fp32')) if tag != 'fp32' else '—'} | {paired(diff('fp8')) if tag not in ('fp32', 'fp8') else '—'} | "
              f"{fmt(wm)} ± {fmt(ws)} ({fmt(wmax)}) | {fmt(sm)} ± {fmt(ss)} | {rel} | {fmt(tm, '%.2f')} |" if wn else
              f"| {n} | {names.get(tag, tag)} | {len(rows)} | {fmt(vm, '%.5f')} ± {fmt(vs, '%.5f')} | "
              f"{paired(diff('fp32')) if tag != 'fp32' else '—'} | {paired(diff('fp8')) if tag not in ('fp32', 'fp8') else '—'} | — | "
              f"{fmt(sm) + ' ± ' + fmt(ss) if sn else '—'} | {rel} | {fmt(tm, '%.2f')} |")
    return 0


if __name__ == "__main__":
    a = sys.argv
    if len(a) == 7 and a[1] == "row":
        sys.exit(row(a[2], a[3], a[4], a[5], a[6]))
    if len(a) == 7 and a[1] == "summary":
        sys.exit(summary(a[2], a[3], a[4], a[5], a[6]))
    if len(a) == 3 and a[1] == "report":
        sys.exit(report(a[2]))
    print(__doc__.strip(), file=sys.stderr)
    sys.exit(2)
