#!/usr/bin/env bash
# test_gpu_check.sh — dev/gpu_check.sh's own logic and the GPU bundle, without a GPU:
#   - bad settings get one line and exit 2;
#   - EMULATE=1 (dev/emu's CPU builds, small shapes) against reference curves made by --refs: the
#     preflight rows, the tiny loss match, one -c mode on a one-rank NCCL communicator, the bitwise
#     rerun, every GPU-only row skipped with its reason, rows in order, each with its seconds, the
#     results file copied to $OUT while the run is still going, the logs tarred there;
#   - failure paths: a corrupted reference curve, a binary that does not load (no rebuild), a
#     check program with a failing check, a run that hangs (timeout), a spent time budget: each a
#     FAIL or SKIP row with its reason, none a hang;
#   - the sanitizer rows on a stand-in compute-sanitizer that prints fixture reports: racecheck
#     ignores (and counts) hazards in cuBLAS's own kernels, fails on one in the project's, on a
#     report it cannot read and on a run that failed behind the sanitizer's exit status;
#     racecheck_attention runs dev_attention --flash-only; no kernel or device function of the
#     project matches the names taken for cuBLAS's;
#   - the speed rows on stand-ins that pass for a GPU: ms/step and each kernel's TFLOP/s beside the
#     baseline's (dev/gpu_baseline.txt) with their ratio, "no baseline" where it has no such row;
#     --ratios on results files; a dev_attention whose wgmma kernels end its run with a CUDA
#     error: its checks and figures once more with --no-sm90, the rows failing with the reason;
#   - make gpu-bundle: at most 48 MiB; every binary's NEEDED entries (readelf -d) in the allowlist
#     below; every file the script names (--list-files), every fixture the GPU programs open and
#     every make gpu binary in the bundle; the bundle copied away from the repo runs its preflight
#     (MANIFEST, libraries, binaries load) and skips the rest (no device here), and notices refs
#     made with other flags and a changed file.
# The emulated run leaves out dev_geofp8 --small (2-3 minutes) and test_llama_gpu (1-2 minutes):
# test_cuda_emulated.sh runs both; the same rows' logic runs here on a stand-in that fails.
# Prints "PASS name" / "FAIL name: detail" / "SKIP name: why" lines.
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
T_START=$(date +%s)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset EMULATE GPU_CHECK_ONLY GPU_CHECK_BUDGET GPU_CHECK_TIMEOUT GPU_CHECK_REBUILD GPU_CHECK_BIN GPU_CHECK_REFS GPU_CHECK_LOGS GPU_CHECK_SANITIZER GPU_CHECK_BASELINE OUT
source test/testlib.sh  # pass, fail, skip, why
check() { if eval "$2"; then pass "$1"; else fail "$1" "$3"; fi; }
# the row of KEY in a results file: "RESULT|SECONDS|DETAIL"
row_of() { awk -F' [|] ' -v k="$1" '{ gsub(/^\| /, "", $1); gsub(/ +$/, "", $1); gsub(/ +$/, "", $2) } $1 == k { sub(/ s$/, "", $3); gsub(/ /, "", $3); d = $4; for (i = 5; i <= NF; i++) d = d " | " $i; print $2 "|" $3 "|" d; exit }' "$2"; }
result_of() { row_of "$1" "$2" | cut -d'|' -f1; }
detail_of() { row_of "$1" "$2" | cut -d'|' -f3-; }

# --- bad settings: one line, exit 2, nothing run
for bad in "EMULATE=2" "GPU_CHECK_BUDGET=soon" "GPU_CHECK_TIMEOUT=0" "GPU_CHECK_REBUILD=yes" "GPU_CHECK_ONLY=(" "OUT=$TMP/none"; do
    env "$bad" bash dev/gpu_check.sh >"$TMP/bad.out" 2>"$TMP/bad.err"
    rc=$?
    var=${bad%%=*}
    if [ $rc -eq 2 ] && [ "$(wc -l <"$TMP/bad.err")" -eq 1 ] && grep -q "^gpu_check: $var" "$TMP/bad.err" && [ ! -s "$TMP/bad.out" ]; then
        pass "gpu_check.refuses_$var"
    else fail "gpu_check.refuses_$var" "rc=$rc: $(head -2 "$TMP/bad.err") $(head -2 "$TMP/bad.out")"; fi
done
bash dev/gpu_check.sh --frobnicate >/dev/null 2>"$TMP/bad.err"
rc=$?
check gpu_check.refuses_unknown_argument '[ $rc -eq 2 ] && grep -q "unknown argument .--frobnicate." "$TMP/bad.err"' "$(cat "$TMP/bad.err")"

