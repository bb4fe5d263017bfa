#!/usr/bin/env bash
# test_faults.sh — the CPU engine as a hostile user and a failing cluster would treat it: ranks
# that disagree on a flag or read different data under one path, two runs on one directory, a
# fresh run into another run's checkpoints, a full disk under the logs and the checkpoints,
# tampered and damaged checkpoints (with fallback to the newest intact one), a kill inside the
# very first checkpoint, a late bad token, directories that cannot be listed, and a kill loop: 8 SIGKILLs of one rank of a 2-rank
# run while it checkpoints, each followed by -y 1, ending bitwise equal to the straight run.
# Prints "PASS name" / "FAIL name: detail" lines (counted by test/run_tests.sh).
cd "$(dirname "$0")/.." || exit 1
BIN=$PWD/train_llama_cpu
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
MPIRUN=(timeout 240 mpirun --oversubscribe)
if ! command -v mpirun >/dev/null 2>&1; then echo "SKIP test_faults: mpirun not found"; exit 0; fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
source test/testlib.sh  # pass, fail, why, small_model
# expect_error NAME RC FILE PATTERN: the command failed with status 1 and said PATTERN on one line
expect_error() {
    if [ "$2" -eq 1 ] && grep -q -- "$4" "$3"; then pass "$1"; else fail "$1" "rc=$2: $(head -c 400 "$3")"; fi
}

# the small test model (test/testlib.py: tiny's layers, a 1000-token vocabulary): model files of
# 4.2 MB, state files of 8.4 MB; the kill loop below keeps tiny (55 and 110 MB), whose
# checkpoints take long enough to write that a random kill lands inside one
small_model
S=("${SMALL[@]}" -b 2 -t 32 -v 0 -l 3e-3 -u 2)

# --- ranks that disagree on a flag the resume check does not compare: every rank stops at start,
#     naming the flag (before: a crash, hangs, a DONE without rank 1's state, mixed val averages)
for pair in "fidelity-every|-c fp8 --fidelity-every 2|-c fp8 --fidelity-every 3" \
            "checkpoint-every|-n 2|-n 3" "resume|-y 0|-y 1" "max-skips|--max-skips 1|--max-skips 2" \
            "output-dir|-o $TMP/dis_a|-o $TMP/dis_b" "val-batches|-v 2 -m 1|-v 2 -m 2" \
            "keep-checkpoints|-nk 1|-nk 2" "overwrite|--overwrite 0|--overwrite 1"; do
    IFS='|' read -r key a b <<<"$pair"
    # shellcheck disable=SC2086
    timeout 120 mpirun --oversubscribe -np 1 "$BIN" "${S[@]}" -x 4 -o "$TMP/dis" $a : -np 1 "$BIN" "${S[@]}" -x 4 -o "$TMP/dis" $b \
        >"$TMP/dis.out" 2>"$TMP/dis.err"
    rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "rank 1 disagrees with rank 0 on $key:" "$TMP/dis.err" &&
       ! grep -q "^step" "$TMP/dis.out"; then pass "faults_ranks_disagree_$key"
    else fail "faults_ranks_disagree_$key" "rc=$rc $(head -c 300 "$TMP/dis.err")"; fi
done

# --- ranks reading different files under the same path (same names and sizes, other tokens)
mkdir -p "$TMP/node0/d" "$TMP/node1/d"
cp "$SMALL_DIR/train_000001.bin" "$TMP/node0/d/train_000.bin"
python3 - "$TMP/node0/d/train_000.bin" "$TMP/node1/d/train_000.bin" "$TMP/perm_000.bin" <<'PYEOF'
import sys
import numpy as np
header = np.fromfile(sys.argv[1], dtype=np.int32, count=256)
tokens = np.fromfile(sys.argv[1], dtype=np.uint16, offset=1024)
other = tokens.copy()
other[1000:1010] = other[1000:1010][::-1].copy()  # ten tokens in another order: same size, same multiset
with open(sys.argv[2], "wb") as f:
    header.tofile(f); other.tofile(f)
perm = np.random.default_rng(0).permutation(tokens)  # the whole shard shuffled
with open(sys.argv[3], "wb") as f:
    header.tofile(f); perm.tofile(f)
PYEOF
timeout 120 mpirun --oversubscribe -np 1 --wdir "$TMP/node0" "$BIN" "${S[@]}" -x 2 -i 'd/train_*.bin' : \
    -np 1 --wdir "$TMP/node1" "$BIN" "${S[@]}" -x 2 -i 'd/train_*.bin' >"$TMP/df.out" 2>"$TMP/df.err"
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "rank 1 disagrees with rank 0 on train_files" "$TMP/df.err"; then
    pass faults_ranks_read_different_content
else fail faults_ranks_read_different_content "rc=$rc $(head -c 300 "$TMP/df.err")"; fi

