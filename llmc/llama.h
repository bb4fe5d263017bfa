// llama.h — the model's shape, shared by both engines (host only): LlamaConfig, the presets
// (DESIGN §3), the flat parameter layout and the "units" (one layer's one tensor) that logs,
// layer lists and gradient communication talk about.
//
// Flat layout (parameters and gradients alike), in this order:
//   wte (Vp, C) | ln1w (L, C) | ln2w (L, C) | qkvw (L, (NH+2*NKV)*HS, C) | projw (L, C, NH*HS)
//   | fc1w (L, 2*FF, C) rows [0,FF) gate, [FF,2FF) up | fc2w (L, C, FF) | lnfw (C) | lm_head (Vp, C)
// Weights are row-major (out, in). qkv rows: NH q heads, then NKV k heads, then NKV v heads.
#pragma once
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <cmath>
#include <string>
#include <vector>
#include "rand.h"

#define LLAMA_NUM_TENSORS 9
#define LLAMA_GPT2_VOCAB 50257   // V: GPT-2 BPE
#define LLAMA_GPT2_VOCAB_PADDED 50304  // Vp: V rounded up to a multiple of 128 for fast matmuls
#define LLAMA_INIT_STD 0.02f

typedef struct {
    int V;    // real vocabulary size
    int Vp;   // padded vocabulary size (rows of wte and lm_head)
    int C;    // channels
    int L;    // layers
    int NH;   // query heads
    int NKV;  // key/value heads (divides NH)
    int FF;   // MLP hidden size
    int T;    // maximum sequence length
} LlamaConfig;

enum LlamaTensor { T_WTE = 0, T_LN1W, T_LN2W, T_QKVW, T_PROJW, T_FC1W, T_FC2W, T_LNFW, T_LMHEAD };
static const char* const LLAMA_TENSOR_NAMES[LLAMA_NUM_TENSORS] = {
    "wte", "ln1w", "ln2w", "qkvw", "projw", "fc1w", "fc2w", "lnfw", "lm_head"};

static inline int llama_head_size(const LlamaConfig* c) { return c->C / c->NH; }
static inline int llama_qkv_channels(const LlamaConfig* c) { return (c->NH + 2 * c->NKV) * llama_head_size(c); }

// Vp: V rounded up to a multiple of 128 (the rows of wte and lm_head)
static inline int llama_padded_vocab(int V) { return (V + 127) / 128 * 128; }

// Returns 1 and fills *out for a known preset name, else 0.
static inline int llama_preset(const char* name, LlamaConfig* out) {
    struct { const char* name; int C, L, NH, NKV, FF, T; } presets[] = {
        {"tiny", 128, 4, 4, 2, 384, 256},
        {"d12", 768, 12, 12, 12, 2048, 1024},
        {"llama300m", 1024, 16, 16, 16, 2816, 4096},
        {"llama600m", 1536, 16, 12, 12, 4096, 2048},
    };
    for (auto& p : presets) {
        if (strcmp(p.name, name) == 0) {
            *out = LlamaConfig{LLAMA_GPT2_VOCAB, LLAMA_GPT2_VOCAB_PADDED, p.C, p.L, p.NH, p.NKV, p.FF, p.T};
            return 1;
        }
    }
    return 0;
}
#define LLAMA_PRESET_LIST "tiny, d12, llama300m, llama600m"

// Internal consistency of a config (user input arrives through presets or checkpoint headers,
// which check it themselves); returns NULL or a description of the problem.
static inline const char* llama_config_problem(const LlamaConfig* c) {
    if (c->V <= 0 || c->Vp < c->V) return "need 0 < V <= Vp";
    if (c->C <= 0 || c->L <= 0 || c->NH <= 0 || c->NKV <= 0 || c->FF <= 0 || c->T <= 0) return "all sizes must be positive";
    // bounds keep every size computation below within int / size_t (headers come from files)
    if (c->Vp > (1 << 24) || c->C > (1 << 16) || c->L > 4096 || c->FF > (1 << 20) || c->T > (1 << 20))
        return "sizes out of range (Vp <= 2^24, C <= 65536, L <= 4096, FF <= 2^20, T <= 2^20)";
    if (c->NH > c->C || c->NKV > c->NH) return "need NKV <= NH <= C";
    if (c->C % c->NH != 0) return "C must be divisible by NH";
    if (c->NH % c->NKV != 0) return "NH must be divisible by NKV";
    if ((c->C / c->NH) % 2 != 0) return "head size C/NH must be even (RoPE rotates pairs)";
    return NULL;
}

