// dev/cuda/geofp8.cu — llmc/geofp8.cuh (and the one-rank path of llmc/comm.cuh) against the CPU
// reference llmc/geofp8.h, then a benchmark of every kernel at the llama600m layout.
//
// What must be bitwise the CPU's (compared bit for bit; a NaN equals any NaN, since the GPU's
// arithmetic returns the canonical NaN where x86 keeps the payload):
//   amax per unit and per 512-block, exponents and scales (also a sweep over special and random
//   amax values and world sizes 1..1000), FP8 codes (E4M3, and E5M2 on the smaller cases),
//   error-feedback residuals, saturation / underflow / nonzero counts, dequantized averages and
//   the count of codes at the format's max after the sum, the
//   two-phase server sum / re-quantization / server residual / dequantization, the skip rule on
//   non-finite gradients (nothing written), the bf16 and fp32 averages, the residual add.
//   Unit tables: an "odd" table (unit sizes 0, 1, 3, 513, a chunk + 7, several chunks; offsets not
//   multiples of 4; gaps between units that must stay untouched; a few exact zeros so that the
//   nonzero count is exercised), tiny and llama600m from llama_units(). Ranks are simulated on one
//   GPU: the MAX and FP8 SUM all-reduces are done on the host exactly as comm.h's MPI operators.
// Within fp32 tolerance (max |gpu - cpu| / max |cpu|; cuBLAS and OpenBLAS sum in different orders):
//   whiten, unwhiten, carry of the residual, sketch Y, K-FAC accumulate / whiten / unwhiten:  TOL_GEMM 1e-4
//     (measured rounding is ~1e-6; a wrong transpose or operand gives O(1))
//   tr(A) (double sums in a different order):                                                 TOL_TRACE 1e-12 relative
//   the fidelity sums (a unit of up to 6.4M elements summed sequentially in double on the
//     host: its own rounding reaches n·2^-53 ~ 1e-9; 5.4e-12 on tiny under dev/emu):           TOL_SUMS 1e-9 relative
//   Nyström λ, σ², D, c, ε and the K-FAC Cholesky factor (both in double, stored fp32):        TOL_FACTOR 1e-5
//   Nyström U: every column parallel to the CPU's up to sign, 1 - |<u_gpu, u_cpu>| <= TOL_FACTOR;
//     the transform G T with the GPU factor against the CPU factor:                            TOL_GEMM
//   the whole step through the GeoFP8Device phases (two simulated ranks, geometry on every fc2):
//     X = G T + R within TOL_GEMM; then, continuing from the GPU's X, the summed codes, the
//     residuals and the non-geometry averages bitwise, the un-whitened averages within TOL_GEMM.
// Under dev/emu (cuBLAS emulated with OpenBLAS), every tolerance above holds with a margin of at
// least 97x over the worst case across five OpenBLAS kernel families (dev/tolerance_sweep.py:
// K-FAC accumulate in bf16 1.0e-6, Nyström U columns 5.7e-8, fidelity sums 5.4e-12); not yet
// measured against cuBLAS on a GPU.
// Usage: build/dev_geofp8 [--validate-only] [--small]   exit 0 ok, 1 failed, 2 bad usage, 77 no GPU (SKIP).
//   --small: validations only, without the llama600m-sized cases (what the CPU emulation runs).
// Build: nvcc -O3 -std=c++17 -arch=sm_90 --expt-relaxed-constexpr -Xcompiler -fopenmp dev/cuda/geofp8.cu
//        -o build/dev_geofp8 -lcublas -lcublasLt -lcusolver -lnccl -lopenblas -llapacke -lgomp
//        $(mpicxx --showme:compile) $(mpicxx --showme:link)
#include <cstdarg>
#include <cstring>
#include <string>
#include "../../llmc/llama.h"
#include "../../llmc/geofp8.h"
#include "../../llmc/geofp8.cuh"
#include "../../llmc/geofp8_refresh.cuh"
#include "../../llmc/comm.cuh"
#include "dev_flags.h"

static const double TOL_GEMM = 1e-4;
static const double TOL_TRACE = 1e-12;
static const double TOL_SUMS = 1e-9;
static const double TOL_FACTOR = 1e-5;

static int g_failures = 0;

static bool check(const std::string& name, bool ok, const char* fmt = "", ...) {
    char detail[512] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    if (ok) printf("PASS %s%s%s\n", name.c_str(), detail[0] ? ": " : "", detail);
    else printf("FAIL %s: %s\n", name.c_str(), detail);
    fflush(stdout);
    if (!ok) g_failures++;
    return ok;
}

// A tolerance check, in the line format of test_bound (test/test_util.h): measured <= bound.
static bool check_bound(const std::string& name, double measured, double bound, const char* what) {
    bool ok = measured <= bound;
    printf("%s %s: measured %.3e, bound %.3g (%s)\n", ok ? "PASS" : "FAIL", name.c_str(), measured, bound, what);
    fflush(stdout);
    if (!ok) g_failures++;
    return ok;
}

static bool check_close(const std::string& name, const float* got, const float* ref, size_t n, double tol) {
    bool ok = cuda_check_close(name.c_str(), got, ref, n, tol);
    if (!ok) g_failures++;
    return ok;
}

// Bit equality; for floats any NaN equals any NaN (the GPU's arithmetic returns the canonical
// NaN 0x7FFFFFFF where x86 keeps the operand's payload).
template <typename T>
static inline bool same_bits(const T& a, const T& b) { return memcmp(&a, &b, sizeof(T)) == 0; }
template <>
inline bool same_bits<float>(const float& a, const float& b) { return memcmp(&a, &b, sizeof(float)) == 0 || (a != a && b != b); }

// Number of elements whose bits differ; *first = the first such index.
template <typename T>
static size_t bit_mismatches(const T* a, const T* b, size_t n, size_t* first = NULL) {
    size_t bad = 0, f = (size_t)-1;
    #pragma omp parallel for reduction(+ : bad) reduction(min : f) schedule(static)
    for (size_t i = 0; i < n; i++)
        if (!same_bits(a[i], b[i])) { bad++; if (i < f) f = i; }
    if (first) *first = f;
    return bad;
}

template <typename T>
static bool check_bits(const std::string& name, const T* got, const T* ref, size_t n) {
    size_t first = 0, bad = bit_mismatches(got, ref, n, &first);
    if (bad == 0) return check(name, true, "%zu values bitwise equal", n);
    return check(name, false, "%zu of %zu values differ, first at %zu", bad, n, first);
}

static double rel_l2(const float* a, const float* ref, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return sqrt(num / std::max(den, 1e-300));
}

// ----------------------------------------------------------------------------
// random data: a stateless hash, so OpenMP fills are reproducible

static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline double u01(uint64_t seed, uint64_t i) { return (double)(mix64(seed * 0x9E3779B97F4A7C15ull + i) >> 11) * (1.0 / 9007199254740992.0); }

// Gradient-like values: per unit a magnitude 10^-(u % 6) * 1e-2, per element sign * 10^(-7 v)
// (a 1e7 dynamic range, so some elements underflow E4M3 and the largest set the scale), never
// zero; zero_every > 0 puts an exact zero every zero_every elements.
static void fill_grad(float* x, const GeoFP8UnitTable& t, uint64_t seed, size_t zero_every) {
    for (size_t u = 0; u < t.offset.size(); u++) {
        const size_t off = t.offset[u], n = t.size[u];
        const float unit_scale = 1e-2f * powf(10.0f, -(float)(u % 6));
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            double a = u01(seed, off + i), b = u01(seed + 1, off + i);
            float v = unit_scale * (float)pow(10.0, -7.0 * a);
            x[off + i] = b < 0.5 ? -v : v;
            if (zero_every && (off + i) % zero_every == 0) x[off + i] = 0.0f;
        }
    }
}

static std::vector<float> normal_vec(size_t n, uint64_t seed, float scale) {
    std::vector<float> v(n);
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        double a = std::max(u01(seed, 2 * i), 1e-300), b = u01(seed, 2 * i + 1);
        v[i] = scale * (float)(sqrt(-2.0 * log(a)) * cos(6.283185307179586 * b));
    }
    return v;
}

// Activations h (n, d) with a decaying covariance spectrum (standard deviations 0.9^j + 0.02, so
// the top eigenvalues are well separated) in a random basis: h = g diag(s) H1 H2 H3, Householder
// reflections H = I - 2 v vᵀ with random unit v (a dense orthogonal basis in O(n d)).
static std::vector<float> activations(int n, int d, uint64_t seed) {
    std::vector<float> h = normal_vec((size_t)n * d, seed, 1.0f);
    for (int t = 0; t < n; t++)
        for (int j = 0; j < d; j++) h[(size_t)t * d + j] *= powf(0.9f, (float)j) + 0.02f;
    for (int k = 0; k < 3; k++) {
        std::vector<float> v = normal_vec(d, seed + 11 + k, 1.0f);
        double nv = 0.0;
        for (float a : v) nv += (double)a * a;
        for (float& a : v) a = (float)(a / sqrt(nv));
        #pragma omp parallel for schedule(static)
        for (int t = 0; t < n; t++) {
            float* ht = h.data() + (size_t)t * d;
            double dot = 0.0;
            for (int j = 0; j < d; j++) dot += (double)ht[j] * v[j];
            for (int j = 0; j < d; j++) ht[j] -= (float)(2.0 * dot) * v[j];
        }
    }
    return h;
}

struct Layout {
    std::string name;
    std::vector<size_t> offset, size;
    std::vector<int> rows, cols;
    std::vector<int> ef_units;  // units given an error-feedback residual
    size_t total;
    size_t zero_every;
};

static Layout layout_llama(const char* preset) {
    LlamaConfig c = {};
    llama_preset(preset, &c);
    Layout L;
    L.name = preset;
    for (const LlamaUnit& u : llama_units(&c)) {
        L.offset.push_back(u.offset);
        L.size.push_back((size_t)u.rows * u.cols);
        L.rows.push_back(u.rows);
        L.cols.push_back(u.cols);
        if (u.tensor == T_FC2W) L.ef_units.push_back((int)L.offset.size() - 1);
    }
    L.total = llama_num_params(&c);
    L.zero_every = 0;
    return L;
}

static Layout layout_odd() {
    Layout L;
    L.name = "odd";
    struct { size_t off; int rows, cols; } u[] = {
        {5, 1, 1}, {8, 27, 19}, {600, 16391, 1}, {17100, 1, 3}, {17110, 200, 200},
        {57200, 1, 512}, {57712, 0, 7}, {57719, 97, 61}, {63640, 3, 171}};
    for (auto& x : u) {
        L.offset.push_back(x.off);
        L.size.push_back((size_t)x.rows * x.cols);
        L.rows.push_back(x.rows);
        L.cols.push_back(x.cols);
    }
    L.ef_units = {1, 4, 7};
    L.total = 64200;
    L.zero_every = 997;
    return L;
}

