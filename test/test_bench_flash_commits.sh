#!/usr/bin/env bash
# test_bench_flash_commits.sh — dev/bench_flash_commits.sh without a GPU:
#   - bad flags and folders: one line naming what was expected and found, exit 1, nothing on stdout;
#   - --list: c950ed2 first, the kernel commits after it, the comment-only ones and one that changed
#     only dev/emu branches left out with why, and those named as compiling to the machine code of
#     the commit before them;
#   - --build with a stand-in nvcc at two commits (one named twice): each commit's own make rule,
#     INDEX (commit, the -arch its rule passed, subject), the gzipped binary, that commit's
#     dev/flash_model.py rows; a failed build writes nothing;
#   - the timing run on stand-in binaries that print a real H200 run's dev_attention --bench-only
#     output (test/fixtures/bench_attention_h200.log, 2026-12-04): the CSV rows hold its figures,
#     the table the median over the rounds, the speed-up over the commit before and each commit's
#     modelled ms; the wgmma kernels' lines (flash_sm90) as their own directions, from the first
#     commit that has them; a failing binary is a FAIL line and exit 1 and is not run again, one that hangs
#     is stopped where the budget ends, no CUDA device exit 77, a spent budget starts no further
#     round; $OUT gets the CSV, the table and the logs.
# Prints "PASS name" / "FAIL name: detail" / "SKIP name: why" lines.
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
unset OUT
source test/testlib.sh  # pass, fail, skip
check() { if eval "$2"; then pass "$1"; else fail "$1" "$3"; fi; }
S=dev/bench_flash_commits.sh
LOG=test/fixtures/bench_attention_h200.log

# --- usage: one line on stderr, exit 1
bad() {  # NAME EXPECTED_SUBSTRING ARGS...
    local name=$1 want=$2; shift 2
    bash "$S" "$@" >"$TMP/bad.out" 2>"$TMP/bad.err"
    local rc=$?
    check "bench_flash_commits.usage_$name" '[ $rc = 1 ] && [ ! -s "$TMP/bad.out" ] && [ "$(wc -l <"$TMP/bad.err")" = 1 ] && grep -q "^bench_flash_commits: .*$want" "$TMP/bad.err"' \
        "rc $rc, stdout '$(head -c 200 "$TMP/bad.out")', stderr '$(head -c 300 "$TMP/bad.err")'"
}
mkdir -p "$TMP/noindex" "$TMP/badindex" "$TMP/nogz" "$TMP/notgz"
echo "../x sm_90 a subject" >"$TMP/badindex/INDEX"
echo "abcdef1 sm_90 a subject" >"$TMP/nogz/INDEX"
echo "abcdef1 sm_90 a subject" >"$TMP/notgz/INDEX"; echo "plain text" >"$TMP/notgz/abcdef1.gz"
bad rounds_zero "--rounds: expected a whole number from 1 to 99, found '0'" --rounds 0 "$TMP/noindex"
bad rounds_word "--rounds: expected a whole number from 1 to 99, found 'two'" --rounds two "$TMP/noindex"
bad budget_negative "--budget: expected whole seconds from 1 to 99999, found '-5'" --budget -5 "$TMP/noindex"
bad unknown_flag "unknown flag '--fast'" --fast
bad no_folder "expected the folder --build made"
bad no_index "$TMP/noindex/INDEX not found (expected a folder made by --build)" "$TMP/noindex"
bad index_not_a_hash "INDEX: expected a commit's hash first on each line, found '../x'" "$TMP/badindex"
bad missing_binary "$TMP/nogz/abcdef1.gz not found (INDEX lists abcdef1" "$TMP/nogz"
bad binary_not_gzip "$TMP/notgz/abcdef1.gz: not a gzip file" "$TMP/notgz"
bad extra_argument "unexpected argument 'more' after" "$TMP/nogz" more
bad build_no_folder "--build: expected a folder after the flag" --build
bad build_not_a_commit "'no-such-rev' is not a commit of" --build "$TMP/never" no-such-rev
mkdir -p "$TMP/user"; echo "keep me" >"$TMP/user/notes.txt"
bad build_over_other_files "--build: '$TMP/user' holds files and no INDEX (expected a new folder or an earlier --build's, which is replaced)" --build "$TMP/user" HEAD
check bench_flash_commits.usage_writes_nothing '[ ! -e "$TMP/never" ] && [ "$(cat "$TMP/user/notes.txt")" = "keep me" ] && [ -z "$(ls -A "$TMP" | grep "^\.bench_flash_commits")" ]' "$(ls -A "$TMP" 2>&1 | tr '\n' ' ')"