# --- the straight 6-step run every resume below must reproduce bitwise
"$BIN" "${S[@]}" -x 6 -n 2 -o "$TMP/straight" >"$TMP/straight.out" 2>&1 || fail faults_straight_run "$(why "$TMP/straight.out")"
same_as_straight() { cmp -s "$TMP/straight/model_00000006.bin" "$1/model_00000006.bin" &&
                     cmp -s "$TMP/straight/state_00000006_00000.bin" "$1/state_00000006_00000.bin"; }

# --- two runs on one directory: the second stops at once, naming the first (pid, host); the
#     first finishes with every checkpoint in place
TRAIN_LLAMA_TEST_SLOW=1 "$BIN" "${S[@]}" -x 6 -n 2 -o "$TMP/shared" >"$TMP/sh1.out" 2>&1 &
first=$!
for _ in $(seq 1 300); do [ -s "$TMP/shared/metrics.jsonl" ] && break; sleep 0.1; done
"$BIN" "${S[@]}" -x 6 -n 1 -o "$TMP/shared" >"$TMP/sh2.out" 2>"$TMP/sh2.err"
rc=$?
wait $first
rc1=$?
if [ $rc -eq 1 ] && grep -q "is in use by another run (pid $first on host $(hostname) holds" "$TMP/sh2.err" && [ $rc1 -eq 0 ] &&
   [ "$(ls "$TMP/shared" | grep -c '^DONE_')" -eq 3 ] && same_as_straight "$TMP/shared" &&
   python3 -c "import json,sys; [json.loads(l) for l in open(sys.argv[1])]" "$TMP/shared/metrics.jsonl"; then
    pass faults_second_run_on_locked_dir_refused
else fail faults_second_run_on_locked_dir_refused "rc=$rc rc1=$rc1 $(head -c 300 "$TMP/sh2.err")"; fi

# --- a fresh run (no -y) into a directory with checkpoints: refused, nothing touched; with
#     --overwrite 1 the old checkpoints are deleted and the run starts over
cp -r "$TMP/straight" "$TMP/fresh"
before=$(cd "$TMP/fresh" && md5sum main.log metrics.jsonl DONE_* model_* state_* | md5sum)
"$BIN" "${S[@]}" -x 4 -n 4 -o "$TMP/fresh" >"$TMP/fr.out" 2>"$TMP/fr.err"
rc=$?
after=$(cd "$TMP/fresh" && md5sum main.log metrics.jsonl DONE_* model_* state_* | md5sum)
if [ $rc -eq 1 ] && [ "$before" = "$after" ] && [ "$(wc -l <"$TMP/fr.err")" -eq 1 ] &&
   grep -q "holds the checkpoints of an earlier run (steps 2, 4 and 6); pass -y 1 to resume it, --overwrite 1" "$TMP/fr.err"; then
    pass faults_fresh_run_into_checkpoints_refused
else fail faults_fresh_run_into_checkpoints_refused "rc=$rc $(head -c 300 "$TMP/fr.err")"; fi
"$BIN" "${S[@]}" -x 4 -n 4 --overwrite 1 -o "$TMP/fresh" >"$TMP/fr2.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "deleted the checkpoints of steps 2, 4 and 6" "$TMP/fr2.out" &&
   [ "$(ls "$TMP/fresh" | grep '^DONE_' | tr '\n' ' ')" = "DONE_00000004 " ] && [ "$(grep -c trl "$TMP/fresh/main.log")" -eq 4 ]; then
    pass faults_overwrite_replaces_checkpoints
else fail faults_overwrite_replaces_checkpoints "rc=$rc $(ls "$TMP/fresh" | tr '\n' ' ') $(why "$TMP/fr2.out")"; fi

# --- a LOCK that is a symbolic link or not a regular file: refused, the file behind it untouched
#     (before: the link was followed and its target overwritten with "pid P on host H")
mkdir -p "$TMP/symlock" "$TMP/dirlock/LOCK"
echo "the user's notes" >"$TMP/notes.txt"
ln -s "$TMP/notes.txt" "$TMP/symlock/LOCK"
"$BIN" "${S[@]}" -x 1 -o "$TMP/symlock" >"$TMP/sl.out" 2>"$TMP/sl.err"
rc=$?
if [ $rc -eq 1 ] && grep -q "^error: -o: the lock file '$TMP/symlock/LOCK' is a symbolic link, expected a regular file" "$TMP/sl.err" &&
   [ "$(cat "$TMP/notes.txt")" = "the user's notes" ] && [ -L "$TMP/symlock/LOCK" ] && [ "$(ls "$TMP/symlock")" = LOCK ]; then
    pass faults_lock_symlink_refused
else fail faults_lock_symlink_refused "rc=$rc $(head -c 300 "$TMP/sl.err") notes: $(head -c 80 "$TMP/notes.txt")"; fi
"$BIN" "${S[@]}" -x 1 -o "$TMP/dirlock" >"$TMP/dl.out" 2>"$TMP/dl.err"
expect_error faults_lock_not_regular_refused $? "$TMP/dl.err" "^error: -o: the lock file '$TMP/dirlock/LOCK' is not a regular file"