static inline bool llama_config_equal(const LlamaConfig* a, const LlamaConfig* b) {
    return a->V == b->V && a->Vp == b->Vp && a->C == b->C && a->L == b->L && a->NH == b->NH &&
           a->NKV == b->NKV && a->FF == b->FF && a->T == b->T;
}

// "C=128 L=4 NH=4 NKV=2 FF=384 T=256 V=50257 Vp=50304"
static inline std::string llama_config_string(const LlamaConfig* c) {
    char buf[256];
    snprintf(buf, sizeof(buf), "C=%d L=%d NH=%d NKV=%d FF=%d T=%d V=%d Vp=%d",
             c->C, c->L, c->NH, c->NKV, c->FF, c->T, c->V, c->Vp);
    return buf;
}

// Element counts of the nine tensors, in layout order.
static inline void llama_param_sizes(const LlamaConfig* c, size_t sizes[LLAMA_NUM_TENSORS]) {
    size_t C = c->C, L = c->L, FF = c->FF, Vp = c->Vp, QKV = llama_qkv_channels(c);
    size_t HSNH = (size_t)llama_head_size(c) * c->NH;
    sizes[T_WTE] = Vp * C;
    sizes[T_LN1W] = L * C;
    sizes[T_LN2W] = L * C;
    sizes[T_QKVW] = L * QKV * C;
    sizes[T_PROJW] = L * C * HSNH;
    sizes[T_FC1W] = L * 2 * FF * C;
    sizes[T_FC2W] = L * C * FF;
    sizes[T_LNFW] = C;
    sizes[T_LMHEAD] = Vp * C;
}

static inline size_t llama_num_params(const LlamaConfig* c) {
    size_t sizes[LLAMA_NUM_TENSORS], n = 0;
    llama_param_sizes(c, sizes);
    for (int i = 0; i < LLAMA_NUM_TENSORS; i++) n += sizes[i];
    return n;
}

// Offsets of the nine tensors inside the flat buffer.
static inline void llama_param_offsets(const LlamaConfig* c, size_t offsets[LLAMA_NUM_TENSORS]) {
    size_t sizes[LLAMA_NUM_TENSORS], off = 0;
    llama_param_sizes(c, sizes);
    for (int i = 0; i < LLAMA_NUM_TENSORS; i++) { offsets[i] = off; off += sizes[i]; }
}

// Pointers to the nine tensors of a flat buffer (parameters or gradients).
typedef struct {
    float* wte;      // (Vp, C)
    float* ln1w;     // (L, C)
    float* ln2w;     // (L, C)
    float* qkvw;     // (L, (NH+2*NKV)*HS, C)
    float* projw;    // (L, C, NH*HS)
    float* fc1w;     // (L, 2*FF, C)
    float* fc2w;     // (L, C, FF)
    float* lnfw;     // (C)
    float* lm_head;  // (Vp, C)
} ParameterTensors;

static inline ParameterTensors llama_tensors(const LlamaConfig* c, float* flat) {
    size_t o[LLAMA_NUM_TENSORS];
    llama_param_offsets(c, o);
    return ParameterTensors{flat + o[0], flat + o[1], flat + o[2], flat + o[3], flat + o[4],
                            flat + o[5], flat + o[6], flat + o[7], flat + o[8]};
}

// A unit: one layer's one tensor, the granularity of logs, optimizer routing and FP8 scales.
typedef struct {
    std::string name;  // "embed", "layers.3.fc2", "final_norm", "lm_head"
    int tensor;        // LlamaTensor
    int layer;         // -1 for non-layer tensors
    size_t offset;     // into the flat buffer
    int rows, cols;    // as a matrix (norms: 1 x C)
    bool is_matrix;    // a 2-D hidden matrix (Muon): qkv, proj, fc1, fc2
} LlamaUnit;

