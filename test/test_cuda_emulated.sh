#!/usr/bin/env bash
# test_cuda_emulated.sh — the CUDA engine's code without a GPU: dev/emu builds train_llama.cu, the
# GPU model test and dev/cuda/geofp8.cu for the CPU (kernels run thread by thread, cuBLAS /
# cuSOLVER emulated, NCCL over MPI with one rank per emulated GPU; the tensor-core instructions of
# the flash attention kernels per the PTX ISA's fragment layouts), then
#   - test_llama_gpu: the GPU model against the PyTorch fixture and the CPU engine;
#   - test_fp8_device: the codecs in kernels against CUDA's conversions on all 2^32 float32
#     patterns (E4M3, E5M2, BF16) and the ml_dtypes fixture;
#   - dev_geofp8 --small: every GeoFP8 kernel against the CPU codec (codes bitwise, E4M3 and E5M2);
#   - test_mma_layout: the emulated tensor-core instructions against the PTX ISA's fragment tables,
#     and the GPU's NaN (0x7fffffff) from the float operations dev/emu computes itself;
#   - dev_rmsnorm (and the other layer tools dev/emu builds) --small: each kernel against its CPU
#     reference and against the version it replaced (dev/cuda/<op>.cu's version 1);
#   - dev_attention --small: the fused flash kernels and the cuBLAS path against the CPU attention
#     and each other, then again with every kernel's blocks run last first (flash bitwise the
#     same); tiny (GPT-2's vocabulary) trained 8 steps with --attention flash and
#     cublas, losses compared; dev_attention --small --ablate: the wgmma kernels' variants with
#     parts left out (timed on a GPU) leave out what they say;
#   - test_blas_shim: the CBLAS / LAPACKE calls of the CPU references, served by cuBLAS / cuSOLVER
#     in CUDA builds, against their definitions;
#   - from here on the small test model (test/testlib.py: tiny's layers, 1000 tokens; the
#     vocabulary only sizes wte and lm_head, whose kernels the attention rows run at full size):
#   - every -c mode, 2 ranks, 8 steps, against the CPU engine with the same flags: per-step loss
#     (bf16 compute against fp32), the same bytes on every step, the logged RelL2 near the CPU
#     engine's (bounds and their measured worst cases where they are checked); and the same run
#     with --virtual-ranks 2 in one process, every metrics field bitwise the 2 emulated GPUs';
#   - --virtual-ranks 4 bitwise 4 emulated GPUs (accumulation, a skipped NaN step, val loss), a
#     resume under virtual ranks bitwise, its refusals (too little GPU memory, several processes,
#     --muon-shard, another N on resume); scripts/study.py --engine gpu against the CPU engine;
#   - every unit its own gradient bucket (--bucket-mb 0.0001) bitwise the unbucketed run in each
#     kind of mode, on 2 and 4 emulated GPUs, with gradient accumulation and a skipped NaN step;
#   - a refresh's host waits counted by the emulator (at most 4 per refresh, none in the Nyström step)
#   - auto layer selection, bitwise resume of geofp8 with 2 ranks past a damaged newest checkpoint
#     (fallback to the intact one), the lock on -o, an injected NaN skipped by every rank, a lost
#     peer ending the job with one line, ranks with different flags (-l, --max-skips) refused over NCCL,
#     the Slurm id-file launch (no MPI in the trainer) and its settings check, a one-rank NCCL
#     communicator.
# What it cannot show (races between blocks, cuBLASLt algorithm choice, NCCL itself, speed) is what
# dev/gpu_check.sh checks on a GPU. Prints "PASS name" / "FAIL name: detail" lines.
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
CUDA_INC=${CUDA_HOME:-/usr/local/cuda}/include
for h in cuda_runtime.h cublasLt.h cusolverDn.h; do
    if [ ! -f "$CUDA_INC/$h" ]; then echo "SKIP test_cuda_emulated: no $h under $CUDA_INC (the CUDA toolkit's headers)"; exit 0; fi
done
if [ ! -f "$CUDA_INC/nccl.h" ] && [ ! -f /usr/include/nccl.h ]; then echo "SKIP test_cuda_emulated: no nccl.h"; exit 0; fi
if ! command -v mpicxx >/dev/null 2>&1 || ! command -v mpirun >/dev/null 2>&1; then echo "SKIP test_cuda_emulated: no MPI"; exit 0; fi
if [ "$(uname -m)" != x86_64 ]; then echo "SKIP test_cuda_emulated: dev/emu runs on x86-64 only"; exit 0; fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
source test/testlib.sh  # pass, fail, why, small_model
EMU=$ROOT/build/emu
if ! bash dev/emu/build.sh "$EMU" >"$TMP/build.log" 2>&1; then
    fail emu_build "$(grep -m3 -E 'error|failed' "$TMP/build.log")"; exit 1
fi
pass emu_build
CPU=$ROOT/train_llama_cpu
MPIRUN=(timeout 600 mpirun --oversubscribe)
# the small test model (test/testlib.py: tiny's layers, a 1000-token vocabulary)
small_model
cd "$EMU/src" || exit 1  # the rewritten sources, with data/ and test/fixtures linked
# the short run most rows below use: the small model, 8 steps of 64 tokens; TINY (GPT-2's
# vocabulary) for the attention rows, so that one emulated run trains on the whole vocabulary
STEPS=(-b 1 -t 32 -d 64 -x 8 -v 0 -s 0 -n -1 -l 3e-3 -u 2 --seed 1337 --fidelity-every 1 --geofp8-refresh 3)
RUN=("${SMALL[@]}" "${STEPS[@]}")
TINY=(-e tiny "${STEPS[@]}")
GEO=(--geofp8-layers layers.1.fc1,layers.2.fc2,layers.3.fc2 --geofp8-rank 8)

# --- the GPU model test and the GeoFP8 kernels, emulated
timeout 900 "$EMU/test_llama_gpu" >"$TMP/model.out" 2>&1
rc=$?
sed -n 's/^\(PASS\|FAIL\) /\1 emu.test_llama_gpu./p' "$TMP/model.out"
[ $rc -eq 0 ] || fail emu.test_llama_gpu_exit "rc=$rc $(why "$TMP/model.out")"
# dev/cuda/blas_shim (the CPU references' CBLAS / LAPACKE on cuBLAS / cuSOLVER) against the
# operations' definitions
timeout 300 "$EMU/test_blas_shim" >"$TMP/shim.out" 2>&1
rc=$?
sed -n 's/^\(PASS\|FAIL\) /\1 emu./p' "$TMP/shim.out"
[ $rc -eq 0 ] || fail emu.test_blas_shim_exit "rc=$rc $(why "$TMP/shim.out")"
# the FP8 / BF16 codecs as kernels: every float32 bit pattern against CUDA's own conversions
# (__nv_cvt_float_to_fp8 satfinite E4M3 and E5M2, __float2bfloat16_rn; their host implementations
# here, the cvt instructions on a GPU) and the fixture's ml_dtypes codes; about 35 s
timeout 600 "$EMU/test_fp8_device" >"$TMP/fp8dev.out" 2>&1
rc=$?
sed -n 's/^\(PASS\|FAIL\) /\1 emu./p' "$TMP/fp8dev.out"
[ $rc -eq 0 ] && [ "$(grep -c '^PASS' "$TMP/fp8dev.out")" -eq 10 ] || fail emu.test_fp8_device_exit "rc=$rc $(why "$TMP/fp8dev.out")"
timeout 900 "$EMU/dev_geofp8" --small >"$TMP/geofp8.out" 2>&1
rc=$?
np=$(grep -c '^PASS dev_geofp8' "$TMP/geofp8.out"); nf=$(grep -c '^FAIL' "$TMP/geofp8.out")
grep '^FAIL' "$TMP/geofp8.out" | sed 's/^FAIL /FAIL emu./'
if [ $rc -eq 0 ] && [ "$nf" -eq 0 ] && [ "$np" -gt 150 ]; then pass "emu.dev_geofp8_small: $np kernel checks against llmc/geofp8.h"
else fail emu.dev_geofp8_small "rc=$rc, $np passed, $nf failed: $(why "$TMP/geofp8.out")"; fi

