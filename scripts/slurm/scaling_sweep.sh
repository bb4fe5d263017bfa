#!/usr/bin/env bash
# scaling_sweep.sh — the step-time study of the paper's Figure 5: for each model and each GPU count
# in 8, 16, 32, 64, one short run per mode (fp32, bf16, fp8, geofp8) with the paper's recipe (global
# batch 512 sequences, so more GPUs means fewer micro-steps each and a larger share of
# communication). Each run does STEPS (110) optimizer steps and writes metrics.jsonl (fields step,
# ms, tokens_per_s, comm_bytes) to $OUT_ROOT/scaling/<model>_<mode>_<N>gpu; the first steps are
# warm-up and scripts/plot_scaling.py drops them; 100 measured steps include two GeoFP8 factor
# refreshes (every 50 steps), so the refresh cost is amortized as in a long run. The end-of-run
# checkpoint is deleted (CLEAN_CHECKPOINTS=1): only the timings are kept.
# geofp8 needs the selected layers of profile_layers.sbatch ($OUT_ROOT/<model>_profile/geofp8_layers.txt).
# Usage:  scripts/slurm/scaling_sweep.sh      (DRY_RUN=1 prints the sbatch commands)
#         then: python3 scripts/plot_scaling.py --root $OUT_ROOT/scaling --out scaling.png
set -euo pipefail
# shellcheck source=config.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/config.sh"
cd "$REPO_DIR"
MODELS=${MODELS:-"llama300m llama600m"}
MODES=${MODES:-"fp32 bf16 fp8 geofp8"}
GPU_COUNTS=${GPU_COUNTS:-"8 16 32 64"}
STEPS=${STEPS:-110}

# everything is checked before the first job is submitted
for N in $GPU_COUNTS; do sbatch_resources "$N" "$TIME_SCALING" >/dev/null; done
for MODEL in $MODELS; do
    if [[ " $MODES " == *" geofp8 "* && ! -s "$(layers_file "$MODEL")" && "${DRY_RUN:-0}" != 1 ]]; then
        echo "error: $(layers_file "$MODEL") is missing; run profile_layers.sbatch for $MODEL first" >&2
        exit 1
    fi
done

for MODEL in $MODELS; do
    for N in $GPU_COUNTS; do
        res=$(sbatch_resources "$N" "$TIME_SCALING")
        for MODE in $MODES; do
            run_dir="$OUT_ROOT/scaling/${MODEL}_${MODE}_${N}gpu"
            # shellcheck disable=SC2086
            job=$(submit $res --job-name="scale_${MODEL}_${MODE}_${N}" --no-requeue \
                  --export="ALL,MODEL=$MODEL,MODE=$MODE,REPO_DIR=$REPO_DIR,RUN_DIR=$run_dir,STEPS=$STEPS,RESUME=0,VAL_EVERY=0,CHECKPOINT_EVERY=0,CLEAN_CHECKPOINTS=1" \
                  scripts/slurm/pretrain.sbatch)
            echo "submitted $MODEL $MODE on $N GPUs: job $job -> $run_dir"
        done
    done
done
