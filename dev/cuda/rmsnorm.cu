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
// 77 x 100, 300 x 40 (ten dweight slabs, the last one short), 45 x 1600 (too wide for the
// one-pass backward) and 33 x 1152 (the forward's row in registers, 9 groups a lane). Full
// tensors: the reference is two passes over N*C (about 0.2 s on one core at llama300m). The backward runs both ways where the row fits (one pass, and the row kernel
// with the separate dweight kernel), each checked against the CPU and against the other: the
// same bits.
// The forward's row kernel (llmc/'s path for rows that do not fit its registers, and its only
// kernel before) is checked against the CPU wherever llmc/ keeps the row in registers instead.
// Version 1 of the backward (a block of 8 rows, one warp each; then a dweight kernel that reads
// dout and x again, 128-row slabs, each column's partials added by one thread) is kept here as the
// reference that --compare times llmc/'s against; every validation also checks it against the CPU.
// Usage: build/dev_rmsnorm [--validate-only] [--small] [--compare]
//   --small: validations at the odd shapes and tiny only (what dev/emu runs);
//   --compare: the backward, version 1 against llmc/'s, at llama300m's and llama600m's real
//   shapes (COMPARE lines for dev/bench_small_kernels.sh; dinp and its bf16 copy bitwise, dweight
//   to the fp32 bound, no CPU reference), then the forward, the row kernel against the row in
//   registers (rstd to 1e-6, out to the bf16 bound);
//   exit 0 ok, 1 failed, 2 bad usage, 77 no GPU (SKIP).
#include <cstring>
#include <string>
#include "../../llmc/llama.h"
#include "../../llmc/rmsnorm.h"
#include "../../llmc/rmsnorm.cuh"
#include "dev_flags.h"

static const double TOL_BF16 = 8e-3;
static const double TOL_FP32 = 1e-4;

// Version 1 of the backward: rmsnorm_backward_kernel one warp per row, 8 rows a block; then the
// dweight partials of 128-row slabs (block (32 columns, 8 rows of threads)) from dout and x read
// again, and one thread per column adding its partials in slab order.
static const int V1_ROWS = 8, V1_SLAB = 128;
__global__ void rmsnorm_backward_v1_kernel(float* dinp, bf16* dinp_bf16, const bf16* dout, const float* inp,
                                           const float* weight, const float* rstd, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;
    size_t base = (size_t)row * C;
    float r = rstd[row];
    float dot = 0.0f;
    for (int c = lane; c < C; c += 32) dot += (weight[c] * __bfloat162float(dout[base + c])) * (inp[base + c] * r);
    dot = cuda_warp_sum(dot);
    float m = dot / (float)C;
    for (int c = lane; c < C; c += 32) {
        float g = weight[c] * __bfloat162float(dout[base + c]);
        float v = dinp[base + c] + r * (g - (inp[base + c] * r) * m);
        dinp[base + c] = v;
        if (dinp_bf16 != NULL) dinp_bf16[base + c] = __float2bfloat16(v);
    }
}

__global__ void rmsnorm_backward_dweight_v1_kernel(float* partials, const bf16* dout, const float* inp,
                                                   const float* rstd, int N, int C) {
    __shared__ float part[V1_ROWS][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    int n0 = blockIdx.y * V1_SLAB, n1 = n0 + V1_SLAB < N ? n0 + V1_SLAB : N;
    float acc = 0.0f;
    if (c < C) {
        for (int n = n0 + threadIdx.y; n < n1; n += V1_ROWS) {
            size_t i = (size_t)n * C + c;
            acc += __bfloat162float(dout[i]) * (inp[i] * rstd[n]);
        }
    }
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    for (int s = V1_ROWS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.y < s) part[threadIdx.y][threadIdx.x] += part[threadIdx.y + s][threadIdx.x];
        __syncthreads();
    }
    if (threadIdx.y == 0 && c < C) partials[(size_t)blockIdx.y * C + c] = part[0][threadIdx.x];
}

__global__ void rmsnorm_backward_dweight_finish_v1_kernel(float* dweight, const float* partials, int slabs, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (int s = 0; s < slabs; s++) acc += partials[(size_t)s * C + c];
    dweight[c] += acc;
}

