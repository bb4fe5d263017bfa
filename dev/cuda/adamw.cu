// dev/cuda/adamw.cu — llmc/adamw.cuh against adamw_update_cpu (llmc/adamw.h) over several steps,
// with and without weight decay, then a benchmark.
// Tolerances: the same fp32 formula in the same order, so only fused multiply-adds can round
// differently: m, v 1e-6 and the weight change (param - param0) 1e-5, max |got - ref| / max |ref|.
// The bf16 copy must equal the rounding of the GPU's fp32 weights exactly.
// Shapes: the AdamW tensors of every preset, i.e. their real shapes: wte / lm_head of Vp*C
// (tiny 6.4e6, d12 3.9e7, llama300m 5.2e7, llama600m 7.7e7 elements) and a norm of C, 3 steps
// each, plus an odd n = 1001. Full size: the reference is elementwise (~1 s on one core for
// llama600m's 3 steps). The benchmark runs the embedding of each preset.
// The gradient scale (the clip's, read by the kernel): the odd n again with scale 0.37, where the
// reference updates on the gradients times 0.37 in fp32, as an in-place clip leaves them.
// Usage: build/dev_adamw [--validate-only] [--small]   exit 0 ok, 1 failed, 2 bad usage, 77 no GPU (SKIP).
//   --small: the odd n and tiny only (what dev/emu runs).
#include <cstring>
#include <string>
#include "../../llmc/llama.h"
#include "../../llmc/adamw.h"
#include "../../llmc/adamw.cuh"
#include "dev_flags.h"

static const double TOL_STATE = 1e-6;
static const double TOL_DELTA = 1e-5;

static bool validate(const char* tag, size_t n, float wd, uint64_t seed, float scale = 1.0f) {
    std::string t = tag;
    std::vector<float> p0 = cuda_host_uniform(n, seed, 0.1f), p = p0;
    std::vector<float> m(n, 0.0f), v(n, 0.0f);
    float* d_p = cuda_upload(p.data(), n);
    bf16* d_p16 = cuda_malloc<bf16>(n);
    float* d_m = cuda_upload(m.data(), n);
    float* d_v = cuda_upload(v.data(), n);
    float* d_g = cuda_malloc<float>(n);
    const float lr = 1e-3f;
    std::vector<float> g(n);  // one buffer for the three steps' gradients
    for (int step = 1; step <= 3; step++) {
        cuda_host_uniform_to(g.data(), n, seed + 10 * step, 0.01f);
        if (step == 2) for (size_t i = 0; i < n; i += 7) g[i] = 0.0f;  // zero gradients occur (unused tokens)
        CUDA_CHECK(cudaMemcpy(d_g, g.data(), n * sizeof(float), cudaMemcpyHostToDevice));
        adamw_update(d_p, d_p16, d_g, scale, d_m, d_v, n, lr, 0.9f, 0.95f, 1e-8f, wd, step, 0);
        if (scale != 1.0f) for (size_t i = 0; i < n; i++) g[i] *= scale;  // what the CPU engine's clip leaves
        adamw_update_cpu(p.data(), g.data(), m.data(), v.data(), n, lr, 0.9f, 0.95f, 1e-8f, wd, step);
    }
    std::vector<float> gp = cuda_download(d_p, n), gm = cuda_download(d_m, n), gv = cuda_download(d_v, n);
    std::vector<float> g16 = cuda_download_float(d_p16, n);
    bool ok = cuda_check_close((t + ".m").c_str(), gm.data(), m.data(), n, TOL_STATE);
    ok &= cuda_check_close((t + ".v").c_str(), gv.data(), v.data(), n, TOL_STATE);
    bool copy_ok = true;
#pragma omp parallel for schedule(static) reduction(&& : copy_ok)
    for (size_t i = 0; i < n; i++) copy_ok = copy_ok && g16[i] == cuda_host_float(cuda_host_bf16(gp[i]));
    printf("%s %s.bf16_copy_exact\n", copy_ok ? "PASS" : "FAIL", tag);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) { gp[i] -= p0[i]; p[i] -= p0[i]; }
    ok &= cuda_check_close((t + ".param_delta").c_str(), gp.data(), p.data(), n, TOL_DELTA);
    void* bufs[] = {d_p, d_p16, d_m, d_v, d_g};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    return ok && copy_ok;
}

static void bench(const char* preset, size_t n) {
    float *p = cuda_malloc<float>(n), *g = cuda_malloc<float>(n), *m = cuda_malloc<float>(n), *v = cuda_malloc<float>(n);
    bf16* p16 = cuda_malloc<bf16>(n);
    cuda_fill_uniform(p, n, 1, 0.1f);
    cuda_fill_uniform(g, n, 2, 0.01f);
    CUDA_CHECK(cudaMemset(m, 0, n * sizeof(float)));
    CUDA_CHECK(cudaMemset(v, 0, n * sizeof(float)));
    float ms = cuda_bench_ms([&] { adamw_update(p, p16, g, 1.0f, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 10, 0); }, 3, 20);
    char what[96];
    snprintf(what, sizeof(what), "%s adamw_update n=%zu (embedding)", preset, n);
    cuda_print_bench(what, ms, (double)n * (4 * 4 + 3 * 4 + 2), 0);  // read p g m v, write p m v + bf16
    void* bufs[] = {p, g, m, v, p16};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
}

int main(int argc, char** argv) {
    DevFlags flags;
    if (!dev_flags_parse(argc, argv, "dev_adamw", DEV_FLAG_SMALL, &flags)) return 2;
    const bool validate_only = flags.validate_only, small = flags.small;
    if (!cuda_device_present()) { printf("SKIP dev_adamw: no CUDA device\n"); return 77; }
    const char* presets[] = {"tiny", "d12", "llama300m", "llama600m"};
    bool ok = validate("dev_adamw.odd_n1001", 1001, 0.1f, 1);
    ok &= validate("dev_adamw.odd_n1001_grad_scale", 1001, 0.1f, 2, 0.37f);
    for (const char* name : presets) {
        if (small && strcmp(name, "tiny") != 0) continue;
        LlamaConfig c = {};
        llama_preset(name, &c);
        ok &= validate((std::string("dev_adamw.") + name + ".embedding").c_str(), (size_t)c.Vp * c.C, 0.1f, 10);
        ok &= validate((std::string("dev_adamw.") + name + ".norm").c_str(), (size_t)c.C, 0.0f, 20);
    }
    if (!validate_only) {
        for (const char* name : presets) {
            LlamaConfig c = {};
            llama_preset(name, &c);
            bench(name, (size_t)c.Vp * c.C);
        }
    }
    return ok ? 0 : 1;
}
