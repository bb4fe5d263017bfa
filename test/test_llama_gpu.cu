// test_llama_gpu.cu — the whole CUDA model (train_llama.cu) against the PyTorch / Hugging Face
// fixture (test/reference/make_model_fixtures.py: logits, loss and every gradient of
// LlamaForCausalLM in float64, and 10 training steps per optimizer configuration with
// torch.optim.Muon / torch.optim.AdamW), and checkpoints crossing between the engines.
// Without a CUDA device it prints one SKIP line and exits 77.
//
// Tolerances are bf16 tolerances. They were set from a numpy emulation of exactly this engine's
// rounding points (bf16 weights and activations into fp32-accumulating GEMMs, fp32 residual
// stream, logits and weight gradients, bf16 Newton–Schulz) on the fixture model; the same
// emulation without the bf16 roundings reproduces the fixture to ~1e-6, so the numbers below are
// the cost of bf16, not of a different model. Observed in the emulation -> tolerance:
//   logits (max rel)                                    2.9e-3 -> 2e-2
//   loss (rel)                                          1.5e-5 -> 1e-3
//   gradients, per tensor (max rel)                     8.3e-3 -> 2e-2
//   10 training steps, Muon presets: losses (rel)       5.2e-3 -> 2e-2
//                                    grad norms (rel)   6.3e-2 -> 0.15
//                                    weight change, per-tensor relative L2   0.11 -> 0.25
//   10 training steps, AdamW (lr 1e-2 oscillates here, which amplifies any difference):
//                                    losses 3.2e-2 -> 0.1, grad norms 0.30 -> 0.6 (0.8: flash, below),
//                                    weight change per-tensor relative L2 0.13 -> 0.35
// They bound what bf16 costs, not rounding noise, so their margin is about 2x over that cost.
// Run on the CPU through dev/emu (cuBLAS emulated with OpenBLAS), the worst cases over five OpenBLAS
// kernel families (dev/tolerance_sweep.py) are those of the emulation or below: logits 2.9e-3,
// loss 1.5e-5, gradients 8.3e-3; Muon losses 2.9e-3, grad norms 6.4e-2, weight change 0.108;
// AdamW losses 2.0e-2, grad norms 0.304, weight change 0.130; none varies by more than 1.5x
// across the kernels. Those figures are the unfused attention's (cublas). The fused flash path
// (the default: the fixture's head size is 16) rounds P and dS per key tile and sums in
// another order; its worst cases over seven kernel families (Prescott to Cooperlake) at 1 and 2
// threads, with the one-pass backward: logits 2.9e-3, gradients 9.8e-3; Muon losses 2.4e-3, grad
// norms 6.7e-2, weight change 0.103; AdamW losses 4.3e-2, grad norms 0.409, weight change 0.134,
// each within 1.5x across the settings. The
// AdamW grad-norm bound is 0.8 for it (2x; 0.6 before).
// On a GPU, cuBLASLt's own summation order adds to them.
// Every run must also lower the loss and stay finite. Other checks: gradient accumulation (two
// micro-steps of B/2 equal one step of B: 1e-2), bitwise repeatability of forward + backward,
// padded vocabulary rows get exactly zero gradient, and checkpoints: a GPU-written model and
// state file read back bitwise by the CPU code path (checkpoint.h readers) and the CPU reference
// layers (llmc/*.h) compute the same logits from it as the GPU (2e-2); a CPU-written checkpoint
// (checkpoint.h writer) loads bitwise into the GPU engine, bf16 copy included.
// The model runs with the attention kernels named by the argument (auto = flash where the head
// size allows, as train_llama; flash; cublas), so both paths meet the same fixture.
// Usage: build/test_llama_gpu [auto|flash|cublas]   (from the repository root)
#define TRAIN_LLAMA_NO_MAIN
#include "../train_llama.cu"
#include "../llmc/encoder.h"
#include "../llmc/matmul.h"
#include "../llmc/attention.h"
#include "../llmc/swiglu.h"
#include "../llmc/residual.h"
#include "test_util.h"
#include "fixture.h"