// scratch: ceil(N / 128) x C floats (rmsnorm_dweight_scratch_floats(N, C) is more)
static void rmsnorm_backward_v1(float* dinp, bf16* dinp_bf16, float* dweight, float* scratch, const bf16* dout,
                               const float* inp, const float* weight, const float* rstd, int N, int C) {
    rmsnorm_backward_v1_kernel<<<cuda_ceil_div(N, V1_ROWS), V1_ROWS * 32>>>(dinp, dinp_bf16, dout, inp, weight, rstd, N, C);
    KERNEL_CHECK();
    int slabs = cuda_ceil_div(N, V1_SLAB);
    rmsnorm_backward_dweight_v1_kernel<<<dim3(cuda_ceil_div(C, 32), slabs), dim3(32, V1_ROWS)>>>(scratch, dout, inp, rstd, N, C);
    KERNEL_CHECK();
    rmsnorm_backward_dweight_finish_v1_kernel<<<cuda_ceil_div(C, 256), 256>>>(dweight, scratch, slabs, C);
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
    // the row kernel (version 1; llmc/'s path for other rows) where llmc/ keeps the row in registers
    if (C % 128 == 0 && C <= RMSNORM_FWD_MAX_C) {
        rmsnorm_forward_kernel<<<cuda_ceil_div(N, RMSNORM_WARPS), RMSNORM_WARPS * 32>>>(d_out, d_rstd, d_inp, d_w, N, C);
        KERNEL_CHECK();
        got = cuda_download_float(d_out, ref.size());
        ok &= cuda_check_close((t + ".forward_v1_out").c_str(), got.data(), ref.data(), ref.size(), TOL_BF16);
        got = cuda_download(d_rstd, N);
        ok &= cuda_check_close((t + ".forward_v1_rstd").c_str(), got.data(), ref_rstd.data(), N, TOL_FP32);
    }

    // backward from the reference rstd on both sides, so only the backward is measured; each way
    // (fused: 1 one pass, 0 the row kernel and the dweight kernel; 2 version 1) from the same start
    CUDA_CHECK(cudaMemcpy(d_rstd, ref_rstd.data(), N * sizeof(float), cudaMemcpyHostToDevice));
    std::vector<float> ref_dinp = dinp0, ref_dw = dw0;
    rmsnorm_backward_cpu(ref_dinp.data(), ref_dw.data(), dout.data(), inp.data(), w.data(), ref_rstd.data(), N, C);
    std::vector<float> ref_part = ref_dinp, ref_dw_part = ref_dw;
    for (size_t i = 0; i < ref_part.size(); i++) ref_part[i] -= dinp0[i];
    for (int i = 0; i < C; i++) ref_dw_part[i] -= dw0[i];
    std::vector<float> first_dinp, first16, first_dw;
    for (int way : {1, 0, 2}) {
        if (way == 1 && C > RMSNORM_FUSED_MAX_C) continue;
        std::string w_t = t + (way == 1 ? ".backward_one_pass" : way == 0 ? ".backward_two_kernels" : ".backward_v1");
        CUDA_CHECK(cudaMemcpy(d_dinp, dinp0.data(), dinp0.size() * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(d_dw, dw0.data(), C * sizeof(float), cudaMemcpyHostToDevice));
        if (way == 2) rmsnorm_backward_v1(d_dinp, d_dinp16, d_dw, d_scratch, d_dout, d_inp, d_w, d_rstd, N, C);
        else rmsnorm_backward(d_dinp, d_dinp16, d_dw, d_scratch, d_dout, d_inp, d_w, d_rstd, N, C, 0, way);
        std::vector<float> got_dinp = cuda_download(d_dinp, ref_dinp.size());
        std::vector<float> got16 = cuda_download_float(d_dinp16, ref_dinp.size());
        std::vector<float> got_dw = cuda_download(d_dw, C);
        ok &= cuda_check_close((w_t + "_dinp_bf16_copy").c_str(), got16.data(), ref_dinp.data(), ref_dinp.size(), TOL_BF16);
        std::vector<float> part = got_dinp, dw_part = got_dw;
        for (size_t i = 0; i < part.size(); i++) part[i] -= dinp0[i];
        for (int i = 0; i < C; i++) dw_part[i] -= dw0[i];
        ok &= cuda_check_close((w_t + "_dinp_accum").c_str(), part.data(), ref_part.data(), part.size(), TOL_FP32);
        ok &= cuda_check_close((w_t + "_dweight_accum").c_str(), dw_part.data(), ref_dw_part.data(), C, TOL_FP32);
        if (first_dinp.empty()) {
            first_dinp = got_dinp; first16 = got16; first_dw = got_dw;
            continue;
        }
        // llmc/'s two ways: the same bits; version 1: the same dinp, dweight summed in another order
        bool same = memcmp(got_dinp.data(), first_dinp.data(), got_dinp.size() * sizeof(float)) == 0 &&
                    memcmp(got16.data(), first16.data(), got16.size() * sizeof(float)) == 0;
        if (way != 2) same = same && memcmp(got_dw.data(), first_dw.data(), C * sizeof(float)) == 0;
        std::string what = w_t + (way == 2 ? "_dinp_bitwise_llmc" : "_bitwise_one_pass");
        printf("%s %s\n", same ? "PASS" : "FAIL", what.c_str());
        ok &= same;
    }

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
    // reads dout, inp, dinp and writes dinp, dinp16 (one pass; wider rows read dout and inp again)
    cuda_print_bench(what, ms, (double)N * C * (2 + 4 + 4 + 4 + 2 + (C <= RMSNORM_FUSED_MAX_C ? 0 : 2 + 4)), 0);
    void* bufs[] = {inp, w, out, rstd, dinp, dinp16, dw, scratch};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
}

// The backward, version 1 against llmc/'s, at the shape (N, C): dinp and its bf16 copy bitwise
// equal (the same arithmetic per row), dweight within the fp32 bound (column sums in other
// orders), then the times.
// The forward, the row kernel (version 1) against the row held in registers, at (N, C): rstd
// within 1e-6 (the squares summed in other orders), out within one bf16 rounding, then the times.
static bool compare_forward(const char* preset, int N, int C) {
    float* inp = cuda_malloc<float>((size_t)N * C);
    float* w = cuda_malloc<float>(C);
    bf16 *o1 = cuda_malloc<bf16>((size_t)N * C), *o2 = cuda_malloc<bf16>((size_t)N * C);
    float *r1 = cuda_malloc<float>(N), *r2 = cuda_malloc<float>(N);
    cuda_fill_uniform(inp, (size_t)N * C, 6, 2.0f);
    cuda_fill_uniform(w, C, 7, 1.0f);
    auto v1 = [&] { rmsnorm_forward_kernel<<<cuda_ceil_div(N, RMSNORM_WARPS), RMSNORM_WARPS * 32>>>(o1, r1, inp, w, N, C); };
    v1();
    KERNEL_CHECK();
    rmsnorm_forward(o2, r2, inp, w, N, C, 0);
    std::string t = std::string("dev_rmsnorm.compare.") + preset;
    std::vector<float> a1 = cuda_download(r1, N), a2 = cuda_download(r2, N);
    bool ok = cuda_check_close((t + ".forward_rstd_v2_vs_v1").c_str(), a2.data(), a1.data(), N, 1e-6);
    a1 = cuda_download_float(o1, (size_t)N * C);
    a2 = cuda_download_float(o2, (size_t)N * C);
    ok &= cuda_check_close((t + ".forward_out_v2_vs_v1").c_str(), a2.data(), a1.data(), a1.size(), TOL_BF16);
    float ms1 = cuda_bench_ms(v1, 3, 20);
    float ms2 = cuda_bench_ms([&] { rmsnorm_forward(o2, r2, inp, w, N, C, 0); }, 3, 20);
    char shape[96];
    snprintf(shape, sizeof(shape), "%s N=%d C=%d", preset, N, C);
    cuda_print_compare("rmsnorm_forward", shape, ms1, ms2, "v1 the row read twice, 4 bytes a lane a load; v2 the row in registers, 16-byte loads");
    void* bufs[] = {inp, w, o1, o2, r1, r2};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    return ok;
}

static bool compare(const char* preset, int N, int C) {
    bf16* dout = cuda_malloc<bf16>((size_t)N * C);
    float* inp = cuda_malloc<float>((size_t)N * C);
    float* w = cuda_malloc<float>(C);
    float* rstd = cuda_malloc<float>(N);
    float* dinp1 = cuda_malloc<float>((size_t)N * C);
    float* dinp2 = cuda_malloc<float>((size_t)N * C);
    bf16* d16_1 = cuda_malloc<bf16>((size_t)N * C);
    bf16* d16_2 = cuda_malloc<bf16>((size_t)N * C);
    float* dw1 = cuda_malloc<float>(C);
    float* dw2 = cuda_malloc<float>(C);
    float* scratch = cuda_malloc<float>(rmsnorm_dweight_scratch_floats(N, C));
    cuda_fill_uniform(dout, (size_t)N * C, 1, 1.0f);
    cuda_fill_uniform(inp, (size_t)N * C, 2, 2.0f);
    cuda_fill_uniform(w, C, 3, 1.0f);
    cuda_fill_uniform(rstd, N, 4, 1.0f);
    cuda_fill_uniform(dinp1, (size_t)N * C, 5, 1.0f);
    CUDA_CHECK(cudaMemcpy(dinp2, dinp1, (size_t)N * C * sizeof(float), cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaMemset(dw1, 0, C * sizeof(float)));
    CUDA_CHECK(cudaMemset(dw2, 0, C * sizeof(float)));
    rmsnorm_backward_v1(dinp1, d16_1, dw1, scratch, dout, inp, w, rstd, N, C);
    rmsnorm_backward(dinp2, d16_2, dw2, scratch, dout, inp, w, rstd, N, C, 0);
    std::vector<float> g1 = cuda_download(dw1, C), g2 = cuda_download(dw2, C);
    std::string t = std::string("dev_rmsnorm.compare.") + preset;
    bool ok = cuda_check_close((t + ".dweight_v2_vs_v1").c_str(), g2.data(), g1.data(), C, TOL_FP32);
    std::vector<float> a1 = cuda_download(dinp1, (size_t)N * C), a2 = cuda_download(dinp2, (size_t)N * C);
    std::vector<float> b1 = cuda_download_float(d16_1, (size_t)N * C), b2 = cuda_download_float(d16_2, (size_t)N * C);
    bool same = memcmp(a1.data(), a2.data(), a1.size() * sizeof(float)) == 0 && memcmp(b1.data(), b2.data(), b1.size() * sizeof(float)) == 0;
    printf("%s %s.dinp_v2_vs_v1_bitwise\n", same ? "PASS" : "FAIL", t.c_str());
    ok &= same;
    float ms1 = cuda_bench_ms([&] { rmsnorm_backward_v1(dinp1, d16_1, dw1, scratch, dout, inp, w, rstd, N, C); }, 3, 20);
    float ms2 = cuda_bench_ms([&] { rmsnorm_backward(dinp2, d16_2, dw2, scratch, dout, inp, w, rstd, N, C, 0); }, 3, 20);
    char shape[96], note[160];
    snprintf(shape, sizeof(shape), "%s N=%d C=%d", preset, N, C);
    snprintf(note, sizeof(note), "v1 rows, then dweight reading dout and x again; v2 %s", C <= RMSNORM_FUSED_MAX_C ?
             "one pass, dweight partials of 32-row slabs in shared memory" : "rows, then dweight (too wide for one pass)");
    cuda_print_compare("rmsnorm_backward", shape, ms1, ms2, note);
    void* bufs[] = {dout, inp, w, rstd, dinp1, dinp2, d16_1, d16_2, dw1, dw2, scratch};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    return ok;
}

int main(int argc, char** argv) {
    DevFlags flags;
    if (!dev_flags_parse(argc, argv, "dev_rmsnorm", DEV_FLAG_SMALL | DEV_FLAG_COMPARE, &flags)) return 2;
    const bool validate_only = flags.validate_only, small = flags.small, compare_only = flags.compare;
    if (!cuda_device_present()) { printf("SKIP dev_rmsnorm: no CUDA device\n"); return 77; }
    const char* presets[] = {"tiny", "d12", "llama300m", "llama600m"};
    if (compare_only) {
        bool ok = true;
        for (const char* name : {"llama300m", "llama600m"}) {
            LlamaConfig c = {};
            llama_preset(name, &c);
            ok &= compare(name, 4 * c.T, c.C);
            ok &= compare_forward(name, 4 * c.T, c.C);
        }
        return ok ? 0 : 1;
    }
    bool ok = validate("dev_rmsnorm.odd_N77_C100", 77, 100, 5);
    // N = 300: ten slabs, the last one short
    ok &= validate("dev_rmsnorm.odd_N300_C40", 300, 40, 6);
    // a row wider than the one-pass backward's shared memory
    ok &= validate("dev_rmsnorm.wide_N45_C1600", 45, 1600, 7);
    // a row the forward keeps in registers as 9 groups of 4 floats a lane (the llama shapes take 8 and 12)
    ok &= validate("dev_rmsnorm.regs_N33_C1152", 33, 1152, 8);
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
