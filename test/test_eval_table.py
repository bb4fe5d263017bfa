"""Tests for scripts/eval_table.py on synthetic lm-eval results: the paper's column order (Table
III) whatever the order of the results, ReCoRD's F1 where the others take acc, other tasks after
the paper's columns, scores in percent, "wins vs" the baseline over the columns both have, the
newest results file of a directory, and the errors. No lm-eval needed.

Prints "PASS name" / "FAIL name: detail" lines; exits 1 on any failure.

    python3 test/test_eval_table.py
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "test"))
import testlib  # noqa: E402

SCRIPT = os.path.join(REPO, "scripts", "eval_table.py")
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
    check("eval_table_paper_column_order", rc == 0 and rows[0] == ["model", "BoolQ", "ReCoRD-F1", "LAMBADA (OpenAI)", "WinoGrande", "my_task", "wins vs fp32"],
          f"rc {rc} {rows[:1]} {err}")
    # BoolQ 60 > 55 wins, ReCoRD 25 < 30 loses, LAMBADA 20 = 20 is no win, WinoGrande 52 > 51 wins
    check("eval_table_scores_and_wins", rows[1] == ["geofp8", "60.00", "25.00", "20.00", "52.00", "30.00", "2/4"] and
          rows[2] == ["fp32", "55.00", "30.00", "20.00", "51.00", "-", "-"], f"{rows[1:]}")
    rc, rows, err = table(os.path.join(tmp, "nothing"))
    check("eval_table_missing_path", rc == 1 and err.count("\n") == 1 and "'" + os.path.join(tmp, "nothing") + "' does not exist" in err, err)
    os.makedirs(os.path.join(tmp, "empty"))
    rc, rows, err = table(os.path.join(tmp, "empty"))
    check("eval_table_no_results", rc == 1 and "no lm-eval results_*.json under" in err, err)
    open(os.path.join(tmp, "bad.json"), "w").write("{}")
    rc, rows, err = table(os.path.join(tmp, "bad.json"))
    check("eval_table_not_results", rc == 1 and "is not an lm-eval results file" in err, err)
    shutil.rmtree(tmp)
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