# --- --overwrite 1 never deletes the file the run starts from: -e names one of the checkpoints
#     it would delete (here through a symbolic link: the same file, not the same name); refused,
#     nothing changed, no LOCK left
cp -r "$TMP/straight" "$TMP/ovr_e"
ln -s "$TMP/ovr_e/model_00000006.bin" "$TMP/start.bin"
before=$(cd "$TMP/ovr_e" && ls | md5sum; md5sum main.log metrics.jsonl DONE_* model_* state_* | md5sum)
"$BIN" "${S[@]}" -e "$TMP/start.bin" -x 8 -o "$TMP/ovr_e" --overwrite 1 >"$TMP/oe.out" 2>"$TMP/oe.err"
rc=$?
after=$(cd "$TMP/ovr_e" && ls | md5sum; md5sum main.log metrics.jsonl DONE_* model_* state_* | md5sum)
if [ $rc -eq 1 ] && [ "$before" = "$after" ] && [ "$(wc -l <"$TMP/oe.err")" -eq 1 ] &&
   grep -q "^error: --overwrite 1 would delete '$TMP/ovr_e/model_00000006.bin', which is this run's -e '$TMP/start.bin'; copy it out of -o first" "$TMP/oe.err"; then
    pass faults_overwrite_keeps_model_file
else fail faults_overwrite_keeps_model_file "rc=$rc $(head -c 300 "$TMP/oe.err")"; fi

# --- a second fresh run into a directory where the first wrote only logs (-n -1): refused, the
#     logs untouched (before: both truncated); --overwrite 1 replaces them
"$BIN" "${S[@]}" -x 2 -n -1 -o "$TMP/logsonly" >"$TMP/lo1.out" 2>&1
before=$(cd "$TMP/logsonly" && md5sum main.log metrics.jsonl)
"$BIN" "${S[@]}" -x 3 -n -1 -o "$TMP/logsonly" >"$TMP/lo2.out" 2>"$TMP/lo2.err"
rc=$?
if [ $rc -eq 1 ] && [ "$before" = "$(cd "$TMP/logsonly" && md5sum main.log metrics.jsonl)" ] && [ "$(ls "$TMP/logsonly" | tr '\n' ' ')" = "LOCK main.log metrics.jsonl " ] &&
   grep -q "^error: -o: '$TMP/logsonly' holds the logs of an earlier run (main.log and metrics.jsonl); pass -y 1 to resume it, --overwrite 1 to replace them" "$TMP/lo2.err"; then
    pass faults_fresh_run_into_logs_refused
else fail faults_fresh_run_into_logs_refused "rc=$rc $(head -c 300 "$TMP/lo2.err") $(ls "$TMP/logsonly" | tr '\n' ' ')"; fi
"$BIN" "${S[@]}" -x 3 -n -1 --overwrite 1 -o "$TMP/logsonly" >"$TMP/lo3.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "replacing the logs of an earlier run in $TMP/logsonly" "$TMP/lo3.out" &&
   [ "$(grep -c '"train_loss"' "$TMP/logsonly/metrics.jsonl")" -eq 3 ]; then pass faults_overwrite_replaces_logs
else fail faults_overwrite_replaces_logs "rc=$rc $(why "$TMP/lo3.out")"; fi

# --- two ranks with one relative -o in different working directories (node-local scratch):
#     refused at start naming rank 1 and both directories, and rank 0's new directory removed
#     again (before: exit 0, the state files split over two directories); then the same with
#     a directory of that name on rank 1 too
mkdir -p "$TMP/wd0" "$TMP/wd1"
timeout 120 mpirun --oversubscribe -np 1 --wdir "$TMP/wd0" "$BIN" "${S[@]}" -x 2 -o scratch/run : \
    -np 1 --wdir "$TMP/wd1" "$BIN" "${S[@]}" -x 2 -o scratch/run >"$TMP/wd.out" 2>"$TMP/wd.err"
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ -z "$(ls -A "$TMP/wd0" "$TMP/wd1" | grep -v ':$')" ] &&
   grep -q "^error: rank 1: -o 'scratch/run' does not exist on this rank (rank 0 made it at $TMP/wd0/scratch/run; this rank's working directory is $TMP/wd1); every rank must see one shared directory" "$TMP/wd.err"; then
    pass faults_ranks_output_dir_missing_on_rank1
