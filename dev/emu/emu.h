// emu.h — the CUDA device-side language on the CPU, for dev/emu (see dev/emu/build.sh).
// Force-included (g++ -include dev/emu/emu.h) into copies of the CUDA sources whose kernel launches
// dev/emu/rewrite_launches.py has turned into EMU_LAUNCH calls. Kernels become plain functions run
// once per thread: blocks one after another, the threads of a block either in a loop ("plain"
// kernels) or as fibers that switch at __syncthreads and warp collectives. Atomics are plain
// read-modify-writes (a fiber only switches at a barrier, so nothing interleaves them).
#pragma once
#define __global__
#define __device__
#define __host__
#define __shared__ static
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <cstring>
#include <functional>

extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

// runs fn for every thread of the grid; fibers = the kernel uses barriers or warp collectives
void emu_launch(const char* name, bool fibers, dim3 grid, dim3 block, const std::function<void()>& fn);
#define EMU_LAUNCH(name, fibers, grid, block, ...) emu_launch(name, fibers, dim3(grid), dim3(block), [&]() { __VA_ARGS__; })

// barriers and warp collectives (full warps only, as every kernel of the engine uses them)
void __syncthreads();
double emu_shfl_xor(double v, int lane_mask);
unsigned int emu_reduce_max_u32(unsigned int v);
unsigned int emu_reduce_add_u32(unsigned int v);
template <typename T>
static inline T __shfl_xor_sync(unsigned, T v, int lane_mask) { return (T)emu_shfl_xor((double)v, lane_mask); }
static inline unsigned int __reduce_max_sync(unsigned, unsigned int v) { return emu_reduce_max_u32(v); }
static inline unsigned int __reduce_add_sync(unsigned, unsigned int v) { return emu_reduce_add_u32(v); }

// correctly rounded fp32 arithmetic (built with -ffp-contract=off, so nothing is fused)
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline unsigned int __float_as_uint(float x) { unsigned int u; memcpy(&u, &x, 4); return u; }
static inline float __uint_as_float(unsigned int u) { float x; memcpy(&x, &u, 4); return x; }
static inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
static inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }

static inline unsigned int atomicMax(unsigned int* p, unsigned int v) { unsigned int o = *p; if (v > o) *p = v; return o; }
static inline unsigned int atomicMin(unsigned int* p, unsigned int v) { unsigned int o = *p; if (v < o) *p = v; return o; }
static inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) { unsigned long long o = *p; *p += v; return o; }
static inline float atomicAdd(float* p, float v) { float o = *p; *p += v; return o; }
static inline int atomicAdd(int* p, int v) { int o = *p; *p += v; return o; }