# --- the racecheck rows ignore hazards in cuBLAS's own kernels by name (RACE_LIBRARY_KERNELS):
#     no kernel or device function of the project may carry such a name
LIB_RE=$(sed -n "s/^RACE_LIBRARY_KERNELS='\(.*\)'$/\1/p" dev/gpu_check.sh)
ours=$(cat train_llama.cu llmc/*.cuh llmc/*.h dev/cuda/*.cu test/*.cu | tr '\n' ' ' | sed -E 's/__launch_bounds__\([^)]*\)//g' |
       grep -oE '(__global__|__device__)[^(;{}]*\(' | sed -E 's/.*[^A-Za-z0-9_]([A-Za-z_][A-Za-z0-9_]*) *\($/\1/' | sort -u)
n_ours=$(echo "$ours" | grep -c .)
clash=$(echo "$ours" | grep -E "$LIB_RE" | tr '\n' ' ')
check gpu_check.race_library_names_none_of_ours '[ -n "$LIB_RE" ] && [ "$n_ours" -ge 60 ] && [ -z "$clash" ] && echo "$ours" | grep -qx flash_backward_kernel' \
    "pattern '$LIB_RE', $n_ours names of ours, matching: $clash"

# --- the speed rows' ratios to the baseline (dev/gpu_baseline.txt), on stand-ins that pass for a
#     GPU (no nvidia-smi here: the script asks train_llama, which answers): a train_llama that logs
#     22 ms steps (30 with --attention cublas, 18 with flash_sm90), a dev_attention --bench-only that
#     prints 157.76 TFLOP/s for every kernel and a flash_sm90 line; then --ratios on results files
mkdir -p "$TMP/speed"
cat >"$TMP/speed/train_llama" <<'EOF'
#!/bin/bash
[ "$1" = --help ] && { echo "usage: stand-in"; exit 0; }
out=.; preset=?; ms=22.0
while [ $# -gt 0 ]; do
    case $1 in -o) out=$2; shift ;; -e) preset=$2; shift ;; -t) [ "$2" = 1000000 ] && exit 1; shift ;; --attention) ms=30.0; [ "$2" = flash_sm90 ] && ms=18.0; shift ;; esac
    shift
done
printf '%s\n' "| model | $preset C=768 L=12 NH=12 NKV=12 FF=2048 Vp=50304 |" "| batch | B=4 T=1024 |" "| peak for MFU | 989 TFLOP/s |"
mkdir -p "$out"
for s in 1 2 3 4 5 6 7; do
    echo "{\"step\": $s, \"train_loss\": 5.0, \"ms\": $ms, \"mfu\": 0.2, \"t_forward_ms\": 3.0, \"t_backward_ms\": 9.0, \"t_comm_ms\": 0.1, \"t_optimizer_ms\": 5.0}"
done >"$out/metrics.jsonl"
EOF
cat >"$TMP/speed/dev_attention" <<'EOF'
#!/bin/bash
if [ "$1" = --ablate ]; then
    for shape in llama300m llama600m; do
        for v in as_built no_exp no_pv; do echo "PASS dev_attention.ablate.$shape.forward_sm90.$v: out differs"; done
        echo "ablate $shape forward_sm90 as_built 0.5000 ms, 300.0 TFLOP/s counted as the kernel as built"
        echo "ablate $shape forward_sm90 no_exp 0.4000 ms, 375.0 TFLOP/s counted as the kernel as built, 0.800x its time"
        echo "ablate $shape forward_sm90 no_pv 0.4500 ms, 333.3 TFLOP/s counted as the kernel as built, 0.900x its time"
        echo "ablate $shape backward_sm90 as_built 2.0000 ms, 200.0 TFLOP/s counted as the kernel as built"
        echo "ablate $shape backward_sm90 no_dq 1.5000 ms, 266.7 TFLOP/s counted as the kernel as built, 0.750x its time"
    done
    exit 0
fi
echo "bench cuBLASLt bf16 GEMM 8192^3: 1.375 ms, 800.0 TFLOP/s"
for shape in llama300m hs128_t4096; do for path in flash cublas; do for dir in forward backward; do
    echo "bench $shape $path $dir B=4: 1.000 ms, 157.76 TFLOP/s"
done; done; done
echo "bench llama300m flash_sm90 backward B=4: 0.800 ms, 197.20 TFLOP/s"
echo "bench llama600m flash_sm90 backward B=4: 0.400 ms, 197.20 TFLOP/s"
EOF
# torch as the GPU machine's python3 would have it (the real python3 for everything else): 40 ms steps
REAL_PY=$(command -v python3)
cat >"$TMP/speed/python3" <<EOF
#!/bin/bash
case "\$1 \$2" in
    "-c import torch"*) echo ""; exit 0 ;;
    "dev/bench_pytorch.py "*) echo "pytorch preset=x B=4 T=1024 device=cuda dtype=bfloat16 ns_dtype=bfloat16 threads=1 tokens/s=102400  ms/step=40.0 peak_mem_gib=5.00 loss=9.0000"; exit 0 ;;
esac
exec "$REAL_PY" "\$@"
EOF
chmod +x "$TMP/speed/train_llama" "$TMP/speed/dev_attention" "$TMP/speed/python3"
grep -v '^| bench_d12 ' dev/gpu_baseline.txt >"$TMP/speed/baseline_no_d12.txt"
for b in full no_d12; do
    base=dev/gpu_baseline.txt; [ $b = no_d12 ] && base=$TMP/speed/baseline_no_d12.txt
    GPU_CHECK_BIN="$TMP/speed" GPU_CHECK_REBUILD=0 GPU_CHECK_LOGS="$TMP/speed/logs_$b" GPU_CHECK_BASELINE="$base" \
        GPU_CHECK_ONLY='^(bench_(d12|llama600m|attention|virtual_ranks)|ablate_attention|torch_(d12|llama600m))$' PATH="$TMP/speed:$PATH" \
        timeout 120 bash dev/gpu_check.sh >"$TMP/speed/$b.out" 2>&1
done
S=$TMP/speed/logs_full/results.txt
# the wgmma kernels' ablation: each variant's ratio to its kernel as built beside the model's
m_exp=$(python3 dev/flash_model.py --ablation --csv --shape llama300m | awk -F, '$2 == "forward_sm90" && $3 == "no_exp" { print $5 }')
check gpu_check.ablate_attention_ratios_beside_model '[ "$(result_of ablate_attention "$S")" = PASS ] && detail_of ablate_attention "$S" | grep -q "^6 checks passed; variant / as built: llama300m forward_sm90 as built 0.5000 ms, no_exp 0.800x (model ${m_exp}x), no_pv 0.900x (model .*x); llama300m backward_sm90 as built 2.0000 ms, no_dq 0.750x (model .*x); llama600m forward_sm90"' \
    "model no_exp '$m_exp': $(row_of ablate_attention "$S")"
check gpu_check.speed_row_ratio_to_baseline 'detail_of bench_d12 "$S" | grep -q "186182 tok/s, 22.0 ms/step, baseline 18.7 ms/step → ratio 1.18×; MFU ours"' \
    "$(row_of bench_d12 "$S") $(why "$TMP/speed/full.out")"
# without bench_llama300m (not wanted here) the row still ends, on the unfused step alone
check gpu_check.bench_attention_ratio_per_kernel '[ "$(result_of bench_attention "$S")" = PASS ] && detail_of bench_attention "$S" | grep -q "llama300m flash forward 157.76 TFLOP/s (baseline 185.6 TFLOP/s → ratio 0.85×), .*hs128_t4096 cublas backward 157.76 TFLOP/s (baseline 34.2 TFLOP/s → ratio 4.61×).*; .*--attention cublas: 30.000 ms/step"' \
    "$(row_of bench_attention "$S")"
# where dev_attention timed the wgmma kernels at a preset's shape, that preset's step once more
# with them (llama300m and llama600m here, not d12), beside its bench_<p> row where there is one
check gpu_check.bench_attention_flash_sm90_step 'detail_of bench_attention "$S" | grep -q "llama300m flash_sm90 backward 197.20 TFLOP/s.*; --attention flash_sm90: llama300m 18.000 ms/step (fwd 3.00 bwd 9.00); llama600m 18.000 ms/step (fwd 3.00 bwd 9.00), flash / flash_sm90 1.22x$"' \
    "$(row_of bench_attention "$S")"
# the PyTorch rows come right after the steps (before the rows the budget leaves out first), with
# the ratio of the wgmma step where bench_attention ran it: 22 and 18 ms against torch's 40
check gpu_check.torch_ratio_with_flash_sm90 'detail_of torch_llama600m "$S" | grep -q "102400 tok/s, 40.0 ms/step, .*; train_llama/torch = 3.64, with --attention flash_sm90 4.44$" && detail_of torch_d12 "$S" | grep -q "train_llama/torch = 1.82$"' \
    "$(row_of torch_d12 "$S") / $(row_of torch_llama600m "$S")"
keys=$(grep '^| ' "$S" | tail -n +2 | cut -d'|' -f2 | tr -d ' ' | tr '\n' ' ')
check gpu_check.torch_rows_after_steps 'echo "$keys" | grep -q " bench_d12 bench_llama600m bench_attention torch_d12 torch_llama600m ablate_attention bench_virtual_ranks $"' "rows: $keys"
check gpu_check.speed_row_without_baseline_row 'detail_of bench_d12 "$TMP/speed/logs_no_d12/results.txt" | grep -q "22.0 ms/step, no baseline; MFU ours"' \
    "$(row_of bench_d12 "$TMP/speed/logs_no_d12/results.txt")"
# the 64-virtual-rank row: each mode's ms/step, per logical rank against bench_d12's step
check gpu_check.bench_virtual_ranks_row 'detail_of bench_virtual_ranks "$S" | grep -q "64 virtual ranks, steps 3-7: -c fp8 22.000 ms/step (no baseline), comm 0.10 ms, peak n/a, 0.3 ms per logical rank = 0.02x bench_d12.s one-rank step (22.0 ms); -c geofp8 22.000 ms/step"' \
    "$(row_of bench_virtual_ranks "$S")"
check gpu_check.results_name_the_baseline 'grep -q "^# baseline .*dev/gpu_baseline.txt: .*H200.*2026-12-04.*commit 5ec15b9" "$S"' "$(grep '^#' "$S")"
# --ratios: the baseline against itself (every figure 1.00), a run's results against a baseline without one row
bash dev/gpu_check.sh --ratios dev/gpu_baseline.txt >"$TMP/speed/self.txt" 2>&1
check gpu_check.ratios_of_baseline_itself '[ "$(grep -c "→ ratio 1.00×$" "$TMP/speed/self.txt")" -eq 14 ] && [ "$(wc -l <"$TMP/speed/self.txt")" -eq 15 ]' "$(cat "$TMP/speed/self.txt")"
GPU_CHECK_BASELINE=$TMP/speed/baseline_no_d12.txt bash dev/gpu_check.sh --ratios "$S" >"$TMP/speed/ratios.txt" 2>&1
check gpu_check.ratios_skip_missing_row 'grep -qx "bench_d12: 22.0 ms/step; no baseline" "$TMP/speed/ratios.txt" && grep -qx "bench_attention llama300m flash forward: 157.76 TFLOP/s; baseline 185.6 TFLOP/s → ratio 0.85×" "$TMP/speed/ratios.txt"' \
    "$(cat "$TMP/speed/ratios.txt")"

# the same on another card than the baseline's (a stand-in nvidia-smi naming an H100): each ratio
# says so, in the run and in --ratios on its results
mkdir -p "$TMP/smi"
cat >"$TMP/smi/nvidia-smi" <<'EOF'
#!/bin/bash
case "$*" in
    *--query-gpu=name*) echo "NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB, 9.0" ;;
    -L) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000)" ;;
    *memory.used*) echo 1000 ;;
    *) echo "| NVIDIA-SMI 580.159.04    Driver Version: 580.159.04    CUDA Version: 13.0 |" ;;
esac
EOF
chmod +x "$TMP/smi/nvidia-smi"
PATH="$TMP/smi:$PATH" GPU_CHECK_BIN="$TMP/speed" GPU_CHECK_REBUILD=0 GPU_CHECK_LOGS="$TMP/speed/logs_h100" GPU_CHECK_ONLY='^bench_d12$' \
    timeout 120 bash dev/gpu_check.sh >"$TMP/speed/h100.out" 2>&1
H=$TMP/speed/logs_h100/results.txt
bash dev/gpu_check.sh --ratios "$H" >"$TMP/speed/h100_ratios.txt" 2>&1
check gpu_check.speed_ratio_names_other_card 'detail_of bench_d12 "$H" | grep -q "baseline 18.7 ms/step → ratio 1.18× (the baseline.s card: NVIDIA H200; this run.s: NVIDIA H100 80GB HBM3); MFU" && grep -qx "bench_d12: 22.0 ms/step; baseline 18.7 ms/step → ratio 1.18× (the baseline.s card: NVIDIA H200; this run.s: NVIDIA H100 80GB HBM3)" "$TMP/speed/h100_ratios.txt"' \
    "$(row_of gpu "$H") / $(row_of bench_d12 "$H") / $(cat "$TMP/speed/h100_ratios.txt") $(why "$TMP/speed/h100.out")"

# --- a dev_attention whose wgmma kernels break its run off (a CUDA error after a flash_sm90 line)
#     unless --no-sm90: the kernels row fails and a dev_attention_no_sm90 row gives the others'
#     checks; bench_attention takes its figures from a --no-sm90 run and fails, saying why
mkdir -p "$TMP/broke"
cp "$TMP/speed/train_llama" "$TMP/broke/"
cat >"$TMP/broke/dev_attention" <<'EOF'
#!/bin/bash
for a in "$@"; do [ "$a" = --no-sm90 ] && nosm90=1; done
echo "$*" >>"$(dirname "$0")/args"
if [ "$1" = --validate-only ]; then
    echo "PASS dev_attention.flash.tiny.forward_out: measured 1e-03, bound 0.01 (max rel err)"
    [ -n "$nosm90" ] && { echo "SKIP dev_attention.flash_sm90: --no-sm90"; echo "PASS dev_attention.flash.llama300m.forward_out: measured 1e-03, bound 0.01 (max rel err)"; exit 0; }
    echo "PASS dev_attention.flash_sm90.tiny_HS64.forward_out: measured 1e-03, bound 0.01 (max rel err)"
    echo "CUDA error attention.cu:160: cudaDeviceSynchronize(): an illegal instruction was encountered" >&2; exit 1
fi
echo "bench cuBLASLt bf16 GEMM 8192^3: 1.375 ms, 800.0 TFLOP/s"
echo "bench llama300m flash forward B=4: 1.000 ms, 157.76 TFLOP/s"
[ -z "$nosm90" ] && { echo "bench llama300m flash_sm90 forward B=4: 9.000 ms, 17.53 TFLOP/s"; echo "CUDA error attention.cu:340: an illegal instruction was encountered" >&2; exit 1; }
echo "bench llama300m flash backward B=4: 2.000 ms, 197.20 TFLOP/s"
EOF
chmod +x "$TMP/broke/dev_attention"
GPU_CHECK_BIN="$TMP/broke" GPU_CHECK_REBUILD=0 GPU_CHECK_LOGS="$TMP/broke/logs" GPU_CHECK_ONLY='^(dev_attention|bench_attention|ablate_attention)$' \
    timeout 120 bash dev/gpu_check.sh >"$TMP/broke/out" 2>&1
S=$TMP/broke/logs/results.txt
check gpu_check.sm90_broke_kernels_rerun '[ "$(result_of dev_attention "$S")" = FAIL ] && [ "$(result_of dev_attention_no_sm90 "$S")" = PASS ] && detail_of dev_attention_no_sm90 "$S" | grep -qx "2 checks" && grep -qx -- "--validate-only --no-sm90" "$TMP/broke/args"' \
    "$(row_of dev_attention "$S") / $(row_of dev_attention_no_sm90 "$S") / $(tr '\n' ';' <"$TMP/broke/args")"
check gpu_check.sm90_broke_bench_figures_without 'b=$(detail_of bench_attention "$S"); [ "$(result_of bench_attention "$S")" = FAIL ] && echo "$b" | grep -q "llama300m flash forward 157.76 TFLOP/s.*llama300m flash backward 197.20 TFLOP/s" && echo "$b" | grep -q "the wgmma kernels broke dev_attention --bench-only off (.*illegal instruction.*), its figures above from --no-sm90; --attention flash_sm90: llama300m 18.000 ms/step" && ! echo "$b" | grep -q "17.53"' \
    "$(row_of bench_attention "$S") $(why "$TMP/broke/out")"
check gpu_check.sm90_broke_no_ablation '[ "$(result_of ablate_attention "$S")" = SKIP ] && detail_of ablate_attention "$S" | grep -q "the wgmma kernels broke dev_attention.s run off" && ! grep -q -- "--ablate" "$TMP/broke/args"' \
    "$(row_of ablate_attention "$S")"

# --- what the emulation needs (as test_cuda_emulated.sh)
CUDA_INC=${CUDA_HOME:-/usr/local/cuda}/include
EMU_WHY=""
for h in cuda_runtime.h cublasLt.h cusolverDn.h; do [ -f "$CUDA_INC/$h" ] || EMU_WHY="no $h under $CUDA_INC"; done
[ -f "$CUDA_INC/nccl.h" ] || [ -f /usr/include/nccl.h ] || EMU_WHY="no nccl.h"
command -v mpicxx >/dev/null 2>&1 || EMU_WHY="no MPI"
[ "$(uname -m)" = x86_64 ] || EMU_WHY="dev/emu runs on x86-64 only"
command -v cc >/dev/null 2>&1 || EMU_WHY="no C compiler for the stand-in programs"
EMU=${GPU_CHECK_EMU:-$ROOT/build/emu}

if [ -n "$EMU_WHY" ]; then
    skip gpu_check.emulated "$EMU_WHY"
else
    if ! make --no-print-directory train_llama_cpu >"$TMP/make_cpu.log" 2>&1; then
        fail gpu_check.cpu_engine_builds "$(tail -3 "$TMP/make_cpu.log")"
    fi
    # the emulated programs (make test builds them first; dev/emu/build.sh rebuilds only when stale)
    bash dev/emu/build.sh "$EMU" >"$TMP/emu_build.log" 2>&1 || fail gpu_check.emu_build "$(grep -m3 -E 'error|failed' "$TMP/emu_build.log")"

    # --- the reference curves of the emulated flags, by the CPU engine
    EMULATE=1 bash dev/gpu_check.sh --refs "$TMP/refs" >"$TMP/refs.out" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && grep -q '^kind emulated' "$TMP/refs/flags.txt" && [ "$(grep -c '^run ' "$TMP/refs/flags.txt")" -eq 7 ] &&
       [ "$(grep -c trl: "$TMP/refs/tiny/main.log")" -eq 4 ] && [ "$(grep -c train_loss "$TMP/refs/mode_kfac/metrics.jsonl")" -eq 3 ]; then
        pass "gpu_check.refs_made: 7 runs, flags recorded"
    else fail gpu_check.refs_made "rc=$rc $(why "$TMP/refs.out")"; fi
    EMULATE=1 GPU_CHECK_EMU="$EMU" bash dev/gpu_check.sh --refs "$TMP/refs" >"$TMP/refs2.out" 2>&1
    check gpu_check.refs_kept_when_up_to_date 'grep -q "is up to date" "$TMP/refs2.out"' "$(why "$TMP/refs2.out")"

    # --- --env: the libraries row's search as one export line, with which the GPU build's
    #     binaries resolve every library they name (no RPATH: started by hand, they need it)
    if [ -x build/gpu/train_llama ] && command -v ldd >/dev/null 2>&1; then
        envline=$(bash dev/gpu_check.sh --env 2>"$TMP/env.err")
        rc=$?
        unresolved=$(eval "$envline" && ldd build/gpu/train_llama 2>&1 | grep -c "not found")
        check gpu_check.env_exports_library_path '[ $rc -eq 0 ] && [ "$(echo "$envline" | wc -l)" -eq 1 ] && [[ "$envline" == "export LD_LIBRARY_PATH="* ]] && [ "$unresolved" -eq 0 ]' \
            "rc=$rc '$envline' $unresolved unresolved $(head -c 200 "$TMP/env.err")"
    else skip gpu_check.env_exports_library_path "build/gpu/train_llama not built (nvcc missing) or no ldd"; fi

    # --- the emulated run; $OUT watched while it runs
    mkdir -p "$TMP/out"
    ONLY='^(tiny|mode_geofp8|bitwise|skip_nan_loss|dev_swiglu|test_(blas_shim|fp8_device)|(memcheck|racecheck)(_attention)?|bench_.*|ablate_attention|scaling_model|torch_.*)$'
    OUT=$TMP/out EMULATE=1 GPU_CHECK_EMU="$EMU" GPU_CHECK_REFS="$TMP/refs" GPU_CHECK_LOGS="$TMP/logs" GPU_CHECK_ONLY="$ONLY" \
        timeout 900 bash dev/gpu_check.sh >"$TMP/emu.out" 2>&1 &
    pid=$!
    seen_live=0
    while kill -0 $pid 2>/dev/null; do
        n=$(grep -c '^| ' "$TMP/out/gpu_check_results.txt" 2>/dev/null)
        [ "${n:-0}" -gt "$seen_live" ] && kill -0 $pid 2>/dev/null && seen_live=$n
        sleep 1
    done
    wait $pid
    rc=$?
    R=$TMP/logs/results.txt
    check gpu_check.emulated_exit_0 '[ $rc -eq 0 ]' "rc=$rc: $(grep -E '\| FAIL' "$R" | head -3) $(why "$TMP/emu.out")"
    keys=$(grep '^| ' "$R" | tail -n +2 | cut -d'|' -f2 | tr -d ' ' | tr '\n' ' ')
    # shellcheck disable=SC2034  # read by check's eval
    want="gpu nvcc libraries refs binaries dev_swiglu test_blas_shim test_fp8_device tiny mode_geofp8 bitwise skip_nan_loss bench_d12 bench_llama300m bench_llama600m bench_attention torch_d12 torch_llama300m torch_llama600m ablate_attention bench_buckets bench_geofp8 bench_virtual_ranks scaling_model memcheck racecheck memcheck_attention racecheck_attention "
    check gpu_check.emulated_rows_in_order '[ "$keys" = "$want" ]' "rows: $keys"
    bad_time=$(grep '^| ' "$R" | tail -n +2 | awk -F' [|] ' '$3 !~ /^ *[0-9]+(\.[0-9])? s$/' | head -2)
    check gpu_check.emulated_rows_have_seconds '[ -z "$bad_time" ]' "$bad_time"
    for k in libraries refs binaries test_blas_shim test_fp8_device tiny mode_geofp8 bitwise skip_nan_loss; do
        check "gpu_check.emulated_$k" '[ "$(result_of $k "$R")" = PASS ]' "$(row_of $k "$R")"
    done
    # the loss rows print their measurement against their bound
    tiny_rel=$(detail_of tiny "$R" | sed -n 's/.*max rel \([0-9.e+-]*\) (step.*/\1/p')
    if [ -n "$tiny_rel" ] && awk -v x="$tiny_rel" 'BEGIN { exit !(x >= 0 && x <= 5e-3) }'; then
        pass "gpu_check.emulated_tiny_measured: max rel $tiny_rel, bound 5e-3 (4 steps, bf16 against fp32)"
    else fail gpu_check.emulated_tiny_measured "no max rel in: $(detail_of tiny "$R")"; fi
    # the wgmma kernels' ablation, emulated: its checks only (each variant leaves out what it says)
    check gpu_check.emulated_ablate_attention_checks '[ "$(result_of ablate_attention "$R")" = PASS ] && detail_of ablate_attention "$R" | grep -qx "12 checks passed (emulated: --small, the checks only, no times)"' \
        "$(row_of ablate_attention "$R")"
    check gpu_check.emulated_mode_labelled 'detail_of mode_geofp8 "$R" | grep -q "^orchestration only (1 rank): max rel"' "$(detail_of mode_geofp8 "$R")"
    for k in dev_swiglu memcheck racecheck memcheck_attention racecheck_attention bench_d12 bench_llama600m bench_attention bench_buckets scaling_model torch_llama300m; do
        check "gpu_check.emulated_${k}_skipped_with_reason" '[ "$(result_of $k "$R")" = SKIP ] && detail_of $k "$R" | grep -q "^emulated: ."' "$(row_of $k "$R")"
    done
    check gpu_check.results_in_out_while_running '[ "$seen_live" -ge 5 ]' "$seen_live rows seen in \$OUT before the end"
    check gpu_check.results_in_out_at_end 'cmp -s "$R" "$TMP/out/gpu_check_results.txt"' "differs from $R"
    nfiles=$(find "$TMP/out" -type f | wc -l)
    tarsize=$(stat -c %s "$TMP/out/gpu_check_logs.tar.gz" 2>/dev/null || echo 0)
    check gpu_check.logs_tarred_to_out '[ $nfiles -le 8 ] && [ $tarsize -gt 0 ] && [ $tarsize -le 16777216 ] && tar -tzf "$TMP/out/gpu_check_logs.tar.gz" | grep -q "tiny/metrics.jsonl" && ! tar -tzf "$TMP/out/gpu_check_logs.tar.gz" | grep -q "\.bin$"' \
        "$nfiles files in \$OUT, tar $tarsize bytes"

    # --- failure paths
    # a corrupted reference curve: step 2 of mode_bf16 1% off
    cp -r "$TMP/refs" "$TMP/refs_bad"
    awk '/"step": 2,/ { match($0, /"train_loss": [0-9.e+-]+/); v = substr($0, RSTART + 14, RLENGTH - 14); sub(/"train_loss": [0-9.e+-]+/, "\"train_loss\": " v * 1.01) } { print }' \
        "$TMP/refs/mode_bf16/metrics.jsonl" >"$TMP/refs_bad/mode_bf16/metrics.jsonl"
    EMULATE=1 GPU_CHECK_EMU="$EMU" GPU_CHECK_REFS="$TMP/refs_bad" GPU_CHECK_LOGS="$TMP/logs_bad" GPU_CHECK_ONLY='^mode_bf16$' \
        timeout 600 bash dev/gpu_check.sh >"$TMP/bad_ref.out" 2>&1
    rc=$?
    # |cpu - cpu * 1.01| / (cpu * 1.01) = 9.9e-3 at step 2, plus the emulation's own 1e-4
    check gpu_check.corrupted_ref_fails '[ $rc -eq 1 ] && [ "$(result_of mode_bf16 "$TMP/logs_bad/results.txt")" = FAIL ] && detail_of mode_bf16 "$TMP/logs_bad/results.txt" | grep -qE "max rel (9\.[89]e-03|1\.0e-02) \(step 2\)"' \
        "rc=$rc $(row_of mode_bf16 "$TMP/logs_bad/results.txt")"

    # stand-ins: a train_llama that needs a library nobody has; a check program with a failing check;
    # a train_llama that answers --help and then hangs
    mkdir -p "$TMP/emu_bad" "$TMP/emu_hang" "$TMP/lib"
    ln -s "$EMU/src" "$TMP/emu_bad/src"; ln -s "$EMU/src" "$TMP/emu_hang/src"
    ln -s "$EMU/test_llama_gpu" "$TMP/emu_bad/test_llama_gpu"; ln -s "$EMU/test_llama_gpu" "$TMP/emu_hang/test_llama_gpu"
    ln -s "$EMU/dev_geofp8" "$TMP/emu_hang/dev_geofp8"
    echo 'int gpu_check_absent(void) { return 1; }' >"$TMP/absent.c"
    printf '%s\n' 'int gpu_check_absent(void);' 'int main(void) { return gpu_check_absent(); }' >"$TMP/needs.c"
    printf '%s\n' '#include <stdio.h>' '#include <string.h>' '#include <unistd.h>' \
        'int main(int argc, char** argv) { if (argc > 1 && !strcmp(argv[1], "--help")) { puts("usage: stand-in"); return 0; } sleep(600); return 0; }' >"$TMP/hang.c"
    printf '%s\n' '#!/bin/sh' 'echo "PASS stand_in.one"' 'echo "FAIL stand_in.two: off by 3"' 'exit 1' >"$TMP/emu_bad/dev_geofp8"
    chmod +x "$TMP/emu_bad/dev_geofp8"
    if cc -shared -fPIC "$TMP/absent.c" -o "$TMP/lib/libgpu_check_absent.so" && cc "$TMP/needs.c" -L"$TMP/lib" -lgpu_check_absent -o "$TMP/emu_bad/train_llama" &&
       cc "$TMP/hang.c" -o "$TMP/emu_hang/train_llama"; then
        rm -f "$TMP/lib/libgpu_check_absent.so"
        t0=$(date +%s)
        EMULATE=1 GPU_CHECK_EMU="$TMP/emu_bad" GPU_CHECK_REFS="$TMP/refs" GPU_CHECK_LOGS="$TMP/logs_load" GPU_CHECK_REBUILD=0 \
            GPU_CHECK_ONLY='^(dev_geofp8|tiny)$' timeout 300 bash dev/gpu_check.sh >"$TMP/load.out" 2>&1
        rc=$?; dt=$(( $(date +%s) - t0 ))
        L=$TMP/logs_load/results.txt
        check gpu_check.unloadable_binary_fails '[ $rc -eq 1 ] && [ "$(result_of binaries "$L")" = FAIL ] && detail_of binaries "$L" | grep -q "train_llama (needs libgpu_check_absent.so: not found)"' \
            "rc=$rc $(row_of binaries "$L")"
        check gpu_check.no_rebuild_when_told '[ "$(result_of rebuild "$L")" = SKIP ] && detail_of rebuild "$L" | grep -q GPU_CHECK_REBUILD=0' "$(row_of rebuild "$L")"
        check gpu_check.unloadable_binary_rows_fail '[ "$(result_of tiny "$L")" = FAIL ] && detail_of tiny "$L" | grep -q "train_llama does not load"' "$(row_of tiny "$L")"
        check gpu_check.failing_check_counted '[ "$(result_of dev_geofp8 "$L")" = FAIL ] && detail_of dev_geofp8 "$L" | grep -q "^1 of 2 failed (exit 1): stand_in.two: off by 3"' "$(row_of dev_geofp8 "$L")"
        check gpu_check.failure_paths_quick '[ $dt -le 60 ]' "$dt s"

        t0=$(date +%s)
        EMULATE=1 GPU_CHECK_EMU="$TMP/emu_hang" GPU_CHECK_REFS="$TMP/refs" GPU_CHECK_LOGS="$TMP/logs_hang" GPU_CHECK_TIMEOUT=5 \
            GPU_CHECK_ONLY='^tiny$' timeout 300 bash dev/gpu_check.sh >"$TMP/hang.out" 2>&1
        rc=$?; dt=$(( $(date +%s) - t0 ))
        H=$TMP/logs_hang/results.txt
        check gpu_check.hang_times_out '[ $rc -eq 1 ] && [ "$(result_of tiny "$H")" = FAIL ] && detail_of tiny "$H" | grep -q "timed out after 5 s" && [ $dt -le 60 ]' \
            "rc=$rc after $dt s: $(row_of tiny "$H")"
    else
        fail gpu_check.stand_ins_build "cc failed"
    fi
    # a spent budget: the check is not started
    EMULATE=1 GPU_CHECK_EMU="$EMU" GPU_CHECK_REFS="$TMP/refs" GPU_CHECK_LOGS="$TMP/logs_budget" GPU_CHECK_BUDGET=1 GPU_CHECK_ONLY='^tiny$' \
        timeout 120 bash dev/gpu_check.sh >"$TMP/budget.out" 2>&1
    B=$TMP/logs_budget/results.txt
    check gpu_check.budget_spent_skips '[ "$(result_of tiny "$B")" = SKIP ] && detail_of tiny "$B" | grep -q "time budget spent"' "$(row_of tiny "$B")"

    # --- the compute-sanitizer rows on reports in compute-sanitizer's layout (no GPU here): a
    #     stand-in prints a fixture as the sanitizer's output and exits as compute-sanitizer does
    #     (--error-exitcode 99 once anything is reported), and logs what it was asked to run. The
    #     nvjet_* reports open with the lines the H200 printed (its racecheck rows in
    #     dev/gpu_baseline.txt); the rest follow the two layouts of compute-sanitizer's racecheck
    #     reports ("NAME+0xOFF in FILE:LINE", and the older "0xOFF in FILE:LINE:NAME") and its
    #     hazard-level report (Thread lines).
    printf '%s\n' '#!/bin/sh' '# stand-in compute-sanitizer: --tool TOOL --error-exitcode N PROGRAM ARGS...' \
        'tool=$2; prog=$(basename "$5"); shift 5' 'echo "$tool $prog $*" >>"$RACE_FIXTURES/args"' \
        'cat "$RACE_FIXTURES/${tool}_$prog.log"' 'exit "$(cat "$RACE_FIXTURES/${tool}_$prog.rc")"' >"$TMP/sanitizer"
    chmod +x "$TMP/sanitizer"
    fixture() { mkdir -p "$TMP/race_$1"; echo "$3" >"$TMP/race_$1/$2.rc"; cat >"$TMP/race_$1/$2.log"; }
    TRAIN_DONE='done: 1 steps, final train loss 10.874187, 1.4 s'
    ATTN_PASS='PASS dev_attention.flash.tiny.backward_dv: measured 1.923e-03, bound 0.015 (max rel err)'
    NVJET_A='========= Error: Race reported between Read access at nvjet_sm90_tst_64x32_64x16_1x2_h_bz_splitK_NNT+0xb20
=========     and Write access at nvjet_sm90_tst_64x32_64x16_1x2_h_bz_splitK_NNT+0x1c40 [64 hazards]
========='
    NVJET_B='========= Error: Race reported between Read access at nvjet_sm90_tst_32x64_64x16_2x1_v_bz_NNN+0xb00
=========     and Write access at nvjet_sm90_tst_32x64_64x16_2x1_v_bz_NNN+0x1d80 [16 hazards]
=========     and Read access at nvjet_sm90_tst_32x64_64x16_2x1_v_bz_NNN+0x1e10 [8 hazards]
========='
    # clean: memcheck without errors; the trainer's racecheck reports only cuBLAS's kernels (one
    # of them in the older layout); dev_attention's none
    fixture clean memcheck_train_llama 0 <<EOF
========= COMPUTE-SANITIZER
$TRAIN_DONE
========= ERROR SUMMARY: 0 errors
EOF
    fixture clean racecheck_train_llama 99 <<EOF
========= COMPUTE-SANITIZER
$TRAIN_DONE
$NVJET_A
========= Error: Race reported between Write access at 0x1a30 in void cublasLt::splitKreduce_kernel<(int)32, (int)16, int, float, __nv_bfloat16, float, __nv_bfloat16, (bool)1, (bool)0, (bool)0>(cublasLt::cublasSplitKParams<T6>, const T4 *, const T5 *, T5 *)
=========     and Read access at 0x1b10 in void cublasLt::splitKreduce_kernel<(int)32, (int)16, int, float, __nv_bfloat16, float, __nv_bfloat16, (bool)1, (bool)0, (bool)0>(cublasLt::cublasSplitKParams<T6>, const T4 *, const T5 *, T5 *) [32 hazards]
=========
$NVJET_B
========= RACECHECK SUMMARY: 3 hazards displayed (3 errors, 0 warnings)
EOF
    fixture clean memcheck_dev_attention 0 <<EOF
========= COMPUTE-SANITIZER
$ATTN_PASS
========= ERROR SUMMARY: 0 errors
EOF
    fixture clean racecheck_dev_attention 0 <<EOF
========= COMPUTE-SANITIZER
$ATTN_PASS
========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
EOF
    # ours: a hazard-level report in one of the project's device functions (inlined into its
    # kernel), and a race in the flash backward, each beside cuBLAS's
    fixture ours racecheck_train_llama 99 <<EOF
========= COMPUTE-SANITIZER
$NVJET_A
========= Error: Potential WAW hazard detected at __shared__ 0x40 in block (3, 0, 0) :
=========     Write Thread (31, 0, 0) at 0x00000a70 in /src/llmc/mma.cuh:52:ldmatrix_x4(unsigned int *, const __nv_bfloat16 *)
=========     Write Thread (0, 1, 0) at 0x00000a70 in /src/llmc/mma.cuh:52:ldmatrix_x4(unsigned int *, const __nv_bfloat16 *)
=========     Current Value : 0, Incoming Value : 1
=========
$TRAIN_DONE
========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)
EOF
    fixture ours racecheck_dev_attention 99 <<EOF
