// dev/cuda/matmul.cu — llmc/matmul.cuh (cuBLASLt bf16 GEMMs, fp32 accumulation) against
// matmul_forward_cpu / matmul_backward_cpu (llmc/matmul.h), then a benchmark of every projection
// of the presets.
// Validation: random inputs rounded to bf16 on the host, so the fp32 reference multiplies exactly
// the numbers the GPU reads; what is left is accumulation order and the output rounding.
// Tolerances (max |got - ref| / max |ref|):
//   bf16 outputs (out, dinp)            8e-3   (one bf16 rounding: <= 2^-9 of each element)
//   fp32 outputs (logits, residual add,
//                 dweight accumulation) 1e-4   (fp32 sums in another order, K up to 16384)
// The real shapes below keep these bounds (K reaches N = 16384 for dweight); they are not yet
// measured on a GPU there.
// Shapes (N tokens, C -> OC of each projection qkv, proj, fc1, fc2, lm_head):
//   an odd N=72, C=40, OC=24 (N not a multiple of the tile sizes);
//   every projection of tiny, d12 and llama600m at N = 256;
//   every projection of d12 at B=4, T=1024 (N = 4096), llama300m at B=4, T=4096 (N = 16384) and
//   llama600m at B=4, T=2048 (N = 8192): the shapes the trainer runs (cuBLASLt picks its
//   algorithm per shape, N included). llama300m's lm_head output is 16384 x 50304 = 8.2e8
//   elements (3.3 GB in fp32), past 2^31 bytes, where a 32-bit byte offset would wrap.
// Cost: the real shapes need 13 TFLOP of fp32 reference GEMMs (three per projection). The GPU
// build runs matmul.h's cblas_sgemm on cuBLAS in plain fp32 (no TF32), a reference independent
// of cuBLASLt's bf16 path and well under a second there (OpenBLAS on 16 cores: ~10 s, estimated).
// What remains is moving and scanning ~1.8e9 output elements per output kind on the host:
// fills, conversions and comparisons run on every core (cuda_common.cuh), and four (N, OC) host
// buffers of the largest shape (13 GB) serve every shape and output.
// The benchmark runs every projection at B=4 and the preset's T.
// Autotuning (llmc/matmul.cuh): the validations run with the default MATMUL_TUNE_EXACT; then at
// the odd shape and tiny's projections every GEMM kind (bf16 out, fp32 out with and without the
// residual, dinp, dweight accumulated) runs untuned (MATMUL_TUNE_OFF, the heuristic's first
// algorithm) and tuned with the FLOP floor at 0, and the outputs must be bitwise the same. Under
// dev/emu the heuristic offers 3 candidates of which the third gives other bits
// (dev/emu/emu_runtime.cpp): there every tuned shape must time the first two, set the third aside
// and keep the first (the emulated events tie).
// Usage: build/dev_matmul [--validate-only] [--small] [--compare]
//   --small: the odd shape and tiny's projections at N = 256 only (what dev/emu runs);
//   --compare: every projection's forward and backward of llama300m (N = 16384) and llama600m
//   (N = 8192), with the heuristic's first algorithm (version 1) against the autotuned choice
//   (MATMUL_TUNE_EXACT; the fastest of all candidates in the note): COMPARE lines for
//   dev/bench_small_kernels.sh, no CPU reference;
//   exit 0 ok, 1 a check failed, 2 bad usage, 77 no GPU (SKIP).
#include <cstring>
#include <memory>
#include <string>
#include "../../llmc/llama.h"
#include "../../llmc/matmul.h"
#include "../../llmc/matmul.cuh"
#include "dev_flags.h"

static const double TOL_BF16 = 8e-3;
static const double TOL_FP32 = 1e-4;

typedef struct { const char* name; int C, OC; } Proj;

static std::vector<Proj> projections(const LlamaConfig* c) {
    int HSNH = llama_head_size(c) * c->NH;
    return {{"qkv", c->C, llama_qkv_channels(c)}, {"proj", HSNH, c->C}, {"fc1", c->C, 2 * c->FF},
            {"fc2", c->FF, c->C}, {"lm_head", c->C, c->Vp}};
}

