#!/usr/bin/env bash
# submit_paper_runs.sh — submits the paper's eight pretraining runs on 32 GPUs:
#   {llama300m (T 4096), llama600m (T 2048)} x {fp32, bf16, fp8, geofp8}
# each with global batch 512 sequences (-d 512*T tokens), micro-batch 4, Muon, lr 5e-4 cosine to
# 5e-5 (-q 0.1), one epoch of OpenWebText (-x -1), checkpoints every CHECKPOINT_EVERY steps and
# -y 1 (requeue-safe). Per model, the geofp8 run waits for the layer-selection run
# (profile_layers.sbatch) unless its geofp8_layers.txt already exists.
# Usage (from anywhere):  scripts/slurm/submit_paper_runs.sh          (DRY_RUN=1: print the sbatch commands)
# The exact command each job runs (MODEL=llama600m, MODE=geofp8; one task per GPU):
#   srun ./train_llama -o $OUT_ROOT/llama600m_geofp8 -e llama600m -i "$DATA_DIR/openwebtext_train_*.bin"
#        -j "$DATA_DIR/openwebtext_val_*.bin" -b 4 -t 2048 -d 1048576 -x -1 -l 5e-4 -q 0.1 -k cosine
#        --optimizer muon --muon moonlight -n 250 -nk 2 -y 1 -v 250 -m 20 --seed 1337 -c geofp8
#        --geofp8-layers $OUT_ROOT/llama600m_profile/geofp8_layers.txt --geofp8-rank 32 --geofp8-refresh 10
#        --geofp8-power auto   (config.sh: GEOFP8_POWER=1 GEOFP8_REFRESH=50 is the paper's Algorithm 1)
set -euo pipefail
# shellcheck source=config.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/config.sh"
cd "$REPO_DIR"
MODELS=${MODELS:-"llama300m llama600m"}
MODES=${MODES:-"fp32 bf16 fp8 geofp8"}
# every job's resources are checked before the first one is submitted
res_profile=$(sbatch_resources "$PAPER_GPUS" "$TIME_PROFILE")
res_pretrain=$(sbatch_resources "$PAPER_GPUS" "$TIME_PRETRAIN")

for MODEL in $MODELS; do
    dep=()
    if [[ " $MODES " == *" geofp8 "* && ! -s "$(layers_file "$MODEL")" ]]; then
        # shellcheck disable=SC2086
        prof=$(submit $res_profile --job-name="profile_$MODEL" \
               --export="ALL,MODEL=$MODEL,REPO_DIR=$REPO_DIR" scripts/slurm/profile_layers.sbatch)
        echo "submitted profile_$MODEL: job $prof"
        dep=(--dependency="afterok:$prof")
    fi
    for MODE in $MODES; do
        extra=()
        [[ "$MODE" == geofp8 ]] && extra=(${dep[@]+"${dep[@]}"})
        # shellcheck disable=SC2086
        job=$(submit $res_pretrain ${extra[@]+"${extra[@]}"} --job-name="${MODEL}_${MODE}" \
              --export="ALL,MODEL=$MODEL,MODE=$MODE,REPO_DIR=$REPO_DIR" scripts/slurm/pretrain.sbatch)
        echo "submitted ${MODEL}_${MODE}: job $job -> $OUT_ROOT/${MODEL}_${MODE}"
    done
done
