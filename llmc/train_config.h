// train_config.h — the command line of both trainers (DESIGN §4), host only.
// train_config_parse() validates every flag (unknown flag, missing value, bad number, out of
// range, unknown name) with one error line naming the flag, then exit 1. Checks that need the
// model or the data (T vs the preset, batch vs the shard) happen in the trainer, also before
// anything is written. train_config_settings() renders the settings that must agree between a
// checkpoint and the run resuming it (and, with several ranks, between ranks).
#pragma once
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>
#include "fp8.h"
#include "utils.h"

#define GEOFP8_RANK_MAX 4096  // the largest --geofp8-rank, and the widest d_in of --geofp8-rank full (the GPU's GEOFP8_MAX_RANK)

#define TRAIN_DEFAULT_TRAIN_DATA "data/kjv/kjv_train_*.bin"
#define TRAIN_DEFAULT_VAL_DATA "data/kjv/kjv_val_*.bin"
#define TRAIN_DEFAULT_TOKENIZER "data/gpt2_tokenizer.bin"

typedef struct {
    std::string train_data;    // -i  glob of train shards
    std::string val_data;      // -j  glob of val shards
    std::string model;         // -e  preset name or checkpoint file
    int vocab_size;            // --vocab-size V of a preset (0 = GPT-2's; a checkpoint keeps its own)
    std::string output_dir;    // -o  logs and checkpoints ("" = none)
    int B;                     // -b  micro-batch
    int T;                     // -t  sequence length (0 = the model's T)
    long long total_batch;     // -d  tokens per optimizer step (0 = B*T*ranks, no accumulation)
    int steps;                 // -x  optimizer steps (-1 = one epoch)
    float lr;                  // -l  peak learning rate
    float final_lr_frac;       // -q  final lr as a fraction of the peak
    int warmup;                // -u  warmup steps (-1 = 1% of steps)
    std::string schedule;      // -k  cosine | linear | constant
    float weight_decay;        // --wd
    float grad_clip;           // --clip (global norm; 0 = off)
    int checkpoint_every;      // -n  (0 = only at the end when -o is set, -1 = never)
    int resume;                // -y  1 = resume from the newest complete checkpoint in -o
    int keep_checkpoints;      // -nk keep the newest K checkpoints (0 = keep all)
    int checkpoint_async;      // --checkpoint-async 1: checkpoint files written while training goes on
    int val_every;             // -v  (0 = off)
    int val_batches;           // -m
    int sample_every;          // -s  (0 = off)
    int gen_tokens;            // -g
    std::string prompt_tokens; // --prompt-tokens: the sample's first tokens, comma-separated ids ("" = <|endoftext|>)
    float temperature;         // --temperature (0 = greedy)
    int top_k;                 // --top-k (0 = every token)
    std::string comm;          // -c  fp32 | bf16 | fp8 | fp8block | geofp8 | kfac
    std::string fp8_reduce;    // --fp8-reduce native | twophase
    std::string fp8_format;    // --fp8-format e4m3 | e5m2
    int fp8_ef;                // --fp8-ef 1: error feedback on every unit of the FP8 modes (0 = the geometry units' only)
    std::string geofp8_layers; // --geofp8-layers auto | FILE | comma list
    std::string geofp8_rank;   // --geofp8-rank r in [1, 4096] or full (r = d_in: the exact eigendecomposition of A)
    int geofp8_refresh;        // --geofp8-refresh
    int geofp8_top;            // --geofp8-top (0 = largest drop)
    int geofp8_profile_steps;  // --geofp8-profile-steps window of the auto selection
    std::string geofp8_power;  // --geofp8-power p in [0, 2] or auto (whitening T = (A + εI)^(-p/2))
    float geofp8_damping;      // --geofp8-damping δ (ε = δ tr(A) / d_in)
    std::string attention;     // --attention: auto, flash, flash_sm90 or cublas (train_llama's attention kernels)
    float bucket_mb;           // --bucket-mb: gradient buckets of about this many MB of fp32, each sent as the backward finishes it (0: one, after the backward)
    float geofp8_ema;          // --geofp8-ema β: sketch every step, exponential average over the refresh window (0 = off)
    std::string muon;          // --muon moonlight | keller | megatron_core
    std::string optimizer;     // --optimizer muon | adamw
    int muon_shard;            // --muon-shard 1: each rank orthogonalizes its share of the matrices
    int virtual_ranks;         // --virtual-ranks N: N logical ranks in the processes of the job (0: one per process)
    int fidelity_every;        // --fidelity-every (0 = off)
    int fidelity_window;       // --fidelity-window (0 = the refresh interval)
    unsigned long long seed;   // --seed
    std::string tokenizer;     // --tokenizer decode table for samples
    int max_skips;             // --max-skips consecutive non-finite steps before stopping
    float comm_timeout;        // --comm-timeout seconds a collective may wait before the job ends (0 = never)
    int overwrite;             // --overwrite 1 = a fresh run may replace the checkpoints in -o
    int blas_auto;             // --blas-auto 1 = train_llama_cpu picks OpenBLAS's kernels (llmc/blas_select.h)
} TrainConfig;

