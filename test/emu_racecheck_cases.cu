// emu_racecheck_cases.cu — small kernels for dev/emu's racecheck build (dev/emu/build.sh
// --racecheck; test/test_emu_racecheck.sh runs them): each hands shared memory from some threads
// of a block to others by one of the orderings the engine's kernels use, once with the ordering
// and once without the one wait or barrier it needs. Built only there: the cases without their wait
// race on a GPU, and their results have no defined value.
//   emu_racecheck_cases            every case with its ordering: ThreadSanitizer must report nothing
//   emu_racecheck_cases CASE       one case without it: ThreadSanitizer must report a race in CASE's
//                                  kernel (the program exits 66, TSAN_OPTIONS' default exitcode)
// The cases (64 threads, two warps; PTX ISA: "bar.sync", "mbarrier", "cp.async",
// "cp.async.wait_group", "cp.async.mbarrier.arrive"):
//   barrier       each thread stores a word, __syncthreads, reads the other warp's word
//   mbarrier      warp 0 stores and arrives on a full barrier (count 32); warp 1 waits, reads
//   ring          six rounds through three stages, as the flash forward's (K, V) ring: every thread
//                 waits for a round's full barrier (count 64), reads a word of the other warp,
//                 arrives on its empty one, then waits for the empty barrier of the stage that the
//                 round before used and stores the round two ahead there; the parity of a stage's
//                 k-th use is k & 1
//   cp_async      each thread copies 16 bytes by cp.async, commits, waits for its group,
//                 __syncthreads, reads the other warp's
//   cp_async_own  as cp_async, one thread reading its own copy (no barrier needed: the wait is)
//   cp_async_mbar each thread of warp 0 copies 16 bytes and arrives by cp.async.mbarrier.arrive on a
//                 barrier of count 32; warp 1 waits, reads
//   wgmma         (128 threads, one warpgroup; "wgmma.mma_async", "wgmma.wait_group") each thread
//                 stores 16 bytes of B, __syncthreads, the warpgroup's wgmma reads all of B
//   wgmma_reuse   as wgmma, then each thread stores new bytes over its part of B after the wait
// Without: barrier_no_barrier, mbarrier_no_wait, ring_no_empty_wait (a stage refilled while the
// other warp may still read it), cp_async_no_wait (the barrier but not the wait_group: the copies
// may land after it), cp_async_own_no_wait, cp_async_mbar_no_wait, wgmma_no_barrier (B read by
// the wgmma while other threads' stores are not ordered before it), wgmma_reuse_no_wait (B
// stored over before the wgmma that reads it has been waited for).
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "../llmc/cuda_common.cuh"
#include "../llmc/mma.cuh"

static const int THREADS = 64;

__global__ void barrier_kernel(uint32_t* out, bool ordered) {
    __shared__ uint32_t s[THREADS];
    int t = threadIdx.x;
    s[t] = 1000u + t;
    if (ordered) __syncthreads();
    out[t] = s[(t + 32) % THREADS];
}

__global__ void mbarrier_kernel(uint32_t* out, bool ordered) {
    __shared__ uint32_t s[32];
    __shared__ uint64_t full;
    int t = threadIdx.x;
    if (t == 0) mbar_init(&full, 32);
    __syncthreads();
    if (t < 32) {
        s[t] = 2000u + t;
        mbar_arrive(&full);
    } else {
        if (ordered) mbar_wait(&full, 0);
        out[t - 32] = s[63 - t];
    }
}

__global__ void ring_kernel(uint32_t* out, bool ordered) {
    const int ROUNDS = 6, STAGES = 3;
    __shared__ uint32_t s[STAGES][THREADS];
    __shared__ uint64_t full[STAGES], empty[STAGES];
    int t = threadIdx.x;
    if (t == 0)
        for (int i = 0; i < STAGES; i++) { mbar_init(&full[i], THREADS); mbar_init(&empty[i], THREADS); }
    __syncthreads();
    for (int r = 0; r < STAGES - 1; r++) { s[r][t] = 3000u + 100u * r + t; mbar_arrive(&full[r]); }
    for (int r = 0; r < ROUNDS; r++) {
        int st = r % STAGES;
        mbar_wait(&full[st], (r / STAGES) & 1);
        out[r * THREADS + t] = s[st][(t + 32) % THREADS];
        mbar_arrive(&empty[st]);
        int next = r + STAGES - 1;  // into the stage that round r - 1 used
        if (next < ROUNDS) {
            if (r >= 1 && ordered) mbar_wait(&empty[(r - 1) % STAGES], ((r - 1) / STAGES) & 1);
            s[next % STAGES][t] = 3000u + 100u * next + t;
            mbar_arrive(&full[next % STAGES]);
        }
    }
}

__global__ void cp_async_kernel(uint32_t* out, const uint32_t* src, bool ordered) {
    __shared__ __align__(16) uint32_t s[THREADS * 4];
    int t = threadIdx.x;
    cp_async16(&s[t * 4], &src[t * 4], true);
    cp_async_commit();
    if (ordered) cp_async_wait<0>();
    __syncthreads();
    for (int j = 0; j < 4; j++) out[t * 4 + j] = s[(t + 32) % THREADS * 4 + j];
}

__global__ void cp_async_own_kernel(uint32_t* out, const uint32_t* src, bool ordered) {
    __shared__ __align__(16) uint32_t s[4];
    __syncthreads();  // a block of several threads in step (dev/emu: run as fibers, the copy in flight until its wait)
    if (threadIdx.x != 0) return;
    cp_async16(s, src, true);
    cp_async_commit();
    if (ordered) cp_async_wait<0>();
    for (int j = 0; j < 4; j++) out[j] = s[j];
}

