#!/usr/bin/env bash
# test_blas_select.sh — train_llama_cpu's choice of OpenBLAS kernels (llmc/blas_select.h), each
# path driven through its test hook TRAIN_LLAMA_BLAS_TEST=<core>[,mismatch] (the first start
# behaves as if OpenBLAS had named <core>), on the small test model for one step:
#   - as if OpenBLAS named Prescott: the engine runs the kernels this CPU's flags call for
#     (/proc/cpuinfo: avx512f+bw+vl+dq+cd -> SkylakeX, else avx2+fma -> Haswell, else Prescott
#     stays) and its BLAS row says why; on 2 ranks both run them and rank 0 prints one table;
#   - a failed self-check: one warning, the run goes on on OpenBLAS's own choice (Prescott) and
#     the row says so;
#   - a set OPENBLAS_CORETYPE is never overridden; --blas-auto 0 and TRAIN_LLAMA_BLAS_AUTO=0 leave
#     OpenBLAS's own choice;
#   - without the hook: where OpenBLAS's own choice is generic the engine upgrades it, else keeps it;
#   - two ranks on different kernels: one error line, exit 1.
# The verdicts do not depend on which kernels this machine has: the expected core follows from
# the CPU's flags. The other tests run with TRAIN_LLAMA_BLAS_AUTO=0 (test/testlib.sh): on the
# environment's kernels.
cd "$(dirname "$0")/.." || exit 1
source test/testlib.sh  # pass, fail, skip, why, small_model
unset TRAIN_LLAMA_BLAS_AUTO TRAIN_LLAMA_BLAS_TEST OPENBLAS_CORETYPE
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
small_model
RUN=("${SMALL[@]}" -b 1 -t 32 -x 1 -v 0 -s 0)
case $(uname -m) in x86_64|i?86) ;; *) echo "SKIP test_blas_select: the choice is made on x86 only ($(uname -m))"; exit 0 ;; esac

flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { grep -qw "$1" <<<"$flags"; }
if has avx512f && has avx512bw && has avx512vl && has avx512dq && has avx512cd; then best=SkylakeX why="AVX-512"
elif has avx2 && has fma; then best=Haswell why="AVX2 and FMA"
else best="" why=""; fi

# the BLAS row of the configuration table, joined onto one line
blas_row() { sed -n '/^| BLAS /,/^| seed /p' "$1" | grep -v '^| seed ' | sed 's/^| [A-Z ]*| //; s/ *|$//' | tr '\n' ' ' | tr -s ' '; }
engine() {  # name, then env assignments and flags: runs one step, output in $TMP/name.out
    local name=$1; shift
    local envs=()
    while [[ $# -gt 0 && $1 == *=* && $1 != -* ]]; do envs+=("$1"); shift; done
    env "${envs[@]}" timeout 120 ./train_llama_cpu "${RUN[@]}" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
}

# --- as if OpenBLAS named Prescott
engine pretend TRAIN_LLAMA_BLAS_TEST=Prescott; rc=$?
row=$(blas_row "$TMP/pretend.out")
if [ -n "$best" ]; then want="OpenBLAS, $best kernels (chosen for this CPU's $why: OpenBLAS named it Prescott; --blas-auto 0 keeps that)"
else want="OpenBLAS, Prescott kernels (OpenBLAS's own choice; the CPU has neither AVX-512 nor AVX2 and FMA)"; fi
if [ $rc = 0 ] && [ "$row" = "$want " ] && [ ! -s "$TMP/pretend.err" ]; then pass blas_choice_upgrades_a_generic_core
else fail blas_choice_upgrades_a_generic_core "rc $rc, row [$row], want [$want], stderr $(head -c 300 "$TMP/pretend.err")"; fi

# --- the self-check fails: one warning, back to OpenBLAS's own choice
engine mismatch TRAIN_LLAMA_BLAS_TEST=Prescott,mismatch; rc=$?
row=$(blas_row "$TMP/mismatch.out")
if [ -z "$best" ]; then skip blas_choice_failed_check_falls_back "this CPU has no kernels to choose ($row)"
elif [ $rc = 0 ] && [ "$(wc -l <"$TMP/mismatch.err")" = 1 ] &&
     grep -q "^warning: OpenBLAS's $best kernels failed the start-up GEMM check against a plain loop; running on its own choice, Prescott" "$TMP/mismatch.err" &&
     [ "$row" = "OpenBLAS, Prescott kernels (OpenBLAS's own choice: its $best kernels failed the start-up check) " ] &&
     grep -q "^done: 1 steps" "$TMP/mismatch.out"; then pass blas_choice_failed_check_falls_back
else fail blas_choice_failed_check_falls_back "rc $rc, row [$row], stderr $(head -c 300 "$TMP/mismatch.err")"; fi

# --- never over a set OPENBLAS_CORETYPE; off with the flag or the variable
engine user OPENBLAS_CORETYPE=Prescott; rc=$?
row=$(blas_row "$TMP/user.out")
if [ $rc = 0 ] && [ "$row" = "OpenBLAS, Prescott kernels (OPENBLAS_CORETYPE=Prescott, as set) " ]; then pass blas_choice_keeps_a_set_coretype
else fail blas_choice_keeps_a_set_coretype "rc $rc, row [$row]"; fi
engine off_env TRAIN_LLAMA_BLAS_AUTO=0; rc1=$?
own=$(blas_row "$TMP/off_env.out" | sed -n 's/^OpenBLAS, \([A-Za-z0-9]*\) kernels.*/\1/p')
engine off_flag --blas-auto 0; rc2=$?
row1=$(blas_row "$TMP/off_env.out") row2=$(blas_row "$TMP/off_flag.out")
if [ $rc1 = 0 ] && [ $rc2 = 0 ] && [ -n "$own" ] &&
   [ "$row1" = "OpenBLAS, $own kernels (OpenBLAS's own choice; no choice with TRAIN_LLAMA_BLAS_AUTO=0) " ] &&
   [ "$row2" = "OpenBLAS, $own kernels (OpenBLAS's own choice; no choice with --blas-auto 0) " ]; then pass blas_choice_off_by_flag_or_variable
else fail blas_choice_off_by_flag_or_variable "rc $rc1/$rc2, rows [$row1] [$row2]"; fi

# --- without the hook: OpenBLAS's own choice, upgraded where it is generic
engine plain; rc=$?
row=$(blas_row "$TMP/plain.out")
case $own in
    Katmai|Coppermine|Northwood|Prescott|Banias|Core2|Penryn|Dunnington|Nehalem|Atom|Sandybridge|Generic|generic|Unknown)
        if [ -n "$best" ]; then want="OpenBLAS, $best kernels (chosen for this CPU's $why: OpenBLAS named it $own; --blas-auto 0 keeps that)"
        else want="OpenBLAS, $own kernels (OpenBLAS's own choice; the CPU has neither AVX-512 nor AVX2 and FMA)"; fi ;;
    *) want="OpenBLAS, $own kernels (OpenBLAS's own choice for this CPU)" ;;
