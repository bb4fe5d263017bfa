// dev/cuda/attention.cu — both attention paths of llmc/attention.cuh, the fused kernels of
// llmc/flash_attention.cuh (--attention flash) and the unfused one (cuBLASLt batched GEMMs + causal
// softmax with saved lse, GQA; --attention cublas), against attention_forward_cpu /
// attention_backward_cpu (llmc/attention.h) and against each other, then a benchmark.
// Tolerances (max |got - ref| / max |ref|), with the worst a CPU emulation of these exact
// roundings measured on the whole-tensor shapes below (T up to 2048; dev/emu, with the GPU
// forward's out as the backward's input, stays within the same figures there and on d12 at
// B=4); llama600m and llama300m at B=4 are not yet measured, on a GPU or emulated:
//   out (bf16)   1e-2    (bf16 probabilities times bf16 v, one more rounding; measured <= 4.1e-3)
//   lse (fp32)   1e-4    (fp32 scores of exact bf16 products; fp32 softmax sums, the CPU's in
//                         double; measured <= 1.2e-7)
//   dqkv (bf16)  1.5e-2  (bf16 P and dS, dP - D cancels; each of dq, dk, dv against its own
//                         scale; measured <= 5.1e-3)
// The flash path, emulated (dev/emu, mma per the PTX fragment tables) at the --small shapes,
// measured within the same figures: out <= 2.8e-3, lse <= 1.7e-7, dqkv <= 6.1e-3 (dq, HS 16, T = 400); flash
// against the cuBLAS path (both on the GPU side): out <= 4.2e-3, lse <= 1.6e-7, dqkv <= 7.1e-3
// (T = 4096, dk), under the same bounds (each side carries its own bf16 roundings). On a GPU the mma's own summation order
// adds to them; not yet measured there.
// The backward is checked on its own: both sides get the GPU forward's out (bf16, as stored) and
// lse, and the same bf16 qkv and dout.
// Slices: the reference runs per (batch b, kv head g) slice: the group of q heads that read kv
// head g, and that kv head's k and v, cut out of qkv as a (1, T, (group + 2) * HS) input with
// NH = group, NKV = 1. The slice owns its heads' out, lse and dq and the whole dk, dv of kv head g
// (which sum over the group's q heads), so its reference results compare directly with those
// columns of the GPU's full-batch outputs. Slices run in parallel, one core each.
// Shapes:
//   every slice (the whole tensor): a small odd case (B=2, T=37, GQA group 3, HS=24); flash at
//     odd T, at a tile's edges (T = 1, 63, 64, 65), at T = 4096 (HS 64, one head) and over several
//     backward key blocks at HS 128 (T = 300) and 16 (T = 400); tiny (GQA
//     NH=4, NKV=2), d12 and llama600m heads at their real T with B=1;
//   4 slices: (0, 0), (B/2, NKV/2), (B-1, 0) and (B-1, NKV-1) of d12 at B=4, T=1024, llama600m
//     at B=4, T=2048 and llama300m at B=4, T=4096, the shapes the trainer runs. llama300m's
//     (B, NH, T, T) scores are 2^30 elements (4 GiB fp32 + 2 GiB bf16 probabilities on the GPU),
//     and the last slice reads them at the largest offsets, where a 32-bit index would wrap.
//   Every element of the GPU's out, lse and dqkv starts as NaN and must come back finite.
// Cost of the reference: ~14*HS flops per causal (t, j) pair and q head (forward 4*HS, backward
// 10*HS): 7.5 GFLOP per llama300m slice (T=4096, HS=64), 3.8 per llama600m slice (T=2048,
// HS=128); measured on one core of a development machine: 1.1 s and 0.6 s per slice, the
// slices side by side. The whole llama300m tensor (64 slices) would be ~70 s on one core, hence
// the slices. No (T, T) buffer on the host.
// Flash (llmc/flash_attention.cuh) is validated at the same shapes as the cuBLAS path, plus odd
// T (tails of every tile kind) at each head size 16..128 and GQA groups of 1 to 3; each of those
// shapes and the B=4 real shapes also compare flash against the cuBLAS path on the GPU (same
// tolerances) and run the flash backward twice, bitwise equal.
// Flash on Hopper's wgmma (flash_attention_forward_sm90 and flash_attention_backward_sm90, head
// sizes 64 and 128; where the GPU and the build have it, else one SKIP line) is validated at every
// flash shape of those head sizes (tags dev_attention.flash_sm90.*), the backward on the wgmma
// forward's out and lse, under the same tolerances, its backward twice, bitwise equal, and in
// --racecheck.
// The benchmark runs both paths at B=4 and each preset's T, and at HS=128, T=4096 (16 heads), and
// prints causal TFLOP/s (4·B·NH·T²·HS/2 forward, 2.5x that backward) next to a measured 8192³
// cuBLASLt bf16 GEMM; with the flash path also the wgmma kernels (flash_sm90) and their speed-ups.
// Usage: build/dev_attention [--validate-only] [--small] [--flash-only] [--racecheck] [--bench-only] [--no-sm90] [--dump FILE]
//        build/dev_attention --ablate [--small]
//   --small: the odd shapes and tiny only (what dev/emu runs); exit 0 ok, 1 failed, 77 no GPU (SKIP).
//   --flash-only: validate the flash path alone, at the same shapes and tolerances, without the
//     cuBLAS path or the flash-against-cuBLAS comparisons: no cuBLAS kernel runs (for
//     compute-sanitizer's racecheck, whose hazards inside cuBLAS's own kernels say nothing of ours;
//     the cuBLAS path's own kernels use no shared memory, racecheck's only subject). Implies
//     --validate-only.
//   --racecheck: validate the flash path alone at four shapes (what dev/emu's --racecheck build runs,
//     under ThreadSanitizer: 5 minutes for --small --flash-only there): HS 16, 32, 64 and 128, GQA
//     groups of 1 to 3, T 300 or 400, where the forward's last query blocks wrap their ring of 4
//     (K, V) stages and the backward's key blocks wrap their 2 dQ stages. Implies --flash-only.
//   --no-sm90: without the wgmma kernels (the rest as without it: where they fail so that the
//     process cannot go on, the other kernels' checks and times still come).
//   --dump FILE: the flash outputs of every validated shape, raw fp32 (for bitwise comparisons).
//   --ablate: the wgmma kernels timed with parts left out, beside the kernels as built, at
//     llama300m's and llama600m's shapes (B = 4), after checks that each variant leaves out what it
//     says (see ablate below); with --small only the checks, at T 300. Lines "ablate SHAPE
//     DIRECTION VARIANT MS ms, ...". Takes no other flag but --small.
#include <cstring>
#include <string>
#include <type_traits>
#include "../../llmc/llama.h"
#include "../../llmc/attention.h"
#include "../../llmc/attention.cuh"