========= COMPUTE-SANITIZER
$ATTN_PASS
========= Warning: Race reported between Read access at nvjet_sm90_tst_32x64_64x16_2x1_v_bz_NNN+0xb00
=========     and Write access at nvjet_sm90_tst_32x64_64x16_2x1_v_bz_NNN+0x1d80 [16 hazards]
=========
========= Error: Race reported between Write access at void flash_backward_kernel<(int)64>(__nv_bfloat16 *, const __nv_bfloat16 *, const float *, float *, unsigned int *, int, int, int, int, float)+0x1f30 in flash_attention.cuh:512
=========     and Read access at void flash_backward_kernel<(int)64>(__nv_bfloat16 *, const __nv_bfloat16 *, const float *, float *, unsigned int *, int, int, int, int, float)+0x2a80 in flash_attention.cuh:530 [128 hazards]
=========
========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)
EOF
    # broken: a report in a layout the parser does not know; a run that failed behind exit 99
    fixture broken racecheck_train_llama 99 <<EOF
========= COMPUTE-SANITIZER
$TRAIN_DONE
========= Error: Shared memory conflict between two threads of kernel flash_forward_kernel
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
EOF
    fixture broken racecheck_dev_attention 99 <<EOF
========= COMPUTE-SANITIZER
FAIL dev_attention.flash.tiny.backward_dq: measured 2.5e-01, bound 0.015 (max rel err)
$NVJET_B
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
EOF
    declare -A race_rc=()
    for sc in clean ours broken; do
        only='^(memcheck|racecheck)(_attention)?$'; [ $sc = clean ] || only='^racecheck(_attention)?$'
        RACE_FIXTURES=$TMP/race_$sc EMULATE=1 GPU_CHECK_EMU="$EMU" GPU_CHECK_REFS="$TMP/refs" GPU_CHECK_LOGS="$TMP/logs_race_$sc" \
            GPU_CHECK_SANITIZER="$TMP/sanitizer" GPU_CHECK_ONLY="$only" timeout 300 bash dev/gpu_check.sh >"$TMP/race_$sc.out" 2>&1
        race_rc[$sc]=$?
    done
    C=$TMP/logs_race_clean/results.txt; O=$TMP/logs_race_ours/results.txt; X=$TMP/logs_race_broken/results.txt
    check gpu_check.sanitizer_rows_pass_clean '[ ${race_rc[clean]} -eq 0 ] && [ "$(result_of memcheck "$C")" = PASS ] && [ "$(result_of memcheck_attention "$C")" = PASS ] && [ "$(result_of racecheck_attention "$C")" = PASS ]' \
        "rc=${race_rc[clean]} $(grep -E '^\| (mem|race)check' "$C")"
    check gpu_check.racecheck_ignores_cublas_kernels '[ "$(result_of racecheck "$C")" = PASS ] && detail_of racecheck "$C" | grep -q "(3 errors, 0 warnings): none in the project.s kernels; 3 in cuBLAS.s own kernels, ignored (nvjet_sm90_tst_64x32_64x16_1x2_h_bz_splitK_NNT, cublasLt::splitKreduce_kernel, nvjet_sm90_tst_32x64_64x16_2x1_v_bz_NNN)"' \
        "$(row_of racecheck "$C")"
    check gpu_check.racecheck_attention_flash_only 'grep -qx "racecheck dev_attention --small --flash-only" "$TMP/race_clean/args" && grep -qx "memcheck dev_attention --small" "$TMP/race_clean/args"' \
        "$(cat "$TMP/race_clean/args")"
    check gpu_check.racecheck_fails_on_ours '[ ${race_rc[ours]} -eq 1 ] && [ "$(result_of racecheck "$O")" = FAIL ] && detail_of racecheck "$O" | grep -q "1 in the project.s kernels, the first: Error: Potential WAW hazard .*:ldmatrix_x4(.*; 1 in cuBLAS.s own kernels, ignored (nvjet_sm90_tst_64x32_64x16_1x2_h_bz_splitK_NNT)"' \
        "rc=${race_rc[ours]} $(row_of racecheck "$O")"
    check gpu_check.racecheck_attention_fails_on_ours '[ "$(result_of racecheck_attention "$O")" = FAIL ] && detail_of racecheck_attention "$O" | grep -q "(1 error, 1 warning): 1 in the project.s kernels, the first: Error: Race reported between Write access at void flash_backward_kernel<(int)64>"' \
        "$(row_of racecheck_attention "$O")"
    check gpu_check.racecheck_unread_report_fails '[ ${race_rc[broken]} -eq 1 ] && [ "$(result_of racecheck "$X")" = FAIL ] && detail_of racecheck "$X" | grep -q "no hazard report this script reads"' \
        "rc=${race_rc[broken]} $(row_of racecheck "$X")"
    check gpu_check.racecheck_failed_run_fails '[ "$(result_of racecheck_attention "$X")" = FAIL ] && detail_of racecheck_attention "$X" | grep -q "ignored (nvjet_sm90_tst_32x64_64x16_2x1_v_bz_NNN), but the run failed (exit 99): FAIL dev_attention.flash.tiny.backward_dq"' \
        "$(row_of racecheck_attention "$X")"