__global__ void cp_async_mbar_kernel(uint32_t* out, const uint32_t* src, bool ordered) {
    __shared__ __align__(16) uint32_t s[32 * 4];
    __shared__ uint64_t full;
    int t = threadIdx.x;
    if (t == 0) mbar_init(&full, 32);
    __syncthreads();
    if (t < 32) {
        cp_async16(&s[t * 4], &src[t * 4], true);
        cp_async_mbar_arrive(&full);
    } else {
        if (ordered) mbar_wait(&full, 0);
        for (int j = 0; j < 4; j++) out[(t - 32) * 4 + j] = s[(63 - t) * 4 + j];
    }
}

// B (16 x 64, K-major, no swizzle: core matrices 128 bytes apart along n, 1024 along k) from the
// threads' 16 bytes each; A zero in registers; out: thread 0's first D element
static const int WG_THREADS = 128, WG_SMEM = 2048 + 1024;
__global__ void wgmma_kernel(uint32_t* out, bool ordered) {
    extern __shared__ __align__(16) uint8_t wg_smem[];
    uint8_t* b = wg_smem + (1024 - smem_address(wg_smem) % 1024) % 1024;
    int t = threadIdx.x;
    reinterpret_cast<uint4*>(b)[t] = make_uint4(t, t, t, t);
    wgmma_fence_smem();
    if (ordered) __syncthreads();
    float d[32];
    uint32_t a[4] = {0, 0, 0, 0};
    wgmma_fence();
    Wgmma<64>::rs<0>(d, a, wgmma_desc(b, 1024, 128, WGMMA_NO_SWIZZLE), 0);
    wgmma_commit();
    wgmma_wait<0>(d, 32);
    if (t == 0) out[0] = (uint32_t)d[0];
}
__global__ void wgmma_reuse_kernel(uint32_t* out, bool ordered) {
    extern __shared__ __align__(16) uint8_t wg_smem[];
    uint8_t* b = wg_smem + (1024 - smem_address(wg_smem) % 1024) % 1024;
    int t = threadIdx.x;
    reinterpret_cast<uint4*>(b)[t] = make_uint4(t, t, t, t);
    wgmma_fence_smem();
    __syncthreads();
    float d[32];
    uint32_t a[4] = {0, 0, 0, 0};
    wgmma_fence();
    Wgmma<64>::rs<0>(d, a, wgmma_desc(b, 1024, 128, WGMMA_NO_SWIZZLE), 0);
    wgmma_commit();
    if (ordered) wgmma_wait<0>(d, 32);
    reinterpret_cast<uint4*>(b)[t] = make_uint4(0, t, 0, t);  // the next tile
    if (!ordered) wgmma_wait<0>(d, 32);
    if (t == 0) out[0] = (uint32_t)d[0];
}

static bool run_case(const char* name, bool ordered, uint32_t* d_out, const uint32_t* d_src) {
    if (strcmp(name, "barrier") == 0) barrier_kernel<<<1, THREADS>>>(d_out, ordered);
    else if (strcmp(name, "mbarrier") == 0) mbarrier_kernel<<<1, THREADS>>>(d_out, ordered);
    else if (strcmp(name, "ring") == 0) ring_kernel<<<1, THREADS>>>(d_out, ordered);
    else if (strcmp(name, "cp_async") == 0) cp_async_kernel<<<1, THREADS>>>(d_out, d_src, ordered);
    else if (strcmp(name, "cp_async_own") == 0) cp_async_own_kernel<<<1, THREADS>>>(d_out, d_src, ordered);
    else if (strcmp(name, "cp_async_mbar") == 0) cp_async_mbar_kernel<<<1, THREADS>>>(d_out, d_src, ordered);
    else if (strcmp(name, "wgmma") == 0) wgmma_kernel<<<1, WG_THREADS, WG_SMEM>>>(d_out, ordered);
    else if (strcmp(name, "wgmma_reuse") == 0) wgmma_reuse_kernel<<<1, WG_THREADS, WG_SMEM>>>(d_out, ordered);
    else return false;
    KERNEL_CHECK();
    CUDA_CHECK(cudaDeviceSynchronize());
    return true;
}

int main(int argc, char** argv) {
    static const char* cases[] = {"barrier", "mbarrier", "ring", "cp_async", "cp_async_own", "cp_async_mbar", "wgmma", "wgmma_reuse"};
    static const char* without[] = {"barrier_no_barrier", "mbarrier_no_wait", "ring_no_empty_wait", "cp_async_no_wait",
                                    "cp_async_own_no_wait", "cp_async_mbar_no_wait", "wgmma_no_barrier", "wgmma_reuse_no_wait"};
    const int n_cases = sizeof(cases) / sizeof(cases[0]);
    uint32_t *d_out, *d_src, src[THREADS * 4];
    for (int i = 0; i < THREADS * 4; i++) src[i] = 5000u + i;
    CUDA_CHECK(cudaMalloc(&d_out, 8 * THREADS * sizeof(uint32_t)));
    CUDA_CHECK(cudaMalloc(&d_src, sizeof(src)));
    CUDA_CHECK(cudaMemcpy(d_src, src, sizeof(src), cudaMemcpyHostToDevice));
    if (argc == 1) {
        for (const char* c : cases) { run_case(c, true, d_out, d_src); printf("ran %s\n", c); }
        return 0;
    }
    for (int i = 0; i < n_cases; i++)
        if (argc == 2 && strcmp(argv[1], without[i]) == 0) {
            run_case(cases[i], false, d_out, d_src);
            printf("ran %s\n", without[i]);
            return 0;
        }
    fprintf(stderr, "usage: emu_racecheck_cases [CASE], CASE one of");
    for (const char* w : without) fprintf(stderr, " %s", w);
    fprintf(stderr, "\n");
    return 2;
}
