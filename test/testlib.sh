# testlib.sh — the shell tests' shared helpers; source it from the repository root:
#   source test/testlib.sh
#   pass NAME | fail NAME DETAIL | skip NAME WHY   the lines test/run_tests.sh counts ("PASS name",
#                                                  "FAIL name: detail", "SKIP name: why"); fail
#                                                  counts into $failures
#   why FILE        what a failed run said, for a FAIL line: the engine's own first error line
#                   ("error: ...", or the emulator's "EMU FATAL: ..."), else the file's last two
#                   lines (mpirun's footer only when there is nothing better)
#   comm_timeout_row NAME TIMEOUT PATTERN CMD...   runs CMD (a 2-rank job under mpirun; the
#                   helper adds -o) in the background, SIGSTOPs its rank 1 after 2 logged steps,
#                   and passes when the job ends within TIMEOUT + 15 s with exactly one line of
#                   rank 0's --comm-timeout error naming an operation that matches PATTERN
#   small_model     sets SMALL (the small test model's flags, test/testlib.py --small-model) and
#                   SMALL_DIR (its data); a FAIL and exit when the data cannot be written
failures=0
# the tests run on the environment's OpenBLAS kernels, never the engine's choice of them
# (llmc/blas_select.h; test_blas_select.sh tests that choice itself)
export TRAIN_LLAMA_BLAS_AUTO=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; failures=$((failures + 1)); }
skip() { echo "SKIP $1: $2"; }
why() {
    local line
    line=$(grep -m1 -E '^(error|EMU FATAL|emu): ' "$1" 2>/dev/null | cut -c1-300)
    if [ -n "$line" ]; then echo "$line"; else tail -2 "$1" 2>/dev/null | tr '\n' ' ' | cut -c1-300; fi
}
small_model() {
    local flags
    if ! flags=$(python3 test/testlib.py --small-model) || ! SMALL_DIR=$(python3 test/testlib.py --small-model-dir); then
        fail small_model_data "test/testlib.py could not write the small test model's data"
        exit 1
    fi
    read -ra SMALL <<<"$flags"
}

comm_timeout_row() {
    local name=$1 limit=$2 pattern=$3 dir=$TMP/ct_$1; shift 3
    mkdir -p "$dir"
    ( timeout 300 "$@" -o "$dir/run" >"$dir/out" 2>"$dir/err"; echo $? >"$dir/rc" ) &
    local job=$! victim="" n
    for _ in $(seq 1 600); do n=$(grep -c '"train_loss"' "$dir/run/metrics.jsonl" 2>/dev/null); [ "${n:-0}" -ge 2 ] && break; sleep 0.1; done
    for p in $(pgrep -f -- "-o $dir/run"); do
        [ "$p" != "$job" ] && grep -qz "^OMPI_COMM_WORLD_RANK=1$" "/proc/$p/environ" 2>/dev/null && victim=$p
    done
    local t0=$SECONDS
    [ -n "$victim" ] && kill -STOP "$victim"
    wait "$job"
    local took=$((SECONDS - t0)) rc lines
    rc=$(cat "$dir/rc" 2>/dev/null)
    lines=$(grep -c "^error: rank 0, step [0-9]*: $pattern waited more than $limit s (--comm-timeout): another rank died, stopped or hangs" "$dir/err")
    [ -n "$victim" ] && kill -KILL "$victim" 2>/dev/null
    if [ -n "$victim" ] && [ "${rc:-0}" != 0 ] && [ "${rc:-0}" != 124 ] && [ "$took" -le $((limit + 15)) ] && [ "$lines" = 1 ]; then
        pass "$name"; echo "  $name: ended $took s after the stop (timeout $limit s)"
    else fail "$name" "victim '$victim', exit '$rc' after $took s (timeout $limit), $lines matching lines: $(head -c 300 "$dir/err")"; fi
}
