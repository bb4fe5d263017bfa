// dev/cuda/global_norm.cu — llmc/global_norm.cuh against the CPU engine's norm and clip
// (llama_grad_norm / llama_clip_grads in train_llama_cpu.cpp, restated here as the fp64 sum of
// squares and the elementwise scale), then a benchmark.
// Tolerances: norm 1e-9 relative (both sum squares in fp64, in different orders); the clip is one
// fp32 multiply per element, so it must match bitwise; two runs of the norm must agree bitwise.
// Shapes: the parameter counts of tiny, d12 and llama600m (the flat gradient buffer), and an odd
// small n. Usage: build/dev_global_norm [--validate-only]   exit 0 ok, 1 failed, 77 no GPU (SKIP).
#include <cstring>
#include <string>
#include "../../llmc/llama.h"
#include "../../llmc/global_norm.cuh"

static const double TOL_NORM = 1e-9;

static bool validate(const char* tag, size_t n, uint64_t seed) {
    std::vector<float> x = cuda_host_uniform(n, seed, 1e-2f);
    double ss = 0.0;
    for (size_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float* d_x = cuda_upload(x.data(), n);
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
    std::vector<float> got = cuda_download(d_x, n);
    bool clip_ok = true;
    for (size_t i = 0; i < n; i++) clip_ok &= got[i] == x[i] * coef;
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
    const char* presets[] = {"tiny", "d12", "llama600m"};
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
