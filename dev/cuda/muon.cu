// dev/cuda/muon.cu — llmc/muon.cuh (momentum, bf16 Newton–Schulz batched over layers with
// strided-batched cuBLASLt matmuls, weight update) against muon_update_cpu (llmc/muon.h, fp32), for the
// three presets, then a benchmark.
// Tolerances:
//   momentum M (fp32)            1e-6 max rel   (same fp32 formula)
//   weight change W - W0         6e-2 max rel, 3e-2 relative L2
//     the orthogonalization runs in bf16 with fp32 accumulation where the reference is fp32; an
//     emulation of exactly these roundings (numpy + ml_dtypes, Gaussian 384x128 ... 4096x768)
//     differs from fp64 by 1.6e-2 .. 2.1e-2 max rel and ~1.0e-2 relative L2
//   zero gradient and momentum   exactly W*(1 - lr*wd), no NaN
// These bounds are not yet measured on a GPU at llama300m's and llama600m's matrices (the
// emulation stopped at 4096x768).
// Shapes: every hidden matrix (rows x cols) of tiny, d12, llama300m and llama600m, i.e. the real
// shapes the trainer updates, wide, square and tall, so both orientations and the transposes are
// exercised:
//   tiny 256x128 (qkv, GQA), 128x128, 768x128, 128x384     d12 2304x768, 768x768, 4096x768, 768x2048
//   llama300m 3072x1024, 1024x1024, 5632x1024, 1024x2816    llama600m 4608x1536, 1536x1536,
//   8192x1536, 1536x4096
// each at batch 2 with a layer stride larger than the matrix for qkv (as megatron_core's q/k/v
// row blocks have), plus a zero gradient and an odd tall 97x33 at batch 3.
// Cost of the reference: muon_update_cpu's Newton–Schulz is 5 x (4 m^2 n + 2 m^3) flops per
// matrix: 0.85 TFLOP for llama600m's fc1 pair, 2.9 TFLOP in all. The GPU build runs its
// cblas_ssyrk / cblas_sgemm on cuBLAS in plain fp32 (dev/cuda/blas_shim): about a second with
// the operand copies; OpenBLAS on 16 cores would take a few seconds (estimated).
// The benchmark runs whole groups (batch L) of d12, llama300m and llama600m.
// Newton–Schulz four ways, on the same U, at every shape above:
//   version 1: the loop as first written, cublasGemmStridedBatchedEx (which accumulates into C
//              itself), so S and X were copied once each per iteration, S one product;
//   copies:    version 1's copies and in-place products on llmc/'s cuBLASLt plans (C = D), S and
//              P as llmc/'s;
//   one:       llmc/'s with S = X Xᵀ and P = c S S + b S each as one product (blocks = 1);
//   llmc/:     the same products with C and D apart, the iterate ping-ponging, nothing copied,
//              S and P in column blocks from the diagonal down, mirrored (where m % 128 == 0).
// llmc/'s must be bitwise the copies' (the same plans, only where C comes from differs); version 1
// and one may differ from it in the last bits on a GPU (cuBLAS's kernel against cuBLASLt's, or
// another shape's sum order for S and P; under dev/emu the GEMMs are OpenBLAS's fp32 sgemm, and
// the ways are bitwise at some of tiny's shapes and up to 2.6e-3 relative L2 apart at others),
// and must stay within 3e-2 relative L2 of llmc/'s (the bf16 bound above).
// Usage: build/dev_muon [--validate-only] [--small] [--compare]
//   --small: the zero gradient, the odd tall shape and tiny's matrices only (what dev/emu runs);
//   --compare: the Newton–Schulz of every group of llama300m and llama600m (batch L), version 1
//   against llmc/'s (COMPARE lines for dev/bench_small_kernels.sh; the copies' time in the note;
//   the bitwise check above, no CPU reference);
//   exit 0 ok, 1 failed, 2 bad usage, 77 no GPU (SKIP).
#include <cstring>
#include <string>
#include "../../llmc/llama.h"
#include "../../llmc/muon.h"
#include "../../llmc/muon.cuh"

static const double TOL_M = 1e-6;
static const double TOL_DW_MAX = 6e-2;
static const double TOL_DW_L2 = 3e-2;