// the host side of one FP8 SUM all-reduce: acc = fp8(decode(q_r) + decode(acc)), ranks in order
static void host_fp8_sum(Fp8Format f, std::vector<uint8_t>& acc, const std::vector<uint8_t>& q) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < acc.size(); i++) acc[i] = fp8_sum_codes(f, q[i], acc[i]);
}

// the tag suffix of a format: none for E4M3 (the default), ".e5m2" for E5M2
static std::string fmt_tag(Fp8Format f) { return f == FP8_E4M3 ? "" : std::string(".") + fp8_format_name(f); }

// ----------------------------------------------------------------------------
// 1. scale exponents: a sweep against geofp8_scale_exponent

static void validate_scales(Fp8Format f) {
    std::vector<float> amax = {0.0f, -0.0f, FLT_MIN, FLT_MAX, INFINITY, -INFINITY, NAN, -1.0f, 1e-45f, 1.4e-45f, 448.0f, 224.0f, 896.0f,
                               447.99997f, 448.00003f, 1.0f, 3.0f, 0.5f, 1e-38f, 1e38f, 7.0e-39f, 2.0f, 1.17549435e-38f};
    for (int e = -149; e <= 127; e++) {
        float p = ldexpf(1.0f, e);
        amax.push_back(p);
        amax.push_back(nextafterf(p, 0.0f));
        amax.push_back(nextafterf(p, INFINITY));
        const float top = fp8_format_max(f);
        amax.push_back(top * p);
        amax.push_back(nextafterf(top * p, INFINITY));
        amax.push_back(nextafterf(top * p, 0.0f));
    }
    const size_t nrand = 1 << 20;
    for (size_t i = 0; i < nrand; i++) {
        uint32_t bits = (uint32_t)(mix64(0xABCDEFull + i) >> 32) & 0x7FFFFFFFu;  // every non-negative bit pattern (NaN/Inf included)
        amax.push_back(fp8_bits_float(bits));
    }
    const size_t n = amax.size();
    float* d_amax = cuda_upload(amax.data(), n);
    float* d_scale = cuda_malloc<float>(n);
    int* d_exps = cuda_malloc<int>(n);
    float* d_skip = cuda_malloc<float>(1);
    int worlds[] = {1, 2, 3, 4, 7, 8, 12, 13, 16, 32, 64, 1000};
    for (int N : worlds) {
        geofp8_block_scales(f, d_scale, d_exps, d_skip, d_amax, n, N, 0);
        std::vector<float> gs = cuda_download(d_scale, n), gskip = cuda_download(d_skip, 1);
        std::vector<int> ge = cuda_download(d_exps, n);
        std::vector<float> cs(n);
        size_t bad = geofp8_block_scales(f, cs.data(), amax.data(), n, N);
        std::vector<int> ce(n);
        for (size_t i = 0; i < n; i++) {
            int e = geofp8_scale_exponent(f, amax[i], N);
            ce[i] = e == GEOFP8_EXP_SKIP ? 0 : e;
        }
        std::string tag = "dev_geofp8.scales" + fmt_tag(f) + ".N" + std::to_string(N);
        check_bits(tag + ".exponents", ge.data(), ce.data(), n);
        check_bits(tag + ".scales", gs.data(), cs.data(), n);
        check(tag + ".skip", (gskip[0] != 0.0f) == (bad > 0), "gpu %g, cpu %zu non-finite", gskip[0], bad);
    }
    void* bufs[] = {d_amax, d_scale, d_exps, d_skip};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
}

// ----------------------------------------------------------------------------
// 2. the native FP8 path on a unit table: amax, scales, quantize + EF + counts, sum, dequantize

