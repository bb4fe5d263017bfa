// emu.h — the CUDA device-side language on the CPU, for dev/emu (see dev/emu/build.sh).
// Force-included (g++ -include dev/emu/emu.h) into copies of the CUDA sources whose kernel launches
// dev/emu/rewrite_launches.py has turned into EMU_LAUNCH calls. Kernels become plain functions run
// once per thread: blocks one after another (EMU_BLOCK_ORDER=reverse: last first), the threads of
// a block either in a loop ("plain" kernels) or as fibers that switch at __syncthreads, warp
// collectives and mbarrier waits (EMU_THREAD_ORDER=low: the first threads run ahead;
// EMU_CP_ASYNC=early: copies land at issue, not at their wait; emu_runtime.cpp). Atomics are plain read-modify-writes (a fiber only switches at a barrier, so
// nothing interleaves them). Built with EMU_RACECHECK (dev/emu/build.sh --racecheck), the kernels
// run under ThreadSanitizer, which reports two threads of a block whose accesses the PTX ISA does
// not order (emu_runtime.cpp says what orders them).
#pragma once
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __launch_bounds__(...)
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <cmath>
#include "emu_float.h"

extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

// runs fn for every thread of the grid, each block's threads as fibers (the kernel uses barriers
// or warp collectives); smem = the launch's dynamic shared memory bytes (what emu_dynamic_smem()
// hands the kernel); kernel: the kernel's address, as cudaFuncSetAttribute takes it (a launch of
// more than 48 KB is refused, as a GPU refuses it, unless that kernel was let have them)
void emu_launch_fibers(const char* name, const void* kernel, dim3 grid, dim3 block, size_t smem, const std::function<void()>& fn);
// A kernel without barriers runs its threads in a plain loop here, in the program's own code, so
// that the compiler inlines the kernel's body into the loop (a call through std::function per
// thread costs more than most of these bodies). emu_launch_begin checks the launch and sets
// gridDim / blockDim (false: an invalid launch, recorded for cudaGetLastError); emu_launch_end
// ends its profile entry.
bool emu_launch_begin(const char* name, const void* kernel, dim3 grid, dim3 block, size_t smem);
void emu_launch_end(const char* name);
// Blocks run in launch order (x fastest), or with EMU_BLOCK_ORDER=reverse in the opposite one: a
// GPU promises no order, and a kernel whose result depends on it shows it there.
// emu_set_block sets blockIdx to the i-th block to run.
void emu_set_block(dim3 grid, size_t i);
template <typename F>
__attribute__((flatten)) static inline void emu_launch_plain(const char* name, const void* kernel, dim3 grid, dim3 block, size_t smem,
                                                             const F& fn) {
    if (!emu_launch_begin(name, kernel, grid, block, smem)) return;
    for (size_t bi = 0; bi < (size_t)grid.x * grid.y * grid.z; bi++) {
        emu_set_block(grid, bi);
        for (unsigned tz = 0; tz < block.z; tz++)
            for (unsigned ty = 0; ty < block.y; ty++)
                for (unsigned tx = 0; tx < block.x; tx++) {
                    threadIdx.x = tx; threadIdx.y = ty; threadIdx.z = tz;
                    fn();
                }
    }
    emu_launch_end(name);
}
// opens a kernel declared with __launch_bounds__(max_threads, ...) (rewrite_launches.py): true for
// a block of more threads, whose launch then runs none of the kernel and leaves an error for
// cudaGetLastError, with an EMU: line (a GPU refuses the launch)
bool emu_launch_bound(long long max_threads);
// fibers is the literal true or false that rewrite_launches.py writes
#define EMU_LAUNCH(name, fibers, kernel, grid, block, smem, ...) EMU_LAUNCH_##fibers(name, kernel, grid, block, smem, __VA_ARGS__)
#define EMU_LAUNCH_true(name, kernel, grid, block, smem, ...) \
    emu_launch_fibers(name, kernel, dim3(grid), dim3(block), (size_t)(smem), [&]() { __VA_ARGS__; })
#define EMU_LAUNCH_false(name, kernel, grid, block, smem, ...) \
    emu_launch_plain(name, kernel, dim3(grid), dim3(block), (size_t)(smem), [&]() { __VA_ARGS__; })
// `extern __shared__ T name[];` is rewritten to `T* name = (T*)emu_dynamic_smem();`: one buffer of
// the launch's size, shared by the threads of the block running now
void* emu_dynamic_smem();

