#!/usr/bin/env python3
"""The downstream table of an lm-eval run in the paper's column order (its Table III), with
"wins vs" a baseline run's results.

  python3 scripts/eval_table.py RESULTS [--baseline BASE_RESULTS] [--name NAME]

RESULTS and BASE_RESULTS: lm-eval's results_*.json, or a directory searched for the newest one
(scripts/eval_downstream.sh writes them). Each paper column maps to a harness task and metric
(PAPER_COLUMNS); tasks of the run that are not paper columns follow them, by their "acc" (else
their first metric). Scores are in percent. "wins vs" counts the columns where the run beats
the baseline (both present), as the paper's last column does against FP32.
"""
import glob
import os

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


def load(path, flag):
    """{task: {metric: value}} from a results file or the newest results_*.json under a directory.
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
            if "stderr" in k or ("," not in k and isinstance(v, str)):
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


def main(argv=None):
    ap = cli_util.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results")
    ap.add_argument("--baseline")
    ap.add_argument("--name", default="run")
    ap.add_argument("--baseline-name", default="baseline")
    a = ap.parse_args(argv)
    run, path = load(a.results, "results")
    cols = columns(run)
    if not cols:
        die(f"results: '{path}' holds no task with a score")
    base = load(a.baseline, "--baseline")[0] if a.baseline else None
    header = ["model"] + [c for c, _, _ in cols] + (["wins vs " + a.baseline_name] if base else [])
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    rows = [(a.name, run)] + ([(a.baseline_name, base)] if base else [])
    for name, res in rows:
        cells = []
        for _, task, metric in cols:
            v = res.get(task, {}).get(metric)
            cells.append("%.2f" % (100.0 * v) if v is not None else "-")
        if base:
            if res is run:
                wins = sum(1 for _, t, m in cols if m in run.get(t, {}) and m in base.get(t, {}) and run[t][m] > base[t][m])
                both = sum(1 for _, t, m in cols if m in run.get(t, {}) and m in base.get(t, {}))
                cells.append(f"{wins}/{both}")
            else:
                cells.append("-")
        print("| " + " | ".join([name] + cells) + " |")


if __name__ == "__main__":
    cli_util.run(main)
