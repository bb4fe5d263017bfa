// dev/cuda/global_norm.cu — llmc/global_norm.cuh against the CPU engine's norm and clip
// (llama_grad_norm / llama_clip_grads in train_llama_cpu.cpp, restated here as the fp64 sum of
// squares and the elementwise scale), then a benchmark.
// Tolerances: norm 1e-9 relative (both sum squares in fp64, in different orders); the clip is one
// fp32 multiply per element, so it must match bitwise; two runs of the norm must agree bitwise.
// Shapes: the flat gradient buffer of every preset, i.e. its real shape: tiny 1.4e7, d12 1.6e8,
// llama300m 3.1e8 and llama600m 6.1e8 elements (2.4 GB of fp32), and an odd small n. Full size:
// the reference is one fp64 multiply-add per element (~2 s on one core at llama600m), summed in
// fixed blocks on every core.
// Usage: build/dev_global_norm [--validate-only]   exit 0 ok, 1 failed, 77 no GPU (SKIP).
#include <cstring>
#include <memory>
#include <string>
#include "../../llmc/llama.h"
#include "../../llmc/global_norm.cuh"

static const double TOL_NORM = 1e-9;
// Elements per partial sum of the reference: the blocks' sums are added in block order, so the
// reference is the same number for any thread count.
static const size_t REF_BLOCK = (size_t)1 << 20;

static bool validate(const char* tag, size_t n, uint64_t seed) {
    // filled on every core and never zeroed first: at llama600m these are 2.4 GB of fresh pages
    std::unique_ptr<float[]> xbuf(new float[n]);
    const float* x = xbuf.get();
    cuda_host_uniform_to(xbuf.get(), n, seed, 1e-2f);
    size_t nblocks = (n + REF_BLOCK - 1) / REF_BLOCK;
    std::vector<double> part(nblocks);
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nblocks; b++) {
        double s = 0.0;
        for (size_t i = b * REF_BLOCK; i < std::min(n, (b + 1) * REF_BLOCK); i++) s += (double)x[i] * x[i];
        part[b] = s;
    }
    double ss = 0.0;
    for (double s : part) ss += s;
    float* d_x = cuda_upload(x, n);
    double* d_out = cuda_malloc<double>(1);
    double* d_part = cuda_malloc<double>(GLOBAL_NORM_BLOCKS);
    global_norm_squared(d_out, d_part, d_x, n, 0);
    double g1 = cuda_download(d_out, 1)[0];
    global_norm_squared(d_out, d_part, d_x, n, 0);
    double g2 = cuda_download(d_out, 1)[0];
    double rel = fabs(sqrt(g1) - sqrt(ss)) / sqrt(ss);
    bool ok = rel <= TOL_NORM && memcmp(&g1, &g2, sizeof(double)) == 0;
    printf("%s %s.norm: %.9e vs %.9e, rel err %.3e (tol %.0e), repeat bitwise %s\n", ok ? "PASS" : "FAIL", tag,
           sqrt(g1), sqrt(ss), rel, TOL_NORM, memcmp(&g1, &g2, sizeof(double)) == 0 ? "yes" : "no");
    float coef = (float)(1.0 / (sqrt(ss) + 1e-6));
    global_norm_clip(d_x, n, coef, 0);
    // compared chunk by chunk, without a second host copy of the buffer
    std::vector<float> got(std::min(n, CUDA_HOST_CHUNK));
    bool clip_ok = true;
    for (size_t off = 0; off < n; off += CUDA_HOST_CHUNK) {
        size_t m = std::min(CUDA_HOST_CHUNK, n - off);
        cuda_download_to(got.data(), d_x + off, m);
        const float* g = got.data();
        bool chunk_ok = true;
#pragma omp parallel for schedule(static) reduction(&& : chunk_ok)
        for (size_t i = 0; i < m; i++) chunk_ok = chunk_ok && g[i] == x[off + i] * coef;
        clip_ok = clip_ok && chunk_ok;
    }
    printf("%s %s.clip_bitwise\n", clip_ok ? "PASS" : "FAIL", tag);
    void* bufs[] = {d_x, d_out, d_part};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    return ok && clip_ok;
}

static void bench(const char* preset, size_t n) {
    float* x = cuda_malloc<float>(n);
    double* out = cuda_malloc<double>(1);
    double* part = cuda_malloc<double>(GLOBAL_NORM_BLOCKS);
    cuda_fill_uniform(x, n, 1, 1e-2f);
    float ms = cuda_bench_ms([&] { global_norm_squared(out, part, x, n, 0); }, 3, 20);
    char what[96];
    snprintf(what, sizeof(what), "%s global_norm_squared n=%zu", preset, n);
    cuda_print_bench(what, ms, (double)n * 4, 0);
    ms = cuda_bench_ms([&] { global_norm_clip(x, n, 0.999f, 0); }, 3, 20);
    snprintf(what, sizeof(what), "%s global_norm_clip", preset);
    cuda_print_bench(what, ms, (double)n * 8, 0);
    void* bufs[] = {x, out, part};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
}

int main(int argc, char** argv) {
    bool validate_only = argc > 1 && strcmp(argv[1], "--validate-only") == 0;
    if (!cuda_device_present()) { printf("SKIP dev_global_norm: no CUDA device\n"); return 77; }
    const char* presets[] = {"tiny", "d12", "llama300m", "llama600m"};
    bool ok = validate("dev_global_norm.odd_n12345", 12345, 1);
    for (const char* name : presets) {
        LlamaConfig c = {};
        llama_preset(name, &c);
        ok &= validate((std::string("dev_global_norm.") + name).c_str(), llama_num_params(&c), 2);
    }
    if (!validate_only) {
        for (const char* name : presets) {
            LlamaConfig c = {};
            llama_preset(name, &c);
            bench(name, llama_num_params(&c));
        }
    }
    return ok ? 0 : 1;
}
