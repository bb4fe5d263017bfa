// dev/cuda/rope.cu — llmc/rope.cuh against rope_forward_cpu / rope_backward_cpu (llmc/rope.h),
// in bf16 (what the trainer runs) and fp32, in place and out of place, then a benchmark.
// Tolerances (max |got - ref| / max |ref|):
//   bf16   8e-3  (inputs rounded to bf16 on the host; one bf16 rounding of the output)
//   fp32   1e-5  (same formula; only a fused multiply-add may round differently)
// Shapes (B, T, NH, NKV, HS): every preset at its real shape, B=4 and the preset's T: tiny
// (4, 256, 4, 2, 32: GQA), d12 (4, 1024, 12, 12, 64), llama300m (4, 4096, 16, 16, 64: 5.0e7
// qkv elements), llama600m (4, 2048, 12, 12, 128), and an odd shape (2, 5, 3, 1, 6). Full
// tensors: the reference is one rotation per element (well under a second on one core at
// llama300m). The tables come from rope_precompute_cpu on both sides.
// Usage: build/dev_rope [--validate-only]   exit 0 ok, 1 failed, 77 no GPU (SKIP).
#include <cstring>
#include <string>
#include "../../llmc/llama.h"
#include "../../llmc/rope.h"
#include "../../llmc/rope.cuh"

static const double TOL_BF16 = 8e-3;
static const double TOL_FP32 = 1e-5;

static bool validate(const char* tag, int B, int T, int NH, int NKV, int HS, uint64_t seed) {
    std::string t = tag;
    size_t n = (size_t)B * T * (NH + 2 * NKV) * HS;
    std::vector<float> cos_t((size_t)T * HS / 2), sin_t((size_t)T * HS / 2);
    rope_precompute_cpu(cos_t.data(), sin_t.data(), T, HS);
    float* d_cos = cuda_upload(cos_t.data(), cos_t.size());
    float* d_sin = cuda_upload(sin_t.data(), sin_t.size());
    std::vector<float> x = cuda_host_uniform(n, seed, 1.0f);
    std::vector<float> ref_f(n), ref_b(n);
    rope_forward_cpu(ref_f.data(), x.data(), cos_t.data(), sin_t.data(), B, T, NH, NKV, HS);
    rope_backward_cpu(ref_b.data(), x.data(), cos_t.data(), sin_t.data(), B, T, NH, NKV, HS);
    bool ok = true;

    // fp32, out of place
    float* d_x = cuda_upload(x.data(), n);
    float* d_y = cuda_malloc<float>(n);
    rope_forward(d_y, (const float*)d_x, d_cos, d_sin, B, T, NH, NKV, HS, 0);
    std::vector<float> got = cuda_download(d_y, n);
    ok &= cuda_check_close((t + ".forward_fp32").c_str(), got.data(), ref_f.data(), n, TOL_FP32);
    rope_backward(d_y, (const float*)d_x, d_cos, d_sin, B, T, NH, NKV, HS, 0);
    got = cuda_download(d_y, n);
    ok &= cuda_check_close((t + ".backward_fp32").c_str(), got.data(), ref_b.data(), n, TOL_FP32);

    // bf16, in place (as the trainer) and out of place
    std::vector<float> xr = x;
    cuda_round_to_bf16(&xr);
    rope_forward_cpu(ref_f.data(), xr.data(), cos_t.data(), sin_t.data(), B, T, NH, NKV, HS);
    rope_backward_cpu(ref_b.data(), xr.data(), cos_t.data(), sin_t.data(), B, T, NH, NKV, HS);
    bf16* d_h = cuda_upload_bf16(xr.data(), n);
    bf16* d_h2 = cuda_malloc<bf16>(n);
    rope_forward(d_h2, (const bf16*)d_h, d_cos, d_sin, B, T, NH, NKV, HS, 0);
    got = cuda_download_float(d_h2, n);
    ok &= cuda_check_close((t + ".forward_bf16").c_str(), got.data(), ref_f.data(), n, TOL_BF16);
    rope_forward(d_h, (const bf16*)d_h, d_cos, d_sin, B, T, NH, NKV, HS, 0);
    got = cuda_download_float(d_h, n);
    ok &= cuda_check_close((t + ".forward_bf16_inplace").c_str(), got.data(), ref_f.data(), n, TOL_BF16);
    CUDA_CHECK(cudaFree(d_h));
    d_h = cuda_upload_bf16(xr.data(), n);
    rope_backward(d_h, (const bf16*)d_h, d_cos, d_sin, B, T, NH, NKV, HS, 0);
    got = cuda_download_float(d_h, n);
    ok &= cuda_check_close((t + ".backward_bf16_inplace").c_str(), got.data(), ref_b.data(), n, TOL_BF16);

    void* bufs[] = {d_cos, d_sin, d_x, d_y, d_h, d_h2};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    return ok;
}

static void bench(const char* preset, int B, int T, int NH, int NKV, int HS) {
    size_t n = (size_t)B * T * (NH + 2 * NKV) * HS;
    std::vector<float> cos_t((size_t)T * HS / 2), sin_t((size_t)T * HS / 2);
    rope_precompute_cpu(cos_t.data(), sin_t.data(), T, HS);
    float* d_cos = cuda_upload(cos_t.data(), cos_t.size());
    float* d_sin = cuda_upload(sin_t.data(), sin_t.size());
    bf16* x = cuda_malloc<bf16>(n);
    cuda_fill_uniform(x, n, 1, 1.0f);
    float ms = cuda_bench_ms([&] { rope_forward(x, (const bf16*)x, d_cos, d_sin, B, T, NH, NKV, HS, 0); }, 3, 20);
    char what[96];
    snprintf(what, sizeof(what), "%s rope_forward in place B=%d T=%d", preset, B, T);
    double moved = 2.0 * 2.0 * B * T * (NH + NKV) * HS;  // q and k read and written, v untouched
    cuda_print_bench(what, ms, moved, 0);
    void* bufs[] = {d_cos, d_sin, x};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
}

int main(int argc, char** argv) {
    bool validate_only = argc > 1 && strcmp(argv[1], "--validate-only") == 0;
    if (!cuda_device_present()) { printf("SKIP dev_rope: no CUDA device\n"); return 77; }
    const char* presets[] = {"tiny", "d12", "llama300m", "llama600m"};
    bool ok = validate("dev_rope.odd", 2, 5, 3, 1, 6, 3);
    for (const char* name : presets) {
        LlamaConfig c = {};
        llama_preset(name, &c);
        ok &= validate((std::string("dev_rope.") + name).c_str(), 4, c.T, c.NH, c.NKV, llama_head_size(&c), 30);
    }
    if (!validate_only) {
        for (const char* name : presets) {
            LlamaConfig c = {};
            llama_preset(name, &c);
            bench(name, 4, c.T, c.NH, c.NKV, llama_head_size(&c));
        }
    }
    return ok ? 0 : 1;
}