else fail faults_ranks_output_dir_missing_on_rank1 "rc=$rc $(head -c 400 "$TMP/wd.err") left: $(ls -R "$TMP/wd0" | tr '\n' ' ')"; fi
mkdir -p "$TMP/wd1/scratch/run"
timeout 120 mpirun --oversubscribe -np 1 --wdir "$TMP/wd0" "$BIN" "${S[@]}" -x 2 -o scratch/run : \
    -np 1 --wdir "$TMP/wd1" "$BIN" "${S[@]}" -x 2 -o scratch/run >"$TMP/wd.out" 2>"$TMP/wd.err"
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ ! -e "$TMP/wd0/scratch" ] && [ -z "$(ls -A "$TMP/wd1/scratch/run")" ] &&
   grep -q "^error: rank 1: -o 'scratch/run' is not rank 0's directory (here it is $TMP/wd1/scratch/run, on rank 0 $TMP/wd0/scratch/run" "$TMP/wd.err"; then
    pass faults_ranks_output_dir_differs_on_rank1
else fail faults_ranks_output_dir_differs_on_rank1 "rc=$rc $(head -c 400 "$TMP/wd.err")"; fi

# --- one -e path with another file behind it on rank 1: refused at start naming rank 1 and both
#     CRCs (before: the ranks trained from different weights)
cp "$TMP/straight/model_00000002.bin" "$TMP/wd0/init.bin"
cp "$TMP/straight/model_00000004.bin" "$TMP/wd1/init.bin"
timeout 120 mpirun --oversubscribe -np 1 --wdir "$TMP/wd0" "$BIN" "${S[@]}" -e init.bin -x 2 : \
    -np 1 --wdir "$TMP/wd1" "$BIN" "${S[@]}" -e init.bin -x 2 >"$TMP/we.out" 2>"$TMP/we.err"
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && ! grep -q "^step" "$TMP/we.out" &&
   grep -q "^error: rank 1: -e 'init.bin' holds other weights than on rank 0 (payload CRC-32 [0-9a-f]\{8\} here, [0-9a-f]\{8\} on rank 0)" "$TMP/we.err"; then
    pass faults_ranks_model_file_differs
else fail faults_ranks_model_file_differs "rc=$rc $(head -c 400 "$TMP/we.err")"; fi

# --- the newest checkpoint's state file cannot be read (here: a directory in its place, EISDIR):
#     not damage, so no fallback: one line naming the file and the reason, nothing changed
cp -r "$TMP/straight" "$TMP/ioerr"
rm "$TMP/ioerr/state_00000006_00000.bin" && mkdir "$TMP/ioerr/state_00000006_00000.bin"
before=$(cd "$TMP/ioerr" && ls | md5sum; md5sum main.log metrics.jsonl DONE_* model_* state_*_00000.bin 2>/dev/null | md5sum)
"$BIN" "${S[@]}" -x 6 -n 2 -y 1 -o "$TMP/ioerr" >"$TMP/io.out" 2>"$TMP/io.err"
rc=$?
after=$(cd "$TMP/ioerr" && ls | md5sum; md5sum main.log metrics.jsonl DONE_* model_* state_*_00000.bin 2>/dev/null | md5sum)
if [ $rc -eq 1 ] && [ "$before" = "$after" ] && ! grep -q "is damaged" "$TMP/io.err" &&
   grep -q "^error: -y: checkpoint step 6: state file '$TMP/ioerr/state_00000006_00000.bin' cannot be read (Is a directory); the file is not damaged, so no older checkpoint replaces it" "$TMP/io.err"; then
    pass faults_unreadable_checkpoint_stops_without_fallback
else fail faults_unreadable_checkpoint_stops_without_fallback "rc=$rc $(head -c 400 "$TMP/io.err")"; fi

# --- validation switched on at a resume (-v with -j): accepted, and the weights stay bitwise the
#     straight run's (the val data shapes no step)
cp -r "$TMP/straight" "$TMP/valon"
rm -f "$TMP/valon/"*_00000006* "$TMP/valon/DONE_00000006"
"$BIN" "${S[@]}" -x 6 -n 2 -y 1 -v 2 -m 1 -j "$SMALL_DIR/val_*.bin" -o "$TMP/valon" >"$TMP/vo.out" 2>"$TMP/vo.err"
rc=$?
if [ $rc -eq 0 ] && grep -q "resuming from step 4" "$TMP/vo.out" && same_as_straight "$TMP/valon" &&
   [ "$(grep -c '"val_loss"' "$TMP/valon/metrics.jsonl")" -ge 1 ]; then pass faults_resume_switches_validation_on
else fail faults_resume_switches_validation_on "rc=$rc $(head -c 300 "$TMP/vo.err")"; fi

# --- a full disk under each log: one line naming the file, exit 1 (before: exit 0, empty logs)
for log in main.log metrics.jsonl; do
    mkdir -p "$TMP/full_$log"
    ln -s /dev/full "$TMP/full_$log/$log"
    "$BIN" "${S[@]}" -x 2 -o "$TMP/full_$log" >"$TMP/fl.out" 2>"$TMP/fl.err"
    expect_error "faults_full_disk_log_${log%%.*}" $? "$TMP/fl.err" "cannot write log file '$TMP/full_$log/$log' (No space left on device)"
