#!/usr/bin/env bash
# submit_paper_runs.sh — submits the runs of the paper's Table III on 32 GPUs, as the paper ran
# them (its Algorithm 1: GeoFP8 with whitening power 1 and a fresh factor every 50 steps):
#   llama600m (T 2048): fp32, bf16, fp8block (per-block Euclidean), fp8 (Euclidean), geofp8 (GIFT)
#   llama300m (T 4096): fp32, fp8 (Euclidean), kfac (full K-FAC), geofp8 (GIFT)
# each with global batch 512 sequences (-d 512*T tokens), micro-batch 4, Muon, lr 5e-4 cosine to
# 5e-5 (-q 0.1), one epoch of OpenWebText (-x -1), checkpoints every CHECKPOINT_EVERY steps and
# -y 1 (requeue-safe). Per model, the geofp8 run waits for the layer-selection run
# (profile_layers.sbatch) unless its geofp8_layers.txt already exists.
# Usage (from anywhere):
#   scripts/slurm/submit_paper_runs.sh            submit (refuses the placeholder account CHANGE_ME)
#   DRY_RUN=1 scripts/slurm/submit_paper_runs.sh  submit nothing: each job's "would submit: sbatch ..."
#                                                 line, the trainer command it runs, and its estimate
#   MODES="fp32 geofp8" MODELS=llama300m ...      other runs (MODES applies to every model)
# Each job's line is followed by "  runs: srun <trainer> -o <dir> <flags>" (the exact command of
# every task) and "  estimate: ..." (the epoch's tokens over 32 times one H200's measured tokens/s,
# computation only; scripts/scaling_model.py adds the communication).
# This project's extensions are opt-in (docs/slurm.md): GEOFP8_POWER=auto, GEOFP8_REFRESH=10,
# FIDELITY_EVERY=N. After training: scripts/slurm/eval_paper_runs.sh (export, lm-eval, Table III).
set -euo pipefail
# shellcheck source=config.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/config.sh"
cd "$REPO_DIR"
MODELS=${MODELS:-"llama600m llama300m"}
# every job's resources are checked before the first one is submitted
res_profile=$(sbatch_resources "$PAPER_GPUS" "$TIME_PROFILE")
res_pretrain=$(sbatch_resources "$PAPER_GPUS" "$TIME_PRETRAIN")
verb=submitted
[[ "${DRY_RUN:-0}" == 1 ]] && verb="would submit"

# the epoch's tokens: the train shards' sizes (2-byte tokens after a 1024-byte header), or
# EPOCH_TOKENS, or OpenWebText's 9.0e9 GPT-2 tokens (an assumption, said so)
epoch_tokens() {
    if [[ -n "${EPOCH_TOKENS:-}" ]]; then echo "$EPOCH_TOKENS set"; return; fi
    local total=0 f n=0
    for f in $TRAIN_GLOB; do [[ -f "$f" ]] && total=$((total + ($(stat -c %s "$f") - 1024) / 2)) && n=$((n + 1)); done
    if (( n > 0 )); then echo "$total in $n train shards"; else echo "9000000000 assumed: OpenWebText, no shards in $DATA_DIR yet"; fi
}
read -r tokens tokens_how <<<"$(epoch_tokens)"

estimate() {  # MODEL: one line
    local tps limit
    tps=$(measured_tok_s "$1")
    limit=$(slurm_time_seconds "$TIME_PRETRAIN")
    if [[ -z "$tps" ]]; then echo "  estimate: none (no measured throughput for $1)"; return; fi
    python3 - "$tokens" "$tps" "$PAPER_GPUS" "$limit" "$tokens_how" "$TIME_PRETRAIN" <<'PY'
import sys
tokens, tps, gpus, limit = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
s = tokens / (tps * gpus)
print("  estimate: %dh%02dm of computation for %.3g tokens (%s) at %d tok/s per H200 (measured, 1 GPU, "
      "dev/gpu_results_c950ed2.txt) x %d GPUs, plus communication (scripts/scaling_model.py); time limit %s"
      % (s // 3600, s % 3600 // 60, tokens, sys.argv[5], tps, gpus, sys.argv[6]))
PY
}

for MODEL in $MODELS; do
    case "$MODEL" in
        llama600m) default_modes="fp32 bf16 fp8block fp8 geofp8" ;;
        llama300m) default_modes="fp32 fp8 kfac geofp8" ;;
        *) default_modes="fp32 fp8 geofp8" ;;
    esac
    modes=${MODES:-$default_modes}
    dep=()
    if [[ " $modes " == *" geofp8 "* && ! -s "$(layers_file "$MODEL")" ]]; then
        # shellcheck disable=SC2086
        prof=$(submit $res_profile --job-name="profile_$MODEL" \
               --export="ALL,MODEL=$MODEL,REPO_DIR=$REPO_DIR" scripts/slurm/profile_layers.sbatch)
        echo "$verb profile_$MODEL: job $prof -> $(layers_file "$MODEL")"
        dep=(--dependency="afterok:$prof")
    fi
    for MODE in $modes; do
        pretrain_args "$MODEL" "$MODE"
        extra=()
        [[ "$MODE" == geofp8 ]] && extra=(${dep[@]+"${dep[@]}"})
        # shellcheck disable=SC2086
        job=$(submit $res_pretrain ${extra[@]+"${extra[@]}"} --job-name="${MODEL}_${MODE}" \
              --export="ALL,MODEL=$MODEL,MODE=$MODE,REPO_DIR=$REPO_DIR" scripts/slurm/pretrain.sbatch)
        echo "$verb ${MODEL}_${MODE}: job $job -> $OUT_ROOT/${MODEL}_${MODE}"
        echo "  runs: srun $TRAINER -o $OUT_ROOT/${MODEL}_${MODE} ${PRETRAIN_ARGS[*]}${TRAIN_EXTRA:+ $TRAIN_EXTRA}"
        estimate "$MODEL"
    done
done
