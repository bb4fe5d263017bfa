#!/usr/bin/env bash
# dev/gpu_check.sh — everything that needs a GPU, in one run of at most 7 minutes on one H200, for
# a machine that may be a bare CUDA image (nvcc, the CUDA libraries, NCCL only as a Python wheel,
# no BLAS, no MPI). Each row goes to the results file the moment it is known, with its seconds:
#   preflight     GPU, driver, nvcc; where each CUDA library and NCCL was found (toolkit lib dirs,
#                 ldconfig, the nvidia-* wheels' lib folders), which sets LD_LIBRARY_PATH; the
#                 bundle's files; the reference curves' flags
#   binaries      the carried binaries load (ldd, train_llama --help); only if they do not, a rebuild
#                 there with make gpu -j (from a repo tree only)
#   kernels       every dev_<op> --validate-only; where the wgmma kernels broke dev_attention's run
#                 off (a CUDA error, a hang), dev_attention_no_sm90: the same with --no-sm90
#   tests         the GPU tests (test_llama_gpu: the model against the PyTorch fixture; test_fp8_device)
#   tiny          50 tiny steps, per-step loss against the CPU engine's curve (bf16 tolerance below)
#   mode_<m>      every -c mode for 30 steps on a one-rank NCCL communicator (orchestration only:
#                 one rank turns every collective into a copy) against the CPU engine's curve
#   bitwise       two identical runs: checkpoint files and losses bit for bit
#   skip_nan_loss a non-finite loss (TRAIN_LLAMA_TEST_NAN_LOSS) at the refresh step 3 of 4 on a
#                 one-rank NCCL communicator, with the gradient in buckets on their own stream and
#                 with --bucket-mb 0: both skip step 3 and end with the same checkpoint bit for bit
#   bench_<p>     tokens/s, MFU (ours and llm.c's convention), peak memory and per-phase times of
#                 d12, llama300m (B=4, T=4096) and llama600m (B=4, T=2048): 5 timed steps after 2 warm-up steps;
#                 ms/step beside the baseline's (dev/gpu_baseline.txt: "baseline B ms/step → ratio R×",
#                 R = this run's / the baseline's; "no baseline" where it has no such row)
#   bench_attention  dev_attention --bench-only (causal TFLOP/s of the flash and cublas kernels at
#                 llama300m's shape and at HS=128, T=4096, next to a measured GEMM ceiling and to
#                 dev/flash_model.py's modelled figures; each TFLOP/s beside the baseline's), then
#                 llama300m (B=4, T=4096) again with --attention cublas (the unfused path): ms/step
#                 and peak memory next to bench_llama300m's (flash), and the speed-up; where
#                 dev_attention timed the wgmma kernels (flash_sm90 lines), each preset of the
#                 bench_<p> rows whose shape they ran at with --attention flash_sm90: its ms/step
#                 and flash's / its; where they broke the run off, the figures come from
#                 --no-sm90 and the row fails, saying so
#   torch_<p>     the same model and batch in PyTorch bf16 on the same GPU, and the ratio (also the
#                 ratio of bench_attention's --attention flash_sm90 step where it ran); ms/step
#                 beside the baseline's. Right after the step's rows, so that the budget cannot
#                 leave the comparison with PyTorch out
#   ablate_attention  dev_attention --ablate: the wgmma kernels with one part left out each (the
#                 exponentials, P V, the dQ product, the writer's dQ sums), after checks that each
#                 leaves out what it says; each variant's time over the kernel's as built at
#                 llama300m's and llama600m's shapes, beside dev/flash_model.py --ablation's
#                 expectation (emulated: the checks only)
#   bench_buckets d12 (B=4, T=1024) on a one-rank NCCL communicator: -c fp8 with --bucket-mb 0
#                 (after the backward) and 25 (a stream of its own during the backward), the ms per
#                 step of each and their ratio (the cost of the bucket plumbing itself at 1 GPU);
#                 and -c fp32 with --bucket-mb 0, for the next row
#   bench_geofp8  what a GeoFP8 refresh costs: d12 (B=4, T=1024) and llama300m (B=4, T=4096), every
#                 fc2 unit whitened, a refresh every 5 steps: the refresh steps' and the other steps'
#                 ms, their ratio, and geofp8's ordinary step against -c fp8's and fp32's
#   bench_virtual_ranks  d12 (B=4, T=1024 per logical rank) with --virtual-ranks 64 on the one GPU,
#                 -c fp8 and -c geofp8 (every fc2 unit): ms/step, per logical rank against
#                 bench_d12's one-rank step, the communication's ms and the peak memory
#   scaling_model scripts/scaling_model.py on the two --bucket-mb 0 runs: the predicted step time
#                 and gain of fp8 over fp32 at 64 GPUs, without and with overlap
#   memcheck, racecheck   compute-sanitizer on a short tiny run ("refused" / "absent" when so), last,
#                 so that the speed rows come first. racecheck reads the report hazard by hazard: one
#                 inside cuBLAS's own kernels (nvjet_*, ...) is counted and ignored, one that names
#                 any other function (the project's) fails the row
#   memcheck_attention, racecheck_attention   the same on dev_attention --small: both attention
#                 paths, the flash kernels at head sizes 16-128 and T 1-4096 (several tiles per block,
#                 T off the tile), forward and backward; racecheck with --flash-only (the flash
#                 kernels alone: no cuBLAS kernel runs)
# The reference curves are made beforehand by the CPU engine (make gpu-refs, i.e. this script's
# --refs): the GPU machine runs no CPU reference and needs no BLAS.
#
# Usage:
#   bash build/gpu-bundle/gpu_check.sh       from the bundle (make gpu-bundle): binaries in bin/,
#                                             curves in refs/, data and fixtures beside them
#   bash dev/gpu_check.sh                    from a repo tree: build/gpu (make gpu), build/gpu/refs
#   EMULATE=1 bash dev/gpu_check.sh          the same logic through dev/emu's CPU builds, small shapes
#   bash dev/gpu_check.sh --refs DIR         make the reference curves with ./train_llama_cpu
#   bash dev/gpu_check.sh --list-files       every file a run needs: "BUNDLE_PATH SOURCE_PATH" lines
#   bash dev/gpu_check.sh --ratios FILE      the speed figures of a results file (an earlier run's)
#                                             against the baseline, one line each
#   eval "$(bash build/gpu-bundle/gpu_check.sh --env)"   the library search of the libraries row, as
#                                             an export of LD_LIBRARY_PATH: then bin/train_llama and
#                                             the other binaries start by hand (they carry no RPATH:
#                                             NCCL's folder, often a Python wheel's, is the machine's)
# Environment (each optional):
#   OUT                 a folder: the results file is copied there after every row, the logs tarred
#                       there at the end (gpu_check_results.txt, gpu_check_logs.tar.gz)
#   GPU_CHECK_ONLY      extended regex over the check keys above (e.g. '^(tiny|mode_.*)$')
#   GPU_CHECK_BUDGET    seconds for the whole run (420); a check that cannot start in time is SKIP
#   GPU_CHECK_TIMEOUT   an upper bound in seconds on every command's timeout
#   GPU_CHECK_REBUILD   0: never rebuild, report binaries that do not load (default 1)
#   GPU_CHECK_BIN, GPU_CHECK_REFS, GPU_CHECK_LOGS   other binaries / curves / log folder
#   GPU_CHECK_EMU       the dev/emu build folder for EMULATE=1 (build/emu)
#   GPU_CHECK_BASELINE  the results file the speed rows compare with (dev/gpu_baseline.txt: the H200
#                       run of 2026-12-04; its first line names the machine and the commit)
#   GPU_CHECK_SANITIZER the compute-sanitizer to run (else found on the PATH or under CUDA_HOME); with
#                       EMULATE=1 the sanitizer rows run only with it, on a stand-in that prints a
#                       report (how test_gpu_check.sh checks their reading of racecheck's reports)
# Exit status: 0 every check passed or was skipped with a reason, 1 a check failed, 2 bad usage,
# 77 no CUDA device (nothing was checked).
set -u
export LC_ALL=C
SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
SELF_DIR=$(dirname "$SELF")

die() { echo "gpu_check: $*" >&2; exit 2; }

# ---------------------------------------------------------------------------------------------
# inputs

ACTION=check
REFS_TARGET=""
while [ $# -gt 0 ]; do
    case $1 in
        --refs) [ $# -ge 2 ] || die "--refs: expected a folder after the flag (hint: --refs build/gpu/refs)"
                ACTION=refs; REFS_TARGET=$2; shift 2 ;;
        --list-files) ACTION=list; shift ;;
        --env) ACTION=env; shift ;;
        --ratios) [ $# -ge 2 ] || die "--ratios: expected a results file after the flag (hint: --ratios out/gpu_check_results.txt)"
                  [ -f "$2" ] || die "--ratios: '$2' is not a file (expected a results file of this script)"
                  ACTION=ratios; RATIOS_OF=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -u/p' "$SELF" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (expected --refs DIR, --list-files, --env, --ratios FILE or --help)" ;;
    esac
done
EMULATE=${EMULATE:-0}
case $EMULATE in 0|1) ;; *) die "EMULATE: expected 0 or 1, found '$EMULATE'" ;; esac
GPU_CHECK_REBUILD=${GPU_CHECK_REBUILD:-1}
case $GPU_CHECK_REBUILD in 0|1) ;; *) die "GPU_CHECK_REBUILD: expected 0 or 1, found '$GPU_CHECK_REBUILD'" ;; esac
BUDGET=${GPU_CHECK_BUDGET:-420}
[[ $BUDGET =~ ^[1-9][0-9]*$ ]] || die "GPU_CHECK_BUDGET: expected a positive number of seconds, found '$BUDGET'"
CAP=${GPU_CHECK_TIMEOUT:-}
[ -z "$CAP" ] || [[ $CAP =~ ^[1-9][0-9]*$ ]] || die "GPU_CHECK_TIMEOUT: expected a positive number of seconds, found '$CAP'"
ONLY=${GPU_CHECK_ONLY:-}
if [ -n "$ONLY" ]; then
    echo x | grep -Eq -- "$ONLY" 2>/dev/null; [ $? -ne 2 ] || die "GPU_CHECK_ONLY: '$ONLY' is not an extended regular expression"
fi
OUT_DIR=${OUT:-}
if [ -n "$OUT_DIR" ] && [ "$ACTION" = check ]; then
    [ -d "$OUT_DIR" ] && [ -w "$OUT_DIR" ] || die "OUT: expected a writable folder, found '$OUT_DIR' (hint: unset OUT)"
fi

# ---------------------------------------------------------------------------------------------
# where things are: a bundle (BUNDLE marker beside this script) or a repo tree (dev/gpu_check.sh)

REPO=""
if [ -f "$SELF_DIR/BUNDLE" ]; then
    LAYOUT=bundle
    ROOT=$SELF_DIR
    BIN_DEFAULT=$ROOT/bin
    REFS_DEFAULT=$ROOT/refs
    # carried inside a repo checkout (build/gpu-bundle)? then a rebuild is possible there
    up=$(cd "$ROOT/../.." 2>/dev/null && pwd)
    if [ -n "$up" ] && [ -f "$up/train_llama.cu" ] && [ -f "$up/Makefile" ]; then REPO=$up; fi
else
    LAYOUT=repo
    ROOT=$(cd "$SELF_DIR/.." && pwd)
    REPO=$ROOT
    BIN_DEFAULT=$ROOT/build/gpu
    REFS_DEFAULT=$ROOT/build/gpu/refs
fi
if [ "$EMULATE" = 1 ]; then
    [ -n "$REPO" ] || die "EMULATE=1: needs a repo tree (dev/emu), not the bundle alone"
    EMU=${GPU_CHECK_EMU:-$REPO/build/emu}
    BIN_DEFAULT=$EMU
    REFS_DEFAULT=$REPO/build/gpu/refs-emulated
    RUN_DIR=$EMU/src  # the emulated programs run from their rewritten sources (data/, test/fixtures linked)
else
    RUN_DIR=$ROOT
fi
BIN=${GPU_CHECK_BIN:-$BIN_DEFAULT}
REFS=${GPU_CHECK_REFS:-$REFS_DEFAULT}

# ---------------------------------------------------------------------------------------------
# the speed baseline: an earlier run's results file (dev/gpu_baseline.txt, which names its machine
# and commit on its first line); each speed row prints its figure's ratio to the baseline's,
# this run's / the baseline's (ms/step: above 1 slower; TFLOP/s: above 1 faster)

