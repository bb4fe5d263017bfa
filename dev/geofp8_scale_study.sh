#!/usr/bin/env bash
# geofp8_scale_study.sh — GeoFP8 against Euclidean FP8 where the paper runs it: N = 2 real MPI
# ranks and N = 16, 64 virtual ranks (--virtual-ranks N on 2 processes: the communication's
# numerics of N ranks), several seeds, every mode paired with fp32 by seed (the same
# initialization, data and global batch), so that only the communication differs.
#
# Model: the small test model (tiny's layers, the bundled KJV text renumbered to 1000 tokens,
# test/testlib.py). Every run: global batch 2048 tokens (-t 32, 64 / N micro-steps per rank),
# STEPS steps, lr 3e-3 with 5 warmup steps; val loss at the end on 4096 tokens (the same tokens
# for every mode at one N); fidelity every 5 steps and windows of 10 steps on the geometry units.
#
# One row per run as it completes, then one row per (N, mode) over the seeds, mean ± std of:
#   dval     val loss - fp32's val loss of the same seed and N (in % of fp32's)
#   recover  1 - dval / dval(fp8) of the same seed and N: the share of fp8's gap the mode removes
#            ("—" where fp8's val loss is not above fp32's on that seed: there is no gap)
#   win geo/fp8+EF  the windowed fair ratio: RelL2 of a window's summed geo gradient against the
#            exact sum, over the same for plain fp8 with its own error feedback
#            (docs/gradient_communication.md, "Fair fidelity figures"); mean over the run's
#            windows, and the largest
#   step geo/fp8    the one-step ratio of (a) to (c) on the fidelity steps
#
# Usage: bash dev/geofp8_scale_study.sh [STEPS] [SEEDS] [RANKS] [OUT]
#        (defaults: 60 "1 2 3" "2 16 64" out/scale_study)
#        MODES="name|flags;..." replaces the list of modes; fp32 (the baseline) and fp8 (the gap)
#        run first at every N whatever the list says. A run whose metrics.jsonl in OUT already
#        holds its final val loss is not run again (its row is printed from it).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
STEPS=${1:-60}
SEEDS=${2:-"1 2 3"}
RANKS=${3:-"2 16 64"}
OUT=${4:-out/scale_study}
make -s train_llama_cpu || exit 1
read -ra SMALL <<<"$(python3 test/testlib.py --small-model)" || exit 1
ROOT_FLAG=$([ "$(id -u)" = 0 ] && echo --allow-run-as-root)
FC2=$(echo layers.{0..3}.fc2 | tr ' ' ,)
LINEAR=$(echo layers.{0..3}.{qkv,proj,fc1,fc2} | tr ' ' ,)
GEO_FID=(--fidelity-every 5 --fidelity-window 10 --geofp8-profile-steps 10)
MODES=${MODES:-"bf16|-c bf16;fp8 twophase|-c fp8 --fp8-reduce twophase;geofp8 paper (p 1, refresh 50)|-c geofp8 --geofp8-power 1 --geofp8-refresh 50;geofp8 best (p auto, refresh 1)|-c geofp8 --geofp8-power auto --geofp8-refresh 1;geofp8 best + twophase|-c geofp8 --geofp8-power auto --geofp8-refresh 1 --fp8-reduce twophase;geofp8 best, all fc2|-c geofp8 --geofp8-power auto --geofp8-refresh 1 --geofp8-layers $FC2;geofp8 best, all linear|-c geofp8 --geofp8-power auto --geofp8-refresh 1 --geofp8-layers $LINEAR"}
mkdir -p "$OUT"
echo "small model (tiny's layers, 1000 tokens), global batch 2048 tokens, $STEPS steps, seeds $SEEDS; val on 4096 tokens"
echo "| N | mode | seed | val loss | dval vs fp32 | recover | win geo/fp8+EF mean (max) | step geo/fp8 | s/step |"
echo "|---|---|---|---|---|---|---|---|---|"
for n in $RANKS; do
    micro=$((64 / n))
    [ "$micro" -ge 1 ] || { echo "N $n: more than 64 ranks do not divide the batch"; continue; }
    launch=(mpirun $ROOT_FLAG --oversubscribe -np 2)
    [ "$n" -gt 2 ] && vr=(--virtual-ranks "$n") || vr=()
    IFS=';' read -ra runs <<<"fp32|-c fp32;fp8|-c fp8;$MODES"
    for v in "${runs[@]}"; do
        name=${v%%|*} flags=${v#*|}
        tag=$(echo "$name" | tr -c 'a-zA-Z0-9.\n' '_')
        for seed in $SEEDS; do
            dir="$OUT/n${n}_${tag}_s$seed"
            if python3 -c 'import json, sys; sys.exit(0 if any(json.loads(l).get("step") == int(sys.argv[2]) and "val_loss" in l
                           for l in open(sys.argv[1])) else 1)' "$dir/metrics.jsonl" "$STEPS" 2>/dev/null; then
                python3 dev/geofp8_scale_table.py row "$OUT" "$n" "$tag" "$name" "$seed"  # finished before: its row again
                continue
            fi
            # shellcheck disable=SC2086
            OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive "${launch[@]}" ./train_llama_cpu "${SMALL[@]}" -b 1 -t 32 -d 2048 -x "$STEPS" \
                -l 3e-3 -u 5 -v "$STEPS" -m $((4096 / (n * 32))) -s 0 -n -1 --seed "$seed" "${GEO_FID[@]}" "${vr[@]}" $flags \
                -o "$dir" --overwrite 1 >"$dir.log" 2>&1 || { echo "| $n | $name | $seed | failed: $(tail -1 "$dir.log") |"; continue; }
            python3 dev/geofp8_scale_table.py row "$OUT" "$n" "$tag" "$name" "$seed"
        done
        python3 dev/geofp8_scale_table.py summary "$OUT" "$n" "$tag" "$name" "$SEEDS"
    done
done