static inline void train_config_defaults(TrainConfig* c) {
    c->train_data = TRAIN_DEFAULT_TRAIN_DATA;
    c->val_data = TRAIN_DEFAULT_VAL_DATA;
    c->model = "tiny";
    c->vocab_size = 0;
    c->output_dir = "";
    c->B = 4;
    c->T = 0;
    c->total_batch = 0;
    c->steps = -1;
    c->lr = 5e-4f;
    c->final_lr_frac = 0.1f;
    c->warmup = -1;
    c->schedule = "cosine";
    c->weight_decay = 0.1f;
    c->grad_clip = 1.0f;
    c->checkpoint_every = 0;
    c->resume = 0;
    c->keep_checkpoints = 0;
    c->checkpoint_async = 1;
    c->val_every = 50;
    c->val_batches = 8;
    c->sample_every = 0;
    c->gen_tokens = 64;
    c->prompt_tokens = "";
    c->temperature = 1.0f;
    c->top_k = 0;
    c->comm = "fp32";
    c->fp8_reduce = "native";
    c->fp8_format = "e4m3";
    c->fp8_ef = 0;
    c->geofp8_layers = "auto";
    c->geofp8_rank = "32";
    c->geofp8_refresh = 50;
    c->geofp8_top = 0;
    c->geofp8_profile_steps = 100;
    c->geofp8_power = "1";
    c->geofp8_damping = 1e-3f;
    c->geofp8_ema = 0.0f;
    c->attention = "auto";
    c->bucket_mb = 25.0f;
    c->muon = "moonlight";
    c->optimizer = "muon";
    c->muon_shard = 0;
    c->virtual_ranks = 0;
    c->fidelity_every = 0;
    c->fidelity_window = 0;
    c->seed = 1337;
    c->tokenizer = TRAIN_DEFAULT_TOKENIZER;
    c->max_skips = 10;
    c->comm_timeout = 600.0f;
    c->overwrite = 0;
    c->blas_auto = 1;
}

// One row of the flag table: short and long spelling, the field, its kind and range, and whom
// its value must agree with. Every flag must agree between the ranks of a job (a rank with
// another -n, -m or --max-skips would call other collectives); OPT_RUN flags must also agree
// between a checkpoint and the run resuming it, while OPT_RANKS flags (output, cadence, logging)
// may change on resume. train_config_settings() renders both from this table, so a new flag
// cannot be left out of the checks.
typedef enum { OPT_STR, OPT_INT, OPT_LL, OPT_FLOAT, OPT_ULL } TrainOptKind;
typedef enum { OPT_RUN, OPT_RANKS } TrainOptScope;
typedef struct {
    const char* short_name;  // "-b" (or NULL)
    const char* long_name;   // "--batch-size"
    TrainOptKind kind;
    size_t offset;           // offsetof(TrainConfig, field)
    double min, max;         // numeric range (inclusive)
    const char* choices;     // for strings: comma list of allowed values, or NULL
    TrainOptScope scope;
    const char* help;
} TrainOpt;