BASELINE=${GPU_CHECK_BASELINE:-$ROOT/dev/gpu_baseline.txt}
# the figures of a speed row, "WHAT|UNIT" each (WHAT empty: the row's first figure in UNIT)
speed_figures() {
    case $1 in
        bench_attention)
            local shape path dir
            for shape in llama300m hs128_t4096; do for path in flash cublas; do for dir in forward backward; do
                echo "$shape $path $dir|TFLOP/s"
            done; done; done ;;
        bench_virtual_ranks) echo "-c fp8|ms/step"; echo "-c geofp8|ms/step" ;;
        bench_*|torch_*) echo "|ms/step" ;;
    esac
}
# figure_in TEXT WHAT UNIT: the number before UNIT, right after WHAT when WHAT is given
figure_in() {
    awk -v d="$1" -v what="$2" -v unit="$3" 'BEGIN {
        re = (what == "" ? "" : what " ") "[0-9]+(\\.[0-9]+)? " unit
        if (match(d, re)) { n = split(substr(d, RSTART, RLENGTH), w, " "); print w[n - 1] } }'
}
# the detail of row KEY in a results file (PASS rows only)
row_detail() {
    awk -F' [|] ' -v k="$1" '{ key = $1; sub(/^[|] */, "", key); sub(/ +$/, "", key) }
        key == k && $2 ~ /PASS/ { d = $4; for (i = 5; i <= NF; i++) d = d " | " $i; print d; exit }' "$2" 2>/dev/null
}
# the card a results file's gpu row names ("N GPU(s); NAME, driver, ..."), else its first line's
# ("... on one NAME (sm_90, ..."); empty if neither
card_of() {  # FILE
    local c
    c=$(row_detail gpu "$1" | sed -n 's/^[0-9]* GPU(s); \([^,]*\),.*/\1/p')
    [ -n "$c" ] || c=$(head -1 "$1" 2>/dev/null | sed -n 's/.* on one \(NVIDIA [^(,]*[^ (,]\).*/\1/p')
    echo "$c"
}
BASE_CARD=$(card_of "$BASELINE")
RUN_CARD=""  # this run's card (the gpu row's), or the --ratios file's
# baseline_note KEY WHAT UNIT NOW: "baseline B UNIT → ratio R×", or "no baseline" when the baseline
# has no such row or figure; where the two runs' cards differ (an H100 against the H200 baseline:
# the same SMs, less memory bandwidth), the ratio says so
baseline_note() {
    local b other=""
    b=$(figure_in "$(row_detail "$1" "$BASELINE")" "$2" "$3")
    if [ -z "$b" ] || [ -z "$4" ]; then echo "no baseline"; return; fi
    [ -n "$RUN_CARD" ] && [ -n "$BASE_CARD" ] && [ "$RUN_CARD" != "$BASE_CARD" ] && other=" (the baseline's card: $BASE_CARD; this run's: $RUN_CARD)"
    awk -v b="$b" -v now="$4" -v unit="$3" -v other="$other" 'BEGIN { if (b > 0) printf "baseline %s %s → ratio %.2f×%s\n", b, unit, now / b, other; else print "no baseline" }'
}

# ---------------------------------------------------------------------------------------------
# what runs: the same flags make the CPU reference curves (--refs) and the GPU runs

# the kernel tools (dev/cuda/<op>.cu -> dev_<op>), the GPU tests (test/test_*.cu; the model test
# first) and the fixtures they open: from the sources in a repo tree, from bin/ and test/fixtures/
# in the bundle (whose MANIFEST says nothing was dropped on the way; it carries some dev/ files too)
if [ "$LAYOUT" = repo ]; then
    mapfile -t DEV_OPS < <(cd "$ROOT/dev/cuda" && ls -- *.cu 2>/dev/null | sed 's/\.cu$//')
    mapfile -t GPU_TESTS < <(cd "$ROOT/test" && ls -- test_*.cu 2>/dev/null | sed 's/\.cu$//' | sort -t_ -k2,2 | awk '$0 == "test_llama_gpu" { print; next } { rest[++n] = $0 } END { for (i = 1; i <= n; i++) print rest[i] }')
    mapfile -t FIXTURES < <(cd "$ROOT" && grep -oh 'test/fixtures/[A-Za-z0-9_.]*' test/*.cu dev/cuda/*.cu 2>/dev/null | sort -u)
else
    mapfile -t DEV_OPS < <(cd "$ROOT/bin" 2>/dev/null && ls -- dev_* 2>/dev/null | sed 's/^dev_//')
    mapfile -t GPU_TESTS < <(cd "$ROOT/bin" 2>/dev/null && ls -- test_* 2>/dev/null | awk '$0 == "test_llama_gpu" { print; next } { rest[++n] = $0 } END { for (i = 1; i <= n; i++) print rest[i] }')
    mapfile -t FIXTURES < <(cd "$ROOT" && ls -- test/fixtures/* 2>/dev/null)
fi
MODES=("bf16" "fp8" "fp8block" "geofp8" "kfac" "fp8 --fp8-reduce twophase")
GEO_LAYERS=layers.1.fc1,layers.2.fc2,layers.3.fc2
if [ "$EMULATE" = 0 ]; then
    KIND=gpu
    TINY_FLAGS=(-e tiny -b 4 -t 256 -x 50 -v 0 -n -1 -l 2e-3 -u 5 --seed 1337)
    TINY_STEPS=50
    MODE_FLAGS=(-e tiny -b 4 -t 128 -x 30 -v 0 -n -1 -l 2e-3 -u 5 --seed 1337 --geofp8-profile-steps 5 --geofp8-refresh 10)
    MODE_STEPS=30
    BITWISE_FLAGS=(-e tiny -b 4 -t 128 -x 10 -n 10 -v 0 -l 2e-3 -u 2 --seed 1337 -c geofp8 --geofp8-layers "$GEO_LAYERS" --geofp8-refresh 3)
    BITWISE_STEP=10
    SKIP_FLAGS=(-e tiny -b 4 -t 128 -x 4 -n 4 -v 0 -l 2e-3 -u 2 --seed 1337 -c geofp8 --geofp8-layers "$GEO_LAYERS" --geofp8-refresh 2)
else
    # the emulation runs kernels thread by thread: a few steps of a few tokens
    KIND=emulated
    TINY_FLAGS=(-e tiny -b 1 -t 16 -x 4 -v 0 -n -1 -l 2e-3 -u 1 --seed 1337)
    TINY_STEPS=4
    MODE_FLAGS=(-e tiny -b 1 -t 16 -x 3 -v 0 -n -1 -l 2e-3 -u 1 --seed 1337 --geofp8-profile-steps 1 --geofp8-refresh 2)
    MODE_STEPS=3
    BITWISE_FLAGS=(-e tiny -b 1 -t 16 -x 2 -n 2 -v 0 -l 2e-3 -u 1 --seed 1337 -c geofp8 --geofp8-layers "$GEO_LAYERS" --geofp8-refresh 1)
    BITWISE_STEP=2
    SKIP_FLAGS=(-e tiny -b 1 -t 16 -x 4 -n 4 -v 0 -l 2e-3 -u 1 --seed 1337 -c geofp8 --geofp8-layers "$GEO_LAYERS" --geofp8-refresh 2)
fi
# bf16 compute against the fp32 engine, per-step train loss |gpu - cpu| / cpu: a CPU emulation of
# this engine's bf16 rounding points on exactly the 50-step run measured at most 8.5e-5 (mean
# 3.3e-5); another accumulation order adds rounding noise of that size, a defect far more.
LOSS_TOL_MAX=5e-3
LOSS_TOL_MEAN=1e-3
# the modes: the emulated engine at exactly these flags against these curves measured at most
# 1.4e-4 (bf16), 1.7e-4 (fp8block), 2.4e-4 (kfac), 2.6e-4 (geofp8) over the 30 steps; the FP8
# modes round bf16 and fp32 gradients to different E4M3 codes, which varies up to 5x with the BLAS
# kernel (7e-4..1.5e-3 over 8 steps, test_cuda_emulated.sh): 10x the worst of those.
MODE_TOL_BF16=5e-3
MODE_TOL_FP8=2e-2
# throughput: preset, B, T; 2 warm-up steps, then 5 timed
BENCH=("d12 4 1024" "llama300m 4 4096" "llama600m 4 2048")
BENCH_WARMUP=2
BENCH_TIMED=5

mode_tag() { local t=${1// --fp8-reduce /_}; echo "${t// /_}"; }
# one line per reference run: "NAME FLAGS..."
ref_runs() {
    echo "tiny ${TINY_FLAGS[*]}"
    local m
    for m in "${MODES[@]}"; do echo "mode_$(mode_tag "$m") ${MODE_FLAGS[*]} -c $m"; done
}
ref_files() {
    local name
    echo flags.txt
    ref_runs | while read -r name _; do echo "$name/main.log"; echo "$name/metrics.jsonl"; done
}

# ---------------------------------------------------------------------------------------------
# --list-files: every file a run needs, as "BUNDLE_PATH SOURCE_PATH" (make gpu-bundle copies these)

if [ "$ACTION" = list ]; then
    [ "$EMULATE" = 0 ] || die "--list-files: lists the GPU bundle; unset EMULATE"
    src_root=${REPO:-$ROOT}
    if [ "$LAYOUT" = bundle ]; then self_src=$SELF; else self_src=$src_root/dev/gpu_check.sh; fi
    echo "gpu_check.sh $self_src"
    # the small kernels' old-against-new timings (not a row here: bash bench_small_kernels.sh)
    if [ "$LAYOUT" = bundle ]; then echo "bench_small_kernels.sh $ROOT/bench_small_kernels.sh"
    else echo "bench_small_kernels.sh $src_root/dev/bench_small_kernels.sh"; fi
    for b in train_llama "${GPU_TESTS[@]}" "${DEV_OPS[@]/#/dev_}"; do echo "bin/$b $BIN/$b"; done
    ref_files | while read -r f; do echo "refs/$f $REFS/$f"; done
    base=$ROOT; [ "$LAYOUT" = repo ] && base=$src_root
    # the runs' default data (llmc/train_config.h) and the tokenizer
    for f in data/gpt2_tokenizer.bin "$base"/data/kjv/kjv_train_*.bin "$base"/data/kjv/kjv_val_*.bin "${FIXTURES[@]}" dev/bench_pytorch.py \
             scripts/scaling_model.py scripts/cli_util.py llmc/llama.h dev/flash_model.py llmc/flash_common.cuh llmc/flash_forward_sm90.cuh \
             llmc/flash_backward_sm90.cuh dev/cuda/ptxas_report.txt \
             dev/gpu_baseline.txt; do
        f=${f#"$base"/}
        echo "$f $base/$f"
    done
    exit 0
fi

# ---------------------------------------------------------------------------------------------
# --ratios FILE: each speed figure of an earlier run's results file against the baseline, one line
# each: "KEY[ WHAT]: FIGURE UNIT; baseline B UNIT → ratio R×" (or "; no baseline")

if [ "$ACTION" = ratios ]; then
    [ -f "$BASELINE" ] || die "--ratios: no baseline at $BASELINE (hint: GPU_CHECK_BASELINE=FILE)"
    echo "baseline: $BASELINE: $(head -1 "$BASELINE" | sed 's/^# *//')"
    RUN_CARD=$(card_of "$RATIOS_OF")
    for key in $(awk -F' [|] ' '/^[|] / { k = $1; sub(/^[|] */, "", k); sub(/ +$/, "", k); print k }' "$RATIOS_OF"); do
        detail=$(row_detail "$key" "$RATIOS_OF")
        [ -n "$detail" ] || continue
        speed_figures "$key" | while IFS='|' read -r what unit; do
            now=$(figure_in "$detail" "$what" "$unit")
            [ -n "$now" ] && echo "$key${what:+ $what}: $now $unit; $(baseline_note "$key" "$what" "$unit" "$now")"
        done
    done
    exit 0
fi

# ---------------------------------------------------------------------------------------------
# --refs DIR: the CPU engine's curves for every compared run (never on the GPU machine)

if [ "$ACTION" = refs ]; then
    [ -n "$REPO" ] || die "--refs: needs a repo tree with train_llama_cpu, not the bundle alone"
    CPU=$REPO/train_llama_cpu
    [ -x "$CPU" ] || die "--refs: $CPU not found (hint: make train_llama_cpu)"
    mkdir -p "$(dirname "$REFS_TARGET")" || die "--refs: cannot create the parent of '$REFS_TARGET'"
    dest=$(cd "$(dirname "$REFS_TARGET")" && pwd)/$(basename "$REFS_TARGET")
    # curves with this script's flags, all there, newer than the engine and the data: kept
    if [ -f "$dest/flags.txt" ] && [ "$(grep -v '^#' "$dest/flags.txt")" = "$(echo "kind $KIND"; ref_runs | sed 's/^/run /')" ] &&
       [ -z "$(ref_files | while read -r f; do [ -s "$dest/$f" ] || echo "$f"; done)" ] && [ "$dest/flags.txt" -nt "$CPU" ] &&
       [ -z "$(find "$REPO"/data/kjv -name '*.bin' -newer "$dest/flags.txt" 2>/dev/null)" ]; then
        touch "$dest/flags.txt"
        echo "refs: $dest is up to date (same flags, newer than train_llama_cpu and the data)"
        exit 0
    fi
    tmp=$dest.tmp.$$
    rm -rf "$tmp"; mkdir -p "$tmp"
    trap 'rm -rf "$tmp"' EXIT
    threads=${OMP_NUM_THREADS:-$(nproc)}
    while read -r name flags; do
        t0=$(date +%s)
        # shellcheck disable=SC2086
        if ! (cd "$REPO" && OMP_NUM_THREADS=$threads timeout -k 10 3600 "$CPU" $flags -o "$tmp/$name" >"$tmp/$name.console" 2>&1); then
            echo "gpu_check --refs: train_llama_cpu $flags failed:" >&2; tail -3 "$tmp/$name.console" >&2; exit 1
        fi
        echo "refs: $name $(( $(date +%s) - t0 )) s, final loss $(tail -1 "$tmp/$name/main.log" | cut -d: -f3)"
        rm -f "$tmp/$name.console"
    done < <(ref_runs)
    {
        echo "# reference curves of dev/gpu_check.sh: train_llama_cpu (fp32), $(date -u +%Y-%m-%dT%H:%MZ)," \
             "commit $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)"
        echo "kind $KIND"
        ref_runs | sed 's/^/run /'
    } >"$tmp/flags.txt"
    rm -rf "$dest"; mv "$tmp" "$dest"
    trap - EXIT
    echo "refs: $dest ($KIND)"
    exit 0
fi

# ---------------------------------------------------------------------------------------------
# the results file and its rows

LOGS=${GPU_CHECK_LOGS:-}
if [ "$ACTION" = env ]; then LOGS=$(mktemp -d); trap 'rm -rf "$LOGS"' EXIT; fi  # --env writes no results
if [ -z "$LOGS" ]; then
    if [ "$EMULATE" = 1 ]; then LOGS=$REPO/out/gpu_check_emulated
    elif [ "$LAYOUT" = bundle ]; then LOGS=$ROOT/out
    else LOGS=$ROOT/out/gpu_check; fi
fi
mkdir -p "$LOGS" || die "cannot create the log folder '$LOGS'"
LOGS=$(cd "$LOGS" && pwd)
RESULTS=$LOGS/results.txt
T_START=$(date +%s.%N)
NPASS=0; NFAIL=0; NSKIP=0
declare -a ROWS=()

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
budget_left() { awk -v a="$T_START" -v b="$(now)" -v n="$BUDGET" 'BEGIN { printf "%d", n - (b - a) }'; }
oneline() { tr '\n\t' '  ' | sed 's/  */ /g; s/ $//' | cut -c1-"${1:-160}"; }

# row KEY RESULT SECONDS DETAIL — printed and appended to the results file at once
row() {
    [ "$ACTION" = env ] && return 0
    local line
    line=$(printf '| %-30s | %-4s | %6s s | %s' "$1" "$2" "$3" "$(printf '%s' "$4" | oneline 2000)")
    ROWS+=("$line")
    echo "$line"
    echo "$line" >>"$RESULTS"
    case $2 in PASS) NPASS=$((NPASS + 1)) ;; FAIL) NFAIL=$((NFAIL + 1)) ;; *) NSKIP=$((NSKIP + 1)) ;; esac
    if [ -n "$OUT_DIR" ]; then cp "$RESULTS" "$OUT_DIR/gpu_check_results.txt" 2>/dev/null; fi
    return 0
}
wanted() { [ -z "$ONLY" ] || echo "$1" | grep -Eq -- "$ONLY"; }

