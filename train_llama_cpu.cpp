/*
train_llama_cpu.cpp — the fp32 CPU reference trainer of train_llama.

It trains a Llama (DESIGN §3) with Muon + AdamW on llm.c-format token shards, on one process
or on N data-parallel MPI ranks, and is the spec the CUDA engine is checked against. It reads
top to bottom: model structs, forward, backward, gradient communication, update, main.

Dimension legend:
  B   micro-batch (sequences)        T   sequence length
  C   channels                       L   layers
  NH  query heads                    NKV key/value heads (NH % NKV == 0)
  HS  head size = C / NH             QKV = (NH + 2*NKV) * HS, fused q|k|v channels
  FF  MLP hidden size                V   vocabulary (50257), Vp padded vocabulary (50304)
  N   = B * T tokens of a micro-batch

Usage: ./train_llama_cpu [flags]           (--help lists them; docs/running.md explains them)
       mpirun -np 2 ./train_llama_cpu ...  (data parallel)
*/
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "llmc/utils.h"
#include "llmc/rand.h"
#include "llmc/llama.h"
#include "llmc/train_config.h"
#include "llmc/encoder.h"
#include "llmc/rmsnorm.h"
#include "llmc/matmul.h"
#include "llmc/rope.h"
#include "llmc/attention.h"
#include "llmc/swiglu.h"
#include "llmc/residual.h"
#include "llmc/crossentropy.h"
#include "llmc/adamw.h"
#include "llmc/muon.h"
#include "llmc/schedulers.h"
#include "llmc/dataloader.h"
#include "llmc/tokenizer.h"
#include "llmc/checkpoint.h"
#include "llmc/logger.h"
#include "llmc/run.h"
#include "llmc/comm.h"
#include "llmc/gradcomm.h"
#include "llmc/blas_select.h"

#define ADAMW_BETA1 0.9f
#define ADAMW_BETA2 0.95f
#define ADAMW_EPS 1e-8f
#define CLIP_EPS 1e-6  // as torch.nn.utils.clip_grad_norm_

// ----------------------------------------------------------------------------
// model structs

// Activations saved by the forward pass for the backward pass, sized for (B, T) at allocation;
// a forward may use any smaller (B, T) (sampling runs B=1).
typedef struct {
    float* residual;  // (L+1, B, T, C) input of each block; [L] feeds the final norm
    float* res_mid;   // (L, B, T, C) after the attention half of each block
    float* ln1;       // (L, B, T, C)
    float* ln1_rstd;  // (L, B, T)
    float* qkv;       // (L, B, T, QKV) after RoPE
    float* atty;      // (L, B, T, NH*HS) attention output, before proj
    float* lse;       // (L, B, NH, T) log-sum-exp of each attention row
    float* ln2;       // (L, B, T, C)
    float* ln2_rstd;  // (L, B, T)
    float* fc1;       // (L, B, T, 2*FF) [gate | up]
    float* sw;        // (L, B, T, FF) silu(gate) * up
    float* lnf;       // (B, T, C)
    float* lnf_rstd;  // (B, T)
    float* logits;    // (B, T, Vp); the backward overwrites it with dlogits
    float* losses;    // (B, T)
    float* branch;    // (B, T, C) output of proj / fc2 before the residual add
    // backward scratch, reused by every layer
    float* dres;      // (B, T, C) gradient of the residual stream
    float* dln;       // (B, T, C)
    float* dqkv;      // (B, T, QKV)
    float* datty;     // (B, T, NH*HS)
    float* dfc1;      // (B, T, 2*FF)
    float* dsw;       // (B, T, FF)
} Activations;

typedef struct {
    LlamaConfig config;
    size_t num_params;
    float* params;   // (num_params) fp32 master weights, flat layout (llama.h)
    float* grads;    // (num_params) same layout
    float* opt_m;    // (num_params) AdamW first moment / Muon momentum
    float* opt_v;    // (num_params) AdamW second moment (unused for Muon units)
    float* muon_scratch;
    std::vector<LlamaUnit> units;
    int B, T;        // allocation of the activations
    Activations acts;
    float* rope_cos; // (T, HS/2)
    float* rope_sin; // (T, HS/2)
    std::vector<float> muon_x;  // --muon-shard: every matrix's orthogonalized update, packed
} LlamaModel;

static void llama_model_alloc(LlamaModel* m, const LlamaConfig* c, int B, int T) {
    m->config = *c;
    m->num_params = llama_num_params(c);
    m->params = (float*)malloc_check(m->num_params * sizeof(float));
    m->grads = (float*)calloc_check(m->num_params, sizeof(float));
    m->opt_m = (float*)calloc_check(m->num_params, sizeof(float));
    m->opt_v = (float*)calloc_check(m->num_params, sizeof(float));
    m->units = llama_units(c);
    size_t scratch = 0;
    for (const LlamaUnit& u : m->units) if (u.is_matrix) scratch = std::max(scratch, muon_scratch_floats(u.rows, u.cols));
    m->muon_scratch = (float*)malloc_check(scratch * sizeof(float));
    m->B = B;
    m->T = T;
    size_t N = (size_t)B * T, C = c->C, L = c->L, FF = c->FF, QKV = llama_qkv_channels(c);
    size_t HSNH = (size_t)llama_head_size(c) * c->NH;
    Activations* a = &m->acts;
    a->residual = (float*)malloc_check((L + 1) * N * C * sizeof(float));
    a->res_mid = (float*)malloc_check(L * N * C * sizeof(float));
    a->ln1 = (float*)malloc_check(L * N * C * sizeof(float));
    a->ln1_rstd = (float*)malloc_check(L * N * sizeof(float));
    a->qkv = (float*)malloc_check(L * N * QKV * sizeof(float));
    a->atty = (float*)malloc_check(L * N * HSNH * sizeof(float));
    a->lse = (float*)malloc_check(L * N * c->NH * sizeof(float));
    a->ln2 = (float*)malloc_check(L * N * C * sizeof(float));
    a->ln2_rstd = (float*)malloc_check(L * N * sizeof(float));
    a->fc1 = (float*)malloc_check(L * N * 2 * FF * sizeof(float));
    a->sw = (float*)malloc_check(L * N * FF * sizeof(float));
    a->lnf = (float*)malloc_check(N * C * sizeof(float));
    a->lnf_rstd = (float*)malloc_check(N * sizeof(float));
    a->logits = (float*)malloc_check(N * c->Vp * sizeof(float));
    a->losses = (float*)malloc_check(N * sizeof(float));
    a->branch = (float*)malloc_check(N * C * sizeof(float));
    a->dres = (float*)malloc_check(N * C * sizeof(float));
    a->dln = (float*)malloc_check(N * C * sizeof(float));
    a->dqkv = (float*)malloc_check(N * QKV * sizeof(float));
    a->datty = (float*)malloc_check(N * HSNH * sizeof(float));
    a->dfc1 = (float*)malloc_check(N * 2 * FF * sizeof(float));
    a->dsw = (float*)malloc_check(N * FF * sizeof(float));
    int HS = llama_head_size(c);
    m->rope_cos = (float*)malloc_check((size_t)T * (HS / 2) * sizeof(float));
    m->rope_sin = (float*)malloc_check((size_t)T * (HS / 2) * sizeof(float));
    rope_precompute_cpu(m->rope_cos, m->rope_sin, T, HS);
}

