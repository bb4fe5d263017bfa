#!/usr/bin/env bash
# config.sh — the one place to adapt the paper's runs to a cluster. Every script in scripts/slurm/
# sources it; each setting can also be overridden from the environment (FOO=... sbatch ...).
#
# The paper ran on TACC Vista: one GH200 (96 GB) per node, InfiniBand between nodes, 32 GPUs for
# the pretraining runs and 8..64 GPUs for the scaling study (Figure 5). The defaults below follow
# that shape; for 8-GPU nodes (DGX H100/H200) set GPUS_PER_NODE=8.

# --- Slurm -----------------------------------------------------------------------------------
: "${SLURM_ACCOUNT_NAME=CHANGE_ME}"      # sbatch -A: your allocation / project (set empty: no -A)
: "${SLURM_PARTITION:=gh}"               # sbatch -p: the GPU partition (Vista: gh)
: "${SLURM_CPU_PARTITION:=gg}"           # sbatch -p for the CPU-only data preparation (Vista: gg)
: "${SLURM_QOS:=}"                       # sbatch -q, if your site needs one (empty: none)
: "${GPUS_PER_NODE:=1}"                  # GPUs (= training tasks) per node; Vista 1, DGX 8
: "${CPUS_PER_TASK:=16}"                 # CPU cores per training task (data loading, OpenMP)
: "${GPU_TYPE:=}"                        # a GRES type, e.g. h100 for --gpus-per-node=h100:8 (empty: any)
: "${REQUEST_GPUS:=1}"                   # 0: ask Slurm for no GPUs (CPU nodes with TRAINER=./train_llama_cpu;
                                         # GPUS_PER_NODE then counts training tasks per node)
: "${TIME_PRETRAIN:=48:00:00}"           # one pretraining run; runs are requeue-safe (-y 1), so a
                                         # shorter limit only means more requeues
: "${STOP_SIGNAL_LEAD:=600}"             # seconds before the time limit at which Slurm sends the
                                         # trainer SIGUSR1: it finishes its step, checkpoints and
                                         # the job requeues itself (enough for a step and a checkpoint)
: "${TIME_PROFILE:=02:00:00}"            # the 100-step layer-selection run
: "${TIME_SCALING:=01:00:00}"            # one short step-time run of the scaling sweep
: "${TIME_DATA:=12:00:00}"               # OpenWebText tokenization

# --- where things live (a file system every node sees: not /tmp, not node-local scratch) ------
: "${REPO_DIR:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"  # this checkout, with ./train_llama built
: "${SHARED_ROOT:=${SCRATCH:-$HOME}/train_llama}"
: "${DATA_DIR:=$SHARED_ROOT/data/openwebtext}"   # token shards from scripts/prepare_openwebtext.sh
: "${OUT_ROOT:=$SHARED_ROOT/runs}"               # one directory per run (-o): logs, metrics.jsonl, checkpoints
: "${HF_HOME:=$SHARED_ROOT/hf_cache}"            # Hugging Face download cache of the raw dataset
: "${SLURM_LOG_DIR:=$OUT_ROOT/slurm_logs}"       # the jobs' stdout/stderr, <job name>-<job id>.out
export HF_HOME
TRAIN_GLOB="$DATA_DIR/openwebtext_train_*.bin"
VAL_GLOB="$DATA_DIR/openwebtext_val_*.bin"

# --- launch ----------------------------------------------------------------------------------
# srun starts one task per GPU. SRUN_MPI=none: the trainer reads SLURM_PROCID /
# SLURM_STEP_NUM_TASKS / SLURM_LOCALID and exchanges the NCCL id through a file in the run
# directory ($TRAIN_LLAMA_NCCL_ID_FILE with .$SLURM_JOB_ID.$SLURM_STEP_ID appended, llmc/comm.cuh).
# SRUN_MPI=pmix (or pmi2): an MPI launch, for a binary built with the MPI flags. Each task uses
# GPU (local task id mod the GPUs it sees), right for whole-node, --gpus-per-task=1 and
# --gpu-bind=closest layouts.
: "${SRUN_MPI:=none}"
: "${SRUN_EXTRA=--cpu-bind=cores}"       # more srun flags (e.g. --gpu-bind=closest on multi-GPU nodes; empty: none)
: "${TRAIN_LLAMA_NCCL_ID_TIMEOUT:=600}"  # seconds the other ranks wait for rank 0's id file
export TRAIN_LLAMA_NCCL_ID_TIMEOUT