// Loads a model file (validated against m's config) into the device weights.
static void llama_load_model(LlamaModel* m, const char* path, const char* flag) {
    std::vector<float> host(m->num_params);
    checkpoint_read_model(path, flag, &m->config, host.data());
    llama_set_params(m, host.data());
}

static const char* FIX_PATH = "test/fixtures/model.fix";
static const char* MODEL_PATH = "test/fixtures/model_small.bin";

static const double TOL_LOGITS = 2e-2;
static const double TOL_LOSS = 1e-3;
static const double TOL_GRADS = 2e-2;
static const double TOL_ACCUM = 1e-2;
static const double TOL_MUON_LOSSES = 2e-2, TOL_MUON_NORMS = 0.15, TOL_MUON_WEIGHTS = 0.25;
static const double TOL_ADAMW_LOSSES = 0.1, TOL_ADAMW_NORMS = 0.8, TOL_ADAMW_WEIGHTS = 0.35;

typedef struct {
    const int* inputs;
    const int* targets;
    int stride;  // tokens per micro-batch
    int next;    // micro-batch index, wraps modulo count
    int count;
} FixedBatches;

static void fixed_next(void* ctx, const int** inputs, const int** targets) {
    FixedBatches* fb = (FixedBatches*)ctx;
    *inputs = fb->inputs + (size_t)fb->next * fb->stride;
    *targets = fb->targets + (size_t)fb->next * fb->stride;
    fb->next = (fb->next + 1) % fb->count;
}

// Max over the nine tensors of err(got, ref) per tensor; names the worst.
typedef double (*ErrFn)(const float*, const float*, size_t);
static double tensor_max_rel(const float* a, const float* b, size_t n) { return test_rel_err(a, b, n); }
static double max_tensor_err(const LlamaConfig* c, const float* got, const float* ref, ErrFn fn, std::string* worst) {
    size_t sizes[LLAMA_NUM_TENSORS], offs[LLAMA_NUM_TENSORS];
    llama_param_sizes(c, sizes);
    llama_param_offsets(c, offs);
    double mx = 0.0;
    for (int t = 0; t < LLAMA_NUM_TENSORS; t++) {
        double e = fn(got + offs[t], ref + offs[t], sizes[t]);
        if (!(e <= mx)) { mx = e; *worst = LLAMA_TENSOR_NAMES[t]; }
    }
    return mx;
}

// The fp32 CPU reference forward (llmc/*.h layers, as train_llama_cpu runs them) -> logits (B, T, Vp).
static std::vector<float> cpu_forward_logits(const LlamaConfig* c, const float* params, const int* tokens, int B, int T) {
    int C = c->C, NH = c->NH, NKV = c->NKV, FF = c->FF, HS = llama_head_size(c), QKV = llama_qkv_channels(c);
    int HSNH = HS * NH, N = B * T;
    ParameterTensors p = llama_tensors(c, (float*)params);
    std::vector<float> x((size_t)N * C), ln((size_t)N * C), rstd(N), qkv((size_t)N * QKV), atty((size_t)N * HSNH),
        lse((size_t)N * NH), branch((size_t)N * C), fc1((size_t)N * 2 * FF), sw((size_t)N * FF), logits((size_t)N * c->Vp),
        cos_t((size_t)T * HS / 2), sin_t((size_t)T * HS / 2);
    rope_precompute_cpu(cos_t.data(), sin_t.data(), T, HS);
    encoder_forward_cpu(x.data(), tokens, p.wte, N, C);
    for (int l = 0; l < c->L; l++) {
        rmsnorm_forward_cpu(ln.data(), rstd.data(), x.data(), p.ln1w + (size_t)l * C, N, C);
        matmul_forward_cpu(qkv.data(), ln.data(), p.qkvw + (size_t)l * QKV * C, N, C, QKV);
        rope_forward_cpu(qkv.data(), qkv.data(), cos_t.data(), sin_t.data(), B, T, NH, NKV, HS);
        attention_forward_cpu(atty.data(), lse.data(), qkv.data(), B, T, NH, NKV, HS);
        matmul_forward_cpu(branch.data(), atty.data(), p.projw + (size_t)l * C * HSNH, N, HSNH, C);
        residual_forward_cpu(x.data(), x.data(), branch.data(), (size_t)N * C);
        rmsnorm_forward_cpu(ln.data(), rstd.data(), x.data(), p.ln2w + (size_t)l * C, N, C);
        matmul_forward_cpu(fc1.data(), ln.data(), p.fc1w + (size_t)l * 2 * FF * C, N, C, 2 * FF);
        swiglu_forward_cpu(sw.data(), fc1.data(), N, FF);
        matmul_forward_cpu(branch.data(), sw.data(), p.fc2w + (size_t)l * C * FF, N, FF, C);
        residual_forward_cpu(x.data(), x.data(), branch.data(), (size_t)N * C);
    }
    rmsnorm_forward_cpu(ln.data(), rstd.data(), x.data(), p.lnfw, N, C);
    matmul_forward_cpu(logits.data(), ln.data(), p.lm_head, N, C, c->Vp);
    return logits;
}

