#!/usr/bin/env bash
# mpirun.sh — Open MPI's mpirun, with its stop signals made graceful: SIGTERM, SIGINT (Ctrl-C) and
# SIGHUP to this script reach the ranks as SIGUSR1, which mpirun forwards to every rank; the
# trainer finishes its step, writes a checkpoint and exits 75, and so does this script.
#   bash scripts/mpirun.sh -np 2 ./train_llama_cpu ... -o DIR
# mpirun itself answers SIGTERM and SIGINT by ending its ranks (SIGCONT, then SIGTERM and SIGKILL
# a second apart, odls_base_sigkill_timeout) and exits 1: the steps since the newest checkpoint
# are lost (docs/checkpoints.md#stopping). mpirun runs in its own session here, so a Ctrl-C at the
# terminal reaches this script only. The trainer's resume line names this script
# (TRAIN_LLAMA_LAUNCHER).
if ! command -v mpirun >/dev/null 2>&1; then echo "error: mpirun not found (install Open MPI: bash scripts/install_deps.sh)" >&2; exit 1; fi
if [ $# -eq 0 ]; then echo "error: expected mpirun's arguments, like: bash $0 -np 2 ./train_llama_cpu ..." >&2; exit 1; fi
export TRAIN_LLAMA_LAUNCHER="bash $0"
setsid mpirun "$@" &
pid=$!
trap 'kill -USR1 "$pid" 2>/dev/null' TERM INT HUP USR1
while :; do
    rc=0
    wait "$pid" || rc=$?
    kill -0 "$pid" 2>/dev/null || break  # a trapped signal ended the wait, not mpirun
done
exit "$rc"