static void llama_model_free(LlamaModel* m) {
    Activations* a = &m->acts;
    float* bufs[] = {m->params, m->grads, m->opt_m, m->opt_v, m->muon_scratch, a->residual, a->res_mid,
                     a->ln1, a->ln1_rstd, a->qkv, a->atty, a->lse, a->ln2, a->ln2_rstd, a->fc1, a->sw,
                     a->lnf, a->lnf_rstd, a->logits, a->losses, a->branch, a->dres, a->dln, a->dqkv,
                     a->datty, a->dfc1, a->dsw, m->rope_cos, m->rope_sin};
    for (float* b : bufs) free(b);
}

// One layer's slices of the activations, for a forward of N = B*T tokens.
typedef struct {
    float *x, *ln1, *ln1_rstd, *qkv, *atty, *lse, *mid, *ln2, *ln2_rstd, *fc1, *sw;
} LayerActs;

static LayerActs llama_layer_acts(LlamaModel* m, int l, int N) {
    const LlamaConfig* c = &m->config;
    size_t n = (size_t)N, C = c->C, FF = c->FF, QKV = llama_qkv_channels(c), HSNH = (size_t)llama_head_size(c) * c->NH;
    Activations* a = &m->acts;
    return LayerActs{a->residual + l * n * C, a->ln1 + l * n * C, a->ln1_rstd + l * n, a->qkv + l * n * QKV,
                     a->atty + l * n * HSNH, a->lse + l * n * c->NH, a->res_mid + l * n * C, a->ln2 + l * n * C,
                     a->ln2_rstd + l * n, a->fc1 + l * n * 2 * FF, a->sw + l * n * FF};
}

// ----------------------------------------------------------------------------
// forward: tokens (B, T) -> logits (B, T, Vp)

// last_only (the sampler): the final norm and the logits of the last position only, in row 0 of
// acts.logits (the lm_head is most of a small model's forward: 6.4M of the 7.2M weights tiny's
// matmuls read).
static void llama_forward(LlamaModel* m, const int* tokens, int B, int T, bool last_only = false) {
    const LlamaConfig* c = &m->config;
    int C = c->C, L = c->L, NH = c->NH, NKV = c->NKV, FF = c->FF, HS = llama_head_size(c);
    int QKV = llama_qkv_channels(c), HSNH = HS * NH, N = B * T;
    ParameterTensors p = llama_tensors(c, m->params);
    Activations* a = &m->acts;

    encoder_forward_cpu(a->residual, tokens, p.wte, N, C);
    for (int l = 0; l < L; l++) {
        LayerActs la = llama_layer_acts(m, l, N);
        float *x = la.x, *ln1 = la.ln1, *ln1_rstd = la.ln1_rstd, *qkv = la.qkv, *atty = la.atty, *lse = la.lse;
        float *mid = la.mid, *ln2 = la.ln2, *ln2_rstd = la.ln2_rstd, *fc1 = la.fc1, *sw = la.sw;
        float* out = a->residual + (size_t)(l + 1) * N * C;

        // attention half: x + proj(attn(rope(qkv(rmsnorm(x)))))
        rmsnorm_forward_cpu(ln1, ln1_rstd, x, p.ln1w + (size_t)l * C, N, C);
        matmul_forward_cpu(qkv, ln1, p.qkvw + (size_t)l * QKV * C, N, C, QKV);
        rope_forward_cpu(qkv, qkv, m->rope_cos, m->rope_sin, B, T, NH, NKV, HS);
        attention_forward_cpu(atty, lse, qkv, B, T, NH, NKV, HS);
        matmul_forward_cpu(a->branch, atty, p.projw + (size_t)l * C * HSNH, N, HSNH, C);
        residual_forward_cpu(mid, x, a->branch, (size_t)N * C);
        // MLP half: mid + fc2(silu(gate) * up), [gate; up] = fc1(rmsnorm(mid))
        rmsnorm_forward_cpu(ln2, ln2_rstd, mid, p.ln2w + (size_t)l * C, N, C);
        matmul_forward_cpu(fc1, ln2, p.fc1w + (size_t)l * 2 * FF * C, N, C, 2 * FF);
        swiglu_forward_cpu(sw, fc1, N, FF);
        matmul_forward_cpu(a->branch, sw, p.fc2w + (size_t)l * C * FF, N, FF, C);
        residual_forward_cpu(out, mid, a->branch, (size_t)N * C);
    }
    const float* xf = a->residual + (size_t)L * N * C;  // the last layer's output
    int rows = last_only ? 1 : N;
    if (last_only) xf += (size_t)(N - 1) * C;
    rmsnorm_forward_cpu(a->lnf, a->lnf_rstd, xf, p.lnfw, rows, C);
    matmul_forward_cpu(a->logits, a->lnf, p.lm_head, rows, C, c->Vp);
}

// Hands the inputs of the linear units to the gradient communication (factor refresh steps
// of geofp8 / kfac); the forward keeps every layer's activations, so this runs after it.
static void llama_observe_inputs(LlamaModel* m, GradComm* gc, int B, int T) {
    const LlamaConfig* c = &m->config;
    int N = B * T;
    for (int l = 0; l < c->L; l++) {
        LayerActs la = llama_layer_acts(m, l, N);
        gradcomm_observe_input(gc, llama_unit_index(c, T_QKVW, l), la.ln1, N);
        gradcomm_observe_input(gc, llama_unit_index(c, T_PROJW, l), la.atty, N);
        gradcomm_observe_input(gc, llama_unit_index(c, T_FC1W, l), la.ln2, N);
        gradcomm_observe_input(gc, llama_unit_index(c, T_FC2W, l), la.sw, N);
    }
}

