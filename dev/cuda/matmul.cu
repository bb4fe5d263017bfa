// dev/cuda/matmul.cu — llmc/matmul.cuh (cuBLASLt bf16 GEMMs, fp32 accumulation) against
// matmul_forward_cpu / matmul_backward_cpu (llmc/matmul.h), then a benchmark of every projection
// of the presets.
// Validation: random inputs rounded to bf16 on the host, so the fp32 reference multiplies exactly
// the numbers the GPU reads; what is left is accumulation order and the output rounding.
// Tolerances (max |got - ref| / max |ref|):
//   bf16 outputs (out, dinp)            8e-3   (one bf16 rounding: <= 2^-9 of each element)
//   fp32 outputs (logits, residual add,
//                 dweight accumulation) 1e-4   (fp32 sums in another order, K up to 8192)
// Shapes: every projection (qkv, proj, fc1, fc2, lm_head) of tiny, d12 and llama600m, with N
// reduced to 256 tokens for validation (the CPU reference would take minutes at full N); the
// benchmark runs them at B=4 and the preset's T.
// Usage: build/dev_matmul [--validate-only]   exit 0 ok, 1 a check failed, 77 no GPU (SKIP).
#include <cstring>
#include <string>
#include "../../llmc/llama.h"
#include "../../llmc/matmul.h"
#include "../../llmc/matmul.cuh"

static const double TOL_BF16 = 8e-3;
static const double TOL_FP32 = 1e-4;

typedef struct { const char* name; int C, OC; } Proj;

static std::vector<Proj> projections(const LlamaConfig* c) {
    int HSNH = llama_head_size(c) * c->NH;
    return {{"qkv", c->C, llama_qkv_channels(c)}, {"proj", HSNH, c->C}, {"fc1", c->C, 2 * c->FF},
            {"fc2", c->FF, c->C}, {"lm_head", c->C, c->Vp}};
}

static bool validate(const char* tag, int N, int C, int OC, uint64_t seed) {
    bool ok = true;
    std::vector<float> inp = cuda_host_uniform((size_t)N * C, seed, 1.0f);
    std::vector<float> w = cuda_host_uniform((size_t)OC * C, seed + 1, 0.05f);
    std::vector<float> dout = cuda_host_uniform((size_t)N * OC, seed + 2, 0.1f);
    std::vector<float> resid = cuda_host_uniform((size_t)N * OC, seed + 3, 1.0f);
    std::vector<float> dw0 = cuda_host_uniform((size_t)OC * C, seed + 4, 0.5f);  // nonzero: checks +=
    cuda_round_to_bf16(&inp);
    cuda_round_to_bf16(&w);
    cuda_round_to_bf16(&dout);
    bf16* d_inp = cuda_upload_bf16(inp.data(), inp.size());
    bf16* d_w = cuda_upload_bf16(w.data(), w.size());
    bf16* d_dout = cuda_upload_bf16(dout.data(), dout.size());
    float* d_resid = cuda_upload(resid.data(), resid.size());
    float* d_dw = cuda_upload(dw0.data(), dw0.size());
    bf16* d_out = cuda_malloc<bf16>((size_t)N * OC);
    float* d_out32 = cuda_malloc<float>((size_t)N * OC);
    bf16* d_dinp = cuda_malloc<bf16>((size_t)N * C);

    std::vector<float> ref((size_t)N * OC);
    matmul_forward_cpu(ref.data(), inp.data(), w.data(), N, C, OC);
    matmul_forward(d_out, d_inp, d_w, N, C, OC, 0);
    std::vector<float> got = cuda_download_float(d_out, ref.size());
    ok &= cuda_check_close((std::string(tag) + ".forward_bf16").c_str(), got.data(), ref.data(), ref.size(), TOL_BF16);

    matmul_forward_fp32(d_out32, NULL, d_inp, d_w, N, C, OC, 0);
    got = cuda_download(d_out32, ref.size());
    ok &= cuda_check_close((std::string(tag) + ".forward_fp32").c_str(), got.data(), ref.data(), ref.size(), TOL_FP32);

    std::vector<float> ref_res(ref.size());
    for (size_t i = 0; i < ref.size(); i++) ref_res[i] = resid[i] + ref[i];
    matmul_forward_fp32(d_out32, d_resid, d_inp, d_w, N, C, OC, 0);
    got = cuda_download(d_out32, ref.size());
    ok &= cuda_check_close((std::string(tag) + ".forward_residual").c_str(), got.data(), ref_res.data(), ref.size(), TOL_FP32);

    std::vector<float> ref_dinp((size_t)N * C, 0.0f), ref_dw = dw0;
    matmul_backward_cpu(ref_dinp.data(), ref_dw.data(), dout.data(), inp.data(), w.data(), N, C, OC);
    matmul_backward(d_dinp, d_dw, d_dout, d_inp, d_w, N, C, OC, 0);
    got = cuda_download_float(d_dinp, ref_dinp.size());
    ok &= cuda_check_close((std::string(tag) + ".backward_dinp").c_str(), got.data(), ref_dinp.data(), ref_dinp.size(), TOL_BF16);
    // compare the accumulated part: (dw - dw0) against the reference's (dw - dw0)
    got = cuda_download(d_dw, ref_dw.size());
    for (size_t i = 0; i < got.size(); i++) { got[i] -= dw0[i]; ref_dw[i] -= dw0[i]; }
    ok &= cuda_check_close((std::string(tag) + ".backward_dweight_accum").c_str(), got.data(), ref_dw.data(), ref_dw.size(), TOL_FP32);

    void* bufs[] = {d_inp, d_w, d_dout, d_resid, d_dw, d_out, d_out32, d_dinp};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    return ok;
}