# run LIMIT LOG CMD... — from RUN_DIR, under timeout (capped by GPU_CHECK_TIMEOUT and the budget);
# sets RC (124: timed out), DT (seconds) and LIMIT
run() {
    local limit=$1 log=$2 t0 left
    shift 2
    left=$(budget_left)
    [ "$limit" -gt "$left" ] && limit=$left
    [ -n "$CAP" ] && [ "$limit" -gt "$CAP" ] && limit=$CAP
    [ "$limit" -lt 1 ] && limit=1
    LIMIT=$limit
    t0=$(now)
    (cd "$RUN_DIR" && exec timeout -k 5 "$limit" "$@") >"$log" 2>&1 </dev/null
    RC=$?
    [ $RC -eq 137 ] && RC=124
    DT=$(since "$t0")
}
# can a check that needs about NEED seconds still start?
in_budget() { [ "$(budget_left)" -ge "$1" ]; }
out_of_budget() { row "$1" SKIP 0 "time budget spent (GPU_CHECK_BUDGET=$BUDGET s): not started"; }
# a failure's detail: exit status, then the first error-looking line of the log
why() {
    if [ "$RC" = 124 ]; then echo "timed out after $LIMIT s"; return; fi
    echo "exit $RC: $(grep -m1 -iE 'error|fail|abort|fault|not found|cannot' "$1" | oneline 140)"
}

{
    echo "# dev/gpu_check.sh $(date -u +%Y-%m-%dT%H:%MZ) on $(hostname 2>/dev/null || echo ?): layout $LAYOUT, kind $KIND"
    echo "# binaries $BIN"
    echo "# refs $REFS"
    echo "# logs $LOGS"
    if [ -f "$BASELINE" ]; then echo "# baseline $BASELINE: $(head -1 "$BASELINE" | sed 's/^# *//' | cut -c1-200)"
    else echo "# baseline: none ($BASELINE absent): the speed rows print no ratio"; fi
    printf '| %-30s | %-4s | %8s | %s\n' check res time detail
} >"$RESULTS"
[ "$ACTION" = env ] || echo "gpu_check: $KIND run, $LAYOUT layout; rows go to $RESULTS${OUT_DIR:+ and $OUT_DIR/gpu_check_results.txt}"

# ---------------------------------------------------------------------------------------------
# preflight: the GPU, the driver, nvcc, the libraries

t0=$(now)
HAVE_GPU=0
if [ "$EMULATE" = 1 ]; then
    HAVE_GPU=1
    row gpu SKIP "$(since "$t0")" "emulated: dev/emu runs every kernel on the CPU ($BIN)"
elif command -v nvidia-smi >/dev/null 2>&1; then
    q=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | head -1)
    cuda=$(timeout 30 nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -1)
    ngpu=$(timeout 30 nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    if [ "$ngpu" -gt 0 ]; then
        HAVE_GPU=1
        RUN_CARD=${q%%,*}
        row gpu PASS "$(since "$t0")" "$ngpu GPU(s); $q (name, driver, memory, compute capability); driver's ${cuda:-CUDA Version ?}"
    else
        row gpu SKIP "$(since "$t0")" "nvidia-smi lists no GPU: $q"
    fi
else
    HAVE_GPU=probe  # decided after the binaries row, by train_llama itself
fi

t0=$(now)
NVCC=$(command -v nvcc 2>/dev/null || true)
for c in ${CUDA_HOME:+$CUDA_HOME/bin/nvcc} /usr/local/cuda/bin/nvcc; do
    [ -z "$NVCC" ] && [ -x "$c" ] && NVCC=$c
done
if [ -n "$NVCC" ]; then
    CUDA_HOME=${CUDA_HOME:-$(cd "$(dirname "$NVCC")/.." && pwd)}
    PATH="$(dirname "$NVCC"):$PATH"; export PATH
    row nvcc PASS "$(since "$t0")" "$NVCC: $(timeout 30 "$NVCC" --version 2>&1 | grep -m1 release | sed 's/.*release/release/')"
else
    CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
    row nvcc SKIP "$(since "$t0")" "no nvcc on the PATH or under /usr/local/cuda: the carried binaries must load as they are"
fi

# Library folders, in the order they are tried: the toolkit's, the driver's, the nvidia-* Python
# wheels' lib folders (nvidia/nccl/lib, nvidia/cublas/lib, nvidia/cu13/lib, ...); then ldconfig.
t0=$(now)
LIB_DIRS=()
LIB_ORIGIN=()
add_dir() { [ -d "$1" ] || return 0; local d; for d in "${LIB_DIRS[@]}"; do [ "$d" = "$1" ] && return 0; done; LIB_DIRS+=("$1"); LIB_ORIGIN+=("$2"); }
for d in "$CUDA_HOME/lib64" "$CUDA_HOME/lib" "$CUDA_HOME/targets/x86_64-linux/lib" /usr/local/cuda/lib64; do add_dir "$d" toolkit; done
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do add_dir "$d" driver; done
WHEEL_ROOTS=""
if command -v python3 >/dev/null 2>&1; then
    WHEEL_ROOTS=$(timeout 60 python3 -c 'import nvidia; print("\n".join(nvidia.__path__))' 2>/dev/null)
fi
for w in $WHEEL_ROOTS; do
    while read -r d; do add_dir "$d" "wheel ${d#"${w%/nvidia}"/}"; done < <(find "$w" -mindepth 2 -maxdepth 3 -type d -name lib 2>/dev/null | sort)
done
LDCONFIG=$(timeout 30 ldconfig -p 2>/dev/null || true)
# find_lib SONAME: prints "DIR ORIGIN" of the first folder holding it
find_lib() {
    local i p
    for i in "${!LIB_DIRS[@]}"; do
        if [ -e "${LIB_DIRS[$i]}/$1" ]; then echo "${LIB_DIRS[$i]} ${LIB_ORIGIN[$i]}"; return 0; fi
    done
    p=$(echo "$LDCONFIG" | awk -v l="$1" '$1 == l && /x86-64/ { print $NF; exit }')
    if [ -n "$p" ]; then echo "$(dirname "$p") ldconfig"; return 0; fi
    return 1
}
USED_DIRS=""
LIB_REPORT=""
LIB_MISSING=""
locate() {  # SONAME: note where it is; add its folder to LD_LIBRARY_PATH unless ldconfig finds it anyway
    local hit dir origin
    case " $LIB_REPORT " in *" $1:"*) return 0 ;; esac
    if hit=$(find_lib "$1"); then
        dir=${hit%% *}; origin=${hit#* }
        LIB_REPORT="$LIB_REPORT $1: $dir ($origin);"
        if [ "$origin" != ldconfig ]; then
            case ":$USED_DIRS:" in *":$dir:"*) ;; *) USED_DIRS=${USED_DIRS:+$USED_DIRS:}$dir ;; esac
        fi
    else
        LIB_MISSING="$LIB_MISSING $1"
        LIB_REPORT="$LIB_REPORT $1: not found;"
    fi
}
# what the binaries ask for (NEEDED, by readelf when present), and what the CUDA libraries need
NEEDED=""
BINARIES=(train_llama "${GPU_TESTS[@]}" "${DEV_OPS[@]/#/dev_}")
if command -v readelf >/dev/null 2>&1; then
    for b in "${BINARIES[@]}"; do
        [ -f "$BIN/$b" ] && NEEDED="$NEEDED $(timeout 30 readelf -d "$BIN/$b" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')"
    done