// Mean cross-entropy of the logits of the last forward against targets (B, T).
static float llama_loss(LlamaModel* m, const int* targets, int B, int T) {
    return crossentropy_forward_cpu(m->acts.losses, m->acts.logits, targets, B * T, m->config.V, m->config.Vp);
}

// ----------------------------------------------------------------------------
// backward: accumulates d(loss * dloss_scale) into m->grads; returns this micro-batch's mean loss.
// dloss_scale = 1 / micro-steps, so the accumulated gradient is that of the mean over micro-steps.
// With gc on a kfac refresh step, the gradient at each linear unit's output goes to it too. With
// unit_ready, the backward calls it with each unit's index (llama_units) as soon as that unit's
// gradient is final, in the order of GradBuckets (lm_head first, embed last): on the last
// micro-step, this is where each bucket's communication starts.

typedef std::function<void(int unit)> UnitReadyFn;

static float llama_backward(LlamaModel* m, const int* tokens, const int* targets, int B, int T, float dloss_scale,
                            GradComm* gc = NULL, const UnitReadyFn& unit_ready = NULL) {
    const LlamaConfig* c = &m->config;
    int C = c->C, L = c->L, NH = c->NH, NKV = c->NKV, FF = c->FF, HS = llama_head_size(c);
    int QKV = llama_qkv_channels(c), HSNH = HS * NH, N = B * T;
    ParameterTensors p = llama_tensors(c, m->params);
    ParameterTensors g = llama_tensors(c, m->grads);
    Activations* a = &m->acts;
    auto ready = [&](int tensor, int layer) { if (unit_ready) unit_ready(llama_unit_index(c, tensor, layer)); };

    // logits become dlogits in place
    float loss = crossentropy_forward_backward_cpu(a->losses, a->logits, a->logits, targets, N, c->V, c->Vp,
                                                   dloss_scale / (float)N);
    memset(a->dln, 0, (size_t)N * C * sizeof(float));
    matmul_backward_cpu(a->dln, g.lm_head, a->logits, a->lnf, p.lm_head, N, C, c->Vp);
    ready(T_LMHEAD, -1);
    memset(a->dres, 0, (size_t)N * C * sizeof(float));
    rmsnorm_backward_cpu(a->dres, g.lnfw, a->dln, a->residual + (size_t)L * N * C, p.lnfw, a->lnf_rstd, N, C);
    ready(T_LNFW, -1);

    for (int l = L - 1; l >= 0; l--) {
        LayerActs la = llama_layer_acts(m, l, N);
        float *x = la.x, *ln1 = la.ln1, *ln1_rstd = la.ln1_rstd, *qkv = la.qkv, *atty = la.atty, *lse = la.lse;
        float *mid = la.mid, *ln2 = la.ln2, *ln2_rstd = la.ln2_rstd, *fc1 = la.fc1, *sw = la.sw;

        bool kfac = gc && gradcomm_wants_output_grads(gc);
        // MLP half; dres holds d(out) and, after rmsnorm_backward adds into it, d(mid)
        if (kfac) gradcomm_observe_output_grad(gc, llama_unit_index(c, T_FC2W, l), a->dres, N);
        memset(a->dsw, 0, (size_t)N * FF * sizeof(float));
        matmul_backward_cpu(a->dsw, g.fc2w + (size_t)l * C * FF, a->dres, sw, p.fc2w + (size_t)l * C * FF, N, FF, C);
        ready(T_FC2W, l);
        memset(a->dfc1, 0, (size_t)N * 2 * FF * sizeof(float));
        swiglu_backward_cpu(a->dfc1, a->dsw, fc1, N, FF);
        if (kfac) gradcomm_observe_output_grad(gc, llama_unit_index(c, T_FC1W, l), a->dfc1, N);
        memset(a->dln, 0, (size_t)N * C * sizeof(float));
        matmul_backward_cpu(a->dln, g.fc1w + (size_t)l * 2 * FF * C, a->dfc1, ln2, p.fc1w + (size_t)l * 2 * FF * C, N, C, 2 * FF);
        ready(T_FC1W, l);
        rmsnorm_backward_cpu(a->dres, g.ln2w + (size_t)l * C, a->dln, mid, p.ln2w + (size_t)l * C, ln2_rstd, N, C);
        ready(T_LN2W, l);
        // attention half; dres becomes d(x)
        if (kfac) gradcomm_observe_output_grad(gc, llama_unit_index(c, T_PROJW, l), a->dres, N);
        memset(a->datty, 0, (size_t)N * HSNH * sizeof(float));
        matmul_backward_cpu(a->datty, g.projw + (size_t)l * C * HSNH, a->dres, atty, p.projw + (size_t)l * C * HSNH, N, HSNH, C);
        ready(T_PROJW, l);
        memset(a->dqkv, 0, (size_t)N * QKV * sizeof(float));
        attention_backward_cpu(a->dqkv, a->datty, qkv, atty, lse, B, T, NH, NKV, HS);
        rope_backward_cpu(a->dqkv, a->dqkv, m->rope_cos, m->rope_sin, B, T, NH, NKV, HS);
        if (kfac) gradcomm_observe_output_grad(gc, llama_unit_index(c, T_QKVW, l), a->dqkv, N);
        memset(a->dln, 0, (size_t)N * C * sizeof(float));
        matmul_backward_cpu(a->dln, g.qkvw + (size_t)l * QKV * C, a->dqkv, ln1, p.qkvw + (size_t)l * QKV * C, N, C, QKV);
        ready(T_QKVW, l);
        rmsnorm_backward_cpu(a->dres, g.ln1w + (size_t)l * C, a->dln, x, p.ln1w + (size_t)l * C, ln1_rstd, N, C);
        ready(T_LN1W, l);
    }
    encoder_backward_cpu(g.wte, a->dres, tokens, N, C);
    ready(T_WTE, -1);
    return loss;
}

// ----------------------------------------------------------------------------
// gradient norm and clipping (on the communicated gradient)