static const double TOL_OUT = 1e-2;
static const double TOL_LSE = 1e-4;
static const double TOL_DQKV = 1.5e-2;

static bool g_no_sm90 = false;  // --no-sm90
typedef struct { int b, g; } Slice;  // batch b, kv head g

// --dump FILE: the flash path's out, lse and dqkv of every validated shape, as raw fp32, appended
// in order (two runs that must agree bitwise compare their files)
static FILE* g_dump = NULL;

// The slices of a (B, NKV) grid: all of them, or the first, a middle one and the two at the end
// of the last batch (largest offsets), without repeats.
static std::vector<Slice> slices_of(int B, int NKV, bool all) {
    std::vector<Slice> out;
    if (all) {
        for (int b = 0; b < B; b++)
            for (int g = 0; g < NKV; g++) out.push_back({b, g});
        return out;
    }
    Slice pick[4] = {{0, 0}, {B / 2, NKV / 2}, {B - 1, 0}, {B - 1, NKV - 1}};
    for (const Slice& s : pick) {
        bool seen = false;
        for (const Slice& o : out) seen |= o.b == s.b && o.g == s.g;
        if (!seen) out.push_back(s);
    }
    return out;
}

// Reference results of one slice, in the slice's own layout (NH = group, NKV = 1).
typedef struct {
    std::vector<float> out;   // (T, group * HS)
    std::vector<float> lse;   // (group, T)
    std::vector<float> dqkv;  // (T, (group + 2) * HS): dq of the group's heads | dk | dv
} SliceRef;

// Runs both CPU references on slice s. qkv, dout: the full (B, T, ...) inputs; out, lse: the GPU
// forward's results (the backward's inputs on both sides).
static SliceRef slice_reference(const Slice& s, const float* qkv, const float* dout, const float* out,
                                const float* lse, int T, int NH, int NKV, int HS) {
    int group = NH / NKV, QKV = (NH + 2 * NKV) * HS, SQ = (group + 2) * HS, GO = group * HS;
    size_t b = s.b;
    std::vector<float> sqkv((size_t)T * SQ), sdout((size_t)T * GO), sout((size_t)T * GO), slse((size_t)group * T);
    for (int t = 0; t < T; t++) {
        const float* row = qkv + (b * T + t) * QKV;
        float* dst = &sqkv[(size_t)t * SQ];
        memcpy(dst, row + (size_t)s.g * GO, GO * sizeof(float));
        memcpy(dst + GO, row + (size_t)(NH + s.g) * HS, HS * sizeof(float));
        memcpy(dst + GO + HS, row + (size_t)(NH + NKV + s.g) * HS, HS * sizeof(float));
        size_t o = (b * T + t) * NH * HS + (size_t)s.g * GO;
        memcpy(&sdout[(size_t)t * GO], dout + o, GO * sizeof(float));
        memcpy(&sout[(size_t)t * GO], out + o, GO * sizeof(float));
    }
    for (int i = 0; i < group; i++)
        memcpy(&slse[(size_t)i * T], lse + (b * NH + (size_t)s.g * group + i) * T, T * sizeof(float));
    SliceRef r;
    r.out.resize((size_t)T * GO);
    r.lse.resize((size_t)group * T);
    r.dqkv.assign((size_t)T * SQ, 0.0f);
    attention_forward_cpu(r.out.data(), r.lse.data(), sqkv.data(), 1, T, group, 1, HS);
    attention_backward_cpu(r.dqkv.data(), sdout.data(), sqkv.data(), sout.data(), slse.data(), 1, T, group, 1, HS);
    return r;
}

