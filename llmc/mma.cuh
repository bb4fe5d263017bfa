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
// Also the warpgroup register budgets of a warp-specialized kernel (setmaxnreg, sm_90a only), and,
// for the Hopper kernels, the warpgroup MMA (wgmma, sm_90a only; at the end of this file).
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
#if __CUDA_ARCH__ >= 900
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(s), "r"(parity) : "memory");
#else  // sm_80: test_wait (no suspend), the same acquire on success
        asm volatile("{\n .reg .pred p;\n mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(s), "r"(parity) : "memory");
#endif
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
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
                 : "memory");
#elif defined(__CUDA_ARCH__)  // sm_80: the four elements one by one (each add rounds and flushes as above)
    asm volatile("red.relaxed.gpu.global.add.f32 [%0], %1;\n" ::"l"(p), "f"(v.x) : "memory");
    asm volatile("red.relaxed.gpu.global.add.f32 [%0], %1;\n" ::"l"(p + 1), "f"(v.y) : "memory");
    asm volatile("red.relaxed.gpu.global.add.f32 [%0], %1;\n" ::"l"(p + 2), "f"(v.z) : "memory");
    asm volatile("red.relaxed.gpu.global.add.f32 [%0], %1;\n" ::"l"(p + 3), "f"(v.w) : "memory");
#elif defined(EMU_WARP_MMA)
    emu_red_add_f32(p, v.x); emu_red_add_f32(p + 1, v.y); emu_red_add_f32(p + 2, v.z); emu_red_add_f32(p + 3, v.w);
#endif
}

// ---------------------------------------------------------------------------------------------
// Warpgroup MMA (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate": wgmma,
// sm_90a): D (64 x N, fp32) = A (64 x 16, bf16) B (16 x N, bf16) + D, issued together by the 128
// threads of a warpgroup (four warps, the first a multiple of 4) and run asynchronously: the
// thread goes on, and D's registers may be read or written only after a wgmma_wait that covers
// the group (wgmma_commit) the instruction belongs to. wgmma_fence comes before the first wgmma
// and again before any wgmma that follows a register access to its D or A (after a wait). A comes
// from shared memory (ss) or registers (rs), B from shared memory, each described by a 64-bit
// matrix descriptor (wgmma_desc); shared memory written by ordinary stores needs
// fence.proxy.async before the wgmma that reads it (wgmma_fence_smem, then a barrier).
// Fragments, per thread of the warpgroup: warp w = (thread % 128) / 32 holds rows 16 w .. 16 w + 15,
// g = lane / 4, c = lane % 4:
//   D (fp32), N / 2 floats: d[4 j + i] for the n8 block j: i = 0, 1 -> D[16 w + g][8 j + 2 c + i],
//                           i = 2, 3 -> D[16 w + g + 8][8 j + 2 c + i - 2]   (mma.m16n8's D, per block)
//   A in registers, 4: as mma.m16n8k16's A fragment, for the warp's 16 rows
// Shared-memory layouts (PTX ISA, "Shared Memory Matrix Layout", "Matrix Descriptor"): a K-major
// operand (A, or B with TRANS_B 0: K contiguous, as Kᵀ for Q Kᵀ) or an MN-major one (B with
// TRANS_B 1: N contiguous, as V for P V), element (x, k) of the 64 x 16 A (x = m) or the
// 16 x N B (x = n), bf16, at byte start + off, then swizzled:
//   K-major,  no swizzle: off = (x % 8) 16 + (x / 8) SBO + (k % 8) 2 + (k / 8) LBO
//   K-major,  swizzle S:  off = (x % 8) S + (x / 8) SBO + 2 k              (LBO unused)
//   MN-major, no swizzle: off = (x % 8) 2 + (x / 8) SBO + (k % 8) 16 + (k / 8) LBO
//   MN-major, swizzle S:  off = (x % (S / 2)) 2 + (x / (S / 2)) LBO + (k % 8) S + (k / 8) SBO
// with S = 32, 64 or 128 bytes; the swizzle XORs the shared address's bits 4.. (the 16-byte chunk)
// with its bits 7.. (the 128-byte row), 1, 2 or 3 of them for S = 32, 64, 128: an atom (8 rows of
// S bytes) starts on a multiple of 1024 bytes (the descriptor's base offset is 0), and the k16
// steps of a swizzled K-major tile advance start by 32 bytes within it.
// test_mma_layout checks these tables on the GPU element by element; dev/emu implements them
// (emu_wgmma) with the asynchrony made visible: D's registers change only at the thread's wait,
// the operands are read from shared memory at the first wait of the warpgroup that covers them.
#if (defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)) || (!defined(__CUDA_ARCH__) && defined(EMU_WARP_MMA))
#define MMA_WGMMA 1
#else
#define MMA_WGMMA 0
#endif
enum WgmmaSwizzle { WGMMA_NO_SWIZZLE = 0, WGMMA_SWIZZLE_128B = 1, WGMMA_SWIZZLE_64B = 2, WGMMA_SWIZZLE_32B = 3 };

// the shared-memory address of p (cvta; under dev/emu its offset in the block's dynamic shared memory)
__device__ __forceinline__ uint32_t smem_address(const void* p) {
#if defined(__CUDA_ARCH__)
    return (uint32_t)__cvta_generic_to_shared(p);
#elif defined(EMU_WARP_MMA)
    return emu_smem_address(p);
#else
    (void)p;
    return 0;
#endif
}

