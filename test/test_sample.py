"""Tests for the sampler (scripts/sample.py over the engine's -x 0 -s 1): greedy decoding equal
to transformers' generate(do_sample=False) on the exported model (SKIP without torch and
transformers), the same text for the same seed and another for another seed, --top-k 1 equal to
greedy, the prompt kept in front, the tokens streamed as they are made, -x 0 without a "final train loss nan", and the errors.

Prints "PASS name" / "FAIL name: detail" lines; exits 1 on any failure.

    python3 test/test_sample.py
"""
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "test"))
import testlib  # noqa: E402

SAMPLE = os.path.join(REPO, "scripts", "sample.py")
ENGINE = os.path.join(REPO, "train_llama_cpu")
check = testlib.Checks()
PROMPT = "And God said, Let there be"


def sample(*args):
    r = subprocess.run([sys.executable, SAMPLE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return r.returncode, r.stdout.strip(), r.stderr.strip()


def ids_of(ckpt, *args):
    rc, out, err = sample(ckpt, "--prompt", PROMPT, "-g", "12", "--ids", *args)
    return [int(t) for t in out.split()] if rc == 0 else ("rc=%d %s" % (rc, err[-300:]))


def main():
    if not os.access(ENGINE, os.X_OK):
        print("SKIP test_sample: train_llama_cpu is not built (make train_llama_cpu)")
        return 0
    tmp = tempfile.mkdtemp(prefix="test_sample_")
    try:
        # a tiny checkpoint with GPT-2's vocabulary, two steps on the bundled data
        env = dict(os.environ, OMP_NUM_THREADS="2")
        r = subprocess.run([ENGINE, "-e", "tiny", "-b", "2", "-t", "32", "-v", "0", "-x", "2", "-l", "3e-3", "-o", os.path.join(tmp, "run")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        ckpt = os.path.join(tmp, "run", "model_00000002.bin")
        if not check("sample_checkpoint_written", r.returncode == 0 and os.path.isfile(ckpt), r.stdout[-300:]):
            return 1

        greedy = ids_of(ckpt, "--temperature", "0")
        ok = isinstance(greedy, list) and len(greedy) > 12
        check("sample_greedy_runs", ok, str(greedy))
        if not ok:
            return 1
        n_prompt = len(greedy) - 12
        # the tokens stream out as the engine makes them (before: all at the end, after minutes
        # for a long -g): the first read holds some ids while the sampler still runs, and the
        # whole output is the same as the ids of a one-piece run; the prompt and 300 tokens pass
        # tiny's T of 256, so the context slides for the last ~50
        n_long = 300
        proc = subprocess.Popen([sys.executable, SAMPLE, ckpt, "--prompt", PROMPT, "-g", str(n_long), "--ids", "--temperature", "0"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        first = proc.stdout.read1(1 << 16)
        running = proc.poll() is None
        rest, err = proc.communicate()
        ids = [int(t) for t in (first + rest).split()]
        first_ids = len(first.split())
        check("sample_streams_tokens", proc.returncode == 0 and running and 0 < first_ids < len(ids) and
              len(ids) == n_prompt + n_long and ids[:len(greedy)] == greedy,
              f"rc {proc.returncode}, running at the first read {running}, {first_ids} of {len(ids)} ids in it: {err[-300:]!r}")
        check("sample_greedy_deterministic", ids_of(ckpt, "--temperature", "0") == greedy)
        check("sample_top_k_1_is_greedy", ids_of(ckpt, "--top-k", "1", "--seed", "7") == greedy)
        a, b, c = (ids_of(ckpt, "--seed", s) for s in ("1", "1", "2"))
        check("sample_same_seed_same_text", isinstance(a, list) and a == b, f"{a} vs {b}")
        check("sample_other_seed_other_text", isinstance(a, list) and isinstance(c, list) and a[n_prompt:] != c[n_prompt:], f"{a} vs {c}")
        k5 = ids_of(ckpt, "--top-k", "5", "--temperature", "0.7", "--seed", "3")
        check("sample_top_k_temperature_runs", isinstance(k5, list) and k5[:n_prompt] == greedy[:n_prompt], str(k5))
        rc, text, err = sample(ckpt, "--prompt", PROMPT, "-g", "8", "--temperature", "0")
        check("sample_text_starts_with_prompt", rc == 0 and text.startswith(PROMPT), f"rc={rc} {text[:100]!r} {err[-200:]}")

        # -x 0 alone: no nan loss line
        r = subprocess.run([ENGINE, "-e", ckpt, "-x", "0", "-v", "0", "-b", "1", "-t", "32"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        check("sample_zero_steps_no_nan_loss", r.returncode == 0 and "nan" not in r.stdout and "done: no step to train (-x 0, from step 0)" in r.stdout,
              r.stdout[-200:])

        # errors: one line, exit 1, no traceback
        for name, args, want in [("missing_checkpoint", [os.path.join(tmp, "nope.bin")], "is not a file"),
                                 ("negative_temperature", [ckpt, "--temperature", "-1"], "--temperature"),
                                 ("bad_top_k", [ckpt, "--top-k", "x"], "--top-k"),
                                 ("engine_refuses", [ckpt, "--data", os.path.join(tmp, "none_*.bin")], "the engine failed (exit 1): error: -i")]:
            rc, out, err = sample(*args)
            check(f"sample_error_{name}", rc == 1 and len(err.splitlines()) == 1 and err.startswith("error:") and want in err and "Traceback" not in err,
                  f"rc={rc} {err[-300:]}")

        # property: random flags and values (seeded, 16 draws) end in a sample or one error line, never a traceback
        import random
        rng = random.Random(20261203)
        values = ["0", "-1", "1e400", "nan", "x", "", " 5", "3", "1.5", "100000000000000000000", "/dev/null", tmp]
        flags = ["-g", "--temperature", "--top-k", "--seed", "--prompt", "--engine", "--data", "--vocab-dir", "--bogus"]
        bad = []
        for _ in range(16):
            args = [ckpt if rng.random() < 0.8 else rng.choice(values), "-g", "2"]
            for _ in range(rng.randint(1, 3)):
                args += [rng.choice(flags), rng.choice(values)]
            rc, out, err = sample(*args)
            if "Traceback" in err or not (rc == 0 or (rc == 1 and len(err.splitlines()) == 1 and err.startswith("error:"))):
                bad.append(f"{args}: rc={rc} {err[-200:]}")
        check("sample_property_no_traceback", not bad, "; ".join(bad[:2]))

        # the oracle: transformers' greedy generate on the exported model
        try:
            import torch
            import transformers
        except ImportError as e:
            print(f"SKIP sample_greedy_equals_transformers_generate: needs torch and transformers ({e.name} missing)")
            return 1 if check.failed else 0
        hf = os.path.join(tmp, "hf")
        r = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "export_hf.py"), ckpt, hf], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if not check("sample_export_for_transformers", r.returncode == 0, r.stdout[-300:]):
            return 1
        model = transformers.LlamaForCausalLM.from_pretrained(hf, torch_dtype=torch.float32).eval()
        with torch.no_grad():
            out = model.generate(torch.tensor([greedy[:n_prompt]]), max_new_tokens=12, do_sample=False, pad_token_id=50256)
        theirs = out[0].tolist()
        check("sample_greedy_equals_transformers_generate", theirs == greedy, f"engine {greedy[n_prompt:]} transformers {theirs[n_prompt:]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
