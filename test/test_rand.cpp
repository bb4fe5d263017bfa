// test_rand.cpp — llmc/rand.h and the parameter init of llmc/llama.h (which both engines run:
// train_llama_cpu.cpp and train_llama.cu call llama_init_params on the host).
//   - rand_skip(n) lands where n draws of rand_u64 do, across the 2^64 wrap-around;
//   - rand_fill_normal, whose blocks run in parallel, gives bitwise the values and the final state of
//     one sequential pass of rand_normal, at 1, 2, 3, 4 and 7 threads and at lengths around the
//     block size;
//   - llama_init_params equals a plain sequential init (written out below) bitwise at the same
//     thread counts, on a config whose tensors end mid-block;
//   - the tiny preset's init (seed 1337) hashes to the value the sequential generator gave before
//     the init became parallel, so runs, checkpoints and logs started earlier stay reproducible.
// Usage: build/test_rand [--time PRESET]   --time also times the init of PRESET (e.g. llama600m,
// 2.4 GB per copy) sequentially and at every thread count up to OMP_NUM_THREADS, and checks the
// parallel result bitwise against the sequential one.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "../llmc/llama.h"
#include "test_util.h"

static const int THREAD_COUNTS[] = {1, 2, 3, 4, 7};
static const uint64_t TINY_SEED = 1337;
// FNV-1a 64 of the bytes of llama_init_params(tiny, 1337), from the sequential code it replaced
static const uint64_t TINY_INIT_FNV = 0x688a218e4edfbb79ull;

static void set_threads(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

static int initial_threads = 1;  // OMP_NUM_THREADS or the core count, read before any change

static int max_threads(void) { return initial_threads; }

static uint64_t fnv1a64(const void* p, size_t bytes) {
    const unsigned char* b = static_cast<const unsigned char*>(p);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < bytes; i++) { h ^= b[i]; h *= 1099511628211ull; }
    return h;
}

// The init as one sequential stream of rand_normal, in the order of llama.h's layout comment.
static void reference_init(const LlamaConfig* c, float* params, uint64_t seed) {
    Rng rng;
    rand_init(&rng, seed);
    size_t sizes[LLAMA_NUM_TENSORS];
    llama_param_sizes(c, sizes);
    ParameterTensors p = llama_tensors(c, params);
    float residual_std = LLAMA_INIT_STD / sqrtf(2.0f * c->L);
    size_t real = (size_t)c->V * c->C, padded = (size_t)c->Vp * c->C;
    struct { float* out; size_t n; float std; } drawn[] = {
        {p.wte, real, LLAMA_INIT_STD},         {p.qkvw, sizes[T_QKVW], LLAMA_INIT_STD},
        {p.projw, sizes[T_PROJW], residual_std}, {p.fc1w, sizes[T_FC1W], LLAMA_INIT_STD},
        {p.fc2w, sizes[T_FC2W], residual_std},   {p.lm_head, real, LLAMA_INIT_STD}};
    for (auto& d : drawn)
        for (size_t i = 0; i < d.n; i++) d.out[i] = (float)(rand_normal(&rng) * d.std);
    for (size_t i = real; i < padded; i++) p.wte[i] = p.lm_head[i] = 0.0f;
    for (size_t i = 0; i < sizes[T_LN1W]; i++) p.ln1w[i] = p.ln2w[i] = 1.0f;
    for (size_t i = 0; i < sizes[T_LNFW]; i++) p.lnfw[i] = 1.0f;
}

// index of the first float whose bits differ, or -1
static long long first_difference(const float* a, const float* b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, sizeof(float)) != 0) return (long long)i;
    return -1;
}

static void test_skip_equals_draws(void) {
    bool ok = true;
    uint64_t seeds[] = {0, 1337, UINT64_MAX - 3};  // the last wraps within a few draws
    for (uint64_t seed : seeds) {
        for (uint64_t n : {0ull, 1ull, 2ull, 5ull, 1000ull, 123457ull}) {
            Rng drawn, skipped;
            rand_init(&drawn, seed);
            rand_init(&skipped, seed);
            for (uint64_t i = 0; i < n; i++) rand_u64(&drawn);
            rand_skip(&skipped, n);
            ok &= drawn.state == skipped.state && rand_u64(&drawn) == rand_u64(&skipped);
        }
    }
    test_check("rand.skip_equals_draws", ok, "rand_skip(n) differs from n draws of rand_u64");
}

