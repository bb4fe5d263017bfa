#!/usr/bin/env bash
# test_comm_modes.sh — every gradient communication mode (-c fp8, fp8block, geofp8, kfac, and the
# twophase reduction) trains the small test model (test/testlib.py: tiny's layers, 1000 tokens)
# with 1, 2 and 4 MPI ranks for 20 steps on the same global batch and stays within a stated
# tolerance of the fp32 run with as many ranks; the
# logged fidelity shows the mechanism of geofp8: with a fresh factor and an empty error-feedback
# buffer (its first step), the whitened units' RelL2 is below what fp8 logs for the same units.
# The RelL2 of the later steps (stale factors, error feedback) and of twophase are printed, not
# asserted: on this model they are not better than fp8 (see docs/gradient_communication.md,
# "What the paper's claims look like here").
# Prints "PASS name" / "FAIL name: detail" lines (counted by test/run_tests.sh).
cd "$(dirname "$0")/.." || exit 1
BIN=./train_llama_cpu
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if ! command -v mpirun >/dev/null 2>&1; then echo "SKIP test_comm_modes: mpirun not found"; exit 0; fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
source test/testlib.sh  # pass, fail, why, small_model

# the small test model (test/testlib.py: tiny's layers, a 1000-token vocabulary)
small_model
# 20 steps, global batch 4 x 32 tokens: 4 micro-steps on 1 rank, 2 x 2, 1 on each of 4 ranks
RUN=("${SMALL[@]}" -b 1 -t 32 -d 128 -x 20 -v 0 -l 3e-3 -u 2 --fidelity-every 1 --geofp8-profile-steps 4 --geofp8-refresh 4)
MODES=("fp32" "fp8" "fp8block" "geofp8" "kfac" "fp8 --fp8-reduce twophase" "geofp8 --fp8-reduce twophase")
tag() { echo "$1" | sed 's/ --fp8-reduce twophase/_twophase/'; }

for n in 1 2 4; do
    for mode in "${MODES[@]}"; do
        t=$(tag "$mode")
        # shellcheck disable=SC2086
        timeout 300 mpirun --oversubscribe -np $n "$BIN" "${RUN[@]}" -c $mode -o "$TMP/${t}_$n" >"$TMP/${t}_$n.out" 2>&1 ||
            fail "mode_${t}_np${n}_runs" "$(why "$TMP/${t}_$n.out")"
    done
done
FC2=layers.0.fc2,layers.1.fc2,layers.2.fc2,layers.3.fc2
timeout 300 mpirun --oversubscribe -np 2 "$BIN" "${RUN[@]}" -c geofp8 --geofp8-layers $FC2 -o "$TMP/geofc2_2" >"$TMP/geofc2.out" 2>&1 ||
    fail geofp8_fc2_list_runs "$(why "$TMP/geofc2.out")"

# per-step losses against fp32 with the same rank count: max relative difference <= 2e-2, none
# NaN. What FP8 communication does to 20 steps of a fast-moving small model, not a rounding
# tolerance: dev/tolerance_sweep.py over the seven OpenBLAS kernel families this CPU runs gave a
# worst mode of 1.2e-3 with 1 rank, 2.0e-3 with 2 and 2.8e-3 with 4 (kfac), no figure varying by
# more than 1.8x across the kernels, so the bound leaves 7x over the 4-rank figure; a mode that
# does not train misses it by far (the loss falls from 6.9 to 5.07 in these 20 steps).
python3 - "$TMP" <<'EOF'
import json, math, sys
sys.path.insert(0, "test")
from testlib import bound
d = sys.argv[1]
def rows(run):
    try:
        return [json.loads(l) for l in open(f"{d}/{run}/metrics.jsonl")]
    except OSError:
        return []
def losses(run):
    return {r["step"]: r["train_loss"] for r in rows(run) if "train_loss" in r}
