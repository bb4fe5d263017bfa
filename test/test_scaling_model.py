"""Tests for scripts/scaling_model.py on synthetic 1-GPU runs whose predicted step times are known
in closed form (alpha = 0 or a chosen latency, a chosen bus bandwidth), and the parameter count
against the CPU engine's own config table. Every numeric flag is range-checked (one error line
naming it, exit 1), bad run files are refused by file and line, and a property test of 40 seeded
mutations of the arguments and run files never ends in a traceback.

Prints "PASS name" / "FAIL name: detail" lines and exits 1 on any failure.

    python3 test/test_scaling_model.py
"""
import contextlib
import io
import json
import os
import random
import re
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))
sys.path.insert(0, os.path.join(REPO, "test"))
import scaling_model as sm  # noqa: E402
import testlib  # noqa: E402
from testlib import Checks  # noqa: E402

check = Checks()


def testlib_one(out):
    return testlib.one_error_line(out.returncode, out.stderr)


def close(a, b, rel=1e-12):
    return abs(a - b) <= rel * max(1.0, abs(b))


def write_run(root, name, fwd, bwd, opt, comm, nccl, steps=6, layers=None):
    d = os.path.join(root, name)
    os.makedirs(d)
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        for s in range(1, steps + 1):
            warm = 50.0 if s <= 2 else 0.0  # the warm-up steps, skipped by --skip-steps 2
            f.write(json.dumps({"step": s, "tokens": 1024 * s, "train_loss": 5.0, "ms": 1.0, "t_forward_ms": fwd + warm, "t_backward_ms": bwd,
                                "t_optimizer_ms": opt, "t_comm_ms": comm, "t_nccl_ms": nccl}) + "\n")
        f.write(json.dumps({"step": steps, "val_loss": 5.1}) + "\n")
    if layers:
        with open(os.path.join(d, "geofp8_layers.txt"), "w") as f:
            f.write("".join(f"{l} 1.0\n" for l in layers))
    return d


def run(argv):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        table = sm.main(argv)
    return table, buf.getvalue()