# the instructions of llmc/mma.cuh as dev/emu runs them, against the PTX ISA (mma.m16n8k16 bf16
# and ldmatrix x4 and .trans against its fragment tables, cp.async of 16 and 8 bytes with zero
# fill, red.global.add.v4.f32 and its flush to zero, bar.sync of part of a block, mbarrier
# parity, wgmma with its shared-memory layouts); the warp reductions; a NaN from emu's own float
# operations is the GPU's 0x7fffffff; a launch past 48 KB of dynamic shared memory refused until
# the kernel opts in; and, here only, that a cp.async lands no earlier than its wait_group or its
# mbarrier's phase, and a wgmma's D no earlier than its wait
timeout 300 "$EMU/test_mma_layout" >"$TMP/mma.out" 2>&1
rc=$?
sed -n 's/^\(PASS\|FAIL\) /\1 emu./p' "$TMP/mma.out"
[ $rc -eq 0 ] && [ "$(grep -c '^PASS' "$TMP/mma.out")" -ge 53 ] || fail emu.test_mma_layout_exit "rc=$rc $(why "$TMP/mma.out")"
# both attention paths (flash: llmc/flash_attention.cuh on the instructions above; cublas) against
# llmc/attention.h and against each other: odd T at every head size, GQA groups 1-3, tiny (~5 s)
timeout 600 "$EMU/dev_attention" --small --dump "$TMP/attn_launch.bin" >"$TMP/attn.out" 2>&1
rc=$?
sed -n 's/^\(PASS\|FAIL\) /\1 emu./p' "$TMP/attn.out"
np=$(grep -c '^PASS dev_attention' "$TMP/attn.out")
[ $rc -eq 0 ] && [ "$np" -ge 60 ] || fail emu.dev_attention_small_exit "rc=$rc, $np passed: $(why "$TMP/attn.out")"
# the same shapes, flash only (--flash-only: the same dump, 13 s against 46 s with the cuBLAS
# path), with the blocks of every kernel run last first, the lowest-numbered threads of a
# block run as far ahead as their waits let them (EMU_THREAD_ORDER=low) and each cp.async landing
# at issue (EMU_CP_ASYNC=early): the flash outputs bitwise those of launch order (the backward's
# dQ sums follow its tickets, not the order blocks start in; no stage is reused before every
# thread is done with it). Without one of the pipelines' waits (the forward's wait for a free
# stage, the backward's for its query tile's copies or for a drained dQ stage, or the writer's
# for a full one) this run fails.
EMU_BLOCK_ORDER=reverse EMU_THREAD_ORDER=low EMU_CP_ASYNC=early timeout 600 "$EMU/dev_attention" --small --flash-only --dump "$TMP/attn_reverse.bin" >"$TMP/attn_reverse.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && [ -s "$TMP/attn_launch.bin" ] && cmp -s "$TMP/attn_launch.bin" "$TMP/attn_reverse.bin"; then
    pass emu.flash_bitwise_blocks_reversed_low_threads_ahead_copies_early
else fail emu.flash_bitwise_blocks_reversed_low_threads_ahead_copies_early "rc=$rc, $(stat -c %s "$TMP/attn_launch.bin" "$TMP/attn_reverse.bin" 2>&1 | tr '\n' ' ')$(cmp "$TMP/attn_launch.bin" "$TMP/attn_reverse.bin" 2>&1 | head -1) $(why "$TMP/attn_reverse.out")"; fi

# dev_attention --ablate's variants of the wgmma kernels (parts left out, for timing on a GPU), in
# reversed block order: each leaves out what it says (what that part feeds differs from the kernel
# as built, the rest bitwise the same) and ends (no wait left without its arrival); about 2 s
EMU_BLOCK_ORDER=reverse EMU_THREAD_ORDER=low timeout 300 "$EMU/dev_attention" --small --ablate >"$TMP/ablate.out" 2>&1
rc=$?
sed -n 's/^\(PASS\|FAIL\) /\1 emu./p' "$TMP/ablate.out"
np=$(grep -c '^PASS dev_attention.ablate' "$TMP/ablate.out")
[ $rc -eq 0 ] && [ "$np" -eq 12 ] || fail emu.dev_attention_ablate_exit "rc=$rc, $np passed (expected 12): $(why "$TMP/ablate.out")"

# dev/emu's checks of a kernel's wgmma: one without a wgmma.fence before it, a thread that ends
# without waiting for its wgmma; an operand stored with no fence.proxy.async before the wgmma, or
# with one only after its issue, and a warpgroup half of which fences (not modelled); cp.async copies
# an mbarrier landed, fenced before the wait for them (the fence orders nothing of other threads'
# copies it has not waited for); a cp.async
# past the launch's dynamic shared memory; a cp.async source, a load128 and a store128 off their
# alignment (on a GPU: a misaligned address)
for misuse in "no-fence|wgmma_misuse_kernel: a wgmma without a wgmma.fence" "no-wait|wgmma_misuse_kernel: a thread ends with 1 wgmma not waited for" \
              "no-proxy-fence|wgmma_proxy_misuse_kernel: a wgmma operand at byte [0-9]* of the dynamic shared memory holds a store the async proxy has not seen" \
              "late-proxy-fence|wgmma_proxy_misuse_kernel: a wgmma operand at byte [0-9]* of the dynamic shared memory was fenced to the async proxy only after the wgmma's issue" \
              "partial-proxy-fence|wgmma_proxy_misuse_kernel: the threads of warpgroup 0 executed fence.proxy.async different numbers of times" \
              "proxy-fence-before-wait|wgmma_landed_kernel: a wgmma operand at byte [0-9]* of the dynamic shared memory holds a cp.async copy that phase 0 of the mbarrier at byte [0-9]* landed" \
              "cp-async-past-smem|cp_async_past_smem_kernel: a cp.async writes bytes 64.. of the dynamic shared memory, past the launch's 64" \
              "cp-async-misaligned-source|misaligned_kernel: cp.async source 0x[0-9a-f]* not 16-byte aligned" \
              "load128-misaligned|misaligned_kernel: load128 at 0x[0-9a-f]*, not on a multiple of its 16 bytes" \
              "store128-misaligned|misaligned_kernel: store128 at 0x[0-9a-f]*, not on a multiple of its 16 bytes"; do
    opt=--emu-wgmma-${misuse%%|*} name=emu.wgmma_${misuse%%|*}_stops
    [[ $misuse == cp-async* || $misuse == *128-* ]] && opt=--emu-${misuse%%|*} name=emu.${misuse%%|*}_stops
    { timeout 60 "$EMU/test_mma_layout" "$opt" >"$TMP/misuse.out" 2>&1; } 2>/dev/null
    rc=$?
    if [ $rc -ne 0 ] && grep -q "^EMU FATAL: kernel ${misuse#*|}" "$TMP/misuse.out"; then pass "$name"
    else fail "$name" "rc=$rc: $(why "$TMP/misuse.out")"; fi
done
# the same copies fenced after the wait: the wgmma reads them
{ timeout 60 "$EMU/test_mma_layout" --emu-wgmma-proxy-fence-after-wait >"$TMP/landed.out" 2>&1; } 2>/dev/null
rc=$?
[ $rc -eq 0 ] && pass emu.wgmma_proxy_fence_after_wait_runs || fail emu.wgmma_proxy_fence_after_wait_runs "rc=$rc: $(why "$TMP/landed.out")"

# dev/emu's orders and landing named wrong: one line naming the variable, a failed exit
for var in EMU_BLOCK_ORDER EMU_THREAD_ORDER EMU_CP_ASYNC; do
    # (EMU FATAL aborts: the shell's "Aborted" notice goes to /dev/null, not the test's output)
    { env "$var=sideways" timeout 60 "$EMU/test_mma_layout" >"$TMP/badenv.out" 2>&1; } 2>/dev/null
    rc=$?
    if [ $rc -ne 0 ] && grep -q "^EMU FATAL: $var: expected .*, found 'sideways'" "$TMP/badenv.out"; then pass "emu.bad_$var"
    else fail "emu.bad_$var" "rc=$rc: $(why "$TMP/badenv.out")"; fi
done

