// mma.cuh — the tensor-core instructions the fused attention kernels use, each wrapped in one small
// inline function so the kernels read like the algorithm: a warp-wide bf16 matrix multiply-
// accumulate (mma.sync.m16n8k16), 8x8 tile loads from shared memory into fragments (ldmatrix, plain
// and transposed) and 16-byte asynchronous global-to-shared copies (cp.async, with commit/wait).
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16" with .bf16), per lane: g = lane / 4,
// c = lane % 4. Registers hold two bf16, the lower column / row index in the low 16 bits.
//   A (16 x 16, row-major), 4 regs: a0 = A[g][2c..2c+1], a1 = A[g+8][2c..2c+1],
//                                   a2 = A[g][2c+8..2c+9], a3 = A[g+8][2c+8..2c+9]
//   B (16 x 8, "col"),      2 regs: b0 = B[2c..2c+1][g], b1 = B[2c+8..2c+9][g]
//   C, D (16 x 8, fp32),    4 floats: d0, d1 = D[g][2c..2c+1], d2, d3 = D[g+8][2c..2c+1]
// ldmatrix .x4 (PTX ISA, "ldmatrix"): lanes 8i..8i+7 give the addresses of rows 0..7 of matrix i
// (16 contiguous bytes each); register i of a lane receives matrix i's row g, elements 2c and
// 2c+1, or with .trans its elements [2c][g] and [2c+1][g].
// So an A fragment is ldmatrix_x4 of a row-major tile with lane l pointing at row l % 16, column
// 8 * (l / 16); and the C fragments of two neighbouring n8 tiles of a product are, packed to bf16,
// the A fragment of the next product's k16 step (mma_pack_a).
//
// Also the warpgroup register budgets of a warp-specialized kernel (setmaxnreg, sm_90a only).
// dev/emu runs the same functions through emu_warp_mma / emu_warp_ldmatrix (dev/emu/emu.h), which
// gather the warp's registers and hand each lane what the tables above say; cp.async there is a
// plain copy (a copy that has completed before the wait is one the wait allows).
#pragma once
#include <cstdint>
#include "cuda_common.cuh"

// D = A B + C; a (4), b (2), c, d (4)
__device__ __forceinline__ void mma_bf16_16816(float* d, const uint32_t* a, const uint32_t* b, const float* c) {
#if defined(__CUDA_ARCH__)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %11, %12, %13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#elif defined(EMU_WARP_MMA)
    emu_warp_mma(d, a, b, c);
#endif
}

// r (4): four 8x8 bf16 matrices; row is this lane's row address in shared memory (16-byte aligned)
__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, const bf16* row) {
#if defined(__CUDA_ARCH__)
    unsigned int s = (unsigned int)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
#elif defined(EMU_WARP_MMA)
    emu_warp_ldmatrix(r, row, false);
#endif
}

// as ldmatrix_x4, each matrix transposed
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, const bf16* row) {
#if defined(__CUDA_ARCH__)
    unsigned int s = (unsigned int)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
#elif defined(EMU_WARP_MMA)
    emu_warp_ldmatrix(r, row, true);
#endif
}

// 16 bytes global -> shared, asynchronous; with valid = false the 16 bytes are zero-filled and
// src is not read (masked tails).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
#if defined(__CUDA_ARCH__)
    unsigned int s = (unsigned int)__cvta_generic_to_shared(dst);
    int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(n));
#elif defined(EMU_WARP_MMA)
    emu_cp_async(dst, src, 16, valid);
#else
    if (valid) memcpy(dst, src, 16); else memset(dst, 0, 16);
#endif
}

// 8 bytes global -> shared, asynchronous (cp.async.ca: the only cp.async size below 16 bytes
// that keeps src 8-byte aligned rather than 16); valid = false zero-fills as above
__device__ __forceinline__ void cp_async8(void* dst, const void* src, bool valid) {
#if defined(__CUDA_ARCH__)
    unsigned int s = (unsigned int)__cvta_generic_to_shared(dst);
    int n = valid ? 8 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(s), "l"(src), "r"(n));
#elif defined(EMU_WARP_MMA)
    emu_cp_async(dst, src, 8, valid);
#else
    if (valid) memcpy(dst, src, 8); else memset(dst, 0, 8);
#endif
}

// closes the group of cp.async calls issued since the last commit
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.commit_group;\n" ::);
#elif defined(EMU_WARP_MMA)
    emu_cp_async_commit();
#endif
}

// waits until at most N committed groups of this thread are still in flight
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#elif defined(EMU_WARP_MMA)
    emu_cp_async_wait(N);
#endif
}

// two floats -> one register of two bf16 (lo in the low half)
__device__ __forceinline__ uint32_t mma_pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}

// a (4) = the A fragment (16 x 16, bf16) made of the C fragments c0 (columns 0..7) and c1 (8..15)
__device__ __forceinline__ void mma_pack_a(uint32_t* a, const float* c0, const float* c1) {
    a[0] = mma_pack_bf16(c0[0], c0[1]);
    a[1] = mma_pack_bf16(c0[2], c0[3]);
    a[2] = mma_pack_bf16(c1[0], c1[1]);
    a[3] = mma_pack_bf16(c1[2], c1[3]);
}