// offsetof on a struct with std::string members is "conditionally supported"; g++ and nvcc's
// host compiler support it, and the table keeps the flag list in one place.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
#define TOPT(s, l, kind, field, mn, mx, ch, scope, help) {s, l, kind, offsetof(TrainConfig, field), mn, mx, ch, scope, help}
static const TrainOpt TRAIN_OPTS[] = {
    TOPT("-i", "--train-data", OPT_STR, train_data, 0, 0, NULL, OPT_RUN, "glob of train shards"),
    TOPT("-j", "--val-data", OPT_STR, val_data, 0, 0, NULL, OPT_RANKS, "glob of val shards"),
    TOPT("-e", "--model", OPT_STR, model, 0, 0, NULL, OPT_RANKS, "preset (tiny, d12, llama300m, llama600m) or model checkpoint file"),
    TOPT(NULL, "--vocab-size", OPT_INT, vocab_size, 0, 65536, NULL, OPT_RANKS, "vocabulary size V of a preset model, every token < V (0 = GPT-2's 50257; a checkpoint has its own)"),
    TOPT("-o", "--output-dir", OPT_STR, output_dir, 0, 0, NULL, OPT_RANKS, "directory for logs and checkpoints"),
    TOPT("-b", "--batch-size", OPT_INT, B, 1, 1 << 20, NULL, OPT_RUN, "micro-batch size in sequences"),
    TOPT("-t", "--seq-len", OPT_INT, T, 1, 1 << 20, NULL, OPT_RUN, "sequence length (default: the model's T)"),
    TOPT("-d", "--total-batch", OPT_LL, total_batch, 1, 1e15, NULL, OPT_RUN, "tokens per optimizer step, a multiple of B*T*ranks (default: B*T*ranks, no accumulation)"),
    TOPT("-x", "--steps", OPT_INT, steps, -1, INT_MAX, NULL, OPT_RUN, "optimizer steps (-1 = one epoch)"),
    TOPT("-l", "--lr", OPT_FLOAT, lr, 0, 10, NULL, OPT_RUN, "peak learning rate"),
    TOPT("-q", "--final-lr-frac", OPT_FLOAT, final_lr_frac, 0, 1, NULL, OPT_RUN, "final lr as a fraction of the peak"),
    TOPT("-u", "--warmup", OPT_INT, warmup, -1, INT_MAX, NULL, OPT_RUN, "warmup steps (-1 = 1% of steps)"),
    TOPT("-k", "--schedule", OPT_STR, schedule, 0, 0, "cosine,linear,constant", OPT_RUN, "learning-rate schedule"),
    TOPT(NULL, "--wd", OPT_FLOAT, weight_decay, 0, 10, NULL, OPT_RUN, "weight decay (not on norms)"),
    TOPT(NULL, "--clip", OPT_FLOAT, grad_clip, 0, 1e30, NULL, OPT_RUN, "global gradient-norm clip (0 = off)"),
    TOPT("-n", "--checkpoint-every", OPT_INT, checkpoint_every, -1, INT_MAX, NULL, OPT_RANKS, "checkpoint every N steps (0 = only at the end, -1 = never)"),
    TOPT("-y", "--resume", OPT_INT, resume, 0, 1, NULL, OPT_RANKS, "1 = resume from the newest complete checkpoint in -o"),
    TOPT(NULL, "--checkpoint-async", OPT_INT, checkpoint_async, 0, 1, NULL, OPT_RANKS, "1 = each checkpoint's files are written on a thread while training goes on (DONE follows once every rank's are in place); 0 = training waits for them"),
    TOPT("-nk", "--keep-checkpoints", OPT_INT, keep_checkpoints, 0, INT_MAX, NULL, OPT_RANKS, "keep the newest K checkpoints (0 = all)"),
    TOPT("-v", "--val-every", OPT_INT, val_every, 0, INT_MAX, NULL, OPT_RANKS, "val loss every N steps (0 = off)"),
    TOPT("-m", "--val-batches", OPT_INT, val_batches, 1, INT_MAX, NULL, OPT_RANKS, "val batches per evaluation on each rank (the val loss averages ranks x this many batches)"),
    TOPT("-s", "--sample-every", OPT_INT, sample_every, 0, INT_MAX, NULL, OPT_RANKS, "sample text every N steps (0 = off)"),
    TOPT("-g", "--gen-tokens", OPT_INT, gen_tokens, 1, 1 << 20, NULL, OPT_RANKS, "tokens to generate per sample"),
    TOPT(NULL, "--prompt-tokens", OPT_STR, prompt_tokens, 0, 0, NULL, OPT_RANKS, "the samples' first tokens, comma-separated ids (scripts/sample.py encodes text; none = <|endoftext|>)"),
    TOPT(NULL, "--temperature", OPT_FLOAT, temperature, 0, 100, NULL, OPT_RANKS, "sampling temperature (0 = greedy: the most likely token)"),
    TOPT(NULL, "--top-k", OPT_INT, top_k, 0, 1 << 20, NULL, OPT_RANKS, "sample among the k most likely tokens (0 = all)"),
    TOPT("-c", "--comm", OPT_STR, comm, 0, 0, "fp32,bf16,fp8,fp8block,geofp8,kfac", OPT_RUN, "gradient communication mode"),
    TOPT(NULL, "--attention", OPT_STR, attention, 0, 0, "auto,flash,flash_sm90,cublas", OPT_RANKS, "train_llama's attention: flash (fused; head sizes 16, 32, 64, 128), flash_sm90 (fused on Hopper's wgmma; head sizes 64, 128), cublas (unfused reference), auto = flash where supported"),
    TOPT(NULL, "--bucket-mb", OPT_FLOAT, bucket_mb, 0, 4096, NULL, OPT_RANKS, "gradient buckets of about this many MB of fp32, each communicated as the backward finishes it (0 = one, after the backward)"),
    TOPT(NULL, "--fp8-reduce", OPT_STR, fp8_reduce, 0, 0, "native,twophase", OPT_RUN, "FP8 reduction"),
    TOPT(NULL, "--fp8-format", OPT_STR, fp8_format, 0, 0, "e4m3,e5m2", OPT_RUN, "FP8 code format of the fp8 modes"),
    TOPT(NULL, "--fp8-ef", OPT_INT, fp8_ef, 0, 1, NULL, OPT_RUN, "1: error feedback on every unit the FP8 modes send in Euclidean coordinates (each rank adds its last rounding error x - decode(q)/s to the next step's gradient; 0 = the geometry units' only)"),
    TOPT(NULL, "--geofp8-layers", OPT_STR, geofp8_layers, 0, 0, NULL, OPT_RUN, "auto, a file, or a comma list of layer names"),
    TOPT(NULL, "--geofp8-rank", OPT_STR, geofp8_rank, 0, 0, NULL, OPT_RUN, "rank r in [1, 4096] of the input-side factor, or full (r = d_in, d_in <= 4096)"),
    TOPT(NULL, "--geofp8-refresh", OPT_INT, geofp8_refresh, 1, INT_MAX, NULL, OPT_RUN, "refresh the factor every K steps"),
    TOPT(NULL, "--geofp8-top", OPT_INT, geofp8_top, 0, 100000, NULL, OPT_RUN, "select the top k layers (0 = at the largest score drop)"),
    TOPT(NULL, "--geofp8-profile-steps", OPT_INT, geofp8_profile_steps, 1, INT_MAX, NULL, OPT_RUN, "steps of fp8 profiling before auto selection"),
    TOPT(NULL, "--geofp8-power", OPT_STR, geofp8_power, 0, 0, NULL, OPT_RUN, "whitening power p in [0, 2] (1 = full, 0 = none) or auto (q/2 per unit)"),
    TOPT(NULL, "--geofp8-damping", OPT_FLOAT, geofp8_damping, 1e-9, 1e3, NULL, OPT_RUN, "damping: eps = damping * tr(A) / d_in"),
    TOPT(NULL, "--geofp8-ema", OPT_FLOAT, geofp8_ema, 0, 0.999, NULL, OPT_RUN, "sketch every step, average with weight beta over the refresh window (0 = the refresh step's own)"),
    TOPT(NULL, "--muon", OPT_STR, muon, 0, 0, "moonlight,keller,megatron_core", OPT_RUN, "Muon preset"),
    TOPT(NULL, "--optimizer", OPT_STR, optimizer, 0, 0, "muon,adamw", OPT_RUN, "muon (hidden matrices) + AdamW, or AdamW everywhere"),
    TOPT(NULL, "--muon-shard", OPT_INT, muon_shard, 0, 1, NULL, OPT_RANKS, "1: each rank orthogonalizes its share of the Muon matrices, then all receive them"),
    TOPT(NULL, "--virtual-ranks", OPT_INT, virtual_ranks, 0, 4096, NULL, OPT_RUN, "N logical ranks communicated as N ranks would be: N / P in each of the P processes (train_llama_cpu), all N in one process on one GPU (train_llama); 0 = one per process"),
    TOPT(NULL, "--fidelity-every", OPT_INT, fidelity_every, 0, INT_MAX, NULL, OPT_RANKS, "also all-reduce in fp32 every N steps and log the error (geofp8, kfac: N raised to be coprime with --geofp8-refresh)"),
    TOPT(NULL, "--fidelity-window", OPT_INT, fidelity_window, 0, INT_MAX, NULL, OPT_RANKS, "with --fidelity-every: RelL2 of sums over windows of W steps on the geometry units (0 = the refresh interval)"),
    TOPT(NULL, "--seed", OPT_ULL, seed, 0, 0, NULL, OPT_RUN, "random seed"),
    TOPT(NULL, "--tokenizer", OPT_STR, tokenizer, 0, 0, NULL, OPT_RANKS, "GPT-2 decode table for samples (none: samples print token ids)"),
    TOPT(NULL, "--max-skips", OPT_INT, max_skips, 0, INT_MAX, NULL, OPT_RANKS, "stop after this many consecutive non-finite steps"),
    TOPT(NULL, "--comm-timeout", OPT_FLOAT, comm_timeout, 0, 86400, NULL, OPT_RANKS, "seconds a collective (GPU engine: a step, validation or checkpoint) may wait before the job ends with one line (0 = never, else at least 1)"),
    TOPT(NULL, "--overwrite", OPT_INT, overwrite, 0, 1, NULL, OPT_RANKS, "1 = a fresh run may delete the checkpoints and replace the logs an earlier run left in -o"),
    TOPT(NULL, "--blas-auto", OPT_INT, blas_auto, 0, 1, NULL, OPT_RANKS, "train_llama_cpu: 1 = where OpenBLAS names a generic core, run its SkylakeX (AVX-512) or Haswell (AVX2) kernels, checked at start-up; 0 = OpenBLAS's own choice (also TRAIN_LLAMA_BLAS_AUTO=0; a set OPENBLAS_CORETYPE always wins)"),
};
#undef TOPT
#pragma GCC diagnostic pop
#define TRAIN_NUM_OPTS (sizeof(TRAIN_OPTS) / sizeof(TRAIN_OPTS[0]))

