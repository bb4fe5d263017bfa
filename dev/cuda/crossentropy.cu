// dev/cuda/crossentropy.cu — llmc/crossentropy.cuh (fused softmax + cross-entropy + dlogits over
// the padded vocabulary) against crossentropy_forward_cpu / crossentropy_forward_backward_cpu
// (llmc/crossentropy.h), then a benchmark.
// Tolerances (max |got - ref| / max |ref|):
//   losses (fp32)    1e-5  (fp32 row sums over ~50k terms where the CPU sums in double)
//   dlogits (bf16)   8e-3  (one bf16 rounding of each element)
//   padded columns   exactly 0 (checked separately, over NaN garbage)
// Shapes (N rows x Vp):
//   whole tensors: the GPT-2 vocabulary (V 50257, Vp 50304) with N = 512 rows and, peaked
//     (logits up to 40), N = 64; an odd small vocabulary (V 1000, Vp 1003: the scalar path);
//     targets include 0 and V-1;
//   the real shapes, N = B*T at B=4: llama300m 16384 x 50304 (8.2e8 logits, 3.3 GB of fp32:
//     row offsets past 2^31 bytes) and llama600m 8192 x 50304 (d12 and tiny are smaller
//     cases of the same kernel). The logits are drawn on the GPU; the reference runs on three
//     blocks of REAL_ROWS rows, the first, the middle and the last (the largest offsets), read
//     back from the GPU's logits, and only those rows of losses and dlogits are compared
//     (a whole-tensor reference is 1.6e9 expf, ~9 s on one core; the blocks take 0.4 s). Every
//     loss and every dlogit of the whole tensor, which starts as NaN, must come back finite.
// The bounds are not yet measured on a GPU at the real shapes (the row length, what the sums
// depend on, is the same as in the whole-tensor cases).
// The backward runs both ways wherever the row fits in shared memory: the row kept there
// (llmc/'s choice) and the row re-read from global memory (version 1, still the kernel for rows
// too long to keep); the two must give the same bits, losses and dlogits.
// The benchmark runs N = B*T of every preset at B=4.
// Usage: build/dev_crossentropy [--validate-only] [--small] [--compare]
//   --small: the whole-tensor validations with fewer rows (64 and 16 at the GPT-2 vocabulary;
//   what dev/emu runs);
//   --compare: the backward at llama300m's and llama600m's real shapes, version 1 (the row re-read)
//   against llmc/'s (COMPARE lines for dev/bench_small_kernels.sh; losses and dlogits bitwise);
//   exit 0 ok, 1 failed, 2 bad usage, 77 no GPU (SKIP).
#include <cstring>
#include <string>
#include "../../llmc/llama.h"
#include "../../llmc/crossentropy.h"
#include "../../llmc/crossentropy.cuh"
#include "dev_flags.h"

static const double TOL_LOSS = 1e-5;
static const double TOL_DLOGITS = 8e-3;
static const int REAL_ROWS = 256;  // rows per reference block at the real shapes

// N targets uniform in [0, V), the first 0 and the last V - 1 (both ends of the real vocabulary)
static std::vector<int> random_targets(int N, int V, uint64_t seed) {
    std::vector<float> u = cuda_host_uniform(N, seed, 1.0f);
    std::vector<int> targets(N);
    for (int n = 0; n < N; n++) targets[n] = std::min(V - 1, (int)((u[n] * 0.5f + 0.5f) * V));
    targets[0] = 0;
    targets[N - 1] = V - 1;
    return targets;
}

