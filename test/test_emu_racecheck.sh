#!/usr/bin/env bash
# test_emu_racecheck.sh — races between the threads of a block, found without a GPU: dev/emu's
# racecheck build (dev/emu/build.sh --racecheck: the kernels under ThreadSanitizer, told what the
# PTX ISA orders between threads: barriers, warp collectives, mbarrier phases, cp.async landings),
#   - test/emu_racecheck_cases.cu: eight ways to hand shared memory between threads (__syncthreads,
#     an mbarrier, a ring of full / empty mbarriers, cp.async with wait_group, a thread's own
#     cp.async, cp.async.mbarrier.arrive, a wgmma's operand after a barrier, and that operand
#     stored over after the wgmma's wait), each with its ordering (no report) and without its one
#     wait or barrier (a report naming the case's kernel; exit 66): the checker can fail, and only
#     on what a GPU does not order;
#   - test_mma_layout: the tensor-core and copy wrappers' checks, no report;
#   - dev_attention --racecheck: the flash forward and backward (their mbarrier rings, the dQ
#     writer warp) at four shapes that wrap every ring, no report and every check passing.
# dev_crossentropy (its cp.async rows) and the other tools are too long for make test under it
# (--racecheck-all, by hand: docs/gpu.md). Prints "PASS name" / "FAIL name: detail" lines.
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
export OMP_NUM_THREADS=1
CUDA_INC=${CUDA_HOME:-/usr/local/cuda}/include
for h in cuda_runtime.h cublasLt.h cusolverDn.h; do
    if [ ! -f "$CUDA_INC/$h" ]; then echo "SKIP test_emu_racecheck: no $h under $CUDA_INC (the CUDA toolkit's headers)"; exit 0; fi
done
if [ ! -f "$CUDA_INC/nccl.h" ] && [ ! -f /usr/include/nccl.h ]; then echo "SKIP test_emu_racecheck: no nccl.h"; exit 0; fi
if ! command -v mpicxx >/dev/null 2>&1; then echo "SKIP test_emu_racecheck: no MPI compiler (mpicxx)"; exit 0; fi
if [ "$(uname -m)" != x86_64 ]; then echo "SKIP test_emu_racecheck: dev/emu runs on x86-64 only"; exit 0; fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# ThreadSanitizer itself: libtsan to link, and an address space it can map (some kernels' wider
# mmap randomization stops a program of GCC 12's runtime at its start)
if ! echo 'int main(){}' | g++ -fsanitize=thread -x c++ - -o "$TMP/probe" 2>/dev/null; then
    echo "SKIP test_emu_racecheck: g++ cannot link -fsanitize=thread (libtsan)"; exit 0
fi
if ! "$TMP/probe" >"$TMP/probe.out" 2>&1; then
    echo "SKIP test_emu_racecheck: a -fsanitize=thread program does not start here: $(head -c 200 "$TMP/probe.out")"; exit 0
fi
source test/testlib.sh  # pass, fail, why
RC=$ROOT/build/emu-racecheck
if ! bash dev/emu/build.sh --racecheck "$RC" >"$TMP/build.log" 2>&1; then
    fail emu_racecheck.build "$(grep -m3 -E 'error|failed' "$TMP/build.log")"; exit 1
fi
pass emu_racecheck.build
cd "$RC/src" || exit 1
# every report ends the run with exit 66; a report's stacks are on stderr with the program's output
export TSAN_OPTIONS="exitcode=66 halt_on_error=0"
races() { grep -c '^WARNING: ThreadSanitizer: data race' "$1"; }
# the first report's two accesses, for a FAIL line
first_race() { grep -m1 -A12 '^WARNING: ThreadSanitizer' "$1" | grep -E '^  [A-Z]|#[0-3] ' | tr -s ' ' | tr '\n' ' ' | cut -c1-400; }

# the cases with their ordering: nothing to report
timeout 120 "$RC/emu_racecheck_cases" >"$TMP/cases.out" 2>&1
rc=$?
n=$(races "$TMP/cases.out")
if [ $rc -eq 0 ] && [ "$n" -eq 0 ] && [ "$(grep -c '^ran ' "$TMP/cases.out")" -eq 8 ]; then pass emu_racecheck.cases_ordered_no_report
else fail emu_racecheck.cases_ordered_no_report "rc=$rc, $n reports: $(first_race "$TMP/cases.out")"; fi
# each without its wait or barrier: a report, and the report names the case's kernel
for c in barrier_no_barrier mbarrier_no_wait ring_no_empty_wait cp_async_no_wait cp_async_own_no_wait cp_async_mbar_no_wait \
         wgmma_no_barrier wgmma_reuse_no_wait; do
    kernel=${c%_no_*}_kernel
    timeout 120 "$RC/emu_racecheck_cases" "$c" >"$TMP/$c.out" 2>&1
    rc=$?
    n=$(races "$TMP/$c.out")
    if [ $rc -eq 66 ] && [ "$n" -ge 1 ] && grep -A40 '^WARNING: ThreadSanitizer: data race' "$TMP/$c.out" | grep -q " $kernel("; then
        pass "emu_racecheck.reported.$c"
    else fail "emu_racecheck.reported.$c" "expected exit 66 and a race report naming $kernel, found exit $rc and $n reports: $(why "$TMP/$c.out")"; fi
done
# a wrong case name: one line and exit 2
"$RC/emu_racecheck_cases" sideways >"$TMP/bad.out" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q '^usage: emu_racecheck_cases \[CASE\]' "$TMP/bad.out"; then pass emu_racecheck.cases_unknown_refused
else fail emu_racecheck.cases_unknown_refused "rc=$rc: $(head -c 200 "$TMP/bad.out")"; fi

# the engine's own kernels: no report, and their checks pass
for prog in "test_mma_layout" "dev_attention --racecheck"; do
    name=${prog%% *}
    timeout 600 "$RC/"$prog >"$TMP/$name.out" 2>&1
    rc=$?
    n=$(races "$TMP/$name.out")
    npass=$(grep -c '^PASS' "$TMP/$name.out")
    nfail=$(grep -c '^FAIL' "$TMP/$name.out")
    if [ $rc -eq 0 ] && [ "$n" -eq 0 ] && [ "$nfail" -eq 0 ] && [ "$npass" -ge 20 ]; then
        pass "emu_racecheck.$name.no_report"; echo "  emu_racecheck.$name: $npass checks passed, no race reported"
    else fail "emu_racecheck.$name.no_report" "rc=$rc, $n reports, $npass PASS, $nfail FAIL: $(first_race "$TMP/$name.out") $(grep -m1 '^FAIL' "$TMP/$name.out" | cut -c1-200)"; fi
done
exit $((failures > 0))