static inline void train_config_defaults(TrainConfig* cfg);
static inline std::string train_config_value(const TrainConfig* cfg, const TrainOpt* o, bool shortest = false);

// --help: every flag with its default, then the flags a resumed run may change (OPT_RANKS;
// docs/running.md lists the same, which test_cli checks).
static inline void train_config_usage(const char* prog) {
    TrainConfig d;
    train_config_defaults(&d);
    printf("usage: %s [flags]   (--help: this list; --version: the commit and compile line)\n", prog);
    std::string resumable;
    for (size_t i = 0; i < TRAIN_NUM_OPTS; i++) {
        const TrainOpt* o = &TRAIN_OPTS[i];
        char names[64];
        snprintf(names, sizeof(names), "%s%s%s", o->short_name ? o->short_name : "", o->short_name ? ", " : "", o->long_name);
        std::string v = train_config_value(&d, o, true);
        std::string dflt = strstr(o->help, "(default") ? std::string() : " (default: " + (v.empty() ? std::string("none") : v) + ")";
        printf("  %-28s %s%s%s%s%s\n", names, o->help, o->choices ? " {" : "", o->choices ? o->choices : "", o->choices ? "}" : "", dflt.c_str());
        if (o->scope == OPT_RANKS) resumable += std::string(resumable.empty() ? "" : " ") + (o->short_name ? o->short_name : o->long_name);
    }
    printf("may change when a run resumes (-y 1): %s\n", resumable.c_str());
    printf("(-e and --vocab-size only to the checkpoint's model); every other flag must match the checkpoint\n");
}