# the layer and optimizer kernels dev/emu builds, at their small shapes (the odd ones and tiny):
# each against its CPU reference and against the version it replaced, which dev/cuda/<op>.cu keeps
# as version 1 (rmsnorm's one-pass backward: dinp bitwise version 1's, dweight bitwise the
# two-kernel path's; the cross-entropy backward with the row in shared memory bitwise the one that
# re-reads it; rope's 16-byte runs bitwise the pair-per-thread kernel; Muon's Newton-Schulz
# without copies bitwise the one with them, and near the one with X Xᵀ and S S as one product
# each; Muon's memory passes (the norm in the momentum, W's orientation) bitwise the transposing
# ones; the 16-byte sum of squares near the one-float one; matmul's autotuning bitwise the untuned GEMMs, its trials on the 3 candidates dev/emu
# offers, one of which differs; the update reading the clip's scale bitwise a clip pass before
# it); the fewest PASS lines each must print
for spec in rmsnorm:65 crossentropy:28 rope:14 muon:68 matmul:42 global_norm:8 adamw:16; do
    op=${spec%%:*}; want=${spec#*:}
    timeout 300 "$EMU/dev_$op" --small >"$TMP/dev_$op.out" 2>&1
    rc=$?
    np=$(grep -c "^PASS dev_$op" "$TMP/dev_$op.out"); nf=$(grep -c '^FAIL' "$TMP/dev_$op.out")
    grep '^FAIL' "$TMP/dev_$op.out" | sed 's/^FAIL /FAIL emu./'
    if [ $rc -eq 0 ] && [ "$nf" -eq 0 ] && [ "$np" -ge "$want" ]; then pass "emu.dev_${op}_small: $np checks"
    else fail "emu.dev_${op}_small" "rc=$rc, $np passed (want $want), $nf failed: $(why "$TMP/dev_$op.out")"; fi
done
# dev_muon's --compare path (what dev/bench_small_kernels.sh runs on a GPU) at tiny's shapes: its
# bitwise checks of Newton-Schulz and of the memory passes, one COMPARE line each per group (the
# emulated times mean nothing)
timeout 300 "$EMU/dev_muon" --compare --small >"$TMP/dev_muon_cmp.out" 2>&1
rc=$?
np=$(grep -c '^PASS dev_muon.compare.tiny' "$TMP/dev_muon_cmp.out"); nc=$(grep -c '^COMPARE ' "$TMP/dev_muon_cmp.out")
if [ $rc -eq 0 ] && [ "$np" -eq 8 ] && [ "$nc" -eq 8 ]; then pass "emu.dev_muon_compare_small: $np checks, $nc COMPARE lines"
else fail emu.dev_muon_compare_small "rc=$rc, $np passed (want 8), $nc COMPARE lines (want 8): $(why "$TMP/dev_muon_cmp.out")"; fi

# --attention flash (the default at tiny's head size 32) trains as the unfused cublas path: the
# same 8 steps on one emulated GPU, per-step losses within bf16 tolerance, the choice in the table
for a in flash cublas; do
    timeout 600 "$EMU/train_llama" "${TINY[@]}" --attention $a -o "$TMP/attn_$a" >"$TMP/attn_$a.out" 2>&1 ||
        fail "emu.attention_${a}_runs" "$(why "$TMP/attn_$a.out")"
done
if grep -q '^| attention *| flash, fused (--attention flash, head size 32)' "$TMP/attn_flash.out" &&
   grep -q '^| attention *| cublas, unfused (--attention cublas' "$TMP/attn_cublas.out"; then pass emu.attention_in_config_table
else fail emu.attention_in_config_table "$(grep '^| attention' "$TMP/attn_flash.out" "$TMP/attn_cublas.out")"; fi
# --attention flash_sm90 (the wgmma kernels: head sizes 64 and 128) at tiny's 32: one line, exit 1, nothing written
timeout 60 "$EMU/train_llama" "${TINY[@]}" --attention flash_sm90 -o "$TMP/attn_sm90" >"$TMP/attn_sm90.out" 2>&1
rc=$?
if [ $rc -eq 1 ] && [ "$(grep -c '^error: ' "$TMP/attn_sm90.out")" -eq 1 ] && [ ! -e "$TMP/attn_sm90/metrics.jsonl" ] &&
   grep -q "^error: --attention flash_sm90: the wgmma kernels need head size 64 or 128 (this model's is 32)" "$TMP/attn_sm90.out"; then
    pass emu.attention_flash_sm90_refused_at_head_size_32
else fail emu.attention_flash_sm90_refused_at_head_size_32 "rc=$rc: $(why "$TMP/attn_sm90.out")"; fi
python3 - "$TMP/attn_flash/metrics.jsonl" "$TMP/attn_cublas/metrics.jsonl" "$ROOT" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[3] + "/test")
from testlib import bound
def losses(p):
    try:
        return {r["step"]: r["train_loss"] for r in map(json.loads, open(p)) if "train_loss" in r}
    except OSError:
        return {}
f, c = losses(sys.argv[1]), losses(sys.argv[2])
if len(f) != 8 or len(c) != 8:
    print(f"FAIL emu.attention_flash_vs_cublas_losses: {len(f)} and {len(c)} logged steps, expected 8"); sys.exit()
# bf16 P and dS are rounded at different points (per key tile in registers against whole rows
# in HBM), so the two paths differ by bf16 noise: worst 2.0e-4 over the seven OpenBLAS kernel
# families of dev/tolerance_sweep.py (OpenBLAS serves the emulated cuBLAS GEMMs), 3.1x across
# them; the mode rows below see up to 2.2e-4 for bf16 against fp32 compute
bound("emu.attention_flash_vs_cublas_losses", max(abs(f[s] - c[s]) / c[s] for s in c), 3e-3, "max rel diff over 8 steps")
PY

