/*
train_llama.cu — the CUDA trainer of train_llama: bf16 mixed precision, hand-written kernels,
cuBLASLt GEMMs, Muon via cuBLAS.

It trains the same Llama (DESIGN §3) as train_llama_cpu.cpp, with the same command line
(llmc/train_config.h), data (llmc/dataloader.h), checkpoints (llmc/checkpoint.h: fp32 master
weights and fp32 optimizer state in the same files, so either engine resumes the other's run),
logs (llmc/logger.h), init (llmc/llama.h) and schedules (llmc/schedulers.h). It reads top to
bottom like the CPU trainer: model structs, forward, backward, gradient communication, update,
main. Every layer lives in llmc/NAME.cuh next to its fp32 reference llmc/NAME.h.

Precision:
  fp32  master weights, the flat gradient buffer (same layout as the CPU engine), AdamW / Muon
        state, the residual stream and its gradient, logits, norm statistics, every reduction
  bf16  a compute copy of the weights (refreshed by the optimizer kernels), every other
        activation and activation gradient; GEMMs run bf16 x bf16 with fp32 accumulation, and
        weight gradients accumulate in fp32 straight from the GEMM (no bf16 rounding)
Data parallel over NCCL, one rank per GPU (llmc/comm.cuh): launched by mpirun / srun --mpi=pmix
(MPI), by plain srun (Slurm, NCCL id through a shared file), or as one process. After the last
micro-step the flat fp32 gradient buffer goes through the -c mode of llmc/gradcomm.cuh (fp32,
bf16, fp8, fp8block, geofp8, kfac; --fp8-reduce native | twophase), the GPU twin of the CPU
engine's llmc/gradcomm.h. Each step's phases are timed with cudaEvents (t_*_ms in metrics.jsonl).

Dimension legend:
  B   micro-batch (sequences)        T   sequence length
  C   channels                       L   layers
  NH  query heads                    NKV key/value heads (NH % NKV == 0)
  HS  head size = C / NH             QKV = (NH + 2*NKV) * HS, fused q|k|v channels
  FF  MLP hidden size                V   vocabulary (50257), Vp padded vocabulary (50304)
  N   = B * T tokens of a micro-batch

Usage: ./train_llama [flags]   (--help lists them; docs/running.md explains them)
*/
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <unistd.h>

#include "llmc/utils.h"
#include "llmc/rand.h"
#include "llmc/llama.h"
#include "llmc/train_config.h"
#include "llmc/schedulers.h"
#include "llmc/dataloader.h"
#include "llmc/tokenizer.h"
#include "llmc/checkpoint.h"
#include "llmc/logger.h"
#include "llmc/run.h"
#include "llmc/watchdog.h"
#include "llmc/cuda_common.cuh"
#include "llmc/matmul.cuh"
#include "llmc/encoder.cuh"
#include "llmc/rmsnorm.cuh"
#include "llmc/rope.cuh"
#include "llmc/attention.cuh"
#include "llmc/swiglu.cuh"
#include "llmc/crossentropy.cuh"
#include "llmc/adamw.cuh"
#include "llmc/muon.cuh"
#include "llmc/global_norm.cuh"
#include "llmc/comm.cuh"
#include "llmc/gradcomm.cuh"

#define ADAMW_BETA1 0.9f
#define ADAMW_BETA2 0.95f
#define ADAMW_EPS 1e-8f
#define CLIP_EPS 1e-6  // as torch.nn.utils.clip_grad_norm_

// ----------------------------------------------------------------------------
// model structs

// Activations saved by the forward pass for the backward pass, sized for (B, T) at allocation;
// a forward may use any smaller (B, T) (sampling runs B=1).
typedef struct {
    float* residual;   // (L+1, B, T, C) fp32 input of each block; [L] feeds the final norm
    float* res_mid;    // (L, B, T, C) fp32 after the attention half of each block
    bf16* ln1;         // (L, B, T, C)
    float* ln1_rstd;   // (L, B, T)
    bf16* qkv;         // (L, B, T, QKV) after RoPE
    bf16* atty;        // (L, B, T, NH*HS) attention output, before proj
    float* lse;        // (L, B, NH, T) log-sum-exp of each attention row
    bf16* ln2;         // (L, B, T, C)
    float* ln2_rstd;   // (L, B, T)
    bf16* fc1;         // (L, B, T, 2*FF) [gate | up]
    bf16* sw;          // (L, B, T, FF) silu(gate) * up
    bf16* lnf;         // (B, T, C)
    float* lnf_rstd;   // (B, T)
    float* logits;     // (B, T, Vp) fp32
    bf16* dlogits;     // (B, T, Vp)
    float* losses;     // (B, T)
    // backward scratch, reused by every layer
    float* dres;       // (B, T, C) fp32 gradient of the residual stream
    bf16* dres_bf16;   // (B, T, C) its bf16 copy, the input of the proj / fc2 backward GEMMs
    bf16* dln;         // (B, T, C)
    bf16* dqkv;        // (B, T, QKV)
    bf16* datty;       // (B, T, NH*HS)
    bf16* dfc1;        // (B, T, 2*FF)
    bf16* dsw;         // (B, T, FF)
    float* dw_partials;  // (ceil(B*T / RMSNORM_DW_SLAB), C) the norm-weight gradient's partial sums
} Activations;

// The bf16 compute copy of the weights, in the flat layout (pointers into params_bf16).
typedef struct {
    bf16* wte; bf16* ln1w; bf16* ln2w; bf16* qkvw; bf16* projw; bf16* fc1w; bf16* fc2w; bf16* lnfw; bf16* lm_head;
} ParameterTensorsBF16;

static ParameterTensorsBF16 llama_tensors_bf16(const LlamaConfig* c, bf16* flat) {
    size_t o[LLAMA_NUM_TENSORS];
    llama_param_offsets(c, o);
    return ParameterTensorsBF16{flat + o[0], flat + o[1], flat + o[2], flat + o[3], flat + o[4],
                                flat + o[5], flat + o[6], flat + o[7], flat + o[8]};
}

// Pinned, double-buffered host staging of the uploads of each micro-step (tokens, targets, the
// embedding backward's buckets): an upload copies its host data into the next of two pinned slots
// of its kind and starts an asynchronous copy from there; a slot is refilled only once the copy
// started from it two uploads earlier has finished (its event), so the host does not wait for
// the copy it has just started, and the data loader may reuse its buffer at once. The losses of
// a step's micro-steps come back into one pinned buffer, one slot of B*T per micro-step, and are
// read once per step (llama_train_step).
enum { STAGE_TOKENS = 0, STAGE_TARGETS, STAGE_BUCKETS, STAGE_KINDS };
struct HostStaging {
    int* slot[STAGE_KINDS][2] = {};
    size_t cap = 0;                       // ints per slot: 3 B T + 1, the largest upload (the buckets)
    cudaEvent_t done[STAGE_KINDS][2] = {};
    int next[STAGE_KINDS] = {};
    float* losses = NULL;                 // (loss_slots, B T)
    int loss_slots = 0;
};

typedef struct {
    LlamaConfig config;
    size_t num_params;
    float* params;        // (num_params) fp32 master weights, flat layout (llama.h), device
    bf16* params_bf16;    // (num_params) bf16 compute copy, same layout
    float* grads;         // (num_params) fp32, same layout
    float* opt_m;         // (num_params) AdamW first moment / Muon momentum
    float* opt_v;         // (num_params) AdamW second moment (unused for Muon units)
    std::vector<LlamaUnit> units;
    int B, T;             // allocation of the activations
    Activations acts;
    float* rope_cos;      // (T, HS/2)
    float* rope_sin;      // (T, HS/2)
    AttentionScratch attn;
    MuonWorkspace muon;
    bf16* muon_x;         // --muon-shard: every matrix's orthogonalized X, packed (allocated on its first step)
    int* tokens;          // (B, T) device copy of the inputs
    int* targets;         // (B, T) device copy of the targets
    int* buckets;         // (2*B*T + 1 + B*T) encoder backward buckets (encoder_backward_buckets)
    std::vector<int> host_buckets;
    HostStaging stage;    // pinned host side of the uploads and of the loss read-back
    double* norm_sq;      // (1) global gradient norm squared
    double* norm_partials;// (GLOBAL_NORM_BLOCKS)
    cudaStream_t stream;
} LlamaModel;