fi
# the CUDA-side ones; without readelf (or for the emulation, which links none) the GPU build's
CUDA_NEEDED=$(echo "$NEEDED" | tr ' ' '\n' | grep -E '^lib(cu|nccl|nv)' | sort -u)
[ -n "$CUDA_NEEDED" ] || CUDA_NEEDED="libcublas.so.13 libcublasLt.so.13 libcusolver.so.12 libnccl.so.2"
for l in $CUDA_NEEDED; do locate "$l"; done
[ "$EMULATE" = 1 ] || locate libcuda.so.1
ORIG_LDP=${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH="$USED_DIRS${ORIG_LDP:+:$ORIG_LDP}"
# the libraries those load in turn (cuSOLVER: cuSPARSE, nvJitLink): whatever ldd cannot resolve yet
ldd_missing() { timeout 30 ldd "$1" 2>/dev/null | awk '/=> not found/ { print $1 }'; }
if command -v ldd >/dev/null 2>&1; then
    for _ in 1 2 3; do
        more=""
        for b in "${BINARIES[@]}"; do [ -f "$BIN/$b" ] && more="$more $(ldd_missing "$BIN/$b")"; done
        more=$(echo "$more" | tr ' ' '\n' | sed '/^$/d' | sort -u)
        [ -n "$more" ] || break
        before=$USED_DIRS
        for l in $more; do locate "$l"; done
        export LD_LIBRARY_PATH="$USED_DIRS${ORIG_LDP:+:$ORIG_LDP}"
        [ "$before" = "$USED_DIRS" ] && break
    done
fi
if [ "$ACTION" = env ]; then
    [ -z "$LIB_MISSING" ] || echo "gpu_check --env: not found:$LIB_MISSING" >&2
    printf 'export LD_LIBRARY_PATH=%q\n' "$LD_LIBRARY_PATH"
    exit 0
fi
dirs_desc=$(for i in "${!LIB_DIRS[@]}"; do printf '%s (%s), ' "${LIB_DIRS[$i]}" "${LIB_ORIGIN[$i]}"; done)
echo "library folders tried: ${dirs_desc%, }; then ldconfig" >"$LOGS/libraries.log"
echo "found:$LIB_REPORT" >>"$LOGS/libraries.log"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >>"$LOGS/libraries.log"
missing_nondriver=$(echo "$LIB_MISSING" | tr ' ' '\n' | grep -v '^libcuda.so' | tr '\n' ' ' | sed 's/ *$//; s/^ *//')
if [ -z "$missing_nondriver" ]; then
    row libraries PASS "$(since "$t0")" "${LIB_REPORT# } LD_LIBRARY_PATH=${USED_DIRS:-unchanged}"
else
    row libraries FAIL "$(since "$t0")" "not found: $missing_nondriver (looked in ${dirs_desc%, } and ldconfig);$LIB_REPORT"
fi

# the bundle's own files (a carry can drop a file) and the reference curves' flags
t0=$(now)
if [ "$LAYOUT" = bundle ] && [ "$EMULATE" = 0 ] && [ -z "${GPU_CHECK_BIN:-}${GPU_CHECK_REFS:-}" ]; then
    if [ ! -f "$ROOT/MANIFEST" ]; then
        row bundle FAIL "$(since "$t0")" "no MANIFEST beside the script (hint: make gpu-bundle again)"
    elif bad=$(cd "$ROOT" && timeout 120 sha256sum -c --quiet MANIFEST 2>&1); then
        row bundle PASS "$(since "$t0")" "$(wc -l <"$ROOT/MANIFEST") files match their sha256 ($(head -1 "$ROOT/BUNDLE"))"
    else
        row bundle FAIL "$(since "$t0")" "files missing or changed: $(echo "$bad" | grep -v WARNING | head -5 | oneline 200)"
    fi
fi
t0=$(now)
REFS_OK=0
if [ ! -f "$REFS/flags.txt" ]; then
    hint="make gpu-refs on a machine with the CPU engine, then carry it"
    [ "$EMULATE" = 1 ] && hint="EMULATE=1 bash dev/gpu_check.sh --refs $REFS"
    row refs FAIL "$(since "$t0")" "no $REFS/flags.txt (hint: $hint)"
else
    want=$(echo "kind $KIND"; ref_runs | sed 's/^/run /')
    have=$(grep -v '^#' "$REFS/flags.txt")
    absent=$(ref_files | while read -r f; do [ -s "$REFS/$f" ] || echo "$f"; done | oneline 120)
    if [ "$want" != "$have" ]; then
        first=$(diff <(echo "$want") <(echo "$have") | grep -m2 '^[<>]' | oneline 220)
        row refs FAIL "$(since "$t0")" "made with other flags (< expected, > in refs): $first (hint: make gpu-refs)"
    elif [ -n "$absent" ]; then
        row refs FAIL "$(since "$t0")" "missing or empty: $absent (hint: make gpu-refs)"
    else
        REFS_OK=1
        row refs PASS "$(since "$t0")" "$(head -1 "$REFS/flags.txt" | sed 's/^# reference curves of dev\/gpu_check.sh: //'); $(ref_runs | wc -l) runs, flags as this script's"
    fi
fi

# ---------------------------------------------------------------------------------------------
# binaries: try the carried ones; only if they fail to load, rebuild

check_binaries() {  # sets LOAD_BAD (names and reasons) and LOAD_DETAIL
    LOAD_BAD=""
    local b miss n=0
    for b in "${BINARIES[@]}"; do
        if [ "$EMULATE" = 1 ] && [ "$b" != train_llama ] && [ ! -e "$BIN/$b" ]; then continue; fi  # dev/emu builds a few
        n=$((n + 1))
        if [ ! -f "$BIN/$b" ]; then LOAD_BAD="$LOAD_BAD $b (missing);"; continue; fi
        # a copy that lost its mode bits (some transfers do) is still the same binary: MANIFEST says so
        [ -x "$BIN/$b" ] || chmod +x "$BIN/$b" 2>/dev/null
        if [ ! -x "$BIN/$b" ]; then LOAD_BAD="$LOAD_BAD $b (not executable);"; continue; fi
        if command -v ldd >/dev/null 2>&1; then
            miss=$(ldd_missing "$BIN/$b" | tr '\n' ' ' | sed 's/ $//')
            if [ -n "$miss" ]; then LOAD_BAD="$LOAD_BAD $b (needs $miss: not found);"; continue; fi
        fi
    done
    LOAD_DETAIL="$n binaries in $BIN"
    if [ -z "$LOAD_BAD" ] && [ -f "$BIN/train_llama" ]; then
        run 30 "$LOGS/train_llama_help.log" "$BIN/train_llama" --help
        if [ $RC -ne 0 ] || ! grep -q '^usage:' "$LOGS/train_llama_help.log"; then
            LOAD_BAD="$LOAD_BAD train_llama --help ($(why "$LOGS/train_llama_help.log"));"
        else
            LOAD_DETAIL="$LOAD_DETAIL load (ldd), train_llama --help answers"
        fi
    fi
}
t0=$(now)
check_binaries
if [ -z "$LOAD_BAD" ]; then
    row binaries PASS "$(since "$t0")" "$LOAD_DETAIL"
else
    row binaries FAIL "$(since "$t0")" "do not load:$LOAD_BAD"
    if [ "$GPU_CHECK_REBUILD" = 0 ]; then
        row rebuild SKIP 0 "GPU_CHECK_REBUILD=0"
    elif [ -z "$REPO" ]; then
        row rebuild FAIL 0 "no repo tree around the bundle to rebuild from (carry the bundle inside a checkout, at build/gpu-bundle)"
    elif [ "$EMULATE" = 0 ] && [ -z "$NVCC" ]; then
        row rebuild FAIL 0 "no nvcc here to rebuild with"
    else
        t0=$(now)
        if [ "$EMULATE" = 1 ]; then
            RUN_DIR_SAVED=$RUN_DIR; RUN_DIR=$REPO
            run 900 "$LOGS/rebuild.log" bash dev/emu/build.sh "$EMU"
            RUN_DIR=$RUN_DIR_SAVED
            what="bash dev/emu/build.sh $EMU"
        else
            RUN_DIR_SAVED=$RUN_DIR; RUN_DIR=$REPO
            run 300 "$LOGS/rebuild.log" make --no-print-directory -j"$(nproc)" gpu
            RUN_DIR=$RUN_DIR_SAVED
            BIN=$REPO/build/gpu
            what="make gpu -j$(nproc) in $REPO"
        fi
        if [ $RC -eq 0 ]; then
            check_binaries
            if [ -z "$LOAD_BAD" ]; then row rebuild PASS "$DT" "rebuilt here ($what): $LOAD_DETAIL"
            else row rebuild FAIL "$DT" "rebuilt here ($what), still do not load:$LOAD_BAD"; fi
        else
            row rebuild FAIL "$DT" "$what: $(why "$LOGS/rebuild.log")"
        fi
    fi
fi
# can_run NAME: the binary exists and loaded in the last check
can_run() { [ -x "$BIN/$1" ] && case "$LOAD_BAD" in *" $1 ("*) false ;; *) true ;; esac; }

# no nvidia-smi: ask train_llama, which checks for a device right after its flags (-t past the
# preset's T then stops it before anything else, where a device exists)
if [ "$HAVE_GPU" = probe ]; then
    HAVE_GPU=0
    t0=$(now)
    if can_run train_llama; then
        run 60 "$LOGS/gpu_probe.log" "$BIN/train_llama" -e tiny -t 1000000
        if grep -q 'no CUDA device' "$LOGS/gpu_probe.log"; then
            row gpu SKIP "$DT" "no nvidia-smi on the PATH, and train_llama finds no CUDA device"
        else
            HAVE_GPU=1
            row gpu PASS "$DT" "no nvidia-smi on the PATH; train_llama finds a CUDA device"
        fi
    else
        row gpu SKIP "$(since "$t0")" "no nvidia-smi on the PATH, and no train_llama that loads to ask"
    fi
fi

NO_DEVICE_THOUGH_SMI="the program finds no CUDA device though nvidia-smi lists one (a driver older than the binaries' CUDA runtime does this: see the gpu and nvcc rows)"

# blocked KEY BINARY: writes the row and succeeds when the check cannot start (no GPU, binary unusable)
blocked() {
    local key=$1 bin=$2
    if [ "$HAVE_GPU" = 0 ]; then row "$key" SKIP 0 "no CUDA device"; return 0; fi
    if ! can_run "$bin"; then row "$key" FAIL 0 "$bin does not load or is missing (see the binaries row)"; return 0; fi
    return 1
}

# ---------------------------------------------------------------------------------------------
# counting PASS / FAIL lines of a check program's log

count_checks() {  # LOG KEY: the row of a program that prints PASS / FAIL / SKIP lines
    local log=$1 key=$2 np nf
    np=$(grep -c '^PASS' "$log"); nf=$(grep -c '^FAIL' "$log")
    if [ $RC -eq 77 ] && [ "$HAVE_GPU" = 1 ]; then row "$key" FAIL "$DT" "$NO_DEVICE_THOUGH_SMI"
    elif [ $RC -eq 77 ]; then row "$key" SKIP "$DT" "$(grep -m1 '^SKIP' "$log" | oneline 120)"
    elif [ $RC -eq 0 ] && [ "$nf" -eq 0 ] && [ "$np" -gt 0 ]; then row "$key" PASS "$DT" "$np checks"
    elif [ $RC -eq 124 ]; then row "$key" FAIL "$DT" "timed out after $LIMIT s ($np passed, $nf failed so far)"
    elif [ "$nf" -gt 0 ]; then row "$key" FAIL "$DT" "$nf of $((np + nf)) failed (exit $RC): $(grep -m1 '^FAIL' "$log" | cut -c6- | oneline 160)"
    else row "$key" FAIL "$DT" "exit $RC, $np checks passed: $(tail -2 "$log" | oneline 160)"; fi
}

# did dev_attention's run break off (a CUDA error, a hang, a crash: not a FAIL line's exit 1) with
# the wgmma kernels in its log? Then it runs once more with --no-sm90, so that the other kernels'
# checks and times still come (the wgmma kernels have not yet run on a GPU).
sm90_broke() {  # LOG
    [ $RC -ne 0 ] && grep -q "flash_sm90" "$1" && { [ $RC -ne 1 ] || grep -q "^CUDA error" "$1"; }
}

# kernels, at the presets' real shapes (the emulation builds some of them, run --small)
SM90_BROKE=""
for op in "${DEV_OPS[@]}"; do
    key=dev_$op
    wanted "$key" || continue
    if [ "$EMULATE" = 1 ] && [ ! -e "$BIN/$key" ]; then row "$key" SKIP 0 "emulated: dev/emu does not build $key"; continue; fi
    blocked "$key" "$key" && continue
    in_budget 20 || { out_of_budget "$key"; continue; }
    args=(--validate-only); [ "$EMULATE" = 1 ] && args+=(--small)
    run 120 "$LOGS/$key.log" "$BIN/$key" "${args[@]}"
    count_checks "$LOGS/$key.log" "$key"
    if [ "$op" = attention ] && sm90_broke "$LOGS/$key.log"; then
        SM90_BROKE=1
        in_budget 20 || { out_of_budget "${key}_no_sm90"; continue; }
        run 120 "$LOGS/${key}_no_sm90.log" "$BIN/$key" "${args[@]}" --no-sm90
        count_checks "$LOGS/${key}_no_sm90.log" "${key}_no_sm90"
    fi
done