static inline std::vector<LlamaUnit> llama_units(const LlamaConfig* c) {
    size_t o[LLAMA_NUM_TENSORS];
    llama_param_offsets(c, o);
    int C = c->C, FF = c->FF, QKV = llama_qkv_channels(c), HSNH = llama_head_size(c) * c->NH;
    std::vector<LlamaUnit> units;
    units.push_back({"embed", T_WTE, -1, o[T_WTE], c->Vp, C, false});
    for (int l = 0; l < c->L; l++) {
        std::string p = "layers." + std::to_string(l) + ".";
        units.push_back({p + "ln1", T_LN1W, l, o[T_LN1W] + (size_t)l * C, 1, C, false});
        units.push_back({p + "qkv", T_QKVW, l, o[T_QKVW] + (size_t)l * QKV * C, QKV, C, true});
        units.push_back({p + "proj", T_PROJW, l, o[T_PROJW] + (size_t)l * C * HSNH, C, HSNH, true});
        units.push_back({p + "ln2", T_LN2W, l, o[T_LN2W] + (size_t)l * C, 1, C, false});
        units.push_back({p + "fc1", T_FC1W, l, o[T_FC1W] + (size_t)l * 2 * FF * C, 2 * FF, C, true});
        units.push_back({p + "fc2", T_FC2W, l, o[T_FC2W] + (size_t)l * C * FF, C, FF, true});
    }
    units.push_back({"final_norm", T_LNFW, -1, o[T_LNFW], 1, C, false});
    units.push_back({"lm_head", T_LMHEAD, -1, o[T_LMHEAD], c->Vp, C, false});
    return units;
}

// Index into llama_units() of (tensor, layer); layer is ignored for embed, final_norm, lm_head.
static inline int llama_unit_index(const LlamaConfig* c, int tensor, int layer) {
    static const int in_layer[LLAMA_NUM_TENSORS] = {-1, 0, 3, 1, 2, 4, 5, -1, -1};  // ln1 qkv proj ln2 fc1 fc2
    if (tensor == T_WTE) return 0;
    if (tensor == T_LNFW) return 1 + 6 * c->L;
    if (tensor == T_LMHEAD) return 2 + 6 * c->L;
    return 1 + 6 * layer + in_layer[tensor];
}

// DESIGN §3 init: normal(0, 0.02) for matrices, proj and fc2 scaled by 1/sqrt(2L), norms 1,
// padded vocabulary rows zero (they are never looked up and their logits never count).
// One splitmix64 stream from `seed`, tensor after tensor in layout order; rand_fill_normal draws
// it on every OpenMP thread with the bits of a sequential pass, so both engines (train_llama.cu
// runs this on the host too) start from identical weights at any thread count.
static inline void llama_init_params(const LlamaConfig* c, float* params, unsigned long long seed) {
    Rng rng;
    rand_init(&rng, seed);
    size_t sizes[LLAMA_NUM_TENSORS];
    llama_param_sizes(c, sizes);
    ParameterTensors p = llama_tensors(c, params);
    float residual_std = LLAMA_INIT_STD / sqrtf(2.0f * c->L);
    size_t real_rows = (size_t)c->V * c->C, pad = (size_t)(c->Vp - c->V) * c->C;
    rand_fill_normal(&rng, p.wte, real_rows, LLAMA_INIT_STD);
    memset(p.wte + real_rows, 0, pad * sizeof(float));
    for (size_t i = 0; i < sizes[T_LN1W]; i++) p.ln1w[i] = 1.0f;
    for (size_t i = 0; i < sizes[T_LN2W]; i++) p.ln2w[i] = 1.0f;
    rand_fill_normal(&rng, p.qkvw, sizes[T_QKVW], LLAMA_INIT_STD);
    rand_fill_normal(&rng, p.projw, sizes[T_PROJW], residual_std);
    rand_fill_normal(&rng, p.fc1w, sizes[T_FC1W], LLAMA_INIT_STD);
    rand_fill_normal(&rng, p.fc2w, sizes[T_FC2W], residual_std);
    for (size_t i = 0; i < sizes[T_LNFW]; i++) p.lnfw[i] = 1.0f;
    rand_fill_normal(&rng, p.lm_head, real_rows, LLAMA_INIT_STD);
    memset(p.lm_head + real_rows, 0, pad * sizeof(float));
}

// Forward FLOPs per token for one training step (forward + backward = 3x forward), counting
// matmuls and attention (causal, so half of T*T): used for MFU and reported throughput.
static inline double llama_flops_per_token(const LlamaConfig* c, int T) {
    double C = c->C, FF = c->FF, QKV = llama_qkv_channels(c), HSNH = llama_head_size(c) * c->NH;
    double per_layer = 2.0 * (C * QKV + HSNH * C + C * 2.0 * FF + FF * C) + 2.0 * HSNH * T;  // attn: 2 matmuls, causal half
    double fwd = c->L * per_layer + 2.0 * C * c->Vp;
    return 3.0 * fwd;
}
