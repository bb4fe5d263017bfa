// dev/cuda/rmsnorm.cu — llmc/rmsnorm.cuh against rmsnorm_forward_cpu / rmsnorm_backward_cpu
// (llmc/rmsnorm.h), then a benchmark.
// Tolerances (max |got - ref| / max |ref|):
//   out (bf16)                       8e-3  (one bf16 rounding of each element)
//   rstd, dinp, dweight (fp32)       1e-4  (fp32 row / column sums where the CPU sums in double)
//   dinp bf16 copy                   8e-3
// dout is rounded to bf16 on the host (the GPU reads bf16); dinp and dweight start nonzero to
// check the += contract, and are compared as accumulated parts (after minus before).
// Shapes (N = B*T rows of C): every preset at its real shape, B=4 and the preset's T: tiny
// 1024 x 128, d12 4096 x 768, llama300m 16384 x 1024, llama600m 8192 x 1536, plus an odd
// 77 x 100 and 300 x 40 (three dweight slabs, the last one short). Full tensors: the reference is
// two passes over N*C (about 0.2 s on one core at llama300m). The slab version of dweight is
// not yet measured on a GPU (it sums runs of 16 rows where version 1 summed N/32).
// Version 1 of the dweight kernel (one block per 32 columns, 32 rows of threads walking all N
// rows: 32 blocks at C = 1024) is kept here as the reference that --compare times llmc/'s
// against; every validation also checks it against the CPU.
// Usage: build/dev_rmsnorm [--validate-only] [--small] [--compare]
//   --small: validations at the odd shapes and tiny only (what dev/emu runs);
//   --compare: the dweight kernel, version 1 against llmc/'s, at llama300m's and llama600m's real
//   shapes (COMPARE lines for dev/bench_small_kernels.sh; the two results checked against each
//   other to the fp32 bound, no CPU reference);
//   exit 0 ok, 1 failed, 2 bad usage, 77 no GPU (SKIP).
#include <cstring>
#include <string>
#include "../../llmc/llama.h"
#include "../../llmc/rmsnorm.h"
#include "../../llmc/rmsnorm.cuh"

static const double TOL_BF16 = 8e-3;
static const double TOL_FP32 = 1e-4;

// Version 1 of rmsnorm_backward_dweight_kernel: block (32 columns, 32 rows of threads), one block
// per 32 columns, each thread summing every 32nd row of its column, then a shared-memory tree.
static const int DW_V1_ROWS = 32;
// dweight (C) +=, dout (N, C), inp (N, C), rstd (N)
__global__ void rmsnorm_backward_dweight_v1_kernel(float* dweight, const bf16* dout, const float* inp,
                                                   const float* rstd, int N, int C) {
    __shared__ float part[DW_V1_ROWS][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (c < C) {
        for (int n = threadIdx.y; n < N; n += DW_V1_ROWS) {
            size_t i = (size_t)n * C + c;
            acc += __bfloat162float(dout[i]) * (inp[i] * rstd[n]);
        }
    }
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    for (int s = DW_V1_ROWS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.y < s) part[threadIdx.y][threadIdx.x] += part[threadIdx.y + s][threadIdx.x];
        __syncthreads();
    }
    if (threadIdx.y == 0 && c < C) dweight[c] += part[0][threadIdx.x];
}

static void rmsnorm_backward_dweight_v1(float* dweight, const bf16* dout, const float* inp, const float* rstd, int N, int C) {
    rmsnorm_backward_dweight_v1_kernel<<<cuda_ceil_div(C, 32), dim3(32, DW_V1_ROWS)>>>(dweight, dout, inp, rstd, N, C);
    KERNEL_CHECK();
}