fails = 0
for n in (1, 2, 4):
    base = losses(f"fp32_{n}")
    for t in ("fp8", "fp8block", "geofp8", "kfac", "fp8_twophase", "geofp8_twophase"):
        x = losses(f"{t}_{n}")
        name = f"mode_{t}_np{n}_losses_near_fp32"
        if len(x) != 20 or len(base) != 20:
            print(f"FAIL {name}: {len(x)} and {len(base)} logged steps, expected 20"); fails += 1; continue
        dev = max(abs(x[s] - base[s]) / base[s] if x[s] is not None and math.isfinite(x[s]) else math.inf for s in base)
        fails += not bound(name, dev, 2e-2, f"max rel diff over 20 steps; final {x[20]:.4f} vs {base[20]:.4f}")

# bytes per step: fp8 modes send a quarter of fp32 (plus the small scale vectors)
for n in (2, 4):
    b32 = rows(f"fp32_{n}")[0]["comm_bytes"]
    for t in ("fp8", "fp8block", "fp8_twophase"):
        b = rows(f"{t}_{n}")[0]["comm_bytes"]
        ratio = b / b32
        name = f"mode_{t}_np{n}_bytes_quarter_of_fp32"
        if 0.25 <= ratio <= 0.255: print(f"PASS {name}")
        else: print(f"FAIL {name}: ratio {ratio:.4f}"); fails += 1
        print(f"  {t:16s} np{n}: {b:.0f} bytes/step = {ratio:.4f} x fp32")

# geofp8 auto selection: profile, select, write geofp8_layers.txt, refresh every 4 steps
for n in (1, 2, 4):
    sel = [l.split() for l in open(f"{d}/geofp8_{n}/geofp8_layers.txt")]
    names = [s[0] for s in sel]
    refresh = [r["step"] for r in rows(f"geofp8_{n}") if r.get("geo_refresh") == 1]
    name = f"geofp8_np{n}_auto_selection"
    if names and all(".fc" in x for x in names) and refresh == [5, 9, 13, 17]:
        print(f"PASS {name}")
    else:
        print(f"FAIL {name}: selected {names}, refresh steps {refresh}"); fails += 1
    # RelL2 of the selected units at refresh steps and between them, against fp8 (reported)
    g = {r["step"]: r["fidelity_units"] for r in rows(f"geofp8_{n}") if "fidelity_units" in r}
    e = {r["step"]: r["fidelity_units"] for r in rows(f"fp8_{n}") if "fidelity_units" in r}
    def mean(src, steps):
        return sum(src[s][u][0] for s in steps for u in names) / (len(steps) * len(names))
    stale = [s for s in g if s > 5 and s not in refresh]
    print(f"  geofp8 np{n}: selected {names}; RelL2 on them at refresh steps {mean(g, refresh):.3e} vs fp8 {mean(e, refresh):.3e}; "
          f"between refreshes {mean(g, stale):.3e} vs fp8 {mean(e, stale):.3e}")

# the mechanism: at its first step (fresh factor, zero residual) geofp8 on the fc2 units logs a
# lower RelL2 on them than fp8 does (same seed, same data, 2 ranks): the ratio is 0.740 with every
# OpenBLAS kernel family (dev/tolerance_sweep.py)
g = {r["step"]: r["fidelity_units"] for r in rows("geofc2_2") if "fidelity_units" in r}
e = {r["step"]: r["fidelity_units"] for r in rows("fp8_2") if "fidelity_units" in r}
fc2 = [f"layers.{l}.fc2" for l in range(4)]
a = sum(g[1][u][0] for u in fc2) / 4
b = sum(e[1][u][0] for u in fc2) / 4
later = [s for s in g if s > 1]
a2 = sum(g[s][u][0] for s in later for u in fc2) / (4 * len(later))
b2 = sum(e[s][u][0] for s in later for u in fc2) / (4 * len(later))
print(f"  geofp8 on fc2 (np2): RelL2 at step 1 {a:.3e} vs fp8 {b:.3e}; steps 2-20 {a2:.3e} vs fp8 {b2:.3e}")
fails += not bound("geofp8_np2_fc2_rel_l2_below_fp8_first_step", a / b, 1.0, "RelL2 geofp8 / fp8 on the fc2 units at step 1")