done

# --- a full disk (here: a file-size limit of 6.1 MB, above the model file and below the state
#     file) while the step-4 checkpoint is written: one line
#     naming the file, no temporary file left behind, step 2 intact and resumable
cp -r "$TMP/straight" "$TMP/quota"
rm -f "$TMP/quota/"*_00000004* "$TMP/quota/"*_00000006*
(ulimit -f 6000; trap '' XFSZ; exec "$BIN" "${S[@]}" -x 6 -n 2 -y 1 -o "$TMP/quota") >"$TMP/q.out" 2>"$TMP/q.err"
rc=$?
if [ $rc -eq 1 ] && grep -q "^error: cannot write '$TMP/quota/state_00000004_00000.bin.tmp-[^']*' (File too large)$" "$TMP/q.err" &&
   ! ls "$TMP/quota" | grep -q tmp && [ ! -e "$TMP/quota/DONE_00000004" ]; then
    pass faults_full_disk_checkpoint_names_file
else fail faults_full_disk_checkpoint_names_file "rc=$rc $(head -c 300 "$TMP/q.err") $(ls "$TMP/quota" | tr '\n' ' ')"; fi
"$BIN" "${S[@]}" -x 6 -n 2 -y 1 -o "$TMP/quota" >"$TMP/q2.out" 2>&1
if grep -q "resuming from step 2" "$TMP/q2.out" && same_as_straight "$TMP/quota"; then pass faults_full_disk_checkpoint_resumes
else fail faults_full_disk_checkpoint_resumes "$(why "$TMP/q2.out")"; fi

# --- every checkpoint file is synced before its rename and the directory after it
if command -v strace >/dev/null 2>&1; then
    strace -f -e trace=fsync,rename,renameat,renameat2 -o "$TMP/strace.txt" "$BIN" "${S[@]}" -x 1 -o "$TMP/sync" >/dev/null 2>&1
    if python3 - "$TMP/strace.txt" <<'PYEOF'
import re, sys
calls = [l for l in open(sys.argv[1]) if re.search(r"\b(fsync|rename\w*)\(", l)]
renames = [i for i, l in enumerate(calls) if "rename" in l]
# each rename: an fsync right before it (the file) and right after it (the directory); 3 files
ok = len(renames) == 3 and all(0 < i < len(calls) - 1 and "fsync" in calls[i - 1] and "fsync" in calls[i + 1] for i in renames)
sys.exit(0 if ok else 1)
PYEOF
    then pass faults_fsync_around_renames
    else fail faults_fsync_around_renames "$(grep -E 'fsync|rename' "$TMP/strace.txt" | head -12 | tr '\n' ';')"; fi
else echo "SKIP faults_fsync_around_renames: strace not installed"; fi

# --- killed inside the very first checkpoint (before the model file's rename): -y 1 starts from
#     step 0, deletes the partial step and its temporary file, and ends bitwise equal
{ TRAIN_LLAMA_TEST_CRASH=model:2 "$BIN" "${S[@]}" -x 6 -n 2 -o "$TMP/first" >"$TMP/f1.out" 2>&1; } 2>/dev/null  # (the shell's "Killed")
tmpname=$(ls "$TMP/first" | grep '^model_00000002.bin.tmp-' || true)
"$BIN" "${S[@]}" -x 6 -n 2 -y 1 -o "$TMP/first" >"$TMP/f2.out" 2>&1
rc=$?
if [ -n "$tmpname" ] && [[ "$tmpname" == *"-$(hostname)-"* ]] && [ $rc -eq 0 ] &&
   grep -q "removed 1 temporary file an interrupted checkpoint left" "$TMP/f2.out" &&
   grep -q "no complete checkpoint in $TMP/first, starting from step 0" "$TMP/f2.out" && same_as_straight "$TMP/first"; then
    pass faults_kill_in_first_checkpoint_resumes_from_zero
else fail faults_kill_in_first_checkpoint_resumes_from_zero "tmp=$tmpname rc=$rc $(grep -v '^[|+]' "$TMP/f2.out" | head -4)"; fi

# --- damaged or tampered newest checkpoint: -y 1 says what is wrong, falls back to step 2 and
#     ends bitwise equal to the straight run (before: a tampered one resumed into other weights)
tamper() {  # tamper NAME PYTHON-ON-DIR ; the python gets the directory as sys.argv[1]
    local name=$1 code=$2 d="$TMP/tamper_$1"
    cp -r "$TMP/straight" "$d"
    rm -f "$d/"*_00000006* "$d/DONE_00000006"
    python3 -c "import sys, os, numpy as np
d = sys.argv[1]
$code" "$d" || { fail "faults_tampered_$name" "python failed"; return; }
    "$BIN" "${S[@]}" -x 6 -n 2 -y 1 -o "$d" >"$d.out" 2>"$d.err"
    local rc=$?
    if [ $rc -eq 0 ] && grep -q "^warning: -y: checkpoint step 4 is damaged: $3" "$d.err" &&
       grep -q "resuming from step 2" "$d.out" && same_as_straight "$d"; then pass "faults_tampered_$name"
    else fail "faults_tampered_$name" "rc=$rc $(head -c 300 "$d.err") $(grep -- '-y 1' "$d.out")"; fi
}
tamper model_payload "f = open(d + '/model_00000004.bin', 'r+b'); f.seek(5000); b = f.read(1); f.seek(5000); f.write(bytes([b[0] ^ 1]))" \
    "model file '.*' is corrupted: payload CRC-32"