// all_slices: compare the whole outputs; otherwise the slices of slices_of(B, NKV, false). sm90:
// the forward and backward by flash_attention_{forward,backward}_sm90 (wgmma), the backward twice.
static bool validate(const char* tag, AttentionKind kind, int B, int T, int NH, int NKV, int HS, bool all_slices, uint64_t seed,
                     bool sm90 = false) {
    std::string t = tag;
    int QKV = (NH + 2 * NKV) * HS, group = NH / NKV, GO = group * HS;
    size_t nqkv = (size_t)B * T * QKV, nout = (size_t)B * T * NH * HS, nlse = (size_t)B * NH * T;
    std::vector<float> qkv = cuda_host_uniform(nqkv, seed, 2.0f);  // wide enough for peaked softmax rows
    std::vector<float> dout = cuda_host_uniform(nout, seed + 1, 1.0f);
    cuda_round_to_bf16(&qkv);
    cuda_round_to_bf16(&dout);

    // GPU, forward then backward on the forward's own out and lse; scratch and buffers are freed
    // before the next shape (llama300m's scratch alone is 6 GiB)
    AttentionScratch s;
    attention_scratch_alloc(&s, kind, B, T, NH, NKV, HS);
    bf16* d_qkv = cuda_upload_bf16(qkv.data(), nqkv);
    bf16* d_dout = cuda_upload_bf16(dout.data(), nout);
    bf16* d_out = cuda_malloc<bf16>(nout);
    float* d_lse = cuda_malloc<float>(nlse);
    bf16* d_dqkv = cuda_malloc<bf16>(nqkv);
    // NaN garbage (all bits set): every element of every output must be written
    CUDA_CHECK(cudaMemset(d_out, 0xff, nout * sizeof(bf16)));
    CUDA_CHECK(cudaMemset(d_lse, 0xff, nlse * sizeof(float)));
    CUDA_CHECK(cudaMemset(d_dqkv, 0xff, nqkv * sizeof(bf16)));
    auto backward = [&] {
        if (sm90) flash_attention_backward_sm90(d_dqkv, s.rowstats, s.dq_accum, s.order, d_dout, d_qkv, d_out, d_lse, B, T, NH, NKV, HS, 0);
        else attention_backward(d_dqkv, d_dout, d_qkv, d_out, d_lse, &s, B, T, NH, NKV, HS, 0);
    };
    if (sm90) flash_attention_forward_sm90(d_out, d_lse, d_qkv, B, T, NH, NKV, HS, 0);
    else attention_forward(d_out, d_lse, d_qkv, &s, B, T, NH, NKV, HS, 0);
    backward();
    std::vector<float> g_out = cuda_download_float(d_out, nout);
    std::vector<float> g_lse = cuda_download(d_lse, nlse);
    std::vector<float> g_dqkv = cuda_download_float(d_dqkv, nqkv);
    bool ok = true;
    if (sm90) {  // its backward once more, bitwise equal (flash_vs_cublas checks the mma.sync one)
        backward();
        bool same = cuda_download_float(d_dqkv, nqkv) == g_dqkv;
        printf("%s %s.backward_bitwise_repeatable\n", same ? "PASS" : "FAIL", tag);
        ok &= same;
    }
    void* bufs[] = {d_qkv, d_dout, d_out, d_lse, d_dqkv};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    attention_scratch_free(&s);
    if (g_dump && kind == ATTENTION_FLASH) {
        const std::vector<float>* outs[3] = {&g_out, &g_lse, &g_dqkv};
        for (const std::vector<float>* v : outs)
            if (fwrite(v->data(), sizeof(float), v->size(), g_dump) != v->size()) { perror("dev_attention: --dump"); exit(1); }
    }

    if (!all_slices) {
        // the slices below see a few heads; this sees that nothing anywhere was left unwritten
        bool finite = true;
        const std::vector<float>* outs[3] = {&g_out, &g_lse, &g_dqkv};
        for (const std::vector<float>* v : outs) {
            const float* x = v->data();
            size_t n = v->size();
            bool fin = true;
#pragma omp parallel for schedule(static) reduction(&& : fin)
            for (size_t i = 0; i < n; i++) fin = fin && std::isfinite(x[i]);
            finite = finite && fin;
        }
        printf("%s %s.outputs_finite (out, lse, dqkv: every element written)\n", finite ? "PASS" : "FAIL", tag);
        ok &= finite;
    }

    std::vector<Slice> sl = slices_of(B, NKV, all_slices);
    std::vector<SliceRef> refs(sl.size());
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < (int)sl.size(); i++)
        refs[i] = slice_reference(sl[i], qkv.data(), dout.data(), g_out.data(), g_lse.data(), T, NH, NKV, HS);
    if (!all_slices) {
        printf("  %s: reference on (batch, kv head) slices", tag);
        for (const Slice& x : sl) printf(" (%d, %d)", x.b, x.g);
        printf(" of B=%d x NKV=%d, %d q heads each\n", B, NKV, group);
    }

    // gather the slices' columns of the GPU results next to their references
    std::vector<float> go, ro, gl, rl, gp[3], rp[3];
    int c0[3] = {0, NH * HS, (NH + NKV) * HS};  // dq, dk, dv columns of kv head g start at c0 + g*width
    int width[3] = {GO, HS, HS};
    int rc0[3] = {0, GO, GO + HS};  // the same parts in the slice's layout
    int SQ = (group + 2) * HS;
    for (size_t i = 0; i < sl.size(); i++) {
        size_t b = sl[i].b, g = sl[i].g;
        const SliceRef& r = refs[i];
        for (int tt = 0; tt < T; tt++) {
            const float* o = &g_out[(b * T + tt) * NH * HS + g * GO];
            go.insert(go.end(), o, o + GO);
            ro.insert(ro.end(), &r.out[(size_t)tt * GO], &r.out[(size_t)tt * GO] + GO);
            for (int p = 0; p < 3; p++) {
                const float* d = &g_dqkv[(b * T + tt) * QKV + c0[p] + g * width[p]];
                const float* rd = &r.dqkv[(size_t)tt * SQ + rc0[p]];
                gp[p].insert(gp[p].end(), d, d + width[p]);
                rp[p].insert(rp[p].end(), rd, rd + width[p]);
            }
        }
        const float* l = &g_lse[(b * NH + g * group) * T];
        gl.insert(gl.end(), l, l + (size_t)group * T);
        rl.insert(rl.end(), r.lse.begin(), r.lse.end());
    }
    ok &= cuda_check_close((t + ".forward_out").c_str(), go.data(), ro.data(), go.size(), TOL_OUT);
    ok &= cuda_check_close((t + ".forward_lse").c_str(), gl.data(), rl.data(), gl.size(), TOL_LSE);
    // q, k and v parts have different scales; check each against its own maximum
    const char* parts[3] = {"dq", "dk", "dv"};
    for (int p = 0; p < 3; p++)
        ok &= cuda_check_close((t + ".backward_" + parts[p]).c_str(), gp[p].data(), rp[p].data(), gp[p].size(), TOL_DQKV);
    return ok;
}