# twophase vs native (reported): all-unit RelL2 averaged over the run, and no saturation
for n in (2, 4):
    tw = [r["fidelity_rel_l2"] for r in rows(f"fp8_twophase_{n}") if "fidelity_rel_l2" in r]
    nat = [r["fidelity_rel_l2"] for r in rows(f"fp8_{n}") if "fidelity_rel_l2" in r]
    print(f"  fp8 np{n}: mean RelL2 twophase {sum(tw) / len(tw):.3e} vs native {sum(nat) / len(nat):.3e}")
sat = sum(r.get("fp8_sum_saturated", 0) for n in (1, 2, 4) for t in ("fp8", "geofp8", "kfac") for r in rows(f"{t}_{n}"))
name = "native_sum_never_saturates_up_to_4_ranks"
if sat == 0: print(f"PASS {name}")
else: print(f"FAIL {name}: {sat} saturated codes"); fails += 1
sys.exit(1 if fails else 0)
EOF
[ $? -eq 0 ] || failures=$((failures + 1))

# a file given to --geofp8-layers skips profiling; an unknown layer name is refused
printf 'layers.1.fc2 0.5\nlayers.3.fc2 0.4\n' >"$TMP/layers.txt"
"$BIN" "${SMALL[@]}" -b 1 -t 32 -x 3 -v 0 -c geofp8 --geofp8-layers "$TMP/layers.txt" -o "$TMP/file" >"$TMP/file.out" 2>&1
if grep -q '"geo_refresh": 1' "$TMP/file/metrics.jsonl" && ! grep -q "profiled" "$TMP/file.out"; then pass geofp8_layers_from_file
else fail geofp8_layers_from_file "$(why "$TMP/file.out")"; fi
"$BIN" "${SMALL[@]}" -b 1 -t 32 -x 3 -v 0 -c geofp8 --geofp8-layers layers.9.fc2 >"$TMP/bad.out" 2>"$TMP/bad.err"
rc=$?
if [ $rc -eq 1 ] && [ "$(wc -l <"$TMP/bad.err")" -eq 1 ] && grep -q "layers.9.fc2" "$TMP/bad.err"; then pass geofp8_unknown_layer_refused
else fail geofp8_unknown_layer_refused "rc=$rc $(cat "$TMP/bad.err")"; fi
"$BIN" "${SMALL[@]}" -b 1 -t 32 -x 3 -v 0 -c fp8block --fp8-reduce twophase >"$TMP/bad.out" 2>"$TMP/bad.err"
rc=$?
if [ $rc -eq 1 ] && grep -q "twophase" "$TMP/bad.err"; then pass fp8block_twophase_refused
else fail fp8block_twophase_refused "rc=$rc $(cat "$TMP/bad.err")"; fi

# resume of a geofp8 run (factors, residuals, selection in the state files) is bitwise exact:
# resume_check NAME DIR FLAGS... runs 12 steps with a checkpoint at 6 into DIR_s, deletes step 12
# from a copy DIR_r, resumes it, and compares the step-12 model and rank 1's state bitwise
R=("${SMALL[@]}" -b 1 -t 32 -d 64 -x 12 -v 0 -l 3e-3 -u 2 -c geofp8 --geofp8-profile-steps 3 --geofp8-refresh 4 -n 6)
resume_check() {
    local name=$1 d=$2
    shift 2
    timeout 300 mpirun --oversubscribe -np 2 "$BIN" "${R[@]}" "$@" -o "${d}_s" >/dev/null 2>&1
    cp -r "${d}_s" "${d}_r"
    rm -f "${d}_r/DONE_00000012" "${d}_r/model_00000012.bin" "${d}_r/state_00000012_"*
    timeout 300 mpirun --oversubscribe -np 2 "$BIN" "${R[@]}" "$@" -y 1 -o "${d}_r" >"${d}_r.out" 2>&1
    if grep -q "resuming from step 6" "${d}_r.out" && cmp -s "${d}_s/model_00000012.bin" "${d}_r/model_00000012.bin" &&
       cmp -s "${d}_s/state_00000012_00000.bin" "${d}_r/state_00000012_00000.bin" &&
       cmp -s "${d}_s/state_00000012_00001.bin" "${d}_r/state_00000012_00001.bin"; then pass "$name"
    else fail "$name" "$(tail -2 "${d}_r.out")"; fi
}
resume_check geofp8_resume_bitwise_np2 "$TMP/g"