# the GPU tests
for t in "${GPU_TESTS[@]}"; do
    wanted "$t" || continue
    if [ "$EMULATE" = 1 ] && [ ! -e "$BIN/$t" ]; then row "$t" SKIP 0 "emulated: dev/emu does not build $t"; continue; fi
    blocked "$t" "$t" && continue
    in_budget 20 || { out_of_budget "$t"; continue; }
    run 240 "$LOGS/$t.log" "$BIN/$t"
    count_checks "$LOGS/$t.log" "$t"
done

# ---------------------------------------------------------------------------------------------
# loss curves against the CPU engine's

# compare_curves REF GOT STEPS TOL_MAX TOL_MEAN: "PASS|FAIL detail" from the train_loss of two
# metrics.jsonl files, step by step, plus the GPU run's mean phase times after its first step
compare_curves() {
    awk -v n="$3" -v tmax="$4" -v tmean="$5" '
    function field(line, key,   m) {
        if (!match(line, "\"" key "\": [-+0-9.eE]+")) return ""
        m = substr(line, RSTART, RLENGTH); sub(/^[^:]*: /, "", m); return m
    }
    FNR == 1 { file++ }
    /"train_loss"/ {
        s = field($0, "step"); l = field($0, "train_loss")
        if (file == 1) { ref[s] = l; nr++ } else {
            got[s] = l; ng++
            if (s > 1) for (k = 1; k <= 6; k++) { v = field($0, ph[k]); if (v != "") { t[k] += v; nt[k]++ } }
        }
    }
    /"train_loss": null/ { if (file == 2) bad = bad " " field($0, "step") }
    BEGIN { ph[1] = "t_forward_ms"; ph[2] = "t_backward_ms"; ph[3] = "t_comm_ms"; ph[4] = "t_nccl_ms"; ph[5] = "t_optimizer_ms"; ph[6] = "t_sketch_ms" }
    END {
        if (bad != "") { printf "FAIL non-finite loss at steps%s\n", bad; exit }
        if (nr != n) { printf "FAIL the reference holds %d steps, expected %d (hint: make gpu-refs)\n", nr, n; exit }
        if (ng != n) { printf "FAIL the run logged %d steps of %d\n", ng, n; exit }
        mx = -1; sum = 0
        for (s = 1; s <= n; s++) {
            if (!(s in ref) || !(s in got) || ref[s] == "" || got[s] == "") { printf "FAIL step %d missing or non-finite\n", s; exit }
            r = (got[s] - ref[s]) / ref[s]; if (r < 0) r = -r
            sum += r; if (r > mx) { mx = r; at = s }
        }
        mean = sum / n
        ok = (mx <= tmax + 0 && mean <= tmean + 0)
        printf "%s max rel %.1e (step %d), mean %.1e (bounds %g, %g); final %.5f vs cpu %.5f", ok ? "PASS" : "FAIL", mx, at, mean, tmax, tmean, got[n], ref[n]
        if (nt[1] > 0) printf " | fwd %.1f bwd %.1f comm %.1f (nccl %.1f) opt %.1f ms", t[1]/nt[1], t[2]/nt[2], t[3]/nt[3], t[4]/nt[4], t[5]/nt[5]
        if (nt[6] > 0 && t[6] > 0) printf " (sketch %.2f ms of fwd)", t[6]/nt[6]
        printf "\n"
    }' "$1" "$2"
}
final_loss() { awk -F'trl:' '/trl:/ { l = $2 } END { print l }' "$1" 2>/dev/null; }

# loss_row KEY REFNAME STEPS TOL_MAX TOL_MEAN LABEL NCCL: one run of RUN_FLAGS (NCCL=1: on a
# one-rank NCCL communicator), compared with its reference curve
loss_row() {
    local key=$1 ref=$2 steps=$3 tmax=$4 tmean=$5 label=$6 nccl=$7
    blocked "$key" train_llama && return
    in_budget 15 || { out_of_budget "$key"; return; }
    rm -rf "${LOGS:?}/$key"
    run 120 "$LOGS/$key.log" env TRAIN_LLAMA_TEST_NCCL="$nccl" "$BIN/train_llama" "${RUN_FLAGS[@]}" -o "$LOGS/$key"
    if grep -q 'no CUDA device found' "$LOGS/$key.log"; then
        if [ "$HAVE_GPU" = 1 ]; then row "$key" FAIL "$DT" "$NO_DEVICE_THOUGH_SMI"; else row "$key" SKIP "$DT" "no CUDA device"; fi
        return
    fi
    if [ $RC -ne 0 ]; then row "$key" FAIL "$DT" "$label$(why "$LOGS/$key.log")"; return; fi
    if [ "$REFS_OK" != 1 ]; then
        row "$key" SKIP "$DT" "${label}ran ($(grep -c trl: "$LOGS/$key/main.log" 2>/dev/null) steps, final loss $(final_loss "$LOGS/$key/main.log")), not compared: no usable refs (see the refs row)"
        return
    fi
    local cmp
    cmp=$(compare_curves "$REFS/$ref/metrics.jsonl" "$LOGS/$key/metrics.jsonl" "$steps" "$tmax" "$tmean")
    row "$key" "${cmp%% *}" "$DT" "$label${cmp#* }"
}

if wanted tiny; then
    RUN_FLAGS=("${TINY_FLAGS[@]}")
    loss_row tiny tiny "$TINY_STEPS" "$LOSS_TOL_MAX" "$LOSS_TOL_MEAN" "$TINY_STEPS steps vs fp32 CPU: " 0
fi
for m in "${MODES[@]}"; do
    tag=$(mode_tag "$m")
    wanted "mode_$tag" || continue
    # shellcheck disable=SC2206
    RUN_FLAGS=("${MODE_FLAGS[@]}" -c $m)
    tol=$MODE_TOL_FP8; [ "$m" = bf16 ] && tol=$MODE_TOL_BF16
    loss_row "mode_$tag" "mode_$tag" "$MODE_STEPS" "$tol" "$tol" "orchestration only (1 rank): " 1
done

# two identical runs, bit for bit: the checkpoint (weights, optimizer state) and the loss log
if wanted bitwise; then
    key=bitwise
    if ! blocked $key train_llama; then
        if in_budget 30; then
            rm -rf "$LOGS/bitwise_a" "$LOGS/bitwise_b"
            run 120 "$LOGS/bitwise_a.log" env TRAIN_LLAMA_TEST_NCCL=1 "$BIN/train_llama" "${BITWISE_FLAGS[@]}" -o "$LOGS/bitwise_a"
            rc1=$RC; dt1=$DT; why1=$(why "$LOGS/bitwise_a.log")
            run 120 "$LOGS/bitwise_b.log" env TRAIN_LLAMA_TEST_NCCL=1 "$BIN/train_llama" "${BITWISE_FLAGS[@]}" -o "$LOGS/bitwise_b"
            dt=$(awk -v a="$dt1" -v b="$DT" 'BEGIN { printf "%.1f", a + b }')
            if [ $rc1 -ne 0 ] || [ $RC -ne 0 ]; then
                row $key FAIL "$dt" "run 1: ${why1/exit 0: /ok}; run 2: $(why "$LOGS/bitwise_b.log" | sed 's/^exit 0: /ok/')"
            else
                step=$(printf '%08d' "$BITWISE_STEP")
                differ=""
                for f in model_$step.bin state_${step}_00000.bin main.log; do
                    if [ ! -f "$LOGS/bitwise_a/$f" ]; then differ="$differ $f (not written)"
                    elif ! cmp -s "$LOGS/bitwise_a/$f" "$LOGS/bitwise_b/$f"; then
                        differ="$differ $f ($(cmp "$LOGS/bitwise_a/$f" "$LOGS/bitwise_b/$f" 2>&1 | grep -o 'byte [0-9]*' | head -1))"
                    fi
                done
                if [ -z "$differ" ]; then
                    row $key PASS "$dt" "$BITWISE_STEP steps of -c geofp8 on 1 rank, twice: model, optimizer state and losses identical ($(stat -c %s "$LOGS/bitwise_a/model_$step.bin") + $(stat -c %s "$LOGS/bitwise_a/state_${step}_00000.bin") bytes)"
                else
                    row $key FAIL "$dt" "differ:$differ"
                fi
            fi
            rm -f "$LOGS"/bitwise_[ab]/*.bin  # large; the logs stay
        else out_of_budget $key; fi
    fi
fi

# a non-finite loss at a refresh step whose buckets are still in flight on their own stream: the
# step waits for them, is skipped with its refresh undone, and step 4 is bitwise that of the
# unbucketed run (which never refreshed at step 3)
if wanted skip_nan_loss; then
    key=skip_nan_loss
    if ! blocked $key train_llama; then
        if in_budget 30; then
            dt=0 bad=""
            for mb in 25 0; do
                rm -rf "$LOGS/skip_$mb"
                run 120 "$LOGS/skip_$mb.log" env TRAIN_LLAMA_TEST_NCCL=1 TRAIN_LLAMA_TEST_NAN_LOSS=3:0 "$BIN/train_llama" "${SKIP_FLAGS[@]}" \
                    --bucket-mb $mb -o "$LOGS/skip_$mb"
                dt=$(awk -v a="$dt" -v b="$DT" 'BEGIN { printf "%.1f", a + b }')
                if [ $RC -ne 0 ]; then bad="$bad --bucket-mb $mb: $(why "$LOGS/skip_$mb.log");"
                elif ! grep -q "step     3/4 | skipped" "$LOGS/skip_$mb.log"; then bad="$bad --bucket-mb $mb: step 3 not skipped;"; fi
            done
            if [ -z "$bad" ]; then
                for f in model_00000004.bin state_00000004_00000.bin; do
                    cmp -s "$LOGS/skip_25/$f" "$LOGS/skip_0/$f" || bad="$bad $f differs;"
                done
                grep -q '"step": 4,.*"comm_buckets_overlapped": [1-9]' "$LOGS/skip_25/metrics.jsonl" || bad="$bad step 4 did not go out in buckets;"
            fi
            if [ -z "$bad" ]; then row $key PASS "$dt" "step 3 skipped in both; step 4 bitwise the unbucketed run (model and optimizer state)"
            else row $key FAIL "$dt" "$bad"; fi
            rm -f "$LOGS"/skip_*/*.bin
        else out_of_budget $key; fi
    fi
fi

# ---------------------------------------------------------------------------------------------
# throughput: tokens/s, MFU (two conventions), peak memory, per-phase times

# flops per token from the shapes the engine prints ("| model | d12 C=768 L=12 ..." and "| batch |
# B=4 T=1024 ..."): ours as llama_flops_per_token (llmc/llama.h: matmul weights, lm_head and the
# causal half of attention, x3 for the backward); llm.c's 6N + 6*L*C*T with N = every parameter
# (llm.c counts the embedding because GPT-2 ties it to the classifier; here it is a lookup)
# (a long value wraps onto rows with an empty key: those belong to the row above)
flops_per_token() {  # LOG -> "OURS LLMC PARAMS PEAK_FLOPS"
    awk -F'|' '
    /^\| / { key = $2; gsub(/^ +| +$/, "", key); if (key != "") row = key; n = split($3, w, " ")
             for (i = 1; i <= n; i++) {
                 if (row == "model" && split(w[i], kv, "=") == 2) c[kv[1]] = kv[2]
                 if (row == "batch" && w[i] ~ /^T=/) { split(w[i], kv, "="); T = kv[2] }
                 if (row == "peak for MFU" && w[i] == "TFLOP/s" && i > 1) peak = w[i - 1] * 1e12
             } }
    END {
        C = c["C"]; L = c["L"]; NH = c["NH"]; NKV = c["NKV"]; FF = c["FF"]; Vp = c["Vp"]
        if (C == "" || T == "") { print "? ? ? ?"; exit }
        HS = C / NH; QKV = (NH + 2 * NKV) * HS; HSNH = HS * NH
        ours = 3 * (L * (2 * (C * QKV + HSNH * C + C * 2 * FF + FF * C) + 2 * HSNH * T) + 2 * C * Vp)
        N = 2 * Vp * C + L * (2 * C + QKV * C + C * HSNH + 2 * FF * C + FF * C) + C
        llmc = 6 * N + 6 * L * C * T
        printf "%.6g %.6g %.0f %s\n", ours, llmc, N, peak == "" ? 0 : peak
    }' "$1"
}
# the 5 timed steps' means from metrics.jsonl: "MS TOK_S MFU FWD BWD COMM OPT"
timed_means() {
    awk -v from="$((BENCH_WARMUP + 1))" -v to="$((BENCH_WARMUP + BENCH_TIMED))" '
    function field(line, key,   m) {
        if (!match(line, "\"" key "\": [-+0-9.eE]+")) return ""
        m = substr(line, RSTART, RLENGTH); sub(/^[^:]*: /, "", m); return m
    }
    /"train_loss"/ { s = field($0, "step"); if (s >= from && s <= to) {
        n++; ms += field($0, "ms"); mfu += field($0, "mfu"); f += field($0, "t_forward_ms"); b += field($0, "t_backward_ms")
        c += field($0, "t_comm_ms"); o += field($0, "t_optimizer_ms") } }
    END { if (n == 0) { print "0"; exit } printf "%d %.3f %.6g %.2f %.2f %.2f %.2f\n", n, ms / n, mfu / n, f / n, b / n, c / n, o / n }' "$1"
}
mem_sampler_start() {  # the device's used memory every 200 ms, into FILE
    MEM_PID=""
    : >"$1"  # no samples: the peak reads "n/a"
    command -v nvidia-smi >/dev/null 2>&1 || return 0
    timeout 600 nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 200 >"$1" 2>/dev/null &
    MEM_PID=$!
}
mem_sampler_stop() { [ -n "$MEM_PID" ] && kill "$MEM_PID" 2>/dev/null; [ -n "$MEM_PID" ] && wait "$MEM_PID" 2>/dev/null; MEM_PID=""; }