static inline bool train_config_choice_ok(const char* choices, const char* v) {
    std::string list = choices;
    size_t start = 0;
    while (start <= list.size()) {
        size_t end = list.find(',', start);
        if (end == std::string::npos) end = list.size();
        if (list.compare(start, end - start, v) == 0 && strlen(v) == end - start) return true;
        start = end + 1;
    }
    return false;
}

// An integer flag's value, written plainly (digits and an optional '-': not 1e9, 4x, ' 5' or +5),
// in [min, max]; else one error line naming the flag. Also for the tools' own flags (dev/).
static inline long long train_config_parse_int(const char* flag, const char* v, double min, double max) {
    // strtoll would skip leading blanks and take a '+': the value must be written plainly
    if (!(isdigit((unsigned char)v[0]) || (v[0] == '-' && isdigit((unsigned char)v[1]))))
        user_error("%s: expected an integer, found '%s'", flag, v);
    char* end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end != '\0' || errno == ERANGE)
        user_error("%s: expected an integer, found '%s'", flag, v);
    if (x < min || x > max)
        user_error("%s: expected an integer in [%.0f, %.0f], found %lld", flag, min, max, x);
    return x;
}

// The row of a flag by either spelling ("-b" or "--batch-size"), or NULL.
static inline const TrainOpt* train_config_find(const std::string& name) {
    for (size_t k = 0; k < TRAIN_NUM_OPTS; k++)
        if ((TRAIN_OPTS[k].short_name && name == TRAIN_OPTS[k].short_name) || name == TRAIN_OPTS[k].long_name) return &TRAIN_OPTS[k];
    return NULL;
}

