#!/usr/bin/env bash
# dev/emu/build.sh — builds the CUDA engine for the CPU: the same train_llama.cu, llmc/*.cuh and
# GPU tests, with kernels run thread by thread on the host (dev/emu/emu.h, emu_runtime.cpp) and
# cuBLAS(Lt), cuSOLVER and NCCL emulated (emu_runtime.cpp, emu_libs.cpp; NCCL over MPI, one MPI
# rank per emulated GPU). It needs the CUDA headers (not a GPU or the CUDA libraries), g++,
# mpicxx, OpenBLAS and LAPACKE; x86-64 only (the fibers switch with a few lines of assembly).
#
# What it shows: the engine's own logic (indexing, launch shapes, the order of the step, every
# gradient communication mode, the collectives across ranks, checkpoints) on the same numbers as
# a GPU up to summation order. What it cannot show: races between blocks, real cuBLASLt algorithm
# availability, NCCL's own behaviour, and any timing (every event reads 1 ms).
#
# Usage: bash dev/emu/build.sh [OUT]   (default build/emu) -> OUT/train_llama, OUT/test_llama_gpu,
#        OUT/dev_{geofp8,attention,rmsnorm,crossentropy,rope,muon,matmul,global_norm,adamw}, OUT/test_blas_shim,
#        OUT/test_fp8_device, OUT/test_mma_layout; run them from OUT/src (a rewritten copy of the
#        sources, with data/ linked).
#        bash dev/emu/build.sh --racecheck [OUT]   (default build/emu-racecheck) -> OUT/dev_attention,
#        OUT/test_mma_layout, OUT/emu_racecheck_cases: the kernels under
#        ThreadSanitizer (g++ -fsanitize=thread), with emu_runtime.cpp telling it what the GPU
#        orders between the threads of a block (barriers, warp collectives, mbarrier phases,
#        cp.async landings; see EMU_RACECHECK there). A race between two threads of a block, on
#        shared or global memory, is reported with both stacks, and the program exits 66
#        (TSAN_OPTIONS exitcode). About 25 times slower than the plain build (dev_attention
#        --racecheck: 1.5 s plain, 37 s).
#        bash dev/emu/build.sh --racecheck-all [OUT]   (default build/emu-racecheck-all): the same,
#        and OUT/test_llama_gpu and OUT/dev_{crossentropy,rmsnorm,rope,muon,matmul,global_norm,adamw,geofp8}.
# Nothing is rebuilt when OUT is newer than every source it is made from (OUT/BUILT records the
# last complete build); a lock on OUT lets several tests ask for the same build at once.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RACECHECK=0  # 1: --racecheck, 2: --racecheck-all
DEFAULT_OUT=$ROOT/build/emu
case "${1:-}" in
    --racecheck) RACECHECK=1; DEFAULT_OUT=$ROOT/build/emu-racecheck; shift ;;
    --racecheck-all) RACECHECK=2; DEFAULT_OUT=$ROOT/build/emu-racecheck-all; shift ;;
esac
case "${1:-}" in -*) echo "dev/emu/build.sh: unknown option '$1' (expected --racecheck, --racecheck-all or an output folder)" >&2; exit 2;; esac
OUT=$(mkdir -p "${1:-$DEFAULT_OUT}" && cd "${1:-$DEFAULT_OUT}" && pwd)
CUDA_INC=${CUDA_HOME:-/usr/local/cuda}/include
if [ ! -f "$CUDA_INC/cuda_runtime.h" ] || { [ ! -f "$CUDA_INC/nccl.h" ] && [ ! -f /usr/include/nccl.h ]; }; then
    echo "dev/emu/build.sh: needs the CUDA headers (cuda_runtime.h, nccl.h) under $CUDA_INC" >&2; exit 2
fi
exec 9>"$OUT/.lock"
flock 9
newer() { cd "$ROOT" && find train_llama.cu llmc dev/cuda dev/emu -type f -newer "$OUT/BUILT" -print -quit &&
          find test -maxdepth 1 -type f \( -name '*.cu' -o -name '*.h' \) -newer "$OUT/BUILT" -print -quit; }
if [ -f "$OUT/BUILT" ] && [ -z "$(newer)" ]; then
    echo "dev/emu: $OUT is up to date"
    exit 0