// Version 1 of muon_newton_schulz (bf16 column-major GEMMs on cuBLAS, which accumulates into C):
// P <- S and X' <- X copied each iteration, then the products in place. Same contract as llmc/'s.
static void ns_gemm_v1(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                       const bf16* A, int lda, long long sa, const bf16* B, int ldb, long long sb, float beta, bf16* C, int ldc,
                       long long sc, int batch) {
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &alpha, A, CUDA_R_16BF, lda, sa, B, CUDA_R_16BF, ldb, sb,
                                            &beta, C, CUDA_R_16BF, ldc, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// copies_on_lt: the same loop on matmul_cublaslt, in place (C = D), so the copies are the only
// difference to llmc/'s
static bf16* newton_schulz_v1(MuonWorkspace* ws, cublasHandle_t h, int rows, int cols, int batch, const MuonConfig* cfg,
                              bool copies_on_lt) {
    const bool tall = rows > cols;
    const int m = tall ? cols : rows, n = tall ? rows : cols;
    const long long smn = (long long)m * n, smm = (long long)m * m;
    muon_frobenius_norm(ws->norms, ws->partials, ws->u, (size_t)rows * cols, batch, 0);
    dim3 tgrid(cuda_ceil_div(cols, MUON_TILE), cuda_ceil_div(rows, MUON_TILE), batch), tblock(MUON_TILE, 8);
    if (tall) muon_normalize_kernel<true><<<tgrid, tblock>>>(ws->x0, ws->u, ws->norms, rows, cols);
    else muon_normalize_kernel<false><<<tgrid, tblock>>>(ws->x0, ws->u, ws->norms, rows, cols);
    KERNEL_CHECK();
    bf16* cur = ws->x0;
    bf16* nxt = ws->x1;
    for (int it = 0; it < cfg->ns_steps; it++) {
        if (copies_on_lt) {
            muon_gram(ws->s, cur, m, n, batch, 0);
            CUDA_CHECK(cudaMemcpyAsync(ws->p, ws->s, (size_t)batch * smm * sizeof(bf16), cudaMemcpyDeviceToDevice, 0));
            muon_poly(ws->p, ws->s, m, batch, cfg->b, cfg->c, 0, MUON_GRAM_BLOCKS, ws->p);
            CUDA_CHECK(cudaMemcpyAsync(nxt, cur, (size_t)batch * smn * sizeof(bf16), cudaMemcpyDeviceToDevice, 0));
            matmul_cublaslt(nxt, CUDA_R_16BF, nxt, ws->p, cur, m, n, m, false, false, m, n, n, 1.0f, cfg->a, batch, smm, smn, smn, 0);
        } else {
            ns_gemm_v1(h, CUBLAS_OP_T, CUBLAS_OP_N, m, m, n, 1.0f, cur, n, smn, cur, n, smn, 0.0f, ws->s, m, smm, batch);
            CUDA_CHECK(cudaMemcpyAsync(ws->p, ws->s, (size_t)batch * smm * sizeof(bf16), cudaMemcpyDeviceToDevice, 0));
            ns_gemm_v1(h, CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, cfg->c, ws->s, m, smm, ws->s, m, smm, cfg->b, ws->p, m, smm, batch);
            CUDA_CHECK(cudaMemcpyAsync(nxt, cur, (size_t)batch * smn * sizeof(bf16), cudaMemcpyDeviceToDevice, 0));
            ns_gemm_v1(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, m, 1.0f, cur, n, smn, ws->p, m, smm, cfg->a, nxt, n, smn, batch);
        }
        bf16* t = cur; cur = nxt; nxt = t;
    }
    return cur;
}

static double rel_l2(const std::vector<float>& a, const std::vector<float>& ref) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < a.size(); i++) {
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return sqrt(num / std::max(den, 1e-300));
}

