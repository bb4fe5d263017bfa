// test_fp8_device.cu — the llmc/fp8.h codecs compiled for and run on the GPU.
//
// Pairs each device result with the CPU reference (the same header compiled by the host
// compiler) and with CUDA's own conversions (__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3 /
// __NV_E5M2), the cvt.rn.satfinite.{e4m3,e5m2}x2.f32 instructions on sm_89+, and
// __float2bfloat16_rn):
//   - all 256 decodes of each FP8 format, against the host and against CUDA's fp8 -> float;
//   - the fixture's hand-picked inputs and 2^20 generated inputs of each format and its BF16
//     inputs (test/fixtures/fp8.fix), against the fixture codes;
//   - every one of the 2^32 float32 bit patterns, fp8_e4m3_encode, fp8_e5m2_encode and
//     fp8_bf16_encode against CUDA's conversions (counts and the first mismatch).
// Exits 77 after printing a SKIP line when there is no CUDA device.
// Build: nvcc -O2 -arch=sm_90 -std=c++17 test/test_fp8_device.cu -o build/test_fp8_device
// Run from the repository root.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "../llmc/fp8.h"
#include "../llmc/rand.h"
#include "fixture.h"
#include "fp8_inputs.h"
#include "test_util.h"

#define CUDA_CHECK(call)                                                                     \
    do {                                                                                     \
        cudaError_t err_ = (call);                                                           \
        if (err_ != cudaSuccess) {                                                           \
            fprintf(stderr, "CUDA error %s:%d: %s: %s\n", __FILE__, __LINE__, #call,         \
                    cudaGetErrorString(err_));                                               \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)
#define KERNEL_CHECK() CUDA_CHECK(cudaGetLastError())

static const char* FIXTURE_PATH = "test/fixtures/fp8.fix";
static const size_t RANDOM_COUNT = (size_t)1 << 20;

__host__ __device__ static inline __nv_fp8_interpretation_t cuda_kind(Fp8Format f) { return f == FP8_E5M2 ? __NV_E5M2 : __NV_E4M3; }

// out (n) ours, ref (n) CUDA's; x (n)
__global__ void fp8_encode_kernel(uint8_t* out, uint8_t* ref, const float* x, size_t n, Fp8Format f) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = fp8_encode(f, x[i]);
    ref[i] = (uint8_t)__nv_cvt_float_to_fp8(x[i], __NV_SATFINITE, cuda_kind(f));
}

// out (n) ours, ref (n) CUDA's; x (n)
__global__ void fp8_bf16_encode_kernel(uint16_t* out, uint16_t* ref, const float* x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = fp8_bf16_encode(x[i]);
    __nv_bfloat16 h = __float2bfloat16_rn(x[i]);
    ref[i] = *reinterpret_cast<uint16_t*>(&h);
}

// out (256) ours, ref (256) CUDA's
__global__ void fp8_decode_kernel(float* out, float* ref, Fp8Format f) {
    int c = threadIdx.x;
    out[c] = fp8_decode(f, (uint8_t)c);
    if (f == FP8_E5M2) {
        __nv_fp8_e5m2 v;
        v.__x = (__nv_fp8_storage_t)c;
        ref[c] = (float)v;
    } else {
        __nv_fp8_e4m3 v;
        v.__x = (__nv_fp8_storage_t)c;
        ref[c] = (float)v;
    }
}