// Global L2 norm; fixed-order partial sums so the result is bitwise reproducible.
static float llama_grad_norm(const float* grads, size_t n) {
    const size_t CHUNK = 1 << 16;
    size_t nchunks = (n + CHUNK - 1) / CHUNK;
    std::vector<double> partial(nchunks, 0.0);
    #pragma omp parallel for schedule(static)
    for (size_t k = 0; k < nchunks; k++) {
        double s = 0.0;
        size_t end = std::min(n, (k + 1) * CHUNK);
        for (size_t i = k * CHUNK; i < end; i++) s += (double)grads[i] * grads[i];
        partial[k] = s;
    }
    double total = 0.0;
    for (double s : partial) total += s;
    return (float)sqrt(total);
}

static void llama_clip_grads(float* grads, size_t n, float norm, float max_norm) {
    if (max_norm <= 0.0f) return;
    float coef = (float)(max_norm / ((double)norm + CLIP_EPS));
    if (coef >= 1.0f) return;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) grads[i] *= coef;
}

// ----------------------------------------------------------------------------
// update: Muon for the hidden matrices, AdamW for embeddings, lm_head and norms (DESIGN §7)

// The matrices Muon orthogonalizes one by one, in update order: whole matrix units, or with
// megatron_core's split_qkv the q, k and v row blocks of qkvw.
struct MuonItem {
    size_t offset;  // into the flat layout
    int rows, cols;
};
static std::vector<MuonItem> llama_muon_items(const LlamaModel* m, const MuonConfig* mc) {
    const LlamaConfig* c = &m->config;
    const int HS = llama_head_size(c);
    std::vector<MuonItem> items;
    for (const LlamaUnit& u : m->units) {
        if (!u.is_matrix) continue;
        if (mc->split_qkv && u.tensor == T_QKVW) {
            int rows[3] = {c->NH * HS, c->NKV * HS, c->NKV * HS};
            size_t off = u.offset;
            for (int k = 0; k < 3; k++) {
                items.push_back({off, rows[k], u.cols});
                off += (size_t)rows[k] * u.cols;
            }
        } else {
            items.push_back({u.offset, u.rows, u.cols});
        }
    }
    return items;
}

// The optimizer step on the averaged, clipped gradient: Muon on the hidden matrices (or AdamW
// everywhere with --optimizer adamw), AdamW on the rest. With --muon-shard 1 on N > 1 ranks each
// rank orthogonalizes only the matrices it owns (muon_shard_owners: a fixed assignment balanced
// by Newton–Schulz cost), every rank moves all momenta, and the owners' X reach every rank by a
// broadcast per matrix in fp32: the same X bit for bit as each rank computing all of them, so
// the update equals the unsharded one exactly.
// Returns the number of matrices this rank orthogonalized.
static int llama_update(LlamaModel* m, const TrainConfig* tc, const MuonConfig* mc, float lr, int step, CommGrid* grid) {
    const bool use_muon = tc->optimizer == "muon";
    for (const LlamaUnit& u : m->units) {
        if (use_muon && u.is_matrix) continue;
        bool is_norm = u.tensor == T_LN1W || u.tensor == T_LN2W || u.tensor == T_LNFW;
        float wd = is_norm ? 0.0f : tc->weight_decay;
        adamw_update_cpu(m->params + u.offset, m->grads + u.offset, m->opt_m + u.offset, m->opt_v + u.offset, (size_t)u.rows * u.cols, lr,
                         ADAMW_BETA1, ADAMW_BETA2, ADAMW_EPS, wd, step + 1);
    }
    if (!use_muon) return 0;
    const std::vector<MuonItem> items = llama_muon_items(m, mc);
    if (!tc->muon_shard || grid->world_size == 1) {
        for (const MuonItem& it : items)
            muon_update_cpu(m->params + it.offset, m->grads + it.offset, m->opt_m + it.offset, it.rows, it.cols, mc, lr, tc->weight_decay,
                            m->muon_scratch);
        return (int)items.size();
    }
    int mine = 0;
    std::vector<double> cost;
    for (const MuonItem& it : items) cost.push_back(muon_ns_cost(it.rows, it.cols));
    const std::vector<int> owner = muon_shard_owners(cost, grid->world_size);
    // X of every matrix, packed in item order (the owner's own, then everyone's after the broadcasts)
    std::vector<size_t> xoff(items.size() + 1, 0);
    for (size_t i = 0; i < items.size(); i++) xoff[i + 1] = xoff[i] + (size_t)items[i].rows * items[i].cols;
    m->muon_x.resize(xoff.back());
    for (size_t i = 0; i < items.size(); i++) {
        const MuonItem& it = items[i];
        const size_t n = (size_t)it.rows * it.cols;
        muon_momentum_cpu(m->muon_scratch, m->opt_m + it.offset, m->grads + it.offset, n, mc);
        if (owner[i] != grid->rank) continue;
        muon_newton_schulz_cpu(m->muon_scratch, it.rows, it.cols, mc, m->muon_scratch + n);
        mine++;
        memcpy(m->muon_x.data() + xoff[i], m->muon_scratch, n * sizeof(float));
    }
    for (size_t i = 0; i < items.size(); i++)
        comm_broadcast_floats(grid, m->muon_x.data() + xoff[i], xoff[i + 1] - xoff[i], owner[i]);
    for (size_t i = 0; i < items.size(); i++)
        muon_apply_cpu(m->params + items[i].offset, m->muon_x.data() + xoff[i], items[i].rows, items[i].cols, mc, lr, tc->weight_decay);
    return mine;
}

// ----------------------------------------------------------------------------
// one optimizer step: micro-steps, communicate, clip, update

typedef struct {
    float loss;         // mean over micro-steps and ranks
    float grad_norm;    // of the communicated gradient, before clipping
    float lr;
    double comm_bytes;  // sent by this rank
    int skipped_on_rank;  // -1: applied; else the step was skipped (non-finite on this rank, the highest such)
    double sketch_seconds;  // handing the activations to the geometry path's sketches (this rank, wall clock)
    int ns_matrices;        // matrices this rank orthogonalized (all of them, or its share with --muon-shard)
    int stop_signal;        // a stop signal some rank got before this step's skip decision (0: none; llmc/run.h)
} StepStats;

// Test hook: TRAIN_LLAMA_TEST_NAN="STEP:RANK" poisons RANK's gradient at (1-based) STEP, to
// check that every rank then skips the step identically.
static bool test_inject_nan(int step, int rank) {
    const char* env = getenv("TRAIN_LLAMA_TEST_NAN");
    int s = -1, r = -1;
    return env && sscanf(env, "%d:%d", &s, &r) == 2 && s == step && r == rank;
}