static bool validate(const char* tag, int N, int V, int Vp, float logit_scale, uint64_t seed) {
    std::string t = tag;
    std::vector<float> logits = cuda_host_uniform((size_t)N * Vp, seed, logit_scale);
    std::vector<int> targets = random_targets(N, V, seed + 1);
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
    // the backward both ways: the row re-read (0), then kept in shared memory where it fits (-1)
    std::vector<float> first_l, first_d;
    for (int way : {0, -1}) {
        if (way == -1 && crossentropy_row_smem(d_logits, Vp) == 0) {
            printf("  %s: the row (%d floats) does not stay in shared memory: one way only\n", tag, Vp);
            continue;
        }
        std::string w_t = t + (way == 0 ? ".row_reread" : ".row_in_shared");
        CUDA_CHECK(cudaMemset(d_losses, 0, N * sizeof(float)));
        CUDA_CHECK(cudaMemset(d_dlogits, 0xff, (size_t)N * Vp * sizeof(bf16)));  // NaN garbage
        crossentropy_forward_backward(d_losses, d_dlogits, d_logits, d_targets, N, V, Vp, dloss, 0, way);
        std::vector<float> gl = cuda_download(d_losses, N);
        ok &= cuda_check_close((w_t + "_forward_backward_losses").c_str(), gl.data(), ref_losses.data(), N, TOL_LOSS);
        got = cuda_download_float(d_dlogits, ref_d.size());
        ok &= cuda_check_close((w_t + "_dlogits").c_str(), got.data(), ref_d.data(), ref_d.size(), TOL_DLOGITS);
        bool pad_zero = true;
        for (int n = 0; n < N; n++)
            for (int v = V; v < Vp; v++) pad_zero &= got[(size_t)n * Vp + v] == 0.0f;
        printf("%s %s_padded_columns_zero\n", pad_zero ? "PASS" : "FAIL", w_t.c_str());
        ok &= pad_zero;
        if (first_l.empty()) { first_l = gl; first_d = got; continue; }
        bool same = memcmp(gl.data(), first_l.data(), N * sizeof(float)) == 0 &&
                    memcmp(got.data(), first_d.data(), got.size() * sizeof(float)) == 0;
        printf("%s %s_bitwise_row_reread\n", same ? "PASS" : "FAIL", w_t.c_str());
        ok &= same;
    }
    void* bufs[] = {d_logits, d_targets, d_losses, d_dlogits};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    return ok;
}

// true when every one of the n bf16 values on the device is finite (exponent bits not all ones),
// read back in chunks so that a 1.6 GB tensor needs no host copy of its own
static bool all_finite_bf16(const bf16* dev, size_t n) {
    std::vector<uint16_t> chunk(std::min(n, CUDA_HOST_CHUNK));
    bool finite = true;
    for (size_t off = 0; off < n; off += CUDA_HOST_CHUNK) {
        size_t m = std::min(CUDA_HOST_CHUNK, n - off);
        CUDA_CHECK(cudaMemcpy(chunk.data(), dev + off, m * sizeof(bf16), cudaMemcpyDeviceToHost));
        const uint16_t* c = chunk.data();
        bool fin = true;
#pragma omp parallel for schedule(static) reduction(&& : fin)
        for (size_t i = 0; i < m; i++) fin = fin && (c[i] & 0x7f80u) != 0x7f80u;
        finite = finite && fin;
    }
    return finite;
}