static void llama_model_alloc(LlamaModel* m, const LlamaConfig* c, int B, int T, AttentionKind attention) {
    m->config = *c;
    m->num_params = llama_num_params(c);
    size_t P = m->num_params;
    m->params = cuda_malloc<float>(P);
    m->params_bf16 = cuda_malloc<bf16>(P);
    m->grads = cuda_malloc<float>(P);
    m->opt_m = cuda_malloc<float>(P);
    m->opt_v = cuda_malloc<float>(P);
    CUDA_CHECK(cudaMemset(m->grads, 0, P * sizeof(float)));
    CUDA_CHECK(cudaMemset(m->opt_m, 0, P * sizeof(float)));
    CUDA_CHECK(cudaMemset(m->opt_v, 0, P * sizeof(float)));
    m->units = llama_units(c);
    m->B = B;
    m->T = T;
    m->stream = 0;
    size_t N = (size_t)B * T, C = c->C, L = c->L, FF = c->FF, QKV = llama_qkv_channels(c);
    int HS = llama_head_size(c);
    size_t HSNH = (size_t)HS * c->NH;
    Activations* a = &m->acts;
    a->residual = cuda_malloc<float>((L + 1) * N * C);
    a->res_mid = cuda_malloc<float>(L * N * C);
    a->ln1 = cuda_malloc<bf16>(L * N * C);
    a->ln1_rstd = cuda_malloc<float>(L * N);
    a->qkv = cuda_malloc<bf16>(L * N * QKV);
    a->atty = cuda_malloc<bf16>(L * N * HSNH);
    a->lse = cuda_malloc<float>(L * N * c->NH);
    a->ln2 = cuda_malloc<bf16>(L * N * C);
    a->ln2_rstd = cuda_malloc<float>(L * N);
    a->fc1 = cuda_malloc<bf16>(L * N * 2 * FF);
    a->sw = cuda_malloc<bf16>(L * N * FF);
    a->lnf = cuda_malloc<bf16>(N * C);
    a->lnf_rstd = cuda_malloc<float>(N);
    a->logits = cuda_malloc<float>(N * c->Vp);
    a->dlogits = cuda_malloc<bf16>(N * c->Vp);
    a->losses = cuda_malloc<float>(N);
    a->dres = cuda_malloc<float>(N * C);
    a->dres_bf16 = cuda_malloc<bf16>(N * C);
    a->dln = cuda_malloc<bf16>(N * C);
    a->dqkv = cuda_malloc<bf16>(N * QKV);
    a->datty = cuda_malloc<bf16>(N * HSNH);
    a->dfc1 = cuda_malloc<bf16>(N * 2 * FF);
    a->dsw = cuda_malloc<bf16>(N * FF);
    a->dw_partials = cuda_malloc<float>(rmsnorm_dweight_scratch_floats((int)N, (int)C));
    std::vector<float> cos_t((size_t)T * (HS / 2)), sin_t((size_t)T * (HS / 2));
    rope_precompute_cpu(cos_t.data(), sin_t.data(), T, HS);
    m->rope_cos = cuda_upload(cos_t.data(), cos_t.size());
    m->rope_sin = cuda_upload(sin_t.data(), sin_t.size());
    attention_scratch_alloc(&m->attn, attention, B, T, c->NH, c->NKV, HS);
    muon_workspace_init(&m->muon);
    m->muon_x = NULL;
    // reserve the largest Muon batch now so no allocation happens inside the training loop
    for (const LlamaUnit& u : m->units) if (u.is_matrix && u.layer == 0) muon_workspace_reserve(&m->muon, u.rows, u.cols, c->L);
    m->tokens = cuda_malloc<int>(N);
    m->targets = cuda_malloc<int>(N);
    m->buckets = cuda_malloc<int>(3 * N + 1);
    HostStaging* h = &m->stage;
    h->cap = 3 * N + 1;
    for (int k = 0; k < STAGE_KINDS; k++)
        for (int i = 0; i < 2; i++) {
            CUDA_CHECK(cudaMallocHost((void**)&h->slot[k][i], h->cap * sizeof(int)));
            CUDA_CHECK(cudaEventCreate(&h->done[k][i]));
        }
    h->loss_slots = 1;
    CUDA_CHECK(cudaMallocHost((void**)&h->losses, N * sizeof(float)));
    m->norm_sq = cuda_malloc<double>(1);
    m->norm_partials = cuda_malloc<double>(GLOBAL_NORM_BLOCKS);
    matmul_init();
}

static void llama_model_free(LlamaModel* m) {
    Activations* a = &m->acts;
    void* bufs[] = {m->params, m->params_bf16, m->grads, m->opt_m, m->opt_v, a->residual, a->res_mid, a->ln1,
                    a->ln1_rstd, a->qkv, a->atty, a->lse, a->ln2, a->ln2_rstd, a->fc1, a->sw, a->lnf, a->lnf_rstd,
                    a->logits, a->dlogits, a->losses, a->dres, a->dres_bf16, a->dln, a->dqkv, a->datty, a->dfc1,
                    a->dsw, a->dw_partials, m->rope_cos, m->rope_sin, m->tokens, m->targets, m->buckets, m->norm_sq, m->norm_partials};
    for (void* b : bufs) CUDA_CHECK(cudaFree(b));
    if (m->muon_x) CUDA_CHECK(cudaFree(m->muon_x));
    HostStaging* h = &m->stage;
    for (int k = 0; k < STAGE_KINDS; k++)
        for (int i = 0; i < 2; i++) {
            CUDA_CHECK(cudaFreeHost(h->slot[k][i]));
            CUDA_CHECK(cudaEventDestroy(h->done[k][i]));
        }
    CUDA_CHECK(cudaFreeHost(h->losses));
    attention_scratch_free(&m->attn);
    muon_workspace_free(&m->muon);
}

// Host fp32 weights (flat layout) -> device master weights and their bf16 copy.
static void llama_set_params(LlamaModel* m, const float* host) {
    CUDA_CHECK(cudaMemcpy(m->params, host, m->num_params * sizeof(float), cudaMemcpyHostToDevice));
    cuda_cast_to_bf16(m->params_bf16, m->params, m->num_params, m->stream);
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
}

// Device master weights -> host fp32 (flat layout), into *out (resized; its memory reused).
static void llama_get_params(LlamaModel* m, std::vector<float>* out) {
    out->resize(m->num_params);
    cuda_download_to(out->data(), m->params, m->num_params);
}

// ----------------------------------------------------------------------------
// forward: tokens (B, T) host -> logits (B, T, Vp) on the device

// n ints of host memory src -> device dst on m's stream, through the next pinned slot of `kind`
// (HostStaging); returns without waiting for the copy.
static void llama_upload_ints(LlamaModel* m, int kind, int* dst, const int* src, size_t n) {
    HostStaging* h = &m->stage;
    if (n > h->cap) { fprintf(stderr, "internal error: upload of %zu ints into a %zu-int staging slot\n", n, h->cap); exit(1); }
    const int k = h->next[kind];
    h->next[kind] ^= 1;
    CUDA_CHECK(cudaEventSynchronize(h->done[kind][k]));  // the copy started from this slot two uploads ago
    memcpy(h->slot[kind][k], src, n * sizeof(int));
    CUDA_CHECK(cudaMemcpyAsync(dst, h->slot[kind][k], n * sizeof(int), cudaMemcpyHostToDevice, m->stream));
    CUDA_CHECK(cudaEventRecord(h->done[kind][k], m->stream));
}

// last_only (the sampler): the final norm and the logits of the last position only, in row 0 of
// acts.logits (as train_llama_cpu.cpp).
static void llama_forward(LlamaModel* m, const int* tokens, int B, int T, bool last_only = false) {
    const LlamaConfig* c = &m->config;
    int C = c->C, L = c->L, NH = c->NH, NKV = c->NKV, FF = c->FF, HS = llama_head_size(c);
    int QKV = llama_qkv_channels(c), HSNH = HS * NH, N = B * T;
    ParameterTensors p = llama_tensors(c, m->params);           // fp32: embedding and norm weights
    ParameterTensorsBF16 w = llama_tensors_bf16(c, m->params_bf16);  // bf16: GEMM operands
    Activations* a = &m->acts;
    cudaStream_t s = m->stream;

    llama_upload_ints(m, STAGE_TOKENS, m->tokens, tokens, (size_t)N);
    encoder_forward(a->residual, m->tokens, p.wte, N, C, s);
    for (int l = 0; l < L; l++) {
        float* x = a->residual + (size_t)l * N * C;
        bf16* ln1 = a->ln1 + (size_t)l * N * C;
        float* ln1_rstd = a->ln1_rstd + (size_t)l * N;
        bf16* qkv = a->qkv + (size_t)l * N * QKV;
        bf16* atty = a->atty + (size_t)l * N * HSNH;
        float* lse = a->lse + (size_t)l * N * NH;
        float* mid = a->res_mid + (size_t)l * N * C;
        bf16* ln2 = a->ln2 + (size_t)l * N * C;
        float* ln2_rstd = a->ln2_rstd + (size_t)l * N;
        bf16* fc1 = a->fc1 + (size_t)l * N * 2 * FF;
        bf16* sw = a->sw + (size_t)l * N * FF;
        float* out = a->residual + (size_t)(l + 1) * N * C;

        // attention half: mid = x + proj(attn(rope(qkv(rmsnorm(x))))), the add in the GEMM epilogue
        rmsnorm_forward(ln1, ln1_rstd, x, p.ln1w + (size_t)l * C, N, C, s);
        matmul_forward(qkv, ln1, w.qkvw + (size_t)l * QKV * C, N, C, QKV, s);
        rope_forward(qkv, qkv, m->rope_cos, m->rope_sin, B, T, NH, NKV, HS, s);
        attention_forward(atty, lse, qkv, &m->attn, B, T, NH, NKV, HS, s);
        matmul_forward_fp32(mid, x, atty, w.projw + (size_t)l * C * HSNH, N, HSNH, C, s);
        // MLP half: out = mid + fc2(silu(gate) * up), [gate; up] = fc1(rmsnorm(mid))
        rmsnorm_forward(ln2, ln2_rstd, mid, p.ln2w + (size_t)l * C, N, C, s);
        matmul_forward(fc1, ln2, w.fc1w + (size_t)l * 2 * FF * C, N, C, 2 * FF, s);
        swiglu_forward(sw, fc1, N, FF, s);
        matmul_forward_fp32(out, mid, sw, w.fc2w + (size_t)l * C * FF, N, FF, C, s);
    }
    const float* xf = a->residual + (size_t)L * N * C;  // the last layer's output
    int rows = last_only ? 1 : N;
    if (last_only) xf += (size_t)(N - 1) * C;
    rmsnorm_forward(a->lnf, a->lnf_rstd, xf, p.lnfw, rows, C, s);
    matmul_forward_fp32(a->logits, NULL, a->lnf, w.lm_head, rows, C, c->Vp, s);
}