// Both paths on the GPU, same bf16 inputs: flash against cublas (out, lse, dq, dk, dv within the
// reference tolerances), each backward on its own forward's out and lse; then the flash backward
// once more, bitwise equal (no atomics).
static bool flash_vs_cublas(const char* tag, int B, int T, int NH, int NKV, int HS, uint64_t seed) {
    std::string t = tag;
    int QKV = (NH + 2 * NKV) * HS;
    size_t nqkv = (size_t)B * T * QKV, nout = (size_t)B * T * NH * HS, nlse = (size_t)B * NH * T;
    std::vector<float> qkv = cuda_host_uniform(nqkv, seed, 2.0f), dout = cuda_host_uniform(nout, seed + 1, 1.0f);
    bf16* d_qkv = cuda_upload_bf16(qkv.data(), nqkv);
    bf16* d_dout = cuda_upload_bf16(dout.data(), nout);
    bf16* d_out = cuda_malloc<bf16>(nout);
    float* d_lse = cuda_malloc<float>(nlse);
    bf16* d_dqkv = cuda_malloc<bf16>(nqkv);
    std::vector<float> out[2], lse[2], dqkv[2];
    AttentionKind kinds[2] = {ATTENTION_FLASH, ATTENTION_CUBLAS};
    std::vector<float> again;
    for (int k = 0; k < 2; k++) {
        AttentionScratch s;
        attention_scratch_alloc(&s, kinds[k], B, T, NH, NKV, HS);
        CUDA_CHECK(cudaMemset(d_dqkv, 0xff, nqkv * sizeof(bf16)));
        attention_forward(d_out, d_lse, d_qkv, &s, B, T, NH, NKV, HS, 0);
        attention_backward(d_dqkv, d_dout, d_qkv, d_out, d_lse, &s, B, T, NH, NKV, HS, 0);
        out[k] = cuda_download_float(d_out, nout);
        lse[k] = cuda_download(d_lse, nlse);
        dqkv[k] = cuda_download_float(d_dqkv, nqkv);
        if (k == 0) {
            attention_backward(d_dqkv, d_dout, d_qkv, d_out, d_lse, &s, B, T, NH, NKV, HS, 0);
            again = cuda_download_float(d_dqkv, nqkv);
        }
        attention_scratch_free(&s);
    }
    void* bufs[] = {d_qkv, d_dout, d_out, d_lse, d_dqkv};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    bool ok = cuda_check_close((t + ".out").c_str(), out[0].data(), out[1].data(), nout, TOL_OUT);
    ok &= cuda_check_close((t + ".lse").c_str(), lse[0].data(), lse[1].data(), nlse, TOL_LSE);
    // dq, dk, dv columns, each against its own scale, but at least 1e-3 of the whole gradient's: at
    // T = 1 dq and dk are zero in exact arithmetic (one key: dS = dP - D = 0), and each path's values
    // are only its roundoff of dP - D (about 1e-7 of dv's scale), which no own scale can measure
    int c0[3] = {0, NH * HS, (NH + NKV) * HS}, width[3] = {NH * HS, NKV * HS, NKV * HS};
    const char* parts[3] = {"dq", "dk", "dv"};
    double whole = 0.0;
    for (size_t i = 0; i < nqkv; i++) whole = std::max(whole, (double)fabsf(dqkv[1][i]));
    for (int p = 0; p < 3; p++) {
        std::vector<float> g, r;
        for (size_t row = 0; row < (size_t)B * T; row++) {
            g.insert(g.end(), &dqkv[0][row * QKV + c0[p]], &dqkv[0][row * QKV + c0[p]] + width[p]);
            r.insert(r.end(), &dqkv[1][row * QKV + c0[p]], &dqkv[1][row * QKV + c0[p]] + width[p]);
        }
        ok &= cuda_check_close((t + "." + parts[p]).c_str(), g.data(), r.data(), g.size(), TOL_DQKV, 1e-3 * whole);
    }
    bool same = memcmp(again.data(), dqkv[0].data(), nqkv * sizeof(float)) == 0;
    printf("%s %s.backward_bitwise_repeatable\n", same ? "PASS" : "FAIL", tag);
    fflush(stdout);
    return ok && same;
}