# --- --list: the commits since the last one timed on a GPU
if ! git rev-parse --verify --quiet "c950ed2^{commit}" >/dev/null || ! git rev-parse --verify --quiet "fcd5d3c^{commit}" >/dev/null; then
    skip bench_flash_commits.list "c950ed2 or fcd5d3c is not in this checkout's history (a shallow clone)"
else
    bash "$S" --list >"$TMP/list.out" 2>"$TMP/list.err"
    rc=$?
    # 0805ce4 and 244d1c7 reflowed comments only, fcd5d3c changed only mma.cuh's dev/emu branches
    # (#elif defined(EMU_WARP_MMA)); b1a8e12 and 61c9c47 changed the forward's code
    check bench_flash_commits.list_kernel_commits '[ $rc = 0 ] && [ "$(head -1 "$TMP/list.out" | cut -d" " -f1)" = c950ed2 ] && grep -q "^b1a8e12 " "$TMP/list.out" && grep -q "^61c9c47 " "$TMP/list.out" && ! grep -q "^0805ce4\|^244d1c7\|^fcd5d3c" "$TMP/list.out"' \
        "rc $rc: $(cut -c1-20 "$TMP/list.out" | tr '\n' ' ')"
    if git rev-parse --verify --quiet 99357a4^{commit} >/dev/null; then
        check bench_flash_commits.list_same_machine_code_left_out '! grep -q "^4967156 \|^99357a4 " "$TMP/list.out" && grep -q "^left out: 99357a4 .*(the machine code of the commit before)$" "$TMP/list.err" && grep -q "^left out: 4967156 .*(the machine code of the commit before)$" "$TMP/list.err"' \
            "$(cat "$TMP/list.err")"
    fi
    check bench_flash_commits.list_comment_only_left_out '( for c in 0805ce4 244d1c7 fcd5d3c; do grep -q "^left out: $c .*(comments, spacing or dev/emu branches only)$" "$TMP/list.err" || exit 1; done )' \
        "$(cat "$TMP/list.err")"
fi