// The (N, OC) host buffers, shared by every shape: allocated once at the largest shape's size and
// first touched on every core. At llama300m's lm_head each is 3.3 GB; a fresh vector per shape
// and per GPU output would fault ~25 GB of pages on one core, more time than the copies.
typedef struct {
    std::unique_ptr<float[]> dout, resid, ref, got;  // (N, OC) each
} OutBuffers;

static std::unique_ptr<float[]> host_buffer(size_t n) {
    std::unique_ptr<float[]> p(new float[n]);
    float* x = p.get();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] = 0.0f;
    return p;
}

static bool validate(const char* tag, int N, int C, int OC, uint64_t seed, OutBuffers* ob) {
    std::string t = tag;
    size_t nin = (size_t)N * C, nw = (size_t)OC * C, nout = (size_t)N * OC;
    bool ok = true;
    std::vector<float> inp = cuda_host_uniform(nin, seed, 1.0f);
    std::vector<float> w = cuda_host_uniform(nw, seed + 1, 0.05f);
    float* dout = ob->dout.get();
    float* resid = ob->resid.get();
    float* ref = ob->ref.get();
    float* got = ob->got.get();
    cuda_host_uniform_to(dout, nout, seed + 2, 0.1f);
    cuda_host_uniform_to(resid, nout, seed + 3, 1.0f);
    std::vector<float> dw0 = cuda_host_uniform(nw, seed + 4, 0.5f);  // nonzero: checks +=
    cuda_round_to_bf16(&inp);
    cuda_round_to_bf16(&w);
    cuda_round_to_bf16(dout, nout);
    bf16* d_inp = cuda_upload_bf16(inp.data(), nin);
    bf16* d_w = cuda_upload_bf16(w.data(), nw);
    bf16* d_dout = cuda_upload_bf16(dout, nout);
    float* d_resid = cuda_upload(resid, nout);
    float* d_dw = cuda_upload(dw0.data(), nw);
    bf16* d_out = cuda_malloc<bf16>(nout);
    float* d_out32 = cuda_malloc<float>(nout);
    bf16* d_dinp = cuda_malloc<bf16>(nin);

    matmul_forward_cpu(ref, inp.data(), w.data(), N, C, OC);
    matmul_forward(d_out, d_inp, d_w, N, C, OC, 0);
    cuda_download_float_to(got, d_out, nout);
    ok &= cuda_check_close((t + ".forward_bf16").c_str(), got, ref, nout, TOL_BF16);

    matmul_forward_fp32(d_out32, NULL, d_inp, d_w, N, C, OC, 0);
    cuda_download_to(got, d_out32, nout);
    ok &= cuda_check_close((t + ".forward_fp32").c_str(), got, ref, nout, TOL_FP32);

    // resid (already on the device) becomes the expected resid + inp · wᵀ in place
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < nout; i++) resid[i] += ref[i];
    matmul_forward_fp32(d_out32, d_resid, d_inp, d_w, N, C, OC, 0);
    cuda_download_to(got, d_out32, nout);
    ok &= cuda_check_close((t + ".forward_residual").c_str(), got, resid, nout, TOL_FP32);

    std::vector<float> ref_dinp(nin, 0.0f), ref_dw = dw0;
    matmul_backward_cpu(ref_dinp.data(), ref_dw.data(), dout, inp.data(), w.data(), N, C, OC);
    matmul_backward(d_dinp, d_dw, d_dout, d_inp, d_w, N, C, OC, 0);
    std::vector<float> got_in = cuda_download_float(d_dinp, nin);
    ok &= cuda_check_close((t + ".backward_dinp").c_str(), got_in.data(), ref_dinp.data(), nin, TOL_BF16);
    // compare the accumulated part: (dw - dw0) against the reference's (dw - dw0)
    std::vector<float> got_dw = cuda_download(d_dw, nw);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < nw; i++) { got_dw[i] -= dw0[i]; ref_dw[i] -= dw0[i]; }
    ok &= cuda_check_close((t + ".backward_dweight_accum").c_str(), got_dw.data(), ref_dw.data(), nw, TOL_FP32);

    void* bufs[] = {d_inp, d_w, d_dout, d_resid, d_dw, d_out, d_out32, d_dinp};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    return ok;
}