# Modules or a container, if your site uses them (uncomment / adapt):
# module load cuda/13.0 nccl/2.28 openmpi
# export LD_LIBRARY_PATH=/opt/nccl/lib:$LD_LIBRARY_PATH

# --- NCCL's network: left to NCCL's own detection (InfiniBand, RoCE, Ethernet, EFA, ...), which
#     is right on most clusters. Check the first run with NCCL_DEBUG=INFO: between nodes the log
#     should show "NET/IB" (with "GDRDMA" where the NIC allows it) or your fabric's plugin, not
#     "NET/Socket". Only if it picks the wrong interface or device, name them here, e.g. on an
#     InfiniBand cluster whose NICs are mlx5_* and whose IPoIB interface is ib0:
# export NCCL_IB_HCA=mlx5                 # HCAs NCCL may use (prefix match; `ibv_devices` lists them)
# export NCCL_SOCKET_IFNAME=ib0           # interface for NCCL's bootstrap / socket traffic (`ip -br a`)
# export NCCL_NET_GDR_LEVEL=PHB           # GPUDirect RDMA when GPU and NIC share a host bridge or closer
# export NCCL_IB_TIMEOUT=22               # IB verbs timeout exponent: tolerate a congested fabric
# Variables already set in the environment of sbatch are passed through as they are.
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"                  # INFO: topology, rings and transports at startup
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$CPUS_PER_TASK}"

# --- the paper's recipe (DESIGN §4): global batch 512 sequences, micro-batch 4, Muon, lr 5e-4
#     cosine to 5e-5, 32 GPUs. Steps: the paper does not say; we train one epoch of OpenWebText
#     (-x -1: the trainer derives the step count from the shard sizes, about 9e9 GPT-2 tokens,
#     i.e. ~4.3k steps for llama300m and ~8.6k for llama600m). Overriding the PAPER_* values (or
#     SEQ_LEN) leaves the paper's recipe: meant for trying the recipes out at a small scale. ------
: "${PAPER_GPUS:=32}"
: "${PAPER_GLOBAL_BATCH:=512}"   # sequences per optimizer step
: "${PAPER_MICRO_BATCH:=4}"
: "${PAPER_LR:=5e-4}"
: "${PAPER_FINAL_LR_FRAC:=0.1}"  # 5e-5 / 5e-4
: "${SEQ_LEN:=}"                 # empty: the model's sequence length below
: "${CHECKPOINT_EVERY:=250}" # -n; each checkpoint is the model plus one state file per rank (the optimizer moments split across them)
: "${KEEP_CHECKPOINTS:=2}"   # -nk: keep the newest two complete checkpoints
: "${VAL_EVERY:=250}"        # -v
: "${VAL_BATCHES:=20}"       # -m
: "${SEED:=1337}"
: "${GEOFP8_RANK:=32}"       # --geofp8-rank (the paper's operating point)
# GeoFP8's transform: the paper's Algorithm 1 (whitening power 1, a fresh factor every 50 steps).
# This project's extensions are opt-in (docs/slurm.md): GEOFP8_POWER=auto GEOFP8_REFRESH=10 is
# what docs/gradient_communication.md's "GeoFP8 at 64 ranks" supports (half whitening chosen per
# unit, a fresher factor; GEOFP8_REFRESH=1 is better still where a refresh every step is cheap).
: "${GEOFP8_POWER:=1}"       # --geofp8-power
: "${GEOFP8_REFRESH:=50}"    # --geofp8-refresh (also kfac's refresh)
: "${FIDELITY_EVERY:=0}"     # --fidelity-every: > 0 logs the fair fidelity figures (and their windows)
: "${GEOFP8_PROFILE_STEPS:=100}"

# The sequence length of a model preset (the paper: 4096 for 300M, 2048 for 600M), or SEQ_LEN.
model_seq_len() {
    if [[ -n "$SEQ_LEN" ]]; then echo "$SEQ_LEN"; return 0; fi
    case "$1" in
        llama300m) echo 4096 ;;
        llama600m) echo 2048 ;;
        tiny) echo 256 ;;
        d12) echo 1024 ;;
        *) echo "error: unknown MODEL '$1' (expected llama300m, llama600m, d12 or tiny)" >&2; return 1 ;;
    esac
}

# Where the profiling run of a model writes its selected layers.
layers_file() { echo "$OUT_ROOT/$1_profile/geofp8_layers.txt"; }