// next_batch(ctx, &inputs, &targets) hands out each micro-batch (B, T).
typedef void (*NextBatchFn)(void* ctx, const int** inputs, const int** targets);

// This process's logical ranks (DESIGN §6 "Virtual ranks"; one without --virtual-ranks): logical
// rank vrank0 + v draws its micro-batches from batch_ctx[v] and accumulates its gradient in grads[v].
typedef struct {
    int V, vrank0, N;               // logical ranks here, the first one, all of them
    std::vector<float*> grads;      // (V) grads[0] is the model's own buffer, which receives the average
    std::vector<void*> batch_ctx;   // (V)
} LocalRanks;

// One logical rank per process (every rank a process): the model's buffer and one batch source.
static LocalRanks local_ranks_single(LlamaModel* m, const CommGrid* grid, void* batch_ctx) {
    return LocalRanks{1, grid->rank, grid->world_size, {m->grads}, {batch_ctx}};
}

// The mean over logical ranks of x (one value per logical rank of this process), as every rank
// computes it: a fold in rank order (llmc/comm.h), so it does not depend on how the ranks are
// spread over processes.
static double llama_mean_over_ranks(CommGrid* grid, const std::vector<double>& x, int N) {
    std::vector<const void*> in;
    for (const double& v : x) in.push_back(&v);
    double sum = 0.0;
    comm_fold(grid, COMM_FOLD_F64, in.data(), (int)x.size(), &sum, 1);
    return sum / N;
}

static StepStats llama_train_step(LlamaModel* m, const TrainConfig* tc, const MuonConfig* mc, SchedulerKind sched,
                                  CommGrid* grid, GradComm* gc, int accum_steps, int step, NextBatchFn next_batch, LocalRanks* lr) {
    StepStats st;
    for (float* g : lr->grads) memset(g, 0, m->num_params * sizeof(float));
    gradcomm_begin_step(gc, step, (long long)tc->B * tc->T * accum_steps * lr->N);
    double sketch_seconds = 0.0;
    std::vector<double> loss_sum(lr->V, 0.0);
    int loss_bad = 0;
    for (int v = 0; v < lr->V; v++) {
        const int vrank = lr->vrank0 + v;
        gradcomm_set_vrank(gc, v);
        m->grads = lr->grads[v];
        for (int micro = 0; micro < accum_steps; micro++) {
            const int *inputs, *targets;
            next_batch(lr->batch_ctx[v], &inputs, &targets);
            llama_forward(m, inputs, tc->B, tc->T);
            if (gradcomm_wants_activations(gc)) {
                double t0 = run_now_seconds();
                llama_observe_inputs(m, gc, tc->B, tc->T);
                sketch_seconds += run_now_seconds() - t0;
            }
            // the last micro-step's backward (of this process's last logical rank) starts each
            // gradient bucket's communication as it finishes it
            const bool last = v == lr->V - 1 && micro == accum_steps - 1;
            if (last) gradcomm_start(gc, grid, lr->grads.data(), step);
            UnitReadyFn unit_ready = [&](int unit) {
                if (unit == 0 && test_inject_nan(step + 1, vrank)) m->grads[0] = NAN;  // unit 0: the embedding
                gradcomm_unit_ready(gc, unit);
            };
            loss_sum[v] += llama_backward(m, inputs, targets, tc->B, tc->T, 1.0f / accum_steps, gc, last ? unit_ready : NULL);
        }
        if (v < lr->V - 1 && test_inject_nan(step + 1, vrank)) m->grads[0] = NAN;
        if (!std::isfinite(loss_sum[v])) loss_bad = vrank + 1;
        loss_sum[v] /= accum_steps;
    }
    m->grads = lr->grads[0];
    st.lr = scheduler_lr(sched, step, tc->steps, tc->warmup, tc->lr, tc->final_lr_frac);
    st.loss = NAN; st.grad_norm = NAN; st.comm_bytes = 0.0; st.sketch_seconds = sketch_seconds; st.ns_matrices = 0;
    // the rest of the communication; a non-finite loss or gradient on any rank: every rank skips
    // this step identically
    bool fidelity = gradcomm_fidelity_step(tc, step);
    gc->stop_signal = run_stop_signal;  // rides on the skip all-reduce, so that every rank sees it at this step
    int bad_rank = gradcomm_finish(gc, loss_bad, fidelity);
    gradcomm_end_step(gc, step);  // the factors are settled: the next refresh's Ω starts building
    st.stop_signal = gc->stop_signal;
    st.skipped_on_rank = bad_rank - 1;
    if (bad_rank > 0) return st;
    st.comm_bytes = gc->stats.bytes;
    if (gc->stats.skipped) { st.skipped_on_rank = lr->N; return st; }  // a non-finite scale
    st.loss = (float)llama_mean_over_ranks(grid, loss_sum, lr->N);
    st.grad_norm = llama_grad_norm(m->grads, m->num_params);
    llama_clip_grads(m->grads, m->num_params, st.grad_norm, tc->grad_clip);
    st.ns_matrices = llama_update(m, tc, mc, st.lr, step, grid);
    return st;
}

// ----------------------------------------------------------------------------
// sampling: B=1 forward over the last window, multinomial over the V real tokens

static void llama_sample(LlamaModel* m, const Tokenizer* tok, const TrainConfig* tc, unsigned long long seed) {
    const LlamaConfig* c = &m->config;
    const int T = tc->T;
    Rng rng;
    rand_init(&rng, seed);
    std::vector<int> seq = run_sample_first_tokens(tc, c->V);
    printf("generating:\n---\n");
    if (!tc->prompt_tokens.empty())
        for (int id : seq) { if (tok->ok) tokenizer_print_safe(tokenizer_decode(tok, (uint32_t)id)); else printf("%d ", id); }
    for (int k = 0; k < tc->gen_tokens; k++) {
        int len = std::min((int)seq.size(), T);
        const int* window = seq.data() + seq.size() - len;
        llama_forward(m, window, 1, len, true);
        int next = run_sample_token(m->acts.logits, c->V, rand_uniform(&rng), tc->temperature, tc->top_k);
        seq.push_back(next);
        if (tok->ok) tokenizer_print_safe(tokenizer_decode(tok, (uint32_t)next)); else printf("%d ", next);
        fflush(stdout);
    }
    printf("\n---\n");
}