declare -A OURS_TOKS=() OURS_MS=() OURS_MEM=() SM90_TOKS=() SM90_MS=()
for spec in "${BENCH[@]}"; do
    read -r preset B T <<<"$spec"
    key=bench_$preset
    wanted "$key" || continue
    if [ "$EMULATE" = 1 ]; then row "$key" SKIP 0 "emulated: every timer reads 1 ms, no throughput"; continue; fi
    blocked "$key" train_llama && continue
    in_budget 30 || { out_of_budget "$key"; continue; }
    rm -rf "${LOGS:?}/$key"
    base=$(timeout 30 nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -1)
    mem_sampler_start "$LOGS/$key.mem"
    run 150 "$LOGS/$key.log" "$BIN/train_llama" -e "$preset" -b "$B" -t "$T" -x $((BENCH_WARMUP + BENCH_TIMED)) -v 0 -n -1 -o "$LOGS/$key"
    mem_sampler_stop
    if [ $RC -ne 0 ]; then row "$key" FAIL "$DT" "B=$B T=$T: $(why "$LOGS/$key.log")"; continue; fi
    read -r n ms mfu f b c o <<<"$(timed_means "$LOGS/$key/metrics.jsonl")"
    if [ "${n:-0}" -ne "$BENCH_TIMED" ]; then row "$key" FAIL "$DT" "B=$B T=$T: $n timed steps logged, expected $BENCH_TIMED"; continue; fi
    read -r fo fl np peak <<<"$(flops_per_token "$LOGS/$key.log")"
    peakmem=$(awk -v b="${base:-0}" '$1 ~ /^[0-9]+$/ && $1 > m { m = $1 } END { if (m > 0) printf "%.1f GiB (nvidia-smi, %.1f GiB in use before)", m / 1024, b / 1024; else print "n/a (no nvidia-smi samples)" }' "$LOGS/$key.mem" 2>/dev/null)
    note=$(baseline_note "$key" "" ms/step "$ms")
    summary=$(awk -v B="$B" -v T="$T" -v ms="$ms" -v mfu="$mfu" -v fo="$fo" -v fl="$fl" -v np="$np" -v peak="$peak" -v note="$note" 'BEGIN {
        toks = B * T / (ms / 1000)
        printf "%.0f tok/s, %.1f ms/step, %s; MFU ours %s", toks, ms, note, (peak > 0 ? sprintf("%.1f%%", 100 * mfu) : "n/a")
        if (peak > 0) printf " (engine: %.3g flop/token, %.0f TFLOP/s peak), llm.c convention %.1f%% (6N+6LCT = %.3g flop/token, N=%.1fM)", fo, peak / 1e12, 100 * toks * fl / peak, fl, np / 1e6
        printf "\n"
    }')
    OURS_TOKS[$preset]=$(awk -v B="$B" -v T="$T" -v ms="$ms" 'BEGIN { printf "%.0f", B * T / (ms / 1000) }')
    OURS_MS[$preset]=$ms
    OURS_MEM[$preset]=$peakmem
    row "$key" PASS "$DT" "B=$B T=$T, steps $((BENCH_WARMUP + 1))-$((BENCH_WARMUP + BENCH_TIMED)): $summary; peak $peakmem; fwd $f bwd $b comm $c opt $o ms"
done

# the llama300m step with the unfused attention: what the fused kernels (the default) gain
key=bench_attention
if wanted "$key"; then
    if [ "$EMULATE" = 1 ]; then row "$key" SKIP 0 "emulated: every timer reads 1 ms, no throughput"
    elif ! blocked "$key" train_llama; then
        if ! in_budget 70; then out_of_budget "$key"
        else
            # the kernels alone first: causal TFLOP/s of both paths at llama300m's and the HS=128, T=4096 shape
            kern="" sm90_broke_note="" klog=$LOGS/${key}_kernels.log
            if [ -x "$BIN/dev_attention" ]; then
                run 90 "$klog" "$BIN/dev_attention" --bench-only
                if sm90_broke "$klog"; then
                    sm90_broke_note="the wgmma kernels broke dev_attention --bench-only off ($(why "$klog")), its figures above from --no-sm90"
                    klog=$LOGS/${key}_kernels_no_sm90.log
                    run 90 "$klog" "$BIN/dev_attention" --bench-only --no-sm90
                fi
                kern=$(awk '$1 == "bench" && ($2 == "llama300m" || $2 == "hs128_t4096") && ($4 == "forward" || $4 == "backward") {
                           for (i = 1; i <= NF; i++) if ($i == "TFLOP/s") { printf "%s%s %s %s %s TFLOP/s", sep, $2, $3, $4, $(i - 1); sep = ", "; break } }' \
                      "$klog")
                ceil=$(awk '$2 == "cuBLASLt" { for (i = 1; i <= NF; i++) if ($i == "TFLOP/s") print $(i - 1) }' "$klog" | head -1)
                if [ $RC -eq 0 ] && [ -n "$kern" ]; then
                    # each figure's ratio to the baseline's, beside it
                    while IFS='|' read -r what unit; do
                        now=$(figure_in "$kern" "$what" "$unit")
                        [ -n "$now" ] && kern=${kern/"$what $now $unit"/"$what $now $unit ($(baseline_note "$key" "$what" "$unit" "$now"))"}
                    done < <(speed_figures "$key")
                else kern="dev_attention --bench-only failed: $(why "$klog")"; fi
                # beside each measured figure the model's for the kernels as built (dev/flash_model.py,
                # calibrated on the 2026-12-04 H200 run)
                model=$( (cd "$RUN_DIR" && timeout 30 python3 dev/flash_model.py --csv --shape llama300m,hs128_t4096 2>/dev/null) |
                            awk -F, 'NR > 1 { printf "%s%s %s %s", sep, $1, $2, $13; sep = ", " }')
                kern="kernels (causal, GEMM ceiling ${ceil:-?} TFLOP/s): $kern; modelled (dev/flash_model.py, TFLOP/s): ${model:-?}; "
            fi
            # the step of each preset on the wgmma kernels, where dev_attention found and timed them
            # at its shape (ms/step here; the torch_<p> rows give its ratio to PyTorch)
            sm90="" sm90_failed=""
            for spec in "${BENCH[@]}"; do
                read -r preset B T <<<"$spec"
                grep -q "^bench $preset flash_sm90 " "$LOGS/${key}_kernels.log" 2>/dev/null || continue
                dir=$LOGS/${key}_sm90_$preset
                rm -rf "${dir:?}"
                run 150 "$dir.log" "$BIN/train_llama" -e "$preset" -b "$B" -t "$T" --attention flash_sm90 -x $((BENCH_WARMUP + BENCH_TIMED)) -v 0 -n -1 -o "$dir"
                read -r n ms _ f b _ _ <<<"$(timed_means "$dir/metrics.jsonl")"
                if [ $RC -ne 0 ]; then sm90_failed="$preset --attention flash_sm90: $(why "$dir.log")"; break
                elif [ "${n:-0}" -ne "$BENCH_TIMED" ]; then sm90_failed="$preset --attention flash_sm90: $n timed steps logged, expected $BENCH_TIMED"; break; fi
                SM90_MS[$preset]=$ms
                SM90_TOKS[$preset]=$(awk -v B="$B" -v T="$T" -v ms="$ms" 'BEGIN { printf "%.0f", B * T / (ms / 1000) }')
                sm90="$sm90${sm90:+; }$preset $ms ms/step (fwd $f bwd $b)"
                [ -n "${OURS_MS[$preset]:-}" ] && sm90="$sm90, flash / flash_sm90 $(awk -v a="${OURS_MS[$preset]}" -v b="$ms" 'BEGIN { printf "%.2fx", a / b }')"
            done
            [ -n "$sm90" ] && sm90="; --attention flash_sm90: $sm90"
            B=4; T=4096
            rm -rf "${LOGS:?}/$key"
            base=$(timeout 30 nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -1)
            mem_sampler_start "$LOGS/$key.mem"
            run 150 "$LOGS/$key.log" "$BIN/train_llama" -e llama300m -b $B -t $T --attention cublas -x $((BENCH_WARMUP + BENCH_TIMED)) -v 0 -n -1 -o "$LOGS/$key"
            mem_sampler_stop
            read -r n ms _ f b _ _ <<<"$(timed_means "$LOGS/$key/metrics.jsonl")"
            peakmem=$(awk -v b="${base:-0}" '$1 ~ /^[0-9]+$/ && $1 > m { m = $1 } END { if (m > 0) printf "%.1f GiB", m / 1024; else print "n/a" }' "$LOGS/$key.mem" 2>/dev/null)
            if [ $RC -ne 0 ]; then row "$key" FAIL "$DT" "${kern}llama300m B=$B T=$T --attention cublas: $(why "$LOGS/$key.log")"
            elif [ "${n:-0}" -ne "$BENCH_TIMED" ]; then row "$key" FAIL "$DT" "${kern}$n timed steps logged, expected $BENCH_TIMED"
            elif [ -n "$sm90_failed" ]; then row "$key" FAIL "$DT" "${kern}$sm90_failed"
            elif [ -n "$sm90_broke_note" ]; then row "$key" FAIL "$DT" "${kern}llama300m B=$B T=$T --attention cublas: $ms ms/step; $sm90_broke_note$sm90"
            elif [ -z "${OURS_MS[llama300m]:-}" ]; then row "$key" PASS "$DT" "${kern}llama300m B=$B T=$T --attention cublas: $ms ms/step (fwd $f bwd $b), peak $peakmem; no bench_llama300m (flash) to compare$sm90"
            else
                row "$key" PASS "$DT" "${kern}llama300m B=$B T=$T step: cublas $ms ms (fwd $f bwd $b), peak $peakmem; flash ${OURS_MS[llama300m]} ms, peak ${OURS_MEM[llama300m]}; flash speed-up $(awk -v a="$ms" -v b="${OURS_MS[llama300m]}" 'BEGIN { printf "%.2fx", a / b }')$sm90"
            fi
        fi
    fi
fi

# the same model in PyTorch bf16 on the same GPU: the anchor, right after our steps (the rows
# below it are the first the budget leaves out). torch loads its own CUDA libraries
# (its wheels): it runs with the LD_LIBRARY_PATH this script found, not the one it set
TORCH_ENV=(env -u LD_LIBRARY_PATH)
[ -n "$ORIG_LDP" ] && TORCH_ENV=(env LD_LIBRARY_PATH="$ORIG_LDP")
TORCH_WHY=""
if [ "$EMULATE" = 1 ]; then TORCH_WHY="emulated: no GPU timing"
elif [ "$HAVE_GPU" = 0 ]; then TORCH_WHY="no CUDA device"
elif ! command -v python3 >/dev/null 2>&1; then TORCH_WHY="no python3"
elif [ ! -f "$RUN_DIR/dev/bench_pytorch.py" ]; then TORCH_WHY="dev/bench_pytorch.py is not here"
else
    TORCH_WHY=$(timeout 120 "${TORCH_ENV[@]}" python3 -c 'import torch
print("" if torch.cuda.is_available() else "torch %s sees no CUDA device" % torch.__version__)' 2>&1 | tail -1)
    case $TORCH_WHY in *Error*|*error*) TORCH_WHY="no usable torch: $TORCH_WHY" ;; esac