# --fp8-ef 1: error feedback on every unit. Planted: geofp8 with p = 0 on every linear unit (the
# transform is exactly the identity) and --fp8-ef 1 on the rest is bitwise plain fp8 with --fp8-ef 1,
# so the flat buffer's error feedback is the geometry path's; its first step (zero residuals) is plain
# fp8's, the next ones differ. Resume is bitwise: the flat residuals are in each rank's state file
# (geofp8 auto: they move onto the geometry path at the switch; fp8block, per-block scales; twophase).
# Refused with one line where nothing is rounded to FP8.
LIN=$(for l in 0 1 2 3; do for u in qkv proj fc1 fc2; do printf "layers.%s.%s," $l $u; done; done)
EF=("${SMALL[@]}" -b 1 -t 32 -d 128 -x 6 -v 0 -l 3e-3 -u 2 --fidelity-every 1)
timeout 300 mpirun --oversubscribe -np 2 "$BIN" "${EF[@]}" -c fp8 --fp8-ef 1 -o "$TMP/ef8" >"$TMP/ef8.out" 2>&1
timeout 300 mpirun --oversubscribe -np 2 "$BIN" "${EF[@]}" -c geofp8 --geofp8-power 0 --geofp8-layers "${LIN%,}" --geofp8-refresh 3 --fp8-ef 1 \
    -o "$TMP/efg0" >"$TMP/efg0.out" 2>&1
timeout 300 mpirun --oversubscribe -np 2 "$BIN" "${EF[@]}" -c fp8 -o "$TMP/ef8plain" >"$TMP/ef8plain.out" 2>&1
l2() { grep -o "^step     $2/6 | loss [0-9.]*" "$1" | grep -o "[0-9.]*$"; }
if cmp -s "$TMP/ef8/model_00000006.bin" "$TMP/efg0/model_00000006.bin" && ! cmp -s "$TMP/ef8/model_00000006.bin" "$TMP/ef8plain/model_00000006.bin" &&
   [ -n "$(l2 "$TMP/ef8.out" 2)" ] && [ "$(l2 "$TMP/ef8.out" 2)" = "$(l2 "$TMP/ef8plain.out" 2)" ] && [ "$(l2 "$TMP/ef8.out" 3)" != "$(l2 "$TMP/ef8plain.out" 3)" ] &&
   grep -q "| grad communication *| fp8 (e4m3, native, error feedback on every" "$TMP/ef8.out"; then
    pass fp8_ef_bitwise_geofp8_p0_every_linear_unit
else fail fp8_ef_bitwise_geofp8_p0_every_linear_unit "step 2 loss $(l2 "$TMP/ef8.out" 2) vs $(l2 "$TMP/ef8plain.out" 2); $(why "$TMP/efg0.out")"; fi
resume_check geofp8_auto_fp8_ef_resume_bitwise_np2 "$TMP/efr" --fp8-ef 1
resume_check fp8block_fp8_ef_resume_bitwise_np2 "$TMP/efb" -c fp8block --fp8-ef 1
resume_check fp8_twophase_fp8_ef_resume_bitwise_np2 "$TMP/eft" -c fp8 --fp8-reduce twophase --fp8-ef 1
"$BIN" "${SMALL[@]}" -b 1 -t 32 -x 3 -v 0 -c fp32 --fp8-ef 1 -o "$TMP/efbad" >"$TMP/efbad.out" 2>"$TMP/efbad.err"
rc=$?
if [ $rc -eq 1 ] && [ "$(wc -l <"$TMP/efbad.err")" -eq 1 ] && grep -q "^error: --fp8-ef 1: .*found -c fp32" "$TMP/efbad.err" && [ ! -e "$TMP/efbad" ]; then
    pass fp8_ef_refused_with_fp32
else fail fp8_ef_refused_with_fp32 "rc=$rc $(cat "$TMP/efbad.err")"; fi

# --geofp8-power: 1 (with the default damping and --geofp8-ema 0 spelled out) is bitwise the default run; auto picks
# p = clamp(q/2, 0, 1) per unit at every refresh, logs it, trains, and resumes bitwise
timeout 300 mpirun --oversubscribe -np 2 "$BIN" "${RUN[@]}" -c geofp8 --geofp8-layers $FC2 --geofp8-power 1.0 --geofp8-damping 0.001 \
    --geofp8-ema 0 -o "$TMP/geop1_2" >"$TMP/geop1.out" 2>&1