// ----------------------------------------------------------------------------
// main

// --virtual-ranks: what V logical ranks per process cost in memory, against what this node has.
// Each process holds the model (weights, gradient, two optimizer moments), V - 1 more gradients,
// the communication's per-rank buffers (values and codes, or the packed fp32 / bf16 copies), a
// fold's two staging copies of every rank's contribution where there are several processes
// (llmc/comm.h), and each logical rank's copy of the current train and val shard; the processes
// of a node share its memory. Measured: tiny, -c fp8 with fidelity steps, 16 logical ranks in one
// process, 2.25 GB at most (this estimate: 2.26 GB). Returns ""
// or the reason to refuse, the same on every rank of the node.
static std::string run_virtual_memory_problem(const LlamaConfig* lc, const TrainConfig* tc, const DataLoader& train,
                                              const DataLoader* val, int V, int N, CommGrid* grid) {
    const double P = (double)llama_num_params(lc), gib = 1073741824.0;
    const bool staged = grid->world_size > 1;  // a fold between processes stages two copies of every contribution
    double per_rank = 4.0 * P;  // a gradient
    if (tc->comm == "fp32") per_rank += 4.0 * P + (staged ? 8.0 * P : 0.0);
    else if (tc->comm == "bf16") per_rank += 2.0 * P + (staged ? 4.0 * P : 0.0);
    else per_rank += 5.0 * P + (staged ? 2.0 * P : 0.0);  // values and codes
    if (tc->fidelity_every > 0 && staged) per_rank += 8.0 * P;  // the fp32 reference's fold
    if (tc->fidelity_every > 0 && (tc->comm == "geofp8" || tc->comm == "kfac")) {
        // the fair figures (gradcomm_fair_step): a counterfactual residual, a copy of G and the
        // quantizer's values and codes of the geometry units, at most every linear unit
        double linear = 0.0;
        for (const LlamaUnit& u : llama_units(lc)) if (u.is_matrix) linear += (double)u.rows * u.cols;
        per_rank += 13.0 * linear + (staged ? 9.0 * linear : 0.0);
    }
    size_t shard = 0;
    for (size_t t : train.shard_tokens) shard = std::max(shard, t);
    if (val) for (size_t t : val->shard_tokens) shard = std::max(shard, t);
    per_rank += 2.0 * 2.0 * (double)shard;
    const double need = 4.0 * 4.0 * P + V * per_rank;  // the model, then V logical ranks
    MPI_Comm node;
    int here = 1;
    MPI_CHECK(MPI_Comm_split_type(grid->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_size(node, &here));
    MPI_CHECK(MPI_Comm_free(&node));
    double avail = 0.0;
    FILE* f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof(line), f)) {
            long long kb;
            if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) avail = kb * 1024.0;
        }
        fclose(f);
    }
    if (avail <= 0.0 || need * here <= 0.9 * avail) return "";
    char b[512];
    snprintf(b, sizeof(b), "--virtual-ranks %d: %d logical ranks in each of %d process%s on this node need about %.1f GiB "
             "(%.1f GiB each: the model, and per logical rank a gradient, its communication buffers and a shard copy), "
             "but %.1f GiB are available (hint: fewer virtual ranks, or the same number over the processes of more nodes)",
             N, V, here, here == 1 ? "" : "es", need * here / gib, need / gib, avail / gib);
    return b;
}

// The start-up checks' collectives (llmc/run.h) over MPI.
static int cpu_ranks_max_int(void* g, int x) { return comm_max_int((CommGrid*)g, x); }
static std::string cpu_ranks_broadcast(void* g, const std::string& s) { return comm_broadcast_string((CommGrid*)g, s); }
static void cpu_ranks_finalize(void* g) { comm_finalize((CommGrid*)g); }
static void cpu_ranks_broadcast_floats(void* g, float* x, size_t n, int root) { comm_broadcast_floats((CommGrid*)g, x, n, root); }
static RunRanks cpu_run_ranks(CommGrid* g) {
    return RunRanks{g->rank, g->world_size, g, cpu_ranks_max_int, cpu_ranks_broadcast, cpu_ranks_finalize, cpu_ranks_broadcast_floats};
}

#ifndef TRAIN_LLAMA_NO_MAIN