// Hands the inputs of the linear units to the gradient communication (factor refresh steps of
// geofp8 / kfac); the forward keeps every layer's activations, so this runs after it.
static void llama_observe_inputs(LlamaModel* m, GradCommGPU* gc, int B, int T) {
    const LlamaConfig* c = &m->config;
    int N = B * T, C = c->C, FF = c->FF, HSNH = llama_head_size(c) * c->NH;
    const Activations* a = &m->acts;
    for (int l = 0; l < c->L; l++) {
        gradcomm_gpu_observe_input(gc, llama_unit_index(c, T_QKVW, l), a->ln1 + (size_t)l * N * C, N, m->stream);
        gradcomm_gpu_observe_input(gc, llama_unit_index(c, T_PROJW, l), a->atty + (size_t)l * N * HSNH, N, m->stream);
        gradcomm_gpu_observe_input(gc, llama_unit_index(c, T_FC1W, l), a->ln2 + (size_t)l * N * C, N, m->stream);
        gradcomm_gpu_observe_input(gc, llama_unit_index(c, T_FC2W, l), a->sw + (size_t)l * N * FF, N, m->stream);
    }
}

// Room for `slots` micro-steps' losses in the pinned loss buffer (waits for the stream only
// when it grows, i.e. on the first step).
static void llama_reserve_loss_slots(LlamaModel* m, int slots) {
    HostStaging* h = &m->stage;
    if (slots <= h->loss_slots) return;
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    CUDA_CHECK(cudaFreeHost(h->losses));
    CUDA_CHECK(cudaMallocHost((void**)&h->losses, (size_t)slots * m->B * m->T * sizeof(float)));
    h->loss_slots = slots;
}

// Starts the copy of the per-position losses (N) into loss slot `slot`; no wait.
static void llama_enqueue_losses(LlamaModel* m, int N, int slot) {
    float* dst = m->stage.losses + (size_t)slot * m->B * m->T;
    CUDA_CHECK(cudaMemcpyAsync(dst, m->acts.losses, (size_t)N * sizeof(float), cudaMemcpyDeviceToHost, m->stream));
}

// Mean of the N losses in loss slot `slot` (after the stream has been waited for), summed in
// double in a fixed order.
static float llama_slot_mean_loss(const LlamaModel* m, int N, int slot) {
    const float* l = m->stage.losses + (size_t)slot * m->B * m->T;
    double total = 0.0;
    for (int n = 0; n < N; n++) total += l[n];
    return (float)(total / N);
}

// Mean of the per-position losses, copied back (waits for the stream).
static float llama_mean_loss(LlamaModel* m, int N) {
    llama_enqueue_losses(m, N, 0);
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    return llama_slot_mean_loss(m, N, 0);
}

// Mean cross-entropy of the logits of the last forward against targets (B, T) host.
static float llama_loss(LlamaModel* m, const int* targets, int B, int T) {
    int N = B * T;
    llama_upload_ints(m, STAGE_TARGETS, m->targets, targets, (size_t)N);
    crossentropy_forward(m->acts.losses, m->acts.logits, m->targets, N, m->config.V, m->config.Vp, m->stream);
    return llama_mean_loss(m, N);
}

// Test hooks: TRAIN_LLAMA_TEST_NAN="STEP:RANK" (as the CPU engine's) poisons RANK's gradient at
// (1-based) STEP, TRAIN_LLAMA_TEST_NAN_LOSS="STEP:RANK" its loss, to check that the step is skipped.
static bool test_inject_at(const char* var, int step, int rank) {
    const char* env = getenv(var);
    int s = -1, r = -1;
    return env && sscanf(env, "%d:%d", &s, &r) == 2 && s == step && r == rank;
}
static bool test_inject_nan(int step, int rank) { return test_inject_at("TRAIN_LLAMA_TEST_NAN", step, rank); }

// In the last micro-step's backward (gc set): unit's gradient is final. Its bucket may go out now
// (llmc/gradcomm.cuh, gradcomm_gpu_unit_ready); the test hook poisons the embedding (unit 0, the
// last one finished) first.
static void llama_unit_done(LlamaModel* m, GradCommGPU* gc, int unit) {
    if (!gc || !gc->last_backward) return;
    if (unit == 0 && test_inject_nan(gc->step + 1, gc->rank)) {
        float nan = NAN;
        CUDA_CHECK(cudaMemcpyAsync(m->grads, &nan, sizeof(float), cudaMemcpyHostToDevice, m->stream));
        CUDA_CHECK(cudaStreamSynchronize(m->stream));
    }
    gradcomm_gpu_unit_ready(gc, unit, m->grads, m->stream);
}

// ----------------------------------------------------------------------------
// backward: accumulates d(loss * dloss_scale) into m->grads and starts the copy of this
// micro-batch's per-position losses into loss slot `loss_slot` (llama_slot_mean_loss reads them
// once the stream has been waited for).
// dloss_scale = 1 / micro-steps, so the accumulated gradient is that of the mean over micro-steps.
// With gc on a kfac refresh step, the (bf16) gradient at each linear unit's output goes to it too;
// in the last micro-step, each unit is reported as its gradient becomes final (llama_unit_done).

static void llama_backward_enqueue(LlamaModel* m, const int* tokens, const int* targets, int B, int T, float dloss_scale,
                                   GradCommGPU* gc, int loss_slot) {
    const LlamaConfig* c = &m->config;
    int C = c->C, L = c->L, NH = c->NH, NKV = c->NKV, FF = c->FF, HS = llama_head_size(c);
    int QKV = llama_qkv_channels(c), HSNH = HS * NH, N = B * T;
    ParameterTensors p = llama_tensors(c, m->params);
    ParameterTensorsBF16 w = llama_tensors_bf16(c, m->params_bf16);
    ParameterTensors g = llama_tensors(c, m->grads);
    Activations* a = &m->acts;
    cudaStream_t s = m->stream;
    auto done = [&](int tensor, int layer) { llama_unit_done(m, gc, llama_unit_index(c, tensor, layer)); };

    int U = encoder_backward_buckets(&m->host_buckets, tokens, N, c->Vp);
    llama_upload_ints(m, STAGE_BUCKETS, m->buckets, m->host_buckets.data(), m->host_buckets.size());
    llama_upload_ints(m, STAGE_TARGETS, m->targets, targets, (size_t)N);

    crossentropy_forward_backward(a->losses, a->dlogits, a->logits, m->targets, N, c->V, c->Vp, dloss_scale / (float)N, s);
    matmul_backward(a->dln, g.lm_head, a->dlogits, a->lnf, w.lm_head, N, C, c->Vp, s);
    done(T_LMHEAD, -1);
    CUDA_CHECK(cudaMemsetAsync(a->dres, 0, (size_t)N * C * sizeof(float), s));
    rmsnorm_backward(a->dres, a->dres_bf16, g.lnfw, a->dw_partials, a->dln, a->residual + (size_t)L * N * C, p.lnfw, a->lnf_rstd, N, C, s);
    done(T_LNFW, -1);

    for (int l = L - 1; l >= 0; l--) {
        float* x = a->residual + (size_t)l * N * C;
        bf16* ln1 = a->ln1 + (size_t)l * N * C;
        float* ln1_rstd = a->ln1_rstd + (size_t)l * N;
        bf16* qkv = a->qkv + (size_t)l * N * QKV;
        bf16* atty = a->atty + (size_t)l * N * HSNH;
        float* lse = a->lse + (size_t)l * N * NH;
        float* mid = a->res_mid + (size_t)l * N * C;
        bf16* ln2 = a->ln2 + (size_t)l * N * C;
        float* ln2_rstd = a->ln2_rstd + (size_t)l * N;
        bf16* fc1 = a->fc1 + (size_t)l * N * 2 * FF;
        bf16* sw = a->sw + (size_t)l * N * FF;

        bool kfac = gradcomm_gpu_wants_output_grads(gc);
        // MLP half; dres holds d(out) and, after rmsnorm_backward adds into it, d(mid)
        if (kfac) gradcomm_gpu_observe_output_grad(gc, llama_unit_index(c, T_FC2W, l), a->dres_bf16, N, s);
        matmul_backward(a->dsw, g.fc2w + (size_t)l * C * FF, a->dres_bf16, sw, w.fc2w + (size_t)l * C * FF, N, FF, C, s);
        done(T_FC2W, l);
        swiglu_backward(a->dfc1, a->dsw, fc1, N, FF, s);
        if (kfac) gradcomm_gpu_observe_output_grad(gc, llama_unit_index(c, T_FC1W, l), a->dfc1, N, s);
        matmul_backward(a->dln, g.fc1w + (size_t)l * 2 * FF * C, a->dfc1, ln2, w.fc1w + (size_t)l * 2 * FF * C, N, C, 2 * FF, s);
        done(T_FC1W, l);
        rmsnorm_backward(a->dres, a->dres_bf16, g.ln2w + (size_t)l * C, a->dw_partials, a->dln, mid, p.ln2w + (size_t)l * C, ln2_rstd, N, C, s);
        done(T_LN2W, l);
        // attention half; dres becomes d(x)
        if (kfac) gradcomm_gpu_observe_output_grad(gc, llama_unit_index(c, T_PROJW, l), a->dres_bf16, N, s);
        matmul_backward(a->datty, g.projw + (size_t)l * C * HSNH, a->dres_bf16, atty, w.projw + (size_t)l * C * HSNH, N, HSNH, C, s);
        done(T_PROJW, l);
        attention_backward(a->dqkv, a->datty, qkv, atty, lse, &m->attn, B, T, NH, NKV, HS, s);
        rope_backward(a->dqkv, a->dqkv, m->rope_cos, m->rope_sin, B, T, NH, NKV, HS, s);
        if (kfac) gradcomm_gpu_observe_output_grad(gc, llama_unit_index(c, T_QKVW, l), a->dqkv, N, s);
        matmul_backward(a->dln, g.qkvw + (size_t)l * QKV * C, a->dqkv, ln1, w.qkvw + (size_t)l * QKV * C, N, C, QKV, s);
        done(T_QKVW, l);
        // layer 0's input gradient only feeds the embedding, which reads the fp32 copy
        rmsnorm_backward(a->dres, l > 0 ? a->dres_bf16 : NULL, g.ln1w + (size_t)l * C, a->dw_partials, a->dln, x, p.ln1w + (size_t)l * C,
                         ln1_rstd, N, C, s);
        done(T_LN1W, l);
    }
    encoder_backward(g.wte, a->dres, m->buckets, U, C, s);
    done(T_WTE, -1);
    llama_enqueue_losses(m, N, loss_slot);
}