// The H200's bf16 ceiling as measured here: one 8192^3 cuBLASLt GEMM.
static double measured_gemm_flops(void) {
    const int n = 8192;
    bf16 *a = cuda_malloc<bf16>((size_t)n * n), *b = cuda_malloc<bf16>((size_t)n * n), *c = cuda_malloc<bf16>((size_t)n * n);
    cuda_fill_uniform(a, (size_t)n * n, 5, 1.0f);
    cuda_fill_uniform(b, (size_t)n * n, 6, 1.0f);
    float ms = cuda_bench_ms([&] { matmul_cublaslt(c, CUDA_R_16BF, NULL, a, b, n, n, n, false, false, n, n, n, 1.0f, 0.0f, 1, 0, 0, 0, 0); }, 2, 10);
    double flops = 2.0 * n * (double)n * n / (ms * 1e-3);
    cuda_print_bench("cuBLASLt bf16 GEMM 8192^3 (the ceiling)", ms, 0, 2.0 * n * (double)n * n);
    void* bufs[] = {a, b, c};
    for (void* x : bufs) CUDA_CHECK(cudaFree(x));
    return flops;
}

// Times one path at one shape; returns {forward, backward} ms.
static void bench(const char* preset, AttentionKind kind, int B, int T, int NH, int NKV, int HS, double ceiling, float* ms_out) {
    int QKV = (NH + 2 * NKV) * HS;
    size_t nqkv = (size_t)B * T * QKV, nout = (size_t)B * T * NH * HS;
    AttentionScratch s;
    attention_scratch_alloc(&s, kind, B, T, NH, NKV, HS);
    bf16* qkv = cuda_malloc<bf16>(nqkv);
    bf16* out = cuda_malloc<bf16>(nout);
    bf16* dout = cuda_malloc<bf16>(nout);
    bf16* dqkv = cuda_malloc<bf16>(nqkv);
    float* lse = cuda_malloc<float>((size_t)B * NH * T);
    cuda_fill_uniform(qkv, nqkv, 1, 1.0f);
    cuda_fill_uniform(dout, nout, 2, 1.0f);
    // causal useful work (what MFU counts): 2 products of 2*T*T*HS per head, halved; the backward 2.5x
    double flops = 2.0 * 2.0 * B * NH * (double)T * T * HS / 2.0;
    char what[96];
    const char* name = attention_kind_name(kind);
    ms_out[0] = cuda_bench_ms([&] { attention_forward(out, lse, qkv, &s, B, T, NH, NKV, HS, 0); }, 2, 10);
    snprintf(what, sizeof(what), "%s %s forward B=%d T=%d NH=%d HS=%d", preset, name, B, T, NH, HS);
    cuda_print_bench(what, ms_out[0], 0, flops);
    printf("    causal %.1f TFLOP/s = %.1f%% of the measured GEMM ceiling\n", flops / (ms_out[0] * 1e-3) / 1e12,
           100.0 * flops / (ms_out[0] * 1e-3) / ceiling);
    if (kind == ATTENTION_FLASH && !g_no_sm90 && flash_sm90_available(HS)) {  // the wgmma forward beside it
        float ms = cuda_bench_ms([&] { flash_attention_forward_sm90(out, lse, qkv, B, T, NH, NKV, HS, 0); }, 2, 10);
        snprintf(what, sizeof(what), "%s flash_sm90 forward B=%d T=%d NH=%d HS=%d", preset, B, T, NH, HS);
        cuda_print_bench(what, ms, 0, flops);
        printf("    causal %.1f TFLOP/s = %.1f%% of the measured GEMM ceiling; flash / flash_sm90 time %.2fx\n", flops / (ms * 1e-3) / 1e12,
               100.0 * flops / (ms * 1e-3) / ceiling, ms_out[0] / ms);
    }
    ms_out[1] = cuda_bench_ms([&] { attention_backward(dqkv, dout, qkv, out, lse, &s, B, T, NH, NKV, HS, 0); }, 2, 10);
    snprintf(what, sizeof(what), "%s %s backward", preset, name);
    cuda_print_bench(what, ms_out[1], 0, 2.5 * flops);
    printf("    causal %.1f TFLOP/s = %.1f%% of the measured GEMM ceiling\n", 2.5 * flops / (ms_out[1] * 1e-3) / 1e12,
           100.0 * 2.5 * flops / (ms_out[1] * 1e-3) / ceiling);
    if (kind == ATTENTION_FLASH && !g_no_sm90 && flash_sm90_available(HS)) {  // the wgmma backward beside it
        float ms = cuda_bench_ms([&] {
            flash_attention_backward_sm90(dqkv, s.rowstats, s.dq_accum, s.order, dout, qkv, out, lse, B, T, NH, NKV, HS, 0);
        }, 2, 10);
        snprintf(what, sizeof(what), "%s flash_sm90 backward", preset);
        cuda_print_bench(what, ms, 0, 2.5 * flops);
        printf("    causal %.1f TFLOP/s = %.1f%% of the measured GEMM ceiling; flash / flash_sm90 time %.2fx\n",
               2.5 * flops / (ms * 1e-3) / 1e12, 100.0 * 2.5 * flops / (ms * 1e-3) / ceiling, ms_out[1] / ms);
    }
    fflush(stdout);
    void* bufs[] = {qkv, out, dout, dqkv, lse};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    attention_scratch_free(&s);
}

// The wgmma forward's rows (flash_attention_forward_sm90) at head sizes 64 and 128, where the GPU
// and the build have it; once, a SKIP line saying why not
static bool sm90_rows(int HS) {
    if (!flash_sm90_head_size(HS)) return false;
    static bool told = false;
    if (g_no_sm90 || !flash_sm90_available(HS)) {
        if (!told) printf("SKIP dev_attention.flash_sm90: %s\n", g_no_sm90 ? "--no-sm90" :
                          "the wgmma forward needs a GPU of compute capability 9.0 and an sm_90a build");
        told = true;
        return false;
    }
    return true;
}
static std::string sm90_tag(const std::string& flash_tag) {  // dev_attention.flash.X -> dev_attention.flash_sm90.X
    return "dev_attention.flash_sm90" + flash_tag.substr(strlen("dev_attention.flash"));
}

