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
// Version 1 (rope_rotate_scalar: one pair per thread, 64-bit index math, 2-byte accesses; the
// fallback for shapes the 16-byte runs do not fit) must give bitwise what rope_rotate gives
// (both round through rope_pair); every validation checks that in bf16 and fp32, and --compare
// times the two.
// Usage: build/dev_rope [--validate-only] [--small] [--compare]
//   --small: validations at the odd shape and tiny only (what dev/emu runs);
//   --compare: version 1 against rope_rotate, bf16 in place, at llama300m's and llama600m's real
//   shapes (COMPARE lines for dev/bench_small_kernels.sh; outputs checked bitwise equal, no CPU
//   reference);
//   exit 0 ok, 1 failed, 2 bad usage, 77 no GPU (SKIP).
#include <cstring>
#include <string>
#include "../../llmc/llama.h"
#include "../../llmc/rope.h"
#include "../../llmc/rope.cuh"
#include "dev_flags.h"

static const double TOL_BF16 = 8e-3;
static const double TOL_FP32 = 1e-5;

// got (B, T, row) holds rope_rotate(inp) (sign +1 forward, -1 backward), out of place: version 1
// (rope_rotate_scalar) on the same input must give the same bytes, the v heads' copy included.
template <typename Tio>
static bool same_as_scalar(const char* name, const Tio* got, const Tio* inp, const float* cos_t, const float* sin_t,
                           int B, int T, int NH, int NKV, int HS, float sign) {
    size_t n = (size_t)B * T * (NH + 2 * NKV) * HS;
    Tio* v1 = cuda_malloc<Tio>(n);
    CUDA_CHECK(cudaMemcpy(v1, inp, n * sizeof(Tio), cudaMemcpyDeviceToDevice));  // the v heads
    rope_rotate_scalar(v1, inp, cos_t, sin_t, B, T, NH, NKV, HS, sign, 0);
    std::vector<Tio> a = cuda_download(got, n), b = cuda_download(v1, n);
    CUDA_CHECK(cudaFree(v1));
    bool same = memcmp(a.data(), b.data(), n * sizeof(Tio)) == 0;
    printf("%s %s (%s)\n", same ? "PASS" : "FAIL", name,
           rope_runs_fit(got, inp, cos_t, sin_t, HS) ? "16-byte runs against version 1" : "both on version 1: HS/2 off the run");
    return same;
}

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
    ok &= same_as_scalar((t + ".backward_fp32_scalar_bitwise").c_str(), d_y, (const float*)d_x, d_cos, d_sin, B, T, NH, NKV, HS, -1.0f);

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
    ok &= same_as_scalar((t + ".forward_bf16_scalar_bitwise").c_str(), d_h2, (const bf16*)d_h, d_cos, d_sin, B, T, NH, NKV, HS, 1.0f);
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

// the (T, HS/2) cos and sin tables on the device
static void rope_tables_on_device(int T, int HS, float** d_cos, float** d_sin) {
    std::vector<float> cos_t((size_t)T * HS / 2), sin_t((size_t)T * HS / 2);
    rope_precompute_cpu(cos_t.data(), sin_t.data(), T, HS);
    *d_cos = cuda_upload(cos_t.data(), cos_t.size());
    *d_sin = cuda_upload(sin_t.data(), sin_t.size());
}

static void bench(const char* preset, int B, int T, int NH, int NKV, int HS) {
    size_t n = (size_t)B * T * (NH + 2 * NKV) * HS;
    float *d_cos, *d_sin;
    rope_tables_on_device(T, HS, &d_cos, &d_sin);
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

// rope_rotate against version 1, bf16 in place (as the trainer), at (B, T, NH, NKV, HS)
static bool compare(const char* preset, int B, int T, int NH, int NKV, int HS) {
    size_t n = (size_t)B * T * (NH + 2 * NKV) * HS;
    float *d_cos, *d_sin;
    rope_tables_on_device(T, HS, &d_cos, &d_sin);
    bf16* x = cuda_malloc<bf16>(n);
    bf16* y = cuda_malloc<bf16>(n);
    cuda_fill_uniform(x, n, 1, 1.0f);
    rope_forward(y, (const bf16*)x, d_cos, d_sin, B, T, NH, NKV, HS, 0);
    bool ok = same_as_scalar((std::string("dev_rope.compare.") + preset + ".forward_bf16_scalar_bitwise").c_str(), y, (const bf16*)x,
                             d_cos, d_sin, B, T, NH, NKV, HS, 1.0f);
    float ms1 = cuda_bench_ms([&] { rope_rotate_scalar(x, (const bf16*)x, d_cos, d_sin, B, T, NH, NKV, HS, 1.0f, 0); }, 3, 20);
    float ms2 = cuda_bench_ms([&] { rope_forward(x, (const bf16*)x, d_cos, d_sin, B, T, NH, NKV, HS, 0); }, 3, 20);
    char shape[96];
    snprintf(shape, sizeof(shape), "%s B=%d T=%d NH=%d NKV=%d HS=%d bf16 in place", preset, B, T, NH, NKV, HS);
    cuda_print_compare("rope_rotate", shape, ms1, ms2, "v1 a pair per thread, 64-bit divisions, 2-byte accesses; v2 16-byte runs, 32-bit index");
    void* bufs[] = {d_cos, d_sin, x, y};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    return ok;
}

int main(int argc, char** argv) {
    DevFlags flags;
    if (!dev_flags_parse(argc, argv, "dev_rope", DEV_FLAG_SMALL | DEV_FLAG_COMPARE, &flags)) return 2;
    const bool validate_only = flags.validate_only, small = flags.small, compare_only = flags.compare;
    if (!cuda_device_present()) { printf("SKIP dev_rope: no CUDA device\n"); return 77; }
    const char* presets[] = {"tiny", "d12", "llama300m", "llama600m"};
    if (compare_only) {
        bool ok = true;
        for (const char* name : {"llama300m", "llama600m"}) {
            LlamaConfig c = {};
            llama_preset(name, &c);
            ok &= compare(name, 4, c.T, c.NH, c.NKV, llama_head_size(&c));
        }
        return ok ? 0 : 1;
    }
    bool ok = validate("dev_rope.odd", 2, 5, 3, 1, 6, 3);
    for (const char* name : presets) {
        if (small && strcmp(name, "tiny") != 0) continue;
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