# --- --build with a stand-in nvcc: it writes, at make's -o path, a script that records the -arch
mkdir -p "$TMP/bin"
cat >"$TMP/bin/nvcc" <<'EOF'
#!/bin/bash
[ -n "${FAKE_NVCC_FAIL:-}" ] && { echo "stand-in nvcc: error: told to fail" >&2; exit 1; }
out="" arch=""
for a in "$@"; do [ "$prev" = -o ] && out=$a; case $a in -arch=*) arch=${a#-arch=} ;; esac; prev=$a; done
printf '#!/bin/bash\necho "stand-in dev_attention built for %s"\n' "$arch" >"$out" && chmod +x "$out"
EOF
chmod +x "$TMP/bin/nvcc"
if ! git rev-parse --verify --quiet "HEAD~1^{commit}" >/dev/null; then
    skip bench_flash_commits.build "HEAD~1 is not in this checkout's history (a shallow clone)"
else
    h0=$(git rev-parse --short=7 HEAD~1) h1=$(git rev-parse --short=7 HEAD)
    NVCC=$TMP/bin/nvcc GPU_ARCH=sm_90 bash "$S" --build "$TMP/built" HEAD~1 HEAD "$h1" >"$TMP/build.out" 2>&1
    rc=$?
    check bench_flash_commits.build_index '[ $rc = 0 ] && [ "$(cut -d" " -f1-2 "$TMP/built/INDEX" | tr "\n" " ")" = "$h0 sm_90 $h1 sm_90 " ] && grep -qF " $(git log -1 --format=%s HEAD | cut -c1-60)" "$TMP/built/INDEX"' \
        "rc $rc: $(tail -3 "$TMP/build.out") INDEX: $(cat "$TMP/built/INDEX" 2>&1)"
    check bench_flash_commits.build_binaries '[ "$(gzip -dc "$TMP/built/$h1.gz" | sed -n 2p)" = "echo \"stand-in dev_attention built for sm_90\"" ] && [ -s "$TMP/built/$h0.gz" ] && [ -z "$(ls -A "$TMP" | grep "^\.bench_flash_commits")" ]' \
        "$(ls -A "$TMP/built" "$TMP" 2>&1 | tr '\n' ' ')"
    # the model's rows as that commit's dev/flash_model.py prints them (here HEAD's own)
    python3 dev/flash_model.py --csv >"$TMP/model_head.csv" 2>&1
    check bench_flash_commits.build_model_rows 'cmp -s "$TMP/built/$h1.model.csv" "$TMP/model_head.csv" && head -1 "$TMP/built/$h1.model.csv" | grep -q "^shape,direction,.*,ms,"' \
        "$(head -2 "$TMP/built/$h1.model.csv" 2>&1)"
    FAKE_NVCC_FAIL=1 NVCC=$TMP/bin/nvcc bash "$S" --build "$TMP/built" HEAD >"$TMP/buildfail.out" 2>&1
    rc=$?
    check bench_flash_commits.build_failure_writes_nothing '[ $rc = 1 ] && grep -q "^bench_flash_commits: --build: failed: $h1: .*told to fail.* nothing written to $TMP/built" "$TMP/buildfail.out" && [ "$(cut -d" " -f1 "$TMP/built/INDEX" | tr "\n" " ")" = "$h0 $h1 " ] && [ -z "$(ls -A "$TMP" | grep "^\.bench_flash_commits")" ]' \
        "rc $rc: $(tail -2 "$TMP/buildfail.out")"
fi

# --- the timing run on stand-ins. aaaaaaa prints the H200 log as it is, bbbbbbb with every flash
#     time × 0.6 in its second round (so its median is 0.8 of aaaaaaa's: × before 1.250),
#     ccccccc the same as aaaaaaa; each commit's model: llama300m forward 0.7 (aaaaaaa), 0.5
#     (bbbbbbb), none for ccccccc
make_dir() {  # DIR: the folder --build would make, with the stand-ins
    local d=$1 c
    mkdir -p "$d"
    printf '%s\n' "aaaaaaa sm_90 the first change" "bbbbbbb sm_90a the second change, faster" "ccccccc sm_90a the third change" >"$d/INDEX"
    for c in aaaaaaa bbbbbbb ccccccc; do
        cat <<EOF | gzip -c >"$d/$c.gz"
#!/bin/bash
me=\$(basename "\$(dirname "\$0")")
mode=\$(cat "$TMP/mode.\$me" 2>/dev/null)
n=\$(cat "$TMP/count.\$me" 2>/dev/null || echo 0); n=\$((n + 1)); echo \$n >"$TMP/count.\$me"
case \$mode in
    fail) echo "CUDA error at attention.cu:300: an illegal memory access was encountered"; exit 1 ;;
    nodev) echo "SKIP dev_attention: no CUDA device"; exit 77 ;;
    sleep) sleep 3 ;;
    hang) exec sleep 100 ;;
esac
if [ "\$mode" = sm90 ]; then  # a wgmma line after each flash line, twice as fast
    awk '{ print } \$1 == "bench" && \$3 == "flash" { \$3 = "flash_sm90"; for (i = 5; i < NF; i++) { if (\$(i + 1) == "ms") \$i = sprintf("%.5f", \$i * 0.5); if (\$(i + 1) == "TFLOP/s") \$i = sprintf("%.1f", \$i / 0.5) }; print }' "$ROOT/$LOG"
elif [ "\$mode" = faster ] && [ \$n = 2 ]; then
    awk '\$1 == "bench" && \$3 == "flash" { for (i = 5; i < NF; i++) { if (\$(i + 1) == "ms") \$i = sprintf("%.5f", \$i * 0.6); if (\$(i + 1) == "TFLOP/s") \$i = sprintf("%.1f", \$i / 0.6) } } { print }' "$ROOT/$LOG"