if cmp -s "$TMP/geofc2_2/model_00000020.bin" "$TMP/geop1_2/model_00000020.bin"; then pass geofp8_power_1_bitwise_default
else fail geofp8_power_1_bitwise_default "$(why "$TMP/geop1.out")"; fi
timeout 300 mpirun --oversubscribe -np 2 "$BIN" "${RUN[@]}" -c geofp8 --geofp8-layers $FC2 --geofp8-power auto \
    -o "$TMP/geoauto_2" >"$TMP/geoauto.out" 2>&1 || fail geofp8_power_auto_runs "$(why "$TMP/geoauto.out")"
python3 - "$TMP" <<'PYEOF2'
import json, math, re, sys
sys.path.insert(0, "test")
from testlib import bound
d = sys.argv[1]
lines = [l for l in open(f"{d}/geoauto.out") if l.startswith("geofp8 power at step")]
steps = [int(re.match(r"geofp8 power at step (\d+):", l).group(1)) for l in lines]
picks = [(float(p), float(q)) for l in lines for p, q in re.findall(r"p (\S+) \(q (\S+)\)", l)]
ok = steps == [1, 5, 9, 13, 17] and len(picks) == 4 * len(steps) and all(
    math.isfinite(q) and abs(p - min(1.0, max(0.0, q / 2))) <= 1e-3 for p, q in picks)  # both printed to 3 decimals
qs = [q for _, q in picks]
print(("PASS" if ok else "FAIL") + f" geofp8_power_auto_logged_per_refresh: refresh steps {steps}, {len(picks)} choices, "
      f"q from {min(qs, default=float('nan')):.3f} to {max(qs, default=float('nan')):.3f}")
# without --geofp8-ema only the refresh steps sketch: t_sketch_ms is positive on exactly those
sk = {r["step"]: r["t_sketch_ms"] for r in map(json.loads, open(f"{d}/geoauto_2/metrics.jsonl")) if "train_loss" in r}
sk_steps = sorted(s for s, v in sk.items() if v > 0)
ok_sk = len(sk) == 20 and sk_steps == [1, 5, 9, 13, 17]
print(("PASS" if ok_sk else "FAIL") + f" geofp8_sketch_time_on_refresh_steps_only: t_sketch_ms > 0 at steps {sk_steps}")
def losses(run):
    return {r["step"]: r["train_loss"] for r in map(json.loads, open(f"{d}/{run}/metrics.jsonl")) if "train_loss" in r}
a, f = losses("geoauto_2"), losses("fp32_2")
worst = max(abs(a[s] - f[s]) / f[s] for s in f) if len(a) == len(f) == 20 else float("inf")
# the same 2e-2 bound as every mode above (worst 1.2e-3 over the seven kernel families)
fails = (not ok) + (not ok_sk) + (not bound("geofp8_power_auto_np2_loss_near_fp32", worst, 2e-2, "max relative train-loss difference to fp32"))
sys.exit(1 if fails else 0)
PYEOF2
[ $? -eq 0 ] || failures=$((failures + 1))
# the plain-fp8 counterfactual on the geometry units (fidelity steps): with p = 0 and a zero
# residual the geometry path is plain fp8, so at step 1 both figures are the same number; later
# the error feedback makes them differ. The auto run above logs both on every step.
timeout 300 mpirun --oversubscribe -np 2 "$BIN" "${RUN[@]}" -x 6 -c geofp8 --geofp8-layers $FC2 --geofp8-power 0 -o "$TMP/geop0_2" >"$TMP/geop0.out" 2>&1
python3 - "$TMP" <<'PYEOF2'
import json, math, sys
d = sys.argv[1]
rows = lambda run: [r for r in map(json.loads, open(f"{d}/{run}/metrics.jsonl")) if "train_loss" in r]
p0 = rows("geop0_2")
ok = len(p0) == 6 and p0[0]["fidelity_rel_l2_geo"] == p0[0]["fidelity_rel_l2_geo_fp8"] and all(
    r["fidelity_rel_l2_geo_fp8"] is not None and r["fidelity_rel_l2_geo_fp8"] > 0 for r in p0)