static bool validate(const char* tag, int N, int C, uint64_t seed) {
    std::string t = tag;
    std::vector<float> inp = cuda_host_uniform((size_t)N * C, seed, 2.0f);
    std::vector<float> w = cuda_host_uniform(C, seed + 1, 0.5f);
    for (float& x : w) x += 1.0f;
    std::vector<float> dout = cuda_host_uniform((size_t)N * C, seed + 2, 1.0f);
    std::vector<float> dinp0 = cuda_host_uniform((size_t)N * C, seed + 3, 0.5f);
    std::vector<float> dw0 = cuda_host_uniform(C, seed + 4, 0.5f);
    cuda_round_to_bf16(&dout);
    float* d_inp = cuda_upload(inp.data(), inp.size());
    float* d_w = cuda_upload(w.data(), w.size());
    bf16* d_dout = cuda_upload_bf16(dout.data(), dout.size());
    float* d_dinp = cuda_upload(dinp0.data(), dinp0.size());
    float* d_dw = cuda_upload(dw0.data(), dw0.size());
    bf16* d_out = cuda_malloc<bf16>((size_t)N * C);
    bf16* d_dinp16 = cuda_malloc<bf16>((size_t)N * C);
    float* d_rstd = cuda_malloc<float>(N);
    float* d_scratch = cuda_malloc<float>(rmsnorm_dweight_scratch_floats(N, C));

    std::vector<float> ref((size_t)N * C), ref_rstd(N);
    rmsnorm_forward_cpu(ref.data(), ref_rstd.data(), inp.data(), w.data(), N, C);
    rmsnorm_forward(d_out, d_rstd, d_inp, d_w, N, C, 0);
    std::vector<float> got = cuda_download_float(d_out, ref.size());
    bool ok = cuda_check_close((t + ".forward_out").c_str(), got.data(), ref.data(), ref.size(), TOL_BF16);
    got = cuda_download(d_rstd, N);
    ok &= cuda_check_close((t + ".forward_rstd").c_str(), got.data(), ref_rstd.data(), N, TOL_FP32);

    // backward from the reference rstd on both sides, so only the backward is measured
    CUDA_CHECK(cudaMemcpy(d_rstd, ref_rstd.data(), N * sizeof(float), cudaMemcpyHostToDevice));
    std::vector<float> ref_dinp = dinp0, ref_dw = dw0;
    rmsnorm_backward_cpu(ref_dinp.data(), ref_dw.data(), dout.data(), inp.data(), w.data(), ref_rstd.data(), N, C);
    rmsnorm_backward(d_dinp, d_dinp16, d_dw, d_scratch, d_dout, d_inp, d_w, d_rstd, N, C, 0);
    std::vector<float> got_dinp = cuda_download(d_dinp, ref_dinp.size());
    std::vector<float> got16 = cuda_download_float(d_dinp16, ref_dinp.size());
    ok &= cuda_check_close((t + ".backward_dinp_bf16_copy").c_str(), got16.data(), ref_dinp.data(), ref_dinp.size(), TOL_BF16);
    for (size_t i = 0; i < got_dinp.size(); i++) { got_dinp[i] -= dinp0[i]; ref_dinp[i] -= dinp0[i]; }
    ok &= cuda_check_close((t + ".backward_dinp_accum").c_str(), got_dinp.data(), ref_dinp.data(), ref_dinp.size(), TOL_FP32);
    got = cuda_download(d_dw, C);
    for (int i = 0; i < C; i++) { got[i] -= dw0[i]; ref_dw[i] -= dw0[i]; }
    ok &= cuda_check_close((t + ".backward_dweight_accum").c_str(), got.data(), ref_dw.data(), C, TOL_FP32);

    // version 1 of the dweight kernel, on the same inputs and the same starting dweight
    CUDA_CHECK(cudaMemcpy(d_dw, dw0.data(), C * sizeof(float), cudaMemcpyHostToDevice));
    rmsnorm_backward_dweight_v1(d_dw, d_dout, d_inp, d_rstd, N, C);
    got = cuda_download(d_dw, C);
    for (int i = 0; i < C; i++) got[i] -= dw0[i];
    ok &= cuda_check_close((t + ".backward_dweight_v1_accum").c_str(), got.data(), ref_dw.data(), C, TOL_FP32);

    void* bufs[] = {d_inp, d_w, d_dout, d_dinp, d_dw, d_out, d_dinp16, d_rstd, d_scratch};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    return ok;
}

static void bench(const char* preset, int N, int C) {
    float* inp = cuda_malloc<float>((size_t)N * C);
    float* w = cuda_malloc<float>(C);
    bf16* out = cuda_malloc<bf16>((size_t)N * C);
    float* rstd = cuda_malloc<float>(N);
    float* dinp = cuda_malloc<float>((size_t)N * C);
    bf16* dinp16 = cuda_malloc<bf16>((size_t)N * C);
    float* dw = cuda_malloc<float>(C);
    float* scratch = cuda_malloc<float>(rmsnorm_dweight_scratch_floats(N, C));
    cuda_fill_uniform(inp, (size_t)N * C, 1, 1.0f);
    cuda_fill_uniform(w, C, 2, 1.0f);
    cuda_fill_uniform(dinp, (size_t)N * C, 3, 1.0f);
    cuda_fill_uniform(dw, C, 4, 1.0f);
    char what[96];
    float ms = cuda_bench_ms([&] { rmsnorm_forward(out, rstd, inp, w, N, C, 0); }, 3, 20);
    snprintf(what, sizeof(what), "%s rmsnorm_forward N=%d C=%d", preset, N, C);
    cuda_print_bench(what, ms, (double)N * C * (4 + 2), 0);
    ms = cuda_bench_ms([&] { rmsnorm_backward(dinp, dinp16, dw, scratch, out, inp, w, rstd, N, C, 0); }, 3, 20);
    snprintf(what, sizeof(what), "%s rmsnorm_backward (+ bf16 copy)", preset);
    // dinp row pass reads dout, inp, dinp and writes dinp, dinp16; the dweight pass reads dout, inp
    cuda_print_bench(what, ms, (double)N * C * (2 + 4 + 4 + 4 + 2 + 2 + 4), 0);
    void* bufs[] = {inp, w, out, rstd, dinp, dinp16, dw, scratch};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
}