// The three Newton–Schulz versions (see the header) on one random U (batch, rows, cols): llmc/'s
// bitwise the copies', version 1 within TOL_DW_L2 of llmc/'s (bitwise where it is).
static bool ns_versions_agree(const char* tag, MuonPreset preset, int rows, int cols, int batch, uint64_t seed) {
    MuonConfig cfg = muon_config(preset);
    size_t n = (size_t)batch * rows * cols;
    std::vector<float> u = cuda_host_uniform(n, seed, 1e-3f);
    MuonWorkspace ws;
    muon_workspace_init(&ws);
    muon_workspace_reserve(&ws, rows, cols, batch);
    CUDA_CHECK(cudaMemcpy(ws.u, u.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    std::vector<bf16> x[4];
    for (int v = 0; v < 4; v++) {  // llmc/'s, the copies on cuBLASLt, version 1, one product each
        bf16* xv = v == 0 ? muon_newton_schulz(&ws, rows, cols, batch, &cfg, 0)
                 : v == 3 ? muon_newton_schulz(&ws, rows, cols, batch, &cfg, 0, 1)
                          : newton_schulz_v1(&ws, h, rows, cols, batch, &cfg, v == 1);
        x[v] = cuda_download(xv, n);
    }
    CUBLAS_CHECK(cublasDestroy(h));
    muon_workspace_free(&ws);
    bool same_copies = memcmp(x[0].data(), x[1].data(), n * sizeof(bf16)) == 0;
    std::vector<float> f0(n), fv(n);
    for (size_t i = 0; i < n; i++) f0[i] = cuda_host_float(x[0][i]);
    printf("%s %s.newton_schulz_bitwise_copies_on_cublaslt\n", same_copies ? "PASS" : "FAIL", tag);
    bool ok = same_copies;
    for (int v : {2, 3}) {
        bool same = memcmp(x[0].data(), x[v].data(), n * sizeof(bf16)) == 0;
        for (size_t i = 0; i < n; i++) fv[i] = cuda_host_float(x[v][i]);
        double l2 = rel_l2(fv, f0);
        printf("%s %s.newton_schulz_%s_near: %s, relative L2 %.3e (tol %.0e)\n", l2 <= TOL_DW_L2 ? "PASS" : "FAIL", tag,
               v == 2 ? "v1" : "one_product_s_and_p", same ? "bitwise" : "not bitwise", l2, TOL_DW_L2);
        ok &= l2 <= TOL_DW_L2;
    }
    return ok;
}

// batch matrices (rows, cols) at stride `stride` >= rows*cols inside flat buffers of batch*stride
static bool validate(const char* tag, MuonPreset preset, int rows, int cols, int batch, size_t stride, uint64_t seed, bool zero) {
    std::string t = tag;
    MuonConfig cfg = muon_config(preset);
    size_t total = (size_t)batch * stride, rc = (size_t)rows * cols;
    std::vector<float> W0 = cuda_host_uniform(total, seed, 0.02f);
    std::vector<float> G = cuda_host_uniform(total, seed + 1, zero ? 0.0f : 1e-3f);
    std::vector<float> M = cuda_host_uniform(total, seed + 2, zero ? 0.0f : 1e-3f);
    const float lr = 0.02f, wd = 0.1f;
    float* d_W = cuda_upload(W0.data(), total);
    bf16* d_W16 = cuda_malloc<bf16>(total);
    float* d_G = cuda_upload(G.data(), total);
    float* d_M = cuda_upload(M.data(), total);
    MuonWorkspace ws;
    muon_workspace_init(&ws);
    muon_update(d_W, d_W16, d_G, 1.0f, d_M, rows, cols, batch, stride, &cfg, lr, wd, &ws, 0);
    std::vector<float> W = W0;
    std::vector<float> scratch(muon_scratch_floats(rows, cols));
    for (int l = 0; l < batch; l++)
        muon_update_cpu(W.data() + l * stride, G.data() + l * stride, M.data() + l * stride, rows, cols, &cfg, lr, wd, scratch.data());
    std::vector<float> gW = cuda_download(d_W, total), gM = cuda_download(d_M, total);
    std::vector<float> g16 = cuda_download_float(d_W16, total);
    bool ok = true;
    // only the matrices' elements: the gap between them (stride > rows*cols) must be untouched
    std::vector<float> dg, dr, mg, mr;
    bool gap_ok = true, copy_ok = true;
    for (int l = 0; l < batch; l++) {
        for (size_t i = 0; i < stride; i++) {
            size_t k = l * stride + i;
            if (i < rc) {
                dg.push_back(gW[k] - W0[k]); dr.push_back(W[k] - W0[k]);
                mg.push_back(gM[k]); mr.push_back(M[k]);
                copy_ok &= g16[k] == cuda_host_float(cuda_host_bf16(gW[k]));
            } else {
                gap_ok &= gW[k] == W0[k] && gM[k] == M[k];
            }
        }
    }
    if (zero) {
        bool exact = true;
        for (size_t i = 0; i < dg.size(); i++) exact &= std::isfinite(dg[i]) && dg[i] == dr[i];
        printf("%s %s.zero_gradient_exact\n", exact ? "PASS" : "FAIL", tag);
        ok &= exact;
    } else {
        ok &= cuda_check_close((t + ".momentum").c_str(), mg.data(), mr.data(), mg.size(), TOL_M);
        ok &= cuda_check_close((t + ".weight_change").c_str(), dg.data(), dr.data(), dg.size(), TOL_DW_MAX);
        double l2 = rel_l2(dg, dr);
        bool l2_ok = l2 <= TOL_DW_L2;
        printf("%s %s.weight_change_l2: relative L2 %.3e (tol %.0e)\n", l2_ok ? "PASS" : "FAIL", tag, l2, TOL_DW_L2);
        ok &= l2_ok;
    }
    if (!zero) ok &= ns_versions_agree(tag, preset, rows, cols, batch, seed + 3);
    printf("%s %s.layer_gap_untouched\n", gap_ok ? "PASS" : "FAIL", tag);
    printf("%s %s.bf16_copy_exact\n", copy_ok ? "PASS" : "FAIL", tag);
    ok &= gap_ok && copy_ok;
    void* bufs[] = {d_W, d_W16, d_G, d_M};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    muon_workspace_free(&ws);
    return ok;
}

static void bench(const char* preset, const char* what_name, int rows, int cols, int batch) {
    size_t total = (size_t)batch * rows * cols;
    float *W = cuda_malloc<float>(total), *G = cuda_malloc<float>(total), *M = cuda_malloc<float>(total);
    bf16* W16 = cuda_malloc<bf16>(total);
    cuda_fill_uniform(W, total, 1, 0.02f);
    cuda_fill_uniform(G, total, 2, 1e-3f);
    cuda_fill_uniform(M, total, 3, 1e-3f);
    MuonConfig cfg = muon_config(MUON_MOONLIGHT);
    MuonWorkspace ws;
    muon_workspace_init(&ws);
    float ms = cuda_bench_ms([&] { muon_update(W, W16, G, 1.0f, M, rows, cols, batch, (size_t)rows * cols, &cfg, 1e-3f, 0.1f, &ws, 0); }, 2, 10);
    double m = std::min(rows, cols), n = std::max(rows, cols);
    double flops = (4.0 * m * m * n + 2.0 * m * m * m) * cfg.ns_steps * batch;
    char what[96];
    snprintf(what, sizeof(what), "%s muon_update %s %dx%d x%d", preset, what_name, rows, cols, batch);
    cuda_print_bench(what, ms, 0, flops);
    void* bufs[] = {W, G, M, W16};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    muon_workspace_free(&ws);
}

// Newton–Schulz of one group (batch matrices (rows, cols)), version 1 against llmc/'s
static bool compare(const char* preset, const char* what_name, int rows, int cols, int batch) {
    MuonConfig cfg = muon_config(MUON_MOONLIGHT);
    MuonWorkspace ws;
    muon_workspace_init(&ws);
    muon_workspace_reserve(&ws, rows, cols, batch);
    cuda_fill_uniform(ws.u, (size_t)batch * rows * cols, 7, 1e-3f);
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    size_t n = (size_t)batch * rows * cols;
    std::vector<bf16> x2 = cuda_download(muon_newton_schulz(&ws, rows, cols, batch, &cfg, 0), n);
    std::vector<bf16> xc = cuda_download(newton_schulz_v1(&ws, h, rows, cols, batch, &cfg, true), n);
    bool same = memcmp(x2.data(), xc.data(), n * sizeof(bf16)) == 0;
    printf("%s dev_muon.compare.%s.%s.newton_schulz_bitwise_copies_on_cublaslt\n", same ? "PASS" : "FAIL", preset, what_name);
    float ms1 = cuda_bench_ms([&] { newton_schulz_v1(&ws, h, rows, cols, batch, &cfg, false); }, 2, 10);
    float msc = cuda_bench_ms([&] { newton_schulz_v1(&ws, h, rows, cols, batch, &cfg, true); }, 2, 10);
    float ms2 = cuda_bench_ms([&] { muon_newton_schulz(&ws, rows, cols, batch, &cfg, 0); }, 2, 10);
    float ms_one = cuda_bench_ms([&] { muon_newton_schulz(&ws, rows, cols, batch, &cfg, 0, 1); }, 2, 10);
    matmul_set_tune(MATMUL_TUNE_OFF);  // v2 on the heuristic's first algorithms: the copies' share apart from autotuning's
    float ms_off = cuda_bench_ms([&] { muon_newton_schulz(&ws, rows, cols, batch, &cfg, 0); }, 2, 10);
    matmul_set_tune(MATMUL_TUNE_EXACT);
    char shape[96], note[240];
    snprintf(shape, sizeof(shape), "%s %s %dx%d x%d, %d iterations", preset, what_name, rows, cols, batch, cfg.ns_steps);
    snprintf(note, sizeof(note), "v1 cuBLAS + 2 copies an iteration; v2 cuBLASLt ping-pong, autotuned, S and P in column blocks "
             "(as one product each %.4f ms; untuned %.4f ms; with the copies %.4f ms)", ms_one, ms_off, msc);
    cuda_print_compare("muon_newton_schulz", shape, ms1, ms2, note);
    CUBLAS_CHECK(cublasDestroy(h));
    muon_workspace_free(&ws);
    return same;
}

int main(int argc, char** argv) {
    bool validate_only = false, small = false, compare_only = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--validate-only") == 0) validate_only = true;
        else if (strcmp(argv[i], "--small") == 0) small = validate_only = true;
        else if (strcmp(argv[i], "--compare") == 0) compare_only = true;
        else { fprintf(stderr, "usage: dev_muon [--validate-only] [--small] [--compare]\n"); return 2; }
    }
    if (!cuda_device_present()) { printf("SKIP dev_muon: no CUDA device\n"); return 77; }
    const char* presets[] = {"tiny", "d12", "llama300m", "llama600m"};
    const int npresets = 4;
    if (compare_only) {
        bool ok = true;
        for (int pi = 2; pi < npresets; pi++) {
            LlamaConfig c = {};
            llama_preset(presets[pi], &c);
            int HSNH = llama_head_size(&c) * c.NH, QKV = llama_qkv_channels(&c);
            ok &= compare(presets[pi], "qkv", QKV, c.C, c.L);
            ok &= compare(presets[pi], "proj", c.C, HSNH, c.L);
            ok &= compare(presets[pi], "fc1", 2 * c.FF, c.C, c.L);
            ok &= compare(presets[pi], "fc2", c.C, c.FF, c.L);
        }
        matmul_free();
        return ok ? 0 : 1;
    }
    const MuonPreset muon_presets[3] = {MUON_MOONLIGHT, MUON_KELLER, MUON_MEGATRON_CORE};
    bool ok = validate("dev_muon.zero_gradient", MUON_MOONLIGHT, 96, 40, 2, 96 * 40, 5, true);
    ok &= validate("dev_muon.odd_tall_97x33", MUON_KELLER, 97, 33, 3, 97 * 33 + 5, 6, false);
    uint64_t seed = 100;
    for (int pi = 0; pi < (small ? 1 : npresets); pi++) {
        LlamaConfig c = {};
        llama_preset(presets[pi], &c);
        int HSNH = llama_head_size(&c) * c.NH, QKV = llama_qkv_channels(&c);
        struct { const char* name; int rows, cols; } mats[4] = {
            {"qkv", QKV, c.C}, {"proj", c.C, HSNH}, {"fc1", 2 * c.FF, c.C}, {"fc2", c.C, c.FF}};
        for (int k = 0; k < 4; k++) {
            MuonPreset mp = muon_presets[(pi + k) % 3];  // every preset on every preset's shapes, in turn
            std::string tag = std::string("dev_muon.") + presets[pi] + "." + mats[k].name + "." + muon_preset_name(mp);
            size_t stride = (size_t)mats[k].rows * mats[k].cols + (k == 0 ? 64 : 0);
            ok &= validate(tag.c_str(), mp, mats[k].rows, mats[k].cols, 2, stride, seed += 10, false);
        }
    }
    if (!validate_only) {
        for (int pi = 1; pi < npresets; pi++) {
            LlamaConfig c = {};
            llama_preset(presets[pi], &c);
            int HSNH = llama_head_size(&c) * c.NH, QKV = llama_qkv_channels(&c);
            bench(presets[pi], "qkv", QKV, c.C, c.L);
            bench(presets[pi], "proj", c.C, HSNH, c.L);
            bench(presets[pi], "fc1", 2 * c.FF, c.C, c.L);
            bench(presets[pi], "fc2", c.C, c.FF, c.L);
        }
    }
    matmul_free();
    return ok ? 0 : 1;
}