// The backward of one micro-batch through the trainer's path (the losses into loss slot 0),
// then the wait and its mean loss.
static float backward_mean_loss(LlamaModel* m, const int* tokens, const int* targets, int B, int T, float dloss_scale) {
    llama_backward_enqueue(m, tokens, targets, B, T, dloss_scale, NULL, 0);
    CUDA_CHECK(cudaStreamSynchronize(m->stream));
    return llama_slot_mean_loss(m, B * T, 0);
}

int main(int argc, char** argv) {
    const char* attention_name = argc > 1 ? argv[1] : "auto";
    if (!cuda_device_present()) {
        test_skip("test_llama_gpu", "no CUDA device");
        return 77;
    }
    Fixture fx;
    if (!fixture_load(&fx, FIX_PATH)) {
        test_check("gpu_model_fixture_loads", false, "cannot read %s (run from the repository root)", FIX_PATH);
        return test_exit_code();
    }
    const int32_t* cfg = fx.i("config");
    LlamaConfig lc = {cfg[0], cfg[1], cfg[2], cfg[3], cfg[4], cfg[5], cfg[6], cfg[7]};
    int B = cfg[8], T = lc.T;
    size_t P = (size_t)cfg[9];
    test_check("gpu_model_param_count", llama_num_params(&lc) == P, "layout has %zu params, fixture %zu", llama_num_params(&lc), P);
    CudaDeviceInfo dev = cuda_device_info(0);
    printf("  device: %s (sm_%d%d)\n", dev.name, dev.major, dev.minor);

    // the fixture's checkpoint (CPU engine format) loads into the GPU engine
    LlamaConfig from_file;
    int ck_step = -1;
    checkpoint_read_model_header(MODEL_PATH, "-e", &from_file, &ck_step);
    test_check("gpu_model_checkpoint_header", llama_config_equal(&from_file, &lc) && ck_step == 0, "config %s",
               llama_config_string(&from_file).c_str());
    AttentionKind attention;
    if (!attention_kind_from_name(attention_name, llama_head_size(&lc), &attention)) {
        fprintf(stderr, "test_llama_gpu: attention '%s' is not auto, flash or cublas, or does not take head size %d\n", attention_name,
                llama_head_size(&lc));
        return 2;
    }
    printf("  attention: %s\n", attention_kind_name(attention));
    LlamaModel m;
    llama_model_alloc(&m, &lc, B, T, attention);
    llama_load_model(&m, MODEL_PATH, "-e");
    std::vector<float> loaded;
    llama_get_params(&m, &loaded);
    test_check("gpu_model_checkpoint_payload", memcmp(loaded.data(), fx.f("params"), P * sizeof(float)) == 0,
               "weights differ from fixture params");

    const int* inputs = fx.i("inputs");
    const int* targets = fx.i("targets");
    size_t NV = (size_t)B * T * lc.Vp;

    // the sampler's forward: sequence 0 alone, the logits of its last position only (row 0)
    llama_forward(&m, inputs, 1, T, true);
    std::vector<float> last = cuda_download(m.acts.logits, lc.Vp);
    test_bound("gpu_model_last_position_logits_vs_hf", test_rel_err(last.data(), fx.f("logits") + (size_t)(T - 1) * lc.Vp, lc.Vp),
               TOL_LOGITS);

    // forward: logits and loss
    llama_forward(&m, inputs, B, T);
    std::vector<float> logits = cuda_download(m.acts.logits, NV);
    double e_logits = test_rel_err(logits.data(), fx.f("logits"), NV);
    test_bound("gpu_model_logits_vs_hf", e_logits, TOL_LOGITS);
    float loss = llama_loss(&m, targets, B, T);
    double e_loss = fabs(loss - fx.scalar("loss")) / fabs(fx.scalar("loss"));
    test_bound("gpu_model_loss_vs_hf", e_loss, TOL_LOSS, "loss %.8f vs %.8f", loss, fx.scalar("loss"));

    // backward: every parameter gradient
    CUDA_CHECK(cudaMemset(m.grads, 0, P * sizeof(float)));
    float loss_b = backward_mean_loss(&m, inputs, targets, B, T, 1.0f);
    test_check("gpu_model_backward_loss", fabs(loss_b - loss) <= 1e-6f * fabs(loss), "%.8f vs %.8f", loss_b, loss);
    std::vector<float> grads = cuda_download(m.grads, P);
    std::string worst;
    double e_grads = max_tensor_err(&lc, grads.data(), fx.f("grads"), tensor_max_rel, &worst);
    test_bound("gpu_model_grads_vs_hf", e_grads, TOL_GRADS, "%s", worst.c_str());
    test_check("gpu_model_grads_finite", test_all_finite(grads.data(), P));
    {
        ParameterTensors g = llama_tensors(&lc, grads.data());
        bool pad_zero = true;
        for (size_t i = (size_t)lc.V * lc.C; i < (size_t)lc.Vp * lc.C; i++) pad_zero &= g.wte[i] == 0.0f && g.lm_head[i] == 0.0f;
        test_check("gpu_model_padded_vocab_grads_zero", pad_zero, "padded rows of wte / lm_head got a gradient");
    }
    // forward + backward again: bitwise the same gradients (no atomics anywhere)
    CUDA_CHECK(cudaMemset(m.grads, 0, P * sizeof(float)));
    llama_forward(&m, inputs, B, T);
    backward_mean_loss(&m, inputs, targets, B, T, 1.0f);
    std::vector<float> grads2 = cuda_download(m.grads, P);
    test_check("gpu_model_grads_bitwise_repeatable", memcmp(grads.data(), grads2.data(), P * sizeof(float)) == 0);

    // gradient accumulation: 2 micro-steps of B/2 equal one step of B (same mean loss)
    if (B % 2 == 0) {
        CUDA_CHECK(cudaMemset(m.grads, 0, P * sizeof(float)));
        int half = B / 2;
        for (int k = 0; k < 2; k++) {
            const int* in = inputs + (size_t)k * half * T;
            const int* tg = targets + (size_t)k * half * T;
            llama_forward(&m, in, half, T);
            backward_mean_loss(&m, in, tg, half, T, 0.5f);
        }
        std::vector<float> acc = cuda_download(m.grads, P);
        double e = test_rel_err(acc.data(), grads.data(), P);
        test_bound("gpu_model_grad_accumulation", e, TOL_ACCUM);
    }

    // 10 training steps per optimizer configuration
    const float* hp = fx.f("train.hparams");
    const char* configs[] = {"muon_moonlight", "muon_keller", "muon_megatron_core", "adamw"};
    GpuCommGrid grid;
    llama_comm_init(&grid);
    for (const char* name : configs) {
        std::string key = std::string("train.") + name;
        if (!fx.has(key + ".losses")) { test_check((key + "_present").c_str(), false, "missing in fixture"); continue; }
        TrainConfig tc;
        train_config_defaults(&tc);
        tc.B = B; tc.T = T;
        tc.lr = hp[0]; tc.final_lr_frac = hp[1]; tc.warmup = (int)hp[2]; tc.steps = (int)hp[3];
        tc.weight_decay = hp[4]; tc.grad_clip = hp[5];
        tc.optimizer = strcmp(name, "adamw") == 0 ? "adamw" : "muon";
        if (tc.optimizer == "muon") tc.muon = name + 5;
        bool is_muon = tc.optimizer == "muon";
        MuonPreset preset = MUON_MOONLIGHT;
        muon_preset_from_name(tc.muon.c_str(), &preset);
        MuonConfig mc = muon_config(preset);
        llama_set_params(&m, fx.f("params"));
        CUDA_CHECK(cudaMemset(m.opt_m, 0, P * sizeof(float)));
        CUDA_CHECK(cudaMemset(m.opt_v, 0, P * sizeof(float)));
        FixedBatches fb = {inputs, targets, B * T, 0, 1};
        const float* want_losses = fx.f(key + ".losses");
        const float* want_norms = fx.f(key + ".gradnorms");
        double worst_loss = 0.0, worst_norm = 0.0;
        float first = NAN, final_loss = NAN;
        for (int step = 0; step < tc.steps; step++) {
            StepStats st = llama_train_step(&m, &tc, &mc, SCHEDULER_COSINE, &grid, 1, step, fixed_next, &fb);
            if (step == 0) first = st.loss;
            final_loss = st.loss;
            worst_loss = std::max(worst_loss, fabs((double)st.loss - want_losses[step]) / fabs((double)want_losses[step]));
            worst_norm = std::max(worst_norm, fabs((double)st.grad_norm - want_norms[step]) / fabs((double)want_norms[step]));
            if (!std::isfinite(st.loss) || !std::isfinite(st.grad_norm)) { worst_loss = INFINITY; break; }
        }
        std::vector<float> now;
        llama_get_params(&m, &now);
        std::vector<float> got(P), want(P);
        for (size_t i = 0; i < P; i++) {
            got[i] = now[i] - fx.f("params")[i];
            want[i] = fx.f(key + ".params")[i] - fx.f("params")[i];
        }
        std::string w;
        double e_w = max_tensor_err(&lc, got.data(), want.data(), test_rel_l2, &w);
        printf("  %s: losses rel err %.3e, grad norms %.3e, weight change max per-tensor rel L2 %.3e (%s), loss %.4f -> %.4f\n",
               name, worst_loss, worst_norm, e_w, w.c_str(), first, final_loss);
        test_bound((key + "_gpu_losses").c_str(), worst_loss, is_muon ? TOL_MUON_LOSSES : TOL_ADAMW_LOSSES);
        test_bound((key + "_gpu_gradnorms").c_str(), worst_norm, is_muon ? TOL_MUON_NORMS : TOL_ADAMW_NORMS);
        test_bound((key + "_gpu_weights").c_str(), e_w, is_muon ? TOL_MUON_WEIGHTS : TOL_ADAMW_WEIGHTS, "rel L2, %s", w.c_str());
        test_check((key + "_gpu_loss_decreases").c_str(), final_loss < first && test_all_finite(now.data(), P),
                   "loss %.4f -> %.4f", first, final_loss);
    }

    // checkpoints across engines. m holds AdamW-trained weights and state now.
    char dir[] = "/tmp/test_llama_gpu_ckpt_XXXXXX";
    if (mkdtemp(dir)) {
        std::string d = dir;
        // GPU engine writes (as train_llama does) ...
        std::vector<float> written;
        llama_get_params(&m, &written);
        checkpoint_write_model(checkpoint_model_path(d, 3), &m.config, written.data(), 3);
        CheckpointState st;
        st.step = 3; st.rank = 0; st.world_size = 1;
        st.data_state[0] = 0; st.data_state[1] = 4096; st.data_state[2] = 1; st.skipped_steps = 0;
        st.settings = "B=2\nT=32\n";
        st.m = cuda_download(m.opt_m, P);  // the whole moments, as one rank's file holds them
        st.v = cuda_download(m.opt_v, P);
        // the sample the ranks compare at a checkpoint, gathered on the device (in one piece, and
        // in pieces of 1000 values): the host's
        uint32_t host_crc = run_moments_sample_crc(st.m.data(), st.v.data(), P);
        test_check("gpu_moments_sample_crc_is_the_hosts", llama_moments_sample_crc(&m) == host_crc && llama_moments_sample_crc(&m, 1000) == host_crc &&
                                                          P > 2000 * RUN_MOMENTS_SAMPLE_STRIDE);
        checkpoint_write_state(checkpoint_state_path(d, 3, 0), &st);
        checkpoint_write_done(d, 3);
        // ... the CPU engine's readers read it back bitwise
        std::vector<float> gpu_params;
        llama_get_params(&m, &gpu_params);
        std::vector<float> gpu_m = cuda_download(m.opt_m, P), gpu_v = cuda_download(m.opt_v, P);
        LlamaConfig c2;
        int s2 = -1;
        checkpoint_read_model_header(checkpoint_model_path(d, 3).c_str(), "-y", &c2, &s2);
        std::vector<float> cpu_params(P);
        checkpoint_read_model(checkpoint_model_path(d, 3).c_str(), "-y", &c2, cpu_params.data());
        CheckpointState st2;
        checkpoint_read_state(checkpoint_state_path(d, 3, 0), &st2);
        bool ok = s2 == 3 && llama_config_equal(&c2, &lc) && memcmp(cpu_params.data(), gpu_params.data(), P * 4) == 0 &&
                  st2.m == gpu_m && st2.v == gpu_v && st2.data_state[1] == 4096 && st2.settings == st.settings;
        test_check("gpu_checkpoint_read_by_cpu_bitwise", ok);
        // ... and the CPU reference layers compute the same model from it
        std::vector<float> cpu_logits = cpu_forward_logits(&lc, cpu_params.data(), inputs, B, T);
        llama_forward(&m, inputs, B, T);
        std::vector<float> gpu_logits = cuda_download(m.acts.logits, NV);
        double e = test_rel_err(gpu_logits.data(), cpu_logits.data(), NV);
        test_bound("gpu_checkpoint_cpu_forward_matches", e, TOL_LOGITS, "trained weights: logits, GPU vs CPU reference");

        // the CPU engine writes the fixture weights and a known state; the GPU engine loads them
        checkpoint_write_model(checkpoint_model_path(d, 5), &lc, fx.f("params"), 5);
        CheckpointState st3;
        st3.step = 5; st3.rank = 0; st3.world_size = 1;
        st3.data_state[0] = 0; st3.data_state[1] = 0; st3.data_state[2] = 0; st3.skipped_steps = 0;
        st3.settings = "x=1\n";
        st3.m.resize(P); st3.v.resize(P);
        for (size_t i = 0; i < P; i++) { st3.m[i] = 1e-3f * (float)((i % 97) - 48); st3.v[i] = 1e-6f * (float)(i % 89); }
        checkpoint_write_state(checkpoint_state_path(d, 5, 0), &st3);
        CheckpointState st4;
        checkpoint_read_state(checkpoint_state_path(d, 5, 0), &st4);
        llama_load_model(&m, checkpoint_model_path(d, 5).c_str(), "-y");
        llama_set_optimizer_state(&m, &st4);
        std::vector<float> back;
        llama_get_params(&m, &back);
        std::vector<float> bm = cuda_download(m.opt_m, P), bv = cuda_download(m.opt_v, P);
        std::vector<float> b16 = cuda_download_float(m.params_bf16, P);
        bool copy_ok = true;
        for (size_t i = 0; i < P; i++) copy_ok &= b16[i] == cuda_host_float(cuda_host_bf16(back[i]));
        test_check("cpu_checkpoint_read_by_gpu_bitwise",
                   memcmp(back.data(), fx.f("params"), P * 4) == 0 && bm == st3.m && bv == st3.v && copy_ok);
        llama_forward(&m, inputs, B, T);
        gpu_logits = cuda_download(m.acts.logits, NV);
        e = test_rel_err(gpu_logits.data(), fx.f("logits"), NV);
        test_bound("cpu_checkpoint_gpu_forward_vs_hf", e, TOL_LOGITS, "logits");
        checkpoint_delete(d, 3, 1);
        checkpoint_delete(d, 5, 1);
        remove(checkpoint_done_path(d, 5).c_str());
        rmdir(dir);
    } else {
        test_check("gpu_checkpoint_tmpdir", false, "mkdtemp failed");
    }

    llama_model_free(&m);
    matmul_free();
    return test_exit_code();
}