// ----------------------------------------------------------------------------
// process setup and the small host-side collectives; the gradient itself goes through
// llmc/gradcomm.cuh (gradcomm_gpu_reduce) in llama_train_step

typedef struct {
    int rank, world_size;  // copies of nccl.rank / nccl.world_size, read everywhere
    CommGridGPU nccl;      // communicator on the trainer's stream
    double* scratch;       // (1) device slot of llama_comm_sum / llama_comm_max_int
} GpuCommGrid;

// The launch decides: PMI variables (mpirun, srun --mpi=pmix) in a build with MPI -> MPI;
// SLURM_PROCID (plain srun, or any srun of a build without MPI) -> NCCL id through
// $TRAIN_LLAMA_NCCL_ID_FILE; otherwise one process, with a one-rank NCCL communicator when
// TRAIN_LLAMA_TEST_NCCL=1 (so that a single GPU runs every collective of the step). Without argc
// (the tests) always one process.
static void llama_comm_init(GpuCommGrid* g, int* argc = NULL, char*** argv = NULL, cudaStream_t stream = 0) {
    bool pmi = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_RANK") || getenv("PMIX_RANK");
#ifndef COMM_GPU_HAVE_MPI
    if (getenv("SLURM_PROCID")) pmi = false;  // srun works without MPI; under mpirun comm_gpu_init_mpi says how to rebuild
#endif
    const char* test_nccl = getenv("TRAIN_LLAMA_TEST_NCCL");
    if (pmi && argc) comm_gpu_init_mpi(&g->nccl, argc, argv, stream);
    else if (getenv("SLURM_PROCID") && argc) comm_gpu_init_slurm_file(&g->nccl, NULL, stream);
    else comm_gpu_init_single(&g->nccl, stream, test_nccl && strcmp(test_nccl, "1") == 0);
    g->rank = g->nccl.rank;
    g->world_size = g->nccl.world_size;
    g->scratch = cuda_malloc<double>(1);
}

static void llama_comm_finalize(GpuCommGrid* g) {
    CUDA_CHECK(cudaFree(g->scratch));
    comm_gpu_finalize(&g->nccl);
}

// Sum of x over ranks (fp64, NCCL; synchronizes).
static double llama_comm_sum(GpuCommGrid* g, double x) {
    if (g->world_size == 1) return x;
    CUDA_CHECK(cudaMemcpyAsync(g->scratch, &x, sizeof(double), cudaMemcpyHostToDevice, g->nccl.stream));
    comm_gpu_allreduce_f64_sum(&g->nccl, g->scratch, g->scratch, 1);
    CUDA_CHECK(cudaMemcpyAsync(&x, g->scratch, sizeof(double), cudaMemcpyDeviceToHost, g->nccl.stream));
    CUDA_CHECK(cudaStreamSynchronize(g->nccl.stream));
    return x;
}

// Max of a small non-negative int over ranks (exact in fp32 below 2^24; synchronizes, so it
// doubles as a barrier).
static int llama_comm_max_int(GpuCommGrid* g, int x) {
    if (g->world_size == 1) return x;
    float v = (float)x;
    float* slot = reinterpret_cast<float*>(g->scratch);
    CUDA_CHECK(cudaMemcpyAsync(slot, &v, sizeof(float), cudaMemcpyHostToDevice, g->nccl.stream));
    comm_gpu_allreduce_f32_max(&g->nccl, slot, slot, 1);
    CUDA_CHECK(cudaMemcpyAsync(&v, slot, sizeof(float), cudaMemcpyDeviceToHost, g->nccl.stream));
    CUDA_CHECK(cudaStreamSynchronize(g->nccl.stream));
    return (int)v;
}

// The same for two ints in one all-reduce (the scratch slot holds two floats).
static void llama_comm_max_int2(GpuCommGrid* g, int* a, int* b) {
    if (g->world_size == 1) return;
    float v[2] = {(float)*a, (float)*b};
    float* slot = reinterpret_cast<float*>(g->scratch);
    CUDA_CHECK(cudaMemcpyAsync(slot, v, sizeof(v), cudaMemcpyHostToDevice, g->nccl.stream));
    comm_gpu_allreduce_f32_max(&g->nccl, slot, slot, 2);
    CUDA_CHECK(cudaMemcpyAsync(v, slot, sizeof(v), cudaMemcpyDeviceToHost, g->nccl.stream));
    CUDA_CHECK(cudaStreamSynchronize(g->nccl.stream));
    *a = (int)v[0];
    *b = (int)v[1];
}

// Rank 0's string on every rank, over NCCL (whatever the launcher).
static std::string llama_comm_broadcast_string(GpuCommGrid* g, const std::string& s) {
    if (g->world_size == 1) return s;
    int len = (int)llama_comm_max_int(g, g->rank == 0 ? (int)s.size() : 0);
    char* buf = cuda_malloc<char>((size_t)len + 1);
    if (g->rank == 0) CUDA_CHECK(cudaMemcpy(buf, s.data(), (size_t)len, cudaMemcpyHostToDevice));
    comm_gpu_broadcast_bytes(&g->nccl, buf, (size_t)len, 0);
    std::string out((size_t)len, '\0');
    CUDA_CHECK(cudaMemcpy(&out[0], buf, (size_t)len, cudaMemcpyDeviceToHost));  // (after the broadcast on the same stream)
    CUDA_CHECK(cudaFree(buf));
    return out;
}

// Root's x[0, n) (host memory) on every rank, over NCCL through a device buffer of at most
// 64 MiB: a resume's weights and moments shares (run_resume_gather), before the model is on the GPU.
static void llama_comm_broadcast_floats(GpuCommGrid* g, float* x, size_t n, int root) {
    if (g->world_size == 1 || n == 0) return;
    const size_t piece = std::min(n, (size_t)16 << 20);
    float* buf = cuda_malloc<float>(piece);
    for (size_t off = 0; off < n; off += piece) {  // (one stream: each piece's copies wait for the previous broadcast)
        size_t count = std::min(piece, n - off);
        if (g->rank == root) CUDA_CHECK(cudaMemcpyAsync(buf, x + off, count * sizeof(float), cudaMemcpyHostToDevice, g->nccl.stream));
        comm_gpu_broadcast_f32(&g->nccl, buf, count, root);
        if (g->rank != root) CUDA_CHECK(cudaMemcpyAsync(x + off, buf, count * sizeof(float), cudaMemcpyDeviceToHost, g->nccl.stream));
        CUDA_CHECK(cudaStreamSynchronize(g->nccl.stream));
    }
    CUDA_CHECK(cudaFree(buf));
}

// The start-up checks' collectives (llmc/run.h) over NCCL.
static int llama_ranks_max_int(void* g, int x) { return llama_comm_max_int((GpuCommGrid*)g, x); }
static std::string llama_ranks_broadcast(void* g, const std::string& s) { return llama_comm_broadcast_string((GpuCommGrid*)g, s); }
static void llama_ranks_finalize(void* g) { llama_comm_finalize((GpuCommGrid*)g); }
static void llama_ranks_broadcast_floats(void* g, float* x, size_t n, int root) { llama_comm_broadcast_floats((GpuCommGrid*)g, x, n, root); }
static RunRanks llama_run_ranks(GpuCommGrid* g) {
    return RunRanks{g->rank, g->world_size, g, llama_ranks_max_int, llama_ranks_broadcast, llama_ranks_finalize, llama_ranks_broadcast_floats};
}

// ----------------------------------------------------------------------------
// gradient norm and clipping (on the communicated gradient)

static float llama_grad_norm(LlamaModel* m) {
    global_norm_squared(m->norm_sq, m->norm_partials, m->grads, m->num_params, m->stream);
    double sq = 0.0;
    CUDA_CHECK(cudaMemcpyAsync(&sq, m->norm_sq, sizeof(double), cudaMemcpyDeviceToHost, m->stream));
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    return (float)sqrt(sq);
}

// The clip's scale, as train_llama_cpu's llama_clip_grads computes it (1: no clip). It is no pass
// over the gradient: the optimizer kernels read each gradient times this scale (global_norm.cuh).
static float llama_clip_scale(float norm, float max_norm) {
    if (max_norm <= 0.0f) return 1.0f;
    float coef = (float)(max_norm / ((double)norm + CLIP_EPS));
    return coef >= 1.0f ? 1.0f : coef;
}

// ----------------------------------------------------------------------------
// update: Muon for the hidden matrices, AdamW for embeddings, lm_head and norms (DESIGN §7)

// A Muon batch: one row block of one stacked tensor, the same block of every layer.
typedef struct {
    size_t offset;        // of layer 0's block in the flat buffer
    int rows, cols;
    size_t layer_stride;  // elements between consecutive layers' blocks
} MuonGroup;

static std::vector<MuonGroup> llama_muon_groups(const LlamaConfig* c, const MuonConfig* mc) {
    std::vector<MuonGroup> groups;
    int C = c->C, FF = c->FF, HS = llama_head_size(c), QKV = llama_qkv_channels(c), HSNH = HS * c->NH;
    size_t o[LLAMA_NUM_TENSORS];
    llama_param_offsets(c, o);
    if (mc->split_qkv) {
        // megatron_core: q, k and v are orthogonalized as separate matrices (row blocks)
        int rows[3] = {c->NH * HS, c->NKV * HS, c->NKV * HS};
        size_t off = o[T_QKVW];
        for (int k = 0; k < 3; k++) {
            groups.push_back({off, rows[k], C, (size_t)QKV * C});
            off += (size_t)rows[k] * C;
        }
    } else {
        groups.push_back({o[T_QKVW], QKV, C, (size_t)QKV * C});
    }
    groups.push_back({o[T_PROJW], C, HSNH, (size_t)C * HSNH});
    groups.push_back({o[T_FC1W], 2 * FF, C, (size_t)2 * FF * C});
    groups.push_back({o[T_FC2W], C, FF, (size_t)C * FF});
    return groups;
}

