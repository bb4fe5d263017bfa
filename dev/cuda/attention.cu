// dev/cuda/attention.cu — llmc/attention.cuh (cuBLASLt batched GEMMs + causal softmax with saved
// lse, GQA) against attention_forward_cpu / attention_backward_cpu (llmc/attention.h), then a
// benchmark.
// Tolerances (max |got - ref| / max |ref|), with what a CPU emulation of these exact roundings
// measured on the shapes below:
//   out (bf16)   1e-2    (bf16 probabilities times bf16 v, one more rounding; measured <= 4.1e-3)
//   lse (fp32)   1e-4    (fp32 scores of exact bf16 products; fp32 softmax sums, the CPU's in
//                         double; measured <= 1.2e-7)
//   dqkv (bf16)  1.5e-2  (bf16 P and dS, dP - D cancels; each of dq, dk, dv against its own
//                         scale; measured <= 5.1e-3)
// The backward is checked on its own: both sides get the CPU forward's out (rounded to bf16, as
// the GPU stores it) and lse, and the same bf16 qkv and dout.
// Shapes: tiny (GQA NH=4, NKV=2), d12 and llama600m heads at their real T with B=1 (the fp32
// reference is O(T²) per head), plus a small odd case with GQA group 3 and HS=24. The benchmark
// runs B=4 at the real T.
// Usage: build/dev_attention [--validate-only]   exit 0 ok, 1 failed, 77 no GPU (SKIP).
#include <cstring>
#include <string>
#include "../../llmc/llama.h"
#include "../../llmc/attention.h"
#include "../../llmc/attention.cuh"

static const double TOL_OUT = 1e-2;
static const double TOL_LSE = 1e-4;
static const double TOL_DQKV = 1.5e-2;

static bool validate(const char* tag, int B, int T, int NH, int NKV, int HS, uint64_t seed) {
    std::string t = tag;
    int QKV = (NH + 2 * NKV) * HS;
    size_t nqkv = (size_t)B * T * QKV, nout = (size_t)B * T * NH * HS, nlse = (size_t)B * NH * T;
    std::vector<float> qkv = cuda_host_uniform(nqkv, seed, 2.0f);  // wide enough for peaked softmax rows
    std::vector<float> dout = cuda_host_uniform(nout, seed + 1, 1.0f);
    cuda_round_to_bf16(&qkv);
    cuda_round_to_bf16(&dout);
    std::vector<float> ref_out(nout), ref_lse(nlse);
    attention_forward_cpu(ref_out.data(), ref_lse.data(), qkv.data(), B, T, NH, NKV, HS);

    AttentionScratch s;
    attention_scratch_alloc(&s, B, T, NH, NKV, HS);
    bf16* d_qkv = cuda_upload_bf16(qkv.data(), nqkv);
    bf16* d_out = cuda_malloc<bf16>(nout);
    float* d_lse = cuda_malloc<float>(nlse);
    attention_forward(d_out, d_lse, d_qkv, &s, B, T, NH, NKV, HS, 0);
    std::vector<float> got = cuda_download_float(d_out, nout);
    bool ok = cuda_check_close((t + ".forward_out").c_str(), got.data(), ref_out.data(), nout, TOL_OUT);
    got = cuda_download(d_lse, nlse);
    ok &= cuda_check_close((t + ".forward_lse").c_str(), got.data(), ref_lse.data(), nlse, TOL_LSE);

    std::vector<float> out_r = ref_out;
    cuda_round_to_bf16(&out_r);
    std::vector<float> ref_dqkv(nqkv, 0.0f);
    attention_backward_cpu(ref_dqkv.data(), dout.data(), qkv.data(), out_r.data(), ref_lse.data(), B, T, NH, NKV, HS);
    bf16* d_outr = cuda_upload_bf16(out_r.data(), nout);
    bf16* d_dout = cuda_upload_bf16(dout.data(), nout);
    float* d_lse_ref = cuda_upload(ref_lse.data(), nlse);
    bf16* d_dqkv = cuda_malloc<bf16>(nqkv);
    CUDA_CHECK(cudaMemset(d_dqkv, 0xff, nqkv * sizeof(bf16)));  // NaN garbage: every column must be written
    attention_backward(d_dqkv, d_dout, d_qkv, d_outr, d_lse_ref, &s, B, T, NH, NKV, HS, 0);
    got = cuda_download_float(d_dqkv, nqkv);
    // q, k and v parts have different scales; check each against its own maximum
    const char* parts[3] = {"dq", "dk", "dv"};
    int c0[4] = {0, NH * HS, (NH + NKV) * HS, QKV};
    for (int p = 0; p < 3; p++) {
        std::vector<float> g, r;
        for (size_t row = 0; row < (size_t)B * T; row++)
            for (int c = c0[p]; c < c0[p + 1]; c++) { g.push_back(got[row * QKV + c]); r.push_back(ref_dqkv[row * QKV + c]); }
        ok &= cuda_check_close((t + ".backward_" + parts[p]).c_str(), g.data(), r.data(), g.size(), TOL_DQKV);
    }
    void* bufs[] = {d_qkv, d_out, d_lse, d_outr, d_dout, d_lse_ref, d_dqkv};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    attention_scratch_free(&s);
    return ok;
}

