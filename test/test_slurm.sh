#!/usr/bin/env bash
# test_slurm.sh — the paper's Slurm recipes (scripts/slurm/) on a real one-node Slurm: starts
# munged, slurmctld and slurmd from Debian's packages (scripts/install_deps.sh --slurm) with a
# configuration written under a temporary directory, then submits the runs through
# submit_paper_runs.sh with TRAINER=./train_llama_cpu, two ranks per job over srun --mpi=pmix and
# a tiny configuration (MODEL=tiny with the small test model's 1000-token vocabulary through
# TRAIN_EXTRA, T=64, global batch 4 sequences):
#   - the geofp8 job waits for the profiling job (afterok dependency) and trains with the
#     geofp8_layers.txt it wrote;
#   - the fp32 job is requeued (scontrol requeue) after its first checkpoint; its second start
#     resumes from the newest checkpoint and ends with the same losses, step for step, as an
#     uninterrupted fp32 job of the same configuration.
# Every daemon it started is stopped at the end. Without the Slurm/munge programs or without root
# (the daemons launch jobs as their users) it prints SKIP with the reason.
# Prints "PASS name" / "FAIL name: detail" lines (counted by test/run_tests.sh).
cd "$(dirname "$0")/.." || exit 1
REPO=$PWD
source test/testlib.sh  # pass, fail, why, small_model
skip_all() { echo "SKIP test_slurm: $1"; exit $((failures > 0)); }

# --- the paper's defaults, without a cluster: DRY_RUN=1 says "would submit" for the two profiling
#     jobs and Table III's nine runs (600M: fp32 bf16 fp8block fp8 geofp8; 300M: fp32 fp8 kfac
#     geofp8), each with its trainer's full command (Algorithm 1: --geofp8-power 1 --geofp8-refresh 50)
#     and its estimate (llama300m: 9.0e9 tokens / (32 x 152696 tok/s) = 0h30m) ---------------------
dry=$(env -i PATH="$PATH" HOME="$HOME" SHARED_ROOT=/nonexistent/train_llama DRY_RUN=1 bash scripts/slurm/submit_paper_runs.sh 2>&1)
n_prof=$(grep -c "^would submit: sbatch .* -N 32 --ntasks-per-node=1 --cpus-per-task=16 -t 02:00:00 --signal=USR1@600 --gpus-per-node=1 -A CHANGE_ME --job-name=profile_llama[36]00m .*profile_layers.sbatch$" <<<"$dry")
n_runs=$(grep -c "^would submit: sbatch .* -N 32 --ntasks-per-node=1 --cpus-per-task=16 -t 48:00:00 --signal=USR1@600 --gpus-per-node=1 -A CHANGE_ME .*--job-name=llama[36]00m_\(fp32\|bf16\|fp8\|fp8block\|kfac\|geofp8\) .*pretrain.sbatch$" <<<"$dry")
n_dep=$(grep -c "dependency=afterok:<profile_llama[36]00m> --job-name=llama[36]00m_geofp8 " <<<"$dry")
modes=$(sed -n 's/^would submit \(llama[36]00m_[a-z0-9]*\): job .*/\1/p' <<<"$dry" | tr '\n' ' ')
n_cmd=$(grep -c "^  runs: srun ./train_llama -o /nonexistent/train_llama/runs/llama[36]00m_[a-z0-9]* -e llama[36]00m .* -b 4 -t \(2048\|4096\) -d [0-9]* -x -1 -l 5e-4 -q 0.1 -k cosine --optimizer muon --muon moonlight .* -c [a-z0-9]*" <<<"$dry")
geo_cmd=$(grep -c "^  runs: srun .* -c geofp8 --geofp8-layers /nonexistent/train_llama/runs/llama[36]00m_profile/geofp8_layers.txt --geofp8-rank 32 --geofp8-refresh 50 --geofp8-power 1$" <<<"$dry")
n_est=$(grep -c "^  estimate: 0h30m of computation for 9e+09 tokens .* 152696 tok/s per H200 .* x 32 GPUs" <<<"$dry")
if [ "$n_prof" = 2 ] && [ "$n_runs" = 9 ] && [ "$n_dep" = 2 ] && [ "$n_cmd" = 9 ] && [ "$geo_cmd" = 2 ] && [ "$n_est" = 4 ] &&
   [ "$modes" = "llama600m_fp32 llama600m_bf16 llama600m_fp8block llama600m_fp8 llama600m_geofp8 llama300m_fp32 llama300m_fp8 llama300m_kfac llama300m_geofp8 " ] &&
   ! grep -q "^submitted" <<<"$dry"; then pass slurm_dry_run_paper_defaults