print(("PASS" if ok else "FAIL") + " geofp8_plain_fp8_counterfactual_equals_geo_at_p0_step1: "
      + (f"{p0[0]['fidelity_rel_l2_geo']:.6e} and {p0[0]['fidelity_rel_l2_geo_fp8']:.6e}" if p0 else "no rows"))
a = [r for r in rows("geoauto_2") if r.get("fidelity_rel_l2_geo_fp8") is not None]
if a:
    ratio = sum(r["fidelity_rel_l2_geo"] / r["fidelity_rel_l2_geo_fp8"] for r in a) / len(a)
    print(f"  note: geofp8 --geofp8-power auto on fc2, np2, 20 steps: RelL2 on its units / plain fp8's on the same steps = {ratio:.3f} (mean of {len(a)} steps)")
ok2 = len(a) == 20
print(("PASS" if ok2 else "FAIL") + f" geofp8_plain_fp8_counterfactual_logged_every_fidelity_step: {len(a)} of 20 steps")
sys.exit(0 if ok and ok2 else 1)
PYEOF2
[ $? -eq 0 ] || failures=$((failures + 1))
# The fair fidelity figures (gradcomm_fair_step): (a) geo as sent, (b) plain fp8 with its own
# error-feedback residual, (c) plain fp8 without, per fidelity step and per window of W steps,
# recomputed from the run's own dumps (TRAIN_LLAMA_TEST_DUMP_GEO) by test/fair_fidelity.py in
# numpy and ml_dtypes: 2 real ranks (fidelity every step, windows of the refresh interval 4), kfac,
# and 4 logical ranks in 2 processes (--fidelity-every 2 made 3, coprime with refresh 4, so the
# fidelity steps 3, 6, 9, 12 see the factor ages 2, 1, 0, 3: every age).
FAIR=("${SMALL[@]}" -b 1 -t 32 -d 128 -x 12 -v 0 -l 3e-3 -u 2 --geofp8-refresh 4 -c geofp8 --geofp8-layers layers.0.fc2,layers.1.fc2)
mkdir -p "$TMP/fd2" "$TMP/fd4"
TRAIN_LLAMA_TEST_DUMP_GEO="$TMP/fd2" timeout 300 mpirun --oversubscribe -np 2 "$BIN" "${FAIR[@]}" --fidelity-every 1 -o "$TMP/fair2" >"$TMP/fair2.out" 2>&1
python3 test/fair_fidelity.py fair_np2 "$TMP/fd2" "$TMP/fair2/metrics.jsonl" 2 4 1 || failures=$((failures + 1))
TRAIN_LLAMA_TEST_DUMP_GEO="$TMP/fd4" timeout 300 mpirun --oversubscribe -np 2 "$BIN" "${FAIR[@]}" --fidelity-every 2 --virtual-ranks 4 \
    -o "$TMP/fair4" >"$TMP/fair4.out" 2>&1
python3 test/fair_fidelity.py fair_vr4 "$TMP/fd4" "$TMP/fair4/metrics.jsonl" 4 4 1 || failures=$((failures + 1))
# kfac: every linear unit (four sizes) on the geometry path, the two-sided transform
mkdir -p "$TMP/fdk"
TRAIN_LLAMA_TEST_DUMP_GEO="$TMP/fdk" timeout 300 mpirun --oversubscribe -np 2 "$BIN" "${SMALL[@]}" -b 1 -t 32 -d 128 -x 8 -v 0 -l 3e-3 -u 2 \
    --geofp8-refresh 4 -c kfac --fidelity-every 1 \
    -o "$TMP/fairk" >"$TMP/fairk.out" 2>&1
python3 test/fair_fidelity.py fair_kfac_np2 "$TMP/fdk" "$TMP/fairk/metrics.jsonl" 2 4 1 || failures=$((failures + 1))
fsteps=$(python3 -c 'import json,sys; print(*[r["step"] for r in map(json.loads, open(sys.argv[1])) if "fidelity_rel_l2_geo_fp8ef" in r])' "$TMP/fair4/metrics.jsonl")
if [ "$fsteps" = "3 6 9 12" ] && grep -q "| fidelity *| every 3 (2, coprime with refresh); windows of 4 " "$TMP/fair4.out"; then
    pass fidelity_steps_coprime_with_refresh_cover_every_age
