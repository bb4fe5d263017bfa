#!/usr/bin/env python3
"""The downstream table of lm-eval runs in the paper's column order: one run against a
baseline, or the paper's whole Table III (Model x Method rows).

  python3 scripts/eval_table.py RESULTS [--baseline BASE_RESULTS] [--name NAME]
  python3 scripts/eval_table.py --row 600M FP32 out/600m_fp32/eval --row 600M GIFT out/600m_geo/eval \
      --row 300M FP32 out/300m_fp32/eval --row 300M GIFT out/300m_geo/eval [--baseline-method FP32]
      [--stderr] [--percent] [--format markdown|csv]

RESULTS, BASE_RESULTS and each --row's path: lm-eval's results_*.json, or a directory searched
for the newest one (scripts/eval_downstream.sh writes them). Each paper column maps to a harness
task and metric (PAPER_COLUMNS); tasks that are not paper columns follow them, by their "acc"
(else their first metric).

One dialect, the paper's, in both forms: its column heads (BOOLQ, CB-ACC, ..., LAMB-STD), scores
as fractions with four decimals, "Model" and "Method" columns and a last column "Wins vs. X"
counting the columns where a row scores at least the baseline's (both present). A tie counts, as
in the paper's last column: its 300M Euclidean and Full K-FAC rows (4/14, 6/14) each include a
task equal to FP32's.

One run (RESULTS [--baseline BASE]): the baseline's row (--baseline-name) first, then the run's
(--name), under the model --model (default "-"); the same as --row MODEL BASELINE_NAME BASE
--row MODEL NAME RESULTS.

--row MODEL METHOD PATH (Table III): rows grouped by model in the order the models first appear,
each group's baseline first (the method --baseline-method names, default the group's first row);
scores as fractions with four decimals like the paper's (--percent: in percent); --stderr adds
lm-eval's standard error to each cell ("0.5908 ± 0.0123"); the last column counts the wins
(ties included) against the group's baseline over the columns both have ("7/14"; the
baseline's own cell "–").
Markdown by default, --format csv for a spreadsheet (every row names its model there).
"""
import csv
import glob
import os
import sys

import cli_util
from cli_util import die

# (column of Table III, lm-eval task, metric)
PAPER_COLUMNS = [
    ("BoolQ", "boolq", "acc"), ("CB", "cb", "acc"), ("COPA", "copa", "acc"), ("MultiRC", "multirc", "acc"),
    ("ReCoRD-F1", "record", "f1"), ("RTE", "rte", "acc"), ("WiC", "wic", "acc"), ("WSC", "wsc", "acc"),
    ("LAMBADA (OpenAI)", "lambada_openai", "acc"), ("RACE", "race", "acc"), ("MathQA", "mathqa", "acc"),
    ("PIQA", "piqa", "acc"), ("WinoGrande", "winogrande", "acc"), ("LAMBADA-standard", "lambada_standard", "acc"),
]
PAPER_TASKS = ",".join(t for _, t, _ in PAPER_COLUMNS)
# the column heads of the paper's Table III, in PAPER_COLUMNS' order
PAPER_HEADS = ["BOOLQ", "CB-ACC", "COPA", "MUL-RC", "RCD-F1", "RTE", "WiC", "WSC", "LAMB.", "RACE", "M-QA", "PIQA", "WINO.", "LAMB-STD"]


def load(path, flag, stderrs=None):
    """{task: {metric: value}} from a results file or the newest results_*.json under a directory
    (and, into stderrs when given, {task: {metric: standard error}} where lm-eval has one).
    lm-eval keys a metric as "name,filter" ("acc,none", "f1,none"); a string under a key without a
    comma is a label ("alias"), the stderr entries are left out (lm-eval writes "N/A" there when it
    has none). Every other entry must be a finite number: a score that is NaN, true or "0.5" is an
    error naming the file, task and metric, never a cell of the table."""
    if not os.path.exists(path):
        die(f"{flag}: '{path}' does not exist")
    if os.path.isdir(path):
        found = []
        for p in glob.glob(os.path.join(path, "**", "results_*.json"), recursive=True):
            try:
                found.append((os.path.getmtime(p), p))
            except OSError:  # removed while we looked
                pass
        if not found:
            die(f"{flag}: no lm-eval results_*.json under '{path}'")
        path = max(found)[1]
    data = cli_util.read_json(path, dict, flag)
    results = data.get("results")
    if not isinstance(results, dict):
        die(f"{flag}: '{path}' is not an lm-eval results file (expected an object with a \"results\" object, "
            f"found {cli_util.describe(results) if 'results' in data else 'none'})")
    out = {}
    for task, metrics in results.items():
        if not isinstance(metrics, dict):
            die(f"{flag}: '{path}' task '{task}': expected an object of metrics, found {cli_util.describe(metrics)}")
        out[task] = {}
        for k, v in metrics.items():
            if "stderr" in k:
                if stderrs is not None and cli_util.finite_number(v):
                    stderrs.setdefault(task, {})[k.split(",")[0].replace("_stderr", "")] = v
                continue
            if "," not in k and isinstance(v, str):
                continue
            if not cli_util.finite_number(v):
                die(f"{flag}: '{path}' task '{task}' metric '{k}': expected a finite number, found {cli_util.describe(v)}")
            out[task][k.split(",")[0]] = v
    return out, path


