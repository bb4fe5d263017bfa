// run.h — the host-side plumbing both trainers share (host only): resolving the model config
// and the batch from the flags, the settings text ranks and checkpoints must agree on, finding
// and validating the resume point, and small helpers of the main loop (timing, the config table,
// sampling a token). Every check here is a user_error before anything is written.
#pragma once
#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>
#include "checkpoint.h"
#include "dataloader.h"
#include "llama.h"
#include "logger.h"
#include "train_config.h"
#include "utils.h"

// The model config from -e (a preset or a checkpoint file), -t checked against it, and -d
// checked against B*T*ranks. Returns the micro-steps per optimizer step; sets *from_file.
static inline int run_resolve_config(TrainConfig* tc, LlamaConfig* lc, int world_size, bool* from_file) {
    *from_file = !llama_preset(tc->model.c_str(), lc);
    if (*from_file) checkpoint_read_model_header(tc->model.c_str(), "-e", lc, NULL);
    if (tc->T == 0) tc->T = lc->T;
    if (tc->T > lc->T) user_error("-t: expected at most the model's maximum sequence length %d, found %d", lc->T, tc->T);
    long long tokens_per_micro = (long long)tc->B * tc->T * world_size;
    if (tc->total_batch == 0) tc->total_batch = tokens_per_micro;
    if (tc->total_batch % tokens_per_micro != 0)
        user_error("-d: expected a multiple of B*T*ranks = %d*%d*%d = %lld tokens, found %lld",
                   tc->B, tc->T, world_size, tokens_per_micro, tc->total_batch);
    long long accum = tc->total_batch / tokens_per_micro;  // 64-bit: -d can exceed int micro-steps
    if (accum > INT_MAX)
        user_error("-d: %lld tokens are %lld micro-steps of B*T*ranks = %lld tokens, expected at most %d per step",
                   tc->total_batch, accum, tokens_per_micro, INT_MAX);
    return (int)accum;
}

// -x -1 (one epoch) and -u -1 (1% of the steps), once the data is known.
static inline void run_resolve_steps(TrainConfig* tc, const DataLoader* train) {
    if (tc->steps == -1) tc->steps = (int)std::max(1LL, (long long)(train->total_tokens / tc->total_batch));
    if (tc->warmup == -1) tc->warmup = tc->steps / 100;
}

// The settings ranks compare at start and a resumed run compares with its checkpoint: the
// flags that shape the run, plus fingerprints of the data files. Both engines write the same
// text, so either can resume the other's checkpoint.
static inline std::string run_settings(const TrainConfig* tc, const LlamaConfig* lc, int world_size,
                                       const DataLoader* train, const DataLoader* val_or_null) {
    return train_config_settings(tc, llama_config_string(lc), world_size) +
           "train_files=" + dataloader_fingerprint(train) + "\n" +
           "val_files=" + (val_or_null ? dataloader_fingerprint(val_or_null) : std::string("off")) + "\n";
}

// With -y 1: the newest complete checkpoint in -o, validated against this run (model, rank
// count, settings, sizes); its state file goes to *state. Returns its step, or 0 to start fresh.
static inline int run_find_resume(const TrainConfig* tc, const LlamaConfig* lc, const std::string& settings,
                                  int rank, int world_size, CheckpointState* state) {
    if (!tc->resume) return 0;
    std::vector<int> done = checkpoint_complete_steps(tc->output_dir);
    if (done.empty()) {
        if (checkpoint_any_files(tc->output_dir))
            user_error("-y: '%s' holds checkpoint files but no DONE_* marker: every checkpoint there is incomplete "
                       "(hint: remove the directory or pass a new -o to start fresh)", tc->output_dir.c_str());
        if (rank == 0) printf("-y 1: no checkpoint in %s yet, starting from step 0\n", tc->output_dir.c_str());
        return 0;
    }
    int step = done.back();
    std::string mpath = checkpoint_model_path(tc->output_dir, step);
    LlamaConfig ck;
    checkpoint_read_model_header(mpath.c_str(), "-y", &ck, NULL);
    if (!llama_config_equal(&ck, lc))
        user_error("-y: checkpoint '%s' has model %s, but this run asks for %s (hint: pass the same -e, or a new -o)",
                   mpath.c_str(), llama_config_string(&ck).c_str(), llama_config_string(lc).c_str());
    checkpoint_read_state(checkpoint_state_path(tc->output_dir, step, rank), state);
    if (state->world_size != world_size)
        user_error("-y: checkpoint step %d was written by %lld ranks, this run has %d (resume with the same number of ranks)",
                   step, (long long)state->world_size, world_size);
    std::string diff = train_config_first_difference(state->settings, settings);
    if (!diff.empty())
        user_error("-y: checkpoint step %d was written with different settings: %s (checkpoint vs this run)", step, diff.c_str());
    if (state->m.size() != llama_num_params(lc) || state->v.size() != llama_num_params(lc))
        user_error("-y: state file of step %d holds %zu optimizer values, expected %zu", step, state->m.size(), llama_num_params(lc));
    if (step > tc->steps) user_error("-y: checkpoint step %d is past the run's %d steps", step, tc->steps);
    return step;
}

