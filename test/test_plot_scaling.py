"""Tests for scripts/plot_scaling.py on synthetic scaling runs (no matplotlib needed: the tables only).

Prints "PASS name" / "FAIL name: detail" lines and exits 1 on any failure.

    python3 test/test_plot_scaling.py
"""
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import plot_scaling as ps  # noqa: E402

failed = 0


def check(name, ok, detail=""):
    global failed
    print(f"PASS {name}" if ok else f"FAIL {name}: {detail}")
    failed += 0 if ok else 1


def write_run(root, name, step_ms, comm_ms=None, nccl_ms=None, whiten_ms=None, steps=20):
    os.makedirs(os.path.join(root, name))
    with open(os.path.join(root, name, "metrics.jsonl"), "w") as f:
        for s in range(1, steps + 1):
            rec = {"step": s, "train_loss": 5.0, "ms": step_ms if s > 2 else 10 * step_ms, "comm_bytes": 1e6}
            if comm_ms is not None:
                rec.update({"t_forward_ms": 10.0, "t_backward_ms": 20.0, "t_comm_ms": comm_ms, "t_nccl_ms": nccl_ms,
                            "t_whiten_ms": whiten_ms / 2, "t_unwhiten_ms": whiten_ms / 2, "t_refresh_ms": 0.0, "t_optimizer_ms": 5.0})
            f.write(json.dumps(rec) + "\n")
            if s % 10 == 0:
                f.write(json.dumps({"step": s, "val_loss": 5.1}) + "\n")  # no "ms": ignored


with tempfile.TemporaryDirectory() as root:
    # fp32 100 ms, fp8 80 ms, geofp8 85 ms at 32 GPUs: geofp8 keeps (100 - 85) / (100 - 80) = 75 %
    write_run(root, "llama600m_fp32_32gpu", 100.0, comm_ms=60.0, nccl_ms=58.0, whiten_ms=0.0)
    write_run(root, "llama600m_fp8_32gpu", 80.0, comm_ms=40.0, nccl_ms=30.0, whiten_ms=0.0)
    write_run(root, "llama600m_geofp8_32gpu", 85.0, comm_ms=45.0, nccl_ms=30.0, whiten_ms=4.0)
    write_run(root, "llama600m_fp32_8gpu", 50.0)  # a CPU-engine style run: no phase fields
    write_run(root, "llama600m_bf16_8gpu", 45.0)
    runs = ps.collect(root, skip_steps=2)
    r = runs["llama600m"]["geofp8"][32]
    check("plot_scaling_mean_after_warmup", abs(r[0] - 85.0) < 1e-9 and r[2] == 18, f"{r[0]} ms over {r[2]} steps")
    check("plot_scaling_phase_means", r[3].get("whiten") == 4.0 and r[3].get("nccl") == 30.0 and r[3].get("comm") == 45.0, str(r[3]))
    check("plot_scaling_no_phases_without_fields", runs["llama600m"]["fp32"][8][3] == {}, str(runs["llama600m"]["fp32"][8][3]))
    imp = ps.improvements(runs)
    check("plot_scaling_improvement", dict(imp["llama600m"]["bf16"])[8] == 10.0 and dict(imp["llama600m"]["fp8"])[32] == 20.0,
          str(imp))
    kept = ps.fp8_saving_kept(runs)
    check("plot_scaling_fp8_saving_kept", len(kept) == 1 and kept[0][1] == 32 and abs(kept[0][5] - 0.75) < 1e-12, str(kept))
    out = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "plot_scaling.py"), "--root", root, "--out",
                          os.path.join(root, "s.png")], capture_output=True, text=True)
    check("plot_scaling_prints_kept_share", "geofp8 keeps 75% of the FP8 saving" in out.stdout, out.stdout[-300:] + out.stderr[-300:])
    out = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "plot_scaling.py"), "--root", os.path.join(root, "nope")],
                         capture_output=True, text=True)
    check("plot_scaling_missing_root_one_line", out.returncode != 0 and out.stderr.strip().count("\n") == 0 and "--root" in out.stderr,
          out.stderr)

sys.exit(1 if failed else 0)
