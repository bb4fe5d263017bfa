#!/usr/bin/env bash
# eval_downstream.sh — the paper's downstream evaluation (Table III) of an exported model with
# lm-eval-harness, then the table in the paper's column order (scripts/eval_table.py).
#
#   bash scripts/eval_downstream.sh HF_DIR [TASKS] [--baseline RESULTS] [--out DIR] [--name NAME]
#        [--include-path DIR] [--batch-size N] [--device cpu|cuda] [--limit N]
#
# HF_DIR: a folder from scripts/export_hf.py. TASKS: a comma list of lm-eval task names, by
# default the paper's 14 (boolq,cb,copa,multirc,record,rte,wic,wsc,lambada_openai,race,mathqa,
# piqa,winogrande,lambada_standard; zero-shot). --baseline: another run's results (its --out
# directory or a results_*.json) for the "wins vs" column. --include-path: a folder of custom task
# YAMLs (lm-eval's --include_path). The datasets come from the Hugging Face hub (cached after the
# first run); needs `pip install lm_eval`.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '4,13p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "error: $*" >&2; exit 1; }

[ $# -ge 1 ] || { usage >&2; exit 1; }
case "$1" in -h|--help) usage; exit 0 ;; esac
HF_DIR=$1; shift
TASKS=$(python3 -c "import sys; sys.path.insert(0, '$REPO/scripts'); import eval_table; print(eval_table.PAPER_TASKS)")
if [ $# -gt 0 ] && [[ "$1" != --* ]]; then TASKS=$1; shift; fi
BASELINE="" OUT="" NAME="" INCLUDE="" BATCH=8 DEVICE="" LIMIT=""
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || die "$1: expected a value after the flag"
    case "$1" in
        --baseline) BASELINE=$2 ;; --out) OUT=$2 ;; --name) NAME=$2 ;; --include-path) INCLUDE=$2 ;;
        --batch-size) BATCH=$2 ;; --device) DEVICE=$2 ;; --limit) LIMIT=$2 ;;
        *) die "unknown flag '$1' (see --help)" ;;
    esac
    shift 2
done
[ -f "$HF_DIR/config.json" ] && [ -f "$HF_DIR/model.safetensors" ] ||
    die "HF_DIR: '$HF_DIR' is not an exported model folder (no config.json and model.safetensors; hint: scripts/export_hf.py)"
[ -z "$INCLUDE" ] || [ -d "$INCLUDE" ] || die "--include-path: '$INCLUDE' is not a directory"
[ -z "$BASELINE" ] || [ -e "$BASELINE" ] || die "--baseline: '$BASELINE' does not exist"
[[ "$BATCH" =~ ^[1-9][0-9]*$ ]] || die "--batch-size: expected a positive integer, found '$BATCH'"
[ -z "$LIMIT" ] || [[ "$LIMIT" =~ ^[1-9][0-9]*$ ]] || die "--limit: expected a positive integer, found '$LIMIT'"
command -v lm_eval >/dev/null 2>&1 || python3 -c "import lm_eval" 2>/dev/null || die "lm-eval is not installed (pip install lm_eval)"
[ -n "$DEVICE" ] || DEVICE=$(python3 -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")
OUT=${OUT:-$HF_DIR/eval}
NAME=${NAME:-$(basename "$(cd "$HF_DIR" && pwd)")}

args=(--model hf --model_args "pretrained=$HF_DIR,dtype=float32" --tasks "$TASKS" --num_fewshot 0
      --batch_size "$BATCH" --device "$DEVICE" --output_path "$OUT")
[ -z "$INCLUDE" ] || args+=(--include_path "$INCLUDE")
[ -z "$LIMIT" ] || args+=(--limit "$LIMIT")
echo "eval_downstream: lm_eval ${args[*]}"
python3 -m lm_eval "${args[@]}"
table=(python3 "$REPO/scripts/eval_table.py" "$OUT" --name "$NAME")
[ -z "$BASELINE" ] || table+=(--baseline "$BASELINE" --baseline-name "$(basename "$BASELINE")")
"${table[@]}"