else fail fidelity_steps_coprime_with_refresh_cover_every_age "fidelity at steps '$fsteps'; $(grep '| fidelity' "$TMP/fair4.out")"; fi
# planted: with --geofp8-power 0 the transform is the identity, so the geometry path is plain fp8
# with error feedback: (a) equals (b) exactly at every step and in every window, and at step 1
# (zero residuals) both equal (c); (c) differs later (the residuals are not zero)
timeout 300 mpirun --oversubscribe -np 2 "$BIN" "${FAIR[@]}" -x 8 --fidelity-every 1 --geofp8-power 0 -o "$TMP/fairp0" >"$TMP/fairp0.out" 2>&1
python3 - "$TMP/fairp0/metrics.jsonl" <<'PYEOF2'
import json, sys
r = [x for x in map(json.loads, open(sys.argv[1])) if "train_loss" in x]
w = [x for x in r if "window_rel_l2_geo" in x]
ok = (len(r) == 8 and all(x["fidelity_rel_l2_geo"] == x["fidelity_rel_l2_geo_fp8ef"] for x in r)
      and r[0]["fidelity_rel_l2_geo_fp8"] == r[0]["fidelity_rel_l2_geo_fp8ef"] and r[1]["fidelity_rel_l2_geo_fp8"] != r[1]["fidelity_rel_l2_geo_fp8ef"]
      and [x["step"] for x in w] == [4, 8] and all(x["window_steps"] == 4 and x["window_rel_l2_geo"] == x["window_rel_l2_geo_fp8ef"] for x in w))
print(("PASS" if ok else "FAIL") + " fair_fidelity_p0_geo_equals_fp8_with_error_feedback: "
      + ", ".join(f"{x['fidelity_rel_l2_geo']:.6e}/{x['fidelity_rel_l2_geo_fp8ef']:.6e}" for x in r[:3]) + f"; windows at {[x['step'] for x in w]}")
sys.exit(0 if ok else 1)
PYEOF2
[ $? -eq 0 ] || failures=$((failures + 1))
# --geofp8-ema: the window's average, its Ω and step count are in each rank's state file, so a
# resume in the middle of a window (step 6 of windows 2-5, 6-9) is bitwise exact; the average
# changes the run (not the plain geofp8 run's model)
resume_check geofp8_ema_resume_mid_window_bitwise_np2 "$TMP/e" --geofp8-ema 0.9
if cmp -s "$TMP/e_s/model_00000012.bin" "$TMP/g_s/model_00000012.bin"; then fail geofp8_ema_changes_the_run "the same model as without it"
else pass geofp8_ema_changes_the_run; fi
# with it every step of the geometry path sketches (after the 3 profiling steps: steps 4 to 12),
# and t_sketch_ms says so
python3 - "$TMP/e_s/metrics.jsonl" <<'PYEOF2'
import json, sys
sk = {r["step"]: r["t_sketch_ms"] for r in map(json.loads, open(sys.argv[1])) if "train_loss" in r}
got = sorted(s for s, v in sk.items() if v > 0)
ok = len(sk) == 12 and got == list(range(4, 13))
print(("PASS" if ok else "FAIL") + f" geofp8_ema_sketch_time_every_geometry_step: t_sketch_ms > 0 at steps {got}")
sys.exit(0 if ok else 1)
PYEOF2
[ $? -eq 0 ] || failures=$((failures + 1))
resume_check geofp8_power_auto_resume_bitwise_np2 "$TMP/a" --geofp8-power auto
resume_check geofp8_e5m2_resume_bitwise_np2 "$TMP/f" --fp8-format e5m2