esac
if [ $rc = 0 ] && [ "$row" = "$want " ]; then pass "blas_choice_on_this_machine"; echo "  OpenBLAS's own choice here: $own; the engine runs: ${row%% (*}"
else fail blas_choice_on_this_machine "rc $rc, row [$row], want [$want]"; fi

# --- two ranks: the same choice on both, one table; ranks on different kernels are refused
if command -v mpirun >/dev/null 2>&1; then
    TRAIN_LLAMA_BLAS_TEST=Prescott timeout 120 mpirun -np 2 -x TRAIN_LLAMA_BLAS_TEST ./train_llama_cpu "${RUN[@]}" >"$TMP/mpi.out" 2>"$TMP/mpi.err"; rc=$?
    row=$(blas_row "$TMP/mpi.out")
    if [ $rc = 0 ] && [ "$(grep -c '^| BLAS ' "$TMP/mpi.out")" = 1 ] && [ "${row%% (*}" = "OpenBLAS, ${best:-Prescott} kernels" ]; then pass blas_choice_two_ranks
    else fail blas_choice_two_ranks "rc $rc, row [$row], $(why "$TMP/mpi.err")"; fi
    other=Prescott; [ "$own" = Prescott ] && other=Nehalem
    timeout 120 mpirun -np 1 ./train_llama_cpu "${RUN[@]}" --blas-auto 0 : -np 1 env OPENBLAS_CORETYPE=$other ./train_llama_cpu "${RUN[@]}" --blas-auto 0 \
        >"$TMP/mix.out" 2>"$TMP/mix.err"; rc=$?
    n=$(grep -c '^error: ' "$TMP/mix.err")
    if [ $rc != 0 ] && [ "$n" = 1 ] &&
       grep -q "^error: rank 1 runs OpenBLAS's $other kernels, rank 0 its $own kernels; every rank must run the same (set OPENBLAS_CORETYPE=$own for the whole job)$" "$TMP/mix.err"
    then pass blas_ranks_on_different_kernels_refused
    else fail blas_ranks_on_different_kernels_refused "rc $rc, $n error lines: $(head -c 300 "$TMP/mix.err")"; fi
else
    skip blas_choice_two_ranks "mpirun not found"
fi
exit $((failures > 0))