tamper model_from_other_step "import shutil; shutil.copy(d + '/model_00000002.bin', d + '/model_00000004.bin')" \
    "model file '.*' has step 2 in its header, expected 4"
tamper state_from_other_step "import shutil; shutil.copy(d + '/state_00000002_00000.bin', d + '/state_00000004_00000.bin')" \
    "state file '.*' holds step 2, expected 4"
tamper data_position "h = np.memmap(d + '/state_00000004_00000.bin', dtype=np.int64, mode='r+', shape=(64,)); h[6] += 64; h.flush()" \
    "state file '.*' holds data position (shard 0, token 320, epoch 0), but step 4 of this data is at (shard 0, token 256, epoch 0)"
tamper truncated_state "os.truncate(d + '/state_00000004_00000.bin', 4096)" "state file '.*' is corrupted (section size"
tamper state_payload "f = open(d + '/state_00000004_00000.bin', 'r+b'); f.seek(-100, 2); b = f.read(1); f.seek(-100, 2); f.write(bytes([b[0] ^ 1]))" \
    "state file '.*' is corrupted: the optimizer values' CRC-32"  # (fp32: no extras, so the end of v)
tamper state_settings "f = open(d + '/state_00000004_00000.bin', 'r+b'); f.seek(512 + 3); b = f.read(1); f.seek(512 + 3); f.write(bytes([b[0] ^ 1]))" \
    "state file '.*' is corrupted: CRC-32"
tamper missing_model "os.remove(d + '/model_00000004.bin')" "model file '.*' is missing"

# --- every complete checkpoint damaged: one error, exit 1, nothing deleted
cp -r "$TMP/straight" "$TMP/alldamaged"
for s in 2 4 6; do truncate -s 2048 "$TMP/alldamaged/model_0000000$s.bin"; done
"$BIN" "${S[@]}" -x 6 -n 2 -y 1 -o "$TMP/alldamaged" >"$TMP/ad.out" 2>"$TMP/ad.err"
rc=$?
if [ $rc -eq 1 ] && [ "$(grep -c '^warning: -y: checkpoint step [246] is damaged' "$TMP/ad.err")" -eq 3 ] &&
   grep -q "^error: -y: every complete checkpoint in '$TMP/alldamaged' is damaged" "$TMP/ad.err" &&
   [ "$(ls "$TMP/alldamaged" | grep -c '^DONE_')" -eq 3 ]; then pass faults_all_checkpoints_damaged_refused
else fail faults_all_checkpoints_damaged_refused "rc=$rc $(head -c 400 "$TMP/ad.err")"; fi

# --- two ranks' state files swapped: both ranks see another rank's state, fall back to step 2
"${MPIRUN[@]}" -np 2 "$BIN" "${S[@]}" -x 6 -n 2 -o "$TMP/np2" >"$TMP/np2.out" 2>&1
cp -r "$TMP/np2" "$TMP/swap"
rm -f "$TMP/swap/"*_00000006* "$TMP/swap/DONE_00000006"
mv "$TMP/swap/state_00000004_00000.bin" "$TMP/swap/x" && mv "$TMP/swap/state_00000004_00001.bin" "$TMP/swap/state_00000004_00000.bin" &&
    mv "$TMP/swap/x" "$TMP/swap/state_00000004_00001.bin"
"${MPIRUN[@]}" -np 2 "$BIN" "${S[@]}" -x 6 -n 2 -y 1 -o "$TMP/swap" >"$TMP/sw.out" 2>"$TMP/sw.err"
rc=$?
if [ $rc -eq 0 ] && grep -q "holds rank 1's state, expected rank 0's" "$TMP/sw.err" && grep -q "holds rank 0's state, expected rank 1's" "$TMP/sw.err" &&
   grep -q "resuming from step 2" "$TMP/sw.out" && cmp -s "$TMP/np2/model_00000006.bin" "$TMP/swap/model_00000006.bin" &&
   cmp -s "$TMP/np2/state_00000006_00000.bin" "$TMP/swap/state_00000006_00000.bin" &&
   cmp -s "$TMP/np2/state_00000006_00001.bin" "$TMP/swap/state_00000006_00001.bin"; then pass faults_swapped_rank_states_fall_back
