// dev/cuda/swiglu.cu — llmc/swiglu.cuh against swiglu_forward_cpu / swiglu_backward_cpu
// (llmc/swiglu.h), vector and scalar paths, then a benchmark.
// Tolerance: 8e-3 max |got - ref| / max |ref| for every output (bf16 inputs rounded on the host,
// fp32 math, one bf16 rounding of each output). Inputs span [-8, 8] so the sigmoid saturates on
// both sides. The CPU backward accumulates into zeros here; the GPU writes.
// Shapes (N = B*T rows, FF): every preset at its real shape, B=4 and the preset's T: tiny
// 1024 x 384, d12 4096 x 2048, llama300m 16384 x 2816 (9.2e7 fc1 outputs), llama600m
// 8192 x 4096, and an odd 33 x 37 (scalar path). Full tensors: the reference is two expf per
// element (about 0.6 s on one core at llama300m).
// Usage: build/dev_swiglu [--validate-only]   exit 0 ok, 1 failed, 2 bad usage, 77 no GPU (SKIP).
#include <cstring>
#include <string>
#include "../../llmc/llama.h"
#include "../../llmc/swiglu.h"
#include "../../llmc/swiglu.cuh"
#include "dev_flags.h"

static const double TOL_BF16 = 8e-3;

static bool validate(const char* tag, int N, int FF, uint64_t seed) {
    std::string t = tag;
    std::vector<float> inp = cuda_host_uniform((size_t)N * 2 * FF, seed, 8.0f);
    std::vector<float> dout = cuda_host_uniform((size_t)N * FF, seed + 1, 1.0f);
    cuda_round_to_bf16(&inp);
    cuda_round_to_bf16(&dout);
    bf16* d_inp = cuda_upload_bf16(inp.data(), inp.size());
    bf16* d_dout = cuda_upload_bf16(dout.data(), dout.size());
    bf16* d_out = cuda_malloc<bf16>((size_t)N * FF);
    bf16* d_dinp = cuda_malloc<bf16>((size_t)N * 2 * FF);
    std::vector<float> ref((size_t)N * FF), ref_d((size_t)N * 2 * FF, 0.0f);
    swiglu_forward_cpu(ref.data(), inp.data(), N, FF);
    swiglu_backward_cpu(ref_d.data(), dout.data(), inp.data(), N, FF);
    swiglu_forward(d_out, d_inp, N, FF, 0);
    swiglu_backward(d_dinp, d_dout, d_inp, N, FF, 0);
    std::vector<float> got = cuda_download_float(d_out, ref.size());
    bool ok = cuda_check_close((t + ".forward").c_str(), got.data(), ref.data(), ref.size(), TOL_BF16);
    got = cuda_download_float(d_dinp, ref_d.size());
    ok &= cuda_check_close((t + ".backward").c_str(), got.data(), ref_d.data(), ref_d.size(), TOL_BF16);
    void* bufs[] = {d_inp, d_dout, d_out, d_dinp};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    return ok;
}

static void bench(const char* preset, int N, int FF) {
    bf16* inp = cuda_malloc<bf16>((size_t)N * 2 * FF);
    bf16* out = cuda_malloc<bf16>((size_t)N * FF);
    bf16* dinp = cuda_malloc<bf16>((size_t)N * 2 * FF);
    cuda_fill_uniform(inp, (size_t)N * 2 * FF, 1, 4.0f);
    cuda_fill_uniform(out, (size_t)N * FF, 2, 1.0f);
    char what[96];
    float ms = cuda_bench_ms([&] { swiglu_forward(out, inp, N, FF, 0); }, 3, 20);
    snprintf(what, sizeof(what), "%s swiglu_forward N=%d FF=%d", preset, N, FF);
    cuda_print_bench(what, ms, (double)N * FF * 2 * 3, 0);
    ms = cuda_bench_ms([&] { swiglu_backward(dinp, out, inp, N, FF, 0); }, 3, 20);
    snprintf(what, sizeof(what), "%s swiglu_backward", preset);
    cuda_print_bench(what, ms, (double)N * FF * 2 * 5, 0);
    void* bufs[] = {inp, out, dinp};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
}

int main(int argc, char** argv) {
    DevFlags flags;
    if (!dev_flags_parse(argc, argv, "dev_swiglu", 0, &flags)) return 2;
    const bool validate_only = flags.validate_only;
    if (!cuda_device_present()) { printf("SKIP dev_swiglu: no CUDA device\n"); return 77; }
    const char* presets[] = {"tiny", "d12", "llama300m", "llama600m"};
    bool ok = validate("dev_swiglu.odd_FF37_scalar", 33, 37, 9);
    for (const char* name : presets) {
        LlamaConfig c = {};
        llama_preset(name, &c);
        ok &= validate((std::string("dev_swiglu.") + name).c_str(), 4 * c.T, c.FF, 40);
    }
    if (!validate_only) {
        for (const char* name : presets) {
            LlamaConfig c = {};
            llama_preset(name, &c);
            bench(name, 4 * c.T, c.FF);
        }
    }
    return ok ? 0 : 1;
}
