// dev/cuda/crossentropy.cu — llmc/crossentropy.cuh (fused softmax + cross-entropy + dlogits over
// the padded vocabulary) against crossentropy_forward_cpu / crossentropy_forward_backward_cpu
// (llmc/crossentropy.h), then a benchmark.
// Tolerances (max |got - ref| / max |ref|):
//   losses (fp32)    1e-5  (fp32 row sums over ~50k terms where the CPU sums in double)
//   dlogits (bf16)   8e-3  (one bf16 rounding of each element)
//   padded columns   exactly 0 (checked separately, over NaN garbage)
// Shapes: the GPT-2 vocabulary (V 50257, Vp 50304) with N = 512 rows (the reference is
// N*Vp exp calls), an odd small vocabulary (V 1000, Vp 1003: the scalar path), and targets that
// include 0 and V-1. The benchmark runs N = B*T of d12 and llama600m at B=4.
// Usage: build/dev_crossentropy [--validate-only]   exit 0 ok, 1 failed, 77 no GPU (SKIP).
#include <cstring>
#include <string>
#include "../../llmc/llama.h"
#include "../../llmc/crossentropy.h"
#include "../../llmc/crossentropy.cuh"

static const double TOL_LOSS = 1e-5;
static const double TOL_DLOGITS = 8e-3;

static bool validate(const char* tag, int N, int V, int Vp, float logit_scale, uint64_t seed) {
    std::string t = tag;
    std::vector<float> logits = cuda_host_uniform((size_t)N * Vp, seed, logit_scale);
    std::vector<float> u = cuda_host_uniform(N, seed + 1, 1.0f);
    std::vector<int> targets(N);
    for (int n = 0; n < N; n++) targets[n] = std::min(V - 1, (int)((u[n] * 0.5f + 0.5f) * V));
    targets[0] = 0;
    targets[N - 1] = V - 1;
    float dloss = 1.0f / (N * 2);  // as under 2 micro-steps of accumulation
    float* d_logits = cuda_upload(logits.data(), logits.size());
    int* d_targets = cuda_upload(targets.data(), N);
    float* d_losses = cuda_malloc<float>(N);
    bf16* d_dlogits = cuda_malloc<bf16>((size_t)N * Vp);
    CUDA_CHECK(cudaMemset(d_dlogits, 0xff, (size_t)N * Vp * sizeof(bf16)));  // NaN garbage

    std::vector<float> ref_losses(N), ref_d((size_t)N * Vp);
    crossentropy_forward_backward_cpu(ref_losses.data(), ref_d.data(), logits.data(), targets.data(), N, V, Vp, dloss);
    crossentropy_forward(d_losses, d_logits, d_targets, N, V, Vp, 0);
    std::vector<float> got = cuda_download(d_losses, N);
    bool ok = cuda_check_close((t + ".forward_losses").c_str(), got.data(), ref_losses.data(), N, TOL_LOSS);
    CUDA_CHECK(cudaMemset(d_losses, 0, N * sizeof(float)));
    crossentropy_forward_backward(d_losses, d_dlogits, d_logits, d_targets, N, V, Vp, dloss, 0);
    got = cuda_download(d_losses, N);
    ok &= cuda_check_close((t + ".forward_backward_losses").c_str(), got.data(), ref_losses.data(), N, TOL_LOSS);
    got = cuda_download_float(d_dlogits, ref_d.size());
    ok &= cuda_check_close((t + ".dlogits").c_str(), got.data(), ref_d.data(), ref_d.size(), TOL_DLOGITS);
    bool pad_zero = true;
    for (int n = 0; n < N; n++)
        for (int v = V; v < Vp; v++) pad_zero &= got[(size_t)n * Vp + v] == 0.0f;
    printf("%s %s.padded_columns_zero\n", pad_zero ? "PASS" : "FAIL", tag);
    ok &= pad_zero;
    void* bufs[] = {d_logits, d_targets, d_losses, d_dlogits};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    return ok;
}

static void bench(const char* preset, int N, int V, int Vp) {
    float* logits = cuda_malloc<float>((size_t)N * Vp);
    bf16* dlogits = cuda_malloc<bf16>((size_t)N * Vp);
    float* losses = cuda_malloc<float>(N);
    std::vector<int> tg(N);
    for (int n = 0; n < N; n++) tg[n] = (n * 7919) % V;
    int* targets = cuda_upload(tg.data(), N);
    cuda_fill_uniform(logits, (size_t)N * Vp, 1, 4.0f);
    char what[96];
    float ms = cuda_bench_ms([&] { crossentropy_forward_backward(losses, dlogits, logits, targets, N, V, Vp, 1.0f / N, 0); }, 2, 10);
    snprintf(what, sizeof(what), "%s crossentropy_forward_backward N=%d", preset, N);
    cuda_print_bench(what, ms, (double)N * Vp * (4 + 4 + 2), 0);  // two fp32 reads, one bf16 write
    void* bufs[] = {logits, dlogits, losses, targets};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
}

int main(int argc, char** argv) {
    bool validate_only = argc > 1 && strcmp(argv[1], "--validate-only") == 0;
    if (!cuda_device_present()) { printf("SKIP dev_crossentropy: no CUDA device\n"); return 77; }
    bool ok = validate("dev_crossentropy.odd_V1000_Vp1003", 64, 1000, 1003, 3.0f, 1);
    ok &= validate("dev_crossentropy.gpt2_vocab", 512, LLAMA_GPT2_VOCAB, LLAMA_GPT2_VOCAB_PADDED, 5.0f, 2);
    ok &= validate("dev_crossentropy.gpt2_vocab_peaked", 64, LLAMA_GPT2_VOCAB, LLAMA_GPT2_VOCAB_PADDED, 40.0f, 3);
    if (!validate_only) {
        const char* presets[] = {"tiny", "d12", "llama600m"};
        for (const char* name : presets) {
            LlamaConfig c = {};
            llama_preset(name, &c);
            bench(name, 4 * c.T, c.V, c.Vp);
        }
    }
    return ok ? 0 : 1;
}