// Every GEMM kind at (N, C, OC), untuned and tuned (MATMUL_TUNE_EXACT, no FLOP floor): bitwise
// the same outputs. Under dev/emu the tuning statistics must be exactly those of its 3 candidates.
static bool tune_checks(const char* tag, int N, int C, int OC, uint64_t seed, bool emulated) {
    std::string t = tag;
    size_t nin = (size_t)N * C, nw = (size_t)OC * C, nout = (size_t)N * OC;
    std::vector<float> inp = cuda_host_uniform(nin, seed, 1.0f), w = cuda_host_uniform(nw, seed + 1, 0.05f);
    std::vector<float> dout = cuda_host_uniform(nout, seed + 2, 0.1f), resid = cuda_host_uniform(nout, seed + 3, 1.0f);
    std::vector<float> dw0 = cuda_host_uniform(nw, seed + 4, 0.5f);
    bf16* d_inp = cuda_upload_bf16(inp.data(), nin);
    bf16* d_w = cuda_upload_bf16(w.data(), nw);
    bf16* d_dout = cuda_upload_bf16(dout.data(), nout);
    float* d_resid = cuda_upload(resid.data(), nout);
    float* d_dw = cuda_malloc<float>(nw);
    bf16* d_out = cuda_malloc<bf16>(nout);
    float* d_out32 = cuda_malloc<float>(nout);
    float* d_sum = cuda_malloc<float>(nout);
    bf16* d_dinp = cuda_malloc<bf16>(nin);
    std::vector<char> bytes[2];
    MatmulTuneStats stats = {};
    for (int mode = 0; mode < 2; mode++) {  // untuned, then tuned
        matmul_set_tune(mode == 0 ? MATMUL_TUNE_OFF : MATMUL_TUNE_EXACT, 0.0);
        CUDA_CHECK(cudaMemcpy(d_dw, dw0.data(), nw * sizeof(float), cudaMemcpyHostToDevice));
        matmul_forward(d_out, d_inp, d_w, N, C, OC, 0);
        matmul_forward_fp32(d_out32, NULL, d_inp, d_w, N, C, OC, 0);
        matmul_forward_fp32(d_sum, d_resid, d_inp, d_w, N, C, OC, 0);
        matmul_backward(d_dinp, d_dw, d_dout, d_inp, d_w, N, C, OC, 0);
        matmul_backward(d_dinp, d_dw, d_dout, d_inp, d_w, N, C, OC, 0);  // a second micro-step: the plans as planned
        const void* outs[] = {d_out, d_out32, d_sum, d_dinp, d_dw};
        const size_t sizes[] = {nout * 2, nout * 4, nout * 4, nin * 2, nw * 4};
        for (int k = 0; k < 5; k++) {
            std::vector<char> h(sizes[k]);
            CUDA_CHECK(cudaMemcpy(h.data(), outs[k], sizes[k], cudaMemcpyDeviceToHost));
            bytes[mode].insert(bytes[mode].end(), h.begin(), h.end());
        }
        if (mode == 1) stats = matmul_ctx.stats;
    }
    matmul_set_tune(MATMUL_TUNE_EXACT);
    bool same = bytes[0] == bytes[1];
    printf("%s %s.tuned_bitwise_untuned: %d shapes tuned, %d candidates timed, %d set aside (other bits), %d refused, %d not the first\n",
           same ? "PASS" : "FAIL", tag, stats.shapes, stats.timed, stats.set_aside, stats.failed, stats.not_first);
    bool ok = same;
    if (emulated) {
        // 5 shapes (bf16 out, fp32 out, fp32 with the residual, dinp, dweight), each offered 3
        bool ok_stats = stats.shapes > 0 && stats.timed == 2 * stats.shapes && stats.set_aside == stats.shapes &&
                        stats.failed == 0 && stats.not_first == 0;
        printf("%s %s.tune_emulated_candidates: each tuned shape timed 2, set 1 aside, kept the first\n", ok_stats ? "PASS" : "FAIL", tag);
        ok &= ok_stats;
    }
    void* bufs[] = {d_inp, d_w, d_dout, d_resid, d_dw, d_out, d_out32, d_sum, d_dinp};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    (void)t;
    return ok;
}