// On the gradient times grad_scale (the clip's, llama_clip_scale). Returns the number of matrices
// this rank orthogonalized.
static int llama_update(LlamaModel* m, const TrainConfig* tc, const MuonConfig* mc, float lr, float grad_scale, int step,
                        GpuCommGrid* grid) {
    const LlamaConfig* c = &m->config;
    bool use_muon = tc->optimizer == "muon";
    size_t sizes[LLAMA_NUM_TENSORS], offs[LLAMA_NUM_TENSORS];
    llama_param_sizes(c, sizes);
    llama_param_offsets(c, offs);
    // AdamW is elementwise, so one launch per stacked tensor equals the CPU's loop over units
    for (int t = 0; t < LLAMA_NUM_TENSORS; t++) {
        bool is_matrix = t == T_QKVW || t == T_PROJW || t == T_FC1W || t == T_FC2W;
        if (use_muon && is_matrix) continue;
        bool is_norm = t == T_LN1W || t == T_LN2W || t == T_LNFW;
        float wd = is_norm ? 0.0f : tc->weight_decay;
        size_t o = offs[t];
        adamw_update(m->params + o, m->params_bf16 + o, m->grads + o, grad_scale, m->opt_m + o, m->opt_v + o, sizes[t], lr,
                     ADAMW_BETA1, ADAMW_BETA2, ADAMW_EPS, wd, step + 1, m->stream);
    }
    if (!use_muon) return 0;
    if (!tc->muon_shard || grid->world_size == 1) {
        int count = 0;
        for (const MuonGroup& gr : llama_muon_groups(c, mc)) {
            size_t o = gr.offset;
            muon_update(m->params + o, m->params_bf16 + o, m->grads + o, grad_scale, m->opt_m + o, gr.rows, gr.cols, c->L,
                        gr.layer_stride, mc, lr, tc->weight_decay, &m->muon, m->stream);
            count += c->L;
        }
        return count;
    }
    int mine = 0;
    // --muon-shard: the matrices one by one (each group's layers), assigned to ranks by
    // muon_shard_owners as the CPU engine does; every rank moves every momentum, the owner
    // orthogonalizes, its X (bf16, in W's orientation, as muon_newton_schulz returns it) is broadcast to all, and
    // every rank applies it. The X a rank receives is the owner's bit for bit; the owner's X of one
    // matrix alone may differ in the last bits from the batched one (cuBLAS may pick another
    // kernel for another batch count).
    struct Item { size_t offset; int rows, cols; };
    std::vector<Item> items;
    std::vector<double> cost;
    for (const MuonGroup& gr : llama_muon_groups(c, mc))
        for (int l = 0; l < c->L; l++) {
            items.push_back({gr.offset + (size_t)l * gr.layer_stride, gr.rows, gr.cols});
            cost.push_back(muon_ns_cost(gr.rows, gr.cols));
        }
    const std::vector<int> owner = muon_shard_owners(cost, grid->world_size);
    std::vector<size_t> xoff(items.size() + 1, 0);
    for (size_t i = 0; i < items.size(); i++) xoff[i + 1] = xoff[i] + (size_t)items[i].rows * items[i].cols;
    if (!m->muon_x) m->muon_x = cuda_malloc<bf16>(xoff.back());  // the same size every step
    for (size_t i = 0; i < items.size(); i++) {
        const Item& it = items[i];
        const bool owned = owner[i] == grid->rank;  // only the owner needs the norm
        muon_momentum(m->opt_m + it.offset, m->grads + it.offset, grad_scale, it.rows, it.cols, 1, 0, mc, &m->muon, m->stream, owned);
        if (!owned) continue;
        bf16* x = muon_newton_schulz(&m->muon, it.rows, it.cols, 1, mc, m->stream);
        mine++;
        CUDA_CHECK(cudaMemcpyAsync(m->muon_x + xoff[i], x, (xoff[i + 1] - xoff[i]) * sizeof(bf16), cudaMemcpyDeviceToDevice, m->stream));
    }
    comm_gpu_group_begin(&grid->nccl);  // the step's broadcasts, one per matrix, as one NCCL launch
    for (size_t i = 0; i < items.size(); i++)
        comm_gpu_broadcast_bytes(&grid->nccl, m->muon_x + xoff[i], (xoff[i + 1] - xoff[i]) * sizeof(bf16), owner[i]);
    comm_gpu_group_end(&grid->nccl);
    for (size_t i = 0; i < items.size(); i++)
        muon_apply(m->params + items[i].offset, m->params_bf16 + items[i].offset, m->muon_x + xoff[i], items[i].rows, items[i].cols, 1, 0,
                   mc, lr, tc->weight_decay, m->stream);
    return mine;
}

// ----------------------------------------------------------------------------
// one optimizer step: micro-steps, communicate, clip, update

typedef struct {
    float loss;         // mean over micro-steps and ranks
    float grad_norm;    // of the communicated gradient, before clipping
    float lr;
    double comm_bytes;  // sent by this rank
    int skipped_on_rank;  // -1: applied; else the step was skipped (non-finite loss or gradient on that rank)
    int ns_matrices;      // matrices this rank orthogonalized (all of them, or its share with --muon-shard)
    int comm_buckets;     // buckets communicated during the backward (0: after it)
    int stop_signal;      // a stop signal some rank got before this step's skip decision (0: none; llmc/run.h)
} StepStats;


// next_batch(ctx, &inputs, &targets) hands out each micro-batch (B, T) in host memory.
typedef void (*NextBatchFn)(void* ctx, const int** inputs, const int** targets);

// This process's logical ranks (DESIGN §6 "Virtual ranks"; one without --virtual-ranks):
// logical rank vrank0 + v draws its micro-batches from batch_ctx[v], accumulates its gradient in
// grads[v] and communicates with its own state gc[v] over grids[v]. With V > 1 the grids are the
// logical ranks of one virtual group (llmc/comm_virtual.cuh), which runs their communication.
typedef struct {
    int V, vrank0, N;                 // logical ranks here, the first one, all of them
    std::vector<float*> grads;        // (V) grads[0] is the model's own buffer, which receives the average
    std::vector<void*> batch_ctx;     // (V)
    std::vector<GradCommGPU*> gc;     // (V) NULL entries: fp32 averaging without a GradCommGPU (one logical rank)
    std::vector<CommGridGPU*> grids;  // (V)
    CommVirtualGroup* group;          // V > 1
} LocalRanksGPU;

// One logical rank per process: the model's buffer, one batch source, the trainer's communicator.
static LocalRanksGPU llama_local_ranks_single(LlamaModel* m, GpuCommGrid* grid, void* batch_ctx, GradCommGPU* gc) {
    return LocalRanksGPU{1, grid->rank, grid->world_size, {m->grads}, {batch_ctx}, {gc}, {&grid->nccl}, NULL};
}

// The mean over logical ranks of x (one value per logical rank of this process): summed in rank
// order in double, then over processes (the fp64 all-reduce), as N real ranks' all-reduce sums.
static double llama_mean_over_ranks(GpuCommGrid* grid, const std::vector<double>& x, int N) {
    double sum = x[0];
    for (size_t v = 1; v < x.size(); v++) sum = sum + x[v];
    return llama_comm_sum(grid, sum) / N;
}

// --virtual-ranks: what the V - 1 other logical ranks add on the GPU (a gradient each, and each
// one's communication state: codes, error-feedback residuals, the geometry units' residuals and
// factors, the fair figures' own buffers; the fidelity reference, Ω and the fair figures'
// averages and window sums are shared), against what is
// free once the model and logical rank 0's state are in place. "" when it fits, with a tenth to
// spare for the libraries' workspaces.
static std::string llama_virtual_memory_problem(const TrainConfig* tc, const LlamaConfig* c, int V) {
    const double P = (double)llama_num_params(c);
    const std::string& mode = tc->comm;
    double per_rank = 4.0 * P;  // the gradient
    if (mode == "bf16") per_rank += 2.0 * P;
    if (mode != "fp32" && mode != "bf16") {
        per_rank += P;                                          // the codes
        if (tc->fp8_reduce == "twophase") per_rank += 2.0 * P;  // every rank's codes of its shard, the server's
        if (tc->fp8_ef) per_rank += 4.0 * P;
        const std::vector<LlamaUnit> units = llama_units(c);
        std::vector<int> geo;  // the units that may take the geometry path (auto: every fc1 and fc2)
        if (mode == "kfac" || (mode == "geofp8" && tc->geofp8_layers == "auto")) {
            for (size_t u = 0; u < units.size(); u++)
                if (units[u].is_matrix && (mode == "kfac" || units[u].tensor == T_FC1W || units[u].tensor == T_FC2W)) geo.push_back((int)u);
        } else if (mode == "geofp8") {
            geo = gradcomm_parse_layers(units, tc->geofp8_layers);
        }
        const bool fair = tc->fidelity_every > 0 && tc->fp8_reduce != "twophase";
        for (int u : geo) {
            const double n = (double)units[u].rows * units[u].cols, d_in = units[u].cols, d_out = units[u].rows;
            per_rank += 4.0 * n + (fair ? 13.0 * n : 0.0);  // residual; the fair figures' raw, x, residual, codes (exact, geo, windows: shared)
            if (mode == "kfac") per_rank += 20.0 * (d_in * d_in + d_out * d_out);  // A, G and the factors in use and next
        }
    }
    const double need = (V - 1) * per_rank;
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (need <= 0.9 * (double)free_b) return "";
    char b[512];
    snprintf(b, sizeof(b), "--virtual-ranks %d: the other %d logical ranks' gradients and -c %s state need about %.1f GiB of GPU memory, "
             "%.1f GiB are free once the model is in place (hint: fewer virtual ranks, a smaller model, or less state per rank: "
             "--fidelity-every 0, --fp8-ef 0)",
             V, V - 1, mode.c_str(), need / 1073741824.0, free_b / 1073741824.0);
    return b;
}

