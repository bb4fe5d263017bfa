#!/usr/bin/env bash
# prepare_openwebtext.sh — tokenizes OpenWebText into llm.c shards on the cluster's shared file
# system (DATA_DIR of scripts/slurm/config.sh), once, before any run:
#   openwebtext_val_000000.bin, openwebtext_train_000001.bin, ... (100M GPT-2 tokens each)
# Needs network access to the Hugging Face hub and the `datasets` package (pip install datasets);
# the raw download is cached in HF_HOME (also on the shared file system). Output does not depend
# on the worker count.
# Run on a CPU node, interactively or as a batch job from the repo root:
#   source scripts/slurm/config.sh
#   sbatch -A "$SLURM_ACCOUNT_NAME" -p "$SLURM_CPU_PARTITION" -N 1 -n 1 -c 64 -t "$TIME_DATA" scripts/prepare_openwebtext.sh
# Offline (the dataset already unpacked as .txt / .jsonl files): LOCAL_DIR=/path/to/owt scripts/prepare_openwebtext.sh
# Again over earlier shards: scripts/prepare_openwebtext.sh --overwrite (further flags go to data/openwebtext.py)
#SBATCH --job-name=prepare_openwebtext
#SBATCH --output=%x-%j.out
set -euo pipefail
REPO_DIR="${REPO_DIR:-${SLURM_SUBMIT_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}}"
# shellcheck source=slurm/config.sh
source "$REPO_DIR/scripts/slurm/config.sh"
cd "$REPO_DIR"
WORKERS=${WORKERS:-${SLURM_CPUS_PER_TASK:-$(nproc)}}
mkdir -p "$DATA_DIR" "$HF_HOME"
src=()
if [[ -n "${LOCAL_DIR:-}" ]]; then
    src=(--local "$LOCAL_DIR" --vocab-dir "${VOCAB_DIR:-../shared/tokenizer/gpt2}")
fi
echo "prepare_openwebtext: $WORKERS workers -> $DATA_DIR"
python3 data/openwebtext.py --out-dir "$DATA_DIR" --workers "$WORKERS" ${src[@]+"${src[@]}"} "$@"
ls -l "$DATA_DIR" | head