static void bench(const char* preset, int B, int T, int NH, int NKV, int HS) {
    int QKV = (NH + 2 * NKV) * HS;
    size_t nqkv = (size_t)B * T * QKV, nout = (size_t)B * T * NH * HS;
    AttentionScratch s;
    attention_scratch_alloc(&s, B, T, NH, NKV, HS);
    bf16* qkv = cuda_malloc<bf16>(nqkv);
    bf16* out = cuda_malloc<bf16>(nout);
    bf16* dout = cuda_malloc<bf16>(nout);
    bf16* dqkv = cuda_malloc<bf16>(nqkv);
    float* lse = cuda_malloc<float>((size_t)B * NH * T);
    cuda_fill_uniform(qkv, nqkv, 1, 1.0f);
    cuda_fill_uniform(dout, nout, 2, 1.0f);
    // causal useful work (what MFU counts): 2 GEMMs of 2*T*T*HS per head, halved; the backward 2.5x
    double flops = 2.0 * 2.0 * B * NH * (double)T * T * HS / 2.0;
    char what[96];
    float ms = cuda_bench_ms([&] { attention_forward(out, lse, qkv, &s, B, T, NH, NKV, HS, 0); }, 2, 10);
    snprintf(what, sizeof(what), "%s attention_forward B=%d T=%d NH=%d HS=%d", preset, B, T, NH, HS);
    cuda_print_bench(what, ms, 0, flops);
    ms = cuda_bench_ms([&] { attention_backward(dqkv, dout, qkv, out, lse, &s, B, T, NH, NKV, HS, 0); }, 2, 10);
    snprintf(what, sizeof(what), "%s attention_backward", preset);
    cuda_print_bench(what, ms, 0, 2.5 * flops);
    printf("  (causal FLOPs; the GEMMs compute the full T x T square, so executed FLOP/s is twice that)\n");
    void* bufs[] = {qkv, out, dout, dqkv, lse};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    attention_scratch_free(&s);
}

int main(int argc, char** argv) {
    bool validate_only = argc > 1 && strcmp(argv[1], "--validate-only") == 0;
    if (!cuda_device_present()) { printf("SKIP dev_attention: no CUDA device\n"); return 77; }
    matmul_init();
    const char* presets[] = {"tiny", "d12", "llama600m"};
    bool ok = validate("dev_attention.odd_gqa3_HS24", 2, 37, 6, 2, 24, 3);
    for (const char* name : presets) {
        LlamaConfig c = {};
        llama_preset(name, &c);
        ok &= validate((std::string("dev_attention.") + name).c_str(), 1, c.T, c.NH, c.NKV, llama_head_size(&c), 60);
    }
    if (!validate_only) {
        for (const char* name : presets) {
            LlamaConfig c = {};
            llama_preset(name, &c);
            bench(name, 4, c.T, c.NH, c.NKV, llama_head_size(&c));
        }
    }
    matmul_free();
    return ok ? 0 : 1;
}