static inline void train_config_set(TrainConfig* cfg, const TrainOpt* o, const char* flag, const char* v) {
    char* base = (char*)cfg + o->offset;
    char* end = NULL;
    errno = 0;
    switch (o->kind) {
    case OPT_STR:
        if (o->choices && !train_config_choice_ok(o->choices, v))
            user_error("%s: expected one of {%s}, found '%s'", flag, o->choices, v);
        if (v[0] == '\0') user_error("%s: expected a non-empty value", flag);
        *(std::string*)base = v;
        return;
    case OPT_INT: case OPT_LL: {
        long long x = train_config_parse_int(flag, v, o->min, o->max);
        if (o->kind == OPT_INT) *(int*)base = (int)x; else *(long long*)base = x;
        return;
    }
    case OPT_ULL: {
        // strtoull would skip leading blanks and wrap ' -1' to 2^64 - 1: digits only
        if (!isdigit((unsigned char)v[0])) user_error("%s: expected a non-negative integer, found '%s'", flag, v);
        unsigned long long x = strtoull(v, &end, 10);
        if (end == v || *end != '\0' || errno == ERANGE)
            user_error("%s: expected a non-negative integer, found '%s'", flag, v);
        *(unsigned long long*)base = x;
        return;
    }
    case OPT_FLOAT: {
        if (!(isdigit((unsigned char)v[0]) || v[0] == '-' || v[0] == '.'))
            user_error("%s: expected a number, found '%s'", flag, v);
        double x = strtod(v, &end);
        if (end == v || *end != '\0' || errno == ERANGE || !std::isfinite(x))
            user_error("%s: expected a number, found '%s'", flag, v);
        if (x < o->min || x > o->max)
            user_error("%s: expected a number in [%g, %g], found %g", flag, o->min, o->max, x);
        *(float*)base = (float)x;
        return;
    }
    }
}

// argv[i] as a flag name and, in the "--flag=value" form, its value (returns true then).
static inline bool train_config_split_flag(const char* arg, std::string* name, std::string* value) {
    *name = arg;
    size_t eq = name->find('=');
    if (name->rfind("--", 0) != 0 || eq == std::string::npos) return false;
    *value = name->substr(eq + 1);
    name->resize(eq);
    return true;
}

// The value after flag `name` at argv[*i] (the "--flag value" form); *i moves onto it.
static inline std::string train_config_flag_value(int argc, char** argv, int* i, const std::string& name) {
    if (*i + 1 >= argc) user_error("%s: expected a value after the flag, found the end of the command line", name.c_str());
    return argv[++*i];
}

// --version: the commit and compile line the Makefile passes in ("unknown" when built otherwise).
#ifndef TRAIN_LLAMA_COMMIT
#define TRAIN_LLAMA_COMMIT "unknown"
#endif
#ifndef TRAIN_LLAMA_BUILD
#define TRAIN_LLAMA_BUILD "unknown"
#endif