static void test_fill_normal_bitwise(void) {
    const size_t B = RAND_FILL_BLOCK;
    const size_t lengths[] = {0, 1, B - 1, B, B + 1, 3 * B + 17};
    const uint64_t seed = UINT64_MAX - 1000;  // the state wraps inside the first block
    for (int threads : THREAD_COUNTS) {
        set_threads(threads);
        bool ok = true;
        char detail[256] = "";
        for (size_t n : lengths) {
            std::vector<float> ref(n + 1, -7.0f), got(n + 1, -7.0f);  // one guard element past the end
            Rng r_ref, r_got;
            rand_init(&r_ref, seed);
            rand_init(&r_got, seed);
            for (size_t i = 0; i < n; i++) ref[i] = (float)(rand_normal(&r_ref) * 0.5f);
            rand_fill_normal(&r_got, got.data(), n, 0.5f);
            long long d = first_difference(got.data(), ref.data(), n + 1);
            if (d >= 0 || r_got.state != r_ref.state) {
                ok = false;
                snprintf(detail, sizeof detail, "n=%zu: first differing element %lld, final state %s", n, d,
                         r_got.state == r_ref.state ? "equal" : "differs");
                break;
            }
        }
        char name[64];
        snprintf(name, sizeof name, "rand.fill_normal_bitwise_threads%d", threads);
        test_check(name, ok, "%s", detail);
    }
    set_threads(max_threads());
}

static void test_init_bitwise(void) {
    // tensors of 1 to 3 blocks that end mid-block, 61 padded vocabulary rows
    LlamaConfig c = {3011, 3072, 64, 3, 4, 2, 200, 64};
    if (const char* why = llama_config_problem(&c)) { test_check("rand.init_config", false, "%s", why); return; }
    size_t n = llama_num_params(&c);
    std::vector<float> ref(n), got(n);
    reference_init(&c, ref.data(), 42);
    for (int threads : THREAD_COUNTS) {
        set_threads(threads);
        std::fill(got.begin(), got.end(), NAN);
        llama_init_params(&c, got.data(), 42);
        long long d = first_difference(got.data(), ref.data(), n);
        char name[64];
        snprintf(name, sizeof name, "rand.init_bitwise_threads%d", threads);
        test_check(name, d < 0, "element %lld of %zu: %.9g, sequential %.9g", d, n, d >= 0 ? got[d] : 0.0, d >= 0 ? ref[d] : 0.0);
    }
    set_threads(max_threads());
}

static void test_tiny_init_unchanged(void) {
    LlamaConfig c;
    llama_preset("tiny", &c);
    std::vector<float> p(llama_num_params(&c));
    llama_init_params(&c, p.data(), TINY_SEED);
    uint64_t h = fnv1a64(p.data(), p.size() * sizeof(float));
    test_check("rand.tiny_init_unchanged", h == TINY_INIT_FNV, "FNV-1a %016llx, expected %016llx (the init's values changed)",
               (unsigned long long)h, (unsigned long long)TINY_INIT_FNV);
}

static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Sequential reference time, then the engine's init at 1..max threads, each compared bitwise.
static int time_init(const char* preset) {
    LlamaConfig c;
    if (!llama_preset(preset, &c)) {
        fprintf(stderr, "error: --time '%s' is not a preset; expected one of %s\n", preset, LLAMA_PRESET_LIST);
        return 1;
    }
    size_t n = llama_num_params(&c);
    std::vector<float> ref(n), got(n);
    auto t0 = std::chrono::steady_clock::now();
    reference_init(&c, ref.data(), TINY_SEED);
    double t_ref = seconds_since(t0);
    printf("init %s (%.1fM parameters): sequential reference %.2f s\n", preset, n / 1e6, t_ref);
    int top = max_threads();
    std::vector<int> counts;
    for (int t = 1; t < top; t *= 2) counts.push_back(t);
    counts.push_back(top);
    for (int threads : counts) {
        set_threads(threads);
        t0 = std::chrono::steady_clock::now();
        llama_init_params(&c, got.data(), TINY_SEED);
        double t = seconds_since(t0);
        printf("init %s: llama_init_params at %d thread%s %.2f s (%.2fx the sequential reference)\n", preset, threads,
               threads > 1 ? "s" : "", t, t_ref / t);
        char name[96];
        snprintf(name, sizeof name, "rand.init_bitwise_%s_threads%d", preset, threads);
        long long d = first_difference(got.data(), ref.data(), n);
        test_check(name, d < 0, "element %lld differs", d);
    }
    set_threads(top);
    return 0;
}

int main(int argc, char** argv) {
#ifdef _OPENMP
    initial_threads = omp_get_max_threads();
#endif
    test_skip_equals_draws();
    test_fill_normal_bitwise();
    test_init_bitwise();
    test_tiny_init_unchanged();
    if (argc == 3 && strcmp(argv[1], "--time") == 0) {
        if (time_init(argv[2]) != 0) return 1;
    } else if (argc != 1) {
        fprintf(stderr, "usage: %s [--time PRESET]\n", argv[0]);
        return 1;
    }
    return test_exit_code();
}