// The real shapes: the whole (N, Vp) tensor on the GPU, the reference on three row blocks.
static bool validate_rows(const char* tag, int N, int V, int Vp, float logit_scale, uint64_t seed) {
    std::string t = tag;
    size_t nl = (size_t)N * Vp;
    std::vector<int> targets = random_targets(N, V, seed + 1);
    float dloss = 1.0f / (N * 2);  // as under 2 micro-steps of accumulation
    float* d_logits = cuda_malloc<float>(nl);
    cuda_fill_uniform(d_logits, nl, seed, logit_scale);
    int* d_targets = cuda_upload(targets.data(), N);
    float* d_losses = cuda_malloc<float>(N);
    float* d_losses_fb = cuda_malloc<float>(N);
    bf16* d_dlogits = cuda_malloc<bf16>(nl);
    CUDA_CHECK(cudaMemset(d_losses, 0xff, N * sizeof(float)));  // NaN garbage
    CUDA_CHECK(cudaMemset(d_losses_fb, 0xff, N * sizeof(float)));
    CUDA_CHECK(cudaMemset(d_dlogits, 0xff, nl * sizeof(bf16)));
    crossentropy_forward(d_losses, d_logits, d_targets, N, V, Vp, 0);
    crossentropy_forward_backward(d_losses_fb, d_dlogits, d_logits, d_targets, N, V, Vp, dloss, 0);
    std::vector<float> g_losses = cuda_download(d_losses, N), g_losses_fb = cuda_download(d_losses_fb, N);

    bool finite = all_finite_bf16(d_dlogits, nl);
    for (int n = 0; n < N; n++) finite = finite && std::isfinite(g_losses[n]) && std::isfinite(g_losses_fb[n]);
    printf("%s %s.outputs_finite (every loss and dlogit written)\n", finite ? "PASS" : "FAIL", tag);
    bool ok = finite;

    int R = std::min(REAL_ROWS, N);
    int starts[3] = {0, (N - R) / 2, N - R};
    printf("  %s: reference on rows [%d, %d), [%d, %d), [%d, %d) of N=%d\n", tag, starts[0], starts[0] + R,
           starts[1], starts[1] + R, starts[2], starts[2] + R, N);
    std::vector<float> rl, rd, gl, gfb, gd;
    std::vector<float> logits((size_t)R * Vp), ref_l(R), ref_d((size_t)R * Vp), got_d((size_t)R * Vp);
    for (int k = 0; k < 3; k++) {
        size_t r0 = starts[k];
        cuda_download_to(logits.data(), d_logits + r0 * Vp, (size_t)R * Vp);
        crossentropy_forward_backward_cpu(ref_l.data(), ref_d.data(), logits.data(), targets.data() + r0, R, V, Vp, dloss);
        cuda_download_float_to(got_d.data(), d_dlogits + r0 * Vp, (size_t)R * Vp);
        rl.insert(rl.end(), ref_l.begin(), ref_l.end());
        rd.insert(rd.end(), ref_d.begin(), ref_d.end());
        gl.insert(gl.end(), g_losses.begin() + r0, g_losses.begin() + r0 + R);
        gfb.insert(gfb.end(), g_losses_fb.begin() + r0, g_losses_fb.begin() + r0 + R);
        gd.insert(gd.end(), got_d.begin(), got_d.end());
    }
    ok &= cuda_check_close((t + ".forward_losses").c_str(), gl.data(), rl.data(), rl.size(), TOL_LOSS);
    ok &= cuda_check_close((t + ".forward_backward_losses").c_str(), gfb.data(), rl.data(), rl.size(), TOL_LOSS);
    ok &= cuda_check_close((t + ".dlogits").c_str(), gd.data(), rd.data(), rd.size(), TOL_DLOGITS);
    bool pad_zero = true;
    for (size_t n = 0; n < gd.size() / Vp; n++)
        for (int v = V; v < Vp; v++) pad_zero &= gd[n * Vp + v] == 0.0f;
    printf("%s %s.padded_columns_zero\n", pad_zero ? "PASS" : "FAIL", tag);
    ok &= pad_zero;
    void* bufs[] = {d_logits, d_targets, d_losses, d_losses_fb, d_dlogits};
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
    // the logits read once where the row stays in shared memory (twice where not), dlogits written
    cuda_print_bench(what, ms, (double)N * Vp * ((crossentropy_row_smem(logits, Vp) ? 4 : 8) + 2), 0);
    void* bufs[] = {logits, dlogits, losses, targets};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
}