fi

# --- the bundle
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ ! -x "$NVCC" ]; then
    skip gpu_check.bundle "no nvcc: the GPU binaries cannot be built here"
elif [ ! -f "$TMP/refs/flags.txt" ]; then
    skip gpu_check.bundle "no reference curves were made above (${EMU_WHY:-see the refs check})"
elif ! make --no-print-directory gpu >"$TMP/make_gpu.log" 2>&1; then
    fail gpu_check.make_gpu "$(grep -m3 -E 'error|Error' "$TMP/make_gpu.log")"
else
    # the emulated curves stand in for make gpu-refs (minutes of CPU); -o: make keeps them as they are
    BUNDLE=$TMP/bundle
    make --no-print-directory -o "$TMP/refs/flags.txt" gpu-bundle GPU_BUNDLE="$BUNDLE" GPU_REFS="$TMP/refs" >"$TMP/make_bundle.log" 2>&1
    rc=$?
    if [ $rc -ne 0 ] || [ ! -f "$BUNDLE/gpu_check.sh" ]; then
        fail gpu_check.make_gpu_bundle "rc=$rc $(tail -3 "$TMP/make_bundle.log")"
    else
        bytes=$(du -sb "$BUNDLE" | cut -f1)
        check gpu_check.bundle_size "[ $bytes -le $((48 * 1048576)) ]" "$bytes bytes, over 48 MiB"
        [ $failures -eq 0 ] && echo "gpu_check.bundle: $(awk -v b="$bytes" 'BEGIN { printf "%.1f MiB", b / 1048576 }'), $(wc -l <"$BUNDLE/MANIFEST") files"
        # NEEDED entries: the C/C++ runtime, the CUDA driver, cuBLAS(Lt), cuSOLVER, NCCL; cudart is static
        ALLOW='^(libc\.so\.6|libm\.so\.6|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libgomp\.so\.1|ld-linux-x86-64\.so\.2|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libcuda\.so\.1|libcublas\.so\.[0-9]+|libcublasLt\.so\.[0-9]+|libcusolver\.so\.[0-9]+|libnccl\.so\.2)$'
        nbin=0; others=""
        for b in "$BUNDLE"/bin/*; do
            nbin=$((nbin + 1))
            extra=$(readelf -d "$b" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | grep -vE "$ALLOW" | tr '\n' ' ')
            [ -n "$extra" ] && others="$others $(basename "$b"): $extra;"
            readelf -h "$b" >/dev/null 2>&1 || others="$others $(basename "$b"): not an ELF file;"
        done
        check gpu_check.bundle_needed_allowlist '[ -z "$others" ] && [ $nbin -ge 14 ]' "outside the allowlist:$others ($nbin binaries)"
        if command -v cuobjdump >/dev/null 2>&1 || [ -x "$(dirname "$NVCC")/cuobjdump" ]; then
            # shellcheck disable=SC2034  # read by check's eval
            CUOBJ=$(command -v cuobjdump || echo "$(dirname "$NVCC")/cuobjdump")
            check gpu_check.bundle_train_llama_has_sm90 '"$CUOBJ" --list-elf "$BUNDLE/bin/train_llama" 2>/dev/null | grep -q sm_90' "no sm_90 code in bin/train_llama"
        fi
        # every file the script names, every fixture the GPU programs open, every make gpu binary
        missing=$(bash "$BUNDLE/gpu_check.sh" --list-files | while read -r dst _; do [ -f "$BUNDLE/$dst" ] || echo "$dst"; done | tr '\n' ' ')
        for f in $(grep -oh 'test/fixtures/[A-Za-z0-9_.]*' test/*.cu dev/cuda/*.cu | sort -u) data/gpt2_tokenizer.bin; do
            [ -f "$BUNDLE/$f" ] || missing="$missing $f"
        done
        for pat in $(sed -n 's/^#define TRAIN_DEFAULT_[A-Z]*_DATA "\(.*\)"/\1/p' llmc/train_config.h); do
            compgen -G "$BUNDLE/$pat" >/dev/null || missing="$missing $pat"
        done
        for b in build/gpu/*; do [ -f "$b" ] && [ -x "$b" ] && { [ -f "$BUNDLE/bin/$(basename "$b")" ] || missing="$missing bin/$(basename "$b")"; }; done
        check gpu_check.bundle_holds_every_file_run '[ -z "${missing// /}" ]' "not in the bundle:$missing"

        # the bundle away from the repo: no GPU here, so its preflight and skips; the emulated
        # curves it carries were made with other flags, which its refs row names
        mkdir -p "$TMP/away" "$TMP/bout"
        cp -rp "$BUNDLE" "$TMP/away/bundle"
        OUT=$TMP/bout timeout 300 bash "$TMP/away/bundle/gpu_check.sh" >"$TMP/away.out" 2>&1
        rc=$?
        A=$TMP/away/bundle/out/results.txt
        fails=$(grep -E '^\| [a-z_0-9]+ +\| FAIL' "$A" | cut -d'|' -f2 | tr -d ' ' | tr '\n' ' ')
        check gpu_check.bundle_runs_away_from_repo '[ $rc -eq 1 ] && [ "$fails" = "refs " ] && [ "$(result_of bundle "$A")" = PASS ] && [ "$(result_of binaries "$A")" = PASS ] && [ "$(result_of libraries "$A")" = PASS ]' \
            "rc=$rc, FAIL rows: $fails; $(row_of bundle "$A") $(row_of binaries "$A") $(why "$TMP/away.out")"
        check gpu_check.bundle_refs_other_flags_named 'detail_of refs "$A" | grep -q "made with other flags"' "$(row_of refs "$A")"
        # the model the speed rows quote, from the bundle's own copy: the wgmma kernels' rows too
        abl=$(cd "$TMP/away/bundle" && python3 dev/flash_model.py --ablation --csv --shape llama300m 2>&1 | grep -c ',backward_sm90,')
        check gpu_check.bundle_model_knows_wgmma_kernels '[ "$abl" -eq 5 ]' "$abl backward_sm90 rows from the bundle's dev/flash_model.py --ablation"
        check gpu_check.bundle_no_device_skips '[ "$(result_of gpu "$A")" = SKIP ] && [ "$(result_of tiny "$A")" = SKIP ] && [ "$(result_of dev_matmul "$A")" = SKIP ] && [ "$(result_of bench_llama300m "$A")" = SKIP ]' \
            "$(row_of gpu "$A") $(row_of tiny "$A")"
        # a file changed after the bundle was made
        printf 'x' >>"$TMP/away/bundle/data/kjv/kjv_val_000000.bin"
        GPU_CHECK_ONLY='^$' timeout 120 bash "$TMP/away/bundle/gpu_check.sh" >/dev/null 2>&1
        check gpu_check.bundle_changed_file_named '[ "$(result_of bundle "$A")" = FAIL ] && detail_of bundle "$A" | grep -q "kjv_val_000000.bin"' "$(row_of bundle "$A")"
    fi
fi
echo "test_gpu_check: $(( $(date +%s) - T_START )) s"
[ "$failures" -eq 0 ]