// --ablate: the wgmma kernels with parts left out (llmc/flash_common.cuh's FlashSkip: their results
// are wrong by design), each timed beside the kernel as built: where a kernel's time goes (what
// dev/flash_model.py --ablation predicts). First each variant's outputs against the kernel's as
// built, so that a part said to be left out is: what it feeds differs, the rest is bitwise the same
// (with --small only these checks). Forward: no_exp, no_pv; backward: no_exp, no_dq_product,
// no_dq_sum, no_dq (both).
template <int S> using Skip = std::integral_constant<int, S>;

// which of dq, dk, dv (the column parts of a (rows, QKV) dqkv) differ between a and b
static void dqkv_parts_differ(const std::vector<float>& a, const std::vector<float>& b, size_t rows, int NH, int NKV, int HS, bool differ[3]) {
    int c0[4] = {0, NH * HS, (NH + NKV) * HS, (NH + 2 * NKV) * HS};
    for (int p = 0; p < 3; p++) {
        differ[p] = false;
        for (size_t r = 0; r < rows && !differ[p]; r++)
            differ[p] = memcmp(&a[r * c0[3] + c0[p]], &b[r * c0[3] + c0[p]], (size_t)(c0[p + 1] - c0[p]) * sizeof(float)) != 0;
    }
}
static const char* differs(bool d) { return d ? "differs" : "the same"; }

static bool ablate(const char* shape, int B, int T, int NH, int NKV, int HS, bool time_it) {
    int QKV = (NH + 2 * NKV) * HS;
    size_t nqkv = (size_t)B * T * QKV, nout = (size_t)B * T * NH * HS, nlse = (size_t)B * NH * T;
    AttentionScratch s;
    attention_scratch_alloc(&s, ATTENTION_FLASH, B, T, NH, NKV, HS);
    bf16 *qkv = cuda_malloc<bf16>(nqkv), *dout = cuda_malloc<bf16>(nout), *dqkv = cuda_malloc<bf16>(nqkv);
    bf16 *out = cuda_malloc<bf16>(nout), *out_v = cuda_malloc<bf16>(nout);  // the forward as built (the backward's input), a variant's
    float *lse = cuda_malloc<float>(nlse), *lse_v = cuda_malloc<float>(nlse);
    cuda_fill_uniform(qkv, nqkv, 11, 2.0f);
    cuda_fill_uniform(dout, nout, 12, 1.0f);
    flash_attention_forward_sm90(out, lse, qkv, B, T, NH, NKV, HS, 0);
    double flops = 2.0 * 2.0 * B * NH * (double)T * T * HS / 2.0;  // causal, as bench counts it
    bool ok = true;
    std::vector<float> base_out, base_lse, base_dqkv;  // the kernels' as built
    float base_ms[2] = {0.0f, 0.0f};
    // one variant: its outputs against the kernel's as built, then its time
    auto variant = [&](auto backward, auto skip, const char* name) {
        const bool BWD = decltype(backward)::value;
        const int SKIP = decltype(skip)::value;
        auto pass = [&] {
            if constexpr (decltype(backward)::value)
                flash_attention_backward_sm90<decltype(skip)::value>(dqkv, s.rowstats, s.dq_accum, s.order, dout, qkv, out, lse, B, T, NH, NKV, HS, 0);
            else flash_attention_forward_sm90<decltype(skip)::value>(out_v, lse_v, qkv, B, T, NH, NKV, HS, 0);
        };
        // outputs and dQ sums poisoned (all bits set: NaN), so that what a variant leaves unwritten differs
        CUDA_CHECK(cudaMemset(out_v, 0xff, nout * sizeof(bf16)));
        CUDA_CHECK(cudaMemset(lse_v, 0xff, nlse * sizeof(float)));
        CUDA_CHECK(cudaMemset(dqkv, 0xff, nqkv * sizeof(bf16)));
        CUDA_CHECK(cudaMemset(s.dq_accum, 0xff, (size_t)B * NH * T * HS * sizeof(float)));
        pass();
        const char* dir = BWD ? "backward_sm90" : "forward_sm90";
        std::string tag = std::string("dev_attention.ablate.") + shape + "." + dir + "." + name;
        if (BWD) {  // dq differs; dk and dv too without the exponentials, else bitwise as built
            std::vector<float> got = cuda_download_float(dqkv, nqkv);
            if (SKIP == 0) base_dqkv = got;
            else {
                bool d[3], all = SKIP & FLASH_SKIP_EXP;
                dqkv_parts_differ(got, base_dqkv, (size_t)B * T, NH, NKV, HS, d);
                bool good = d[0] && d[1] == all && d[2] == all;
                printf("%s %s: dq %s, dk %s, dv %s (expected: dq differs, dk and dv %s)\n", good ? "PASS" : "FAIL", tag.c_str(),
                       differs(d[0]), differs(d[1]), differs(d[2]), all ? "too" : "the same");
                ok &= good;
            }
        } else {  // out differs; lse too without the exponentials, bitwise as built without P V
            std::vector<float> got_out = cuda_download_float(out_v, nout), got_lse = cuda_download(lse_v, nlse);
            if (SKIP == 0) base_out = got_out, base_lse = got_lse;
            else {
                bool d_out = got_out != base_out, d_lse = memcmp(got_lse.data(), base_lse.data(), nlse * sizeof(float)) != 0;
                bool exp = SKIP & FLASH_SKIP_EXP, good = d_out && d_lse == exp;
                printf("%s %s: out %s, lse %s (expected: out differs, lse %s)\n", good ? "PASS" : "FAIL", tag.c_str(), differs(d_out),
                       differs(d_lse), exp ? "too" : "the same");
                ok &= good;
            }
        }
        if (time_it) {
            float ms = cuda_bench_ms(pass, 2, 10);
            if (SKIP == 0) base_ms[BWD] = ms;
            printf("ablate %s %s %s %.4f ms, %.1f TFLOP/s counted as the kernel as built", shape, dir, name, ms,
                   (BWD ? 2.5 * flops : flops) / (ms * 1e-3) / 1e12);
            if (SKIP != 0) printf(", %.3fx its time", ms / base_ms[BWD]);
            printf("\n");
        }
        fflush(stdout);
    };
    std::false_type fwd;
    std::true_type bwd;
    variant(fwd, Skip<0>(), "as_built");
    variant(fwd, Skip<FLASH_SKIP_EXP>(), "no_exp");
    variant(fwd, Skip<FLASH_SKIP_PV>(), "no_pv");
    variant(bwd, Skip<0>(), "as_built");
    variant(bwd, Skip<FLASH_SKIP_EXP>(), "no_exp");
    variant(bwd, Skip<FLASH_SKIP_DQ>(), "no_dq_product");
    variant(bwd, Skip<FLASH_SKIP_DQ_SUM>(), "no_dq_sum");
    variant(bwd, Skip<FLASH_SKIP_DQ | FLASH_SKIP_DQ_SUM>(), "no_dq");
    void* bufs[] = {qkv, dout, dqkv, out, out_v, lse, lse_v};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    attention_scratch_free(&s);
    return ok;
}