// Every float32 bit pattern in [base, base + n): counts encodes that differ from CUDA's and keeps
// the smallest differing pattern. counters and first: [0] e4m3, [1] bf16, [2] e5m2
__global__ void fp8_sweep_kernel(unsigned long long* counters, unsigned int* first, uint64_t base, uint64_t n) {
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        uint32_t bits = (uint32_t)(base + i);
        float x = __uint_as_float(bits);
        uint8_t ref8 = (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
        if (fp8_e4m3_encode(x) != ref8) {
            atomicAdd(&counters[0], 1ull);
            atomicMin(&first[0], bits);
        }
        __nv_bfloat16 h = __float2bfloat16_rn(x);
        if (fp8_bf16_encode(x) != *reinterpret_cast<uint16_t*>(&h)) {
            atomicAdd(&counters[1], 1ull);
            atomicMin(&first[1], bits);
        }
        uint8_t ref5 = (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
        if (fp8_e5m2_encode(x) != ref5) {
            atomicAdd(&counters[2], 1ull);
            atomicMin(&first[2], bits);
        }
    }
}

// Encodes x on the device with ours and CUDA's; both must equal the expected codes and the host.
static void check_fp8_device(const std::string& name, Fp8Format f, const std::vector<float>& x, const std::vector<uint8_t>& want) {
    size_t n = x.size();
    float* d_x;
    uint8_t *d_out, *d_ref;
    CUDA_CHECK(cudaMalloc(&d_x, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_out, n));
    CUDA_CHECK(cudaMalloc(&d_ref, n));
    CUDA_CHECK(cudaMemcpy(d_x, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    fp8_encode_kernel<<<(unsigned)((n + 255) / 256), 256>>>(d_out, d_ref, d_x, n, f);
    KERNEL_CHECK();
    std::vector<uint8_t> out(n), ref(n);
    CUDA_CHECK(cudaMemcpy(out.data(), d_out, n, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(ref.data(), d_ref, n, cudaMemcpyDeviceToHost));
    size_t bad = 0, bad_cuda = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        bool ok = out[i] == want[i] && out[i] == fp8_encode(f, x[i]);
        if (!ok && bad++ == 0) first = i;
        bad_cuda += ref[i] != want[i];
    }
    test_check(name.c_str(), bad == 0 && bad_cuda == 0,
               "%zu device codes differ from fixture/host (first x=0x%08x device 0x%02x want 0x%02x), "
               "%zu CUDA satfinite codes differ", bad, fp8_test_f2u(x[first]), out[first], want[first], bad_cuda);
    CUDA_CHECK(cudaFree(d_x));
    CUDA_CHECK(cudaFree(d_out));
    CUDA_CHECK(cudaFree(d_ref));
}

static void test_fixture_cases(void) {
    Fixture fx;
    if (!fixture_load(&fx, FIXTURE_PATH)) {
        test_check("fp8.device.fixture", false, "%s missing or malformed", FIXTURE_PATH);
        return;
    }

    for (Fp8Format f : {FP8_E4M3, FP8_E5M2}) {
        const std::string t = fp8_format_name(f), p = "fp8.device." + t;
        // decode: device == host == fixture, and CUDA's decode agrees
        {
            float *d_out, *d_ref;
            CUDA_CHECK(cudaMalloc(&d_out, 256 * sizeof(float)));
            CUDA_CHECK(cudaMalloc(&d_ref, 256 * sizeof(float)));
            fp8_decode_kernel<<<1, 256>>>(d_out, d_ref, f);
            KERNEL_CHECK();
            float out[256], ref[256];
            CUDA_CHECK(cudaMemcpy(out, d_out, sizeof(out), cudaMemcpyDeviceToHost));
            CUDA_CHECK(cudaMemcpy(ref, d_ref, sizeof(ref), cudaMemcpyDeviceToHost));
            const float* want = fx.f(t + ".decode");
            int bad = 0;
            for (int c = 0; c < 256; c++) {
                float host = fp8_decode(f, (uint8_t)c);
                bool ok = std::isnan(want[c])
                    ? std::isnan(out[c]) && std::isnan(ref[c]) && std::isnan(host)
                    : fp8_test_f2u(out[c]) == fp8_test_f2u(want[c]) && fp8_test_f2u(ref[c]) == fp8_test_f2u(want[c]) && fp8_test_f2u(host) == fp8_test_f2u(want[c]);
                bad += !ok;
            }
            test_check((p + "_decode_all_256").c_str(), bad == 0, "%d codes differ", bad);
            CUDA_CHECK(cudaFree(d_out));
            CUDA_CHECK(cudaFree(d_ref));
        }

        {
            const FixtureTensor& tx = fx.get(t + ".special_x");
            const int32_t* code = fx.i(t + ".special_code");
            std::vector<uint8_t> want(tx.numel());
            for (size_t i = 0; i < want.size(); i++) want[i] = (uint8_t)code[i];
            check_fp8_device(p + "_special_cases", f, tx.f, want);
        }

        {
            const FixtureTensor& tc = fx.get(t + ".random_code");
            std::vector<float> x;
            int e0, span;
            fp8_test_exponents(f, &e0, &span);
            fp8_test_random_inputs(&x, (uint64_t)fx.i(t + ".random_seed")[0], RANDOM_COUNT, e0, span);
            std::vector<uint8_t> want(RANDOM_COUNT);
            if (tc.numel() * 4 != RANDOM_COUNT) {
                test_check((p + "_random_2^20").c_str(), false, "fixture holds %zu packed words", tc.numel());
            } else {
                for (size_t j = 0; j < tc.numel(); j++)
                    for (int b = 0; b < 4; b++) want[4 * j + b] = (uint8_t)((uint32_t)tc.i[j] >> (8 * b));
                check_fp8_device(p + "_random_2^20", f, x, want);
            }
        }
    }

    {
        const FixtureTensor& tx = fx.get("bf16.x");
        const int32_t* code = fx.i("bf16.code");
        size_t n = tx.numel();
        float* d_x;
        uint16_t *d_out, *d_ref;
        CUDA_CHECK(cudaMalloc(&d_x, n * sizeof(float)));
        CUDA_CHECK(cudaMalloc(&d_out, n * sizeof(uint16_t)));
        CUDA_CHECK(cudaMalloc(&d_ref, n * sizeof(uint16_t)));
        CUDA_CHECK(cudaMemcpy(d_x, tx.f.data(), n * sizeof(float), cudaMemcpyHostToDevice));
        fp8_bf16_encode_kernel<<<(unsigned)((n + 255) / 256), 256>>>(d_out, d_ref, d_x, n);
        KERNEL_CHECK();
        std::vector<uint16_t> out(n), ref(n);
        CUDA_CHECK(cudaMemcpy(out.data(), d_out, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(ref.data(), d_ref, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
        size_t bad = 0, bad_cuda = 0;
        for (size_t i = 0; i < n; i++) {
            bad += out[i] != (uint16_t)code[i] || out[i] != fp8_bf16_encode(tx.f[i]);
            bad_cuda += ref[i] != (uint16_t)code[i];
        }
        test_check("fp8.device.bf16_fixture", bad == 0 && bad_cuda == 0,
                   "%zu device codes differ from fixture/host, %zu __float2bfloat16_rn codes differ", bad, bad_cuda);
        CUDA_CHECK(cudaFree(d_x));
        CUDA_CHECK(cudaFree(d_out));
        CUDA_CHECK(cudaFree(d_ref));
    }
}

static void test_exhaustive_vs_cuda(void) {
    unsigned long long* d_counters;
    unsigned int* d_first;
    CUDA_CHECK(cudaMalloc(&d_counters, 3 * sizeof(unsigned long long)));
    CUDA_CHECK(cudaMalloc(&d_first, 3 * sizeof(unsigned int)));
    CUDA_CHECK(cudaMemset(d_counters, 0, 3 * sizeof(unsigned long long)));
    CUDA_CHECK(cudaMemset(d_first, 0xFF, 3 * sizeof(unsigned int)));
    const uint64_t chunk = (uint64_t)1 << 30;  // four launches keep each one short
    for (uint64_t base = 0; base < ((uint64_t)1 << 32); base += chunk) {
        fp8_sweep_kernel<<<4096, 256>>>(d_counters, d_first, base, chunk);
        KERNEL_CHECK();
    }
    unsigned long long counters[3];
    unsigned int first[3];
    CUDA_CHECK(cudaMemcpy(counters, d_counters, sizeof(counters), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(first, d_first, sizeof(first), cudaMemcpyDeviceToHost));
    test_check("fp8.device.e4m3_all_2^32_vs_cuda_satfinite", counters[0] == 0,
               "%llu of 2^32 float32 patterns differ, first 0x%08x", counters[0], first[0]);
    test_check("fp8.device.bf16_all_2^32_vs_float2bfloat16_rn", counters[1] == 0,
               "%llu of 2^32 float32 patterns differ, first 0x%08x", counters[1], first[1]);
    test_check("fp8.device.e5m2_all_2^32_vs_cuda_satfinite", counters[2] == 0,
               "%llu of 2^32 float32 patterns differ, first 0x%08x", counters[2], first[2]);
    CUDA_CHECK(cudaFree(d_counters));
    CUDA_CHECK(cudaFree(d_first));
}

int main(void) {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        test_skip("fp8.device", err != cudaSuccess ? "no CUDA device (cudaGetDeviceCount failed)"
                                                   : "no CUDA device");
        return 77;
    }
    test_fixture_cases();
    test_exhaustive_vs_cuda();
    CUDA_CHECK(cudaDeviceSynchronize());
    return test_exit_code();
}