# --fp8-format e5m2: the same runs with E5M2 codes (test_fp8 checks the codec and the per-combine
# sum bit for bit against ml_dtypes). At step 1 (the same weights and gradient as the E4M3 run)
# the logged RelL2 is twice E4M3's: one mantissa bit less doubles the rounding error (measured
# 2.008 and 2.003 with 1 and 2 ranks; bound [1.8, 2.2], the E4M3 floor being 2.64e-2 and
# E5M2's 5.3e-2, the paper's Euclidean figure); the runs stay as near fp32 as the E4M3 ones
# (worst 8.1e-4 and 1.6e-3 over 20 steps and the seven kernel families, the same 2e-2 bound);
# geofp8 on fc2 keeps its first-step gain (ratio 0.746, E4M3's 0.740); the format is named in the
# configuration table.
for n in 1 2; do
    timeout 300 mpirun --oversubscribe -np $n "$BIN" "${RUN[@]}" -c fp8 --fp8-format e5m2 -o "$TMP/fp8_e5m2_$n" >"$TMP/fp8_e5m2_$n.out" 2>&1 ||
        fail "mode_fp8_e5m2_np${n}_runs" "$(why "$TMP/fp8_e5m2_$n.out")"
done
timeout 300 mpirun --oversubscribe -np 2 "$BIN" "${RUN[@]}" -c geofp8 --geofp8-layers $FC2 --fp8-format e5m2 -o "$TMP/geofc2_e5m2_2" \
    >"$TMP/geofc2_e5m2.out" 2>&1 || fail geofp8_fc2_e5m2_runs "$(why "$TMP/geofc2_e5m2.out")"
if grep -q "| grad communication *| fp8 (e5m2, native)" "$TMP/fp8_e5m2_2.out"; then pass fp8_format_in_config_table
else fail fp8_format_in_config_table "$(grep 'grad communication' "$TMP/fp8_e5m2_2.out")"; fi
python3 - "$TMP" <<'PYEOF3'
import json, math, sys
sys.path.insert(0, "test")
from testlib import bound
d = sys.argv[1]
def rows(run):
    try:
        return {r["step"]: r for r in map(json.loads, open(f"{d}/{run}/metrics.jsonl")) if "train_loss" in r}
    except OSError:
        return {}
fails = 0
for n in (1, 2):
    e5, e4, base = rows(f"fp8_e5m2_{n}"), rows(f"fp8_{n}"), rows(f"fp32_{n}")
    if len(e5) != 20 or len(e4) != 20 or len(base) != 20:
        print(f"FAIL mode_fp8_e5m2_np{n}: {len(e5)}, {len(e4)}, {len(base)} logged steps, expected 20"); fails += 1; continue
    ratio = e5[1]["fidelity_rel_l2"] / e4[1]["fidelity_rel_l2"]
    ok = 1.8 <= ratio <= 2.2
    print(("PASS" if ok else "FAIL") + f" mode_fp8_e5m2_np{n}_first_step_rel_l2_twice_e4m3: {e5[1]['fidelity_rel_l2']:.4e} / "
          f"{e4[1]['fidelity_rel_l2']:.4e} = {ratio:.3f} (bound [1.8, 2.2])")
    fails += not ok
    dev = max(abs(e5[s]["train_loss"] - base[s]["train_loss"]) / base[s]["train_loss"] if math.isfinite(e5[s]["train_loss"]) else math.inf for s in base)
    fails += not bound(f"mode_fp8_e5m2_np{n}_losses_near_fp32", dev, 2e-2, "max rel diff over 20 steps")
g, e = rows("geofc2_e5m2_2"), rows("fp8_e5m2_2")
fc2 = [f"layers.{l}.fc2" for l in range(4)]
if 1 in g and 1 in e:
    fails += not bound("geofp8_np2_fc2_e5m2_rel_l2_below_fp8_first_step",
                       sum(g[1]["fidelity_units"][u][0] for u in fc2) / sum(e[1]["fidelity_units"][u][0] for u in fc2), 1.0,
                       "RelL2 geofp8 / fp8 on the fc2 units at step 1, E5M2")
else:
    print("FAIL geofp8_np2_fc2_e5m2_rel_l2_below_fp8_first_step: no step 1 logged"); fails += 1
sys.exit(1 if fails else 0)
PYEOF3
[ $? -eq 0 ] || failures=$((failures + 1))

[ "$failures" -eq 0 ]