// The backward at the shape (N, Vp), version 1 (the row re-read from global memory) against
// llmc/'s (the row kept in shared memory where it fits): losses and dlogits bitwise, then the times.
static bool compare(const char* preset, int N, int V, int Vp) {
    size_t nl = (size_t)N * Vp;
    float* logits = cuda_malloc<float>(nl);
    bf16* d1 = cuda_malloc<bf16>(nl);
    bf16* d2 = cuda_malloc<bf16>(nl);
    float* l1 = cuda_malloc<float>(N);
    float* l2 = cuda_malloc<float>(N);
    std::vector<int> tg = random_targets(N, V, 7);
    int* targets = cuda_upload(tg.data(), N);
    cuda_fill_uniform(logits, nl, 1, 5.0f);
    float dloss = 1.0f / N;
    crossentropy_forward_backward(l1, d1, logits, targets, N, V, Vp, dloss, 0, 0);
    crossentropy_forward_backward(l2, d2, logits, targets, N, V, Vp, dloss, 0);
    std::vector<float> a = cuda_download(l1, N), b = cuda_download(l2, N);
    bool same = memcmp(a.data(), b.data(), N * sizeof(float)) == 0;
    std::vector<uint16_t> c1(std::min(nl, CUDA_HOST_CHUNK)), c2(c1.size());
    for (size_t off = 0; off < nl && same; off += CUDA_HOST_CHUNK) {
        size_t m = std::min(CUDA_HOST_CHUNK, nl - off);
        CUDA_CHECK(cudaMemcpy(c1.data(), d1 + off, m * sizeof(bf16), cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(c2.data(), d2 + off, m * sizeof(bf16), cudaMemcpyDeviceToHost));
        same = memcmp(c1.data(), c2.data(), m * sizeof(uint16_t)) == 0;
    }
    printf("%s dev_crossentropy.compare.%s.v2_vs_v1_bitwise (losses and dlogits)\n", same ? "PASS" : "FAIL", preset);
    float ms1 = cuda_bench_ms([&] { crossentropy_forward_backward(l1, d1, logits, targets, N, V, Vp, dloss, 0, 0); }, 2, 10);
    float ms2 = cuda_bench_ms([&] { crossentropy_forward_backward(l2, d2, logits, targets, N, V, Vp, dloss, 0); }, 2, 10);
    char shape[96], note[160];
    snprintf(shape, sizeof(shape), "%s N=%d Vp=%d", preset, N, Vp);
    snprintf(note, sizeof(note), "v1 the row read twice from global memory; v2 %s", crossentropy_row_smem(logits, Vp) ?
             "the row kept in shared memory (cp.async), 8-byte dlogits stores" : "the same (the row does not fit)");
    cuda_print_compare("crossentropy_forward_backward", shape, ms1, ms2, note);
    void* bufs[] = {logits, d1, d2, l1, l2, targets};
    for (void* p : bufs) CUDA_CHECK(cudaFree(p));
    return same;
}

int main(int argc, char** argv) {
    DevFlags flags;
    if (!dev_flags_parse(argc, argv, "dev_crossentropy", DEV_FLAG_SMALL | DEV_FLAG_COMPARE, &flags)) return 2;
    const bool validate_only = flags.validate_only, small = flags.small, compare_only = flags.compare;
    if (!cuda_device_present()) { printf("SKIP dev_crossentropy: no CUDA device\n"); return 77; }
    if (compare_only) {
        bool ok = true;
        for (const char* name : {"llama300m", "llama600m"}) {
            LlamaConfig c = {};
            llama_preset(name, &c);
            ok &= compare(name, 4 * c.T, c.V, c.Vp);
        }
        return ok ? 0 : 1;
    }
    bool ok = validate("dev_crossentropy.odd_V1000_Vp1003", 64, 1000, 1003, 3.0f, 1);
    ok &= validate("dev_crossentropy.gpt2_vocab", small ? 64 : 512, LLAMA_GPT2_VOCAB, LLAMA_GPT2_VOCAB_PADDED, 5.0f, 2);
    ok &= validate("dev_crossentropy.gpt2_vocab_peaked", small ? 16 : 64, LLAMA_GPT2_VOCAB, LLAMA_GPT2_VOCAB_PADDED, 40.0f, 3);
    // a vocabulary of whole float4s with a scalar tail below Vp (V % 4 = 2)
    ok &= validate("dev_crossentropy.odd_V998_Vp1000", 32, 998, 1000, 3.0f, 4);
    const char* real[] = {"llama300m", "llama600m"};
    uint64_t seed = 10;
    for (const char* name : real) {
        if (small) break;
        LlamaConfig c = {};
        llama_preset(name, &c);
        std::string tag = std::string("dev_crossentropy.") + name + "_N" + std::to_string(4 * c.T);
        ok &= validate_rows(tag.c_str(), 4 * c.T, c.V, c.Vp, 5.0f, seed += 10);
    }
    if (!validate_only) {
        const char* presets[] = {"tiny", "d12", "llama300m", "llama600m"};
        for (const char* name : presets) {
            LlamaConfig c = {};
            llama_preset(name, &c);
            bench(name, 4 * c.T, c.V, c.Vp);
        }
    }
    return ok ? 0 : 1;
}