// barriers and warp collectives (full warps only, as every kernel of the engine uses them)
void __syncthreads();
// a named barrier (llmc/mma.cuh's bar_sync): barrier id of `threads` threads, each waits for the count
void emu_bar_sync(int id, int threads);
// mbarriers (llmc/mma.cuh's mbar_*): the 8 bytes hold the expected count, the arrivals of the
// current phase and the phase; wait(parity) returns once the phase of that parity has completed
void emu_mbar_init(uint64_t* bar, int count);
void emu_mbar_arrive(uint64_t* bar);
void emu_mbar_wait(uint64_t* bar, int parity);
// cp.async (llmc/mma.cuh's cp_async16 / cp_async8, cp_async_commit, cp_async_wait,
// cp_async_mbar_arrive), as late as the PTX ISA lets a copy land: its source is read at issue, its
// bytes reach shared memory only at the issuing thread's cp.async.wait_group that covers its group,
// or, for the copies a cp.async.mbarrier.arrive tracks (every one the thread issued before it, not
// yet landed), when that barrier's phase completes. A read of the destination before then sees the
// old bytes (0xFF garbage in a block's fresh shared memory), so a missing or early wait shows in
// the results. Kernels run without fibers (no barrier) land each copy at once.
void emu_cp_async(void* dst, const void* src, int bytes, bool valid);
void emu_cp_async_commit();
void emu_cp_async_wait(int n);
void emu_cp_async_mbar_arrive(uint64_t* bar);
// setmaxnreg (llmc/mma.cuh's warpgroup_registers_*): checks the PTX ISA's rules (a multiple of 8 in
// 24..256; the same instruction, .inc or .dec, by every warp of a warpgroup the block holds whole);
// registers have no meaning here, so nothing else happens
void emu_setmaxnreg(int count, int inc);
// wgmma (llmc/mma.cuh's Wgmma, wgmma_fence / _commit / _wait), per the PTX ISA: the 128 threads of
// a warpgroup issue each instruction together; a thread's D registers (the n / 2 floats at d)
// change only at its own wgmma.wait_group that covers the instruction's group, and the operands
// are read from the async proxy's view of shared memory (through the descriptors, llmc/mma.cuh's
// layout tables; see emu_fence_proxy_async) at the first such wait in the warpgroup, once all 128
// threads have issued it. A wgmma without a wgmma.fence
// since the thread's start or last wait, a warpgroup whose threads issue different instructions or
// group them differently, and a thread that ends with a wgmma not waited for stop the program.
// a_regs: the thread's A fragment (4 registers), or NULL for A from shared memory at desc_a.
void emu_wgmma(int n, int trans_a, int trans_b, const uint32_t* a_regs, uint64_t desc_a, uint64_t desc_b, float* d, int accumulate);
void emu_wgmma_fence();
// fence.proxy.async.shared::cta: the thread's earlier stores to shared memory (and the copies it has
// seen land) made visible to the async proxy, which wgmma reads through; dev/emu keeps the proxy's
// view of shared memory apart and publishes a warpgroup's stores once all its threads have fenced
void emu_fence_proxy_async();
void emu_wgmma_commit();
void emu_wgmma_wait(int n);
// a shared-memory address as a descriptor holds it: the offset in the block's dynamic shared
// memory (the only shared memory dev/emu gives an address; anything else stops the program)
uint32_t emu_smem_address(const void* p);
// __syncwarp: the warp's lanes wait for each other (full mask only)
void __syncwarp(unsigned mask = 0xffffffffu);
double emu_shfl_xor(double v, int lane_mask);
unsigned int emu_reduce_max_u32(unsigned int v);
unsigned int emu_reduce_add_u32(unsigned int v);
// stops the program: a vector access of `bytes` (what: the wrapper) at p, off its alignment (on a
// GPU the kernel stops with a misaligned address)
void emu_misaligned(const void* p, int bytes, const char* what);
// llmc/cuda_common.cuh's warp sums and max (EMU_WARP_REDUCE): every lane's result of the xor
// butterfly over the warp's 32 values, computed once per warp in one exchange
#define EMU_WARP_REDUCE 1
enum { EMU_BUTTERFLY_SUM_F32 = 0, EMU_BUTTERFLY_MAX_F32 = 1, EMU_BUTTERFLY_SUM_F64 = 2 };
double emu_warp_butterfly(double v, int op);
template <typename T>
static inline T __shfl_xor_sync(unsigned, T v, int lane_mask) { return (T)emu_shfl_xor((double)v, lane_mask); }
static inline unsigned int __reduce_max_sync(unsigned, unsigned int v) { return emu_reduce_max_u32(v); }
static inline unsigned int __reduce_add_sync(unsigned, unsigned int v) { return emu_reduce_add_u32(v); }