// Parses argv into cfg (defaults first). Exits 0 after printing usage for -h/--help, or the
// version for --version.
static inline void train_config_parse(TrainConfig* cfg, int argc, char** argv) {
    train_config_defaults(cfg);
    for (int i = 1; i < argc; i++) {
        const char* arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) { train_config_usage(argv[0]); exit(0); }
        if (strcmp(arg, "--version") == 0) { printf("%s: commit %s, built with %s\n", argv[0], TRAIN_LLAMA_COMMIT, TRAIN_LLAMA_BUILD); exit(0); }
        std::string name, value;
        bool inline_value = train_config_split_flag(arg, &name, &value);
        const TrainOpt* o = train_config_find(name);
        if (o == NULL) user_error("unknown flag '%s' (hint: --help lists every flag)", arg);
        if (!inline_value) value = train_config_flag_value(argc, argv, &i, name);
        train_config_set(cfg, o, name.c_str(), value.c_str());
    }
    if (cfg->comm_timeout > 0.0f && cfg->comm_timeout < 1.0f)
        user_error("--comm-timeout: expected 0 (never) or at least 1 second, found %g (a shorter limit fires inside an ordinary step, "
                   "whose collectives wait for the slowest rank)", cfg->comm_timeout);
    if (cfg->resume && cfg->output_dir.empty())
        user_error("-y 1: resuming needs the checkpoint directory, but -o is not set (hint: add -o DIR)");
    if (cfg->fp8_format != "e4m3" && (cfg->comm == "fp32" || cfg->comm == "bf16"))
        user_error("--fp8-format %s: sets the codes of the FP8 modes (fp8, fp8block, geofp8, kfac), found -c %s",
                   cfg->fp8_format.c_str(), cfg->comm.c_str());
    if (cfg->fp8_ef && (cfg->comm == "fp32" || cfg->comm == "bf16"))
        user_error("--fp8-ef 1: error feedback of the FP8 modes (fp8, fp8block, geofp8, kfac), found -c %s, which rounds nothing to FP8 (use --fp8-ef 0)",
                   cfg->comm.c_str());
    if (cfg->geofp8_ema > 0.0f && cfg->comm == "kfac")
        user_error("--geofp8-ema: averages the sketch of -c geofp8; -c kfac accumulates explicit statistics (use --geofp8-ema 0)");
    if (!cfg->prompt_tokens.empty()) {  // ids, checked against the vocabulary once the model is known
        const char* v = cfg->prompt_tokens.c_str();
        for (const char* at = v;;) {
            char* end = NULL;
            errno = 0;
            long id = isdigit((unsigned char)at[0]) ? strtol(at, &end, 10) : -1;
            if (id < 0 || errno == ERANGE || id > INT_MAX || (*end != ',' && *end != '\0'))
                user_error("--prompt-tokens: expected comma-separated token ids (like 464,2068), found '%s'", v);
            if (*end == '\0') break;
            at = end + 1;
        }
    }
    if (cfg->geofp8_rank != "full") {  // an integer, written back in one spelling (032 and 32 are one setting)
        const char* v = cfg->geofp8_rank.c_str();
        char* end = NULL;
        errno = 0;
        long r = strtol(v, &end, 10);
        if (!isdigit((unsigned char)v[0]) || *end != '\0' || errno == ERANGE || r < 1 || r > GEOFP8_RANK_MAX)
            user_error("--geofp8-rank: expected full or an integer in [1, %d], found '%s'", GEOFP8_RANK_MAX, v);
        cfg->geofp8_rank = std::to_string(r);
    }
    if (cfg->geofp8_power != "auto") {  // a number, written back in one spelling (1.0 and 1 are one setting)
        const char* v = cfg->geofp8_power.c_str();
        char* end = NULL;
        errno = 0;
        double p = strtod(v, &end);
        if (!(isdigit((unsigned char)v[0]) || v[0] == '.') || end == v || *end != '\0' || errno == ERANGE || !(p >= 0.0 && p <= 2.0))
            user_error("--geofp8-power: expected auto or a number in [0, 2], found '%s'", v);
        char b[32];
        snprintf(b, sizeof(b), "%.9g", (double)(float)p);
        cfg->geofp8_power = b;
    }
}

// --fp8-format as the codec's enum.
static inline Fp8Format train_config_fp8_format(const TrainConfig* cfg) { return cfg->fp8_format == "e5m2" ? FP8_E5M2 : FP8_E4M3; }

