// cuda_common.cuh — what every CUDA file of the engine shares: the error-check macros, the bf16
// type and its conversions, 128-bit vector access, device properties with the peak bf16 FLOP/s
// used for MFU, flat-buffer casts, and the timing / validation helpers of dev/cuda and the GPU test.
//
// Precision conventions of the engine (DESIGN §1): fp32 master weights, gradients and optimizer
// state; bf16 copies of the weights and bf16 activations for compute; the residual stream, the
// logits, normalization statistics and every reduction stay fp32.
// Streams: every launcher takes the stream it runs on as its last argument.
// Errors: CUDA_CHECK / CUBLAS_CHECK print file:line, the call and the error text, then exit 1;
// KERNEL_CHECK() follows every kernel launch (launch-configuration errors surface right there;
// errors inside a kernel surface at the next synchronizing call's CUDA_CHECK).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include "rand.h"

typedef __nv_bfloat16 bf16;

#define CUDA_CHECK(call) do { cudaError_t err_ = (call); if (err_ != cudaSuccess) { \
    fprintf(stderr, "CUDA error %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
    exit(1); } } while (0)

#define CUBLAS_CHECK(call) do { cublasStatus_t st_ = (call); if (st_ != CUBLAS_STATUS_SUCCESS) { \
    fprintf(stderr, "cuBLAS error %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cublasGetStatusString(st_)); \
    exit(1); } } while (0)

#define KERNEL_CHECK() CUDA_CHECK(cudaGetLastError())

// H200 ceilings printed next to dev/cuda measurements.
static const double CUDA_H200_HBM_BYTES_PER_S = 4.8e12;   // HBM3e
static const double CUDA_H200_BF16_FLOPS = 989e12;        // dense bf16 tensor cores

static inline int cuda_ceil_div(long long a, long long b) { return (int)((a + b - 1) / b); }

// ----------------------------------------------------------------------------
// device

// 1 when a usable CUDA device exists. Never exits: without a driver or a device it returns 0, so
// tests and dev tools can skip (exit 77) on machines without a GPU.
static inline int cuda_device_present(void) {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) { cudaGetLastError(); return 0; }
    return count > 0;
}

// Dense bf16 tensor-core peak of known parts, for MFU; 0 when unknown (MFU prints "n/a").
// Matched on the device name. PCIe and NVL variants of H100 / H200 run at lower clocks and power
// and are not in the table, so they report n/a rather than a wrong number.
static inline double cuda_peak_bf16_flops(const char* name) {
    bool pcie_or_nvl = strstr(name, "PCIe") != NULL || strstr(name, "NVL") != NULL;
    if (strstr(name, "GH200") != NULL) return 989e12;
    if (strstr(name, "H200") != NULL && !pcie_or_nvl) return 989e12;
    if (strstr(name, "H100") != NULL && !pcie_or_nvl) return 989e12;  // SXM ("H100 80GB HBM3", "H100 SXM5")
    if (strstr(name, "A100") != NULL) return 312e12;
    return 0.0;
}

typedef struct {
    char name[256];
    int major, minor;          // compute capability
    int sm_count;
    size_t memory_bytes;
    double peak_bf16_flops;    // 0 = unknown
} CudaDeviceInfo;

static inline CudaDeviceInfo cuda_device_info(int device) {
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, device));
    CudaDeviceInfo d;
    snprintf(d.name, sizeof(d.name), "%s", p.name);
    d.major = p.major;
    d.minor = p.minor;
    d.sm_count = p.multiProcessorCount;
    d.memory_bytes = p.totalGlobalMem;
    d.peak_bf16_flops = cuda_peak_bf16_flops(p.name);
    return d;
}

// ----------------------------------------------------------------------------
// bf16 and 128-bit vectors

// Round to nearest even on the host (the same rounding as the device's __float2bfloat16).
static inline bf16 cuda_host_bf16(float x) { return __float2bfloat16(x); }
static inline float cuda_host_float(bf16 x) { return __bfloat162float(x); }

// 16 bytes of T, moved with one 128-bit load or store. Callers check alignment and sizes
// (cuda_aligned16) and keep a scalar path for the rest.
template <typename T>
struct alignas(16) Packed128 {
    static constexpr int size = 16 / (int)sizeof(T);
    T v[size];
    __device__ __forceinline__ T& operator[](int i) { return v[i]; }
    __device__ __forceinline__ const T& operator[](int i) const { return v[i]; }
};

static inline bool cuda_aligned16(const void* p) { return ((uintptr_t)p & 15) == 0; }