// Warp-wide exchange: every lane of the (full) warp gives `bytes` bytes (at most 64); all (32 *
// bytes) receives them in lane order. The tensor-core instructions below are built on it.
void emu_warp_gather(const void* mine, void* all, size_t bytes);
static inline int emu_lane() { return (int)((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32); }
static inline float emu_bf16_bits(uint32_t u16) { float f; uint32_t u = u16 << 16; memcpy(&f, &u, 4); return f; }

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (llmc/mma.cuh), per the PTX ISA's fragment
// tables: lane = 4 * g + c holds A[g][2c..] / A[g+8][2c..] / A[g][2c+8..] / A[g+8][2c+8..] in
// a0..a3, B[2c..][g] / B[2c+8..][g] in b0, b1 and D[g][2c..] / D[g+8][2c..] in d0, d1 / d2, d3.
// Products of bf16 are exact in fp32; they are added to C in k order; a NaN result is the GPU's
// (emu_float.h).
#define EMU_WARP_MMA 1
static inline void emu_warp_mma(float* d, const uint32_t* a, const uint32_t* b, const float* c) {
    struct Regs { uint32_t a[4], b[2]; float c[4]; } mine, all[32];
    memcpy(mine.a, a, 16); memcpy(mine.b, b, 8); memcpy(mine.c, c, 16);
    emu_warp_gather(&mine, all, sizeof(Regs));
    int lane = emu_lane(), g = lane / 4, q = lane % 4;
    for (int i = 0; i < 4; i++) {
        int row = g + 8 * (i / 2), col = 2 * q + i % 2;
        float acc = all[lane].c[i];
        for (int k = 0; k < 16; k++) {
            const Regs& ra = all[4 * (row % 8) + (k % 8) / 2];  // a0..a3 = rows 0-7 / 8-15, columns 0-7 / 8-15
            float av = emu_bf16_bits((ra.a[row / 8 + 2 * (k / 8)] >> (16 * (k % 2))) & 0xffff);
            const Regs& rb = all[4 * col + (k % 8) / 2];
            float bv = emu_bf16_bits((rb.b[k / 8] >> (16 * (k % 2))) & 0xffff);
            acc += av * bv;
        }
        d[i] = emu_gpu_f32(acc);
    }
}

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lanes 8i..8i+7 address rows 0..7 of matrix i;
// register i receives row g, elements 2c, 2c+1 (transposed: elements [2c][g], [2c+1][g]).
static inline void emu_warp_ldmatrix(uint32_t* r, const void* row, bool trans) {
    const uint16_t* rows[32];
    const uint16_t* mine = (const uint16_t*)row;
    if (((uintptr_t)row) % 16 != 0) { fprintf(stderr, "EMU FATAL: ldmatrix row address not 16-byte aligned\n"); abort(); }
    emu_warp_gather(&mine, rows, sizeof(mine));
    int lane = emu_lane(), g = lane / 4, q = lane % 4;
    for (int i = 0; i < 4; i++) {
        uint32_t lo, hi;
        if (!trans) { lo = rows[8 * i + g][2 * q]; hi = rows[8 * i + g][2 * q + 1]; }
        else { lo = rows[8 * i + 2 * q][g]; hi = rows[8 * i + 2 * q + 1][g]; }
        r[i] = lo | hi << 16;
    }
}

// correctly rounded fp32 arithmetic (built with -ffp-contract=off, so nothing is fused); a NaN
// result is the GPU's (emu_float.h)
static inline float __fadd_rn(float a, float b) { return emu_gpu_f32(a + b); }
static inline float __fsub_rn(float a, float b) { return emu_gpu_f32(a - b); }
static inline float __fmul_rn(float a, float b) { return emu_gpu_f32(a * b); }
static inline float __fdiv_rn(float a, float b) { return emu_gpu_f32(a / b); }
static inline float __fmaf_rn(float a, float b, float c) { return emu_gpu_f32(std::fmaf(a, b, c)); }  // one rounding, as fma.rn.f32
static inline unsigned int __float_as_uint(float x) { unsigned int u; memcpy(&u, &x, 4); return u; }
static inline float __uint_as_float(unsigned int u) { float x; memcpy(&x, &u, 4); return x; }
static inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
static inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }

static inline unsigned int atomicMax(unsigned int* p, unsigned int v) { unsigned int o = *p; if (v > o) *p = v; return o; }
static inline unsigned int atomicMin(unsigned int* p, unsigned int v) { unsigned int o = *p; if (v < o) *p = v; return o; }
static inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) { unsigned long long o = *p; *p += v; return o; }
static inline float atomicAdd(float* p, float v) { float o = *p; *p = emu_gpu_f32(o + v); return o; }
static inline int atomicAdd(int* p, int v) { int o = *p; *p += v; return o; }
// blocks run one after another here: a fence orders nothing more, and the cache-level loads and
// stores are plain ones
static inline void __threadfence() {}
template <typename T> static inline T __ldcg(const T* p) { return *p; }
template <typename T> static inline T __ldcs(const T* p) { return *p; }
// red.global.add.f32 (llmc/mma.cuh's red_add_f32x4, per element): rounds to nearest even and
// flushes subnormal inputs and results to sign-preserving zero, as the PTX ISA says it does on
// global memory without .noftz; a NaN is the GPU's (emu_float.h)
static inline float emu_ftz(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }
static inline void emu_red_add_f32(float* p, float v) { *p = emu_gpu_f32(emu_ftz(emu_ftz(*p) + emu_ftz(v))); }
template <typename T> static inline void __stcg(T* p, T v) { *p = v; }
