#!/usr/bin/env bash
# eval_paper_runs.sh — after the paper runs (submit_paper_runs.sh): each finished run's newest
# model checkpoint exported to Hugging Face (scripts/export_hf.py), evaluated on the paper's 14
# tasks with lm-eval (scripts/eval_downstream.sh), then Table III printed in the paper's layout
# (scripts/eval_table.py --row, fp32 as each model's baseline for "Wins vs. FP32").
#   scripts/slurm/eval_paper_runs.sh              on a GPU node (DEVICE=cuda) or CPU (DEVICE=cpu)
#   DRY_RUN=1 scripts/slurm/eval_paper_runs.sh    print the commands, run nothing
#   LIMIT=N                                       lm-eval's --limit (a quick look, not the paper's figures)
# Runs: $OUT_ROOT/<model>_<mode> for Table III's rows (config.sh); a run without a model_*.bin is
# left out with one line. Exports go to $OUT_ROOT/hf/<run>, lm-eval's results to $OUT_ROOT/eval/<run>,
# the table to $OUT_ROOT/eval/table3.md.
set -euo pipefail
# shellcheck source=config.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/config.sh"
cd "$REPO_DIR"
DEVICE=${DEVICE:-cuda}
run() { if [[ "${DRY_RUN:-0}" == 1 ]]; then echo "would run: $*"; else "$@"; fi; }
method_name() {
    case "$1" in
        fp32) echo FP32 ;; bf16) echo BF16 ;; fp8block) echo "Per-block Euclidean" ;; fp8) echo Euclidean ;;
        kfac) echo "Full K-FAC" ;; geofp8) echo GIFT ;; *) echo "$1" ;;
    esac
}
rows=()
for spec in llama600m:fp32 llama600m:bf16 llama600m:fp8block llama600m:fp8 llama600m:geofp8 \
            llama300m:fp32 llama300m:fp8 llama300m:kfac llama300m:geofp8; do
    model=${spec%%:*} mode=${spec#*:} name=${spec/:/_}
    dir=$OUT_ROOT/$name
    ckpt=$(ls "$dir"/model_*.bin 2>/dev/null | sort | tail -1 || true)
    if [[ -z "$ckpt" ]]; then echo "eval_paper_runs: $name: no model_*.bin in $dir, left out"; continue; fi
    run python3 scripts/export_hf.py "$ckpt" "$OUT_ROOT/hf/$name" --replace
    run bash scripts/eval_downstream.sh "$OUT_ROOT/hf/$name" --out "$OUT_ROOT/eval/$name" --name "$name" \
        --device "$DEVICE" ${LIMIT:+--limit "$LIMIT"}
    size=${model#llama}; size=${size^^}
    rows+=(--row "$size" "$(method_name "$mode")" "$OUT_ROOT/eval/$name")
done
if [[ ${#rows[@]} -eq 0 ]]; then echo "error: no finished run in $OUT_ROOT (expected <model>_<mode>/model_*.bin)" >&2; exit 1; fi
if [[ "${DRY_RUN:-0}" == 1 ]]; then
    echo "would run: python3 scripts/eval_table.py --baseline-method FP32 $(printf '%q ' "${rows[@]}")"
else
    python3 scripts/eval_table.py --baseline-method FP32 "${rows[@]}" | tee "$OUT_ROOT/eval/table3.md"
fi