fi
rm -f "$OUT/BUILT"
python3 "$ROOT/dev/emu/rewrite_launches.py" "$ROOT" "$OUT/src" > "$OUT/kernels.txt"
# -ftrivial-auto-var-init=pattern: every local variable starts as the same garbage (0xFE bytes;
# device and pinned memory start as 0xFF, emu_runtime.cpp), so a read before the first write gives
# the same loud value in every run instead of whatever the stack held: the emulated runs stay
# bitwise repeatable, and a compare against a path that writes the value (buckets against the flat
# gradient) fails every time. It costs ~15% on the attention kernels (dev_attention --small,
# 32 s -> 37 s) and nothing measurable on a training step of the small model.
CXX=(mpicxx -std=c++17 -O3 -march=native -fopenmp -ffp-contract=off -ftrivial-auto-var-init=pattern -Wall -Wno-unused-function -Wno-unused-variable -Wno-unknown-pragmas -I"$CUDA_INC")
LIBS=(-lopenblas -llapacke -lm)
PROG=()  # the programs' own flags, beside CXX's
TOOLS=(rmsnorm crossentropy rope muon matmul global_norm adamw)  # dev/cuda/<op>.cu -> OUT/dev_<op> (and geofp8, attention)
if [ $RACECHECK != 0 ]; then
    # the runtime knows of ThreadSanitizer but is not instrumented (its scheduler and exchange
    # slots are the emulator's, not the kernels'); -g1: file and line in the reports' stacks
    CXX+=(-DEMU_RACECHECK -g1)
    PROG=(-fsanitize=thread)
fi
"${CXX[@]}" -c "$ROOT/dev/emu/emu_runtime.cpp" -o "$OUT/emu_runtime.o" &
runtime=$!
"${CXX[@]}" -c "$ROOT/dev/emu/emu_libs.cpp" -o "$OUT/emu_libs.o" &
libs=$!
wait $runtime && wait $libs || { echo "dev/emu/build.sh: the runtime's build failed" >&2; exit 1; }
cd "$OUT/src"
# The programs see dev/cuda/blas_shim's <cblas.h> and <lapacke.h> as on a GPU (their CPU
# references' BLAS calls go to the emulated cuBLAS / cuSOLVER); the emulation itself above uses
# the real ones.
build() {  # source -> binary
    "${CXX[@]}" "${PROG[@]}" -I"$ROOT/dev/cuda/blas_shim" -include "$ROOT/dev/emu/emu.h" -x c++ "$1" -x none "$OUT/emu_runtime.o" "$OUT/emu_libs.o" \
        "${LIBS[@]}" -o "$OUT/$2"
}
if [ $RACECHECK != 0 ]; then
    build dev/cuda/attention.cu dev_attention &
    build test/test_mma_layout.cu test_mma_layout &
    build test/emu_racecheck_cases.cu emu_racecheck_cases &
    built="$OUT/dev_attention, $OUT/test_mma_layout, $OUT/emu_racecheck_cases"
    if [ $RACECHECK = 2 ]; then
        build test/test_llama_gpu.cu test_llama_gpu &
        for op in "${TOOLS[@]}" geofp8; do build dev/cuda/$op.cu dev_$op & done
        built+=", $OUT/test_llama_gpu, $OUT/dev_{$(IFS=,; echo "${TOOLS[*]}"),geofp8}"
    fi
    built+=" under ThreadSanitizer"
else
    build train_llama.cu train_llama &
    build test/test_llama_gpu.cu test_llama_gpu &
    build dev/cuda/geofp8.cu dev_geofp8 &
    build dev/cuda/attention.cu dev_attention &
    for op in "${TOOLS[@]}"; do build dev/cuda/$op.cu dev_$op & done
    build test/test_blas_shim.cu test_blas_shim &
    build test/test_fp8_device.cu test_fp8_device &
    build test/test_mma_layout.cu test_mma_layout &
    built="$OUT/train_llama, $OUT/test_llama_gpu, $OUT/dev_{geofp8,attention,$(IFS=,; echo "${TOOLS[*]}")}, $OUT/test_blas_shim, $OUT/test_fp8_device, $OUT/test_mma_layout"
fi
fail=0
for job in $(jobs -p); do wait "$job" || fail=1; done
[ $fail = 0 ] || { echo "dev/emu/build.sh: a build failed" >&2; exit 1; }
touch "$OUT/BUILT"
echo "dev/emu: built $built (run them from $OUT/src)"
