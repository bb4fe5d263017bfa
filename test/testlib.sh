# testlib.sh — the shell tests' shared helpers; source it from the repository root:
#   source test/testlib.sh
#   pass NAME | fail NAME DETAIL | skip NAME WHY   the lines test/run_tests.sh counts ("PASS name",
#                                                  "FAIL name: detail", "SKIP name: why"); fail
#                                                  counts into $failures
#   why FILE        what a failed run said, for a FAIL line: the engine's own first error line
#                   ("error: ...", or the emulator's "EMU FATAL: ..."), else the file's last two
#                   lines (mpirun's footer only when there is nothing better)
#   small_model     sets SMALL (the small test model's flags, test/testlib.py --small-model) and
#                   SMALL_DIR (its data); a FAIL and exit when the data cannot be written
failures=0
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