// The config table's "gradient buckets" row: the CPU engine's, and the steps that communicate
// after the backward all the same.
static std::string llama_buckets_row(const GradCommGPU* gc, const TrainConfig* tc) {
    if (tc->virtual_ranks > 1) return "none: --virtual-ranks communicates after the backward";
    std::string row = gradcomm_buckets_summary(&gc->buckets, tc->bucket_mb, gc->twophase);
    if (!gc->bucketing) return row;
    const bool refresh = gc->mode == "kfac" || (gc->mode == "geofp8" && gc->ema > 0.0f);  // (gradcomm_gpu_start)
    if (refresh || tc->fidelity_every > 0)
        row += std::string("; ") + (refresh && tc->fidelity_every > 0 ? "refresh and fidelity" : refresh ? "refresh" : "fidelity") +
               " steps after it";
    return row;
}

// gc NULL: fp32 averaging (what the whole-model test uses); timer NULL: no timing; lr NULL: one
// logical rank (ctx, gc), else the process's logical ranks (ctx and gc unused).
static StepStats llama_train_step(LlamaModel* m, const TrainConfig* tc, const MuonConfig* mc, SchedulerKind sched,
                                  GpuCommGrid* grid, int accum_steps, int step, NextBatchFn next_batch, void* ctx,
                                  GradCommGPU* gc = NULL, GradCommTimer* timer = NULL, LocalRanksGPU* lr = NULL) {
    StepStats st;
    LocalRanksGPU single;
    if (!lr) { single = llama_local_ranks_single(m, grid, ctx, gc); lr = &single; }
    const int V = lr->V;
    gc = lr->gc[0];  // logical rank 0's state: the stats and the bucketed path (V = 1)
    for (int v = 0; v < V; v++) {
        CUDA_CHECK(cudaMemsetAsync(lr->grads[v], 0, m->num_params * sizeof(float), m->stream));
        if (lr->gc[v]) gradcomm_gpu_begin_step(lr->gc[v], step, (long long)tc->B * tc->T * accum_steps * lr->N, m->stream);
    }
    const bool fidelity = gradcomm_fidelity_step(tc, step);
    bool bucketed = false;  // the communication runs bucket by bucket inside the last backward
    llama_reserve_loss_slots(m, accum_steps * V);
    for (int v = 0; v < V; v++) {  // each logical rank's micro-steps, into its own gradient
        GradCommGPU* g = lr->gc[v];
        m->grads = lr->grads[v];
        for (int micro = 0; micro < accum_steps; micro++) {
            const int *inputs, *targets;
            next_batch(lr->batch_ctx[v], &inputs, &targets);  // its buffer may be refilled at once: the uploads go through pinned copies
            int sp = gradcomm_timer_begin(timer, GC_T_FORWARD);
            llama_forward(m, inputs, tc->B, tc->T);
            if (gradcomm_gpu_wants_activations(g)) {
                int sk = gradcomm_timer_begin(timer, GC_T_SKETCH);  // inside the forward's span
                llama_observe_inputs(m, g, tc->B, tc->T);
                gradcomm_timer_end(timer, sk);
            }
            gradcomm_timer_end(timer, sp);
            if (g && micro == accum_steps - 1) bucketed = gradcomm_gpu_start(g, lr->grids[v], step, fidelity, timer);
            sp = gradcomm_timer_begin(timer, GC_T_BACKWARD);
            llama_backward_enqueue(m, inputs, targets, tc->B, tc->T, 1.0f / accum_steps, g, v * accum_steps + micro);
            gradcomm_timer_end(timer, sp);
        }
    }
    m->grads = lr->grads[0];
    // the step's one wait for its losses, summed in the order the micro-steps ran
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    std::vector<double> loss_sum(V, 0.0);
    for (int v = 0; v < V; v++) {
        for (int micro = 0; micro < accum_steps; micro++) loss_sum[v] += llama_slot_mean_loss(m, tc->B * tc->T, v * accum_steps + micro);
        if (test_inject_at("TRAIN_LLAMA_TEST_NAN_LOSS", step + 1, lr->vrank0 + v)) loss_sum[v] = NAN;
        if (lr->gc[v]) lr->gc[v]->last_backward = false;
    }
    st.lr = scheduler_lr(sched, step, tc->steps, tc->warmup, tc->lr, tc->final_lr_frac);
    st.loss = NAN; st.grad_norm = NAN; st.comm_bytes = 0.0; st.skipped_on_rank = -1; st.ns_matrices = 0;
    st.comm_buckets = bucketed ? gradcomm_num_buckets(&gc->buckets) : 0;
    // A non-finite loss or gradient on any rank: every rank skips this step identically. A
    // non-finite element makes the (fp64) sum of squares non-finite, so the local norm is the
    // finiteness check (a bucketed step: the units' local amax, taken before each bucket went
    // out); the flag (logical rank + 1, the last bad one) is MAX all-reduced, as the CPU engine does.
    // The comm span of a bucketed step is the communication the backward did not hide.
    // A bucketed step waits for its buckets whatever the loss: that wait is the trainer's stream's
    // only one on the bucket stream (the timers' events and the next step's zeroing of the
    // gradient come after it).
    int sp = bucketed ? gradcomm_timer_begin(timer, GC_T_COMM) : -1;
    const bool buckets_finite = bucketed ? gradcomm_gpu_bucket_wait(gc, m->stream) : true;
    int bad_rank = 0;
    for (int v = 0; v < V; v++) {
        m->grads = lr->grads[v];
        const bool finite = std::isfinite(loss_sum[v]) && buckets_finite && (bucketed || std::isfinite(llama_grad_norm(m)));
        if (!finite) bad_rank = lr->vrank0 + v + 1;
    }
    m->grads = lr->grads[0];
    // the stop flag (llmc/run.h) rides on the same all-reduce, so that every rank sees it at this step
    st.stop_signal = run_stop_signal;
    llama_comm_max_int2(grid, &bad_rank, &st.stop_signal);
    st.skipped_on_rank = bad_rank - 1;
    if (bad_rank > 0) {
        if (bucketed) gradcomm_gpu_bucket_abort(gc);  // this step's refreshes undone
        gradcomm_timer_end(timer, sp);
        return st;
    }
    // the gradient communication slot: after the last micro-step, on the flat buffer
    if (!bucketed) sp = gradcomm_timer_begin(timer, GC_T_COMM);
    if (bucketed) {
        gradcomm_gpu_bucket_finish(gc, &grid->nccl, m->grads, timer);
        st.comm_bytes = gc->stats.bytes;
    } else if (V > 1) {  // every logical rank's communication, each on its own thread, one at a time (llmc/comm_virtual.cuh)
        comm_virtual_run(lr->group, [&](int v) {
            gradcomm_gpu_reduce(lr->gc[v], lr->grids[v], lr->grads[v], step, fidelity, v == 0 ? timer : NULL);
        });
        st.comm_bytes = gc->stats.bytes;
    } else if (gc) {
        gradcomm_gpu_reduce(gc, &grid->nccl, m->grads, step, fidelity, timer);
        st.comm_bytes = gc->stats.bytes;
    } else {
        comm_gpu_allreduce_f32_sum(&grid->nccl, m->grads, m->grads, m->num_params);
        geofp8_average(m->grads, m->num_params, grid->world_size, m->stream);
        st.comm_bytes = comm_gpu_ring_bytes(&grid->nccl, 4.0 * m->num_params);
    }
    gradcomm_timer_end(timer, sp);
    if (gc && gc->stats.skipped) { st.skipped_on_rank = lr->N; return st; }  // a non-finite scale
    for (double& l : loss_sum) l /= accum_steps;
    st.loss = (float)llama_mean_over_ranks(grid, loss_sum, lr->N);
    st.grad_norm = llama_grad_norm(m);
    // the averaged gradient itself (e.g. a sum that overflowed in the collective): the same on
    // every rank, so this check agrees everywhere; the error-feedback residuals of this step are
    // kept, unlike the skips above
    if (!std::isfinite(st.grad_norm)) { st.skipped_on_rank = lr->N + 1; return st; }
    sp = gradcomm_timer_begin(timer, GC_T_OPTIMIZER);
    st.ns_matrices = llama_update(m, tc, mc, st.lr, llama_clip_scale(st.grad_norm, tc->grad_clip), step, grid);
    gradcomm_timer_end(timer, sp);
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    return st;
}

// ----------------------------------------------------------------------------
// checkpoints: the same files as the CPU engine (fp32 weights; fp32 m and v in the state file)

// out[k] = x[(first + k) RUN_MOMENTS_SAMPLE_STRIDE], k < count: a piece of llama_moments_sample_crc's sample
__global__ void llama_moments_sample_kernel(float* out, const float* x, size_t first, size_t count) {
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (; k < count; k += stride) out[k] = x[(first + k) * RUN_MOMENTS_SAMPLE_STRIDE];
}