else fail slurm_dry_run_paper_defaults "profiles $n_prof/2, runs $n_runs/9 [$modes], dependencies $n_dep/2, commands $n_cmd/9, geofp8 $geo_cmd/2, estimates $n_est/4: $(head -c 600 <<<"$dry")"; fi
# the placeholder account is refused, with one line, before anything is submitted
out=$(env -i PATH="$PATH" HOME="$HOME" SHARED_ROOT=/nonexistent/train_llama bash scripts/slurm/submit_paper_runs.sh 2>&1)
rc=$?
if [ $rc = 1 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -q "^error: SLURM_ACCOUNT_NAME=CHANGE_ME is the placeholder" <<<"$out"; then pass slurm_placeholder_account_refused
else fail slurm_placeholder_account_refused "rc $rc: $(head -c 300 <<<"$out")"; fi
# after training: one command exports, evaluates and prints Table III (dry run: its commands)
EVT=$(mktemp -d)
mkdir -p "$EVT/llama300m_fp32" "$EVT/llama300m_geofp8"
touch "$EVT/llama300m_fp32/model_00000010.bin" "$EVT/llama300m_fp32/model_00000020.bin" "$EVT/llama300m_geofp8/model_00000020.bin"
ev=$(env -i PATH="$PATH" HOME="$HOME" SHARED_ROOT=/nonexistent OUT_ROOT="$EVT" DRY_RUN=1 bash scripts/slurm/eval_paper_runs.sh 2>&1)
if grep -qx "would run: python3 scripts/export_hf.py $EVT/llama300m_fp32/model_00000020.bin $EVT/hf/llama300m_fp32 --replace" <<<"$ev" &&
   grep -q "^would run: bash scripts/eval_downstream.sh $EVT/hf/llama300m_geofp8 --out $EVT/eval/llama300m_geofp8 " <<<"$ev" &&
   grep -qx "would run: python3 scripts/eval_table.py --baseline-method FP32 --row 300M FP32 $EVT/eval/llama300m_fp32 --row 300M GIFT $EVT/eval/llama300m_geofp8 " <<<"$ev" &&
   [ "$(grep -c 'left out$' <<<"$ev")" = 7 ]; then pass slurm_eval_paper_runs_dry_run
else fail slurm_eval_paper_runs_dry_run "$(head -c 600 <<<"$ev")"; fi
rm -rf "$EVT"
# a stop-signal lead that reaches a job's start (Slurm signals up to 60 s early) would stop and
# requeue every start of it at once; a time limit Slurm cannot read, or GPUs that do not fill
# whole nodes, are refused too: one line each, before any job is submitted
for case in "TIME_PRETRAIN=00:10:00|STOP_SIGNAL_LEAD=600 must be a whole number of seconds under the time limit 00:10:00 (600 s) less 60 s" \
            "TIME_PRETRAIN=00:10:00 STOP_SIGNAL_LEAD=540|STOP_SIGNAL_LEAD=540 must be a whole number of seconds under the time limit 00:10:00 (600 s)" \
            "STOP_SIGNAL_LEAD=10m|STOP_SIGNAL_LEAD=10m must be a whole number of seconds" \
            "TIME_PROFILE=2h|time limit '2h' is not a Slurm time" \
            "GPUS_PER_NODE=3|32 GPUs is not a multiple of GPUS_PER_NODE=3"; do
    set_env=${case%%|*} want=${case#*|}
    # shellcheck disable=SC2086
    out=$(env -i PATH="$PATH" HOME="$HOME" SHARED_ROOT=/nonexistent/train_llama DRY_RUN=1 $set_env bash scripts/slurm/submit_paper_runs.sh 2>&1)
    rc=$? name=slurm_submit_refused_$(tr -c 'A-Za-z0-9\n' _ <<<"$set_env")
    if [ $rc = 1 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -qF "error: $want" <<<"$out"; then pass "$name"
    else fail "$name" "rc=$rc: $(head -c 400 <<<"$out")"; fi
done
sweep=$(env -i PATH="$PATH" HOME="$HOME" SHARED_ROOT=/nonexistent/train_llama DRY_RUN=1 GPU_COUNTS="8 12" GPUS_PER_NODE=8 bash scripts/slurm/scaling_sweep.sh 2>&1)
if [ $? = 1 ] && [ "$sweep" = "error: 12 GPUs is not a multiple of GPUS_PER_NODE=8" ]; then pass slurm_scaling_sweep_refused_before_submitting
else fail slurm_scaling_sweep_refused_before_submitting "$(head -c 400 <<<"$sweep")"; fi

for prog in munged slurmctld slurmd sbatch scontrol squeue srun; do
    if ! command -v "$prog" >/dev/null 2>&1; then
        skip_all "$prog not found (install Slurm and munge with: bash scripts/install_deps.sh --slurm)"
    fi
done
if [ "$(id -u)" -ne 0 ]; then skip_all "slurmd and munged need root, this is uid $(id -u)"; fi
if [ ! -x train_llama_cpu ]; then echo "FAIL slurm_setup: ./train_llama_cpu is missing (make train_llama_cpu)"; exit 1; fi

TMP=$(mktemp -d /tmp/test_slurm.XXXXXX)
chmod 700 "$TMP"
pid_of() { [ -s "$TMP/$1.pid" ] && cat "$TMP/$1.pid"; }
stop_daemons() {
    scancel --quiet --full "${jobs_all[@]}" 2>/dev/null
    for _ in $(seq 1 60); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.5; done
    for d in slurmd slurmctld munged; do
        local p
        p=$(pid_of $d) && kill "$p" 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
        kill -0 "$p" 2>/dev/null && kill -9 "$p" 2>/dev/null
    done
}
jobs_all=()
trap 'stop_daemons; rm -rf "$TMP"' EXIT

# --- a one-node cluster: this host, its CPUs, free ports, everything under $TMP ----------------
read -r port_ctld port_d < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
host=$(hostname -s)
cpus=$(getconf _NPROCESSORS_ONLN)  # not nproc: it answers OMP_NUM_THREADS where that is set
mkdir -p "$TMP/state" "$TMP/spool"
head -c 1024 /dev/urandom >"$TMP/munge.key"
chmod 400 "$TMP/munge.key"
cat >"$TMP/slurm.conf" <<EOF
ClusterName=test_slurm
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmctldPort=$port_ctld
SlurmdPort=$port_d
AuthType=auth/munge
AuthInfo=socket=$TMP/munge.sock
CredType=cred/munge
StateSaveLocation=$TMP/state
SlurmdSpoolDir=$TMP/spool
SlurmctldPidFile=$TMP/slurmctld.pid
SlurmdPidFile=$TMP/slurmd.pid
SlurmctldLogFile=$TMP/slurmctld.log
SlurmdLogFile=$TMP/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
# finished jobs stay visible to scontrol for the checks below
MinJobAge=3600
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=2000 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$TMP/slurm.conf
if ! munged --socket="$TMP/munge.sock" --key-file="$TMP/munge.key" --pid-file="$TMP/munged.pid" \
        --log-file="$TMP/munged.log" --seed-file="$TMP/munge.seed" --force >"$TMP/munged.out" 2>&1; then
    skip_all "munged cannot start here: $(head -c 300 "$TMP/munged.out")"
fi
slurmctld -f "$SLURM_CONF" >"$TMP/slurmctld.out" 2>&1
slurmd -f "$SLURM_CONF" >"$TMP/slurmd.out" 2>&1
up=0
for _ in $(seq 1 60); do
    [ "$(sinfo -h -o %T 2>/dev/null)" = idle ] && { up=1; break; }
    sleep 0.5
done
if [ $up = 1 ]; then pass slurm_cluster_up
else
    fail slurm_cluster_up "node not idle after 30 s: $(sinfo 2>&1 | tail -1); $(tail -3 "$TMP/slurmctld.log" "$TMP/slurmd.log" 2>&1)"
    exit 1
fi

# --- the paper's submission at a tiny scale (config.sh reads all of these from the environment) --
# the small test model's data (test/testlib.py: tiny's layers, a 1000-token vocabulary) under the
# names the recipes expect; TRAIN_EXTRA gives every run its --vocab-size
small_model
SMALL_VOCAB=$(grep -o -- '--vocab-size [0-9]*' <<<"${SMALL[*]}")
mkdir -p "$TMP/data"
ln -s "$SMALL_DIR/train_000001.bin" "$TMP/data/openwebtext_train_000001.bin"
ln -s "$SMALL_DIR/val_000000.bin" "$TMP/data/openwebtext_val_000000.bin"
STEPS=40
export REPO_DIR=$REPO TRAINER=./train_llama_cpu TRAIN_EXTRA="$SMALL_VOCAB" SRUN_MPI=pmix SRUN_EXTRA= \
       SLURM_PARTITION=test SLURM_ACCOUNT_NAME= REQUEST_GPUS=0 GPUS_PER_NODE=2 CPUS_PER_TASK=1 \
       PAPER_GPUS=2 PAPER_GLOBAL_BATCH=4 PAPER_MICRO_BATCH=2 SEQ_LEN=64 STEPS \
       DATA_DIR=$TMP/data OUT_ROOT=$TMP/runs SHARED_ROOT=$TMP/shared \
       CHECKPOINT_EVERY=5 KEEP_CHECKPOINTS=2 VAL_EVERY=10 VAL_BATCHES=2 \
       GEOFP8_PROFILE_STEPS=6 GEOFP8_REFRESH=5 GEOFP8_RANK=8 \
       TIME_PRETRAIN=00:10:00 TIME_PROFILE=00:10:00 STOP_SIGNAL_LEAD=60 MODELS=tiny MODES="fp32 geofp8"
OUT=$TMP/runs
bash scripts/slurm/submit_paper_runs.sh >"$TMP/submit.out" 2>&1
rc=$?
prof=$(sed -n 's/^submitted profile_tiny: job \([0-9]*\) .*/\1/p' "$TMP/submit.out")
fp32=$(sed -n 's/^submitted tiny_fp32: job \([0-9]*\) .*/\1/p' "$TMP/submit.out")
geo=$(sed -n 's/^submitted tiny_geofp8: job \([0-9]*\) .*/\1/p' "$TMP/submit.out")
# the geofp8 job, still pending, names the profiling job as its dependency
geo_info=$(scontrol show job "$geo" 2>&1)
if [ $rc -eq 0 ] && [ -n "$prof" ] && [ -n "$fp32" ] && [ -n "$geo" ] &&
   grep -q "Dependency=afterok:$prof" <<<"$geo_info" && grep -q "JobState=PENDING" <<<"$geo_info"; then
    pass slurm_submit_paper_runs_geofp8_depends_on_profile
else fail slurm_submit_paper_runs_geofp8_depends_on_profile "rc=$rc $(cat "$TMP/submit.out") $(grep -o 'JobState=[A-Z]*\|Dependency=[^ ]*' <<<"$geo_info")"; fi
# the uninterrupted twin of the fp32 run, submitted like the scaling sweep does (RUN_DIR)
straight=$( (source scripts/slurm/config.sh
             res=$(sbatch_resources 2 00:10:00) || exit 1
             # shellcheck disable=SC2086
             submit $res --job-name=tiny_fp32_straight \
                 --export="ALL,MODEL=tiny,MODE=fp32,RUN_DIR=$OUT/tiny_fp32_straight" scripts/slurm/pretrain.sbatch) 2>&1)
jobs_all=($prof $fp32 $geo $straight)
echo "  jobs: profile_tiny $prof, tiny_fp32 $fp32, tiny_geofp8 $geo (afterok:$prof), tiny_fp32_straight $straight"

# --- stop the fp32 job two steps after its first complete checkpoint as its time limit would:
#     SIGUSR1 to every process of the job (what --signal=USR1@STOP_SIGNAL_LEAD sends its tasks, and
#     more); the trainer checkpoints
#     that step and exits 75, and pretrain.sbatch requeues the job itself ----------------------------
requeued_at=
for _ in $(seq 1 1200); do
    # the markers themselves (8 digits), not one still being written under a temporary name
    done_file=$(ls "$OUT/tiny_fp32"/DONE_[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9] 2>/dev/null | head -1)
    last=$(tail -1 "$OUT/tiny_fp32/metrics.jsonl" 2>/dev/null | sed -n 's/^{"step": \([0-9]*\),.*/\1/p')
    if [ -n "$done_file" ] && [ "${last:-0}" -ge $((10#${done_file##*DONE_} + 2)) ]; then
        # --full: the whole job, the batch script and srun included (a preemption's or a
        # scheduler's signal to every process): the script forwards it through srun, and each
        # task takes its copies as one stop (llmc/run.h)
        scancel --full --signal=USR1 "$fp32" && requeued_at=$((10#${done_file##*DONE_}))
        echo "  sent SIGUSR1 to every process of fp32 job $fp32 at step $last (checkpoint of step $requeued_at complete)"
        break
    fi
    sleep 0.1
done
if [ -n "$requeued_at" ]; then
    # a requeued job becomes eligible two minutes later; start it now instead of waiting
    for _ in $(seq 1 100); do
        scontrol show job "$fp32" | grep -q "JobState=PENDING" && break
        sleep 0.2
    done
    scontrol update JobId="$fp32" StartTime=now
fi

# --- wait for the four jobs ---------------------------------------------------------------------
state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
finished=0
for _ in $(seq 1 900); do
    all=1
    for j in "${jobs_all[@]}"; do
        case $(state "$j") in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) ;; *) all=0 ;; esac
    done
    [ $all = 1 ] && { finished=1; break; }
    sleep 0.5
done
if [ $finished = 1 ]; then pass slurm_jobs_finished
else fail slurm_jobs_finished "after 450 s: $(squeue 2>&1 | tail -5)"; fi
log_of() { echo "$OUT/slurm_logs/$2-$1.out"; }
for pair in "$prof:profile_tiny" "$fp32:tiny_fp32" "$geo:tiny_geofp8" "$straight:tiny_fp32_straight"; do
    j=${pair%%:*} name=${pair#*:}
    if [ "$(state "$j")" = COMPLETED ]; then pass "slurm_job_${name}_completed"
    else fail "slurm_job_${name}_completed" "job $j $(state "$j"): $(tail -5 "$(log_of "$j" "$name")" 2>&1)"; fi
done

# --- the geofp8 job started after the profiling job ended, with the layers it selected ----------
field() { scontrol show job "$1" | sed -n "s/.* $2=\([^ ]*\).*/\1/p" | head -1; }
layers=$OUT/tiny_profile/geofp8_layers.txt
geo_log=$(log_of "$geo" tiny_geofp8)
want=$(awk '{print $1}' "$layers" 2>/dev/null | paste -sd, - | sed 's/,/, /g')
if [ -s "$layers" ] && [[ ! "$(field "$geo" StartTime)" < "$(field "$prof" EndTime)" ]] &&
   grep -q -- "--geofp8-layers $layers" "$geo_log" &&
   grep -q "^geofp8: [0-9]* layers on the geometry path from step 1 (--geofp8-layers $layers): $want\$" "$geo_log"; then
    pass slurm_geofp8_used_profiled_layers
else
    fail slurm_geofp8_used_profiled_layers "profile end $(field "$prof" EndTime), geofp8 start $(field "$geo" StartTime), layers '$want', log: $(grep geofp8 "$geo_log" 2>&1 | head -3)"
fi

# --- the requeued fp32 job resumed from its checkpoint and matches the uninterrupted run ---------
fp32_log=$(log_of "$fp32" tiny_fp32)
resumed=$(sed -n 's/^-y 1: resuming from step \([0-9]*\) in .*/\1/p' "$fp32_log" | tail -1)
restarts=$(field "$fp32" Restarts)
stopped_at=$(sed -n 's/^stopped by SIGUSR1 after step \([0-9]*\): checkpoint .* resume with: .* -y 1 .*(under the same srun, 2 tasks)$/\1/p' "$fp32_log" | head -1)
if [ -n "$requeued_at" ] && [ "$restarts" = 1 ] && grep -q "(restart 1)" "$fp32_log" && [ -n "$resumed" ] &&
   grep -q "requeueing job $fp32" "$fp32_log" && [ "$resumed" = "$stopped_at" ] && [ "$resumed" -ge "$requeued_at" ] && [ "$resumed" -lt $STEPS ] && grep -q "^done: $((STEPS - resumed)) steps" "$fp32_log"; then
    pass slurm_requeued_job_resumed
    echo "  fp32 job $fp32: stopped by SIGUSR1 with a checkpoint of step $stopped_at, requeued itself, restarted once, resumed from step $resumed"
else
    fail slurm_requeued_job_resumed "signalled after step '$requeued_at', stopped at '$stopped_at', restarts '$restarts', resumed from '$resumed': $(grep -E '^stopped' "$fp32_log" | sed 's/resume with: .* -y 1/resume with: ... -y 1/' | head -2) $(grep -E '^-y 1|^done|requeueing|restart|CANCELLED' "$fp32_log" 2>&1 | head -6)"
fi
# and no job stopped for any other reason: Slurm's own SIGUSR1 (--signal=USR1@STOP_SIGNAL_LEAD)
# comes long after these jobs end, so only the signal sent above stopped a trainer, once
others=""
for pair in "$prof:profile_tiny" "$geo:tiny_geofp8" "$straight:tiny_fp32_straight"; do
    j=${pair%%:*} name=${pair#*:}
    n_stop=$(grep -c "^stopped by SIGUSR1" "$(log_of "$j" "$name")")
    [ "$(field "$j" Restarts)" = 0 ] && [ "$n_stop" = 0 ] || others="$others $name (restarts $(field "$j" Restarts), stops $n_stop)"
done
n_stop=$(grep -c "^stopped by SIGUSR1" "$fp32_log")
if [ -z "$others" ] && [ "$n_stop" = 1 ]; then pass slurm_only_the_signalled_job_stopped
else fail slurm_only_the_signalled_job_stopped "tiny_fp32 stopped $n_stop times;$others"; fi
cmp_out=$(python3 - "$OUT/tiny_fp32/metrics.jsonl" "$OUT/tiny_fp32_straight/metrics.jsonl" "$STEPS" <<'PYEOF'
import json, sys
def records(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        key = (r["step"], "val_loss" in r)
        out.setdefault(key, []).append({k: r[k] for k in ("train_loss", "grad_norm", "val_loss") if k in r})
    return out
requeued, straight, steps = records(sys.argv[1]), records(sys.argv[2]), int(sys.argv[3])
bad = [k for k, v in straight.items() if any(x != v[0] for x in requeued.get(k, [None]))]
train_steps = sorted(s for s, val in straight if not val)
if train_steps != list(range(1, steps + 1)): bad.append(("straight run steps", train_steps[:3], len(train_steps)))
if set(requeued) != set(straight): bad.append(("logged steps differ", sorted(set(requeued) ^ set(straight))[:5]))
twice = sum(len(v) > 1 for v in requeued.values())
if twice: bad.append(("records logged twice (the resume cuts the interrupted run's rows)", twice))
print(f"{len(straight)} records equal, each logged once" if not bad else f"differ: {bad[:5]}")
sys.exit(1 if bad else 0)
PYEOF
)
if [ $? -eq 0 ]; then pass slurm_requeued_losses_equal_uninterrupted; echo "  $cmp_out"
else fail slurm_requeued_losses_equal_uninterrupted "$cmp_out"; fi
# and its final weights and optimizer state are bit for bit the uninterrupted run's
final=$(printf %08d $STEPS)
differ=""
for f in model_$final.bin state_${final}_00000.bin state_${final}_00001.bin; do
    cmp -s "$OUT/tiny_fp32/$f" "$OUT/tiny_fp32_straight/$f" || differ="$differ $f"
done
if [ -z "$differ" ]; then pass slurm_requeued_checkpoint_bitwise_uninterrupted
else fail slurm_requeued_checkpoint_bitwise_uninterrupted "differ or missing:$differ ($(ls "$OUT/tiny_fp32" | tr '\n' ' '))"; fi

# --- every daemon this test started is gone ------------------------------------------------------
pids=("$(pid_of slurmd)" "$(pid_of slurmctld)" "$(pid_of munged)")
stop_daemons
alive=()
for p in "${pids[@]}"; do [ -n "$p" ] && kill -0 "$p" 2>/dev/null && alive+=("$p"); done
if [ ${#alive[@]} -eq 0 ] && ! pgrep -f "$TMP" >/dev/null; then pass slurm_daemons_stopped
else fail slurm_daemons_stopped "still running: ${alive[*]} $(pgrep -af "$TMP" | head -3)"; fi
trap 'rm -rf "$TMP"' EXIT
[ $failures -eq 0 ]
