#!/usr/bin/env bash
# bench_cpu.sh — tokens/s of train_llama_cpu against a plain PyTorch CPU training step of the
# identical model (dev/bench_pytorch.py: fp32, Muon's Newton-Schulz in fp32 as the engine's),
# same presets, B, T and threads, in one run, so the ratio is measured under the same conditions.
# Each row is printed as soon as both of its runs are done. Needs torch for the baseline (the
# column says n/a without it; PYTHON names an interpreter that has it).
#   bash dev/bench_cpu.sh [STEPS]        (make bench)      PRESETS="tiny d12" THREADS=2 B=4 T=256
#   OPENBLAS_CORETYPE=Haswell bash dev/bench_cpu.sh       the engine on other OpenBLAS kernels
set -u
cd "$(dirname "$0")/.." || exit 1
STEPS=${1:-10}
THREADS=${THREADS:-2}
B=${B:-4}
T=${T:-256}
PRESETS=${PRESETS:-tiny d12}
PYTHON=${PYTHON:-python3}
case $STEPS in ''|*[!0-9]*|0) echo "bench_cpu: STEPS: expected a positive integer, found '$STEPS'" >&2; exit 1 ;; esac
make --no-print-directory train_llama_cpu >/dev/null || exit 1
have_torch=0
"$PYTHON" -c "import torch" 2>/dev/null && have_torch=1
echo "| preset | B | T | threads | OpenBLAS kernels | train_llama_cpu tok/s | PyTorch tok/s (fp32, NS fp32) | ratio |"
echo "|---|---|---|---|---|---|---|---|"
for preset in $PRESETS; do
    # the engine's average excludes its first (warm-up) step; its table names the BLAS kernels
    # (OpenBLAS's choice for the CPU, or OPENBLAS_CORETYPE's); PyTorch brings its own BLAS
    out=$(OMP_NUM_THREADS=$THREADS ./train_llama_cpu -e "$preset" -b "$B" -t "$T" -x $((STEPS + 1)) -v 0 2>&1)
    ours=$(sed -n 's/.* \([0-9.]*\) tok\/s average.*/\1/p' <<<"$out")
    kernels=$(sed -n 's/^| BLAS *| OpenBLAS, \([A-Za-z0-9]*\) kernels.*/\1/p' <<<"$out")
    theirs=""
    if [ $have_torch = 1 ]; then
        theirs=$("$PYTHON" dev/bench_pytorch.py --preset "$preset" -b "$B" -t "$T" --steps "$STEPS" --threads "$THREADS" |
                 sed -n 's/.*tokens\/s=\([0-9.]*\).*/\1/p')
    fi
    ratio=$(python3 -c "print('%.2f' % ($ours / $theirs))" 2>/dev/null || echo "n/a")
    printf "| %s | %d | %d | %d | %s | %s | %s | %s |\n" "$preset" "$B" "$T" "$THREADS" "${kernels:-?}" "${ours:-failed}" "${theirs:-n/a}" "$ratio"
done