# the parameter count of the presets against the CPU engine's config table
presets = sm.read_presets()
engine = os.path.join(REPO, "train_llama_cpu")
for name in ["tiny", "d12"]:
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([engine, "-e", name, "-b", "1", "-t", "16", "-x", "1", "-v", "0", "-n", "-1", "-o", tmp, "--overwrite", "1"],
                             capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    m = re.search(r"parameters\s*\|\s*(\d+)", out.stdout)
    got = sm.model_shapes(presets[name])[0] if name in presets else -1
    check(f"scaling_model_params_{name}_match_the_engine", m is not None and int(m.group(1)) == got,
          f"model {got}, engine {m.group(1) if m else out.stdout[-300:] + out.stderr[-300:]}")

# one all-reduce: 2(N-1)/N S / busbw plus the latency hops
S, N, B = 1e9, 4, 100.0
check("scaling_model_allreduce_bandwidth_term", close(sm.allreduce_ms(S, N, 0.0, B, "ring"), 2 * 3 / 4 * 1e9 / 1e11 * 1e3),
      str(sm.allreduce_ms(S, N, 0.0, B, "ring")))
lat = [sm.allreduce_ms(0.0, 64, 10.0, B, a) for a in ("ring", "tree", "auto")]
check("scaling_model_allreduce_latency", close(lat[0], 2 * 63 * 0.01) and close(lat[1], 2 * 6 * 0.01) and close(lat[2], lat[1]), str(lat))
check("scaling_model_one_gpu_sends_nothing", sm.allreduce_ms(S, 1, 10.0, B, "ring") == 0.0 and sm.broadcast_ms(S, 1, 10.0, B) == 0.0)

tiny = presets["tiny"]
P, U, widths = sm.model_shapes(tiny)
with tempfile.TemporaryDirectory() as root:
    fwd, bwd, opt = 10.0, 40.0, 5.0
    r32 = write_run(root, "fp32", fwd, bwd, opt, comm=7.0, nccl=4.0)   # codec 3 ms
    r8 = write_run(root, "fp8", fwd, bwd, opt, comm=9.0, nccl=4.0)     # codec 5 ms
    rg = write_run(root, "geofp8", fwd, bwd, opt, comm=9.0, nccl=4.0, layers=["layers.0.fc2", "layers.2.fc1"])
    busbw, gpus = 0.05, [2, 8]  # GB/s: tiny's 55 MB of fp32 gradients take about a second, far above the backward
    base = ["--model", "tiny", "--run", f"fp32={r32}", "--run", f"fp8={r8}", "--run", f"geofp8={rg}", "--alpha-us", "0",
            "--busbw-gbs", str(busbw), "--gpus", ",".join(map(str, gpus)), "--refresh", "10"]
    table, text = run(base)
    ar = lambda nbytes, n: 2.0 * (n - 1) / n * nbytes / (busbw * 1e9) * 1e3
    ok = True
    for n in gpus:
        want32 = fwd + bwd + 3.0 + ar(4.0 * P, n) + ar(4.0, n) + opt  # ar(4.0): the non-finite flag
        want8 = fwd + bwd + 5.0 + ar(4.0 * U, n) + ar(float(P), n) + ar(24.0 * U, n) + ar(4.0, n) + opt
        ok &= close(table[(n, "fp32", False)][0], want32) and close(table[(n, "fp8", False)][0], want8)
        ok &= close(table[(n, "fp8", False)][1], 100.0 * (want32 - want8) / want32)
    check("scaling_model_step_without_overlap_closed_form", ok, str({k: v for k, v in table.items() if not k[2]}))
    # geofp8 = fp8 + the amortized refresh of its two listed units (fc2: d_in FF, fc1: d_in C), r 32, 8 more sketch columns
    extra = 0.0
    for d in (tiny["FF"], tiny["C"]):
        k = min(32 + 8, d)
        extra += ar((4.0 * d * k + 8) / 10, 8) + (4.0 * (d * 32 + 32 + 2) / 10) / (busbw * 1e9) * 1e3
    got = table[(8, "geofp8", False)][0] - table[(8, "fp8", False)][0]
    check("scaling_model_geofp8_refresh_amortized", close(got, extra, 1e-9), f"{got} vs {extra}")
    # geofp8's refresh steps go out in buckets, with the refresh exposed: with --refresh 1 and
    # overlap, geofp8 = fp8 + the whole refresh (10 times the amortized one above), whether the
    # step is communication-bound (busbw above) or compute-bound (a 1000x faster link)
    t1, _ = run(base[:-1] + ["1"])
    got1 = t1[(8, "geofp8", True)][0] - t1[(8, "fp8", True)][0]
    fast = base[:base.index("--busbw-gbs") + 1] + [str(busbw * 1000)] + base[base.index("--busbw-gbs") + 2:-1] + ["1"]
    tf, _ = run(fast)
    extra_fast = sum(ar((4.0 * d * min(40, d) + 8), 8) / 1000 + (4.0 * (d * 32 + 34)) / (busbw * 1000 * 1e9) * 1e3 for d in (tiny["FF"], tiny["C"]))
    gotf = tf[(8, "geofp8", True)][0] - tf[(8, "fp8", True)][0]
    check("scaling_model_refresh_in_buckets_exposed", close(got1, 10 * extra, 1e-9) and close(gotf, extra_fast, 1e-9) and
          t1[(8, "geofp8", True)][0] < t1[(8, "geofp8", False)][0], f"refresh 1: {got1} vs {10 * extra}; fast link {gotf} vs {extra_fast}")
    # overlapped, communication-bound: 4 buckets ready every bwd/4; each one's codec share and
    # collectives take c > bwd/4, so the last finishes at bwd/4 + 4c
    table, _ = run(base + ["--buckets", "4"])
    c = 3.0 / 4 + ar(4.0 * P / 4, 8)
    want = fwd + max(bwd, bwd / 4 + 4 * c) + ar(4.0, 8) + opt
    check("scaling_model_overlap_comm_bound_closed_form", close(table[(8, "fp32", True)][0], want), f"{table[(8, 'fp32', True)][0]} vs {want}")
    # overlapped, compute-bound (fast link): only the last bucket's codec and collectives stick out;
    # with 2 micro-steps only the second one's backward (bwd/2) overlaps, which changes nothing here
    fast = ["--busbw-gbs", "1000", "--buckets", "4"]
    for accum in (1, 2):
        table, _ = run(base + fast + ["--accum", str(accum)])
        c = 3.0 / 4 + 2.0 * 7 / 8 * (4.0 * P / 4) / 1e12 * 1e3
        want = fwd + bwd + c + 2.0 * 7 / 8 * 4.0 / 1e12 * 1e3 + opt
        check(f"scaling_model_overlap_compute_bound_accum{accum}", c < bwd / accum / 4 and close(table[(8, "fp32", True)][0], want),
              f"{table[(8, 'fp32', True)][0]} vs {want}")

    # a fixed global batch of 8192 tokens: on 2 GPUs each does 4096 = 4x the runs' 1024 tokens per step
    table, _ = run(base + ["--global-tokens", "8192"])
    want = 4 * (fwd + bwd) + 3.0 + ar(4.0 * P, 2) + ar(4.0, 2) + opt
    check("scaling_model_fixed_global_batch", close(table[(2, "fp32", False)][0], want), f"{table[(2, 'fp32', False)][0]} vs {want}")

    # the paper's figures printed next to the prediction for its setting
    _, text = run(["--model", "llama600m", "--estimate", "--gpus", "64"])
    check("scaling_model_paper_setting_line", "the paper measured +7.60%" in text and "the paper measured +10.79%" in text, text[-400:])

    # errors: one line, exit 1 (a CPU-engine run has no phase times)
    cpu = os.path.join(root, "cpu")
    os.makedirs(cpu)
    with open(os.path.join(cpu, "metrics.jsonl"), "w") as f:
        f.write("".join(json.dumps({"step": s, "train_loss": 5.0, "ms": 3.0}) + "\n" for s in range(1, 5)))
    # a bucketed run (its t_comm_ms is the unhidden part only) is refused
    bk = write_run(root, "bucketed", 10.0, 20.0, 1.0, 2.0, 1.0)
    rows = [json.loads(l) for l in open(os.path.join(bk, "metrics.jsonl"))]
    with open(os.path.join(bk, "metrics.jsonl"), "w") as f:
        f.write("".join(json.dumps(dict(r, comm_buckets_overlapped=3) if "train_loss" in r else r) + "\n" for r in rows))
    for name, argv in [("bucketed_run", ["--model", "tiny", "--run", f"fp32={bk}"]), ("bad_mode", base + ["--run", "fp9=x"]), ("missing_dir", ["--run", f"fp32={root}/nope"]),
                       ("bad_gpus", base + ["--gpus", "8,x"]), ("no_fp32", ["--model", "tiny", "--run", f"fp8={r8}"]),
                       ("bad_model", ["--model", "gpt5", "--estimate"]), ("cpu_run", ["--model", "tiny", "--run", f"fp32={cpu}"])]:
        out = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "scaling_model.py")] + argv, capture_output=True, text=True)
        check(f"scaling_model_error_{name}", out.returncode == 1 and out.stderr.strip().count("\n") == 0 and out.stderr.startswith("error:"),
              out.stderr[-300:])
    # every numeric flag range-checked: finite, positive, fractions in (0, 1], integers written as such
    script = os.path.join(REPO, "scripts", "scaling_model.py")
    est = ["--model", "tiny", "--estimate", "--gpus", "8"]
    for flag, value, want in [("--mfu", "5", "expected a fraction in (0, 1], found '5'"), ("--mfu", "0", "expected a fraction in (0, 1]"),
                              ("--busbw-gbs", "inf", "expected a finite number, found 'inf'"), ("--busbw-gbs", "0", "expected a number > 0"),
                              ("--tokens", "0", "expected an integer in [1, "), ("--tokens", "1e3", "expected an integer, found '1e3'"),
                              ("--peak-tflops", "0", "expected a number > 0, found '0'"), ("--hbm-gbs", "-1", "expected a number > 0"),
                              ("--alpha-us", "nan", "expected a finite number"), ("--alpha-us", "-1", "expected a number >= 0"),
                              ("--opt-ms", "-inf", "expected a finite number"), ("--global-tokens", "1e400", "expected a finite number"),
                              ("--accum", "0", "expected an integer in [1, "), ("--refresh", "2.5", "expected an integer, found '2.5'"),
                              ("--rank", "5000", "expected an integer in [1, 4096], found 5000"), ("--buckets", "-1", "expected an integer in [0, "),
                              ("--buckets", "1000000", "expected an integer in [0, 10000]"), ("--skip-steps", "-1", "expected an integer in [0, "),
                              ("--seq", "x", "expected an integer, found 'x'"), ("--gpus", "0,8", "expected a comma list of GPU counts in [1, "),
                              ("--gpus", "8,,16", "expected a comma list"), ("--out", os.path.join(root, "nope", "m.png"), "does not exist"),
                              ("--out", root, "is a directory"), ("--out", os.path.join(root, "m.txt"), "expected a figure file name")]:
        out = subprocess.run([sys.executable, script] + est + [f"{flag}={value}"], capture_output=True, text=True)
        check(f"scaling_model_refuses_{flag[2:].replace('-', '_')}_{value[-12:]}", testlib_one(out) and
              out.stderr.startswith(f"error: argument {flag}: ") and want in out.stderr and out.stdout == "", out.stderr[-300:])
    # bad run files: the file and line named; a run still writing its last line is read without it
    bad_runs = [("step_string", '{"step": "7", "train_loss": 5.0}', 'line 8: "step" is "7", expected a step number'),
                ("phase_inf", '{"step": 7, "train_loss": 5, "t_forward_ms": 1e400, "t_backward_ms": 1, "t_optimizer_ms": 1, "t_comm_ms": 1, '
                              '"t_nccl_ms": 1}', '"t_forward_ms" is inf, expected milliseconds'),
                ("phase_bool", '{"step": 7, "train_loss": 5, "t_forward_ms": true, "t_backward_ms": 1, "t_optimizer_ms": 1, "t_comm_ms": 1, '
                               '"t_nccl_ms": 1}', "lacks the phase times"),
                ("list_line", "[1, 2]", "line 8 is not a JSON object: a list"), ("garbage_line", "garbage", "line 8 is not a JSON object: 'garbage'")]
    for name, line, want in bad_runs:
        d = write_run(root, "bad_" + name, 10.0, 20.0, 1.0, 2.0, 1.0)
        with open(os.path.join(d, "metrics.jsonl"), "a") as f:
            f.write(line + "\n" + json.dumps({"step": 9, "train_loss": 5.0}) + "\n")
        out = subprocess.run([sys.executable, script, "--model", "tiny", "--run", f"fp32={d}"], capture_output=True, text=True)
        check(f"scaling_model_refuses_run_{name}", testlib_one(out) and f"{d}/metrics.jsonl" in out.stderr and want in out.stderr,
              out.stderr[-300:])
    live = write_run(root, "live", fwd, bwd, opt, comm=7.0, nccl=4.0)
    with open(os.path.join(live, "metrics.jsonl"), "a") as f:
        f.write('{"step": 7, "train_loss": 5.0, "t_forw')
    out = subprocess.run([sys.executable, script, "--model", "tiny", "--run", f"fp32={live}", "--gpus", "2"], capture_output=True, text=True)
    ref = subprocess.run([sys.executable, script, "--model", "tiny", "--run", f"fp32={r32}", "--gpus", "2"], capture_output=True, text=True)
    check("scaling_model_live_run_unfinished_line_skipped", out.returncode == 0 and out.stdout == ref.stdout and
          out.stderr.startswith("warning: ") and "line 8 is unfinished" in out.stderr and out.stderr.count("\n") == 1, out.stderr[-300:])

    # property: arguments and run files mutated at random never end in a traceback
    rng = random.Random(29)
    flags = ["--skip-steps", "--gpus", "--alpha-us", "--busbw-gbs", "--accum", "--global-tokens", "--buckets", "--rank", "--refresh",
             "--tokens", "--seq", "--mfu", "--peak-tflops", "--hbm-gbs", "--opt-ms", "--model", "--algo", "--geo-units", "--run"]
    fields = ["step", "train_loss", "tokens", "t_forward_ms", "t_backward_ms", "t_optimizer_ms", "t_comm_ms", "t_nccl_ms",
              "comm_buckets_overlapped", "skipped"]
    bad = []
    for i in range(40):
        d = write_run(root, f"prop_{i}", fwd, bwd, opt, comm=9.0, nccl=4.0, layers=["layers.0.fc2"] if i % 2 else None)
        p = os.path.join(d, "metrics.jsonl")
        rows = [json.loads(l) for l in open(p)]
        for _ in range(rng.randrange(3)):
            rows[rng.randrange(len(rows))][rng.choice(fields)] = rng.choice(testlib.BAD_JSON_VALUES)
        with open(p, "w") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
        if rng.random() < 0.1:
            data = open(p, "rb").read()
            open(p, "wb").write(data[:rng.randrange(len(data))])
        argv = ["--model", "tiny", "--run", f"fp32={d}", "--run", f"geofp8={d}", "--gpus", "2,8"] + (["--estimate"] if i % 3 == 0 else [])
        for _ in range(rng.randrange(1, 3)):
            argv += [rng.choice(flags), rng.choice(testlib.BAD_ARGS + ["1", "8", "0.3", "1e-300", "1e300", f"fp8={d}"])]
        status, _, err = testlib.tool_in_process(sm.main, argv, root)
        if not testlib.property_verdict(status, err):
            bad.append(f"{argv}: status {status} {err.strip()[-400:]}")
    check("scaling_model_property_no_traceback (40 mutations)", not bad, "; ".join(bad[:2]))

    try:
        import matplotlib  # noqa: F401
        png = os.path.join(root, "m.png")
        _, text = run(base + ["--out", png])
        check("scaling_model_writes_the_figure", os.path.getsize(png) > 1000 and os.stat(png).st_mode & 0o777 == 0o644 and
              not [n for n in os.listdir(root) if n.startswith(".m.png")], text[-200:])
    except ImportError:
        print("SKIP scaling_model_writes_the_figure: matplotlib is not installed")

sys.exit(1 if check.failed else 0)
