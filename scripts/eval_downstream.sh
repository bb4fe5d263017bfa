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
# first run); needs `pip install lm_eval`. Every bad argument or missing piece is one line
# "error: ..." and exit status 1; lm-eval's own output on stderr goes to OUT/lm_eval.log, and its
# failure is one line quoting that log's last line.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '4,13p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "error: $*" >&2; exit 1; }

[ $# -ge 1 ] || die "expected HF_DIR [TASKS] [flags], found no arguments (see --help)"
case "$1" in -h|--help) usage; exit 0 ;; esac
HF_DIR=$1; shift
TASKS=$(cd "$REPO/scripts" && python3 -c "import eval_table; print(eval_table.PAPER_TASKS)" 2>/dev/null) ||
    die "cannot read the paper's task list from $REPO/scripts/eval_table.py (python3 with its imports needed)"
if [ $# -gt 0 ] && [[ "$1" != --* ]]; then
    TASKS=$1; shift
    [[ "$TASKS" =~ ^[^,[:space:]]+(,[^,[:space:]]+)*$ ]] || die "TASKS: expected a comma list of lm-eval task names, found '$TASKS'"
fi
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
[ ${#BATCH} -le 9 ] || die "--batch-size: expected a positive integer below 10^9, found '$BATCH'"
[ ${#LIMIT} -le 12 ] || die "--limit: expected a positive integer below 10^12, found '$LIMIT'"
[ -z "$DEVICE" ] || [[ "$DEVICE" =~ ^(cpu|cuda(:[0-9]+)?|mps)$ ]] || die "--device: expected cpu, cuda, cuda:N or mps, found '$DEVICE'"
OUT=${OUT:-$HF_DIR/eval}
[ ! -e "$OUT" ] || [ -d "$OUT" ] || die "--out: '$OUT' exists and is not a directory (expected a folder for lm-eval's results)"
python3 -c "import lm_eval" 2>/dev/null || die "lm-eval is not installed for $(command -v python3) (pip install 'lm_eval[hf]')"
[ -n "$DEVICE" ] || DEVICE=$(python3 -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')" 2>/dev/null) ||
    die "cannot import torch to choose the device (pip install torch, or pass --device cpu)"
NAME=${NAME:-$(basename "$(cd "$HF_DIR" && pwd)")}

args=(--model hf --model_args "pretrained=$HF_DIR,dtype=float32" --tasks "$TASKS" --num_fewshot 0
      --batch_size "$BATCH" --device "$DEVICE" --output_path "$OUT")
[ -z "$INCLUDE" ] || args+=(--include_path "$INCLUDE")
[ -z "$LIMIT" ] || args+=(--limit "$LIMIT")
echo "eval_downstream: lm_eval ${args[*]}"
mkdir -p "$OUT" 2>/dev/null || die "--out: cannot create the folder '$OUT'"
LOG=$OUT/lm_eval.log
rc=0
python3 -m lm_eval "${args[@]}" 2>"$LOG" || rc=$?
if [ $rc -ne 0 ]; then
    last=$(grep -v '^[[:space:]]*$' "$LOG" | tail -n 1 | cut -c1-300)
    die "lm_eval exited with status $rc: ${last:-no output} (its stderr: $LOG; hint: without network, cache the datasets and set HF_DATASETS_OFFLINE=1)"
fi
table=(python3 "$REPO/scripts/eval_table.py" "$OUT" --name "$NAME")
[ -z "$BASELINE" ] || table+=(--baseline "$BASELINE" --baseline-name "$(basename "$BASELINE")")
"${table[@]}"