// The dweight kernel alone, version 1 against llmc/'s, at the shape (N, C): the two results
// within the fp32 bound of each other (both fp32 column sums, in other orders), then the times.
static bool compare(const char* preset, int N, int C) {
    bf16* dout = cuda_malloc<bf16>((size_t)N * C);
    float* inp = cuda_malloc<float>((size_t)N * C);
    float* rstd = cuda_malloc<float>(N);
    float* dw1 = cuda_malloc<float>(C);
    float* dw2 = cuda_malloc<float>(C);
    float* scratch = cuda_malloc<float>(rmsnorm_dweight_scratch_floats(N, C));
    cuda_fill_uniform(dout, (size_t)N * C, 1, 1.0f);
    cuda_fill_uniform(inp, (size_t)N * C, 2, 2.0f);
    cuda_fill_uniform(rstd, N, 3, 1.0f);
    CUDA_CHECK(cudaMemset(dw1, 0, C * sizeof(float)));
    CUDA_CHECK(cudaMemset(dw2, 0, C * sizeof(float)));
    rmsnorm_backward_dweight_v1(dw1, dout, inp, rstd, N, C);
    rmsnorm_backward_dweight(dw2, scratch, dout, inp, rstd, N, C, 0);
    std::vector<float> g1 = cuda_download(dw1, C), g2 = cuda_download(dw2, C);
    char shape[96];
    snprintf(shape, sizeof(shape), "%s N=%d C=%d", preset, N, C);
    bool ok = cuda_check_close((std::string("dev_rmsnorm.compare.") + preset + ".dweight_v2_vs_v1").c_str(), g2.data(), g1.data(), C, TOL_FP32);
    float ms1 = cuda_bench_ms([&] { rmsnorm_backward_dweight_v1(dw1, dout, inp, rstd, N, C); }, 3, 20);
    float ms2 = cuda_bench_ms([&] { rmsnorm_backward_dweight(dw2, scratch, dout, inp, rstd, N, C, 0); }, 3, 20);
    char note[128];
    snprintf(note, sizeof(note), "v1 %d blocks; v2 %d blocks of %d-row slabs + an ordered sum", cuda_ceil_div(C, 32),
             cuda_ceil_div(C, 32) * cuda_ceil_div(N, RMSNORM_DW_SLAB), RMSNORM_DW_SLAB);
    cuda_print_compare("rmsnorm_backward_dweight", shape, ms1, ms2, note);
    void* bufs[] = {dout, inp, rstd, dw1, dw2, scratch};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    return ok;
}

int main(int argc, char** argv) {
    bool validate_only = false, small = false, compare_only = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--validate-only") == 0) validate_only = true;
        else if (strcmp(argv[i], "--small") == 0) small = validate_only = true;
        else if (strcmp(argv[i], "--compare") == 0) compare_only = true;
        else { fprintf(stderr, "usage: dev_rmsnorm [--validate-only] [--small] [--compare]\n"); return 2; }
    }
    if (!cuda_device_present()) { printf("SKIP dev_rmsnorm: no CUDA device\n"); return 77; }
    const char* presets[] = {"tiny", "d12", "llama300m", "llama600m"};
    if (compare_only) {
        bool ok = true;
        for (const char* name : {"llama300m", "llama600m"}) {
            LlamaConfig c = {};
            llama_preset(name, &c);
            ok &= compare(name, 4 * c.T, c.C);
        }
        return ok ? 0 : 1;
    }
    bool ok = validate("dev_rmsnorm.odd_N77_C100", 77, 100, 5);
    // N = 300: three slabs, the last one short
    ok &= validate("dev_rmsnorm.odd_N300_C40", 300, 40, 6);
    for (const char* name : presets) {
        if (small && strcmp(name, "tiny") != 0) continue;
        LlamaConfig c = {};
        llama_preset(name, &c);
        ok &= validate((std::string("dev_rmsnorm.") + name).c_str(), 4 * c.T, c.C, 50);
    }
    if (!validate_only) {
        for (const char* name : presets) {
            LlamaConfig c = {};
            llama_preset(name, &c);
            bench(name, 4 * c.T, c.C);
        }
    }
    return ok ? 0 : 1;
}