int main(int argc, char** argv) {
    run_install_stop_signals();  // first thing: a stop during start-up is graceful too (llmc/run.h)
    blas_select_early(argc, argv);  // may restart this program on faster OpenBLAS kernels (llmc/blas_select.h)
    CommGrid grid;
    comm_init(&grid, &argc, &argv);
    run_test_signal(0, grid.rank);
    run_test_slow_start();
    TrainConfig tc;
    train_config_parse(&tc, argc, argv);
    if (tc.attention != "auto")
        user_error("--attention %s: train_llama_cpu has one attention, the fp32 reference (flash and cublas are train_llama's)", tc.attention.c_str());

    // logical ranks: --virtual-ranks N puts N / P of them in each of the P processes
    const int P = grid.world_size;
    if (tc.virtual_ranks > 0 && tc.virtual_ranks % P != 0)
        user_error("--virtual-ranks %d: expected a multiple of the %d processes of this job (each holds the same number of logical ranks)",
                   tc.virtual_ranks, P);
    if (tc.virtual_ranks > P && tc.muon_shard)
        user_error("--muon-shard 1: shares Newton-Schulz between processes for speed; --virtual-ranks simulates the numerics of %d ranks, "
                   "not their time (use one or the other)", tc.virtual_ranks);
    const int V = tc.virtual_ranks > 0 ? tc.virtual_ranks / P : 1, N = P * V;
    if (tc.virtual_ranks == P) tc.virtual_ranks = 0;  // one logical rank per process: the same run as without the flag

    // model config (a preset or a checkpoint file) and batch
    LlamaConfig lc;
    bool from_file = false;
    int accum_steps = run_resolve_config(&tc, &lc, N, &from_file);
    MuonPreset preset = MUON_MOONLIGHT;
    muon_preset_from_name(tc.muon.c_str(), &preset);  // validated by the flag table
    MuonConfig mc = muon_config(preset);
    SchedulerKind sched = SCHEDULER_COSINE;
    scheduler_from_name(tc.schedule.c_str(), &sched);

    // data (validated before anything is written): one train and one val loader per logical rank,
    // logical rank 0's here, the others' once their memory is known to fit
    std::vector<DataLoader> train_loaders(V), val_loaders(V);
    bool do_val = tc.val_every > 0;
    run_open_loaders(&tc, lc.V, grid.rank * V, N, 0, 1, &train_loaders, &val_loaders);
    DataLoader& train_loader = train_loaders[0];
    DataLoader& val_loader = val_loaders[0];
    run_resolve_steps(&tc, &train_loader);

    // every rank checks the same things in the same order: flags and data against rank 0's,
    // then the output directory (lock, leftovers), then the resume point
    std::string model_desc = from_file ? llama_config_string(&lc) : tc.model + " " + llama_config_string(&lc);
    std::string settings = run_settings(&tc, &lc, N, &train_loader, do_val ? &val_loader : NULL, false);
    RunRanks ranks = cpu_run_ranks(&grid);
    blas_select_agree(&ranks);
    run_check_same_settings(&ranks, run_settings(&tc, &lc, N, &train_loader, do_val ? &val_loader : NULL, true));
    if (V > 1) run_agree(&ranks, run_virtual_memory_problem(&lc, &tc, train_loader, do_val ? &val_loader : NULL, V, N, &grid));
    run_open_loaders(&tc, lc.V, grid.rank * V, N, 1, V, &train_loaders, &val_loaders);
    GradComm gc;
    gradcomm_init(&gc, &tc, &lc, &grid, V);
    uint32_t file_crc = 0;
    std::vector<float> file_params = run_read_model_file(&tc, &lc, from_file, &file_crc);
    run_check_same_model_file(&tc, &ranks, from_file, file_crc);
    Tokenizer tokenizer;
    tokenizer.ok = 0;
    if (tc.sample_every > 0 && grid.rank == 0) tokenizer_init(&tokenizer, tc.tokenizer.c_str());
    run_startup_stop(&ranks, tc, 0, argc, argv);
    run_open_output(&tc, &ranks);
    CheckpointState resume_state;
    std::vector<float> resume_params;
    int start_step = run_find_resume(&tc, &lc, settings, &ranks, &train_loader, accum_steps, &resume_state, &resume_params);

    // the model
    int consecutive_skips = 0;  // non-finite steps in a row; the run stops past --max-skips
    LlamaModel model;
    llama_model_alloc(&model, &lc, tc.B, tc.T);
    // the other logical ranks' gradient buffers, and where each draws its batches
    std::vector<std::vector<float>> vgrads(V - 1, std::vector<float>(model.num_params, 0.0f));
    LocalRanks local = {V, grid.rank * V, N, {model.grads}, {&train_loaders[0]}};
    for (int v = 1; v < V; v++) { local.grads.push_back(vgrads[v - 1].data()); local.batch_ctx.push_back(&train_loaders[v]); }
    if (start_step > 0) {
        memcpy(model.params, resume_params.data(), model.num_params * sizeof(float));
        std::vector<float>().swap(resume_params);
        memcpy(model.opt_m, resume_state.m.data(), model.num_params * sizeof(float));
        memcpy(model.opt_v, resume_state.v.data(), model.num_params * sizeof(float));
        dataloader_set_state(&train_loader, resume_state.data_state);
        for (int v = 1; v < V; v++) {  // the others' positions follow from the step, as the state file's does (checked at resume)
            int64_t pos[3];
            dataloader_state_after(&train_loaders[v], (long long)start_step * accum_steps, pos);
            dataloader_set_state(&train_loaders[v], pos);
        }
        consecutive_skips = (int)resume_state.skipped_steps;
        gradcomm_load(&gc, &resume_state, checkpoint_state_path(tc.output_dir, start_step, grid.rank).c_str());
    } else if (from_file) {
        memcpy(model.params, file_params.data(), model.num_params * sizeof(float));
    } else {
        llama_init_params(&lc, model.params, tc.seed);
    }
    run_startup_stop(&ranks, tc, start_step, argc, argv);  // a stop during the -y 1 load or the model's init
    gradcomm_omega_prepare(&gc, start_step);  // the first refresh's Ω, built while the run starts

    // past every start-up check: the run commits to -o (deletes what it set aside), then logs there
    Logger logger = {NULL, NULL, "", ""};
    run_commit_output(&tc, &ranks);
    if (!tc.output_dir.empty() && grid.rank == 0) logger_init(&logger, tc.output_dir, start_step);
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    if (grid.rank == 0) {
        char b[256];
        printf("+------------------------+--------------------------------------------------+\n");
        run_print_row("setting", "value");
        printf("+------------------------+--------------------------------------------------+\n");
        run_print_row("engine", "train_llama_cpu (fp32, OpenMP + OpenBLAS)");
        run_print_run_rows(tc, model_desc, model.num_params, train_loader, do_val ? &val_loader : NULL, N, accum_steps,
                           start_step, "MPI", gradcomm_buckets_summary(&gc.buckets, tc.bucket_mb, gc.twophase));
        if (V > 1) {
            snprintf(b, sizeof(b), "%d logical ranks, %d in each of %d processes (--virtual-ranks)", N, V, P);
            run_print_row("virtual ranks", b);
        }
        snprintf(b, sizeof(b), "%d OpenMP threads per rank", threads); run_print_row("threads", b);
        run_print_row("BLAS", g_blas_select.row);
        snprintf(b, sizeof(b), "%llu", tc.seed); run_print_row("seed", b);
        printf("+------------------------+--------------------------------------------------+\n");
        fflush(stdout);
    }

    double t_run0 = run_now_seconds(), train_seconds = 0.0;
    int timed_steps = 0;
    float last_loss = NAN;
    int stop_sig = 0;  // a stop signal every rank has agreed on (llmc/run.h)
    bool stopped = false;
    if (grid.world_size > 1) watchdog_start(tc.comm_timeout, grid.rank);  // every MPI call from here on (llmc/watchdog.h)
    CheckpointWriter writer;  // the checkpoint being written while training goes on (llmc/checkpoint_writer.h)
    for (int step = start_step; step <= tc.steps; step++) {
        watchdog_set_step(step);  // the validation and checkpoint of this step; the training of step + 1 below
        bool last = step == tc.steps;
        bool fresh = step == start_step && start_step > 0;  // just resumed: this step was already evaluated and saved
        const bool stopping = stop_sig != 0 && !last;
        run_checkpoint_settle(&ranks, &writer, &tc, step, false);  // DONE once every rank's files are in place

        if (do_val && !fresh && (step % tc.val_every == 0 || last)) {
            std::vector<double> mean(V, 0.0);  // each logical rank's mean over its val batches
            for (int v = 0; v < V; v++) {
                dataloader_reset(&val_loaders[v]);
                for (int k = 0; k < tc.val_batches; k++) {
                    dataloader_next_batch(&val_loaders[v]);
                    llama_forward(&model, val_loaders[v].inputs, tc.B, tc.T);
                    mean[v] += llama_loss(&model, val_loaders[v].targets, tc.B, tc.T);
                }
                mean[v] /= tc.val_batches;
            }
            float val_loss = (float)llama_mean_over_ranks(&grid, mean, N);
            if (grid.rank == 0) run_report_val(&logger, step, val_loss, tc.total_batch);
        }
        if (tc.sample_every > 0 && grid.rank == 0 && !fresh && (step > 0 || tc.steps == 0) && (step % tc.sample_every == 0 || last)) {
            llama_sample(&model, &tokenizer, &tc, tc.seed + (unsigned long long)step);
        }
        if (run_checkpoint_due(tc, step, fresh, last) || (stopping && !tc.output_dir.empty())) {
            // copies of what the files hold, written while the next steps train (--checkpoint-async)
            double t_ckpt = run_checkpoint_begin(&ranks, &writer, &tc, step, &train_loader, consecutive_skips, settings);
            run_state_moments(&ranks, &writer.state, model.opt_m, model.opt_v, model.num_params);  // this rank's share
            gradcomm_save(&gc, &writer.state.extras);
            run_checkpoint_write(&ranks, &writer, &tc, &lc, model.params, step, t_ckpt, last || stopping);
        }
        if (stopping) {
            // no rank exits before rank 0 has marked the checkpoint whole (a launcher such as
            // srun --kill-on-bad-exit ends the others at the first exit)
            comm_barrier(&grid);
            if (grid.rank == 0) run_print_stopped(tc, stop_sig, step, argc, argv, grid.world_size);
            stopped = true;
            break;
        }
        if (last) break;

        if (getenv("TRAIN_LLAMA_TEST_SLOW")) usleep(200000);  // test hook: widen the window for a kill
        run_test_signal(step + 1, grid.rank);
        watchdog_set_step(step + 1);
        double t0 = run_now_seconds();
        StepStats st = llama_train_step(&model, &tc, &mc, sched, &grid, &gc, accum_steps, step, run_next_batch, &local);
        stop_sig = st.stop_signal;  // every rank alike
        float loss = st.loss, norm = st.grad_norm, lr = st.lr;
        double comm_bytes = st.comm_bytes;
        double dt = run_now_seconds() - t0;
        if (st.skipped_on_rank >= 0) {
            consecutive_skips++;
            if (grid.rank == 0) {
                if (st.skipped_on_rank < N)
                    printf("step %5d/%d | skipped: non-finite loss or gradient on rank %d (%d in a row)\n",
                           step + 1, tc.steps, st.skipped_on_rank, consecutive_skips);
                else
                    printf("step %5d/%d | skipped: non-finite value in the %s coordinates (%d in a row)\n",
                           step + 1, tc.steps, tc.comm.c_str(), consecutive_skips);
                std::string line;
                logger_field(&line, "step", step + 1);
                logger_field(&line, "skipped", 1);
                logger_field(&line, "nonfinite_rank", st.skipped_on_rank);
                logger_metrics(&logger, line);
            }
            if (consecutive_skips > tc.max_skips) {
                if (grid.rank == 0)
                    fprintf(stderr, "error: stopping at step %d: %d consecutive steps had a non-finite loss or gradient "
                            "(limit --max-skips %d; hint: lower -l, or resume from an earlier checkpoint)\n",
                            step + 1, consecutive_skips, tc.max_skips);
                comm_finalize(&grid);
                return 1;
            }
            continue;
        }
        consecutive_skips = 0;
        last_loss = loss;
        if (step > start_step) { train_seconds += dt; timed_steps++; }  // the first step warms caches

        if (grid.rank == 0) {
            double tok_s = tc.total_batch / dt;
            double avg = timed_steps > 0 ? train_seconds / timed_steps : dt;
            double eta = avg * (tc.steps - step - 1);
            printf("step %5d/%d | loss %.6f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s | comm %.0f B | eta %s%s\n",
                   step + 1, tc.steps, loss, lr, norm, dt * 1e3, tok_s, comm_bytes, run_format_duration(eta).c_str(),
                   gradcomm_step_summary(&gc).c_str());
            fflush(stdout);
            logger_train(&logger, step + 1, loss);
            std::string line;
            logger_field(&line, "step", step + 1);
            logger_field(&line, "tokens", (double)(step + 1) * tc.total_batch);
            logger_field(&line, "train_loss", loss);
            logger_field(&line, "lr", lr);
            logger_field(&line, "grad_norm", norm);
            logger_field(&line, "ms", dt * 1e3);
            logger_field(&line, "t_sketch_ms", st.sketch_seconds * 1e3);
            logger_field(&line, "t_refresh_ms", gc.stats.refresh_seconds * 1e3);
            logger_field(&line, "t_omega_ms", gc.stats.omega_seconds * 1e3);
            logger_field(&line, "ns_matrices", st.ns_matrices);
            logger_field(&line, "tokens_per_s", tok_s);
            logger_field(&line, "comm_bytes", comm_bytes);
            logger_field(&line, "eta_s", eta);
            gradcomm_log_fields(&gc, &line);
            logger_metrics(&logger, line);
        }
    }
    if (grid.rank == 0 && !stopped) {
        double total = run_now_seconds() - t_run0;
        if (tc.steps > start_step) printf("done: %d steps, final train loss %.6f, %.1f s", tc.steps - start_step, last_loss, total);
        else printf("done: no step to train (-x %d, from step %d), %.1f s", tc.steps, start_step, total);
        if (timed_steps > 0) printf(", %.0f tok/s average", tc.total_batch * timed_steps / train_seconds);
        printf("\n");
    }
    logger_free(&logger);
    if (tokenizer.ok) tokenizer_free(&tokenizer);
    for (int v = 0; v < V; v++) {
        dataloader_free(&train_loaders[v]);
        if (do_val) dataloader_free(&val_loaders[v]);
    }
    llama_model_free(&model);
    comm_finalize(&grid);
    return stopped ? RUN_EXIT_STOPPED : 0;
}
#endif  // TRAIN_LLAMA_NO_MAIN
