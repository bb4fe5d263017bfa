#!/usr/bin/env bash
# Regenerates the bundled default dataset data/kjv/ from the King James Bible text.
# Documents are the 66 books: the text marks each book with an unindented heading line
# "<Book> 1" (its first chapter), so the file is split just before those lines.
# Val is the first book(s), about --val-tokens tokens; the rest is one train shard.
# Run from anywhere; the output is deterministic (same bytes every run).
set -euo pipefail
cd "$(dirname "$0")/.."
python data/prepare_text.py ../shared/corpus/kjv.txt \
    --out-dir data/kjv --name kjv \
    --vocab-dir ../shared/tokenizer/gpt2 \
    --doc-split 'regex:^(?=(?:[123] )?[A-Z][A-Za-z ]* 1$)' \
    --val-tokens 65536