else fail faults_swapped_rank_states_fall_back "rc=$rc $(head -c 400 "$TMP/sw.err")"; fi

# --- a train shard replaced by a permutation of its own tokens (same name and size): resume refused
mkdir -p "$TMP/permdata" && cp "$SMALL_DIR/train_000001.bin" "$TMP/permdata/t_000.bin"
"$BIN" "${S[@]}" -x 4 -n 2 -i "$TMP/permdata/t_*.bin" -o "$TMP/perm" >"$TMP/p1.out" 2>&1
cp "$TMP/perm_000.bin" "$TMP/permdata/t_000.bin"
"$BIN" "${S[@]}" -x 4 -n 2 -i "$TMP/permdata/t_*.bin" -y 1 -o "$TMP/perm" >"$TMP/p2.out" 2>"$TMP/p2.err"
expect_error faults_permuted_shard_refused_on_resume $? "$TMP/p2.err" "was written with different settings: train_files: 1 shards, 1086162 tokens, crc"

# --- a bad token in the second shard: refused at start, before the first step (before: after 15 steps)
mkdir -p "$TMP/badtok"
cp "$SMALL_DIR/train_000001.bin" "$TMP/badtok/b_000.bin"
python3 - "$TMP/badtok/b_000.bin" "$TMP/badtok/b_001.bin" <<'PYEOF'
import sys
import numpy as np
header = np.fromfile(sys.argv[1], dtype=np.int32, count=256)
tokens = np.fromfile(sys.argv[1], dtype=np.uint16, offset=1024)[:200000].copy()
header[2] = len(tokens)
tokens[123456] = 60000  # >= the small model's vocabulary of 1000 (and GPT-2's 50257)
with open(sys.argv[2], "wb") as f:
    header.tofile(f); tokens.tofile(f)
PYEOF
"$BIN" "${S[@]}" -x 20 -i "$TMP/badtok/b_*.bin" >"$TMP/bt.out" 2>"$TMP/bt.err"
rc=$?
if [ $rc -eq 1 ] && grep -q "shard '$TMP/badtok/b_001.bin': token 123456 has id 60000, expected < vocab size 1000" "$TMP/bt.err" &&
   ! grep -q "^step" "$TMP/bt.out"; then pass faults_bad_token_in_second_shard_at_start
else fail faults_bad_token_in_second_shard_at_start "rc=$rc $(head -c 300 "$TMP/bt.err")"; fi

# --- directories that exist but cannot be listed (run as an unprivileged user: root reads any
#     directory): the glob of -i and the -o of -y 1 each name the directory and the reason
if command -v setpriv >/dev/null 2>&1 && setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null &&
   setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$BIN"; then
    chmod 755 "$TMP"
    mkdir -p "$TMP/noread" "$TMP/nolist"
    cp "$SMALL_DIR/val_000000.bin" "$TMP/noread/"
    chmod 000 "$TMP/noread"; chmod 333 "$TMP/nolist"
    nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
    "${nobody[@]}" "$BIN" "${S[@]}" -x 1 -i "$TMP/noread/*.bin" >"$TMP/nr.out" 2>"$TMP/nr.err"
    expect_error faults_unreadable_data_directory $? "$TMP/nr.err" "^error: -i: cannot read directory '$TMP/noread' (Permission denied)"
    "${nobody[@]}" "$BIN" "${S[@]}" -x 1 -y 1 -o "$TMP/nolist" >"$TMP/nl.out" 2>"$TMP/nl.err"
    expect_error faults_unlistable_output_directory $? "$TMP/nl.err" "^error: -o: cannot list directory '$TMP/nolist' (Permission denied)"
    # a newest model file this user may not read (EACCES): one line, no fallback, nothing changed
    cp -r "$TMP/straight" "$TMP/eacces" && rm "$TMP/eacces/LOCK" && chmod 777 "$TMP/eacces" && chmod 000 "$TMP/eacces/model_00000006.bin"
    before=$(cd "$TMP/eacces" && ls | md5sum; md5sum main.log metrics.jsonl DONE_* model_* state_* | md5sum)
    "${nobody[@]}" "$BIN" "${S[@]}" -x 6 -n 2 -y 1 -o "$TMP/eacces" >"$TMP/ea.out" 2>"$TMP/ea.err"
    rc=$?
    after=$(cd "$TMP/eacces" && ls | md5sum; md5sum main.log metrics.jsonl DONE_* model_* state_* | md5sum)
    if [ $rc -eq 1 ] && [ "$before" = "$after" ] && ! grep -q "is damaged" "$TMP/ea.err" &&
       grep -q "^error: -y: checkpoint step 6: model file '$TMP/eacces/model_00000006.bin' cannot be opened (Permission denied); the file is not damaged" "$TMP/ea.err"; then
        pass faults_permission_denied_checkpoint_stops_without_fallback
    else fail faults_permission_denied_checkpoint_stops_without_fallback "rc=$rc $(head -c 400 "$TMP/ea.err")"; fi
    chmod 755 "$TMP/noread" "$TMP/nolist"