int main(int argc, char** argv) {
    bool validate_only = false, small = false, bench_only = false, flash_only = false, racecheck = false, ablation = false;
    const char* dump_path = NULL;  // --dump, opened once the flags are known to go together
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--validate-only") == 0) validate_only = true;
        else if (strcmp(argv[i], "--small") == 0) small = validate_only = true;
        else if (strcmp(argv[i], "--flash-only") == 0) flash_only = validate_only = true;
        else if (strcmp(argv[i], "--racecheck") == 0) racecheck = flash_only = validate_only = true;
        else if (strcmp(argv[i], "--bench-only") == 0) bench_only = true;
        else if (strcmp(argv[i], "--no-sm90") == 0) g_no_sm90 = true;
        else if (strcmp(argv[i], "--ablate") == 0) ablation = true;
        else if (strcmp(argv[i], "--dump") == 0 && i + 1 < argc) {
            dump_path = argv[++i];
        } else { fprintf(stderr, "usage: dev_attention [--validate-only] [--small] [--flash-only] [--racecheck] [--bench-only] [--no-sm90] [--dump FILE] | --ablate [--small]\n"); return 2; }
    }
    if (flash_only && bench_only) { fprintf(stderr, "dev_attention: --flash-only and --racecheck validate, --bench-only benchmarks: give one of them\n"); return 2; }
    if (ablation && (flash_only || bench_only || g_no_sm90 || dump_path || (validate_only && !small))) {
        fprintf(stderr, "dev_attention: --ablate takes only --small\n");
        return 2;
    }
    if (dump_path && !(g_dump = fopen(dump_path, "wb"))) { fprintf(stderr, "dev_attention: --dump: cannot create '%s'\n", dump_path); return 2; }
    if (!cuda_device_present()) { printf("SKIP dev_attention: no CUDA device\n"); return 77; }
    matmul_init();
    AttentionKind kinds[2] = {ATTENTION_FLASH, ATTENTION_CUBLAS};
    bool ok = true;
    if (ablation) {
        if (!flash_sm90_available(64) || !flash_sm90_available(128)) {
            printf("SKIP dev_attention.ablate: the wgmma kernels need a GPU of compute capability 9.0 and an sm_90a build\n");
        } else if (small) {  // the checks only, at two key blocks of the backward, GQA groups of 2
            ok &= ablate("hs64_T300", 1, 300, 2, 1, 64, false);
            ok &= ablate("hs128_T300", 1, 300, 4, 2, 128, false);
        } else {
            const char* presets[] = {"llama300m", "llama600m"};
            for (const char* name : presets) {
                LlamaConfig c = {};
                llama_preset(name, &c);
                ok &= ablate(name, 4, c.T, c.NH, c.NKV, llama_head_size(&c), true);
            }
        }
    } else if (racecheck) {
        struct { int B, T, NH, NKV, HS; } rc[] = {{1, 300, 6, 2, 32}, {1, 300, 2, 1, 64}, {1, 300, 4, 2, 128}, {1, 400, 3, 1, 16}};
        for (auto& o : rc) {
            std::string tag = "dev_attention.flash.racecheck_T" + std::to_string(o.T) + "_NH" + std::to_string(o.NH) + "_NKV" +
                              std::to_string(o.NKV) + "_HS" + std::to_string(o.HS);
            ok &= validate(tag.c_str(), ATTENTION_FLASH, o.B, o.T, o.NH, o.NKV, o.HS, true, 5);
            if (sm90_rows(o.HS)) ok &= validate(sm90_tag(tag).c_str(), ATTENTION_FLASH, o.B, o.T, o.NH, o.NKV, o.HS, true, 5, true);
        }
    } else if (!bench_only) {
        if (!flash_only) ok &= validate("dev_attention.cublas.odd_gqa3_HS24", ATTENTION_CUBLAS, 2, 37, 6, 2, 24, true, 3);
        // flash at odd T (tails of every tile kind), GQA groups of 1, 2 and 3, every head size
        // and T at a tile's edges (1, 63, 64, 65) and a long one (4096: 64 key tiles of the forward,
        // every pipeline stage many times over; 32 key blocks of the backward, each query tile's
        // dQ summed over up to 32 of them in turn) at head sizes 32, 64 and 128; several key
        // blocks of the backward (and GQA groups of 2 and 3) at HS 128 (T = 300) and 16 (T = 400)
        struct { int B, T, NH, NKV, HS; } odd[] = {{2, 37, 6, 2, 32}, {1, 100, 2, 2, 64}, {1, 70, 4, 2, 128}, {1, 130, 3, 1, 32}, {2, 77, 4, 2, 16},
                                                   {1, 1, 2, 1, 64}, {1, 63, 2, 1, 32}, {1, 64, 2, 2, 128}, {1, 65, 2, 1, 64}, {1, 4096, 1, 1, 64},
                                                   {1, 300, 4, 2, 128}, {1, 400, 3, 1, 16}};
        for (auto& o : odd) {
            std::string tag = "dev_attention.flash.odd_B" + std::to_string(o.B) + "_T" + std::to_string(o.T) + "_NH" + std::to_string(o.NH) +
                              "_NKV" + std::to_string(o.NKV) + "_HS" + std::to_string(o.HS);
            ok &= validate(tag.c_str(), ATTENTION_FLASH, o.B, o.T, o.NH, o.NKV, o.HS, true, 3);
            if (sm90_rows(o.HS)) ok &= validate(sm90_tag(tag).c_str(), ATTENTION_FLASH, o.B, o.T, o.NH, o.NKV, o.HS, true, 3, true);
            if (!flash_only) ok &= flash_vs_cublas((tag + ".vs_cublas").c_str(), o.B, o.T, o.NH, o.NKV, o.HS, 4);
        }
        const char* presets[] = {"tiny", "d12", "llama600m"};
        for (const char* name : presets) {
            if (small && strcmp(name, "tiny") != 0) continue;
            LlamaConfig c = {};
            llama_preset(name, &c);
            for (AttentionKind k : kinds) {
                if (flash_only && k != ATTENTION_FLASH) continue;
                std::string tag = std::string("dev_attention.") + attention_kind_name(k) + "." + name;
                ok &= validate(tag.c_str(), k, 1, c.T, c.NH, c.NKV, llama_head_size(&c), true, 60);
                if (k == ATTENTION_FLASH && sm90_rows(llama_head_size(&c)))
                    ok &= validate(sm90_tag(tag).c_str(), k, 1, c.T, c.NH, c.NKV, llama_head_size(&c), true, 60, true);
            }
        }
        // the real shapes, B=4 at the preset's T, on slices
        const char* real[] = {"d12", "llama600m", "llama300m"};
        for (const char* name : real) {
            if (small) break;
            LlamaConfig c = {};
            llama_preset(name, &c);
            for (AttentionKind k : kinds) {
                if (flash_only && k != ATTENTION_FLASH) continue;
                std::string tag = std::string("dev_attention.") + attention_kind_name(k) + "." + name + "_B4_T" + std::to_string(c.T);
                ok &= validate(tag.c_str(), k, 4, c.T, c.NH, c.NKV, llama_head_size(&c), false, 70);
                if (k == ATTENTION_FLASH && sm90_rows(llama_head_size(&c)))
                    ok &= validate(sm90_tag(tag).c_str(), k, 4, c.T, c.NH, c.NKV, llama_head_size(&c), false, 70, true);
            }
            if (flash_only) continue;
            std::string tag = std::string("dev_attention.flash.") + name + "_B4_T" + std::to_string(c.T) + ".vs_cublas";
            ok &= flash_vs_cublas(tag.c_str(), 4, c.T, c.NH, c.NKV, llama_head_size(&c), 71);
        }
    }
    if (!validate_only && !ablation) {
        // the presets at B=4 and their real T, then the reference shape of published flash kernels
        // (HS=128, T=4096; 16 heads)
        double ceiling = measured_gemm_flops();
        struct { const char* name; int T, NH, NKV, HS; } shapes[5];
        const char* all[] = {"tiny", "d12", "llama300m", "llama600m"};
        for (int i = 0; i < 4; i++) {
            LlamaConfig c = {};
            llama_preset(all[i], &c);
            shapes[i] = {all[i], c.T, c.NH, c.NKV, llama_head_size(&c)};
        }
        shapes[4] = {"hs128_t4096", 4096, 16, 16, 128};
        for (auto& sh : shapes) {
            float ms[2][2];
            for (int k = 0; k < 2; k++) bench(sh.name, kinds[k], 4, sh.T, sh.NH, sh.NKV, sh.HS, ceiling, ms[k]);
            printf("  %s B=4 T=%d HS=%d: cublas / flash time: forward %.2fx, backward %.2fx\n", sh.name, sh.T, sh.HS,
                   ms[1][0] / ms[0][0], ms[1][1] / ms[0][1]);
            fflush(stdout);
        }
    }
    matmul_free();
    if (g_dump && fclose(g_dump) != 0) { perror("dev_attention: --dump"); return 1; }
    return ok ? 0 : 1;
}
