#!/usr/bin/env bash
# Regenerates the bundled default dataset data/kjv/ from the King James Bible text:
#     data/make_default_dataset.sh [OUT_DIR]        (default data/kjv, from the repo root)
# Documents are the 66 books: the text marks each book with an unindented heading line
# "<Book> 1" (its first chapter), so the file is split just before those lines.
# Val is the first book(s), about --val-tokens tokens (Genesis); the rest is one train shard.
# The output is deterministic: the same bytes on every run.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:-data/kjv}"
"${PYTHON:-python3}" data/prepare_text.py ../shared/corpus/kjv.txt \
    --out-dir "$OUT_DIR" --name kjv \
    --vocab-dir ../shared/tokenizer/gpt2 \
    --doc-split 'regex:^(?=(?:[123] )?[A-Z][A-Za-z ]* 1$)' \
    --val-tokens 65536 --overwrite  # a regeneration: the shards already there are replaced
