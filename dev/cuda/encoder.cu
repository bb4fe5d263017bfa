// dev/cuda/encoder.cu — llmc/encoder.cuh against encoder_forward_cpu / encoder_backward_cpu
// (llmc/encoder.h), then a benchmark.
// Tolerances: 0 (bitwise). The forward is a copy; the backward adds the same dout rows onto the
// same starting dwte in the same order (n ascending per token) as the CPU, with no fused ops.
// Tokens are drawn from a small range so that most tokens repeat (the case a scatter gets wrong),
// and dwte starts nonzero to check the += contract.
// Shapes (N = B*T tokens, C, Vp): every preset at its real shape, B=4 and the preset's T: tiny
// 1024 x 128, d12 4096 x 768, llama300m 16384 x 1024, llama600m 8192 x 1536, all with
// Vp = 50304 (wte up to 7.7e7 elements), plus an odd N=300, C=100, Vp=512. Full size: the CPU
// reference is a copy.
// Usage: build/dev_encoder [--validate-only]   exit 0 ok, 1 a check failed, 2 bad usage, 77 no GPU (SKIP).
#include <cstring>
#include <string>
#include "../../llmc/llama.h"
#include "../../llmc/encoder.h"
#include "../../llmc/encoder.cuh"
#include "dev_flags.h"

static bool validate(const char* tag, int N, int C, int Vp, int token_range, uint64_t seed) {
    std::vector<float> wte = cuda_host_uniform((size_t)Vp * C, seed, 1.0f);
    std::vector<float> dout = cuda_host_uniform((size_t)N * C, seed + 1, 1.0f);
    std::vector<float> dwte = cuda_host_uniform((size_t)Vp * C, seed + 2, 0.5f);
    std::vector<float> u = cuda_host_uniform(N, seed + 3, 1.0f);
    std::vector<int> tokens(N);
    for (int n = 0; n < N; n++) tokens[n] = std::min(token_range - 1, (int)((u[n] * 0.5f + 0.5f) * token_range));
    tokens[0] = Vp - 1;  // the last (padded) row is a legal index too
    float* d_wte = cuda_upload(wte.data(), wte.size());
    float* d_dout = cuda_upload(dout.data(), dout.size());
    float* d_dwte = cuda_upload(dwte.data(), dwte.size());
    int* d_tokens = cuda_upload(tokens.data(), tokens.size());
    float* d_out = cuda_malloc<float>((size_t)N * C);

    std::vector<float> ref((size_t)N * C);
    encoder_forward_cpu(ref.data(), tokens.data(), wte.data(), N, C);
    encoder_forward(d_out, d_tokens, d_wte, N, C, 0);
    std::vector<float> got = cuda_download(d_out, ref.size());
    bool ok = cuda_check_close((std::string(tag) + ".forward").c_str(), got.data(), ref.data(), ref.size(), 0.0);

    std::vector<int> buckets;
    int U = encoder_backward_buckets(&buckets, tokens.data(), N, Vp);
    int* d_buckets = cuda_upload(buckets.data(), buckets.size());
    encoder_backward_cpu(dwte.data(), dout.data(), tokens.data(), N, C);
    encoder_backward(d_dwte, d_dout, d_buckets, U, C, 0);
    got = cuda_download(d_dwte, dwte.size());
    ok &= cuda_check_close((std::string(tag) + ".backward_bitwise").c_str(), got.data(), dwte.data(), dwte.size(), 0.0);
    ok &= memcmp(got.data(), dwte.data(), dwte.size() * sizeof(float)) == 0;

    void* bufs[] = {d_wte, d_dout, d_dwte, d_tokens, d_out, d_buckets};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    return ok;
}

static void bench(const char* preset, int N, int C, int Vp) {
    float* wte = cuda_malloc<float>((size_t)Vp * C);
    float* out = cuda_malloc<float>((size_t)N * C);
    int* tokens = cuda_malloc<int>(N);
    std::vector<float> u = cuda_host_uniform(N, 7, 1.0f);
    std::vector<int> tok(N);
    for (int n = 0; n < N; n++) tok[n] = (int)((u[n] * 0.5f + 0.5f) * 50000) % 50257;  // realistic: many distinct
    CUDA_CHECK(cudaMemcpy(tokens, tok.data(), N * sizeof(int), cudaMemcpyHostToDevice));
    cuda_fill_uniform(wte, (size_t)Vp * C, 1, 1.0f);
    std::vector<int> buckets;
    int U = encoder_backward_buckets(&buckets, tok.data(), N, Vp);
    int* d_buckets = cuda_upload(buckets.data(), buckets.size());
    char what[96];
    float ms = cuda_bench_ms([&] { encoder_forward(out, tokens, wte, N, C, 0); }, 3, 20);
    snprintf(what, sizeof(what), "%s encoder_forward N=%d C=%d", preset, N, C);
    cuda_print_bench(what, ms, 2.0 * N * C * 4, 0);
    ms = cuda_bench_ms([&] { encoder_backward(wte, out, d_buckets, U, C, 0); }, 3, 20);
    snprintf(what, sizeof(what), "%s encoder_backward (%d distinct)", preset, U);
    cuda_print_bench(what, ms, (double)N * C * 4 + 2.0 * U * C * 4, 0);
    void* bufs[] = {wte, out, tokens, d_buckets};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
}

int main(int argc, char** argv) {
    DevFlags flags;
    if (!dev_flags_parse(argc, argv, "dev_encoder", 0, &flags)) return 2;
    const bool validate_only = flags.validate_only;
    if (!cuda_device_present()) { printf("SKIP dev_encoder: no CUDA device\n"); return 77; }
    const char* presets[] = {"tiny", "d12", "llama300m", "llama600m"};
    bool ok = validate("dev_encoder.odd_C100", 300, 100, 512, 37, 11);
    for (const char* name : presets) {
        LlamaConfig c = {};
        llama_preset(name, &c);
        ok &= validate((std::string("dev_encoder.") + name).c_str(), 4 * c.T, c.C, c.Vp, 1000, 20);
    }
    if (!validate_only) {
        for (const char* name : presets) {
            LlamaConfig c = {};
            llama_preset(name, &c);
            bench(name, 4 * c.T, c.C, c.Vp);
        }
    }
    return ok ? 0 : 1;
}