def columns(run):
    """[(column, task, metric)]: the paper's columns the run has, then its other tasks."""
    cols = [c for c in PAPER_COLUMNS if c[1] in run and c[2] in run[c[1]]]
    paper_tasks = {t for _, t, _ in PAPER_COLUMNS}
    for task in sorted(run):
        if task not in paper_tasks and run[task]:
            metric = "acc" if "acc" in run[task] else sorted(run[task])[0]
            cols.append((task, task, metric))
    return cols


def paper_table(a):
    """The --row table (Table III's layout): markdown or CSV on stdout."""
    groups = {}  # model -> [(method, scores, stderrs, path)], models in order of appearance
    for r in a.row:
        model, method, path = r[:3]
        flag = r[3] if len(r) > 3 else f"--row {model} {method}"  # one-run mode names its own flags
        if not model or not method:
            die(f"--row: expected MODEL METHOD PATH with a model and a method, found {model!r} {method!r}")
        if any(m == method for m, _, _, _ in groups.get(model, [])):
            die(f"--row: model '{model}' has method '{method}' twice")
        errs = {}
        scores, found = load(path, flag, errs)
        groups.setdefault(model, []).append((method, scores, errs, found))
    for model, rows in groups.items():
        names = [m for m, _, _, _ in rows]
        base = a.baseline_method if a.baseline_method is not None else names[0]
        if base not in names:
            die(f"--baseline-method: model '{model}' has no row of method '{base}' (its methods: {', '.join(names)})")
        rows.sort(key=lambda r: r[0] != base)  # the baseline first, the others as given
    every = {}
    for rows in groups.values():
        for _, scores, _, _ in rows:
            for task, metrics in scores.items():
                every.setdefault(task, {}).update(metrics)
    cols = columns(every)
    if not cols:
        die("--row: no run holds a task with a score")
    heads = [PAPER_HEADS[PAPER_COLUMNS.index(c)] if c in PAPER_COLUMNS else c[0] for c in cols]
    firsts = {rows[0][0] for rows in groups.values()}  # each group's baseline: named where all share one
    base_label = a.baseline_method if a.baseline_method is not None else (firsts.pop() if len(firsts) == 1 else "baseline")
    header = ["Model", "Method"] + heads + [f"Wins vs. {base_label}"]
    scale, fmt = (100.0, "%.2f") if a.percent else (1.0, "%.4f")
    table = []
    for model, rows in groups.items():
        base = rows[0][1]
        for k, (method, scores, errs, _) in enumerate(rows):
            cells = []
            for _, task, metric in cols:
                v = scores.get(task, {}).get(metric)
                cell = "-" if v is None else fmt % (scale * v)
                e = errs.get(task, {}).get(metric)
                if a.stderr and v is not None and e is not None:
                    cell += " ± " + fmt % (scale * e)
                cells.append(cell)
            both = [(t, m) for _, t, m in cols if m in scores.get(t, {}) and m in base.get(t, {})]
            wins = "–" if k == 0 else f"{sum(1 for t, m in both if scores[t][m] >= base[t][m])}/{len(both)}"
            table.append([model, method] + cells + [wins])
    if a.format == "csv":
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(header)
        w.writerows(table)
        return
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    last = None
    for row in table:
        shown = [row[0] if row[0] != last else ""] + row[1:]  # the model once per group, as the paper prints it
        last = row[0]
        print("| " + " | ".join(shown) + " |")


def main(argv=None):
    ap = cli_util.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="?", help="one run's results (or use --row)")
    ap.add_argument("--baseline", help="one run: the baseline's results, for a \"wins vs\" column (default: none)")
    ap.add_argument("--name", default="run", help="one run: its label (default: run)")
    ap.add_argument("--baseline-name", default="baseline", help="one run: the baseline's label (default: baseline)")
    ap.add_argument("--model", default="-", help="one run: the Model column (default: -)")
    ap.add_argument("--row", nargs=3, action="append", metavar=("MODEL", "METHOD", "PATH"),
                    help="Table III: one row (repeat; default: none, one run's table); PATH as RESULTS")
    ap.add_argument("--baseline-method", help="Table III: the method each model's rows are compared with (default: each model's first row)")
    ap.add_argument("--stderr", action="store_true", help="each score with its standard error")
    ap.add_argument("--percent", action="store_true", help="scores in percent (default: fractions, as the paper)")
    ap.add_argument("--format", choices=["markdown", "csv"], default="markdown", help="output format (default: markdown)")
    a = ap.parse_args(argv)
    if a.row:
        if a.results is not None or a.baseline is not None:
            die("--row: the Table III rows replace RESULTS and --baseline; pass either")
        return paper_table(a)
    if a.results is None:
        die("the following arguments are required: results (or --row MODEL METHOD PATH)")
    if a.baseline_method is not None:
        die("--baseline-method: names the baseline among --row rows; one run's baseline is --baseline")
    run, path = load(a.results, "results")
    if not columns(run):
        die(f"results: '{path}' holds no task with a score")
    if a.baseline and a.baseline_name == a.name:
        die(f"--baseline-name: the run and its baseline need two names, found '{a.name}' for both")
    a.row = ([(a.model, a.baseline_name, a.baseline, "--baseline")] if a.baseline else []) + [(a.model, a.name, a.results, "results")]
    if a.baseline:
        a.baseline_method = a.baseline_name
    return paper_table(a)


if __name__ == "__main__":
    cli_util.run(main)