// the matrix descriptor: start address, leading and stride byte offsets (multiples of 16), swizzle
__device__ __forceinline__ uint64_t wgmma_desc(const void* start, uint32_t lbo, uint32_t sbo, WgmmaSwizzle swizzle) {
    return (uint64_t)((smem_address(start) & 0x3FFFF) >> 4) | (uint64_t)((lbo & 0x3FFFF) >> 4) << 16 |
           (uint64_t)((sbo & 0x3FFFF) >> 4) << 32 | (uint64_t)swizzle << 62;
}

__device__ __forceinline__ void wgmma_fence() {
#if defined(__CUDA_ARCH__) && MMA_WGMMA
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#elif defined(EMU_WARP_MMA)
    emu_wgmma_fence();
#endif
}
// this thread's ordinary shared-memory stores made visible to the async proxy (wgmma, bulk copies)
__device__ __forceinline__ void wgmma_fence_smem() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#elif defined(EMU_WARP_MMA)
    emu_fence_proxy_async();
#endif
}
// closes the group of wgmma issued since the last commit
__device__ __forceinline__ void wgmma_commit() {
#if defined(__CUDA_ARCH__) && MMA_WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#elif defined(EMU_WARP_MMA)
    emu_wgmma_commit();
#endif
}
// waits until at most N committed groups are still in flight; d (n floats) are accumulators the
// compiler must not read before it (their registers are written by the hardware, unseen by it)
template <int N>
__device__ __forceinline__ void wgmma_wait(float* d, int n) {
#if defined(__CUDA_ARCH__) && MMA_WGMMA
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#pragma unroll
    for (int i = 0; i < n; i++) asm volatile("" : "+f"(d[i])::"memory");
#elif defined(EMU_WARP_MMA)
    (void)d; (void)n;
    emu_wgmma_wait(N);
#endif
}

// a wgmma with A in registers reads them asynchronously too: after the wait that covers it, this
// keeps the n registers at a (the compiler neither reuses nor moves them before this point)
__device__ __forceinline__ void wgmma_hold(uint32_t* a, int n) {
#if defined(__CUDA_ARCH__) && MMA_WGMMA
#pragma unroll
    for (int i = 0; i < n; i++) asm volatile("" : "+r"(a[i])::"memory");
#else
    (void)a; (void)n;
#endif
}

// D (N / 2 floats of this thread) = A B + (accumulate ? D : 0), m64nNk16 bf16 -> fp32, N 64 or 128;
// ss: A from shared memory (desc_a, K-major with TRANS_A 0, M-major with TRANS_A 1, as dSᵀ for
// dQ = dS K), rs: A in registers (a, 4); B at desc_b, K-major (TRANS_B 0) or N-major (TRANS_B 1)
template <int N>
struct Wgmma;
#if defined(__CUDA_ARCH__) && MMA_WGMMA
// the accumulator operands d[i .. i + 7]
#define WGMMA_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
template <>
struct Wgmma<64> {
    template <int TRANS_A, int TRANS_B>
    __device__ __forceinline__ static void ss(float* d, uint64_t desc_a, uint64_t desc_b, int accumulate) {
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                     "}, %32, %33, p, 1, 1, %35, %36;\n}\n"
                     : WGMMA_D8(0), WGMMA_D8(8), WGMMA_D8(16), WGMMA_D8(24)
                     : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TRANS_A), "n"(TRANS_B));
    }
    template <int TRANS_B>
    __device__ __forceinline__ static void rs(float* d, const uint32_t* a, uint64_t desc_b, int accumulate) {
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
                     "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                     : WGMMA_D8(0), WGMMA_D8(8), WGMMA_D8(16), WGMMA_D8(24)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(TRANS_B));
    }
};
template <>
struct Wgmma<128> {
    template <int TRANS_A, int TRANS_B>
    __device__ __forceinline__ static void ss(float* d, uint64_t desc_a, uint64_t desc_b, int accumulate) {
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                     "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                     "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                     "}, %64, %65, p, 1, 1, %67, %68;\n}\n"
                     : WGMMA_D8(0), WGMMA_D8(8), WGMMA_D8(16), WGMMA_D8(24), WGMMA_D8(32), WGMMA_D8(40), WGMMA_D8(48), WGMMA_D8(56)
                     : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TRANS_A), "n"(TRANS_B));
    }
    template <int TRANS_B>
    __device__ __forceinline__ static void rs(float* d, const uint32_t* a, uint64_t desc_b, int accumulate) {
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                     "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                     "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                     "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
                     : WGMMA_D8(0), WGMMA_D8(8), WGMMA_D8(16), WGMMA_D8(24), WGMMA_D8(32), WGMMA_D8(40), WGMMA_D8(48), WGMMA_D8(56)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(TRANS_B));
    }
};
#undef WGMMA_D8
#else
template <int N>
struct Wgmma {
    static_assert(N == 64 || N == 128, "Wgmma: N is 64 or 128");
    template <int TRANS_A, int TRANS_B>
    __device__ __forceinline__ static void ss(float* d, uint64_t desc_a, uint64_t desc_b, int accumulate) {
#if defined(EMU_WARP_MMA)
        emu_wgmma(N, TRANS_A, TRANS_B, NULL, desc_a, desc_b, d, accumulate);
#else
        (void)d; (void)desc_a; (void)desc_b; (void)accumulate;
#endif
    }
    template <int TRANS_B>
    __device__ __forceinline__ static void rs(float* d, const uint32_t* a, uint64_t desc_b, int accumulate) {
#if defined(EMU_WARP_MMA)
        emu_wgmma(N, 0, TRANS_B, a, 0, desc_b, d, accumulate);
#else
        (void)d; (void)a; (void)desc_b; (void)accumulate;
#endif
    }
};
#endif