# --- every mode, 2 ranks, against the CPU engine
# (geofp8:auto and geofp8:ema: the native sum with --geofp8-power auto / --geofp8-ema 0.9; the
# :e5m2 modes: the native sum of E5M2 codes, --fp8-format e5m2, whose RelL2 is about twice E4M3's,
# so a run that kept E4M3 misses the RelL2 bound below; fp8:ef: the native sum with --fp8-ef 1)
for m in fp32 bf16 fp8 fp8block geofp8 kfac fp8:twophase geofp8:twophase geofp8:auto geofp8:ema fp8:e5m2 geofp8:e5m2 fp8:ef; do
    mode=${m%%:*}; red=native; [[ $m == *:* ]] && red=${m#*:}
    t=${mode}_$red
    extra=(); [ "$mode" = geofp8 ] && extra=("${GEO[@]}")
    if [ "$red" = auto ]; then red=native; extra+=(--geofp8-power auto); fi
    if [ "$red" = ema ]; then red=native; extra+=(--geofp8-ema 0.9); fi
    if [ "$red" = e5m2 ]; then red=native; extra+=(--fp8-format e5m2); t=${mode}_e5m2; fi
    if [ "$red" = ef ]; then red=native; extra+=(--fp8-ef 1); t=${mode}_ef; fi
    dump=(); [ "$t" = geofp8_native ] && mkdir -p "$TMP/gdump" && dump=(env TRAIN_LLAMA_TEST_DUMP_GEO="$TMP/gdump")
    "${MPIRUN[@]}" -np 2 "${dump[@]}" "$EMU/train_llama" "${RUN[@]}" "${extra[@]}" -c "$mode" --fp8-reduce $red -o "$TMP/g_$t" >"$TMP/g_$t.out" 2>&1 ||
        fail "emu.mode_${t}_np2_runs" "$(why "$TMP/g_$t.out")"
    "${MPIRUN[@]}" -np 2 "$CPU" "${RUN[@]}" "${extra[@]}" -c "$mode" --fp8-reduce $red -o "$TMP/c_$t" >"$TMP/c_$t.out" 2>&1 ||
        fail "emu.mode_${t}_np2_cpu_runs" "$(why "$TMP/c_$t.out")"
    # the same 2 ranks as logical ranks of one process (--virtual-ranks 2): every metrics field but
    # the times bitwise the 2 emulated GPUs' (losses, bytes, RelL2 and every fidelity figure)
    timeout 300 "$EMU/train_llama" "${RUN[@]}" "${extra[@]}" -c "$mode" --fp8-reduce $red --virtual-ranks 2 -o "$TMP/v_$t" >"$TMP/v_$t.out" 2>&1
    differ=$(python3 "$ROOT/test/testlib.py" --same-metrics "$TMP/g_$t" "$TMP/v_$t" 2>&1) &&
        grep -q "| virtual ranks *| 2 logical ranks in this process, one GPU" "$TMP/v_$t.out" &&
        pass "emu.virtual_ranks_bitwise_${t}_n2" || fail "emu.virtual_ranks_bitwise_${t}_n2" "$differ $(why "$TMP/v_$t.out")"
    rm -rf "$TMP/v_$t"
    python3 - "$TMP/g_$t/metrics.jsonl" "$TMP/c_$t/metrics.jsonl" "emu.mode_${t}_np2" "$ROOT" <<'PY'
import json, math, sys
sys.path.insert(0, sys.argv[4] + "/test")
from testlib import bound
def rows(p):
    try:
        return {r["step"]: r for r in map(json.loads, open(p)) if "train_loss" in r}
    except OSError:
        return {}
g, c, name = rows(sys.argv[1]), rows(sys.argv[2]), sys.argv[3]
if len(g) != 8 or len(c) != 8:
    print(f"FAIL {name}_vs_cpu: {len(g)} and {len(c)} logged steps, expected 8"); sys.exit()
loss = max(abs(g[s]["train_loss"] - c[s]["train_loss"]) / c[s]["train_loss"] for s in c)
bad_bytes = [s for s in c if g[s]["comm_bytes"] != c[s]["comm_bytes"]]
fg = sum(g[s]["fidelity_rel_l2"] for s in c) / 8; fc = sum(c[s]["fidelity_rel_l2"] for s in c) / 8
# Worst cases over the seven OpenBLAS kernel families of dev/tolerance_sweep.py (the small model):
# fp32 1.7e-4, bf16 2.2e-4 (bf16 compute alone); the FP8 modes 9.1e-4..2.1e-3 (kfac), varying up
# to 3x with the kernel, because bf16 and fp32 gradients round to different FP8 codes: about 10x
# over that is 2e-2.
tol = 5e-3 if name.startswith(("emu.mode_fp32", "emu.mode_bf16")) else 2e-2
bound(f"{name}_losses_near_cpu", loss, tol, "max rel diff over 8 steps")
print(("PASS" if not bad_bytes else "FAIL") + f" {name}_same_bytes_as_cpu" + ("" if not bad_bytes else f": steps {bad_bytes}"))
# the mean RelL2 of the communicated gradient: within 7.3e-3 relative of the CPU engine's in every
# mode but kfac (the same sweep), whose factors come from bf16 activation statistics on the GPU
# (worst 4.4e-2, 9.5x across the kernels); a wrong transform or scale changes it by a factor
bound(f"{name}_rel_l2_near_cpu", abs(fg - fc) / fc if fc > 0 else (0.0 if abs(fg) <= 1e-12 else math.inf), 0.3,
      f"mean RelL2 {fg:.3e} vs cpu {fc:.3e}")
PY
done

# the fair fidelity figures of the GPU engine (gradcomm_gpu_fair_step: (a) geo as sent, (b) plain
# fp8 with its own error feedback, (c) without, per step and per window of 3 steps, the refresh
# interval), recomputed from the run's own dumps by test/fair_fidelity.py, as test_comm_modes does
# for the CPU engine
python3 "$ROOT/test/fair_fidelity.py" emu.fair_np2 "$TMP/gdump" "$TMP/g_geofp8_native/metrics.jsonl" 2 3 1 || failures=$((failures + 1))

# --geofp8-power auto: the powers rank 0 picked at each refresh (q from the device's G U) are near
# the CPU engine's: the same estimate (dev_geofp8 checks it to 1e-5 on the same G), here on the
# GPU engine's gradients (bf16 activations), which move p by up to 8.0e-3 (measured, the small
# model), bound 0.1;
# a wrong energy or fit moves it by far more (p spans [0, 1])
python3 - "$TMP/g_geofp8_auto.out" "$TMP/c_geofp8_auto.out" <<'PY'
import re, sys
def picks(p):
    return [(float(a), float(b)) for l in open(p) if l.startswith("geofp8 power at step") for a, b in re.findall(r"p (\S+) \(q (\S+)\)", l)]
g, c = picks(sys.argv[1]), picks(sys.argv[2])
worst = max((abs(x[0] - y[0]) for x, y in zip(g, c)), default=float("inf"))
ok = len(g) == len(c) == 9 and worst <= 0.1
print(("PASS" if ok else "FAIL") + f" emu.geofp8_power_auto_matches_cpu: {len(g)} choices (cpu {len(c)}), max |p_gpu - p_cpu| {worst:.1e}")
PY

# the plain-fp8 counterfactual on the geometry units (fidelity steps, native sum): logged on every
# step by both engines, the GPU's within 30% of the CPU's (bf16 compute; the same bound as RelL2)
python3 - "$TMP/g_geofp8_native/metrics.jsonl" "$TMP/c_geofp8_native/metrics.jsonl" "$TMP/g_geofp8_twophase/metrics.jsonl" <<'PY'
import json, sys
def vals(p):
    return [r.get("fidelity_rel_l2_geo_fp8") for r in map(json.loads, open(p)) if "train_loss" in r]
g, c, tp = vals(sys.argv[1]), vals(sys.argv[2]), vals(sys.argv[3])
ok = len(g) == len(c) == 8 and None not in g and None not in c and all(v is None for v in tp)
rel = abs(sum(g) / len(g) - sum(c) / len(c)) / (sum(c) / len(c)) if ok else float("inf")
print(("PASS" if ok and rel <= 0.3 else "FAIL") + f" emu.geofp8_plain_fp8_counterfactual_np2: mean {sum(g)/max(len(g),1):.3e} vs cpu "
      f"{sum(c)/max(len(c),1):.3e} (rel {rel:.2e}, bound 0.3); twophase logs none")
PY

# --- --fp8-ef 1, planted: geofp8 with p = 0 (the identity transform) on every linear unit and
#     --fp8-ef 1 on the rest is bitwise plain fp8 with --fp8-ef 1 (the flat buffer's error feedback
#     is the geometry path's; test_comm_modes shows it differs from plain fp8); 3 steps + resume + 3 == 6 straight
#     (the flat residuals in the state files: model, state files, every metrics field)
LIN=$(for l in 0 1 2 3; do for u in qkv proj fc1 fc2; do printf "layers.%s.%s," $l $u; done; done)
EF=("${RUN[@]}" -x 6 -n 3 --fp8-ef 1)
"${MPIRUN[@]}" -np 2 "$EMU/train_llama" "${EF[@]}" -c fp8 -o "$TMP/ef" >"$TMP/ef.out" 2>&1
"${MPIRUN[@]}" -np 2 "$EMU/train_llama" "${EF[@]}" -c geofp8 --geofp8-power 0 --geofp8-layers "${LIN%,}" -o "$TMP/efg0" >"$TMP/efg0.out" 2>&1
if cmp -s "$TMP/ef/model_00000006.bin" "$TMP/efg0/model_00000006.bin" && [ -f "$TMP/ef/model_00000006.bin" ]; then pass emu.fp8_ef_bitwise_geofp8_p0_every_linear_unit_np2
else fail emu.fp8_ef_bitwise_geofp8_p0_every_linear_unit_np2 "$(why "$TMP/efg0.out")"; fi
cp -r "$TMP/ef" "$TMP/efr"
rm -f "$TMP/efr/"*00000006*
python3 -c 'import json,sys; p=sys.argv[1]; k=[l for l in open(p) if json.loads(l).get("step", 0) <= 3]; open(p, "w").writelines(k)' "$TMP/efr/metrics.jsonl"
"${MPIRUN[@]}" -np 2 "$EMU/train_llama" "${EF[@]}" -c fp8 -y 1 -o "$TMP/efr" >"$TMP/efr.out" 2>&1
differ=$(python3 "$ROOT/test/testlib.py" --same-run "$TMP/ef" "$TMP/efr" 6 2>&1) && same=1 || same=0
if [ "$same" = 1 ] && grep -q "resuming from step 3" "$TMP/efr.out"; then pass emu.fp8_ef_resume_bitwise_np2
else fail emu.fp8_ef_resume_bitwise_np2 "$differ $(why "$TMP/efr.out")"; fi

# --- auto selection: profile 3 steps in fp8, then the chosen fc1/fc2 units get a geometry
"${MPIRUN[@]}" -np 2 "$EMU/train_llama" "${RUN[@]}" -x 6 -c geofp8 --geofp8-profile-steps 3 -o "$TMP/auto" >"$TMP/auto.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && [ -s "$TMP/auto/geofp8_layers.txt" ] && ! grep -vqE '^layers\.[0-3]\.fc[12] ' "$TMP/auto/geofp8_layers.txt" &&
   grep -q "profiled 3 steps" "$TMP/auto.out"; then
    pass "emu.geofp8_auto_selection_np2: $(cut -d' ' -f1 "$TMP/auto/geofp8_layers.txt" | tr '\n' ' ')"
else fail emu.geofp8_auto_selection_np2 "rc=$rc $(why "$TMP/auto.out")"; fi

# --- a refresh's host waits, counted by the emulator (EMU_SYNC_COUNT: every stream, device and
#     event synchronization and host<->device cudaMemcpy): one process, the four fc2 units, 5 steps
#     with a refresh every 2 steps (steps 1, 3, 5) against every 100 (step 1 only). Each extra
#     refresh may add 4: rank 0's one download of the units' reports, the end-of-step wait for the
#     U downloads (done by then), and the step timer's two events of the refresh span. The Ω build
#     and the Nyström step add none (with one wait per unit for each Nyström decision and the Ω
#     round trips, 31 per refresh on these 4 units before); bucketed and after the backward alike
for mb in 25 0; do
    for K in 2 100; do
        rm -f "$TMP/syncs_$K"
        EMU_SYNC_COUNT="$TMP/syncs_$K" timeout 600 "$EMU/train_llama" "${SMALL[@]}" -b 4 -t 64 -x 5 -v 0 -s 0 -n -1 -u 2 -c geofp8 \
            --geofp8-layers layers.0.fc2,layers.1.fc2,layers.2.fc2,layers.3.fc2 --geofp8-refresh "$K" --bucket-mb "$mb" \
            -o "$TMP/sync_$K" >"$TMP/sync_$K.out" 2>&1 || echo "rc $?" >>"$TMP/sync_$K.out"
    done
    a=$(awk '{ print $2 }' "$TMP/syncs_2" 2>/dev/null); b=$(awk '{ print $2 }' "$TMP/syncs_100" 2>/dev/null)
    if [ -n "$a" ] && [ -n "$b" ] && [ $(( (a - b) )) -le 8 ]; then
        pass "emu.geofp8_refresh_host_waits_mb$mb: $(( a - b )) more host waits for 2 more refreshes ($a vs $b in 5 steps; bound 8)"
    else fail "emu.geofp8_refresh_host_waits_mb$mb" "host waits ${a:-?} (refresh 2) vs ${b:-?} (refresh 100), bound 8 more; $(why "$TMP/sync_2.out")"; fi
done

# --- --muon-shard 1 on 2 emulated GPUs: each rank orthogonalizes its share (matrix by matrix),
#     broadcasts its X in bf16, and the model equals the unsharded (batched) run's bit for bit
#     here (the emulated cuBLAS computes each matrix of a batch alone; on a GPU a batch-1 call may
#     pick another kernel, so there the runs may differ in the last bits: not yet run on a GPU)
for sh in 0 1; do
    "${MPIRUN[@]}" -np 2 "$EMU/train_llama" "${RUN[@]}" -x 4 -n 0 --muon-shard $sh -o "$TMP/ms$sh" >"$TMP/ms$sh.out" 2>&1
done
counts=$(python3 -c "import json, sys
for d in sys.argv[1:]: print(sorted({r['ns_matrices'] for r in map(json.loads, open(d + '/metrics.jsonl')) if 'train_loss' in r}))" \
    "$TMP/ms0" "$TMP/ms1" 2>&1 | tr '\n' ' ')
if cmp -s "$TMP/ms0/model_00000004.bin" "$TMP/ms1/model_00000004.bin" && [ -f "$TMP/ms1/model_00000004.bin" ] &&
   [[ "$counts" == "[16] [8] " ]] && grep -q "Newton-Schulz sharded over the ranks" "$TMP/ms1.out"; then
    pass "emu.muon_shard_bitwise_np2: rank 0 orthogonalizes 8 of 16 matrices"
else fail emu.muon_shard_bitwise_np2 "rank 0 ns_matrices $counts; $(why "$TMP/ms1.out")"; fi

# --- gradient buckets (--bucket-mb): each mode gives bitwise the same run whether each unit is its
#     own bucket, sent on the bucket stream as the backward finishes it (0.0001 MB: 27 buckets on
#     tiny), or the whole gradient goes after the backward (0): the model, every rank's state file
#     and every metrics field but the times. With --geofp8-refresh 2, steps 1 and 3 refresh the
#     factors bucket by bucket (the carried residuals in the second buffer) and step 2 uses them:
#     every geofp8 step goes out in buckets (the last field: how many steps must), kfac's refresh
#     steps 1 and 3 after the backward. Rows: geofp8 with 2 micro-steps per rank (-d 128), and on
#     4 emulated GPUs; a NaN gradient on rank 1 at the bucketed step 2 (skipped; the residuals the
#     quantizer wrote are not kept); a NaN gradient, and a NaN loss, on rank 1 at the refresh step
#     3 of 4 (skipped after the refresh went out: step 4 must run with the factors and residuals of
#     step 2, as the unbucketed run, which never refreshed); the fair figures (--fidelity-every 3:
#     steps 1 and 2 in buckets with their windows, step 3 a fidelity step after the backward); the
#     fair figures with every step in buckets (--fidelity-every 5: the window of steps 1-2 ends at
#     step 2, and step 3's row must not repeat it); the
#     auto selection with --geofp8-ema (step 1 profiles in buckets, step 2 refreshes after the
#     backward, step 3 in buckets); --fp8-ef 1 with a NaN gradient on rank 1 at the bucketed step 2
#     (step 3 must use step 1's flat residuals), and with the auto selection (the units' flat
#     residuals move onto the geometry path at step 2's bucketed refresh).
BK=("${SMALL[@]}" -b 1 -t 32 -v 0 -s 0 -l 3e-3 -u 2 --seed 1337)
BGEO="-c geofp8 --geofp8-layers layers.1.fc2,layers.2.fc1 --geofp8-rank 8 --geofp8-refresh 2 --geofp8-power auto"
i=0
for spec in "2 fp32|-d 64 -c fp32||3" "2 bf16|-d 64 -c bf16||3" "2 fp8block|-d 64 -c fp8block --fp8-format e5m2||3" \
            "2 geofp8_accum2|-d 128 $BGEO||3" "4 geofp8|-d 128 $BGEO||3" "2 geofp8_nan|-d 64 $BGEO|TRAIN_LLAMA_TEST_NAN=2:1|2" \
            "2 geofp8_nan_refresh|-d 64 -x 4 -n 4 $BGEO|TRAIN_LLAMA_TEST_NAN=3:1|3" \
            "2 geofp8_nan_loss_refresh|-d 64 -x 4 -n 4 $BGEO|TRAIN_LLAMA_TEST_NAN_LOSS=3:1|3" \
            "2 geofp8_fair|-d 64 $BGEO --fidelity-every 3||2" \
            "2 geofp8_fair_no_fidelity_step|-d 64 $BGEO --fidelity-every 5||3" \
            "2 geofp8_auto_ema|-d 64 -c geofp8 --geofp8-profile-steps 1 --geofp8-refresh 2 --geofp8-ema 0.9 --geofp8-rank 8||2" \
            "2 kfac|-d 64 -c kfac --geofp8-refresh 2||1" \
            "2 fp8_ef_nan|-d 64 -c fp8 --fp8-ef 1|TRAIN_LLAMA_TEST_NAN=2:1|2" \
            "2 geofp8_auto_ef|-d 64 -c geofp8 --geofp8-profile-steps 1 --geofp8-refresh 2 --geofp8-rank 8 --fp8-ef 1||3"; do
    IFS='|' read -r head flags nan want <<<"$spec"
    read -r np name <<<"$head"
    [[ "$flags" == *"-x 4"* ]] && steps=4 || { steps=3; flags="-x 3 -n 3 $flags"; }
    i=$((i + 1))
    for mb in 0 0.0001; do
        # shellcheck disable=SC2086
        "${MPIRUN[@]}" -np "$np" env $nan "$EMU/train_llama" "${BK[@]}" $flags --bucket-mb $mb -o "$TMP/bk${i}_$mb" >"$TMP/bk${i}_$mb.out" 2>&1
    done
    differ=$(python3 "$ROOT/test/testlib.py" --same-run "$TMP/bk${i}_0" "$TMP/bk${i}_0.0001" $steps) && same=1 || same=0
    buckets=$(grep -o "gradient buckets *| [0-9]* of" "$TMP/bk${i}_0.0001.out" | grep -o "[0-9]* of")
    # the steps that went out in 27 buckets, as logged (a skipped step is not logged as such)
    overlapped=$(grep -c '"comm_buckets_overlapped": 27' "$TMP/bk${i}_0.0001/metrics.jsonl")
    nan_step=${nan##*=}; nan_step=${nan_step%%:*}
    if [ "$same" = 1 ] && [ "$buckets" = "27 of" ] && [ "$overlapped" = "$want" ] &&
       { [ -z "$nan" ] || grep -q "step     $nan_step/$steps | skipped" "$TMP/bk${i}_0.0001.out"; }; then
        pass "emu.buckets_bitwise_np${np}_$name"
    else fail "emu.buckets_bitwise_np${np}_$name" "$differ; buckets '$buckets', $overlapped bucketed steps logged (want $want); $(why "$TMP/bk${i}_0.0001.out")"; fi
done

# --- bitwise resume of geofp8 with 2 ranks past a damaged newest checkpoint: rank 1's step-6
#     state file is truncated, so rank 1 alone finds it damaged; both ranks fall back to step 3
#     (llmc/run.h, the same path as the CPU engine's) and 3 + resume + 3 == 6 steps straight.
#     With --geofp8-ema: step 3 is inside a sketch window, whose average comes from the state files.
#     Without fidelity steps, so that the steps between refreshes go out in buckets (the default
#     --bucket-mb) and the residuals saved at step 3 are a bucketed step's.
RES=("${RUN[@]}" -x 6 -n 3 -c geofp8 "${GEO[@]}" --geofp8-ema 0.9 --fidelity-every 0)
"${MPIRUN[@]}" -np 2 "$EMU/train_llama" "${RES[@]}" -o "$TMP/straight" >"$TMP/s.out" 2>&1
cp -r "$TMP/straight" "$TMP/resumed"
truncate -s 4096 "$TMP/resumed/state_00000006_00001.bin"
"${MPIRUN[@]}" -np 2 "$EMU/train_llama" "${RES[@]}" -y 1 -o "$TMP/resumed" >"$TMP/r.out" 2>"$TMP/r.err"
if grep -q "warning: -y: checkpoint step 6 is damaged: state file '.*state_00000006_00001.bin' is" "$TMP/r.err" &&
   grep -q "resuming from step 3" "$TMP/r.out" &&
   cmp -s "$TMP/straight/model_00000006.bin" "$TMP/resumed/model_00000006.bin" &&
   cmp -s "$TMP/straight/state_00000006_00000.bin" "$TMP/resumed/state_00000006_00000.bin" &&
   cmp -s "$TMP/straight/state_00000006_00001.bin" "$TMP/resumed/state_00000006_00001.bin"; then
    pass emu.geofp8_resume_fallback_bitwise_np2
else fail emu.geofp8_resume_fallback_bitwise_np2 "step-6 files differ or missing: $(head -c 300 "$TMP/r.err") $(why "$TMP/r.out")"; fi
# ... and each rank's state file held its half of the optimizer moments (the ranks' sampled
# CRC-32s, gathered on the device, agreed), as the CPU engine's do
shares=$(python3 - "$TMP/straight" <<'EOF'
import sys, numpy as np
h = [np.fromfile(f"{sys.argv[1]}/state_00000006_{r:05d}.bin", dtype="<i8", count=64) for r in (0, 1)]
P = int(h[0][15])
got = [(int(x[1]), int(x[14]), int(x[10]), int(x[15])) for x in h]
print("ok" if got == [(2, 0, P // 2, P), (2, P // 2, P - P // 2, P)] else got)
EOF
)
if [ "$shares" = ok ] && ! grep -q "optimizer moments differ" "$TMP/s.out"; then pass emu.state_moments_split_np2
else fail emu.state_moments_split_np2 "$shares $(grep -m1 'moments differ' "$TMP/s.out")"; fi
# where rank 1's CRC differs (the test hook), both files hold all the moments: the halves above
"${MPIRUN[@]}" -np 2 env TRAIN_LLAMA_TEST_MOMENTS_DIFFER=1 "$EMU/train_llama" "${RES[@]}" -o "$TMP/differ" >"$TMP/d.out" 2>&1
whole=$(python3 - "$TMP/straight" "$TMP/differ" <<'EOF'
import sys, numpy as np
def moments(d, r):
    p = f"{d}/state_00000006_{r:05d}.bin"
    h = np.fromfile(p, dtype="<i8", count=64)
    return int(h[10]), np.fromfile(p, dtype="<u4", offset=512 + int(h[9]), count=int(h[10] + h[11]))
(n0, s0), (n1, s1) = moments(sys.argv[1], 0), moments(sys.argv[1], 1)
(w0, a0), (w1, a1) = moments(sys.argv[2], 0), moments(sys.argv[2], 1)
P = n0 + n1
halves = np.concatenate([s0[:n0], s1[:n1], s0[n0:], s1[n1:]])
print("ok" if w0 == w1 == P and np.array_equal(a0, halves) and np.array_equal(a1, halves) else f"{n0} {n1} {w0} {w1}")
EOF
)
if [ "$whole" = ok ] && grep -q "^warning: checkpoint step 6: rank 1's optimizer moments differ from rank 0's" "$TMP/d.out" &&
   cmp -s "$TMP/straight/model_00000006.bin" "$TMP/differ/model_00000006.bin"; then pass emu.state_moments_differ_whole_np2
else fail emu.state_moments_differ_whole_np2 "$whole $(why "$TMP/d.out")"; fi

# --- the fair fidelity figures' state across a resume: 3 steps + resume + 3 == 6 straight, with the
#     resume inside a window of 4 steps (steps 1-4), whose sums and counterfactual residuals the
#     state files carry: the model, both state files and every metrics field (testlib.py --same-run)
RESF=("${RUN[@]}" -x 6 -n 3 -c geofp8 "${GEO[@]}" --fidelity-every 1 --fidelity-window 4)
"${MPIRUN[@]}" -np 2 "$EMU/train_llama" "${RESF[@]}" -o "$TMP/fs" >"$TMP/fs.out" 2>&1
cp -r "$TMP/fs" "$TMP/fr"
rm -f "$TMP/fr/"*00000006*
python3 -c 'import json,sys; p=sys.argv[1]; k=[l for l in open(p) if json.loads(l).get("step", 0) <= 3]; open(p, "w").writelines(k)' "$TMP/fr/metrics.jsonl"
"${MPIRUN[@]}" -np 2 "$EMU/train_llama" "${RESF[@]}" -y 1 -o "$TMP/fr" >"$TMP/fr.out" 2>&1
differ=$(python3 "$ROOT/test/testlib.py" --same-run "$TMP/fs" "$TMP/fr" 6 2>&1) && same=1 || same=0
if [ "$same" = 1 ] && grep -q "resuming from step 3" "$TMP/fr.out" && grep -q '"step": 4,.*"window_rel_l2_geo_fp8ef"' "$TMP/fr/metrics.jsonl"; then
    pass emu.fair_fidelity_resume_mid_window_bitwise_np2
else fail emu.fair_fidelity_resume_mid_window_bitwise_np2 "$differ $(why "$TMP/fr.out")"; fi

# --- a stop signal to one rank (llmc/run.h): SIGTERM raised in rank 1 during step 2 of 4 reaches
#     rank 0 in the step's skip all-reduce; both write the checkpoint of step 2, rank 0 prints the
#     resume command, exit 75; -y 1 then ends bitwise the uninterrupted run (model, state files,
#     every metrics field)
SIG=("${RUN[@]}" -x 4 -n 0 -c geofp8 "${GEO[@]}" --fidelity-every 0)
"${MPIRUN[@]}" -np 2 "$EMU/train_llama" "${SIG[@]}" -o "$TMP/sig_whole" >"$TMP/sw.out" 2>&1
TRAIN_LLAMA_TEST_SIGNAL=2:1:15 "${MPIRUN[@]}" -np 2 -x TRAIN_LLAMA_TEST_SIGNAL "$EMU/train_llama" "${SIG[@]}" -o "$TMP/sig" >"$TMP/sig.out" 2>&1
rc=$?
"${MPIRUN[@]}" -np 2 "$EMU/train_llama" "${SIG[@]}" -y 1 -o "$TMP/sig" >"$TMP/sigr.out" 2>&1
differ=$(python3 "$ROOT/test/testlib.py" --same-run "$TMP/sig_whole" "$TMP/sig" 4 2>&1) && same=1 || same=0
if [ $rc -eq 75 ] && grep -q "^stopped by SIGTERM after step 2: checkpoint $TMP/sig (step 2); resume with: .* -y 1$" "$TMP/sig.out" &&
   [ -f "$TMP/sig/DONE_00000002" ] && grep -q "resuming from step 2" "$TMP/sigr.out" && [ "$same" = 1 ]; then
    pass emu.signal_to_one_rank_checkpoint_resume_bitwise_np2
else fail emu.signal_to_one_rank_checkpoint_resume_bitwise_np2 "exit $rc, $(grep -m1 '^stopped' "$TMP/sig.out"); $differ $(why "$TMP/sigr.out")"; fi
rm -rf "$TMP"/sig*

# --- --comm-timeout on the GPU engine: rank 1 of 2 SIGSTOPped mid-run (it neither dies nor
#     answers); the job ends within the timeout plus 15 s (test/testlib.sh), with rank 0's line
#     naming the step as the wait (an emulated step takes about 1 s)
comm_timeout_row emu.comm_timeout_stopped_rank_ends_job 10 "the step" \
    "${MPIRUN[@]}" -np 2 "$EMU/train_llama" "${RUN[@]}" -x 500 -n -1 --fidelity-every 0 --comm-timeout 10

# --- the lock on -o: a second run on a directory a running one holds stops at once, naming it
TRAIN_LLAMA_TEST_SLOW=1 "$EMU/train_llama" "${RUN[@]}" -x 3 -o "$TMP/locked" >"$TMP/l1.out" 2>&1 &
holder=$!
for _ in $(seq 1 600); do [ -s "$TMP/locked/metrics.jsonl" ] && break; sleep 0.1; done
timeout 300 "$EMU/train_llama" "${RUN[@]}" -x 3 -o "$TMP/locked" >"$TMP/l2.out" 2>"$TMP/l2.err"
rc=$?
wait $holder
rc1=$?
if [ $rc -eq 1 ] && grep -q "is in use by another run (pid $holder on host" "$TMP/l2.err" && [ $rc1 -eq 0 ]; then pass emu.second_run_on_locked_dir_refused
else fail emu.second_run_on_locked_dir_refused "rc=$rc rc1=$rc1 $(head -c 300 "$TMP/l2.err")"; fi

# --- an injected NaN on rank 1 at step 3: both ranks skip it, as the CPU engine does
"${MPIRUN[@]}" -np 2 env TRAIN_LLAMA_TEST_NAN=3:1 "$EMU/train_llama" "${RUN[@]}" -x 5 -c fp8 -o "$TMP/nan" >"$TMP/nan.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "step     3/5 | skipped: non-finite loss or gradient on rank 1" "$TMP/nan.out" &&
   [ "$(grep -c '"train_loss"' "$TMP/nan/metrics.jsonl")" -eq 4 ]; then
    pass emu.nan_step_skipped_by_all_ranks
else fail emu.nan_step_skipped_by_all_ranks "rc=$rc $(grep -i -m2 'skip\|error' "$TMP/nan.out")"; fi

# --- a lost peer: rank 1's 5th collective never returns and its communicator reports
# ncclRemoteError (EMU_NCCL_PEER_LOST, dev/emu/emu_libs.cpp); llmc/comm.cuh's watch thread ends
# that rank with one line, and mpirun the job, instead of a hang until the timeout
start=$SECONDS
timeout 300 mpirun --oversubscribe -np 2 env EMU_NCCL_PEER_LOST=1:5 "$EMU/train_llama" "${RUN[@]}" -x 4 -c fp32 -o "$TMP/lost" \
    >"$TMP/lost.out" 2>"$TMP/lost.err"
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "error: rank 1: NCCL reports .* another rank has died" "$TMP/lost.err"; then
    pass "emu.lost_peer_ends_job: rc=$rc after $((SECONDS - start)) s"
else fail emu.lost_peer_ends_job "rc=$rc $(grep -m2 -i 'error' "$TMP/lost.err")"; fi

# --- ranks with different flags stop, naming the setting (rank 0's settings broadcast over NCCL)
timeout 300 mpirun --oversubscribe -np 1 "$EMU/train_llama" "${RUN[@]}" -x 2 -l 1e-3 : -np 1 "$EMU/train_llama" "${RUN[@]}" -x 2 -l 2e-3 \
    >"$TMP/dis.out" 2>"$TMP/dis.err"
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "rank 1 disagrees with rank 0 on lr" "$TMP/dis.err"; then pass emu.rank_settings_mismatch
else fail emu.rank_settings_mismatch "rc=$rc $(head -3 "$TMP/dis.err")"; fi
# a flag a resumed run may change but the ranks of one job must share (another --max-skips would
# make one rank stop where the other goes on)
timeout 300 mpirun --oversubscribe -np 1 "$EMU/train_llama" "${RUN[@]}" -x 2 --max-skips 1 : -np 1 "$EMU/train_llama" "${RUN[@]}" -x 2 --max-skips 2 \
    >"$TMP/dis2.out" 2>"$TMP/dis2.err"
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "rank 1 disagrees with rank 0 on max-skips: 1 vs 2" "$TMP/dis2.err"; then pass emu.rank_flag_mismatch_max_skips
else fail emu.rank_flag_mismatch_max_skips "rc=$rc $(head -3 "$TMP/dis2.err")"; fi

# --- the Slurm id-file launch (what plain srun does: no MPI in the trainer): each task gets its
# SLURM_* variables, rank 0 writes the NCCL id to $TRAIN_LLAMA_NCCL_ID_FILE.<job>.<step>, the other
# reads it (the emulated NCCL checks that both hold rank 0's id), the file is removed; then ranks
# with different flags are refused without MPI, over NCCL. mpirun only starts the processes: its
# own variables are hidden from the trainer (EMU_HIDDEN_ENV, dev/emu/emu_libs.cpp).
cat >"$TMP/srun_like.sh" <<'SH'
#!/usr/bin/env bash
export SLURM_PROCID=$OMPI_COMM_WORLD_RANK SLURM_STEP_NUM_TASKS=$OMPI_COMM_WORLD_SIZE SLURM_LOCALID=$OMPI_COMM_WORLD_LOCAL_RANK
export SLURM_JOB_ID=4242 SLURM_STEP_ID=0
hidden=""
for v in OMPI_COMM_WORLD_SIZE PMIX_RANK PMI_RANK; do
    if [ -n "${!v:-}" ]; then hidden="$hidden $v=${!v}"; fi
    unset "$v"
done
export EMU_HIDDEN_ENV="$hidden"
exec "$@"
SH
export TRAIN_LLAMA_NCCL_ID_FILE=$TMP/nccl_id
"${MPIRUN[@]}" -np 2 bash "$TMP/srun_like.sh" "$EMU/train_llama" "${RUN[@]}" -x 3 -c fp8 -o "$TMP/idfile" >"$TMP/idfile.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "ranks=2" "$TMP/idfile.out" && [ "$(grep -c '"train_loss"' "$TMP/idfile/metrics.jsonl")" -eq 3 ] &&
   ! ls "$TMP"/nccl_id* >/dev/null 2>&1; then
    pass emu.slurm_id_file_launch_np2
else fail emu.slurm_id_file_launch_np2 "rc=$rc $(grep -m2 -i 'error' "$TMP/idfile.out")"; fi
timeout 300 mpirun --oversubscribe -np 1 bash "$TMP/srun_like.sh" "$EMU/train_llama" "${RUN[@]}" -x 2 -l 1e-3 : \
    -np 1 bash "$TMP/srun_like.sh" "$EMU/train_llama" "${RUN[@]}" -x 2 -l 2e-3 >"$TMP/iddis.out" 2>"$TMP/iddis.err"
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "rank 1 disagrees with rank 0 on lr" "$TMP/iddis.err"; then pass emu.slurm_id_file_settings_mismatch
else fail emu.slurm_id_file_settings_mismatch "rc=$rc $(head -3 "$TMP/iddis.err")"; fi
unset TRAIN_LLAMA_NCCL_ID_FILE

# --- the native FP8 sum needs sm_90: on an (emulated) sm_80 the run stops at start with one line
# naming twophase, which runs there
EMU_SM=80 "${MPIRUN[@]}" -np 2 "$EMU/train_llama" "${RUN[@]}" -x 2 -c fp8 -o "$TMP/sm80" >"$TMP/sm80.out" 2>"$TMP/sm80.err"
rc=$?
EMU_SM=80 "${MPIRUN[@]}" -np 2 "$EMU/train_llama" "${RUN[@]}" -x 2 -c fp8 --fp8-reduce twophase -o "$TMP/sm80tp" >"$TMP/sm80tp.out" 2>&1
rc2=$?
if [ $rc -ne 0 ] && grep -q "error: -c fp8: the native FP8 sum needs an sm_90 or newer GPU.*found sm_80.*twophase" "$TMP/sm80.err" &&
   [ ! -e "$TMP/sm80/metrics.jsonl" ] && [ $rc2 -eq 0 ]; then pass emu.native_fp8_refused_below_sm90_twophase_runs
else fail emu.native_fp8_refused_below_sm90_twophase_runs "rc=$rc rc2=$rc2 $(head -2 "$TMP/sm80.err")"; fi

# --- --virtual-ranks 4 in one process against 4 emulated GPUs: two micro-steps per logical rank
#     (-d 256), the geometry path with error feedback on the flat buffer too, a NaN on logical
#     rank 3 at step 2 (the step skipped by all), val loss at step 4: the model and every metrics
#     field but the times bitwise
VR=("${RUN[@]}" -d 256 -x 4 -n 4 -v 4 -c geofp8 "${GEO[@]}" --fp8-ef 1)
"${MPIRUN[@]}" -np 4 env TRAIN_LLAMA_TEST_NAN=2:3 "$EMU/train_llama" "${VR[@]}" -o "$TMP/vr_real4" >"$TMP/vr_real4.out" 2>&1
TRAIN_LLAMA_TEST_NAN=2:3 timeout 300 "$EMU/train_llama" "${VR[@]}" --virtual-ranks 4 -o "$TMP/vr_v4" >"$TMP/vr_v4.out" 2>&1
differ=$(python3 "$ROOT/test/testlib.py" --same-metrics "$TMP/vr_real4" "$TMP/vr_v4" 2>&1) && same=1 || same=0
if [ "$same" = 1 ] && cmp -s "$TMP/vr_real4/model_00000004.bin" "$TMP/vr_v4/model_00000004.bin" && [ -f "$TMP/vr_v4/model_00000004.bin" ] &&
   grep -q "step     2/4 | skipped: non-finite loss or gradient on rank 3" "$TMP/vr_v4.out" && grep -q '"val_loss"' "$TMP/vr_v4/metrics.jsonl"; then
    pass emu.virtual_ranks_bitwise_geofp8_ef_accum_nan_n4
else fail emu.virtual_ranks_bitwise_geofp8_ef_accum_nan_n4 "$differ $(why "$TMP/vr_v4.out")"; fi
rm -rf "$TMP/vr_real4" "$TMP/vr_v4"

# resume under virtual ranks: 4 steps + resume + 2 == 6 straight, the model, the state file (every
# logical rank's residuals, sketch averages, flat-buffer residuals, server residuals and the fair
# figures' counterfactual residuals) and every metrics field bitwise; the resume lands inside a
# fidelity window. A checkpoint of 2 logical ranks is refused by a run of 4.
VRR=("${RUN[@]}" -x 6 -n 4 --virtual-ranks 2 "${GEO[@]}")
for spec in "geofp8 --geofp8-ema 0.9 --fp8-ef 1" "geofp8 --fp8-reduce twophase"; do
    t=$(echo "$spec" | sed 's/ --geofp8-ema 0.9/_ema/; s/ --fp8-ef 1/_ef/; s/ --fp8-reduce twophase/_twophase/')
    # shellcheck disable=SC2086
    timeout 300 "$EMU/train_llama" "${VRR[@]}" -c $spec -o "$TMP/vrs_$t" >"$TMP/vrs_$t.out" 2>&1
    cp -r "$TMP/vrs_$t" "$TMP/vrr_$t"
    rm -f "$TMP/vrr_$t/"*00000006*
    python3 -c 'import json,sys; p=sys.argv[1]; k=[l for l in open(p) if json.loads(l).get("step", 0) <= 4]; open(p, "w").writelines(k)' \
        "$TMP/vrr_$t/metrics.jsonl"
    # shellcheck disable=SC2086
    timeout 300 "$EMU/train_llama" "${VRR[@]}" -c $spec -y 1 -o "$TMP/vrr_$t" >"$TMP/vrr_$t.out" 2>&1
    differ=$(python3 "$ROOT/test/testlib.py" --same-run "$TMP/vrs_$t" "$TMP/vrr_$t" 6 2>&1) && same=1 || same=0
    if grep -q "resuming from step 4" "$TMP/vrr_$t.out" && [ "$same" = 1 ]; then pass "emu.virtual_ranks_resume_bitwise_$t"
    else fail "emu.virtual_ranks_resume_bitwise_$t" "$differ $(why "$TMP/vrr_$t.out")"; fi
done
# shellcheck disable=SC2086
out=$(timeout 300 "$EMU/train_llama" "${VRR[@]}" -d 128 --virtual-ranks 4 -c $spec -y 1 -o "$TMP/vrs_$t" 2>&1)
if [ $? -eq 1 ] && grep -q "^error: -y: checkpoint step 6 was written with --virtual-ranks 2, this run has --virtual-ranks 4 " <<<"$out"; then
    pass emu.virtual_ranks_resume_other_n_refused
else fail emu.virtual_ranks_resume_other_n_refused "$(tail -c 300 <<<"$out")"; fi
rm -rf "$TMP"/vrs_* "$TMP"/vrr_*

# refused with one line, before -o: more logical ranks than the GPU's free memory holds (64 on an
# emulated GPU of 300 MiB: about 0.8 GiB needed), --virtual-ranks with more than one process
# (train_llama's logical ranks share one GPU), the sharded Muon update with it
EMU_MEM_MB=300 timeout 120 "$EMU/train_llama" "${RUN[@]}" -d 2048 -x 1 -c geofp8 "${GEO[@]}" --virtual-ranks 64 -o "$TMP/vr_big" >"$TMP/vr_big.out" 2>"$TMP/vr_big.err"
rc=$?
if [ $rc -eq 1 ] && [ "$(wc -l <"$TMP/vr_big.err")" -eq 1 ] && [ ! -e "$TMP/vr_big" ] &&
   grep -q "^error: --virtual-ranks 64: the other 63 logical ranks' gradients and -c geofp8 state need about .* GiB of GPU memory, .* GiB are free" "$TMP/vr_big.err"; then
    pass emu.virtual_ranks_too_many_refused
else fail emu.virtual_ranks_too_many_refused "rc=$rc $(head -c 300 "$TMP/vr_big.err")"; fi
"${MPIRUN[@]}" -np 2 "$EMU/train_llama" "${RUN[@]}" -x 1 --virtual-ranks 2 -o "$TMP/vr_p2" >"$TMP/vr_p2.out" 2>"$TMP/vr_p2.err"
rc=$?
if [ $rc -ne 0 ] && grep -q "^error: --virtual-ranks 2: train_llama simulates N ranks in one process on one GPU, found 2 processes" "$TMP/vr_p2.err" &&
   [ ! -e "$TMP/vr_p2" ]; then pass emu.virtual_ranks_several_processes_refused
else fail emu.virtual_ranks_several_processes_refused "rc=$rc $(head -c 300 "$TMP/vr_p2.err")"; fi
timeout 120 "$EMU/train_llama" "${RUN[@]}" -x 1 --virtual-ranks 2 --muon-shard 1 -o "$TMP/vr_ms" >/dev/null 2>"$TMP/vr_ms.err"
rc=$?
if [ $rc -eq 1 ] && grep -q "^error: --muon-shard 1: .*--virtual-ranks simulates the numerics of 2 ranks" "$TMP/vr_ms.err" && [ ! -e "$TMP/vr_ms" ]; then
    pass emu.virtual_ranks_muon_shard_refused
else fail emu.virtual_ranks_muon_shard_refused "rc=$rc $(cat "$TMP/vr_ms.err")"; fi

# --- scripts/study.py --engine gpu: a 4-run grid (fp32 and fp8, seeds 1 and 2, 2 logical ranks,
#     3 steps) on the emulated train_llama, against the same grid on train_llama_cpu: the same
#     runs (every val loss within the mode rows' bf16 / FP8 bounds of the CPU engine's)
SG=(--modes "fp8|-c fp8" --seeds 1,2 --ranks 2 --lr 3e-3 --steps 3 --jobs 2)
timeout 300 python3 "$ROOT/scripts/study.py" "${SG[@]}" --engine gpu --bin "$EMU/train_llama" --out "$TMP/study_gpu" >"$TMP/study_gpu.out" 2>&1
rc=$?
timeout 300 python3 "$ROOT/scripts/study.py" "${SG[@]}" --out "$TMP/study_cpu" >"$TMP/study_cpu.out" 2>&1
python3 - "$TMP/study_gpu" "$TMP/study_cpu" "$rc" "$ROOT" <<'PY'
import json, os, sys
sys.path.insert(0, sys.argv[4] + "/test")
from testlib import bound
g, c, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
def val(d):
    try:
        return [json.loads(l)["val_loss"] for l in open(d + "/metrics.jsonl") if '"val_loss"' in l][-1]
    except (OSError, IndexError, KeyError, ValueError):
        return float("nan")
runs = [f"n2_lr0.003_x3/{m}_s{s}" for m in ("fp32", "fp8") for s in (1, 2)]
logs_ok = all(os.path.isfile(f"{g}/{r}.log") and "logical ranks in this process, one GPU" in open(f"{g}/{r}.log").read() for r in runs)
print(("PASS" if rc == 0 and logs_ok else "FAIL") + f" emu.study_engine_gpu_runs: exit {rc}, 4 runs of the emulated train_llama with --virtual-ranks 2")
# bounds: the mode rows' (bf16 compute against fp32: 5e-3; FP8 codes from bf16 gradients: 2e-2)
rel = {r: abs(val(f"{g}/{r}") - val(f"{c}/{r}")) / val(f"{c}/{r}") for r in runs}
worst = {m: max((x if x == x else float("inf")) for r, x in rel.items() if f"/{m}_" in r) for m in ("fp32", "fp8")}  # NaN: a missing run
bound("emu.study_engine_gpu_fp32_val_near_cpu", worst["fp32"], 5e-3, "max rel diff of the final val loss over 2 seeds")
bound("emu.study_engine_gpu_fp8_val_near_cpu", worst["fp8"], 2e-2, "max rel diff of the final val loss over 2 seeds")
PY
rm -rf "$TMP/study_gpu" "$TMP/study_cpu"

# --- one process with a one-rank NCCL communicator (what dev/gpu_check.sh runs on one GPU)
TRAIN_LLAMA_TEST_NCCL=1 timeout 300 "$EMU/train_llama" "${RUN[@]}" -x 3 -c geofp8 "${GEO[@]}" --fp8-reduce twophase -o "$TMP/one" >"$TMP/one.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c '"train_loss"' "$TMP/one/metrics.jsonl")" -eq 3 ]; then pass emu.single_rank_nccl_communicator
else fail emu.single_rank_nccl_communicator "rc=$rc $(why "$TMP/one.out")"; fi

[ "$failures" -eq 0 ]
