#!/usr/bin/env bash
# Runs every test program (C++ binaries in build/, Python tests in test/, shell tests in test/)
# from the repository root, counts the "PASS" / "FAIL" / "SKIP" lines and ends with a time table
# (each program's wall time, sorted, and the total) and "N passed, N failed, N skipped".
# Exit status 1 if any check failed or any program crashed.
#
# Programs run side by side, TEST_JOBS at a time (default 2: this machine's cores); most are
# single-process or two ranks of one thread, and they wait on I/O, mpirun start-up and Python in
# between. The quick ones start first, then the long ones longest first (LONGEST below); each
# program's output is kept whole and printed in the usual order (binaries, Python tests, shell
# tests, each alphabetical) once it and every program before it have finished.
#   TEST_JOBS=1 bash test/run_tests.sh          one program at a time
#   bash test/run_tests.sh test/test_cli.sh ... only these programs (also by name: test_cli or cli;
#                                               make test T="cli model")
# A program that fails without a FAIL line of its own gets one: "FAIL <program>: exited with
# status N", followed by the last error: line it printed (the engine's own), if any.
# The budget (DESIGN §12): make test in at most 30 minutes on a fresh clone of this 2-core
# machine. The last line says "over the advisory budget" when more than TEST_BUDGET_S seconds (default 1800)
# passed since TEST_START_EPOCH (make test sets it before its builds; else this script's start).
# The budget is advisory: the verdict stays the checks' own (machines differ in speed, so time
# alone never fails the run), and the line says "over the advisory budget".
cd "$(dirname "$0")/.." || exit 1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# every test on the environment's OpenBLAS kernels (some compare bitwise against committed
# figures or between runs); test_blas_select.sh tests the engine's choice of kernels itself
export TRAIN_LLAMA_BLAS_AUTO=0
# idle OpenMP threads sleep instead of spinning: tests run several ranks on 2 cores
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
JOBS=${TEST_JOBS:-2}
BUDGET=${TEST_BUDGET_S:-1800}
START_EPOCH=${TEST_START_EPOCH:-$(date +%s)}
case $JOBS in ''|*[!0-9]*|0) echo "run_tests: TEST_JOBS: expected a positive integer, found '$JOBS'" >&2; exit 2 ;; esac
case $BUDGET in ''|*[!0-9]*) echo "run_tests: TEST_BUDGET_S: expected seconds, found '$BUDGET'" >&2; exit 2 ;; esac
case $START_EPOCH in ''|*[!0-9]*) echo "run_tests: TEST_START_EPOCH: expected seconds since 1970, found '$START_EPOCH'" >&2; exit 2 ;; esac

# the programs, in the order their output is printed
programs=()
if [ $# -gt 0 ]; then
    # a path, or a test's name: test_cli, cli, test_cli.sh and build/test_model all name one program
    for a in "$@"; do
        found=""
        for c in "$a" "test/$a" "test/$a.sh" "test/$a.py" "build/$a" "test/test_$a.sh" "test/test_$a.py" "build/test_$a"; do
            if [ -f "$c" ]; then found=$c; break; fi
        done
        if [ -z "$found" ]; then echo "run_tests: no test named '$a' (expected a path, or a name such as test_cli or cli: test/test_*.sh, test/test_*.py, build/test_*)" >&2; exit 2; fi
        programs+=("$found")
    done
else
    for t in build/test_*; do [ -x "$t" ] && [ -f "$t" ] && programs+=("$t"); done
    for t in test/test_*.py test/test_*.sh; do [ -f "$t" ] && programs+=("$t"); done
fi
# the start order: the quick programs first, in printing order (their output appears at once),
# then the long ones longest first (LONGEST, by the last measured times), so that the two lanes
# end close together
LONGEST=(test/test_cuda_emulated.sh test/test_faults.sh test/test_gpu_check.sh test/test_comm_modes.sh
         test/test_mpi.sh test/test_cli.sh test/test_scaling_model.py test/test_slurm.sh)
order=() long=()
for l in "${LONGEST[@]}"; do
    for i in "${!programs[@]}"; do [ "${programs[$i]}" = "$l" ] && long+=("$i"); done
done
for i in "${!programs[@]}"; do [[ " ${long[*]} " == *" $i "* ]] || order+=("$i"); done
order+=("${long[@]}")

DIR=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$DIR"' EXIT
command_of() {  # how to run program $1
    case $1 in
        *.py) echo python3 ;;
        *.sh) echo bash ;;
        *) echo "" ;;
    esac
}
run_one() {  # index: DIR/i.out (stdout and stderr), DIR/i.rc, DIR/i.time
    local i=$1 p=${programs[$1]} t0=$SECONDS
    local runner
    runner=$(command_of "$p")
    $runner "$p" >"$DIR/$i.out" 2>&1 </dev/null
    echo $? >"$DIR/$i.rc.tmp"
    echo $((SECONDS - t0)) >"$DIR/$i.time"
    mv "$DIR/$i.rc.tmp" "$DIR/$i.rc"
}
printed=0
print_ready() {  # every finished program whose predecessors are all printed
    while [ "$printed" -lt "${#programs[@]}" ] && [ -f "$DIR/$printed.rc" ]; do
        local i=$printed p=${programs[$printed]} rc
        rc=$(cat "$DIR/$i.rc")
        echo "== $p"
        cat "$DIR/$i.out"
        echo "== $p took $(cat "$DIR/$i.time") s"
        # 77 = skipped as a whole (GPU tests without a GPU); the program says so itself
        if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ] && ! grep -q '^FAIL ' "$DIR/$i.out"; then
            local why
            why=$(grep -E '^error: ' "$DIR/$i.out" | tail -1 | cut -c1-300)
            echo "FAIL $p: exited with status $rc${why:+: $why}" | tee -a "$DIR/$i.out"
        fi
        printed=$((printed + 1))
    done
}

start=$SECONDS
running=0
for i in "${order[@]}"; do
    while [ "$running" -ge "$JOBS" ]; do
        wait -n 2>/dev/null
        running=$(jobs -rp | wc -l)
        print_ready
    done
    run_one "$i" &
    running=$((running + 1))
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do
    wait -n 2>/dev/null
    print_ready
done
wait
print_ready
total=$((SECONDS - start))

passed=0; failed=0; skipped=0
for i in "${!programs[@]}"; do
    passed=$((passed + $(grep -c '^PASS ' "$DIR/$i.out")))
    failed=$((failed + $(grep -c '^FAIL ' "$DIR/$i.out")))
    skipped=$((skipped + $(grep -c '^SKIP ' "$DIR/$i.out")))
done
echo "== time per program (wall seconds, $JOBS side by side), longest first"
for i in "${!programs[@]}"; do printf '%6d s  %s\n' "$(cat "$DIR/$i.time")" "${programs[$i]}"; done | sort -rn
sum=0
for i in "${!programs[@]}"; do sum=$((sum + $(cat "$DIR/$i.time"))); done
printf '%6d s  total wall time of the tests (%d s of program time)\n' "$total" "$sum"
elapsed=$(( $(date +%s) - START_EPOCH ))
over=""
[ "$elapsed" -gt "$BUDGET" ] && over=", over the advisory budget: $elapsed s > $BUDGET s (time alone never fails the run)"
[ -n "${TEST_START_EPOCH:-}" ] && printf '%6d s  since make started its builds (budget %d s)\n' "$elapsed" "$BUDGET"
echo "$passed passed, $failed failed, $skipped skipped$over"
[ "$failed" -eq 0 ]