// A NextBatchFn over a DataLoader.
static inline void run_next_batch(void* ctx, const int** inputs, const int** targets) {
    DataLoader* l = (DataLoader*)ctx;
    dataloader_next_batch(l);
    *inputs = l->inputs;
    *targets = l->targets;
}

// The token generation starts from: GPT-2's <|endoftext|> where the model's vocabulary has it,
// else the vocabulary's last token (a smaller-vocabulary checkpoint has no row 50256 to embed).
static inline int run_sample_start_token(int V) { return std::min(LLAMA_GPT2_VOCAB - 1, V - 1); }

// A token drawn from softmax(logits[0:V]) with a uniform coin in [0, 1).
static inline int run_sample_token(const float* logits, int V, double coin) {
    float maxv = logits[0];
    for (int i = 1; i < V; i++) maxv = std::max(maxv, logits[i]);
    double sum = 0.0;
    for (int i = 0; i < V; i++) sum += exp((double)logits[i] - maxv);
    double target = coin * sum, acc = 0.0;
    for (int i = 0; i < V; i++) {
        acc += exp((double)logits[i] - maxv);
        if (acc > target) return i;
    }
    return V - 1;
}

static inline std::string run_format_duration(double s) {
    char b[64];
    if (!std::isfinite(s) || s < 0) return "?";
    int t = (int)s;
    if (t >= 3600) snprintf(b, sizeof(b), "%dh%02dm", t / 3600, (t / 60) % 60);
    else if (t >= 60) snprintf(b, sizeof(b), "%dm%02ds", t / 60, t % 60);
    else snprintf(b, sizeof(b), "%ds", t);
    return b;
}

static inline void run_print_row(const char* key, const std::string& value) { printf("| %-22s | %-48s |\n", key, value.c_str()); }

// Rank 0's report of a val loss: the console line, main.log and metrics.jsonl.
static inline void run_report_val(Logger* logger, int step, float val_loss) {
    printf("val loss %.6f (step %d)\n", val_loss, step);
    logger_val(logger, step, val_loss);
    std::string line;
    logger_field(&line, "step", step);
    logger_field(&line, "val_loss", val_loss);
    logger_metrics(logger, line);
}

// Is a checkpoint due after `step` (-n N: every N steps and at the end; -n 0: at the end only;
// -n -1 never; never at step 0 or on the step a run just resumed from)?
static inline bool run_checkpoint_due(const TrainConfig& tc, int step, bool fresh, bool last) {
    return !tc.output_dir.empty() && !fresh && step > 0 && tc.checkpoint_every >= 0 &&
           ((tc.checkpoint_every > 0 && step % tc.checkpoint_every == 0) || last);
}

// The rows of the start-up table both engines print, from "model" to "output" (val: NULL when off).
// transport: how the gradient travels ("MPI", "NCCL").
static inline void run_print_run_rows(const TrainConfig& tc, const std::string& model_desc, size_t num_params, const DataLoader& train,
                                      const DataLoader* val, int world_size, int accum_steps, int start_step, const char* transport) {
    char b[256];
    run_print_row("model", model_desc);
    snprintf(b, sizeof(b), "%zu (%.1fM)", num_params, num_params / 1e6); run_print_row("parameters", b);
    run_print_row("train data", tc.train_data + " (" + std::to_string(train.num_shards) + " shards, " + std::to_string(train.total_tokens) + " tokens)");
    run_print_row("val data", val ? tc.val_data + " (" + std::to_string(val->total_tokens) + " tokens)" : "off");
    snprintf(b, sizeof(b), "B=%d T=%d ranks=%d accum=%d -> %lld tokens/step", tc.B, tc.T, world_size, accum_steps, tc.total_batch); run_print_row("batch", b);
    snprintf(b, sizeof(b), "%d (from %d)", tc.steps, start_step); run_print_row("steps", b);
    snprintf(b, sizeof(b), "%s: peak %g, warmup %d, final %g x peak", tc.schedule.c_str(), tc.lr, tc.warmup, tc.final_lr_frac); run_print_row("learning rate", b);
    snprintf(b, sizeof(b), "%s%s%s + AdamW, wd %g, clip %g", tc.optimizer.c_str(), tc.optimizer == "muon" ? " " : "",
             tc.optimizer == "muon" ? tc.muon.c_str() : "", tc.weight_decay, tc.grad_clip); run_print_row("optimizer", b);
    std::string mode = tc.comm;
    if (tc.comm != "fp32" && tc.comm != "bf16") mode += " (" + tc.fp8_reduce + ")";
    if (tc.comm == "geofp8") mode += ", layers " + tc.geofp8_layers;
    run_print_row("grad communication", mode + ", " + transport);
    run_print_row("output", tc.output_dir.empty() ? "none" : tc.output_dir);
}

static inline double run_now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