// (under dev/emu an address off 16 bytes stops the program, where a GPU stops the kernel with a
// misaligned address and a CPU would read it unseen)
template <typename T>
__device__ __forceinline__ Packed128<T> load128(const T* p) {
#if !defined(__CUDA_ARCH__) && defined(EMU_WARP_REDUCE)
    if (!cuda_aligned16(p)) emu_misaligned(p, 16, "load128");
#endif
    return *reinterpret_cast<const Packed128<T>*>(p);
}
template <typename T>
__device__ __forceinline__ void store128(T* p, const Packed128<T>& x) {
#if !defined(__CUDA_ARCH__) && defined(EMU_WARP_REDUCE)
    if (!cuda_aligned16(p)) emu_misaligned(p, 16, "store128");
#endif
    *reinterpret_cast<Packed128<T>*>(p) = x;
}

// ----------------------------------------------------------------------------
// warp and block reductions (blockDim.x a multiple of 32, at most 1024)

// Under dev/emu (EMU_WARP_REDUCE) each butterfly below runs in one warp exchange instead of five:
// the same xor tree (o = 16, 8, 4, 2, 1, x_lane combined with x_(lane^o)) on the 32 lane values,
// so the same bits in every lane, at a fifth of the emulated cost.
__device__ __forceinline__ float cuda_warp_sum(float x) {
#if !defined(__CUDA_ARCH__) && defined(EMU_WARP_REDUCE)
    return (float)emu_warp_butterfly(x, EMU_BUTTERFLY_SUM_F32);
#endif
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ __forceinline__ float cuda_warp_max(float x) {
#if !defined(__CUDA_ARCH__) && defined(EMU_WARP_REDUCE)
    return (float)emu_warp_butterfly(x, EMU_BUTTERFLY_MAX_F32);
#endif
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
__device__ __forceinline__ double cuda_warp_sum_double(double x) {
#if !defined(__CUDA_ARCH__) && defined(EMU_WARP_REDUCE)
    return emu_warp_butterfly(x, EMU_BUTTERFLY_SUM_F64);
#endif
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// Sum over the block, returned to every thread; a fixed tree, so the result is reproducible.
// Uses 32 floats of shared memory; safe to call repeatedly (syncs before reuse).
__device__ inline float cuda_block_sum(float x) {
    __shared__ float partial[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    x = cuda_warp_sum(x);
    __syncthreads();
    if (lane == 0) partial[warp] = x;
    __syncthreads();
    x = lane < nwarps ? partial[lane] : 0.0f;
    return cuda_warp_sum(x);
}

__device__ inline double cuda_block_sum_double(double x) {
    __shared__ double partial_d[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    x = cuda_warp_sum_double(x);
    __syncthreads();
    if (lane == 0) partial_d[warp] = x;
    __syncthreads();
    x = lane < nwarps ? partial_d[lane] : 0.0;
    return cuda_warp_sum_double(x);
}

// ----------------------------------------------------------------------------
// flat-buffer casts

// out (n) bf16, in (n) fp32
__global__ void cuda_cast_to_bf16_kernel(bf16* out, const float* in, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) out[i] = __float2bfloat16(in[i]);
}

// out (n) fp32, in (n) bf16
__global__ void cuda_cast_to_float_kernel(float* out, const bf16* in, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) out[i] = __bfloat162float(in[i]);
}

// Grid-stride launches are capped so a 600M-element buffer does not need 2^31 threads.
static inline int cuda_grid_for(size_t n, int block) {
    size_t g = (n + block - 1) / block;
    return (int)std::max<size_t>(1, std::min<size_t>(g, 65536));
}

// out (n) bf16 = in (n) fp32, round to nearest even
static inline void cuda_cast_to_bf16(bf16* out, const float* in, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    cuda_cast_to_bf16_kernel<<<cuda_grid_for(n, 256), 256, 0, stream>>>(out, in, n);
    KERNEL_CHECK();
}

// out (n) fp32 = in (n) bf16
static inline void cuda_cast_to_float(float* out, const bf16* in, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    cuda_cast_to_float_kernel<<<cuda_grid_for(n, 256), 256, 0, stream>>>(out, in, n);
    KERNEL_CHECK();
}

// ----------------------------------------------------------------------------
// host <-> device helpers (synchronous; for setup, tests and dev tools, not the training loop)

template <typename T>
static inline T* cuda_malloc(size_t n) {
    T* p = NULL;
    CUDA_CHECK(cudaMalloc((void**)&p, std::max<size_t>(n, 1) * sizeof(T)));
    return p;
}

template <typename T>
static inline T* cuda_upload(const T* host, size_t n) {
    T* p = cuda_malloc<T>(n);
    CUDA_CHECK(cudaMemcpy(p, host, n * sizeof(T), cudaMemcpyHostToDevice));
    return p;
}

// Host loops over whole buffers run on every core (OpenMP) above this many elements: the dev/cuda
// validations at the presets' real shapes convert, fill and compare buffers of up to ~10^9
// elements, where one core spends seconds per pass. Every loop is elementwise or an exact max,
// so the results do not depend on the thread count.
static const size_t CUDA_HOST_PARALLEL_MIN = (size_t)1 << 16;
// Elements per bf16 staging chunk of the conversions below: the staging buffer stays at 32 MiB
// instead of growing with the tensor.
static const size_t CUDA_HOST_CHUNK = (size_t)1 << 24;

// fp32 host values -> a new bf16 device buffer
static inline bf16* cuda_upload_bf16(const float* host, size_t n) {
    bf16* p = cuda_malloc<bf16>(n);
    std::vector<bf16> tmp(std::min(n, CUDA_HOST_CHUNK));
    for (size_t off = 0; off < n; off += CUDA_HOST_CHUNK) {
        size_t m = std::min(CUDA_HOST_CHUNK, n - off);
#pragma omp parallel for schedule(static) if (m >= CUDA_HOST_PARALLEL_MIN)
        for (size_t i = 0; i < m; i++) tmp[i] = cuda_host_bf16(host[off + i]);
        CUDA_CHECK(cudaMemcpy(p + off, tmp.data(), m * sizeof(bf16), cudaMemcpyHostToDevice));
    }
    return p;
}

// dev (n) -> host (n), into a buffer the caller owns (and may reuse: at 10^9 elements the page
// faults of a fresh vector cost as much as the copy)
template <typename T>
static inline void cuda_download_to(T* host, const T* dev, size_t n) {
    CUDA_CHECK(cudaMemcpy(host, dev, n * sizeof(T), cudaMemcpyDeviceToHost));
}

template <typename T>
static inline std::vector<T> cuda_download(const T* dev, size_t n) {
    std::vector<T> out(n);
    cuda_download_to(out.data(), dev, n);
    return out;
}

// bf16 device buffer (n) -> fp32 host values (n), into a buffer the caller owns
static inline void cuda_download_float_to(float* host, const bf16* dev, size_t n) {
    std::vector<bf16> tmp(std::min(n, CUDA_HOST_CHUNK));
    for (size_t off = 0; off < n; off += CUDA_HOST_CHUNK) {
        size_t m = std::min(CUDA_HOST_CHUNK, n - off);
        CUDA_CHECK(cudaMemcpy(tmp.data(), dev + off, m * sizeof(bf16), cudaMemcpyDeviceToHost));
#pragma omp parallel for schedule(static) if (m >= CUDA_HOST_PARALLEL_MIN)
        for (size_t i = 0; i < m; i++) host[off + i] = cuda_host_float(tmp[i]);
    }
}

// bf16 device buffer -> fp32 host values
static inline std::vector<float> cuda_download_float(const bf16* dev, size_t n) {
    std::vector<float> out(n);
    cuda_download_float_to(out.data(), dev, n);
    return out;
}

// Rounds every value through bf16, as the GPU sees a bf16 input: the CPU reference then runs on
// exactly the numbers the kernel reads, so validation measures the kernel, not the input rounding.
static inline void cuda_round_to_bf16(float* x, size_t n) {
#pragma omp parallel for schedule(static) if (n >= CUDA_HOST_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) x[i] = cuda_host_float(cuda_host_bf16(x[i]));
}

static inline void cuda_round_to_bf16(std::vector<float>* v) { cuda_round_to_bf16(v->data(), v->size()); }

// ----------------------------------------------------------------------------
// random test data (dev/cuda, tests)

// out (n) = uniform(-scale, scale) on the host, from the engine's generator (rand.h): draw i is
// the (i+1)-th rand_u64 after seed, reached with rand_skip, so threads fill disjoint ranges and
// still produce the serial sequence.
static inline void cuda_host_uniform_to(float* out, size_t n, uint64_t seed, float scale) {
#pragma omp parallel for schedule(static) if (n >= CUDA_HOST_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) {
        Rng r;
        rand_init(&r, seed);
        rand_skip(&r, i);
        out[i] = scale * (float)(2.0 * rand_uniform(&r) - 1.0);
    }
}

static inline std::vector<float> cuda_host_uniform(size_t n, uint64_t seed, float scale) {
    std::vector<float> v(n);
    cuda_host_uniform_to(v.data(), n, seed, scale);
    return v;
}

// uniform(-scale, scale) filled on the device from a hash of (seed, index): benchmark inputs at
// full size without a host round trip.
template <typename T>
__global__ void cuda_fill_uniform_kernel(T* out, size_t n, uint64_t seed, float scale) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        float u = (float)(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
        out[i] = (T)(scale * (2.0f * u - 1.0f));
    }
}

template <typename T>
static inline void cuda_fill_uniform(T* out, size_t n, uint64_t seed, float scale, cudaStream_t stream = 0) {
    cuda_fill_uniform_kernel<T><<<cuda_grid_for(n, 256), 256, 0, stream>>>(out, n, seed, scale);
    KERNEL_CHECK();
}

// ----------------------------------------------------------------------------
// timing and validation (dev/cuda, tests)

// Median wall time in ms of fn() on `stream` over `iters` runs after `warmup` runs, by CUDA events.
template <typename F>
static inline float cuda_bench_ms(F fn, int warmup, int iters, cudaStream_t stream = 0) {
    for (int i = 0; i < warmup; i++) fn();
    CUDA_CHECK(cudaStreamSynchronize(stream));
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    std::vector<float> times;
    for (int i = 0; i < iters; i++) {
        CUDA_CHECK(cudaEventRecord(start, stream));
        fn();
        CUDA_CHECK(cudaEventRecord(stop, stream));
        CUDA_CHECK(cudaEventSynchronize(stop));
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        times.push_back(ms);
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

// One benchmark line: time, achieved bandwidth and/or FLOP rate against the H200 ceilings.
static inline void cuda_print_bench(const char* what, float ms, double bytes, double flops) {
    printf("  bench %-40s %9.4f ms", what, ms);
    if (bytes > 0) {
        double bw = bytes / (ms * 1e-3);
        printf(" | %7.1f GB/s (%4.1f%% of H200 HBM3e 4.8 TB/s)", bw / 1e9, 100.0 * bw / CUDA_H200_HBM_BYTES_PER_S);
    }
    if (flops > 0) {
        double fl = flops / (ms * 1e-3);
        printf(" | %6.1f TFLOP/s (%4.1f%% of H200 bf16 dense 989)", fl / 1e12, 100.0 * fl / CUDA_H200_BF16_FLOPS);
    }
    printf("\n");
    fflush(stdout);
}

// One line of a dev/cuda --compare run: a kernel's earlier version (v1, kept in the dev/cuda
// program as the reference) against the one in llmc/ (v2), both timed by cuda_bench_ms on the same
// inputs. dev/bench_small_kernels.sh reads these lines:
//   COMPARE <kernel> | <shape> | v1 <ms> ms | v2 <ms> ms | <v1 / v2>x | <what changed>
static inline void cuda_print_compare(const char* kernel, const char* shape, float ms_v1, float ms_v2, const char* note) {
    printf("COMPARE %s | %s | v1 %.4f ms | v2 %.4f ms | %.2fx | %s\n", kernel, shape, ms_v1, ms_v2,
           ms_v2 > 0.0f ? ms_v1 / ms_v2 : 0.0f, note);
    fflush(stdout);
}

// max|got - ref| / max|ref| (NaN anywhere fails), printed as one PASS or FAIL line.
// Each thread keeps its own maxima, merged at the end (a max does not depend on the order); a NaN
// difference (a NaN in ref) makes the measurement NaN, which fails.
// max |got - ref| / max(max |ref|, min_scale) <= tol, printed as a test line; min_scale keeps a
// reference that is zero in exact arithmetic (its values only roundoff) from dividing by ~0.
static inline bool cuda_check_close(const char* name, const float* got, const float* ref, size_t n, double tol, double min_scale = 1e-30) {
    double maxdiff = 0.0, maxref = 0.0;
    bool finite = true, nan_diff = false;
#pragma omp parallel if (n >= CUDA_HOST_PARALLEL_MIN)
    {
        double md = 0.0, mr = 0.0;
        bool fin = true, nd = false;
#pragma omp for schedule(static) nowait
        for (size_t i = 0; i < n; i++) {
            if (!std::isfinite(got[i])) fin = false;
            double d = fabs((double)got[i] - (double)ref[i]);
            if (std::isnan(d)) nd = true;
            else if (d > md) md = d;
            mr = std::max(mr, fabs((double)ref[i]));
        }
#pragma omp critical(cuda_check_close_merge)
        {
            maxdiff = std::max(maxdiff, md);
            maxref = std::max(maxref, mr);
            finite = finite && fin;
            nan_diff = nan_diff || nd;
        }
    }
    if (nan_diff) maxdiff = NAN;
    double err = finite ? maxdiff / std::max(maxref, min_scale) : INFINITY;
    bool ok = err <= tol;
    // the line format of test_bound (test/test_util.h), which dev/tolerance_sweep.py reads
    printf("%s %s: measured %.3e, bound %.3g (max rel err%s)\n", ok ? "PASS" : "FAIL", name, err, tol, finite ? "" : ", non-finite output");
    fflush(stdout);
    return ok;
}
