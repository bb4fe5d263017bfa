"""Tests for scripts/eval_table.py on synthetic lm-eval results: the paper's column order (Table
III) whatever the order of the results, ReCoRD's F1 where the others take acc, other tasks after
the paper's columns, one dialect (the paper's heads, fractions, "Wins vs. X") also for one run, "wins vs" the baseline over the columns both have, the
newest results file of a directory, and the errors: one line naming the file, task and metric for
a results file that is a list or null, a metric that is NaN, true or a string; and a property
test: 50 seeded mutations of the arguments and files never end in a traceback. No lm-eval needed.

Prints "PASS name" / "FAIL name: detail" lines; exits 1 on any failure.

    python3 test/test_eval_table.py
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "test"))
import testlib  # noqa: E402

SCRIPT = os.path.join(REPO, "scripts", "eval_table.py")
sys.path.insert(0, os.path.join(REPO, "scripts"))
import eval_table  # noqa: E402

check = testlib.Checks()


def table(*args):
    r = subprocess.run([sys.executable, SCRIPT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return r.returncode, [[c.strip() for c in l.strip("|").split("|")] for l in r.stdout.splitlines() if l.startswith("| ")], r.stderr


def main():
    tmp = tempfile.mkdtemp(prefix="test_eval_table_")
    run = {"winogrande": {"acc,none": 0.52, "acc_stderr,none": 0.01}, "my_task": {"acc,none": 0.3},
           "record": {"f1,none": 0.25, "em,none": 0.24}, "boolq": {"acc,none": 0.6}, "lambada_openai": {"acc,none": 0.2, "perplexity,none": 80.0}}
    base = {"winogrande": {"acc,none": 0.51}, "record": {"f1,none": 0.30}, "boolq": {"acc,none": 0.55}, "lambada_openai": {"acc,none": 0.2}}
    os.makedirs(os.path.join(tmp, "run", "model"))
    json.dump({"results": {"boolq": {"acc,none": 0.1}}}, open(os.path.join(tmp, "run", "model", "results_old.json"), "w"))
    time.sleep(0.02)
    json.dump({"results": run}, open(os.path.join(tmp, "run", "model", "results_new.json"), "w"))
    json.dump({"results": base}, open(os.path.join(tmp, "base.json"), "w"))
    rc, rows, err = table(os.path.join(tmp, "run"), "--baseline", os.path.join(tmp, "base.json"), "--name", "geofp8", "--baseline-name", "fp32")
    check("eval_table_paper_column_order", rc == 0 and rows[0] == ["Model", "Method", "BOOLQ", "RCD-F1", "LAMB.", "WINO.", "my_task", "Wins vs. fp32"],
          f"rc {rc} {rows[:1]} {err}")
    # BoolQ 60 > 55 wins, ReCoRD 25 < 30 loses, LAMBADA 20 = 20 counts (a tie, as the paper's
    # column counts them: see paper_table), WinoGrande 52 > 51 wins
    check("eval_table_scores_and_wins", rows[2] == ["", "geofp8", "0.6000", "0.2500", "0.2000", "0.5200", "0.3000", "3/4"] and
          rows[1] == ["-", "fp32", "0.5500", "0.3000", "0.2000", "0.5100", "-", "–"], f"{rows[1:]}")
    # the same table as the --row form of it: one dialect
    rc2, rows2, err2 = table("--row", "-", "fp32", os.path.join(tmp, "base.json"), "--row", "-", "geofp8", os.path.join(tmp, "run"))
    check("eval_table_one_run_is_the_row_table", rc2 == 0 and rows2 == rows, f"{rows2} vs {rows}")
    rc, rows, err = table(os.path.join(tmp, "nothing"))
    check("eval_table_missing_path", rc == 1 and err.count("\n") == 1 and "'" + os.path.join(tmp, "nothing") + "' does not exist" in err, err)
    os.makedirs(os.path.join(tmp, "empty"))
    rc, rows, err = table(os.path.join(tmp, "empty"))
    check("eval_table_no_results", rc == 1 and "no lm-eval results_*.json under" in err, err)
    open(os.path.join(tmp, "bad.json"), "w").write("{}")
    rc, rows, err = table(os.path.join(tmp, "bad.json"))
    check("eval_table_not_results", rc == 1 and "is not an lm-eval results file" in err, err)
    refusals(tmp)
    paper_table(tmp)
    property_test(tmp)
    shutil.rmtree(tmp)
    return 1 if check.failed else 0


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def refusals(tmp):
    """Bad results files: one error line naming the file (and the task and metric), exit 1, no
    traceback, no file written."""
    d = os.path.join(tmp, "bad")
    os.makedirs(d)
    good = write(os.path.join(d, "good.json"), json.dumps({"results": {"boolq": {"alias": "boolq", "acc,none": 0.6,
                                                                                 "acc_stderr,none": "N/A"}}}))
    cases = [("list", "[1, 2]", "holds a list, expected an object"),
             ("null", "null", "holds null, expected an object"),
             ("results_list", '{"results": [0.5]}', "is not an lm-eval results file (expected an object with a \"results\" object, found a list)"),
             ("task_not_object", '{"results": {"boolq": 0.5}}', "task 'boolq': expected an object of metrics, found 0.5"),
             ("metric_nan", '{"results": {"boolq": {"acc,none": NaN}}}', "task 'boolq' metric 'acc,none': expected a finite number, found nan"),
             ("metric_inf", '{"results": {"boolq": {"acc,none": 1e400}}}', "task 'boolq' metric 'acc,none': expected a finite number, found inf"),
             ("metric_true", '{"results": {"piqa": {"acc,none": true}}}', "task 'piqa' metric 'acc,none': expected a finite number, found true"),
             ("metric_string", '{"results": {"piqa": {"acc,none": "0.5"}}}', "task 'piqa' metric 'acc,none': expected a finite number, found \"0.5\""),
             ("metric_bool_plain_key", '{"results": {"piqa": {"acc": false}}}', "metric 'acc': expected a finite number, found false"),
             ("not_json", "{\"results\": {", "is not JSON")]
    for name, text, want in cases:
        path = write(os.path.join(d, name + ".json"), text)
        before = testlib.tree_snapshot(tmp)
        for flag, argv in (("results", [path]), ("--baseline", [good, "--baseline", path])):
            rc, rows, err = table(*argv)
            check(f"eval_table_refuses_{name}{'_baseline' if flag != 'results' else ''}",
                  testlib.one_error_line(rc, err) and err.startswith(f"error: {flag}: '{path}' ") and want in err and not rows
                  and testlib.tree_snapshot(tmp) == before, f"rc {rc}: {err.strip()}")
    rc, rows, err = table(good)
    check("eval_table_alias_and_na_stderr_read", rc == 0 and rows[1] == ["-", "run", "0.6000", "–"], f"rc {rc} {rows} {err}")
    for name, argv, want in [("unknown_flag", [good, "--bogus"], "error: unrecognized arguments: --bogus"),
                             ("no_results_argument", [], "error: the following arguments are required: results"),
                             ("baseline_missing", [good, "--baseline", os.path.join(d, "nope.json")], "error: --baseline: '")]:
        rc, rows, err = table(*argv)
        check(f"eval_table_refuses_{name}", testlib.one_error_line(rc, err) and err.startswith(want), f"rc {rc}: {err.strip()}")


# The paper's Table III (its text, section VI-D): Model, Method, the 14 scores, its "Wins vs. FP32"
PAPER_TABLE = """600M FP32 0.5908 0.2679 0.7500 0.5532 0.8352 0.5090 0.5000 0.4423 0.4941 0.3120 0.2251 0.6719 0.5612 0.3716 -
600M BF16 0.6058 0.2321 0.7100 0.5608 0.8346 0.5307 0.4875 0.4231 0.4865 0.3158 0.2295 0.6806 0.5391 0.3873 7/14
600M Per-block_Euclidean 0.5679 0.1250 0.7100 0.5549 0.8205 0.5487 0.5188 0.6058 0.4795 0.3024 0.2161 0.6665 0.5478 0.3685 4/14
600M Euclidean 0.6119 0.4107 0.7100 0.5025 0.8271 0.5199 0.4969 0.5865 0.4824 0.3100 0.2201 0.6659 0.5320 0.3850 5/14
600M GIFT 0.6104 0.3036 0.7200 0.5054 0.8197 0.5307 0.5031 0.4712 0.4875 0.3033 0.2157 0.6763 0.5257 0.3722 7/14
300M FP32 0.5226 0.4107 0.6900 0.5528 0.8020 0.5271 0.5031 0.3846 0.4514 0.2986 0.2261 0.6507 0.5375 0.3223 -
300M Euclidean 0.5734 0.2857 0.6500 0.4878 0.7954 0.5271 0.5016 0.3654 0.4347 0.3043 0.2224 0.6480 0.5162 0.3334 4/14
300M Full_K-FAC 0.6064 0.4107 0.7000 0.5140 0.7799 0.5343 0.5063 0.3654 0.4225 0.3081 0.2188 0.6458 0.5335 0.3076 6/14
300M GIFT 0.5740 0.2321 0.7200 0.4420 0.7881 0.5848 0.4969 0.4038 0.4256 0.3014 0.2302 0.6621 0.5335 0.3089 7/14"""


def paper_table(tmp):
    """--row: the paper's Table III rebuilt from lm-eval-shaped results files holding its scores
    (given out of order, with other tasks' keys as lm-eval writes them): the paper's layout and
    order, its cells, and its own "Wins vs. FP32" column; CSV, --stderr, --percent; the errors."""
    import csv
    d = os.path.join(tmp, "paper")
    os.makedirs(d)
    rows = [line.split() for line in PAPER_TABLE.splitlines()]
    args = {}
    for model, method, *rest in rows:
        scores = [float(x) for x in rest[:14]]
        res = {task: {f"{metric},none": v, f"{metric}_stderr,none": 0.01, "alias": task}
               for (_, task, metric), v in zip(eval_table.PAPER_COLUMNS, scores)}
        path = write(os.path.join(d, f"results_{model}_{method}.json"), json.dumps({"results": res}))
        args[(model, method)] = ["--row", model, method.replace("_", " "), path]
    order = [("300M", "GIFT"), ("600M", "FP32"), ("600M", "BF16"), ("300M", "FP32"), ("600M", "Per-block_Euclidean"),
             ("600M", "Euclidean"), ("600M", "GIFT"), ("300M", "Euclidean"), ("300M", "Full_K-FAC")]
    argv = [x for k in order for x in args[k]] + ["--baseline-method", "FP32"]
    rc, table_rows, err = table(*argv)
    heads = ["Model", "Method"] + eval_table.PAPER_HEADS + ["Wins vs. FP32"]
    check("eval_table_paper_layout", rc == 0 and table_rows[0] == heads, f"rc {rc} {table_rows[:1]} {err}")
    # models in the order of their first row (300M's GIFT came first), each group's FP32 first,
    # the others as given; the model named once per group
    want_order = [("300M", "FP32"), ("", "GIFT"), ("", "Euclidean"), ("", "Full K-FAC"),
                  ("600M", "FP32"), ("", "BF16"), ("", "Per-block Euclidean"), ("", "Euclidean"), ("", "GIFT")]
    got_order = [(r[0], r[1]) for r in table_rows[1:]]
    check("eval_table_paper_row_order", got_order == want_order, f"{got_order}")
    paper = {(m, meth.replace("_", " ")): rest for m, meth, *rest in rows}
    bad = []
    model = None
    for r in table_rows[1:]:
        model = r[0] or model
        want = paper[(model, r[1])]
        if r[2:16] != want[:14] or (r[16] != "–" if want[14] == "-" else r[16] != want[14]):
            bad.append(f"{model} {r[1]}: {r[2:]} vs the paper's {want}")
    check("eval_table_paper_cells_and_wins_equal_the_paper", rc == 0 and not bad and len(table_rows) == 10, "; ".join(bad[:2]))
    rc, out, err = raw(*argv, "--format", "csv")
    parsed = list(csv.reader(out.splitlines())) if rc == 0 else []
    check("eval_table_paper_csv", rc == 0 and parsed[0] == heads and len(parsed) == 10 and all(r[0] in ("300M", "600M") for r in parsed[1:])
          and parsed[1][:3] == ["300M", "FP32", "0.5226"], f"rc {rc} {parsed[:2]} {err}")
    rc, table_rows, err = table(*argv, "--stderr", "--percent")
    check("eval_table_paper_stderr_percent", rc == 0 and table_rows[1][2] == "52.26 ± 1.00", f"rc {rc} {table_rows[1:2]} {err}")
    rc, table_rows, err = table(*args[("600M", "GIFT")], *args[("600M", "FP32")])
    check("eval_table_paper_default_baseline_first_row", rc == 0 and [r[1] for r in table_rows[1:]] == ["GIFT", "FP32"] and
          table_rows[0][-1] == "Wins vs. GIFT" and table_rows[1][-1] == "–" and table_rows[2][-1] == "7/14", f"rc {rc} {table_rows} {err}")
    for name, extra, want in [
            ("duplicate_method", args[("600M", "FP32")] * 2, "error: --row: model '600M' has method 'FP32' twice"),
            ("baseline_method_missing", args[("600M", "GIFT")] + ["--baseline-method", "FP32"],
             "error: --baseline-method: model '600M' has no row of method 'FP32' (its methods: GIFT)"),
            ("row_missing_path", ["--row", "600M", "FP32", os.path.join(d, "nope")], "error: --row 600M FP32: '"),
            ("row_and_results", [args[("600M", "FP32")][3]] + args[("600M", "GIFT")], "error: --row: the Table III rows replace RESULTS"),
            ("baseline_method_without_rows", [args[("600M", "FP32")][3], "--baseline-method", "FP32"], "error: --baseline-method: names the baseline among --row rows"),
            ("row_short", ["--row", "600M", "FP32"], "error: argument --row: expected 3 arguments")]:
        rc, out, err = raw(*extra)
        check(f"eval_table_paper_refuses_{name}", testlib.one_error_line(rc, err) and err.startswith(want), f"rc {rc}: {err.strip()}")


def raw(*args):
    r = subprocess.run([sys.executable, SCRIPT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return r.returncode, r.stdout, r.stderr


def property_test(tmp):
    """50 seeded mutations of a results file, a baseline and the arguments: each run succeeds
    or ends in one error line, exit 1; never a traceback (in process: the same entry point as the
    command, at a fraction of a subprocess's cost)."""
    rng = random.Random(29)
    d = os.path.join(tmp, "prop")
    os.makedirs(d)
    run = {"boolq": {"alias": "boolq", "acc,none": 0.6, "acc_stderr,none": 0.01}, "record": {"f1,none": 0.25, "em,none": 0.2},
           "my_task": {"acc,none": 0.3}, "piqa": {"acc,none": 0.7, "acc_norm,none": 0.71}}
    base = {"boolq": {"acc,none": 0.55}, "piqa": {"acc,none": 0.65}}
    bad = []
    for i in range(50):
        r, b = json.loads(json.dumps(run)), json.loads(json.dumps(base))
        doc = {"results": r}
        kind = rng.randrange(6)
        if kind == 0:    # a metric's value
            task = rng.choice(sorted(r))
            r[task][rng.choice(sorted(r[task]))] = rng.choice(testlib.BAD_JSON_VALUES)
        elif kind == 1:  # a task's metrics object
            r[rng.choice(sorted(r))] = rng.choice(testlib.BAD_JSON_VALUES)
        elif kind == 2:  # the document or its results
            doc = rng.choice([rng.choice(testlib.BAD_JSON_VALUES), {"results": rng.choice(testlib.BAD_JSON_VALUES)}])
        elif kind == 3:  # the baseline's
            task = rng.choice(sorted(b))
            b[task]["acc,none"] = rng.choice(testlib.BAD_JSON_VALUES)
        text = json.dumps(doc)
        if kind == 4:    # cut short, or bytes that are not UTF-8
            text = text[:rng.randrange(len(text))] if rng.random() < 0.5 else text[:10] + "\udcff\x00" + text[10:]
        rp = os.path.join(d, f"results_{i}.json")
        with open(rp, "w", errors="surrogateescape") as f:
            f.write(text)
        bp = write(os.path.join(d, f"base_{i}.json"), json.dumps({"results": b}))
        argv = [rp, "--baseline", bp, "--name", "run", "--baseline-name", "base"]
        if kind == 5:    # an argument
            k = rng.randrange(len(argv) + 1)
            if k == len(argv):
                argv.append(rng.choice(["--bogus", "--baseline", "-h"]))
            else:
                argv[k] = rng.choice(testlib.BAD_ARGS + [d])
        status, out, err = testlib.tool_in_process(eval_table.main, argv, d)
        if not testlib.property_verdict(status, err):
            bad.append(f"{argv} {text[:80]!r}: status {status} {err.strip()[-300:]}")
    check("eval_table_property_no_traceback (50 mutations)", not bad, "; ".join(bad[:2]))


if __name__ == "__main__":
    sys.exit(main())
