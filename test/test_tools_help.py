"""Every tool's --help gives each flag's default: the Python tools (scripts/, data/) through
cli_util's help formatter, the C++ ones (the trainer, build/fidelity, build/dump_logits) from
their tables. An option that takes a value must say its default (or that it is required); a
bare switch (--replace) needs none. And --help exits 0 with nothing on stderr.

Prints "PASS name" / "FAIL name: detail" lines; exits 1 on any failure.

    python3 test/test_tools_help.py
"""
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "test"))
import testlib  # noqa: E402

check = testlib.Checks()
PY_TOOLS = ["scripts/eval_table.py", "scripts/export_hf.py", "scripts/import_hf.py", "scripts/plot_runs.py",
            "scripts/plot_scaling.py", "scripts/sample.py", "scripts/scaling_model.py", "scripts/study.py", "data/openwebtext.py",
            "data/prepare_text.py", "data/make_tokenizer_table.py", "dev/flash_model.py"]
CPP_TOOLS = ["train_llama_cpu", "build/fidelity", "build/dump_logits"]


def option_blocks(text):
    """[(first line, whole help text)] of argparse's options: a line starting '  -', with the
    indented lines after it."""
    blocks, cur = [], None
    for line in text.splitlines():
        if re.match(r"  -", line):
            cur = [line]
            blocks.append(cur)
        elif cur is not None and line.startswith("      "):
            cur.append(line)
        else:
            cur = None
    return [(b[0], " ".join(x.strip() for x in b)) for b in blocks]


def takes_value(first):
    """argparse shows a metavar (FOO, {a,b}, or A B C) after an option that takes one."""
    names = first.strip().split("  ")[0]
    return bool(re.search(r"-[\w-]+ ([A-Z_{]|[A-Z]+ )", names))


def main():
    for tool in PY_TOOLS:
        r = subprocess.run([sys.executable, os.path.join(REPO, tool), "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        missing = [first.strip().split("  ")[0] for first, text in option_blocks(r.stdout)
                   if takes_value(first) and "default" not in text and "required" not in text]
        check(f"help_defaults_{os.path.basename(tool)}", r.returncode == 0 and not r.stderr and option_blocks(r.stdout) and not missing,
              f"rc {r.returncode} {r.stderr[-200:]} without a default: {missing}")
    for tool in CPP_TOOLS:
        path = os.path.join(REPO, tool)
        if not os.access(path, os.X_OK):
            print(f"SKIP help_defaults_{os.path.basename(tool)}: {tool} is not built")
            continue
        r = subprocess.run([path, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        flags = [l for l in r.stdout.splitlines() if re.match(r"  -", l)]
        missing = [l.split()[0] for l in flags if "default" not in l]
        check(f"help_defaults_{os.path.basename(tool)}", r.returncode == 0 and not r.stderr and flags and not missing,
              f"rc {r.returncode} {r.stderr[-200:]} without a default: {missing}")
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