// run_moments_sample_crc of the device's moments: the sample gathered on the device `piece` values
// at a time (4 MB of device memory) and only it downloaded, so that a checkpoint downloads this
// rank's share of the moments rather than all of them
static uint32_t llama_moments_sample_crc(LlamaModel* m, size_t piece = (size_t)1 << 20) {
    const size_t n = (m->num_params + RUN_MOMENTS_SAMPLE_STRIDE - 1) / RUN_MOMENTS_SAMPLE_STRIDE;
    float* d = cuda_malloc<float>(std::min(n, piece));
    std::vector<float> h(std::min(n, piece));
    CUDA_CHECK(cudaDeviceSynchronize());  // the step's update is in
    uint32_t crc = 0;
    for (const float* x : {(const float*)m->opt_m, (const float*)m->opt_v})
        for (size_t first = 0; first < n; first += piece) {
            size_t count = std::min(piece, n - first);
            llama_moments_sample_kernel<<<cuda_grid_for(count, 256), 256>>>(d, x, first, count);
            KERNEL_CHECK();
            cuda_download_to(h.data(), d, count);
            crc = crc32_update(crc, h.data(), count * sizeof(float));
        }
    CUDA_CHECK(cudaFree(d));
    return crc;
}

static void llama_set_optimizer_state(LlamaModel* m, const CheckpointState* st) {
    CUDA_CHECK(cudaMemcpy(m->opt_m, st->m.data(), m->num_params * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(m->opt_v, st->v.data(), m->num_params * sizeof(float), cudaMemcpyHostToDevice));
}

// ----------------------------------------------------------------------------
// sampling: B=1 forward over the last window, multinomial over the V real tokens

static void llama_sample(LlamaModel* m, const Tokenizer* tok, const TrainConfig* tc, unsigned long long seed) {
    const LlamaConfig* c = &m->config;
    const int T = tc->T;
    Rng rng;
    rand_init(&rng, seed);
    std::vector<int> seq = run_sample_first_tokens(tc, c->V);
    std::vector<float> row(c->Vp);
    printf("generating:\n---\n");
    if (!tc->prompt_tokens.empty())
        for (int id : seq) { if (tok->ok) tokenizer_print_safe(tokenizer_decode(tok, (uint32_t)id)); else printf("%d ", id); }
    for (int k = 0; k < tc->gen_tokens; k++) {
        int len = std::min((int)seq.size(), T);
        const int* window = seq.data() + seq.size() - len;
        llama_forward(m, window, 1, len, true);
        CUDA_CHECK(cudaMemcpyAsync(row.data(), m->acts.logits, c->Vp * sizeof(float),
                                   cudaMemcpyDeviceToHost, m->stream));
        CUDA_CHECK(cudaStreamSynchronize(m->stream));
        int next = run_sample_token(row.data(), c->V, rand_uniform(&rng), tc->temperature, tc->top_k);
        seq.push_back(next);
        if (tok->ok) tokenizer_print_safe(tokenizer_decode(tok, (uint32_t)next)); else printf("%d ", next);
        fflush(stdout);
    }
    printf("\n---\n");
}

// ----------------------------------------------------------------------------
// main

#ifndef TRAIN_LLAMA_NO_MAIN

int main(int argc, char** argv) {
    run_install_stop_signals();  // first thing: a stop during start-up is graceful too (llmc/run.h)
    TrainConfig tc;
    train_config_parse(&tc, argc, argv);
    if (!cuda_device_present())
        user_error("no CUDA device found (train_llama needs an NVIDIA GPU; train_llama_cpu runs on any machine)");
    GpuCommGrid grid;
    llama_comm_init(&grid, &argc, &argv, 0);  // the model runs on the default stream; NCCL enqueues there too
    run_test_signal(0, grid.rank);
    run_test_slow_start();
    // logical ranks: --virtual-ranks N simulates N ranks in this one process (one GPU)
    if (tc.virtual_ranks > 1 && grid.world_size > 1)
        user_error("--virtual-ranks %d: train_llama simulates N ranks in one process on one GPU, found %d processes "
                   "(launch one process, or train_llama_cpu for virtual ranks over several processes)", tc.virtual_ranks, grid.world_size);
    if (tc.virtual_ranks > 1 && tc.muon_shard)
        user_error("--muon-shard 1: shares Newton-Schulz between processes for speed; --virtual-ranks simulates the numerics of %d ranks, "
                   "not their time (use one or the other)", tc.virtual_ranks);
    if (tc.virtual_ranks == 1) tc.virtual_ranks = 0;  // one logical rank: the same run as without the flag
    const int V = tc.virtual_ranks > 1 ? tc.virtual_ranks : 1, N = grid.world_size * V;

    // model config (a preset or a checkpoint file) and batch
    LlamaConfig lc;
    bool from_file = false;
    int accum_steps = run_resolve_config(&tc, &lc, N, &from_file);
    AttentionKind attention = ATTENTION_CUBLAS;
    if (!attention_kind_from_name(tc.attention.c_str(), llama_head_size(&lc), &attention)) {
        if (tc.attention == "flash_sm90")
            user_error("--attention flash_sm90: the wgmma kernels need head size 64 or 128 (this model's is %d), a GPU of compute "
                       "capability 9.0 and an sm_90a build (use flash, cublas or auto)", llama_head_size(&lc));
        user_error("--attention flash: the fused kernels take head sizes 16, 32, 64 and 128, this model's is %d (use cublas or auto)",
                   llama_head_size(&lc));
    }
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
    // then the output directory (lock, leftovers), then the resume point; the settings text is
    // the CPU engine's, so a run may resume from the other engine's checkpoint
    std::string model_desc = from_file ? llama_config_string(&lc) : tc.model + " " + llama_config_string(&lc);
    std::string settings = run_settings(&tc, &lc, N, &train_loader, do_val ? &val_loader : NULL, false);
    RunRanks ranks = llama_run_ranks(&grid);
    run_check_same_settings(&ranks, run_settings(&tc, &lc, N, &train_loader, do_val ? &val_loader : NULL, true));
    std::vector<GradCommGPU> gcs(V);  // one per logical rank; the others' made once the model is in place
    GradCommGPU& gc = gcs[0];
    gradcomm_gpu_init(&gc, &tc, &lc, grid.rank * V, N, tc.B * tc.T);
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
    CudaDeviceInfo dev = cuda_device_info(grid.nccl.device);
    LlamaModel model;
    llama_model_alloc(&model, &lc, tc.B, tc.T, attention);
    // the other logical ranks: their gradients, communication states and the group that runs them
    CommVirtualGroup vgroup;
    std::vector<CommGridGPU> vgrids(V, grid.nccl);
    LocalRanksGPU local = llama_local_ranks_single(&model, &grid, &train_loaders[0], &gc);
    if (V > 1) {
        run_agree(&ranks, llama_virtual_memory_problem(&tc, &lc, V));
        run_open_loaders(&tc, lc.V, grid.rank * V, N, 1, V, &train_loaders, &val_loaders);
        comm_virtual_init(&vgroup, V, grid.nccl.device, model.stream);
        local = LocalRanksGPU{V, grid.rank * V, N, {}, {}, {}, {}, &vgroup};
        for (int v = 0; v < V; v++) {
            if (v > 0) {
                gradcomm_gpu_init(&gcs[v], &tc, &lc, grid.rank * V + v, N, tc.B * tc.T);
                gradcomm_gpu_share(&gcs[v], &gcs[0]);
            }
            CommGridGPU& g = vgrids[v];
            g.rank = g.vrank = grid.rank * V + v;
            g.world_size = N;
            g.comm = NULL;
            g.watch = NULL;
            g.stream = model.stream;
            g.vgroup = &vgroup;
            float* grads = model.grads;
            if (v > 0) {
                grads = cuda_malloc<float>(model.num_params);
                CUDA_CHECK(cudaMemset(grads, 0, model.num_params * sizeof(float)));
            }
            local.grads.push_back(grads);
            local.batch_ctx.push_back(&train_loaders[v]);
            local.gc.push_back(&gcs[v]);
            local.grids.push_back(&vgrids[v]);
        }
    }
    if (start_step > 0) {
        llama_set_params(&model, resume_params.data());
        std::vector<float>().swap(resume_params);
        llama_set_optimizer_state(&model, &resume_state);
        dataloader_set_state(&train_loader, resume_state.data_state);
        for (int v = 1; v < V; v++) {  // the others' positions follow from the step, as the state file's does (checked at resume)
            int64_t pos[3];
            dataloader_state_after(&train_loaders[v], (long long)start_step * accum_steps, pos);
            dataloader_set_state(&train_loaders[v], pos);
        }
        consecutive_skips = (int)resume_state.skipped_steps;
        for (int v = 0; v < V; v++) gradcomm_gpu_load(&gcs[v], &resume_state, checkpoint_state_path(tc.output_dir, start_step, grid.rank).c_str(), v);
    } else if (from_file) {
        llama_set_params(&model, file_params.data());
    } else {
        std::vector<float> init(model.num_params);
        llama_init_params(&lc, init.data(), tc.seed);
        llama_set_params(&model, init.data());
    }
    run_startup_stop(&ranks, tc, start_step, argc, argv);  // a stop during the -y 1 load or the model's init
    for (GradCommGPU& g : gcs) gradcomm_gpu_omega_prepare(&g, start_step);  // the first refresh's Ω, built while the run starts

    // past every start-up check: the run commits to -o (deletes what it set aside), then logs there
    Logger logger = {NULL, NULL, "", ""};
    run_commit_output(&tc, &ranks);
    if (!tc.output_dir.empty() && grid.rank == 0) logger_init(&logger, tc.output_dir, start_step);
    double flops_per_token = llama_flops_per_token(&lc, tc.T);
    if (grid.rank == 0) {
        char b[256];
        printf("+------------------------+--------------------------------------------------+\n");
        run_print_row("setting", "value");
        printf("+------------------------+--------------------------------------------------+\n");
        run_print_row("engine", "train_llama (CUDA, bf16 compute, fp32 master)");
        snprintf(b, sizeof(b), "%.100s, sm_%d%d, %d SMs, %.0f GiB", dev.name, dev.major, dev.minor, dev.sm_count, dev.memory_bytes / 1073741824.0);
        run_print_row("device", b);
        if (dev.peak_bf16_flops > 0) snprintf(b, sizeof(b), "%.0f TFLOP/s bf16 dense", dev.peak_bf16_flops / 1e12);
        else snprintf(b, sizeof(b), "unknown device: MFU n/a");
        run_print_row("peak for MFU", b);
        const char* how = model.attn.kind == ATTENTION_FLASH ? "flash, fused" : model.attn.kind == ATTENTION_FLASH_SM90 ? "flash_sm90, fused on wgmma"
                                                                                                                     : "cublas, unfused";
        snprintf(b, sizeof(b), "%s (--attention %s, head size %d)", how, tc.attention.c_str(), llama_head_size(&lc));
        run_print_row("attention", b);
        run_print_run_rows(tc, model_desc, model.num_params, train_loader, do_val ? &val_loader : NULL, N, accum_steps,
                           start_step, V > 1 ? "NCCL; logical ranks folded on the GPU" : "NCCL", llama_buckets_row(&gc, &tc).c_str());
        if (V > 1) {
            snprintf(b, sizeof(b), "%d logical ranks in this process, one GPU (--virtual-ranks)", N);
            run_print_row("virtual ranks", b);
        }
        snprintf(b, sizeof(b), "%llu", tc.seed); run_print_row("seed", b);
        printf("+------------------------+--------------------------------------------------+\n");
        fflush(stdout);
    }

    GradCommTimer timer;
    gradcomm_timer_init(&timer, model.stream);
    double t_run0 = run_now_seconds(), train_seconds = 0.0;
    int timed_steps = 0;
    float last_loss = NAN;
    int stop_sig = 0;  // a stop signal every rank has agreed on (in the last step's skip all-reduce)
    bool stopped = false;
    // a step, a validation pass and a checkpoint are the waits --comm-timeout watches (llmc/watchdog.h)
    if (grid.world_size > 1) watchdog_start(tc.comm_timeout, grid.rank);
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
            watchdog_enter("the validation loss's all-reduce");
            float val_loss = (float)llama_mean_over_ranks(&grid, mean, N);
            watchdog_leave();
            if (grid.rank == 0) run_report_val(&logger, step, val_loss, tc.total_batch);
        }
        if (tc.sample_every > 0 && grid.rank == 0 && !fresh && (step > 0 || tc.steps == 0) && (step % tc.sample_every == 0 || last)) {
            llama_sample(&model, &tokenizer, &tc, tc.seed + (unsigned long long)step);
        }
        if (run_checkpoint_due(tc, step, fresh, last) || (stopping && !tc.output_dir.empty())) {
            // copies of what the files hold, written while the next steps train (--checkpoint-async)
            double t_ckpt = run_checkpoint_begin(&ranks, &writer, &tc, step, &train_loader, consecutive_skips, settings);
            if (grid.rank == 0) llama_get_params(&model, &writer.params);  // (the host copy the files are written from)
            CheckpointState& st = writer.state;
            {  // this rank's share of the optimizer moments (the ranks compare a sample first)
                size_t begin, end;
                uint32_t crc = llama_moments_sample_crc(&model);
                watchdog_enter("the checkpoint's optimizer moments check");
                run_moments_share(&ranks, step, crc, model.num_params, &begin, &end);
                watchdog_leave();
                st.m.resize(end - begin);
                st.v.resize(end - begin);
                cuda_download_to(st.m.data(), model.opt_m + begin, end - begin);
                cuda_download_to(st.v.data(), model.opt_v + begin, end - begin);
                st.moments_begin = (int64_t)begin;
                st.moments_total = (int64_t)model.num_params;
            }
            for (int v = 0; v < V; v++) gradcomm_gpu_save(&gcs[v], &st.extras, v);
            run_checkpoint_write(&ranks, &writer, &tc, &model.config, writer.params.data(), step, t_ckpt, last || stopping);
        }
        if (stopping) {
            // no rank exits before rank 0 has marked the checkpoint whole (a launcher such as
            // srun --kill-on-bad-exit ends the others at the first exit)
            watchdog_enter("the stop's barrier");
            llama_comm_max_int(&grid, 0);
            watchdog_leave();
            if (grid.rank == 0) run_print_stopped(tc, stop_sig, step, argc, argv, grid.world_size);
            stopped = true;
            break;
        }
        if (last) break;

        if (getenv("TRAIN_LLAMA_TEST_SLOW")) usleep(200000);  // test hook: widen the window for a kill
        run_test_signal(step + 1, grid.rank);
        watchdog_set_step(step + 1);
        double t0 = run_now_seconds();
        watchdog_enter("the step");
        StepStats st = llama_train_step(&model, &tc, &mc, sched, &grid, accum_steps, step, run_next_batch, NULL, NULL, &timer, &local);
        for (GradCommGPU& g : gcs) gradcomm_gpu_end_step(&g, step);  // the factors are settled: the next refresh's Ω starts building
        watchdog_leave();
        stop_sig = st.stop_signal;
        gradcomm_timer_collect(&timer);
        float loss = st.loss, norm = st.grad_norm, lr = st.lr;
        double comm_bytes = st.comm_bytes;
        double dt = run_now_seconds() - t0;
        if (st.skipped_on_rank >= 0) {
            consecutive_skips++;
            if (grid.rank == 0) {
                if (st.skipped_on_rank < N)
                    printf("step %5d/%d | skipped: non-finite loss or gradient on rank %d (%d in a row)\n",
                           step + 1, tc.steps, st.skipped_on_rank, consecutive_skips);
                else if (st.skipped_on_rank == N)
                    printf("step %5d/%d | skipped: non-finite value in the %s coordinates (%d in a row)\n",
                           step + 1, tc.steps, tc.comm.c_str(), consecutive_skips);
                else
                    printf("step %5d/%d | skipped: non-finite averaged gradient after communication (%d in a row)\n",
                           step + 1, tc.steps, consecutive_skips);
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
                llama_comm_finalize(&grid);
                return 1;
            }
            continue;
        }
        consecutive_skips = 0;
        last_loss = loss;
        if (step > start_step) { train_seconds += dt; timed_steps++; }  // the first step warms caches and plans

        if (grid.rank == 0) {
            double tok_s = tc.total_batch / dt;
            double avg = timed_steps > 0 ? train_seconds / timed_steps : dt;
            double eta = avg * (tc.steps - step - 1);
            double mfu = dev.peak_bf16_flops > 0 ? flops_per_token * tok_s / (dev.peak_bf16_flops * grid.world_size) : -1.0;
            char mfu_s[32];
            if (mfu >= 0) snprintf(mfu_s, sizeof(mfu_s), "%.1f%%", 100.0 * mfu); else snprintf(mfu_s, sizeof(mfu_s), "n/a");
            printf("step %5d/%d | loss %.6f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s | MFU %s | comm %.0f B | eta %s%s%s\n",
                   step + 1, tc.steps, loss, lr, norm, dt * 1e3, tok_s, mfu_s, comm_bytes, run_format_duration(eta).c_str(),
                   gradcomm_gpu_step_summary(&gc).c_str(), gradcomm_timer_summary(&timer).c_str());
            fflush(stdout);
            logger_train(&logger, step + 1, loss);
            std::string line;
            logger_field(&line, "step", step + 1);
            logger_field(&line, "tokens", (double)(step + 1) * tc.total_batch);
            logger_field(&line, "train_loss", loss);
            logger_field(&line, "lr", lr);
            logger_field(&line, "grad_norm", norm);
            logger_field(&line, "ms", dt * 1e3);
            logger_field(&line, "ns_matrices", st.ns_matrices);
            logger_field(&line, "tokens_per_s", tok_s);
            if (mfu >= 0) logger_field(&line, "mfu", mfu);
            logger_field(&line, "comm_bytes", comm_bytes);
            logger_field(&line, "comm_buckets_overlapped", st.comm_buckets);
            logger_field(&line, "eta_s", eta);
            gradcomm_gpu_log_fields(&gc, &line);
            gradcomm_timer_log_fields(&timer, &line);
            logger_field(&line, "t_omega_ms", gc.stats.omega_seconds * 1e3);
            logger_metrics(&logger, line);
        }
    }
    if (grid.rank == 0 && !stopped) {
        double total = run_now_seconds() - t_run0;
        if (tc.steps > start_step) printf("done: %d steps, final train loss %.6f, %.1f s", tc.steps - start_step, last_loss, total);
        else printf("done: no step to train (-x %d, from step %d), %.1f s", tc.steps, start_step, total);
        if (timed_steps > 0) {
            double tok_s = tc.total_batch * timed_steps / train_seconds;
            printf(", %.0f tok/s average", tok_s);
            if (dev.peak_bf16_flops > 0) printf(", MFU %.1f%%", 100.0 * flops_per_token * tok_s / (dev.peak_bf16_flops * grid.world_size));
        }
        printf("\n");
    }
    logger_free(&logger);
    if (tokenizer.ok) tokenizer_free(&tokenizer);
    for (int v = 0; v < V; v++) {
        dataloader_free(&train_loaders[v]);
        if (do_val) dataloader_free(&val_loaders[v]);
    }
    gradcomm_timer_free(&timer);
    for (int v = V - 1; v >= 0; v--) gradcomm_gpu_free(&gcs[v]);  // the others first: they share logical rank 0's buffers
    for (int v = 1; v < V; v++) CUDA_CHECK(cudaFree(local.grads[v]));
    if (V > 1) comm_virtual_free(&vgroup);
    llama_model_free(&model);
    matmul_free();
    llama_comm_finalize(&grid);
    return stopped ? RUN_EXIT_STOPPED : 0;
}
#endif  // TRAIN_LLAMA_NO_MAIN