// One projection's operands at N tokens, random (dout in out), dweight zeroed
typedef struct { bf16 *inp, *w, *out, *dinp; float* dw; } ProjBufs;
static ProjBufs proj_bufs(const Proj& p, int N) {
    ProjBufs b = {cuda_malloc<bf16>((size_t)N * p.C), cuda_malloc<bf16>((size_t)p.OC * p.C), cuda_malloc<bf16>((size_t)N * p.OC),
                  cuda_malloc<bf16>((size_t)N * p.C), cuda_malloc<float>((size_t)p.OC * p.C)};
    cuda_fill_uniform(b.inp, (size_t)N * p.C, 1, 1.0f);
    cuda_fill_uniform(b.w, (size_t)p.OC * p.C, 2, 0.05f);
    cuda_fill_uniform(b.out, (size_t)N * p.OC, 3, 0.1f);
    CUDA_CHECK(cudaMemset(b.dw, 0, (size_t)p.OC * p.C * sizeof(float)));
    return b;
}
static void proj_bufs_free(ProjBufs* b) {
    void* bufs[] = {b->inp, b->w, b->out, b->dinp, b->dw};
    for (void* x : bufs) CUDA_CHECK(cudaFree(x));
}

// One projection's forward and backward at N tokens with the heuristic's first algorithms
// (version 1) against the autotuned ones; the fastest of all candidates in the note.
static void compare(const char* preset, const Proj& p, int N) {
    ProjBufs pb = proj_bufs(p, N);
    bf16 *inp = pb.inp, *w = pb.w, *out = pb.out, *dinp = pb.dinp;
    float* dw = pb.dw;
    const MatmulTune modes[3] = {MATMUL_TUNE_OFF, MATMUL_TUNE_EXACT, MATMUL_TUNE_FASTEST};
    float fwd[3], bwd[3];
    MatmulTuneStats st[3];
    for (int k = 0; k < 3; k++) {
        matmul_set_tune(modes[k]);
        fwd[k] = cuda_bench_ms([&] { matmul_forward(out, inp, w, N, p.C, p.OC, 0); }, 3, 20);
        bwd[k] = cuda_bench_ms([&] { matmul_backward(dinp, dw, out, inp, w, N, p.C, p.OC, 0); }, 3, 20);
        st[k] = matmul_ctx.stats;
    }
    matmul_set_tune(MATMUL_TUNE_EXACT);
    char shape[96], note[160];
    snprintf(shape, sizeof(shape), "%s %s forward N=%d (%d->%d)", preset, p.name, N, p.C, p.OC);
    snprintf(note, sizeof(note), "v1 the heuristic's first; v2 autotuned, same bits (%d shape, %d timed, %d set aside); fastest of all %.4f ms",
             st[1].shapes, st[1].timed, st[1].set_aside, fwd[2]);
    cuda_print_compare("matmul", shape, fwd[0], fwd[1], note);
    snprintf(shape, sizeof(shape), "%s %s backward N=%d (dinp + dweight)", preset, p.name, N);
    snprintf(note, sizeof(note), "as above (forward and backward: %d shapes, %d timed, %d set aside); fastest of all %.4f ms",
             st[1].shapes, st[1].timed, st[1].set_aside, bwd[2]);
    cuda_print_compare("matmul", shape, bwd[0], bwd[1], note);
    proj_bufs_free(&pb);
}