else cat "$ROOT/$LOG"; fi
EOF
    done
    printf '%s\n' "shape,direction,HS,ms,causal TFLOP/s" "llama300m,forward,64,0.7000,196.6" "llama300m,backward,64,2.0000,171.8" >"$d/aaaaaaa.model.csv"
    printf '%s\n' "shape,direction,HS,ms,causal TFLOP/s" "llama300m,forward,64,0.5000,275.2" "llama300m,backward,64,1.6000,214.8" >"$d/bbbbbbb.model.csv"
}
make_dir "$TMP/runs"
echo faster >"$TMP/mode.bbbbbbb"
OUT=$TMP/out bash "$S" --rounds 2 "$TMP/runs" >"$TMP/run.out" 2>&1
rc=$?
csv=$TMP/out/bench_flash_commits.csv
# the log's flash rows: 5 shapes × 2 directions, 3 commits × 2 rounds
check bench_flash_commits.run_csv_rows '[ $rc = 0 ] && [ "$(head -1 "$csv")" = "variant,round,shape,B,T,NH,HS,direction,ms,tflops" ] && [ "$(grep -c "^[abc]\{7\}," "$csv")" = 60 ] && grep -qx "aaaaaaa,1,llama300m,4,4096,16,64,forward,0.7407,185.6" "$csv" && grep -qx "aaaaaaa,2,llama300m,4,4096,16,64,backward,3.8082,90.2" "$csv" && grep -qx "bbbbbbb,2,hs128_t4096,4,4096,16,128,backward,4.11408,167.0" "$csv" && ! grep -q cublas "$csv"' \
    "rc $rc: $(tail -3 "$TMP/run.out") csv: $(sed -n 1,3p "$csv" 2>&1)"
row() { grep "^| $1 *| $2 *| $3 " "$TMP/out/bench_flash_commits.txt" | tr -s ' '; }
# aaaaaaa llama300m forward: 0.7407 both rounds, no commit before it, model 0.7000
check bench_flash_commits.table_first_commit '[ "$(row aaaaaaa llama300m forward)" = "| aaaaaaa | llama300m | forward | 0.7407 | 0.0% | 185.6 | | 0.7000 | | the first change" ]' \
    "'$(row aaaaaaa llama300m forward)'"
# bbbbbbb: rounds 0.7407 and 0.44442: median 0.59256, spread 0.29628 / 0.59256 = 50.0%,
# 185.6 × 0.7407 / 0.59256 = 232.0 TFLOP/s, × before 0.7407 / 0.59256 = 1.250; model 0.7 / 0.5 = 1.400
check bench_flash_commits.table_median_and_speedups '[ "$(row bbbbbbb llama300m forward)" = "| bbbbbbb | llama300m | forward | 0.5926 | 50.0% | 232.0 | 1.250 | 0.5000 | 1.400 | the second change, faster" ]' \
    "'$(row bbbbbbb llama300m forward)'"
check bench_flash_commits.table_without_model '[ "$(row ccccccc llama300m forward)" = "| ccccccc | llama300m | forward | 0.7407 | 0.0% | 185.6 | 0.800 | n/a | | the third change" ]' \
    "'$(row ccccccc llama300m forward)'"
# a line per run as it ends, before the table; round 2 starts at the second commit
first_runs=$(grep "^# round" "$TMP/run.out" | cut -d' ' -f2-4 | tr '\n' ' ')
check bench_flash_commits.run_lines_in_rotation '[ "$first_runs" = "round 1 aaaaaaa round 1 bbbbbbb round 1 ccccccc round 2 bbbbbbb round 2 ccccccc round 2 aaaaaaa " ] && [ "$(grep -n "^# round 2 aaaaaaa" "$TMP/run.out" | cut -d: -f1)" -lt "$(grep -n "^| commit" "$TMP/run.out" | cut -d: -f1)" ]' \
    "'$first_runs'"
check bench_flash_commits.out_files '[ -s "$TMP/out/bench_flash_commits.txt" ] && [ "$(tar -tzf "$TMP/out/bench_flash_commits_logs.tar.gz" | grep -c "round[12].log$")" = 6 ]' \
    "$(ls "$TMP/out" 2>&1 | tr '\n' ' ')"

# the wgmma kernels' lines (flash_sm90) at ccccccc only: its rows as directions forward_sm90 and
# backward_sm90 (5 shapes), the table's rows for them from ccccccc on (no "no run" rows for the
# commits before the kernels existed)
rm -f "$TMP"/mode.* "$TMP"/count.*; echo sm90 >"$TMP/mode.ccccccc"
OUT=$TMP/out90 bash "$S" --rounds 1 "$TMP/runs" >"$TMP/sm90.out" 2>&1
rc=$?
csv=$TMP/out90/bench_flash_commits.csv
check bench_flash_commits.sm90_rows '[ $rc = 0 ] && [ "$(grep -c "^ccccccc,1,.*_sm90," "$csv")" = 10 ] && grep -qx "ccccccc,1,llama300m,4,4096,16,64,forward_sm90,0.37035,371.2" "$csv" && grep -qx "ccccccc,1,llama300m,4,4096,16,64,backward_sm90,1.90410,180.4" "$csv" && ! grep -q "^[ab]\{7\},.*_sm90," "$csv" && grep -q "^| ccccccc *| llama300m *| forward_sm90 *| *0.370[34] " "$TMP/out90/bench_flash_commits.txt" && ! grep -q "^| [ab]\{7\} .*_sm90" "$TMP/out90/bench_flash_commits.txt"' \
    "rc $rc: $(grep sm90 "$csv" | head -3) $(grep sm90 "$TMP/out90/bench_flash_commits.txt" | head -3)"

