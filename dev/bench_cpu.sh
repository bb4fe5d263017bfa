#!/usr/bin/env bash
# bench_cpu.sh — tokens/s of train_llama_cpu before and after its choice of OpenBLAS kernels
# (--blas-auto 0: OpenBLAS's own choice; --blas-auto 1: the engine's, llmc/blas_select.h), and
# against a plain PyTorch CPU training step of the identical model (dev/bench_pytorch.py: fp32,
# Muon's Newton-Schulz in fp32 as the engine's), same presets, B, T and threads, in one run, so
# the ratios are measured under the same conditions. Each row is printed as soon as its runs are
# done. Needs torch for the baseline (the column says n/a without it; PYTHON names an interpreter
# that has it).
#   bash dev/bench_cpu.sh [STEPS]        (make bench)      PRESETS="tiny d12" THREADS=2 B=4 T=256
#   AS_IF_CORE=Prescott bash dev/bench_cpu.sh   as on a CPU this OpenBLAS does not know: "before"
#                                        runs OPENBLAS_CORETYPE=Prescott, "after" lets the engine
#                                        choose as if OpenBLAS had named Prescott (its test hook
#                                        TRAIN_LLAMA_BLAS_TEST)
#   OPENBLAS_CORETYPE=Haswell bash dev/bench_cpu.sh       both rows on the kernels set
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
AS_IF_CORE=${AS_IF_CORE:-}
echo "| preset | B | T | threads | OpenBLAS kernels | train_llama_cpu tok/s | PyTorch tok/s (fp32, NS fp32) | ratio |"
echo "|---|---|---|---|---|---|---|---|"
for preset in $PRESETS; do
    theirs=""
    if [ $have_torch = 1 ]; then
        theirs=$("$PYTHON" dev/bench_pytorch.py --preset "$preset" -b "$B" -t "$T" --steps "$STEPS" --threads "$THREADS" |
                 sed -n 's/.*tokens\/s=\([0-9.]*\).*/\1/p')
    fi
    for auto in 0 1; do
        # the engine's average excludes its first (warm-up) step; its table names the BLAS kernels
        # and why they run
        env=(OMP_NUM_THREADS=$THREADS)
        if [ -n "$AS_IF_CORE" ]; then
            if [ $auto = 0 ]; then env+=(OPENBLAS_CORETYPE="$AS_IF_CORE"); else env+=(TRAIN_LLAMA_BLAS_TEST="$AS_IF_CORE"); fi
        fi
        out=$(env -u TRAIN_LLAMA_BLAS_AUTO "${env[@]}" ./train_llama_cpu -e "$preset" -b "$B" -t "$T" -x $((STEPS + 1)) -v 0 --blas-auto $auto 2>&1)
        ours=$(sed -n 's/.* \([0-9.]*\) tok\/s average.*/\1/p' <<<"$out")
        kernels=$(sed -n 's/^| BLAS *| OpenBLAS, \([A-Za-z0-9]*\) kernels.*/\1/p' <<<"$out")
        label="${kernels:-?} ($([ $auto = 0 ] && echo "--blas-auto 0" || echo "--blas-auto 1"))"
        ratio=$(python3 -c "print('%.2f' % ($ours / $theirs))" 2>/dev/null || echo "n/a")
        printf "| %s | %d | %d | %d | %s | %s | %s | %s |\n" "$preset" "$B" "$T" "$THREADS" "$label" "${ours:-failed}" "${theirs:-n/a}" "$ratio"
    done
done