// --geofp8-rank as the rank of each unit's factor: full is GEOFP8_RANK_MAX, which each unit
// clamps to its d_in (the engines refuse full for a model with a linear unit wider than that).
static inline int train_config_geofp8_rank(const TrainConfig* cfg) {
    return cfg->geofp8_rank == "full" ? GEOFP8_RANK_MAX : atoi(cfg->geofp8_rank.c_str());
}

// --geofp8-power as a number; -1 for auto.
static inline double train_config_geofp8_power(const TrainConfig* cfg) {
    return cfg->geofp8_power == "auto" ? -1.0 : (double)(float)atof(cfg->geofp8_power.c_str());
}

// One flag's value as the settings text writes it (floats with 9 significant digits: exact);
// shortest: as --help shows it, floats in the fewest digits that read back as the same float
// (0.0005, not 0.000500000024).
static inline std::string train_config_value(const TrainConfig* cfg, const TrainOpt* o, bool shortest) {
    const char* base = (const char*)cfg + o->offset;
    char b[64];
    switch (o->kind) {
    case OPT_STR: return *(const std::string*)base;
    case OPT_INT: snprintf(b, sizeof(b), "%d", *(const int*)base); break;
    case OPT_LL: snprintf(b, sizeof(b), "%lld", *(const long long*)base); break;
    case OPT_FLOAT: {
        float f = *(const float*)base;
        for (int digits = shortest ? 1 : 9; digits <= 9; digits++) {
            snprintf(b, sizeof(b), "%.*g", digits, f);
            if (strtof(b, NULL) == f) break;
        }
        break;
    }
    case OPT_ULL: snprintf(b, sizeof(b), "%llu", *(const unsigned long long*)base); break;
    }
    return b;
}

// The settings as "key=value" lines (key: the long flag without "--"), from the flag table:
// with ranks = false the OPT_RUN flags a resumed run must share with its checkpoint, with
// ranks = true every flag, which the ranks of one job must share. model_desc (the resolved
// model) and world_size are part of both.
static inline std::string train_config_settings(const TrainConfig* c, const std::string& model_desc, int world_size, bool ranks) {
    std::string out = "model_config=" + model_desc + "\n";
    for (size_t i = 0; i < TRAIN_NUM_OPTS; i++) {
        const TrainOpt* o = &TRAIN_OPTS[i];
        if (o->scope == OPT_RANKS && !ranks) continue;
        out += std::string(o->long_name + 2) + "=" + train_config_value(c, o) + "\n";
    }
    return out + "world_size=" + std::to_string(world_size) + "\n";
}

// The value of "key=value" in a settings text (train_config_settings); "" when absent (an older
// checkpoint's text without that flag).
static inline std::string train_config_setting(const std::string& text, const std::string& key) {
    const std::string at = key + "=";
    size_t pos = 0;
    if (text.compare(0, at.size(), at) != 0) {
        pos = text.find("\n" + at);
        if (pos == std::string::npos) return "";
        pos++;
    }
    size_t end = text.find('\n', pos);
    return text.substr(pos + at.size(), (end == std::string::npos ? text.size() : end) - pos - at.size());
}

// First differing "key=value" line between two settings texts, as "key: A vs B"; "" if equal.
static inline std::string train_config_first_difference(const std::string& a, const std::string& b) {
    size_t pa = 0, pb = 0;
    while (pa < a.size() || pb < b.size()) {
        size_t ea = a.find('\n', pa), eb = b.find('\n', pb);
        if (ea == std::string::npos) ea = a.size();
        if (eb == std::string::npos) eb = b.size();
        std::string la = a.substr(pa, ea - pa), lb = b.substr(pb, eb - pb);
        if (la != lb) {
            size_t ka = la.find('='), kb = lb.find('=');
            std::string key = la.substr(0, ka == std::string::npos ? la.size() : ka);
            if (key.empty()) key = lb.substr(0, kb == std::string::npos ? lb.size() : kb);
            std::string va = ka == std::string::npos ? "(missing)" : la.substr(ka + 1);
            std::string vb = kb == std::string::npos ? "(missing)" : lb.substr(kb + 1);
            return key + ": " + va + " vs " + vb;
        }
        pa = ea + 1;
        pb = eb + 1;
    }
    return "";
}