static void validate_native(const Layout& L, int world, int block_mode, uint64_t seed, Fp8Format f) {
    const std::string tag = "dev_geofp8.native" + fmt_tag(f) + "." + L.name + (block_mode ? ".block" : ".unit") + ".N" + std::to_string(world);
    const size_t P = L.total, U = L.offset.size();
    GeoFP8Device g;
    geofp8_device_init(&g, L.offset, L.size, P, world, 0, block_mode, 0, f);
    for (int u : L.ef_units) geofp8_device_add_unit(&g, u, L.rows[u], L.cols[u], 32, 0);
    const GeoFP8UnitTable& t = g.units;
    const size_t G = (size_t)g.num_groups;
    std::vector<float> x(P);
    float* d_x = cuda_malloc<float>(P);
    // per rank: amax (GPU against CPU), then the MAX over ranks
    std::vector<float> gmax(G, 0.0f);
    bool amax_ok = true;
    for (int r = 0; r < world; r++) {
        fill_grad(x.data(), t, seed + 100 * r, L.zero_every);
        CUDA_CHECK(cudaMemcpy(d_x, x.data(), P * sizeof(float), cudaMemcpyHostToDevice));
        if (block_mode) geofp8_block_amax_units(g.amax, d_x, &t, 0);
        else geofp8_amax_units(g.amax, d_x, &t, 0);
        std::vector<float> ga = cuda_download(g.amax, G), ca(G);
        for (size_t u = 0; u < U; u++) {
            if (block_mode) geofp8_block_amax(ca.data() + t.first_block[u], x.data() + L.offset[u], L.size[u], GEOFP8_BLOCK);
            else ca[u] = geofp8_amax(x.data() + L.offset[u], L.size[u]);
        }
        amax_ok &= bit_mismatches(ga.data(), ca.data(), G) == 0;
        for (size_t i = 0; i < G; i++) gmax[i] = std::max(gmax[i], ca[i]);
    }
    check(tag + ".amax", amax_ok, "%zu scale groups x %d ranks", G, world);
    // scales from the reduced amax
    CUDA_CHECK(cudaMemcpy(g.amax, gmax.data(), G * sizeof(float), cudaMemcpyHostToDevice));
    geofp8_device_scales(&g, 0);
    std::vector<float> gs = cuda_download(g.scale, G), cs(G);
    std::vector<int> ge = cuda_download(g.exps, G), ce(G);
    size_t bad = geofp8_block_scales(f, cs.data(), gmax.data(), G, world);
    for (size_t i = 0; i < G; i++) ce[i] = geofp8_scale_exponent(f, gmax[i], world);
    check_bits(tag + ".scales", gs.data(), cs.data(), G);
    check_bits(tag + ".exponents", ge.data(), ce.data(), G);
    check(tag + ".no_skip", bad == 0 && cuda_download(g.skip, 1)[0] == 0.0f, "");
    // quantize each rank with error feedback on L.ef_units, sum the codes
    std::vector<uint8_t> sum(P, 0), q_cpu(P);
    std::vector<long> sat(U), und(U), nz(U);
    bool codes_ok = true, res_ok = true, counts_ok = true, gaps_ok = true;
    for (int r = 0; r < world; r++) {
        fill_grad(x.data(), t, seed + 100 * r, L.zero_every);
        CUDA_CHECK(cudaMemcpy(d_x, x.data(), P * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemset(g.q, 0xAB, P));
        for (const GeoFP8DeviceUnit& gu : g.geo) CUDA_CHECK(cudaMemset(gu.residual, 0xFF, L.size[gu.unit] * sizeof(float)));
        CUDA_CHECK(cudaMemset(g.counts, 0, 4 * U * sizeof(unsigned long long)));
        geofp8_device_quantize(&g, d_x, 1, 0);
        std::vector<uint8_t> gq = cuda_download(g.q, P);
        geofp8_device_read_stats(&g, sat.data(), und.data(), nz.data(), NULL, 0);
        std::vector<uint8_t> in_unit(P, 0);
        for (size_t u = 0; u < U; u++) {
            const size_t off = L.offset[u], n = L.size[u];
            memset(in_unit.data() + off, 1, n);
            const int gi = g.unit_to_geo[u];
            std::vector<float> res(gi >= 0 ? n : 0);
            long cs_ = 0, cu_ = 0, cn_ = 0;
            if (block_mode) {
                const float* sc = cs.data() + t.first_block[u];
                geofp8_quantize_ef_block(f, q_cpu.data() + off, gi >= 0 ? res.data() : NULL, x.data() + off, n, GEOFP8_BLOCK, sc);
                // gradcomm_native's per-block counting; parallel over blocks (each inner call then runs serially)
                const long nb = (long)geofp8_num_blocks(n, GEOFP8_BLOCK);
                #pragma omp parallel for reduction(+ : cs_, cu_, cn_) schedule(static)
                for (long b = 0; b < nb; b++) {
                    size_t o = (size_t)b * GEOFP8_BLOCK, len = std::min((size_t)GEOFP8_BLOCK, n - o);
                    long s1, u1, n1;
                    geofp8_count_saturated_underflow(f, x.data() + off + o, len, sc[b], &s1, &u1, &n1);
                    cs_ += s1; cu_ += u1; cn_ += n1;
                }
            } else {
                geofp8_quantize_ef(f, q_cpu.data() + off, gi >= 0 ? res.data() : NULL, x.data() + off, n, cs[u]);
                geofp8_count_saturated_underflow(f, x.data() + off, n, cs[u], &cs_, &cu_, &cn_);
            }
            codes_ok &= bit_mismatches(gq.data() + off, q_cpu.data() + off, n) == 0;
            counts_ok &= sat[u] == cs_ && und[u] == cu_ && nz[u] == cn_;
            if (gi >= 0) {
                std::vector<float> gr = cuda_download(g.geo[gi].residual, n);
                res_ok &= bit_mismatches(gr.data(), res.data(), n) == 0;
            }
        }
        for (size_t i = 0; i < P; i++)
            if (!in_unit[i]) { gaps_ok &= gq[i] == 0xAB; q_cpu[i] = 0; gq[i] = 0; }
        if (r == 0) sum = gq;
        else host_fp8_sum(f, sum, gq);
    }
    long und_total = 0, nz_total = 0;
    for (size_t u = 0; u < U; u++) { und_total += und[u]; nz_total += nz[u]; }
    check(tag + ".codes", codes_ok, "");
    check(tag + ".residuals", res_ok, "%zu error-feedback units", g.geo.size());
    check(tag + ".counts", counts_ok, "last rank: %ld of %ld nonzero underflow", und_total, nz_total);
    check(tag + ".gaps_untouched", gaps_ok, "");
    // dequantize the summed codes
    float* d_out = cuda_malloc<float>(P);
    CUDA_CHECK(cudaMemset(d_out, 0x7F, P * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(g.q, sum.data(), P, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(g.counts, 0, 4 * U * sizeof(unsigned long long)));
    geofp8_dequantize_units(f, d_out, g.q, g.scale, block_mode, world, &t, g.counts + 3 * U, 0);
    std::vector<float> go = cuda_download(d_out, P), co(P);
    std::vector<long> ssat(U);
    geofp8_device_read_stats(&g, NULL, NULL, NULL, ssat.data(), 0);
    bool out_ok = true, ssat_ok = true;
    long ssat_total = 0;
    std::vector<uint8_t> in_unit(P, 0);
    for (size_t u = 0; u < U; u++) {
        const size_t off = L.offset[u], n = L.size[u];
        memset(in_unit.data() + off, 1, n);
        if (block_mode) geofp8_dequantize_block(f, co.data() + off, sum.data() + off, n, GEOFP8_BLOCK, cs.data() + t.first_block[u], world);
        else geofp8_dequantize(f, co.data() + off, sum.data() + off, n, cs[u], world);
        out_ok &= bit_mismatches(go.data() + off, co.data() + off, n) == 0;
        long c = 0;
        for (size_t i = off; i < off + n; i++) c += (sum[i] & 0x7Fu) == fp8_format_max_code(f);
        ssat_ok &= c == ssat[u];
        ssat_total += c;
    }
    bool out_gaps = true;
    for (size_t i = 0; i < P; i++) if (!in_unit[i]) out_gaps &= fp8_float_bits(go[i]) == 0x7F7F7F7Fu;
    check(tag + ".dequantize", out_ok, "");
    check(tag + ".sum_saturated", ssat_ok, "%ld codes at +-max", ssat_total);
    check(tag + ".dequantize_gaps_untouched", out_gaps, "");
    CUDA_CHECK(cudaFree(d_x));
    CUDA_CHECK(cudaFree(d_out));
    geofp8_device_free(&g);
}

// Saturation on purpose (scales 2^8 too large), every code byte through the decoder, the skip rule.
static void validate_edges(const Layout& L, Fp8Format f) {
    const std::string tag = "dev_geofp8.edges" + fmt_tag(f) + "." + L.name;
    const size_t P = L.total, U = L.offset.size();
    GeoFP8Device g;
    geofp8_device_init(&g, L.offset, L.size, P, 1, 0, 0, 0, f);
    for (int u : L.ef_units) geofp8_device_add_unit(&g, u, L.rows[u], L.cols[u], 8, 0);
    std::vector<float> x(P);
    fill_grad(x.data(), g.units, 77, L.zero_every);
    float* d_x = cuda_upload(x.data(), P);
    std::vector<float> sc(U);
    for (size_t u = 0; u < U; u++) sc[u] = ldexpf(1.0f, geofp8_scale_exponent(f, geofp8_amax(x.data() + L.offset[u], L.size[u]), 1) + 8);
    CUDA_CHECK(cudaMemcpy(g.scale, sc.data(), U * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(g.skip, 0, sizeof(float)));
    CUDA_CHECK(cudaMemset(g.counts, 0, 4 * U * sizeof(unsigned long long)));
    geofp8_device_quantize(&g, d_x, 1, 0);
    std::vector<uint8_t> gq = cuda_download(g.q, P), cq(P, 0);
    std::vector<long> sat(U), und(U), nz(U);
    geofp8_device_read_stats(&g, sat.data(), und.data(), nz.data(), NULL, 0);
    bool ok = true;
    long sat_total = 0;
    for (size_t u = 0; u < U; u++) {
        const size_t off = L.offset[u], n = L.size[u];
        int gi = g.unit_to_geo[u];
        std::vector<float> res(n);
        geofp8_quantize_ef(f, cq.data() + off, gi >= 0 ? res.data() : NULL, x.data() + off, n, sc[u]);
        long s1, u1, n1;
        geofp8_count_saturated_underflow(f, x.data() + off, n, sc[u], &s1, &u1, &n1);
        ok &= bit_mismatches(gq.data() + off, cq.data() + off, n) == 0 && s1 == sat[u] && u1 == und[u] && n1 == nz[u];
        if (gi >= 0) {
            std::vector<float> gr = cuda_download(g.geo[gi].residual, n);
            ok &= bit_mismatches(gr.data(), res.data(), n) == 0;
        }
        sat_total += s1;
    }
    check(tag + ".saturating_scales", ok && sat_total > 0, "%ld codes at +-max, codes / residuals / counts bitwise", sat_total);
    // every byte value (NaN codes included) through the dequantizer
    std::vector<uint8_t> codes(P);
    for (size_t i = 0; i < P; i++) codes[i] = (uint8_t)(mix64(i + 5) >> 56);
    CUDA_CHECK(cudaMemcpy(g.q, codes.data(), P, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(g.counts, 0, 4 * U * sizeof(unsigned long long)));
    float* d_out = cuda_malloc<float>(P);
    geofp8_dequantize_units(f, d_out, g.q, g.scale, 0, 7, &g.units, g.counts + 3 * U, 0);
    std::vector<float> go = cuda_download(d_out, P), co(P, 0.0f);
    std::vector<long> ssat(U);
    geofp8_device_read_stats(&g, NULL, NULL, NULL, ssat.data(), 0);
    ok = true;
    for (size_t u = 0; u < U; u++) {
        const size_t off = L.offset[u], n = L.size[u];
        geofp8_dequantize(f, co.data() + off, codes.data() + off, n, sc[u], 7);
        long c = 0;
        for (size_t i = off; i < off + n; i++) c += (codes[i] & 0x7Fu) == fp8_format_max_code(f);
        ok &= bit_mismatches(go.data() + off, co.data() + off, n) == 0 && c == ssat[u];
    }
    check(tag + ".dequantize_every_code", ok, "");
    // a NaN in one unit and an Inf in another: skip, and the quantizer writes nothing
    const int u_nan = L.ef_units[0], u_inf = L.ef_units.back();
    x[L.offset[u_nan] + L.size[u_nan] / 2] = NAN;
    x[L.offset[u_inf]] = -INFINITY;
    CUDA_CHECK(cudaMemcpy(d_x, x.data(), P * sizeof(float), cudaMemcpyHostToDevice));
    geofp8_device_begin(&g, d_x, 0, 0);
    std::vector<float> ga = cuda_download(g.amax, U);
    geofp8_device_scales(&g, 0);
    std::vector<uint8_t> before = cuda_download(g.q, P);
    std::vector<float> res_before = cuda_download(g.geo[0].residual, L.size[g.geo[0].unit]);
    geofp8_device_quantize(&g, d_x, 1, 0);
    bool skip = geofp8_device_read_stats(&g, sat.data(), NULL, NULL, NULL, 0);
    std::vector<uint8_t> after = cuda_download(g.q, P);
    std::vector<float> res_after = cuda_download(g.geo[0].residual, res_before.size());
    std::vector<float> cs(U);
    size_t bad = geofp8_block_scales(f, cs.data(), ga.data(), U, 1);
    check(tag + ".nonfinite_amax", std::isinf(ga[u_nan]) && ga[u_nan] > 0 && std::isinf(ga[u_inf]) && ga[u_inf] > 0, "");
    check(tag + ".nonfinite_skips_and_writes_nothing",
          skip && bad == 2 && bit_mismatches(before.data(), after.data(), P) == 0 && bit_mismatches(res_before.data(), res_after.data(), res_before.size()) == 0,
          "skip %d, cpu non-finite groups %zu", (int)skip, bad);
    CUDA_CHECK(cudaFree(d_x));
    CUDA_CHECK(cudaFree(d_out));
    geofp8_device_free(&g);
}

// ----------------------------------------------------------------------------
// 3. the two-phase reduction (gradcomm_twophase), every server rank simulated in turn

static void validate_twophase(const Layout& L, int world, Fp8Format f) {
    const std::string tag = "dev_geofp8.twophase" + fmt_tag(f) + "." + L.name + ".N" + std::to_string(world);
    const size_t P = L.total, U = L.offset.size();
    const size_t shard = (P + world - 1) / world;
    // every rank's local quantization (local scales, error feedback on ef_units), on the GPU
    std::vector<std::vector<uint8_t>> q(world);
    std::vector<int> all_exps((size_t)world * U);
    bool local_ok = true;
    for (int r = 0; r < world; r++) {
        GeoFP8Device g;
        geofp8_device_init(&g, L.offset, L.size, P, world, r, 0, 1, f);
        for (int u : L.ef_units) geofp8_device_add_unit(&g, u, L.rows[u], L.cols[u], 8, 0);
        std::vector<float> x(P);
        fill_grad(x.data(), g.units, 500 + r, L.zero_every);
        float* d_x = cuda_upload(x.data(), P);
        geofp8_device_begin(&g, d_x, 0, 0);
        geofp8_device_scales(&g, 0);
        geofp8_device_quantize(&g, d_x, 1, 0);
        q[r] = cuda_download(g.q, shard * world);
        std::vector<int> ge = cuda_download(g.exps, U);
        for (size_t u = 0; u < U; u++) {
            const size_t off = L.offset[u], n = L.size[u];
            int e = geofp8_scale_exponent(f, geofp8_amax(x.data() + off, n), 1);
            std::vector<uint8_t> cq(n);
            std::vector<float> res(n);
            int gi = g.unit_to_geo[u];
            geofp8_quantize_ef(f, cq.data(), gi >= 0 ? res.data() : NULL, x.data() + off, n, geofp8_scale_from_exponent(e));
            local_ok &= e == ge[u] && bit_mismatches(cq.data(), q[r].data() + off, n) == 0;
            if (gi >= 0) {
                std::vector<float> gr = cuda_download(g.geo[gi].residual, n);
                local_ok &= bit_mismatches(gr.data(), res.data(), n) == 0;
            }
            all_exps[(size_t)r * U + u] = e;
        }
        CUDA_CHECK(cudaFree(d_x));
        geofp8_device_free(&g);
    }
    check(tag + ".local_quantize", local_ok, "");
    // every rank as the server of its shard
    std::vector<uint8_t> gathered(shard * world, 0);
    std::vector<int> all_server((size_t)world * U, 0);
    bool sum_ok = true, mine_ok = true, sres_ok = true, sexp_ok = true;
    for (int me = 0; me < world; me++) {
        GeoFP8Device g;
        geofp8_device_init(&g, L.offset, L.size, P, world, me, 0, 1, f);
        const size_t lo = std::min(P, (size_t)me * shard), len = std::min(P, (size_t)(me + 1) * shard) - lo;
        std::vector<uint8_t> recv(world * shard, 0);
        for (int r = 0; r < world; r++) memcpy(recv.data() + (size_t)r * shard, q[r].data() + (size_t)me * shard, shard);
        std::vector<float> sres = normal_vec(shard, 900 + me, 1e-5f), sres0 = sres;
        CUDA_CHECK(cudaMemcpy(g.recv, recv.data(), recv.size(), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(g.exps_all, all_exps.data(), all_exps.size() * sizeof(int), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(g.server_residual, sres.data(), shard * sizeof(float), cudaMemcpyHostToDevice));
        geofp8_device_twophase_server(&g, 0);
        std::vector<float> gsum = cuda_download(g.server_sum, shard), gsres = cuda_download(g.server_residual, shard);
        std::vector<uint8_t> gmine = cuda_download(g.mine, shard);
        std::vector<int> gsexp = cuda_download(g.server_exps, U);
        // the CPU's server loop (gradcomm_twophase)
        std::vector<float> sum(len);
        std::vector<int> sexp(U, 0);
        std::vector<uint8_t> mine(len);
        for (size_t u = 0; u < U; u++) {
            size_t a = std::max(L.offset[u], lo), b = std::min(L.offset[u] + L.size[u], lo + len);
            if (a >= b) continue;
            for (size_t i = a; i < b; i++) {
                float acc = 0.0f;
                for (int r = 0; r < world; r++)
                    acc += fp8_decode(f, recv[(size_t)r * shard + (i - lo)]) / geofp8_scale_from_exponent(all_exps[(size_t)r * U + u]);
                sum[i - lo] = acc + sres0[i - lo];
            }
            int e = geofp8_scale_exponent(f, geofp8_amax(sum.data() + (a - lo), b - a), 1);
            if (e == GEOFP8_EXP_SKIP) e = 0;
            sexp[u] = e;
            geofp8_quantize_ef(f, mine.data() + (a - lo), sres0.data() + (a - lo), sum.data() + (a - lo), b - a, geofp8_scale_from_exponent(e));
            sum_ok &= bit_mismatches(gsum.data() + (a - lo), sum.data() + (a - lo), b - a) == 0;
            mine_ok &= bit_mismatches(gmine.data() + (a - lo), mine.data() + (a - lo), b - a) == 0;
            sres_ok &= bit_mismatches(gsres.data() + (a - lo), sres0.data() + (a - lo), b - a) == 0;
        }
        sexp_ok &= bit_mismatches(gsexp.data(), sexp.data(), U) == 0;
        memcpy(gathered.data() + lo, gmine.data(), len);
        memcpy(all_server.data() + (size_t)me * U, gsexp.data(), U * sizeof(int));
        geofp8_device_free(&g);
    }
    check(tag + ".server_sum", sum_ok, "");
    check(tag + ".server_codes", mine_ok, "");
    check(tag + ".server_residual", sres_ok, "");
    check(tag + ".server_exponents", sexp_ok, "");
    // the final decode with the server scales
    GeoFP8Device g;
    geofp8_device_init(&g, L.offset, L.size, P, world, 1 % world, 0, 1, f);
    CUDA_CHECK(cudaMemcpy(g.q, gathered.data(), gathered.size(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(g.server_exps_all, all_server.data(), all_server.size() * sizeof(int), cudaMemcpyHostToDevice));
    float* d_out = cuda_malloc<float>(P);
    geofp8_device_twophase_finish(&g, d_out, 0, 0);
    std::vector<float> go = cuda_download(d_out, P), co(P, 0.0f);
    bool ok = true;
    for (size_t u = 0; u < U; u++) {
        size_t end = L.offset[u] + L.size[u];
        for (int j = 0; j < world; j++) {
            size_t a = std::max(L.offset[u], (size_t)j * shard), b = std::min(end, (size_t)(j + 1) * shard);
            if (a >= b) continue;
            geofp8_dequantize(f, co.data() + a, gathered.data() + a, b - a, geofp8_scale_from_exponent(all_server[(size_t)j * U + u]), world);
            ok &= bit_mismatches(go.data() + a, co.data() + a, b - a) == 0;
        }
    }
    check(tag + ".dequantize", ok, "");
    CUDA_CHECK(cudaFree(d_out));
    geofp8_device_free(&g);
}

// ----------------------------------------------------------------------------
// 4. transforms, sketch, Nyström, K-FAC

// A factor the way a refresh makes it, on the CPU: Y from activations, Nyström, T.
static GeoFP8Factor cpu_factor(int d_in, int r, uint64_t seed, const float* U_prev) {
    const int k = geofp8_sketch_width(r, d_in), n = std::max(2 * d_in, 256);
    std::vector<float> h = activations(n, d_in, seed), om((size_t)d_in * k), Y((size_t)d_in * k, 0.0f), U((size_t)d_in * r), lam(r);
    geofp8_test_matrix(om.data(), d_in, k, U_prev, r, seed + 1);
    double tr = 0.0;
    geofp8_sketch_accumulate(Y.data(), &tr, h.data(), n, d_in, om.data(), k, 1.0f / n);
    float s2 = 0.0f;
    geofp8_nystrom(U.data(), lam.data(), &s2, Y.data(), om.data(), tr, d_in, k, r);
    GeoFP8Factor f;
    geofp8_factor_from_nystrom(&f, U.data(), lam.data(), s2, tr, d_in, r);
    return f;
}

static float* upload_factor(const GeoFP8Factor& f) {
    std::vector<float> p(geofp8_factor_floats(f.d_in, f.r));
    geofp8_factor_pack(p.data(), &f);
    return cuda_upload(p.data(), p.size());
}

static void validate_transforms(GeoFP8Device* g, int d_out, int d_in, int r, size_t offset, uint64_t seed) {
    char t[96];
    snprintf(t, sizeof(t), "dev_geofp8.transform.%dx%d.r%d", d_out, d_in, r);
    const std::string tag = t;
    const size_t n = (size_t)d_out * d_in;
    GeoFP8Factor f1 = cpu_factor(d_in, r, seed, NULL);
    GeoFP8Factor f2 = cpu_factor(d_in, r, seed + 50, f1.U.data());
    float* d_f1 = upload_factor(f1);
    float* d_f2 = upload_factor(f2);
    std::vector<float> G = normal_vec(n, seed + 3, 1e-3f);
    float* buf = cuda_malloc<float>(offset + n);  // the unit sits at `offset` of a flat buffer
    float* d_G = buf + offset;
    // whiten
    CUDA_CHECK(cudaMemcpy(d_G, G.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    geofp8_whiten(g, d_G, d_out, d_in, d_f1, r, 0);
    std::vector<float> gw = cuda_download(d_G, n), cw(n);
    geofp8_whiten(cw.data(), G.data(), d_out, d_in, &f1, NULL);
    check_close(tag + ".whiten", gw.data(), cw.data(), n, TOL_GEMM);
    // unwhiten (of the CPU's whitened gradient)
    CUDA_CHECK(cudaMemcpy(d_G, cw.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    geofp8_unwhiten(g, d_G, d_out, d_in, d_f1, r, 0);
    std::vector<float> gu = cuda_download(d_G, n), cu(n);
    geofp8_unwhiten(cu.data(), cw.data(), d_out, d_in, &f1, NULL);
    check_close(tag + ".unwhiten", gu.data(), cu.data(), n, TOL_GEMM);
    // carry of a residual into new coordinates
    std::vector<float> R = normal_vec(n, seed + 4, 1e-5f), cr = R;
    CUDA_CHECK(cudaMemcpy(d_G, R.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    geofp8_carry_residual(g, d_G, d_out, d_in, d_f1, d_f2, r, 0);
    std::vector<float> gr = cuda_download(d_G, n);
    geofp8_carry_residual(cr.data(), d_out, d_in, &f1, &f2, NULL);
    check_close(tag + ".carry_residual", gr.data(), cr.data(), n, TOL_GEMM);
    // the identity factor leaves G bitwise unchanged (c = 1, D - c = 0)
    GeoFP8Factor id;
    geofp8_factor_identity(&id, d_in, r);
    float* d_id = upload_factor(id);
    CUDA_CHECK(cudaMemcpy(d_G, G.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    geofp8_whiten(g, d_G, d_out, d_in, d_id, r, 0);
    geofp8_unwhiten(g, d_G, d_out, d_in, d_id, r, 0);
    std::vector<float> gi = cuda_download(d_G, n);
    check_bits(tag + ".identity_factor", gi.data(), G.data(), n);
    // residual add, bitwise
    CUDA_CHECK(cudaMemcpy(d_G, G.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    float* d_R = cuda_upload(R.data(), n);
    geofp8_residual_add(d_G, d_R, n, 0);
    std::vector<float> ga = cuda_download(d_G, n), ca(n);
    for (size_t i = 0; i < n; i++) ca[i] = G[i] + R[i];
    check_bits(tag + ".residual_add", ga.data(), ca.data(), n);
    void* bufs[] = {d_f1, d_f2, buf, d_id, d_R};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
}

static void validate_sketch(GeoFP8Device* g, int n, int d_in, int r, uint64_t seed) {
    char t[96];
    snprintf(t, sizeof(t), "dev_geofp8.sketch.n%d.d%d.r%d", n, d_in, r);
    const std::string tag = t;
    const int k = geofp8_sketch_width(r, d_in);
    const size_t dk = (size_t)d_in * k;
    std::vector<float> h = activations(n, d_in, seed), om(dk);
    geofp8_test_matrix(om.data(), d_in, k, NULL, r, seed + 1);
    std::vector<float> Y0 = normal_vec(dk, seed + 2, 0.01f);
    float* d_om = cuda_upload(om.data(), dk);
    float* d_Y = cuda_upload(Y0.data(), dk);
    double* d_tr = cuda_malloc<double>(1);
    const double tr0 = 0.25;
    const float w = 1.0f / (float)(3 * n);
    for (int variant = 0; variant < 2; variant++) {  // fp32, then bf16 activations
        std::vector<float> hh = h;
        if (variant) cuda_round_to_bf16(&hh);
        CUDA_CHECK(cudaMemcpy(d_Y, Y0.data(), dk * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(d_tr, &tr0, sizeof(double), cudaMemcpyHostToDevice));
        if (variant) {
            bf16* d_h = cuda_upload_bf16(hh.data(), hh.size());
            geofp8_sketch_accumulate(g, d_Y, d_tr, d_h, n, d_in, d_om, k, w, 0);
            CUDA_CHECK(cudaDeviceSynchronize());
            CUDA_CHECK(cudaFree(d_h));
        } else {
            float* d_h = cuda_upload(hh.data(), hh.size());
            geofp8_sketch_accumulate(g, d_Y, d_tr, d_h, n, d_in, d_om, k, w, 0);
            CUDA_CHECK(cudaDeviceSynchronize());
            CUDA_CHECK(cudaFree(d_h));
        }
        std::vector<float> gY = cuda_download(d_Y, dk), cY = Y0;
        double gtr = cuda_download(d_tr, 1)[0], ctr = tr0;
        geofp8_sketch_accumulate(cY.data(), &ctr, hh.data(), n, d_in, om.data(), k, w);
        std::string v = variant ? ".bf16" : ".fp32";
        check_close(tag + v + ".Y", gY.data(), cY.data(), dk, TOL_GEMM);
        double e = fabs(gtr - ctr) / fabs(ctr);
        check_bound(tag + v + ".trace", e, TOL_TRACE, "rel err");
    }
    void* bufs[] = {d_om, d_Y, d_tr};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
}

// poison: 0 a real sketch, 1 a NaN in Y (the fallback factor, bitwise), 2 Y = 0 and tr(A) = 0 (bitwise)
static void validate_nystrom(GeoFP8Device* g, int d_in, int r, int refresh, int poison, uint64_t seed) {
    char t[96];
    snprintf(t, sizeof(t), "dev_geofp8.nystrom.d%d.r%d%s%s", d_in, r, refresh ? ".subspace" : "",
             poison == 1 ? ".nonfinite" : poison == 2 ? ".zero_sketch" : "");
    const std::string tag = t;
    const int k = geofp8_sketch_width(r, d_in), n = std::max(2 * d_in, 256);
    const size_t dk = (size_t)d_in * k;
    std::vector<float> h = activations(n, d_in, seed), om(dk), Y(dk, 0.0f);
    GeoFP8Factor prev;
    if (refresh) prev = cpu_factor(d_in, r, seed + 9, NULL);
    geofp8_test_matrix(om.data(), d_in, k, refresh ? prev.U.data() : NULL, r, seed + 1);
    double tr = 0.0;
    geofp8_sketch_accumulate(Y.data(), &tr, h.data(), n, d_in, om.data(), k, 1.0f / n);
    if (poison == 1) Y[dk / 3] = NAN;              // the fallback factor
    if (poison == 2) { std::fill(Y.begin(), Y.end(), 0.0f); tr = 0.0; }  // nothing observed: the identity
    std::vector<float> cU((size_t)d_in * r), clam(r), glam(r);
    float cs2 = 0.0f, gs2 = 0.0f;
    int cst = geofp8_nystrom(cU.data(), clam.data(), &cs2, Y.data(), om.data(), tr, d_in, k, r);
    GeoFP8Factor cf;
    geofp8_factor_from_nystrom(&cf, cU.data(), clam.data(), cs2, tr, d_in, r);
    float* d_Y = cuda_upload(Y.data(), dk);
    float* d_om = cuda_upload(om.data(), dk);
    double* d_tr = cuda_upload(&tr, 1);
    float* d_f = cuda_malloc<float>(geofp8_factor_floats(d_in, r));
    int gst = geofp8_nystrom(g, d_f, d_Y, d_om, d_tr, d_in, k, r, 0, glam.data(), &gs2);
    std::vector<float> packed = cuda_download(d_f, geofp8_factor_floats(d_in, r));
    GeoFP8Factor gf;
    geofp8_factor_unpack(&gf, packed.data(), d_in, r);
    check(tag + ".status", gst == cst, "gpu %d, cpu %d", gst, cst);
    if (poison) {
        std::vector<float> cp(packed.size());
        geofp8_factor_pack(cp.data(), &cf);
        check_bits(tag + ".fallback_factor", packed.data(), cp.data(), cp.size());
    } else {
        double el = 0.0;
        for (int i = 0; i < r; i++) el = std::max(el, fabs((double)glam[i] - clam[i]) / std::max((double)clam[0], 1e-30));
        check_bound(tag + ".lambda", el, TOL_FACTOR, "max err / lambda_1");
        double es = fabs((double)gs2 - cs2) / std::max((double)cs2, 1e-30);
        check_bound(tag + ".sigma2", es, TOL_FACTOR, "rel err");
        double ed = 0.0;
        for (int i = 0; i < r; i++) ed = std::max(ed, fabs((double)gf.D[i] - cf.D[i]) / cf.D[i]);
        ed = std::max(ed, fabs((double)gf.c - cf.c) / cf.c);
        ed = std::max(ed, fabs((double)gf.eps - cf.eps) / std::max((double)cf.eps, 1e-30));
        check_bound(tag + ".D_c_eps", ed, TOL_FACTOR, "max rel err");
        double worst = 0.0;
        for (int j = 0; j < r; j++) {
            double dot = 0.0;
            for (int i = 0; i < d_in; i++) dot += (double)gf.U[(size_t)i * r + j] * cf.U[(size_t)i * r + j];
            worst = std::max(worst, 1.0 - fabs(dot));
        }
        check_bound(tag + ".U_columns", worst, TOL_FACTOR, "max 1 - |<u_gpu, u_cpu>|");
        const int d_out = 64;
        std::vector<float> G = normal_vec((size_t)d_out * d_in, seed + 5, 1.0f), a((size_t)d_out * d_in), b(a.size());
        geofp8_whiten(a.data(), G.data(), d_out, d_in, &gf, NULL);
        geofp8_whiten(b.data(), G.data(), d_out, d_in, &cf, NULL);
        check_close(tag + ".transform", a.data(), b.data(), a.size(), TOL_GEMM);
    }
    void* bufs[] = {d_Y, d_om, d_tr, d_f};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
}

// --geofp8-power / --geofp8-damping on the device refresh against the CPU's formulas: a fixed
// power with another damping (power 0.5), and auto, whose q comes from a gradient G on the device
// (geofp8_direction_energy: cuBLAS G U + column energies) against geofp8.h's on the host.
static void validate_power(GeoFP8Device* g, int d_out, int d_in, int r, uint64_t seed) {
    const int k = geofp8_sketch_width(r, d_in), n = std::max(2 * d_in, 256);
    const size_t dk = (size_t)d_in * k;
    std::vector<float> h = activations(n, d_in, seed), om(dk), Y(dk, 0.0f);
    geofp8_test_matrix(om.data(), d_in, k, NULL, r, seed + 1);
    double tr = 0.0;
    geofp8_sketch_accumulate(Y.data(), &tr, h.data(), n, d_in, om.data(), k, 1.0f / n);
    // a gradient whose energy follows the activations' spectrum (G = Z hᵀ h / n, Z random)
    std::vector<float> Z = normal_vec((size_t)d_out * n, seed + 2, 1.0f), G((size_t)d_out * d_in);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d_out, d_in, n, 1.0f / n, Z.data(), n, h.data(), d_in, 0.0f, G.data(), d_in);
    std::vector<float> cU((size_t)d_in * r), clam(r);
    float cs2 = 0.0f;
    geofp8_nystrom(cU.data(), clam.data(), &cs2, Y.data(), om.data(), tr, d_in, k, r);
    float* d_Y = cuda_upload(Y.data(), dk);
    float* d_om = cuda_upload(om.data(), dk);
    double* d_tr = cuda_upload(&tr, 1);
    float* d_G = cuda_upload(G.data(), G.size());
    float* d_f = cuda_malloc<float>(geofp8_factor_floats(d_in, r));
    for (int automatic = 0; automatic < 2; automatic++) {
        char t[96];
        snprintf(t, sizeof(t), "dev_geofp8.power_%s.%dx%d.r%d", automatic ? "auto" : "0.5", d_out, d_in, r);
        const std::string tag = t;
        GeoFP8Power pw;
        pw.power = automatic ? -1.0 : 0.5;
        pw.damping = 1e-2;
        pw.G = d_G;
        pw.d_out = d_out;
        double cq = 0.0, cp = pw.power;
        if (automatic) {
            cp = geofp8_choose_power(G.data(), d_out, d_in, cU.data(), clam.data(), cs2, r, pw.damping * tr / d_in, &cq);
        }
        GeoFP8Factor cf, gf;
        geofp8_factor_from_nystrom(&cf, cU.data(), clam.data(), cs2, tr, d_in, r, cp, pw.damping);
        geofp8_nystrom(g, d_f, d_Y, d_om, d_tr, d_in, k, r, 0, NULL, NULL, &pw);
        std::vector<float> packed = cuda_download(d_f, geofp8_factor_floats(d_in, r));
        geofp8_factor_unpack(&gf, packed.data(), d_in, r);
        if (automatic) {
            printf("  %s: q gpu %.6f cpu %.6f, p %.6f\n", tag.c_str(), pw.q, cq, pw.chosen);
            check_bound(tag + ".q", fabs(pw.q - cq), TOL_FACTOR, "abs err");
        }
        double ed = fabs((double)gf.c - cf.c) / cf.c;
        for (int i = 0; i < r; i++) ed = std::max(ed, fabs((double)gf.D[i] - cf.D[i]) / cf.D[i]);
        ed = std::max(ed, fabs((double)gf.eps - cf.eps) / std::max((double)cf.eps, 1e-30));
        check_bound(tag + ".D_c_eps", ed, TOL_FACTOR, "max rel err");
    }
    void* bufs[] = {d_Y, d_om, d_tr, d_G, d_f};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
}

static void validate_kfac(GeoFP8Device* g, int d_out, int d_in, uint64_t seed) {
    char t[96];
    snprintf(t, sizeof(t), "dev_geofp8.kfac.%dx%d", d_out, d_in);
    const std::string tag = t;
    const int n = 2 * std::max(d_in, d_out);
    const float w = 1.0f / n;
    std::vector<float> h = activations(n, d_in, seed), delta = activations(n, d_out, seed + 1);
    // accumulate, fp32 and bf16, onto a random start (the lower triangle must stay as it was)
    for (int variant = 0; variant < 2; variant++) {
        std::vector<float> hh = h;
        if (variant) cuda_round_to_bf16(&hh);
        std::vector<float> S0 = normal_vec((size_t)d_in * d_in, seed + 2, 0.1f), cS = S0;
        float* d_S = cuda_upload(S0.data(), S0.size());
        if (variant) {
            bf16* d_h = cuda_upload_bf16(hh.data(), hh.size());
            geofp8_kfac_accumulate(g, d_S, d_h, n, d_in, w, 0);
            CUDA_CHECK(cudaDeviceSynchronize());
            CUDA_CHECK(cudaFree(d_h));
        } else {
            float* d_h = cuda_upload(hh.data(), hh.size());
            geofp8_kfac_accumulate(g, d_S, d_h, n, d_in, w, 0);
            CUDA_CHECK(cudaDeviceSynchronize());
            CUDA_CHECK(cudaFree(d_h));
        }
        std::vector<float> gS = cuda_download(d_S, S0.size());
        geofp8_kfac_accumulate(cS.data(), hh.data(), n, d_in, w);
        check_close(tag + (variant ? ".accumulate.bf16" : ".accumulate.fp32"), gS.data(), cS.data(), gS.size(), TOL_GEMM);
        CUDA_CHECK(cudaFree(d_S));
    }
    // factors
    std::vector<float> SA((size_t)d_in * d_in, 0.0f), SG((size_t)d_out * d_out, 0.0f);
    geofp8_kfac_accumulate(SA.data(), h.data(), n, d_in, w);
    geofp8_kfac_accumulate(SG.data(), delta.data(), n, d_out, w);
    std::vector<float> LA(SA.size()), LG(SG.size());
    int sa = geofp8_kfac_factor(LA.data(), SA.data(), d_in), sg = geofp8_kfac_factor(LG.data(), SG.data(), d_out);
    float* d_SA = cuda_upload(SA.data(), SA.size());
    float* d_LA = cuda_malloc<float>(SA.size());
    int ga = geofp8_kfac_factor(g, d_LA, d_SA, d_in, 0);
    std::vector<float> gLA = cuda_download(d_LA, SA.size());
    check(tag + ".factor_status", ga == sa, "gpu %d, cpu %d (G side cpu %d)", ga, sa, sg);
    check_close(tag + ".factor_A", gLA.data(), LA.data(), LA.size(), TOL_FACTOR);
    // a non-finite accumulator gives the identity
    SA[0] = NAN;
    CUDA_CHECK(cudaMemcpy(d_SA, SA.data(), SA.size() * sizeof(float), cudaMemcpyHostToDevice));
    int gbad = geofp8_kfac_factor(g, d_LA, d_SA, d_in, 0);
    std::vector<float> gI = cuda_download(d_LA, SA.size()), cI(SA.size());
    int cbad = geofp8_kfac_factor(cI.data(), SA.data(), d_in);
    check(tag + ".factor_nonfinite_identity", gbad == -1 && cbad == -1 && bit_mismatches(gI.data(), cI.data(), cI.size()) == 0, "");
    // whiten / unwhiten with the CPU factors
    const size_t nn = (size_t)d_out * d_in;
    std::vector<float> G = normal_vec(nn, seed + 3, 1e-3f), cw(nn), cu(nn);
    float* d_LA2 = cuda_upload(LA.data(), LA.size());
    float* d_LG = cuda_upload(LG.data(), LG.size());
    float* d_G = cuda_upload(G.data(), nn);
    geofp8_kfac_whiten(g, d_G, d_out, d_in, d_LG, d_LA2, 0);
    std::vector<float> gw = cuda_download(d_G, nn);
    geofp8_kfac_whiten(cw.data(), G.data(), d_out, d_in, LG.data(), LA.data());
    check_close(tag + ".whiten", gw.data(), cw.data(), nn, TOL_GEMM);
    CUDA_CHECK(cudaMemcpy(d_G, cw.data(), nn * sizeof(float), cudaMemcpyHostToDevice));
    geofp8_kfac_unwhiten(g, d_G, d_out, d_in, d_LG, d_LA2, 0);
    std::vector<float> gu = cuda_download(d_G, nn);
    geofp8_kfac_unwhiten(cu.data(), cw.data(), d_out, d_in, LG.data(), LA.data());
    check_close(tag + ".unwhiten", gu.data(), cu.data(), nn, TOL_GEMM);
    // one side only (output-side: LA NULL)
    CUDA_CHECK(cudaMemcpy(d_G, G.data(), nn * sizeof(float), cudaMemcpyHostToDevice));
    geofp8_kfac_whiten(g, d_G, d_out, d_in, d_LG, NULL, 0);
    gw = cuda_download(d_G, nn);
    geofp8_kfac_whiten(cw.data(), G.data(), d_out, d_in, LG.data(), NULL);
    check_close(tag + ".whiten_output_side", gw.data(), cw.data(), nn, TOL_GEMM);
    void* bufs[] = {d_SA, d_LA, d_LA2, d_LG, d_G};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
}

// the fidelity sums (--fidelity-every) per unit against double sums on the host
static void validate_fidelity_sums(const Layout& L) {
    const std::string tag = "dev_geofp8.fidelity_sums." + L.name;
    const size_t P = L.total, U = L.offset.size();
    GeoFP8UnitTable t;
    geofp8_units_create(&t, L.offset, L.size);
    std::vector<float> ref(P), got(P);
    fill_grad(ref.data(), t, 91, 0);
    fill_grad(got.data(), t, 92, 0);
    for (size_t i = 0; i < P; i++) got[i] = ref[i] + 0.01f * got[i];
    float* d_ref = cuda_upload(ref.data(), P);
    float* d_got = cuda_upload(got.data(), P);
    double* scratch = cuda_malloc<double>(4 * (size_t)std::max(t.dev.num_chunks, 1));
    std::vector<double> g = geofp8_fidelity_sums(scratch, d_got, d_ref, &t, 0), c(4 * U, 0.0);
    for (size_t u = 0; u < U; u++)
        for (size_t i = L.offset[u]; i < L.offset[u] + L.size[u]; i++) {
            double a = got[i], b = ref[i];
            c[u] += (a - b) * (a - b); c[U + u] += b * b; c[2 * U + u] += a * a; c[3 * U + u] += a * b;
        }
    double worst = 0.0;
    for (size_t i = 0; i < 4 * U; i++) worst = std::max(worst, fabs(g[i] - c[i]) / std::max(fabs(c[i]), 1e-300));
    check_bound(tag, worst, TOL_SUMS, "max rel err over the units");
    void* bufs[] = {d_ref, d_got, scratch};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    geofp8_units_free(&t);
}

// the fp32 and bf16 modes' encode / average kernels, bitwise
static void validate_plain_modes() {
    const size_t n = 100003;
    std::vector<float> x = normal_vec(n, 31, 1.0f);
    x[5] = NAN; x[6] = INFINITY; x[7] = 3.0e38f; x[8] = 1e-40f;
    float* d_x = cuda_upload(x.data(), n);
    bf16* d_h = cuda_malloc<bf16>(n);
    geofp8_bf16_encode(d_h, d_x, n, 0);
    std::vector<bf16> gh = cuda_download(d_h, n);
    std::vector<uint16_t> gbits(n), cbits(n);
    for (size_t i = 0; i < n; i++) { memcpy(&gbits[i], &gh[i], 2); cbits[i] = fp8_bf16_encode(x[i]); }
    check_bits(std::string("dev_geofp8.bf16.encode"), gbits.data(), cbits.data(), n);
    float* d_o = cuda_malloc<float>(n);
    geofp8_bf16_decode_average(d_o, d_h, n, 6, 0);
    std::vector<float> go = cuda_download(d_o, n), co(n);
    for (size_t i = 0; i < n; i++) co[i] = fp8_bf16_decode(cbits[i]) / 6.0f;
    check_bits(std::string("dev_geofp8.bf16.decode_average"), go.data(), co.data(), n);
    geofp8_average(d_x, n, 7, 0);
    std::vector<float> ga = cuda_download(d_x, n), ca(n);
    for (size_t i = 0; i < n; i++) ca[i] = x[i] / 7.0f;
    check_bits(std::string("dev_geofp8.fp32.average"), ga.data(), ca.data(), n);
    void* bufs[] = {d_x, d_h, d_o};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
}

// ----------------------------------------------------------------------------
// 5. one whole refresh + two steps through the GeoFP8Device phases, two simulated ranks

static void validate_phases() {
    const std::string tag = "dev_geofp8.phases.tiny.N2";
    Layout L = layout_llama("tiny");
    const size_t P = L.total, U = L.offset.size();
    const int N = 2, rank_r = 32, ntok = 512;
    GeoFP8Device g[2];
    for (int r = 0; r < N; r++) {
        geofp8_device_init(&g[r], L.offset, L.size, P, N, r, 0, 0, FP8_E4M3);
        for (int u : L.ef_units) geofp8_device_add_unit(&g[r], u, L.rows[u], L.cols[u], rank_r, 0);
        geofp8_device_reserve_tokens(&g[r], ntok);
    }
    // refresh: Ω from the seed, sketches of each rank's bf16 activations, host SUM, rank 0's factor
    for (int r = 0; r < N; r++) geofp8_device_refresh_begin(&g[r], 1337, 0, 1, 0);
    const float w = 1.0f / (float)(N * ntok);
    for (int r = 0; r < N; r++)
        for (int u : L.ef_units) {
            std::vector<float> h = activations(ntok, L.cols[u], 4000 + 10 * r + u);
            bf16* d_h = cuda_upload_bf16(h.data(), h.size());
            geofp8_device_observe_input(&g[r], u, d_h, ntok, w, 0);
            CUDA_CHECK(cudaDeviceSynchronize());
            CUDA_CHECK(cudaFree(d_h));
        }
    for (size_t gi = 0; gi < g[0].geo.size(); gi++) {
        GeoFP8DeviceUnit &a = g[0].geo[gi], &b = g[1].geo[gi];
        size_t dk = (size_t)a.d_in * a.k;
        std::vector<float> ya = cuda_download(a.Y, dk), yb = cuda_download(b.Y, dk);
        double ta = cuda_download(a.trA, 1)[0], tb = cuda_download(b.trA, 1)[0], ts = ta + tb;
        for (size_t i = 0; i < dk; i++) ya[i] += yb[i];
        for (GeoFP8DeviceUnit* x : {&a, &b}) {
            CUDA_CHECK(cudaMemcpy(x->Y, ya.data(), dk * sizeof(float), cudaMemcpyHostToDevice));
            CUDA_CHECK(cudaMemcpy(x->trA, &ts, sizeof(double), cudaMemcpyHostToDevice));
        }
        geofp8_device_refresh_factor(&g[0], (int)gi, 0);
        int st = geofp8_device_refresh_reports(&g[0], 0)[gi].status;
        if (st != 0) printf("  note: unit %d refresh status %d\n", a.unit, st);
        CUDA_CHECK(cudaMemcpy(b.factor_next, a.factor_next, geofp8_factor_floats(a.d_in, a.r) * sizeof(float), cudaMemcpyDeviceToDevice));
        for (int r = 0; r < N; r++) geofp8_device_refresh_finish(&g[r], (int)gi, 0);
    }
    // the CPU mirror's factors: the ones the GPU now uses
    std::vector<GeoFP8Factor> F(g[0].geo.size());
    for (size_t gi = 0; gi < F.size(); gi++) {
        const GeoFP8DeviceUnit& a = g[0].geo[gi];
        std::vector<float> p = cuda_download(a.factor, geofp8_factor_floats(a.d_in, a.r));
        geofp8_factor_unpack(&F[gi], p.data(), a.d_in, a.r);
    }
    bool factor_not_identity = F[0].c != 1.0f;
    check(tag + ".refresh_factor", factor_not_identity, "c = %g, D_0 = %g", F[0].c, F[0].D[0]);
    std::vector<std::vector<float>> Rc(N * F.size());  // the CPU mirror's residuals, (rank, geometry unit)
    float* d_x[2] = {cuda_malloc<float>(P), cuda_malloc<float>(P)};
    for (int step = 0; step < 2; step++) {
        double worst_whiten = 0.0;
        std::vector<std::vector<float>> xc(N, std::vector<float>(P));
        std::vector<float> gmax(U, 0.0f);
        for (int r = 0; r < N; r++) {
            fill_grad(xc[r].data(), g[r].units, 7000 + 10 * step + r, 0);
            CUDA_CHECK(cudaMemcpy(d_x[r], xc[r].data(), P * sizeof(float), cudaMemcpyHostToDevice));
            geofp8_device_begin(&g[r], d_x[r], 1, 0);
            // CPU mirror: X = G T + R on the geometry units, against the GPU's X within GEMM
            // tolerance; from here on the mirror continues from the GPU's X, so that codes,
            // residuals and the average before un-whitening can be required bitwise
            std::vector<float> gx = cuda_download(d_x[r], P);
            for (size_t gi = 0; gi < F.size(); gi++) {
                int u = g[r].geo[gi].unit;
                float* xu = xc[r].data() + L.offset[u];
                geofp8_whiten(xu, xu, L.rows[u], L.cols[u], &F[gi], NULL);
                size_t idx = r * F.size() + gi;
                if (Rc[idx].empty()) Rc[idx].assign(L.size[u], 0.0f);
                for (size_t i = 0; i < L.size[u]; i++) xu[i] += Rc[idx][i];
                worst_whiten = std::max(worst_whiten, rel_l2(gx.data() + L.offset[u], xu, L.size[u]));
            }
            xc[r] = gx;
        }
        // host MAX of the GPU amax (the all-reduce), shared by both ranks
        for (int r = 0; r < N; r++) {
            std::vector<float> a = cuda_download(g[r].amax, U);
            for (size_t u = 0; u < U; u++) gmax[u] = std::max(gmax[u], a[u]);
        }
        std::vector<uint8_t> sum;
        for (int r = 0; r < N; r++) {
            CUDA_CHECK(cudaMemcpy(g[r].amax, gmax.data(), U * sizeof(float), cudaMemcpyHostToDevice));
            geofp8_device_scales(&g[r], 0);
            geofp8_device_quantize(&g[r], d_x[r], 1, 0);
            std::vector<uint8_t> q = cuda_download(g[r].q, P);
            if (r == 0) sum = q;
            else host_fp8_sum(FP8_E4M3, sum, q);
        }
        std::vector<float> out[2];
        for (int r = 0; r < N; r++) {
            CUDA_CHECK(cudaMemcpy(g[r].q, sum.data(), P, cudaMemcpyHostToDevice));
            geofp8_device_finish(&g[r], d_x[r], 1, 0);
            out[r] = cuda_download(d_x[r], P);
        }
        bool skip = geofp8_device_read_stats(&g[0], NULL, NULL, NULL, NULL, 0);
        // CPU mirror of the reduction
        std::vector<float> cmax(U, 0.0f), cs(U);
        for (int r = 0; r < N; r++)
            for (size_t u = 0; u < U; u++) cmax[u] = std::max(cmax[u], geofp8_amax(xc[r].data() + L.offset[u], L.size[u]));
        geofp8_block_scales(FP8_E4M3, cs.data(), cmax.data(), U, N);
        std::vector<uint8_t> csum;
        for (int r = 0; r < N; r++) {
            std::vector<uint8_t> q(P, 0);
            for (size_t u = 0; u < U; u++) {
                int gi = g[r].unit_to_geo[u];
                float* res = gi >= 0 ? Rc[r * F.size() + gi].data() : NULL;
                geofp8_quantize_ef(FP8_E4M3, q.data() + L.offset[u], res, xc[r].data() + L.offset[u], L.size[u], cs[u]);
            }
            if (r == 0) csum = q;
            else host_fp8_sum(FP8_E4M3, csum, q);
        }
        bool codes_ok = bit_mismatches(sum.data(), csum.data(), P) == 0;
        std::vector<float> cout(P, 0.0f);
        for (size_t u = 0; u < U; u++) geofp8_dequantize(FP8_E4M3, cout.data() + L.offset[u], csum.data() + L.offset[u], L.size[u], cs[u], N);
        for (size_t gi = 0; gi < F.size(); gi++) {
            int u = g[0].geo[gi].unit;
            float* xu = cout.data() + L.offset[u];
            geofp8_unwhiten(xu, xu, L.rows[u], L.cols[u], &F[gi], NULL);
        }
        bool euclid_ok = true, res_ok = true, same_ranks = bit_mismatches(out[0].data(), out[1].data(), P) == 0;
        double worst_geo = 0.0;
        for (size_t u = 0; u < U; u++) {
            const size_t off = L.offset[u], n = L.size[u];
            int gi = g[0].unit_to_geo[u];
            if (gi < 0) euclid_ok &= bit_mismatches(out[0].data() + off, cout.data() + off, n) == 0;
            else {
                worst_geo = std::max(worst_geo, rel_l2(out[0].data() + off, cout.data() + off, n));
                for (int r = 0; r < N; r++) {
                    std::vector<float> gr = cuda_download(g[r].geo[gi].residual, n);
                    res_ok &= bit_mismatches(gr.data(), Rc[r * F.size() + gi].data(), n) == 0;
                }
            }
        }
        std::string s = tag + ".step" + std::to_string(step);
        check(s + ".no_skip", !skip, "");
        check_bound(s + ".whiten_plus_residual", worst_whiten, TOL_GEMM, "max relative L2");
        check(s + ".codes_bitwise", codes_ok, "summed E4M3 codes of both ranks");
        check(s + ".ranks_agree", same_ranks, "both ranks hold bitwise the same average");
        check(s + ".euclidean_units_bitwise", euclid_ok, "");
        check(s + ".geometry_residuals_bitwise", res_ok, "error-feedback residuals of both ranks");
        check_bound(s + ".geometry_units_unwhitened", worst_geo, TOL_GEMM, "max relative L2");
    }
    for (int r = 0; r < N; r++) { CUDA_CHECK(cudaFree(d_x[r])); geofp8_device_free(&g[r]); }
}

// the collectives of comm.cuh on a one-rank NCCL communicator (NCCL accepts the types and ops;
// with one rank each one is a copy)
static void validate_nccl_single() {
    const std::string tag = "dev_geofp8.nccl_single_rank";
    CommGridGPU grid;
    comm_gpu_init_single(&grid, 0, 1);
    const size_t n = 4099;
    std::vector<float> x = normal_vec(n, 3, 1.0f);
    std::vector<uint8_t> q(n);
    for (size_t i = 0; i < n; i++) q[i] = fp8_e4m3_encode(x[i] * 16.0f);
    float* d_x = cuda_upload(x.data(), n);
    float* d_y = cuda_malloc<float>(n);
    uint8_t* d_q = cuda_upload(q.data(), n);
    uint8_t* d_q2 = cuda_malloc<uint8_t>(n);
    bool ok = true;
    comm_gpu_allreduce_f32_sum(&grid, d_x, d_y, n);
    ok &= bit_mismatches(cuda_download(d_y, n).data(), x.data(), n) == 0;
    comm_gpu_allreduce_f32_max(&grid, d_x, d_y, n);
    ok &= bit_mismatches(cuda_download(d_y, n).data(), x.data(), n) == 0;
    comm_gpu_allreduce_fp8_sum(&grid, d_q, d_q2, n, FP8_E4M3);
    ok &= bit_mismatches(cuda_download(d_q2, n).data(), q.data(), n) == 0;
    comm_gpu_allreduce_fp8_sum(&grid, d_q, d_q2, n, FP8_E5M2);
    ok &= bit_mismatches(cuda_download(d_q2, n).data(), q.data(), n) == 0;
    comm_gpu_allreduce_fp8_sum(&grid, d_q, d_q, n, FP8_E4M3);  // in place
    ok &= bit_mismatches(cuda_download(d_q, n).data(), q.data(), n) == 0;
    bf16* d_h = cuda_upload_bf16(x.data(), n);
    bf16* d_h2 = cuda_malloc<bf16>(n);
    comm_gpu_allreduce_bf16_sum(&grid, d_h, d_h2, n);
    std::vector<float> h1 = cuda_download_float(d_h, n), h2 = cuda_download_float(d_h2, n);
    ok &= bit_mismatches(h1.data(), h2.data(), n) == 0;
    std::vector<double> dv(7, 1.25);
    std::vector<unsigned long long> uv(7, 12345ull);
    double* d_dv = cuda_upload(dv.data(), 7);
    unsigned long long* d_uv = cuda_upload(uv.data(), 7);
    comm_gpu_allreduce_f64_sum(&grid, d_dv, d_dv, 7);
    comm_gpu_allreduce_u64_sum(&grid, d_uv, d_uv, 7);
    ok &= cuda_download(d_dv, 7)[3] == 1.25 && cuda_download(d_uv, 7)[6] == 12345ull;
    comm_gpu_alltoall_bytes(&grid, d_q, d_q2, n);
    ok &= bit_mismatches(cuda_download(d_q2, n).data(), q.data(), n) == 0;
    CUDA_CHECK(cudaMemset(d_q2, 0, n));
    comm_gpu_allgather_bytes(&grid, d_q, d_q2, n);
    ok &= bit_mismatches(cuda_download(d_q2, n).data(), q.data(), n) == 0;
    comm_gpu_broadcast_f32(&grid, d_x, n, 0);
    ok &= bit_mismatches(cuda_download(d_x, n).data(), x.data(), n) == 0;
    CUDA_CHECK(cudaStreamSynchronize(0));
    check(tag, ok, "f32 / f64 / u64 / bf16 / e4m3 sums, f32 max, all-to-all, all-gather, broadcast");
    void* bufs[] = {d_x, d_y, d_q, d_q2, d_h, d_h2, d_dv, d_uv};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    comm_gpu_finalize(&grid);
}

// ----------------------------------------------------------------------------
// benchmarks at the llama600m layout

static void bench() {
    Layout L = layout_llama("llama600m");
    const size_t P = L.total;
    const double Pd = (double)P;
    printf("\nbenchmarks: llama600m layout, %zu parameters, %zu units (H200 HBM3e 4.8 TB/s)\n", P, L.offset.size());
    float* x = cuda_malloc<float>(P);
    cuda_fill_uniform(x, P, 11, 1e-3f);
    GeoFP8Device g;
    geofp8_device_init(&g, L.offset, L.size, P, 32, 0, 0, 0, FP8_E4M3);
    for (int u : L.ef_units) geofp8_device_add_unit(&g, u, L.rows[u], L.cols[u], 32, 0);
    GeoFP8Device gb;
    geofp8_device_init(&gb, L.offset, L.size, P, 32, 0, 1, 0, FP8_E4M3);
    size_t ef_elems = 0;
    for (int u : L.ef_units) ef_elems += L.size[u];
    const int W = 3, I = 20;
    float ms;
    ms = cuda_bench_ms([&] { geofp8_amax_units(g.amax, x, &g.units, 0); }, W, I);
    cuda_print_bench("geofp8_amax_units", ms, 4.0 * Pd, 0);
    ms = cuda_bench_ms([&] { geofp8_block_amax_units(gb.amax, x, &gb.units, 0); }, W, I);
    cuda_print_bench("geofp8_block_amax_units", ms, 4.0 * Pd + 4.0 * Pd / GEOFP8_BLOCK, 0);
    ms = cuda_bench_ms([&] { geofp8_device_scales(&gb, 0); }, W, I);
    cuda_print_bench("geofp8_block_scales (per 512-block)", ms, 12.0 * gb.num_groups, 0);
    geofp8_device_scales(&g, 0);
    geofp8_device_scales(&gb, 0);
    ms = cuda_bench_ms([&] { geofp8_device_quantize(&g, x, 0, 0); }, W, I);
    cuda_print_bench("geofp8_quantize_ef_units (no EF)", ms, 5.0 * Pd, 0);
    ms = cuda_bench_ms([&] { geofp8_device_quantize(&g, x, 1, 0); }, W, I);
    cuda_print_bench("geofp8_quantize_ef_units (EF on 16 fc2)", ms, 5.0 * Pd + 4.0 * ef_elems, 0);
    ms = cuda_bench_ms([&] { geofp8_device_quantize(&gb, x, 0, 0); }, W, I);
    cuda_print_bench("geofp8_quantize_ef_units (fp8block)", ms, 5.0 * Pd + 4.0 * Pd / GEOFP8_BLOCK, 0);
    float* out = cuda_malloc<float>(P);
    ms = cuda_bench_ms([&] { geofp8_dequantize_units(FP8_E4M3, out, g.q, g.scale, 0, 32, &g.units, g.counts + 3 * g.units.dev.num_units, 0); }, W, I);
    cuda_print_bench("geofp8_dequantize_units", ms, 5.0 * Pd, 0);
    // transforms on one fc2 unit (1536 x 4096, r = 32)
    const int u = L.ef_units[0], d_out = L.rows[u], d_in = L.cols[u], r = 32;
    GeoFP8Factor f = cpu_factor(d_in, r, 5, NULL);
    float* d_f = upload_factor(f);
    float* G = x + L.offset[u];
    const double nn = (double)d_out * d_in, gemm_flops = 4.0 * nn * r;
    // whiten and unwhiten in pairs, so that the repeated in-place transform stays bounded
    ms = cuda_bench_ms([&] { geofp8_whiten(&g, G, d_out, d_in, d_f, r, 0); geofp8_unwhiten(&g, G, d_out, d_in, d_f, r, 0); }, W, I);
    cuda_print_bench("geofp8_whiten + geofp8_unwhiten 600m fc2 r32", ms, 2.0 * 5.0 * 4.0 * nn, 2.0 * gemm_flops);
    ms = cuda_bench_ms([&] { geofp8_residual_add(G, g.geo[0].residual, (size_t)nn, 0); }, W, I);
    cuda_print_bench("geofp8_residual_add 600m fc2", ms, 12.0 * nn, 0);
    // sketch: B = 4, T = 2048 tokens of the fc2 input (d_in = FF = 4096), k = 40
    const int ntok = 8192, k = geofp8_sketch_width(r, d_in);
    float* h = cuda_malloc<float>((size_t)ntok * d_in);
    bf16* hb = cuda_malloc<bf16>((size_t)ntok * d_in);
    cuda_fill_uniform(h, (size_t)ntok * d_in, 3, 1.0f);
    cuda_fill_uniform(hb, (size_t)ntok * d_in, 4, 1.0f);
    GeoFP8DeviceUnit& gu = g.geo[0];
    geofp8_device_refresh_begin(&g, 1, 0, 1, 0);
    const double sk_flops = 4.0 * ntok * d_in * k;
    ms = cuda_bench_ms([&] { geofp8_sketch_accumulate(&g, gu.Y, gu.trA, h, ntok, d_in, gu.omega, k, 1e-4f, 0); }, W, I);
    cuda_print_bench("geofp8_sketch_accumulate fp32 8192x4096", ms, 2.0 * 4.0 * ntok * d_in, sk_flops);
    ms = cuda_bench_ms([&] { geofp8_sketch_accumulate(&g, gu.Y, gu.trA, hb, ntok, d_in, gu.omega, k, 1e-4f, 0); }, W, I);
    cuda_print_bench("geofp8_sketch_accumulate bf16 8192x4096", ms, 2.0 * ntok * d_in + 2.0 * 4.0 * ntok * d_in, sk_flops);
    ms = cuda_bench_ms([&] { geofp8_device_refresh_factor(&g, 0, 0); }, 1, 5);
    cuda_print_bench("geofp8_nystrom d4096 k40 r32 (no host wait)", ms, 0, 0);
    // K-FAC
    for (int d : {1536, 4096}) {
        std::vector<float> S((size_t)d * d, 0.0f);
        std::vector<float> hh = normal_vec((size_t)2 * d * d, 9, 1.0f);
        geofp8_kfac_accumulate(S.data(), hh.data(), 2 * d, d, 1.0f / (2 * d));
        float* d_S = cuda_upload(S.data(), S.size());
        float* d_L = cuda_malloc<float>(S.size());
        ms = cuda_bench_ms([&] { geofp8_kfac_factor(&g, d_L, d_S, d, 0); }, 1, 5);
        char what[80];
        snprintf(what, sizeof(what), "geofp8_kfac_factor d%d (dpotrf, syncs)", d);
        cuda_print_bench(what, ms, 0, (double)d * d * d / 3.0);
        if (d == 4096) {
            float* d_LG = cuda_malloc<float>((size_t)d_out * d_out);
            geofp8_identity_kernel<<<cuda_grid_for((size_t)d_out * d_out, 256), 256>>>(d_LG, d_out);
            KERNEL_CHECK();
            ms = cuda_bench_ms([&] {
                geofp8_kfac_whiten(&g, G, d_out, d_in, d_LG, d_L, 0);
                geofp8_kfac_unwhiten(&g, G, d_out, d_in, d_LG, d_L, 0);
            }, W, I);
            cuda_print_bench("geofp8_kfac_whiten + unwhiten 600m fc2", ms, 0, 2.0 * nn * (d_out + d_in));
            ms = cuda_bench_ms([&] { geofp8_kfac_accumulate(&g, d_S, hb, ntok, d, 1e-4f, 0); }, W, I);
            cuda_print_bench("geofp8_kfac_accumulate bf16 8192 x 4096", ms, 0, (double)ntok * d * d);
            CUDA_CHECK(cudaFree(d_LG));
        }
        CUDA_CHECK(cudaFree(d_S));
        CUDA_CHECK(cudaFree(d_L));
    }
    // two-phase server and decode at N = 8
    GeoFP8Device gt;
    geofp8_device_init(&gt, L.offset, L.size, P, 8, 3, 0, 1, FP8_E4M3);
    CUDA_CHECK(cudaMemset(gt.recv, 0x31, gt.shard_size * 8));
    CUDA_CHECK(cudaMemset(gt.exps_all, 0, 8 * L.offset.size() * sizeof(int)));
    CUDA_CHECK(cudaMemset(gt.server_exps_all, 0, 8 * L.offset.size() * sizeof(int)));
    ms = cuda_bench_ms([&] { geofp8_device_twophase_server(&gt, 0); }, W, I);
    cuda_print_bench("geofp8_device_twophase_server N8 (shard)", ms, 8.0 * gt.shard_size + 4.0 * 5.0 * gt.shard_size, 0);
    ms = cuda_bench_ms([&] { geofp8_twophase_dequantize(FP8_E4M3, out, gt.q, gt.server_exps_all, gt.shard_size, 8, &gt.units, 0); }, W, I);
    cuda_print_bench("geofp8_twophase_dequantize N8", ms, 5.0 * Pd, 0);
    void* bufs[] = {x, out, d_f, h, hb};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    geofp8_device_free(&gt);
    geofp8_device_free(&gb);
    geofp8_device_free(&g);
}

int main(int argc, char** argv) {
    // --small: no llama600m-sized case (for the CPU emulation, dev/emu)
    DevFlags flags;
    if (!dev_flags_parse(argc, argv, "dev_geofp8", DEV_FLAG_SMALL, &flags)) return 2;
    const bool validate_only = flags.validate_only, small = flags.small;
    if (!cuda_device_present()) {
        printf("SKIP dev/cuda/geofp8: no CUDA device\n");
        return 77;
    }
    CudaDeviceInfo dev = cuda_device_info(0);
    printf("dev/cuda/geofp8 on %s (sm_%d%d, %d SMs)\n", dev.name, dev.major, dev.minor, dev.sm_count);
    validate_scales(FP8_E4M3);
    validate_scales(FP8_E5M2);
    Layout odd = layout_odd(), tiny = layout_llama("tiny"), l600 = layout_llama("llama600m");
    validate_native(odd, 3, 0, 1, FP8_E4M3);
    validate_native(odd, 5, 1, 2, FP8_E4M3);
    validate_native(tiny, 4, 0, 3, FP8_E4M3);
    validate_native(tiny, 16, 0, 4, FP8_E4M3);
    validate_native(tiny, 4, 1, 5, FP8_E4M3);
    validate_native(odd, 5, 0, 8, FP8_E5M2);
    validate_native(odd, 3, 1, 9, FP8_E5M2);
    validate_native(tiny, 4, 0, 10, FP8_E5M2);
    if (!small) {
        validate_native(l600, 2, 0, 6, FP8_E4M3);
        validate_native(l600, 2, 1, 7, FP8_E4M3);
    }
    validate_edges(odd, FP8_E4M3);
    validate_edges(tiny, FP8_E4M3);
    validate_edges(odd, FP8_E5M2);
    validate_twophase(odd, 3, FP8_E4M3);
    validate_twophase(odd, 7, FP8_E4M3);   // 64200 = 7 * 9171 + 3: a padded last shard
    validate_twophase(tiny, 4, FP8_E4M3);
    validate_twophase(odd, 7, FP8_E5M2);
    validate_plain_modes();
    validate_fidelity_sums(odd);
    validate_fidelity_sums(tiny);
    {
        GeoFP8Device g;
        std::vector<size_t> off = {0}, sz = {1};
        geofp8_device_init(&g, off, sz, 1, 1, 0, 0, 0, FP8_E4M3);
        validate_transforms(&g, 97, 61, 8, 3, 10);
        validate_transforms(&g, 40, 24, 24, 0, 11);      // r = k = d_in
        validate_transforms(&g, 128, 384, 32, 0, 12);    // tiny fc2
        validate_transforms(&g, 768, 128, 32, 5, 13);    // tiny fc1
        if (!small) validate_transforms(&g, 1536, 4096, 32, 0, 14);  // llama600m fc2
        validate_sketch(&g, 300, 61, 8, 20);
        validate_sketch(&g, 256, 128, 32, 21);
        validate_sketch(&g, 512, 384, 32, 22);
        if (!small) validate_sketch(&g, 1024, 4096, 32, 23);
        validate_nystrom(&g, 61, 8, 0, 0, 30);
        validate_nystrom(&g, 128, 32, 0, 0, 31);
        validate_nystrom(&g, 384, 32, 1, 0, 32);
        validate_nystrom(&g, 1536, 32, 0, 0, 33);
        if (!small) validate_nystrom(&g, 4096, 32, 1, 0, 34);
        validate_nystrom(&g, 384, 32, 0, 1, 35);
        validate_nystrom(&g, 384, 32, 0, 2, 36);
        validate_power(&g, 128, 384, 32, 37);
        if (!small) validate_power(&g, 1536, 4096, 32, 38);  // llama600m fc2
        validate_kfac(&g, 97, 61, 40);
        validate_kfac(&g, 128, 384, 41);
        validate_kfac(&g, 768, 128, 42);
        if (!small) validate_kfac(&g, 1536, 1536, 43);
        geofp8_device_free(&g);
    }
    validate_phases();
    validate_nccl_single();
    if (!validate_only) bench();
    printf("%s: %d failure(s)\n", g_failures ? "FAIL dev/cuda/geofp8" : "PASS dev/cuda/geofp8", g_failures);
    return g_failures ? 1 : 0;
}