fi
for spec in "${BENCH[@]}"; do
    read -r preset B T <<<"$spec"
    key=torch_$preset
    wanted "$key" || continue
    if [ -n "$TORCH_WHY" ]; then row "$key" SKIP 0 "$TORCH_WHY"; continue; fi
    in_budget 30 || { out_of_budget "$key"; continue; }
    run 180 "$LOGS/$key.log" "${TORCH_ENV[@]}" python3 dev/bench_pytorch.py --device cuda --dtype bfloat16 --preset "$preset" -b "$B" -t "$T" \
        --warmup $BENCH_WARMUP --steps $BENCH_TIMED
    line=$(grep -m1 '^pytorch ' "$LOGS/$key.log")
    if [ $RC -ne 0 ] || [ -z "$line" ]; then row "$key" FAIL "$DT" "$(why "$LOGS/$key.log")"; continue; fi
    tt=$(echo "$line" | sed -n 's/.* tokens\/s=\([0-9.]*\).*/\1/p')
    tms=$(echo "$line" | sed -n 's/.* ms\/step=\([0-9.]*\).*/\1/p')
    tmem=$(echo "$line" | sed -n 's/.* peak_mem_gib=\([0-9.]*\).*/\1/p')
    ours=${OURS_TOKS[$preset]:-}
    ratio=$(awk -v a="$ours" -v b="$tt" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "n/a" }')
    [ -n "${SM90_TOKS[$preset]:-}" ] && ratio="$ratio, with --attention flash_sm90 $(awk -v a="${SM90_TOKS[$preset]}" -v b="$tt" 'BEGIN { printf "%.2f", a / b }')"
    row "$key" PASS "$DT" "B=$B T=$T eager bf16 autocast, fp32 weights, SDPA, Muon+AdamW: $tt tok/s, $tms ms/step, $(baseline_note "$key" "" ms/step "$tms"); peak ${tmem:-?} GiB (torch allocator); train_llama/torch = $ratio"
done

# the wgmma kernels with one part left out each (dev_attention --ablate; their results wrong by
# design, after checks that each leaves out what it says): where their time goes, each variant's
# time over the kernel's as built beside dev/flash_model.py --ablation's expectation of it
key=ablate_attention
if wanted "$key" && ! blocked "$key" dev_attention; then
    if [ -n "$SM90_BROKE" ]; then row "$key" SKIP 0 "the wgmma kernels broke dev_attention's run off (row dev_attention)"
    elif ! in_budget 40; then out_of_budget "$key"
    else
        args=(--ablate); [ "$EMULATE" = 1 ] && args+=(--small)
        run 90 "$LOGS/$key.log" "$BIN/dev_attention" "${args[@]}"
        np=$(grep -c '^PASS dev_attention.ablate' "$LOGS/$key.log")
        if grep -q '^SKIP dev_attention.ablate' "$LOGS/$key.log"; then row "$key" SKIP "$DT" "$(grep -m1 '^SKIP' "$LOGS/$key.log" | cut -d' ' -f3-)"
        elif [ $RC -ne 0 ] || [ "$np" -eq 0 ]; then
            row "$key" FAIL "$DT" "$np checks passed; $(why "$LOGS/$key.log"); $(grep -m1 '^FAIL' "$LOGS/$key.log" | oneline 300)"
        elif [ "$EMULATE" = 1 ]; then row "$key" PASS "$DT" "$np checks passed (emulated: --small, the checks only, no times)"
        else
            model=$( (cd "$RUN_DIR" && timeout 30 python3 dev/flash_model.py --ablation --csv --shape llama300m,llama600m 2>/dev/null) | grep ',')
            times=$(awk -v model="$model" '
                BEGIN { n = split(model, m, "\n"); for (i = 1; i <= n; i++) { split(m[i], f, ","); want[f[1] " " f[2] " " f[3]] = f[5] } }
                $1 == "ablate" {
                    k = $2 " " $3 " " $4
                    if ($4 == "as_built") { printf "%s%s %s as built %s ms", sep, $2, $3, $5; sep = "; " }
                    else for (i = 1; i <= NF; i++) if ($i ~ /x$/ && $(i + 1) == "its") {
                        printf ", %s %s (model %s)", $4, $i, (k in want) ? want[k] "x" : "?"; break }
                }' "$LOGS/$key.log")
            row "$key" PASS "$DT" "$np checks passed; variant / as built: ${times:-no ablate lines}"
        fi
    fi
fi

# the bucketed step's own overhead at 1 GPU (nothing to hide there: the collectives are copies)
key=bench_buckets
if wanted "$key"; then
    if [ "$EMULATE" = 1 ]; then row "$key" SKIP 0 "emulated: every timer reads 1 ms, no throughput"
    elif ! blocked "$key" train_llama; then
        if ! in_budget 40; then out_of_budget "$key"
        else
            detail="d12 B=4 T=1024, one-rank NCCL, steps $((BENCH_WARMUP + 1))-$((BENCH_WARMUP + BENCH_TIMED)):"
            result=PASS; t0=$SECONDS; ms0=""
            for run_spec in "fp8 0" "fp8 25" "fp32 0"; do
                read -r comm mb <<<"$run_spec"
                dir=$LOGS/${key}_${comm}_$mb
                rm -rf "${dir:?}"
                run 90 "$dir.log" env TRAIN_LLAMA_TEST_NCCL=1 "$BIN/train_llama" -e d12 -b 4 -t 1024 -c "$comm" --bucket-mb "$mb" \
                    -x $((BENCH_WARMUP + BENCH_TIMED)) -v 0 -n -1 -o "$dir"
                if [ $RC -ne 0 ]; then result=FAIL; detail="$detail -c $comm --bucket-mb $mb: $(why "$dir.log")"; break; fi
                read -r n ms _ _ _ c _ <<<"$(timed_means "$dir/metrics.jsonl")"
                if [ "${n:-0}" -ne "$BENCH_TIMED" ]; then result=FAIL; detail="$detail -c $comm --bucket-mb $mb: $n timed steps"; break; fi
                detail="$detail -c $comm --bucket-mb $mb $ms ms (comm $c ms);"
                if [ "$comm $mb" = "fp8 0" ]; then ms0=$ms; fi
                if [ "$comm $mb" = "fp8 25" ]; then detail="$detail ratio $(awk -v a="$ms" -v b="$ms0" 'BEGIN { printf "%.3f", a / b }') (bucketed / after the backward);"; fi
            done
            row "$key" "$result" $((SECONDS - t0)) "$detail"
        fi
    fi
fi

# what a GeoFP8 refresh costs: d12 and llama300m, one rank, every fc2 unit on the geometry path
# with a fresh factor every 5 steps (steps 1, 6, 11 of 12), against -c fp8 and -c fp32 of the same
# shape. The mean ms of the refresh steps (6, 11) and of the others (3-5, 7-10, 12) of the geofp8 run,
# their ratio, and geofp8's ordinary step against fp8's; t_omega_ms is what a step waited for its
# test matrices (built ahead on host threads)
key=bench_geofp8
if wanted "$key"; then
    if [ "$EMULATE" = 1 ]; then row "$key" SKIP 0 "emulated: every timer reads 1 ms, no throughput"
    elif ! blocked "$key" train_llama; then
        if ! in_budget 90; then out_of_budget "$key"
        else
            detail=""; result=PASS; t0=$SECONDS
            for spec in "d12 4 1024 12" "llama300m 4 4096 16"; do
                read -r preset B T L <<<"$spec"
                fc2=$(seq -s, -f "layers.%g.fc2" 0 $((L - 1)))
                declare -A MS=()
                for comm in fp32 fp8 geofp8; do
                    dir=$LOGS/${key}_${preset}_$comm
                    rm -rf "${dir:?}"
                    flags=(-c "$comm")
                    [ "$comm" = geofp8 ] && flags+=(--geofp8-layers "$fc2" --geofp8-refresh 5)
                    run 90 "$dir.log" "$BIN/train_llama" -e "$preset" -b "$B" -t "$T" "${flags[@]}" -x 12 -v 0 -n -1 -o "$dir"
                    if [ $RC -ne 0 ]; then result=FAIL; detail="$detail $preset -c $comm: $(why "$dir.log");"; continue 2; fi
                    # "NORMAL REFRESH OMEGA": mean ms of steps 3-12 off and on the refresh steps 6 and 11, mean t_omega_ms of those
                    MS[$comm]=$(awk 'function field(line, key,   m) {
                            if (!match(line, "\"" key "\": [-+0-9.eE]+")) return ""
                            m = substr(line, RSTART, RLENGTH); sub(/^[^:]*: /, "", m); return m }
                        /"train_loss"/ { s = field($0, "step"); if (s < 3) next
                            if (s == 6 || s == 11) { r += field($0, "ms"); o += field($0, "t_omega_ms"); nr++ } else { n += field($0, "ms"); nn++ } }
                        END { printf "%.2f %.2f %.2f", nn ? n / nn : 0, nr ? r / nr : 0, nr ? o / nr : 0 }' "$dir/metrics.jsonl")
                done
                read -r f32 _ _ <<<"${MS[fp32]}"; read -r f8 _ _ <<<"${MS[fp8]}"; read -r gn gr go <<<"${MS[geofp8]}"
                detail="$detail $(awk -v p="$preset" -v B="$B" -v T="$T" -v f32="$f32" -v f8="$f8" -v gn="$gn" -v gr="$gr" -v go="$go" 'BEGIN {
                    printf "%s B=%s T=%s: fp32 %.1f, fp8 %.1f, geofp8 %.1f ms, refresh step %.1f ms (t_omega %.2f ms): refresh/normal %.2fx, geofp8/fp8 %.3fx;",
                        p, B, T, f32, f8, gn, gr, go, gr / gn, gn / f8 }')"
            done
            row "$key" "$result" $((SECONDS - t0)) "${detail# }"
        fi
    fi
fi

# one GPU as 64 ranks (--virtual-ranks 64): d12 at bench_d12's micro-batch per logical rank
# (B=4, T=1024, so 262144 tokens a step), -c fp8 and -c geofp8 (every fc2 unit, a refresh every 5
# steps): ms/step, what one logical rank's share costs against bench_d12's one-rank step, the
# communication's ms, the peak memory (each logical rank adds a gradient and its mode's state)
key=bench_virtual_ranks
if wanted "$key"; then
    if [ "$EMULATE" = 1 ]; then row "$key" SKIP 0 "emulated: every timer reads 1 ms, no throughput"
    elif ! blocked "$key" train_llama; then
        if ! in_budget 60; then out_of_budget "$key"
        else
            detail="d12 B=4 T=1024 per logical rank, 64 virtual ranks, steps $((BENCH_WARMUP + 1))-$((BENCH_WARMUP + BENCH_TIMED)):"
            result=PASS; t0=$SECONDS
            for comm in fp8 geofp8; do
                dir=$LOGS/${key}_$comm
                rm -rf "${dir:?}"
                flags=(-c "$comm")
                [ "$comm" = geofp8 ] && flags+=(--geofp8-layers "$(seq -s, -f "layers.%g.fc2" 0 11)" --geofp8-refresh 5)
                base=$(timeout 30 nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -1)
                mem_sampler_start "$dir.mem"
                run 120 "$dir.log" "$BIN/train_llama" -e d12 -b 4 -t 1024 --virtual-ranks 64 "${flags[@]}" \
                    -x $((BENCH_WARMUP + BENCH_TIMED)) -v 0 -n -1 -o "$dir"
                mem_sampler_stop
                if [ $RC -ne 0 ]; then result=FAIL; detail="$detail -c $comm: $(why "$dir.log")"; break; fi
                read -r n ms _ _ _ c _ <<<"$(timed_means "$dir/metrics.jsonl")"
                if [ "${n:-0}" -ne "$BENCH_TIMED" ]; then result=FAIL; detail="$detail -c $comm: $n timed steps"; break; fi
                peakmem=$(awk -v b="${base:-0}" '$1 ~ /^[0-9]+$/ && $1 > m { m = $1 } END { if (m > 0) printf "%.1f GiB", m / 1024; else print "n/a" }' "$dir.mem" 2>/dev/null)
                one=${OURS_MS[d12]:-}
                detail="$detail -c $comm $ms ms/step ($(baseline_note "$key" "-c $comm" ms/step "$ms")), comm $c ms, peak $peakmem, $(awk -v ms="$ms" -v one="$one" 'BEGIN {
                    printf "%.1f ms per logical rank", ms / 64; if (one > 0) printf " = %.2fx bench_d12'"'"'s one-rank step (%.1f ms)", ms / 64 / one, one }');"
            done
            row "$key" "$result" $((SECONDS - t0)) "$detail"
        fi
    fi