# a failing binary: its FAIL line, not run again in round 2, the others still timed, exit 1
rm -f "$TMP"/mode.* "$TMP"/count.*; echo fail >"$TMP/mode.bbbbbbb"
bash "$S" --rounds 2 "$TMP/runs" >"$TMP/fail.out" 2>&1
rc=$?
check bench_flash_commits.failed_run '[ $rc = 1 ] && grep -q "^| FAIL round 1 bbbbbbb: exit 1; CUDA error at attention.cu:300: an illegal memory access.* (not run again)$" "$TMP/fail.out" && [ "$(cat "$TMP/count.bbbbbbb")" = 1 ] && [ "$(cat "$TMP/count.ccccccc")" = 2 ] && grep -q "^| ccccccc *| llama300m *| forward *| *0.7407 " "$TMP/fail.out" && grep -q "^| bbbbbbb *| llama300m *| forward *| *no run" "$TMP/fail.out" && tail -1 "$TMP/fail.out" | grep -q "FAILED runs above"' \
    "rc $rc: $(grep -v '^| [abc]' "$TMP/fail.out" | tail -4)"
# a binary that hangs: stopped at the budget's end (--budget 6: its limit is 6 s, not 60), and
# the next one not started
rm -f "$TMP"/mode.* "$TMP"/count.*; echo hang >"$TMP/mode.bbbbbbb"
t_hang=$SECONDS
bash "$S" --rounds 2 --budget 6 "$TMP/runs" >"$TMP/hang.out" 2>&1
rc=$?
t_hang=$((SECONDS - t_hang))
check bench_flash_commits.hang_stopped_by_budget '[ $rc = 1 ] && [ $t_hang -le 20 ] && grep -q "^| FAIL round 1 bbbbbbb: exit 124 (timeout [1-6] s);" "$TMP/hang.out" && grep -q "^# round 1 stopped before ccccccc: the budget is spent (--budget 6)" "$TMP/hang.out" && [ ! -e "$TMP/count.ccccccc" ] && tail -1 "$TMP/hang.out" | grep -q ", 0 round(s);"' \
    "rc $rc after $t_hang s: $(grep -v '^| [abc]' "$TMP/hang.out" | tail -4)"
# no CUDA device
rm -f "$TMP"/mode.* "$TMP"/count.*; echo nodev >"$TMP/mode.aaaaaaa"
bash "$S" "$TMP/runs" >"$TMP/nodev.out" 2>&1
rc=$?
check bench_flash_commits.no_device '[ $rc = 77 ] && grep -qx "SKIP bench_flash_commits: no CUDA device (SKIP dev_attention: no CUDA device)" "$TMP/nodev.out"' "rc $rc: $(tail -2 "$TMP/nodev.out")"
# a spent budget: the first round takes at least 9 s (3 runs of 3 s), another would end past
# --budget 16, so it does not start (the third run of round 1 starts with 7 or more left)
rm -f "$TMP"/mode.* "$TMP"/count.*; for c in aaaaaaa bbbbbbb ccccccc; do echo sleep >"$TMP/mode.$c"; done
bash "$S" --rounds 3 --budget 16 "$TMP/runs" >"$TMP/budget.out" 2>&1
rc=$?
check bench_flash_commits.budget_stops_rounds '[ $rc = 0 ] && grep -q "^# round 2 not started: [0-9]* s spent, a round takes about [0-9]* s (--budget 16)" "$TMP/budget.out" && [ "$(grep -c "^# round 1 " "$TMP/budget.out")" = 3 ] && ! grep -q "^# round [23] [abc]" "$TMP/budget.out" && tail -1 "$TMP/budget.out" | grep -q ", 1 round(s);"' \
    "rc $rc: $(grep '^#' "$TMP/budget.out" | tail -3)"

[ $failures -eq 0 ]