else
    echo "SKIP faults_unreadable_data_directory: cannot run as an unprivileged user here (setpriv to uid 65534 failed)"
    echo "SKIP faults_unlistable_output_directory: cannot run as an unprivileged user here (setpriv to uid 65534 failed)"
    echo "SKIP faults_permission_denied_checkpoint_stops_without_fallback: cannot run as an unprivileged user here (setpriv to uid 65534 failed)"
fi

# --- the kill loop: a 2-rank run checkpointing every step, one rank SIGKILLed at a random moment
#     8 times (each restart is -y 1), then -y 1 to the end: bitwise the straight run's weights.
#     In a run of 20 here, kills 0-2 landed inside the first checkpoint, 3 between checkpoints and
#     4-19 inside the second (each restart resumes from step 1): 125 s, the last 12 adding nothing
KS=(-e tiny -b 2 -t 32 -v 0 -l 3e-3 -u 2 -x 16 -n 1 -nk 2)
"${MPIRUN[@]}" -np 2 "$BIN" "${KS[@]}" -o "$TMP/kstraight" >"$TMP/ks.out" 2>&1
python3 - "$TMP" "$BIN" "${KS[@]}" <<'PYEOF' >"$TMP/kill_loop.txt" 2>&1
import os, random, signal, subprocess, sys, time
tmp, binary, flags = sys.argv[1], sys.argv[2], sys.argv[3:]
out = os.path.join(tmp, "kloop")
rng = random.Random(20261130)
cmd = ["timeout", "120", "mpirun", "--oversubscribe", "-np", "2", binary] + flags + ["-y", "1", "-o", out]
tally = {"killed": 0, "finished_first": 0, "refused": 0, "left_partial": 0}
def rank1_pid():
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            env = open(f"/proc/{p}/environ", "rb").read().split(b"\0")
            argv = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"train_llama_cpu") and out.encode() in argv and b"OMPI_COMM_WORLD_RANK=1" in env:
            return int(p)
    return None
for i in range(8):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    # wait until rank 1 writes its state file (named ".tmp-HOST-PID" until renamed), then kill
    # it a random moment later: mid-write, before the DONE marker, or in the next step
    deadline, victim, seen = time.time() + 60, None, False
    while time.time() < deadline and proc.poll() is None and not seen:
        victim = victim or rank1_pid()
        seen = victim is not None and os.path.isdir(out) and any(n.endswith(f".tmp-{os.uname().nodename}-{victim}") for n in os.listdir(out))
        time.sleep(0.002)
    time.sleep(rng.uniform(0.0, 0.3))
    if seen and proc.poll() is None:
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        text = proc.communicate(timeout=150)[0].decode(errors="replace")
    except subprocess.TimeoutExpired:
        proc.kill()
        text = proc.communicate()[0].decode(errors="replace") + "\nerror: timed out"
    if not seen:
        print(f"kill {i}: rank 1 was not seen writing a checkpoint: " + " | ".join(text.splitlines()[-3:]))
    if proc.returncode == 0:
        tally["finished_first"] += 1
    elif "error:" in text:
        tally["refused"] += 1
        print(f"kill {i}: the restart refused: " + " | ".join(l for l in text.splitlines() if "error" in l))
    else:
        tally["killed"] += 1
    names = os.listdir(out)
    done = sorted(int(n[5:]) for n in names if n.startswith("DONE_") and n[5:].isdigit())
    partial = sorted(n for n in names if ".tmp" in n or (n.startswith(("model_", "state_")) and int(n[6:14]) not in done))
    tally["left_partial"] += bool(partial)
    print(f"kill {i}: rc {proc.returncode}, complete checkpoints {done}, partial files {partial}")
    if proc.returncode == 0:
        break
final = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
print("final run rc", final.returncode)
print("tally", tally)
PYEOF
ktally=$(grep '^tally' "$TMP/kill_loop.txt")
if grep -q "final run rc 0" "$TMP/kill_loop.txt" && grep -q "'killed': 8, 'finished_first': 0, 'refused': 0" "$TMP/kill_loop.txt" &&
   cmp -s "$TMP/kstraight/model_00000016.bin" "$TMP/kloop/model_00000016.bin" &&
   cmp -s "$TMP/kstraight/state_00000016_00000.bin" "$TMP/kloop/state_00000016_00000.bin" &&
   cmp -s "$TMP/kstraight/state_00000016_00001.bin" "$TMP/kloop/state_00000016_00001.bin"; then
    pass "faults_kill_loop_bitwise ($ktally)"
else fail faults_kill_loop_bitwise "$(tail -5 "$TMP/kill_loop.txt" | tr '\n' ';')"; fi
grep '^kill' "$TMP/kill_loop.txt" | sed 's/^/  /'

[ "$failures" -eq 0 ]
