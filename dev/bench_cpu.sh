#!/usr/bin/env bash
# bench_cpu.sh — tokens/s of train_llama_cpu against a plain PyTorch CPU training step of the
# identical model (dev/bench_pytorch.py), same presets, B, T and threads, in one run, so the ratio
# is measured under the same conditions. Needs torch for the baseline (skipped without it).
#   bash dev/bench_cpu.sh [STEPS]        (make bench)
set -u
cd "$(dirname "$0")/.." || exit 1
STEPS=${1:-10}
THREADS=${THREADS:-2}
B=${B:-4}
T=${T:-256}
make --no-print-directory train_llama_cpu >/dev/null || exit 1
printf "| preset | B | T | threads | train_llama_cpu tok/s | PyTorch tok/s | ratio |\n|---|---|---|---|---|---|---|\n" >/tmp/bench_cpu_table.$$
for preset in tiny d12; do
    # the engine's average excludes its first (warm-up) step
    ours=$(OMP_NUM_THREADS=$THREADS ./train_llama_cpu -e $preset -b $B -t $T -x $((STEPS + 1)) -v 0 2>&1 |
           sed -n 's/.* \([0-9.]*\) tok\/s average.*/\1/p')
    theirs=""
    if python3 -c "import torch" 2>/dev/null; then
        theirs=$(python3 dev/bench_pytorch.py --preset $preset -b $B -t $T --steps "$STEPS" --threads "$THREADS" |
                 sed -n 's/.*tokens\/s=\([0-9.]*\).*/\1/p')
    fi
    ratio=$(python3 -c "print('%.2f' % ($ours / $theirs))" 2>/dev/null || echo "n/a")
    printf "| %s | %d | %d | %d | %s | %s | %s |\n" $preset $B $T $THREADS "$ours" "${theirs:-n/a}" "$ratio" >>/tmp/bench_cpu_table.$$
done
cat /tmp/bench_cpu_table.$$
rm -f /tmp/bench_cpu_table.$$
