#!/usr/bin/env bash
# Runs every test program (C++ binaries in build/, Python tests in test/) from the repository
# root, shows their output, counts the "PASS" / "FAIL" / "SKIP" lines and ends with
# "N passed, N failed, N skipped". Exit status 1 if any check failed or any program crashed.
cd "$(dirname "$0")/.." || exit 1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# idle OpenMP threads sleep instead of spinning: tests run several ranks on 2 cores
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
log=$(mktemp)
crashed=0
run() {
    local name=$1; shift
    echo "== $name"
    local out
    out=$(mktemp)
    local t0=$SECONDS
    "$@" >"$out" 2>&1
    local rc=$?
    cat "$out"
    echo "== $name took $((SECONDS - t0)) s"
    cat "$out" >>"$log"
    # 77 = skipped as a whole (GPU tests without a GPU); the program says so itself
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ] && ! grep -q '^FAIL ' "$out"; then
        echo "FAIL $name: exited with status $rc" | tee -a "$log"
    fi
    rm -f "$out"
}
for t in build/test_*; do
    [ -x "$t" ] || continue
    run "$t" "$t"
done
for t in test/test_*.py; do
    [ -f "$t" ] || continue
    run "$t" python3 "$t"
done
for t in test/test_*.sh; do
    [ -f "$t" ] || continue
    run "$t" bash "$t"
done
passed=$(grep -c '^PASS ' "$log")
failed=$(grep -c '^FAIL ' "$log")
skipped=$(grep -c '^SKIP ' "$log")
rm -f "$log"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