// A named barrier (PTX ISA, "bar.sync"): barrier id (1..15; __syncthreads uses 0) of `threads`
// threads, a multiple of 32, counted per whole warp; each waits until that many have arrived, and
// their earlier memory accesses are performed for all of them.
__device__ __forceinline__ void bar_sync(int id, int threads) {
#if defined(__CUDA_ARCH__)
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
#elif defined(EMU_WARP_MMA)
    emu_bar_sync(id, threads);
#endif
}

// mbarriers (PTX ISA, "mbarrier"): a 64-bit object in shared memory that counts arrivals; when
// `count` threads have arrived its current phase completes and the next begins (phases 0, 1, 2, ...).
// arrive counts this thread in and goes on, releasing its earlier memory accesses (.release.cta);
// wait(parity) returns once the phase of that parity has completed and acquires (.acquire.cta) what
// its arrivals released: a producer stores and arrives, its consumer waits and then reads. init
// is done by one thread before a __syncthreads.
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
#if defined(__CUDA_ARCH__)
    unsigned int s = (unsigned int)__cvta_generic_to_shared(bar);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(s), "r"(count) : "memory");
#elif defined(EMU_WARP_MMA)
    emu_mbar_init(bar, count);
#endif
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
#if defined(__CUDA_ARCH__)
    unsigned int s = (unsigned int)__cvta_generic_to_shared(bar);
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(s) : "memory");
#elif defined(EMU_WARP_MMA)
    emu_mbar_arrive(bar);
#endif
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, int parity) {
#if defined(__CUDA_ARCH__)
    unsigned int s = (unsigned int)__cvta_generic_to_shared(bar), done;
    do {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(s), "r"(parity) : "memory");
    } while (!done);
#elif defined(EMU_WARP_MMA)
    emu_mbar_wait(bar, parity);
#endif
}

// An arrival on the mbarrier once every cp.async this thread has issued so far has completed (PTX
// ISA, "cp.async.mbarrier.arrive"): with .noinc the arrival is one of the `count` that mbar_init
// set, so a barrier of count N completes when N threads' copies have all landed, and mbar_wait then
// makes them visible to the waiter. The thread does not wait. dev/emu lands the copies only when
// the barrier's phase completes (emu_cp_async_mbar_arrive), so a read before the wait sees the
// old bytes there.
__device__ __forceinline__ void cp_async_mbar_arrive(uint64_t* bar) {
#if defined(__CUDA_ARCH__)
    unsigned int s = (unsigned int)__cvta_generic_to_shared(bar);
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(s) : "memory");
#elif defined(EMU_WARP_MMA)
    emu_cp_async_mbar_arrive(bar);
#endif
}

// setmaxnreg (PTX ISA, "setmaxnreg": sm_90a): the executing warp's register budget becomes N a
// thread (a multiple of 8 in 24..256), .inc taking registers from the block's pool (waiting until
// it has them), .dec giving them back; every warp of a warpgroup (four warps, the first a multiple
// of 4) executes the same one. It changes no value: where the build has no sm_90a code (plain
// sm_90, sm_80, the compute_90 PTX an sm_90a build carries) it is left out and the kernel keeps
// the registers it was launched with. dev/emu checks the immediate and the warpgroup.
// 1 where the budgets change (sm_90a code, and dev/emu, which runs that path), else 0: a kernel
// that relies on the raised budget keeps its register-hungry variant to these builds.
#if (defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)) || (!defined(__CUDA_ARCH__) && defined(EMU_WARP_MMA))
#define MMA_SETMAXNREG 1
#else
#define MMA_SETMAXNREG 0
#endif
template <int N>
__device__ __forceinline__ void warpgroup_registers_inc() {
    static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: a multiple of 8 in 24..256");
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#elif defined(EMU_WARP_MMA)
    emu_setmaxnreg(N, 1);
#endif
}
template <int N>
__device__ __forceinline__ void warpgroup_registers_dec() {
    static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: a multiple of 8 in 24..256");
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#elif defined(EMU_WARP_MMA)
    emu_setmaxnreg(N, 0);
#endif
}

// p[0..3] += v[0..3] in global memory, each element an atomic add at the GPU's L2 (red.global.add.
// v4.f32, PTX ISA "red": sm_90; relaxed, GPU scope; p 16-byte aligned). Nothing comes back, so the
// thread does not wait for it; a later fence waits for it to be performed. Per the ISA, the add
// rounds to nearest even and, without .noftz (PTX 9.4 and later only), flushes subnormal inputs
// and results to sign-preserving zero on global memory.
__device__ __forceinline__ void red_add_f32x4(float* p, float4 v) {
#if defined(__CUDA_ARCH__)
    asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
                 : "memory");
#elif defined(EMU_WARP_MMA)
    emu_red_add_f32(p, v.x); emu_red_add_f32(p + 1, v.y); emu_red_add_f32(p + 2, v.z); emu_red_add_f32(p + 3, v.w);
#endif
}