static void bench(const char* preset, const Proj& p, int N) {
    bf16* inp = cuda_malloc<bf16>((size_t)N * p.C);
    bf16* w = cuda_malloc<bf16>((size_t)p.OC * p.C);
    bf16* out = cuda_malloc<bf16>((size_t)N * p.OC);
    bf16* dinp = cuda_malloc<bf16>((size_t)N * p.C);
    float* dw = cuda_malloc<float>((size_t)p.OC * p.C);
    cuda_fill_uniform(inp, (size_t)N * p.C, 1, 1.0f);
    cuda_fill_uniform(w, (size_t)p.OC * p.C, 2, 0.05f);
    cuda_fill_uniform(out, (size_t)N * p.OC, 3, 0.1f);
    CUDA_CHECK(cudaMemset(dw, 0, (size_t)p.OC * p.C * sizeof(float)));
    double flops = 2.0 * N * p.C * p.OC;
    char what[96];
    float ms = cuda_bench_ms([&] { matmul_forward(out, inp, w, N, p.C, p.OC, 0); }, 3, 20);
    snprintf(what, sizeof(what), "%s %s forward N=%d (%d->%d)", preset, p.name, N, p.C, p.OC);
    cuda_print_bench(what, ms, 0, flops);
    ms = cuda_bench_ms([&] { matmul_backward(dinp, dw, out, inp, w, N, p.C, p.OC, 0); }, 3, 20);
    snprintf(what, sizeof(what), "%s %s backward (dinp + dweight)", preset, p.name);
    cuda_print_bench(what, ms, 0, 2 * flops);
    void* bufs[] = {inp, w, out, dinp, dw};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
}

int main(int argc, char** argv) {
    bool validate_only = argc > 1 && strcmp(argv[1], "--validate-only") == 0;
    if (!cuda_device_present()) { printf("SKIP dev_matmul: no CUDA device\n"); return 77; }
    matmul_init();
    const char* presets[] = {"tiny", "d12", "llama600m"};
    bool ok = true;
    uint64_t seed = 100;
    // odd small shape first: N not a multiple of the tile sizes
    ok &= validate("dev_matmul.odd_N72_C40_OC24", 72, 40, 24, seed++);
    for (const char* name : presets) {
        LlamaConfig c = {};
        llama_preset(name, &c);
        for (const Proj& p : projections(&c)) {
            std::string tag = std::string("dev_matmul.") + name + "." + p.name;
            ok &= validate(tag.c_str(), 256, p.C, p.OC, seed += 10);
        }
    }
    if (!validate_only) {
        for (const char* name : presets) {
            LlamaConfig c = {};
            llama_preset(name, &c);
            for (const Proj& p : projections(&c)) bench(name, p, 4 * c.T);
        }
    }
    matmul_free();
    return ok ? 0 : 1;
}