static void bench(const char* preset, const Proj& p, int N) {
    ProjBufs pb = proj_bufs(p, N);
    bf16 *inp = pb.inp, *w = pb.w, *out = pb.out, *dinp = pb.dinp;
    float* dw = pb.dw;
    double flops = 2.0 * N * p.C * p.OC;
    char what[96];
    float ms = cuda_bench_ms([&] { matmul_forward(out, inp, w, N, p.C, p.OC, 0); }, 3, 20);
    snprintf(what, sizeof(what), "%s %s forward N=%d (%d->%d)", preset, p.name, N, p.C, p.OC);
    cuda_print_bench(what, ms, 0, flops);
    ms = cuda_bench_ms([&] { matmul_backward(dinp, dw, out, inp, w, N, p.C, p.OC, 0); }, 3, 20);
    snprintf(what, sizeof(what), "%s %s backward (dinp + dweight)", preset, p.name);
    cuda_print_bench(what, ms, 0, 2 * flops);
    proj_bufs_free(&pb);
}

int main(int argc, char** argv) {
    DevFlags flags;
    if (!dev_flags_parse(argc, argv, "dev_matmul", DEV_FLAG_SMALL | DEV_FLAG_COMPARE, &flags)) return 2;
    const bool validate_only = flags.validate_only, small = flags.small, compare_only = flags.compare;
    if (!cuda_device_present()) { printf("SKIP dev_matmul: no CUDA device\n"); return 77; }
    matmul_init();
    if (compare_only) {
        for (const char* name : {"llama300m", "llama600m"}) {
            LlamaConfig c = {};
            llama_preset(name, &c);
            for (const Proj& p : projections(&c)) compare(name, p, 4 * c.T);
        }
        matmul_free();
        return 0;
    }
    // the shapes: (tag, N, C, OC); an odd small one first (N not a multiple of the tile sizes),
    // then every projection of three presets at N = 256, then the real shapes, N = B*T at B = 4
    struct Shape { std::string tag; int N, C, OC; };
    std::vector<Shape> shapes = {{"dev_matmul.odd_N72_C40_OC24", 72, 40, 24}};
    const char* presets[] = {"tiny", "d12", "llama600m"};
    for (const char* name : presets) {
        if (small && strcmp(name, "tiny") != 0) continue;
        LlamaConfig c = {};
        llama_preset(name, &c);
        for (const Proj& p : projections(&c))
            shapes.push_back({std::string("dev_matmul.") + name + "." + p.name, 256, p.C, p.OC});
    }
    const char* real[] = {"d12", "llama300m", "llama600m"};
    for (const char* name : real) {
        if (small) break;
        LlamaConfig c = {};
        llama_preset(name, &c);
        int N = 4 * c.T;
        for (const Proj& p : projections(&c))
            shapes.push_back({std::string("dev_matmul.") + name + "_N" + std::to_string(N) + "." + p.name, N, p.C, p.OC});
    }
    size_t max_out = 0;
    for (const Shape& sh : shapes) max_out = std::max(max_out, (size_t)sh.N * sh.OC);
    OutBuffers ob = {host_buffer(max_out), host_buffer(max_out), host_buffer(max_out), host_buffer(max_out)};
    bool ok = true;
    uint64_t seed = 100;
    for (const Shape& sh : shapes) {
        ok &= validate(sh.tag.c_str(), sh.N, sh.C, sh.OC, seed, &ob);
        seed += 10;
    }
    ob = OutBuffers{};  // 13 GB of host memory back before the benchmark
    {
        cudaDeviceProp prop;
        CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
        bool emulated = strstr(prop.name, "CPU emulation") != NULL;
        LlamaConfig c = {};
        llama_preset("tiny", &c);
        ok &= tune_checks("dev_matmul.odd_N72_C40_OC24", 72, 40, 24, 900, emulated);
        for (const Proj& p : projections(&c))
            ok &= tune_checks((std::string("dev_matmul.tiny.") + p.name).c_str(), 256, p.C, p.OC, seed += 10, emulated);
    }
    if (!validate_only) {
        const char* all[] = {"tiny", "d12", "llama300m", "llama600m"};
        for (const char* name : all) {
            LlamaConfig c = {};
            llama_preset(name, &c);
            for (const Proj& p : projections(&c)) bench(name, p, 4 * c.T);
        }
    }
    matmul_free();
    return ok ? 0 : 1;
}