fi

# the scaling model on those runs: the 64-GPU row of its table (an alpha-beta prediction from
# 1-GPU phase times, with the link defaults of the script)
key=scaling_model
if wanted "$key"; then
    if [ "$EMULATE" = 1 ]; then row "$key" SKIP 0 "emulated: no phase times"
    elif [ ! -s "$LOGS/bench_buckets_fp32_0/metrics.jsonl" ] || [ ! -s "$LOGS/bench_buckets_fp8_0/metrics.jsonl" ]; then
        row "$key" SKIP 0 "the bench_buckets runs are missing"
    elif ! command -v python3 >/dev/null 2>&1; then row "$key" SKIP 0 "no python3"
    else
        run 60 "$LOGS/$key.log" python3 scripts/scaling_model.py --model d12 --run fp32="$LOGS/bench_buckets_fp32_0" \
            --run fp8="$LOGS/bench_buckets_fp8_0" --skip-steps "$BENCH_WARMUP" --gpus 8,16,32,64
        line=$(grep '^| 64 |' "$LOGS/$key.log" | head -1)
        if [ $RC -eq 0 ] && [ -n "$line" ]; then row "$key" PASS "$DT" "d12 B=4 T=1024 at 64 GPUs (ms; gain over fp32; then overlapped): $line"
        else row "$key" FAIL "$DT" "$(why "$LOGS/$key.log") $(tail -1 "$LOGS/$key.log")"; fi
    fi
fi

# ---------------------------------------------------------------------------------------------
# compute-sanitizer, last: the speed rows above come first, so that slow sanitizers cannot spend
# their share of the budget. Two targets each: a short tiny run of the trainer (every kernel of a
# step; head size 32, one tile per block), and dev_attention --small (both attention paths; the
# flash kernels at head sizes 16 to 128, T from 1 to 4096: several K/V tiles per block, so the
# prefetch and double-buffer paths run, and T off the tile; forward and backward).
# racecheck_attention runs it with --flash-only (no cuBLAS kernel at all); the trainer's step
# calls cuBLAS, so every racecheck report is read hazard by hazard.

# cuBLAS's and cuBLASLt's own kernels, by name (extended regex on a name without its leading
# "void "): their shared-memory hazards are the library's, reported on the H200 in nvjet_* GEMMs
# (2026-12-04); no filter flag keeps them out (--kernel-name-exclude crashed compute-sanitizer
# there). test_gpu_check.sh checks that no kernel or device function of the project matches.
RACE_LIBRARY_KERNELS='^(nvjet_|sm[0-9]+_xmma_|cutlass|cublas|ampere_|splitKreduce_kernel)'
# race_hazards LOG: racecheck's hazard reports in LOG, one per "Error|Warning: Race reported
# between ..." block (its "and ... access at" lines follow) or "Potential RAW|WAR|WAW hazard
# detected" block (its "Thread (x, y, z) at" lines follow). An access names the function it lies
# in: "NAME+0xOFF[ in FILE:LINE]" (compute-sanitizer 2022 on) or "0xOFF in [FILE:LINE:]NAME"
# (before). A hazard is the library's when every access it names matches RACE_LIBRARY_KERNELS;
# any other name is the project's (the run launches nothing else). Prints "OURS LIBRARY", then
# the first of ours (its first two lines), then the library's kernels, each name once.
race_hazards() {
    awk -v lib="$RACE_LIBRARY_KERNELS" '
    function name_of(loc) {
        sub(/ \[[0-9]+ hazards?\]$/, "", loc)
        if (loc ~ /^0x[0-9a-fA-F]+ in /) { sub(/^0x[0-9a-fA-F]+ in /, "", loc); sub(/^[^ ]*:[0-9]+:/, "", loc); return loc }
        sub(/ in [^ ]*:[0-9]+$/, "", loc)
        sub(/\+0x[0-9a-fA-F]+$/, "", loc)
        return loc
    }
    function add(loc,   n) {
        n = name_of(loc); sub(/^void /, "", n)
        if (n !~ lib) { mine = 1; return }
        sub(/[<(].*/, "", n)  # the name without template arguments and parameters
        if (!(n in seen)) { seen[n] = 1; names = names (names == "" ? "" : ", ") n }
    }
    function close_block() {
        if (!open) return
        if (mine) { ours++; if (first == "") first = text } else library++
        open = 0
    }
    !/^=+/ { next }  # a line of the program itself
    { line = $0; sub(/^=+ */, "", line) }
    line ~ /^(Error|Warning): (Race reported between|Potential [A-Z]+ hazard detected)/ {
        close_block(); open = 1; mine = 0; text = line; nlines = 1
    }
    open && line ~ / access at / { loc = line; sub(/.* access at /, "", loc); add(loc) }
    open && line ~ /Thread \([^)]*\) at / { loc = line; sub(/.*Thread \([^)]*\) at /, "", loc); add(loc) }
    open && line !~ /^(Error|Warning): / && nlines == 1 && line != "" { text = text " " line; nlines = 2 }
    open && (line == "" || line ~ /SUMMARY/) { close_block() }
    END { close_block(); printf "%d %d\n%s\n%s\n", ours, library, first, names }' "$1"
}

SANITIZER=${GPU_CHECK_SANITIZER:-}
for c in "$(command -v compute-sanitizer 2>/dev/null)" "$CUDA_HOME/bin/compute-sanitizer" "$CUDA_HOME/compute-sanitizer/compute-sanitizer" \
         /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    [ -z "$SANITIZER" ] && [ -n "$c" ] && [ -x "$c" ] && SANITIZER=$c
done
for key in memcheck racecheck memcheck_attention racecheck_attention; do
    wanted $key || continue
    tool=${key%_attention}
    # emulated: only with a stand-in sanitizer that prints a report (test_gpu_check.sh's fixtures)
    if [ "$EMULATE" = 1 ] && [ -z "${GPU_CHECK_SANITIZER:-}" ]; then row $key SKIP 0 "emulated: races and device memory errors need a GPU"; continue; fi
    if [ "$key" = "$tool" ]; then target=train_llama; else target=dev_attention; fi
    blocked $key $target && continue
    if [ -z "$SANITIZER" ]; then row $key SKIP 0 "absent: no compute-sanitizer on the PATH or under $CUDA_HOME"; continue; fi
    in_budget 40 || { out_of_budget $key; continue; }
    if [ $target = train_llama ]; then
        steps=2; [ $tool = racecheck ] && steps=1  # racecheck instruments every shared-memory access
        what="tiny, B=1 T=64, steps: $steps"
        run 150 "$LOGS/$key.log" "$SANITIZER" --tool $tool --error-exitcode 99 "$BIN/train_llama" -e tiny -b 1 -t 64 -x $steps -v 0 -n -1
        # the program's own verdict, which --error-exitcode hides once anything is reported
        ran_ok() { grep -q '^done: ' "$LOGS/$key.log"; }
        ran_why() { grep -m1 -iE '^error|abort|segmentation fault|core dumped' "$LOGS/$key.log" || echo "no 'done:' line: the run did not finish"; }
    else
        args=(--small); [ $tool = racecheck ] && args+=(--flash-only)
        what="dev_attention ${args[*]}: flash forward and backward, HS 16-128, T 1-4096"
        [ $tool = racecheck ] || what="$what, and the cuBLAS path"
        run 200 "$LOGS/$key.log" "$SANITIZER" --tool $tool --error-exitcode 99 "$BIN/dev_attention" "${args[@]}"
        ran_ok() { grep -q '^PASS' "$LOGS/$key.log" && ! grep -q '^FAIL' "$LOGS/$key.log"; }
        ran_why() { grep -m1 -iE '^FAIL|^error|abort|segmentation fault|core dumped' "$LOGS/$key.log" || echo "no PASS line: the run did not finish"; }
    fi
    summary=$(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$LOGS/$key.log" | sed 's/^=* *//')
    # ERROR SUMMARY: N errors; RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)
    nerr=$(echo "$summary" | sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p; s/.*(\([0-9]*\) errors\{0,1\}, \([0-9]*\) warning.*/\1 \2/p' | head -1 | awk '{ print $1 + $2 }')
    [ -n "$summary" ] || nerr=""
    nours=0; nlib=0; first_ours=""; lib_names=""
    if [ $tool = racecheck ]; then
        { read -r nours nlib; read -r first_ours; read -r lib_names; } < <(race_hazards "$LOGS/$key.log")
    fi
    refused=0
    if [ -z "$summary" ]; then refused=1
    elif [ "${nerr:-x}" != 0 ] && [ $((nours + nlib)) -eq 0 ] && grep -qiE 'not supported|unable to|permission|failed to (initialize|start)' "$LOGS/$key.log"; then refused=1; fi
    if [ $RC -eq 124 ]; then row $key FAIL "$DT" "timed out after $LIMIT s ($what)"
    elif [ $refused = 1 ]; then
        row $key SKIP "$DT" "refused: $(grep -m1 -vE '^=+ *$|COMPUTE-SANITIZER' "$LOGS/$key.log" | sed 's/^=* *//' | oneline 140)"
    elif [ $tool = racecheck ]; then
        ignored=""
        [ "$nlib" -gt 0 ] && ignored="; $nlib in cuBLAS's own kernels, ignored ($(echo "$lib_names" | oneline 160))"
        if [ "$nours" -gt 0 ]; then
            row $key FAIL "$DT" "$summary: $nours in the project's kernels, the first: $(echo "$first_ours" | oneline 300)$ignored"
        elif [ "$nerr" != 0 ] && [ "$nlib" -eq 0 ]; then
            row $key FAIL "$DT" "$summary, but no hazard report this script reads (hint: compute-sanitizer's format changed?): $(grep -m1 -E '^=+ +(Error|Warning)' "$LOGS/$key.log" | sed 's/^=* *//' | oneline 160)"
        elif { [ $RC -ne 0 ] && [ $RC -ne 99 ]; } || { [ $RC -eq 99 ] && [ "$nlib" -eq 0 ]; } || ! ran_ok; then
            row $key FAIL "$DT" "$summary$ignored, but the run failed (exit $RC): $(ran_why | oneline 160)"
        else
            row $key PASS "$DT" "$summary: none in the project's kernels$ignored ($what)"
        fi
    elif [ "$nerr" = 0 ] && [ $RC -eq 0 ]; then row $key PASS "$DT" "$summary ($what)"
    elif [ "$nerr" = 0 ]; then row $key FAIL "$DT" "$summary, but the run failed: $(why "$LOGS/$key.log")"
    else row $key FAIL "$DT" "$summary: $(grep -m1 -E '^=+ +(Invalid|Error|Race|Program hit|.*hazard)' "$LOGS/$key.log" | sed 's/^=* *//' | oneline 140)"; fi
done

# ---------------------------------------------------------------------------------------------
# the table, the logs

total=$(since "$T_START")
echo "$NPASS passed, $NFAIL failed, $NSKIP skipped, $total s" >>"$RESULTS"
[ -n "$OUT_DIR" ] && cp "$RESULTS" "$OUT_DIR/gpu_check_results.txt" 2>/dev/null
echo
echo "GPU check ($KIND, $LAYOUT): $NPASS passed, $NFAIL failed, $NSKIP skipped in $total s"
printf '| %-30s | %-4s | %8s | %s\n' check res time detail
for r in "${ROWS[@]}"; do echo "$r"; done
echo "results: $RESULTS; logs: $LOGS/"
if [ -n "$OUT_DIR" ]; then
    # text logs only (no checkpoints), each cut to its last 4 MiB, in one file under the 16 MiB a
    # returned file may hold
    tarlist=$(cd "$LOGS" && find . -type f \( -name '*.log' -o -name '*.jsonl' -o -name '*.txt' -o -name '*.mem' \) | sort)
    for f in $tarlist; do
        [ "$(stat -c %s "$LOGS/$f")" -gt 4194304 ] && { tail -c 4194304 "$LOGS/$f" >"$LOGS/$f.cut" && mv "$LOGS/$f.cut" "$LOGS/$f"; }
    done
    # shellcheck disable=SC2086
    (cd "$LOGS" && timeout 120 tar czf "$OUT_DIR/gpu_check_logs.tar.gz" $tarlist) || echo "gpu_check: could not write $OUT_DIR/gpu_check_logs.tar.gz"
fi
if [ $NFAIL -gt 0 ]; then exit 1; fi
if [ "$HAVE_GPU" = 0 ]; then echo "no CUDA device: nothing that needs one was checked"; exit 77; fi
exit 0