# Seconds in a Slurm time limit (sbatch -t): MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS,
# DAYS-HOURS, DAYS-HOURS:MINUTES or DAYS-HOURS:MINUTES:SECONDS; nothing (status 1) otherwise.
slurm_time_seconds() {
    local t=$1 days=0 f
    [[ "$t" =~ ^[0-9]+(-[0-9]+)?(:[0-9]+){0,2}$ ]] || return 1
    if [[ "$t" == *-* ]]; then
        days=${t%%-*} t=${t#*-}
        IFS=: read -r -a f <<<"$t"
        f+=(0 0)  # DAYS-HOURS[:MINUTES[:SECONDS]]
        echo $(( ((10#$days * 24 + 10#${f[0]}) * 60 + 10#${f[1]}) * 60 + 10#${f[2]} ))
        return
    fi
    IFS=: read -r -a f <<<"$t"
    case ${#f[@]} in
        1) echo $(( 10#${f[0]} * 60 )) ;;
        2) echo $(( 10#${f[0]} * 60 + 10#${f[1]} )) ;;
        3) echo $(( (10#${f[0]} * 60 + 10#${f[1]}) * 60 + 10#${f[2]} )) ;;
    esac
}

# sbatch resource flags for a job on NGPUS GPUs with time limit TIME. Call it in an assignment,
# res=$(sbatch_resources ...), so that set -e stops the script when it refuses.
sbatch_resources() {
    local ngpus=$1 time=$2 limit
    if (( ngpus % GPUS_PER_NODE != 0 )); then
        echo "error: $ngpus GPUs is not a multiple of GPUS_PER_NODE=$GPUS_PER_NODE" >&2
        return 1
    fi
    if ! limit=$(slurm_time_seconds "$time"); then
        echo "error: time limit '$time' is not a Slurm time (MINUTES, HH:MM:SS, DAYS-HH:MM:SS, ...)" >&2
        return 1
    fi
    # Slurm may send the --signal up to 60 s before the time it was asked for; a lead that
    # reaches the start of the job would stop every start at once and requeue it for ever
    if [[ ! "$STOP_SIGNAL_LEAD" =~ ^[0-9]+$ ]] || (( STOP_SIGNAL_LEAD + 60 >= limit )); then
        echo "error: STOP_SIGNAL_LEAD=$STOP_SIGNAL_LEAD must be a whole number of seconds under the time limit" \
             "$time ($limit s) less 60 s (Slurm may signal up to 60 s early)" >&2
        return 1
    fi
    local args=(-p "$SLURM_PARTITION" -N $((ngpus / GPUS_PER_NODE))
                --ntasks-per-node="$GPUS_PER_NODE" --cpus-per-task="$CPUS_PER_TASK" -t "$time" --signal=USR1@"$STOP_SIGNAL_LEAD")
    if [[ "$REQUEST_GPUS" == 1 ]]; then
        local gres=$GPUS_PER_NODE
        [[ -n "$GPU_TYPE" ]] && gres="$GPU_TYPE:$GPUS_PER_NODE"
        args+=(--gpus-per-node="$gres")
    fi
    # the placeholder account is refused before anything is submitted (a dry run shows it)
    if [[ "$SLURM_ACCOUNT_NAME" == CHANGE_ME && "${DRY_RUN:-0}" != 1 ]]; then
        echo "error: SLURM_ACCOUNT_NAME=CHANGE_ME is the placeholder: set your allocation in scripts/slurm/config.sh" \
             "or the environment (SLURM_ACCOUNT_NAME= : no -A)" >&2
        return 1
    fi
    [[ -n "$SLURM_ACCOUNT_NAME" ]] && args+=(-A "$SLURM_ACCOUNT_NAME")
    [[ -n "$SLURM_QOS" ]] && args+=(-q "$SLURM_QOS")
    echo "${args[@]}"
}

# sbatch (the job's output in $SLURM_LOG_DIR), or with DRY_RUN=1 only print "would submit:
# sbatch ..." and, for dependencies, the job's name in <> where its id would be.
submit() {
    if [[ "${DRY_RUN:-0}" == 1 ]]; then
        echo "would submit: sbatch --output=$SLURM_LOG_DIR/%x-%j.out $*" >&2
        local a name=job
        for a in "$@"; do [[ "$a" == --job-name=* ]] && name=${a#--job-name=}; done
        echo "<$name>"
    else
        mkdir -p "$SLURM_LOG_DIR"
        sbatch --parsable --output="$SLURM_LOG_DIR/%x-%j.out" "$@"
    fi
}

# The trainer every task runs: ./train_llama (GPU), or TRAINER=./train_llama_cpu on CPU nodes.
: "${TRAINER:=./train_llama}"
# More trainer flags, appended to every run's (e.g. --vocab-size N for shards of another
# tokenizer, --attention cublas; empty: none)
: "${TRAIN_EXTRA=}"

# Runs $TRAINER on every task of the allocation with -o RUN_DIR and the given flags.
run_train_llama() {
    local run_dir=$1
    shift
    mkdir -p "$run_dir"
    export TRAIN_LLAMA_NCCL_ID_FILE="$run_dir/nccl_id"
    cd "$REPO_DIR"
    if [[ ! -x "$TRAINER" ]]; then
        echo "error: $REPO_DIR/$TRAINER is missing; build it first (make ${TRAINER#./})" >&2
        return 1
    fi
    echo "run: srun $TRAINER -o $run_dir $*${TRAIN_EXTRA:+ $TRAIN_EXTRA} (tasks $SLURM_NTASKS, nodes $SLURM_JOB_NUM_NODES)"
    # shellcheck disable=SC2086
    srun --mpi="$SRUN_MPI" --kill-on-bad-exit=1 --ntasks="$SLURM_NTASKS" --ntasks-per-node="$GPUS_PER_NODE" $SRUN_EXTRA \
        "$TRAINER" -o "$run_dir" "$@" $TRAIN_EXTRA &
    # a stop signal to this script (scancel --full, --signal=B:USR1@..., a preemption) would end
    # it, and with it the job, before the trainer's checkpoint: it goes on to the tasks as SIGUSR1
    # through srun instead (the tasks take the copies of one stop as one, llmc/run.h). SIGTERM to
    # srun itself makes srun SIGKILL its tasks: that stop is Slurm's to avoid (docs/slurm.md).
    local pid=$! rc
    trap 'kill -USR1 "$pid" 2>/dev/null' USR1 TERM INT HUP
    while :; do
        rc=0
        wait "$pid" || rc=$?
        kill -0 "$pid" 2>/dev/null || break  # a trapped signal ended the wait, not srun
    done
    trap - USR1 TERM INT HUP
    return "$rc"
}

# The trainer's flags for one paper run (MODEL, MODE; the layers file of a geofp8 run), into the
# array PRETRAIN_ARGS; pretrain.sbatch runs them, submit_paper_runs.sh prints them.
pretrain_args() {
    local model=$1 mode=$2 steps=${3:--1} resume=${4:-1} t
    t=$(model_seq_len "$model") || return 1
    PRETRAIN_ARGS=(-e "$model" -i "$TRAIN_GLOB" -j "$VAL_GLOB"
          -b "$PAPER_MICRO_BATCH" -t "$t" -d $((PAPER_GLOBAL_BATCH * t)) -x "$steps"
          -l "$PAPER_LR" -q "$PAPER_FINAL_LR_FRAC" -k cosine
          --optimizer muon --muon moonlight
          -n "$CHECKPOINT_EVERY" -nk "$KEEP_CHECKPOINTS" -y "$resume"
          -v "$VAL_EVERY" -m "$VAL_BATCHES" --seed "$SEED"
          -c "$mode")
    case "$mode" in
        fp32|bf16|fp8|fp8block) ;;
        geofp8) PRETRAIN_ARGS+=(--geofp8-layers "$(layers_file "$model")" --geofp8-rank "$GEOFP8_RANK"
                                --geofp8-refresh "$GEOFP8_REFRESH" --geofp8-power "$GEOFP8_POWER") ;;
        kfac) PRETRAIN_ARGS+=(--geofp8-refresh "$GEOFP8_REFRESH") ;;
        *) echo "error: unknown MODE '$mode' (expected fp32, bf16, fp8, fp8block, geofp8 or kfac)" >&2; return 1 ;;
    esac
    (( FIDELITY_EVERY > 0 )) && PRETRAIN_ARGS+=(--fidelity-every "$FIDELITY_EVERY")
    return 0
}

# One H200's measured tokens/s for a preset (train_llama at B 4, the paper's T; the H200 run of
# commit c950ed2, dev/gpu_results_c950ed2.txt); empty where none was measured.
measured_tok_s() {
    case "$1" in
        llama300m) echo 152696 ;;
        llama600m) echo 80782 ;;
        *) echo "" ;;
    esac
}
