// checkpoint.h — model and training-state files (DESIGN §8), host only, shared by both engines.
//
//   DIR/model_%08d.bin        256 int32 header + fp32 weights in the flat layout (llama.h)
//   DIR/state_%08d_%05d.bin   one per rank: step, data position, settings text, optimizer
//                             moments, and named extra arrays (GeoFP8 factors and residuals)
//   DIR/DONE_%08d             empty; written last, so its presence means the checkpoint is whole
//
// Every file is written to "<name>.tmp" and renamed into place, so a crash mid-write never
// damages an earlier checkpoint. Each file carries a CRC-32 of its payload. Readers validate
// everything a user could hand them and fail with one line naming the file (user_error).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>
#include "llama.h"
#include "utils.h"

#define CHECKPOINT_MODEL_MAGIC 20250301
#define CHECKPOINT_STATE_MAGIC 20250302
#define CHECKPOINT_VERSION 1
#define CHECKPOINT_HEADER_INTS 256
#define CHECKPOINT_STATE_HEADER_INTS 64

static inline std::string checkpoint_model_path(const std::string& dir, int step) {
    char b[64]; snprintf(b, sizeof(b), "/model_%08d.bin", step); return dir + b;
}
static inline std::string checkpoint_state_path(const std::string& dir, int step, int rank) {
    char b[64]; snprintf(b, sizeof(b), "/state_%08d_%05d.bin", step, rank); return dir + b;
}
static inline std::string checkpoint_done_path(const std::string& dir, int step) {
    char b[64]; snprintf(b, sizeof(b), "/DONE_%08d", step); return dir + b;
}

// Writes via a temporary file and an atomic rename.
static inline void checkpoint_commit(const std::string& tmp, const std::string& final_path) {
    if (rename(tmp.c_str(), final_path.c_str()) != 0) {
        fprintf(stderr, "error: cannot rename %s to %s\n", tmp.c_str(), final_path.c_str());
        exit(1);
    }
}

// Test hook: TRAIN_LLAMA_TEST_CRASH="WHAT:STEP" kills this process with SIGKILL at that point
// of writing the checkpoint of STEP (WHAT = model: before the model file is renamed into place;
// done: after every file is written, before the DONE marker), to test that an interrupted
// checkpoint never damages the previous one.
static inline void checkpoint_test_crash(const char* what, int step) {
    const char* env = getenv("TRAIN_LLAMA_TEST_CRASH");
    char w[16];
    int s = -1;
    if (env && sscanf(env, "%15[^:]:%d", w, &s) == 2 && s == step && strcmp(w, what) == 0) {
        fflush(stdout);
        raise(SIGKILL);
    }
}

// ----------------------------------------------------------------------------
// model file

static inline void checkpoint_write_model(const std::string& path, const LlamaConfig* c, const float* params, int step) {
    size_t n = llama_num_params(c);
    int32_t h[CHECKPOINT_HEADER_INTS] = {0};
    h[0] = CHECKPOINT_MODEL_MAGIC; h[1] = CHECKPOINT_VERSION;
    h[2] = c->V; h[3] = c->Vp; h[4] = c->C; h[5] = c->L; h[6] = c->NH; h[7] = c->NKV; h[8] = c->FF; h[9] = c->T;
    h[10] = step;
    uint32_t crc = crc32_update(0, params, n * sizeof(float));
    memcpy(&h[11], &crc, 4);
    h[12] = 0;  // payload dtype: fp32
    std::string tmp = path + ".tmp";
    FILE* f = fopen_check(tmp.c_str(), "wb");
    fwrite_check(h, sizeof(int32_t), CHECKPOINT_HEADER_INTS, f);
    fwrite_check(params, sizeof(float), n, f);
    fclose_check(f);
    checkpoint_test_crash("model", step);
    checkpoint_commit(tmp, path);
}

// Validates a model header against the file size without exiting (also the fuzzing entry
// point); fills the config. On failure *why completes "model checkpoint 'X' ...".
static inline bool checkpoint_check_model_header(const int32_t h[CHECKPOINT_HEADER_INTS], long long size, LlamaConfig* c, std::string* why) {
    char b[512];
    *c = LlamaConfig{h[2], h[3], h[4], h[5], h[6], h[7], h[8], h[9]};
    const char* problem = NULL;
    if (h[0] != CHECKPOINT_MODEL_MAGIC) {
        snprintf(b, sizeof(b), "is not a model checkpoint: expected magic %d, found %d", CHECKPOINT_MODEL_MAGIC, h[0]);
    } else if (h[1] != CHECKPOINT_VERSION) {
        snprintf(b, sizeof(b), "has version %d, expected %d", h[1], CHECKPOINT_VERSION);
    } else if ((problem = llama_config_problem(c)) != NULL) {
        snprintf(b, sizeof(b), "has an invalid config (%s): %s", llama_config_string(c).c_str(), problem);
    } else if (h[12] != 0) {
        snprintf(b, sizeof(b), "has payload dtype %d, expected 0 (fp32)", h[12]);
    } else if ((double)llama_num_params(c) * 4.0 + CHECKPOINT_HEADER_INTS * 4 != (double)size) {
        snprintf(b, sizeof(b), "has %lld bytes, expected %.0f for %s (truncated or corrupted)", size,
                 (double)llama_num_params(c) * 4.0 + CHECKPOINT_HEADER_INTS * 4, llama_config_string(c).c_str());
    } else {
        return true;
    }
    *why = b;
    return false;
}

// Reads and validates the header; fills the config and step. Exits (user_error) on anything wrong.
static inline void checkpoint_read_model_header(const char* path, const char* flag, LlamaConfig* c, int* step) {
    struct stat st;  // a directory opens for reading on Linux and reports a nonsense size
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        user_error("%s: '%s' is not a regular file (expected a preset name (" LLAMA_PRESET_LIST ") or a model_*.bin file)", flag, path);
    FILE* f = fopen(path, "rb");
    if (!f) user_error("%s: cannot open model checkpoint '%s' (expected a preset name (" LLAMA_PRESET_LIST ") or a model_*.bin file)", flag, path);
    long long size = file_size_bytes(f);
    int32_t h[CHECKPOINT_HEADER_INTS];
    size_t got = fread(h, sizeof(int32_t), CHECKPOINT_HEADER_INTS, f);
    fclose(f);
    if (got != CHECKPOINT_HEADER_INTS)
        user_error("%s: model checkpoint '%s' is truncated: expected a %d-byte header, found a %lld-byte file", flag, path, CHECKPOINT_HEADER_INTS * 4, size);
    std::string why;
    if (!checkpoint_check_model_header(h, size, c, &why)) user_error("%s: model checkpoint '%s' %s", flag, path, why.c_str());
    if (step) *step = h[10];
}

// Loads the weights (params must hold llama_num_params(c) floats) and checks the CRC.
static inline void checkpoint_read_model(const char* path, const char* flag, const LlamaConfig* c, float* params) {
    size_t n = llama_num_params(c);
    FILE* f = fopen_check(path, "rb");
    int32_t h[CHECKPOINT_HEADER_INTS];
    fread_check(h, sizeof(int32_t), CHECKPOINT_HEADER_INTS, f);
    fread_check(params, sizeof(float), n, f);
    fclose(f);
    uint32_t want;
    memcpy(&want, &h[11], 4);
    uint32_t got = crc32_update(0, params, n * sizeof(float));
    if (got != want)
        user_error("%s: model checkpoint '%s' is corrupted: payload CRC-32 is %08x, the header says %08x", flag, path, got, want);
}

// ----------------------------------------------------------------------------
// state file

typedef struct {
    std::string name;
    std::vector<float> data;
} CheckpointArray;

typedef struct {
    int64_t step;             // optimizer steps completed
    int64_t rank, world_size;
    int64_t data_state[3];    // dataloader: shard, position, epoch
    int64_t skipped_steps;    // consecutive non-finite steps at the time of the checkpoint
    std::string settings;     // train_config_settings() of the run that wrote it
    std::vector<float> m;     // (num_params) first moments (AdamW) / momentum (Muon)
    std::vector<float> v;     // (num_params) second moments (AdamW)
    std::vector<CheckpointArray> extras;  // GeoFP8 factors, residuals, ...
} CheckpointState;

static inline void checkpoint_crc_i64(uint32_t* crc, int64_t x) { *crc = crc32_update(*crc, &x, 8); }

static inline uint32_t checkpoint_state_crc(const CheckpointState* s) {
    uint32_t crc = crc32_update(0, s->settings.data(), s->settings.size());
    crc = crc32_update(crc, s->m.data(), s->m.size() * 4);
    crc = crc32_update(crc, s->v.data(), s->v.size() * 4);
    for (const CheckpointArray& a : s->extras) {
        checkpoint_crc_i64(&crc, (int64_t)a.name.size());
        crc = crc32_update(crc, a.name.data(), a.name.size());
        checkpoint_crc_i64(&crc, (int64_t)a.data.size());
        crc = crc32_update(crc, a.data.data(), a.data.size() * 4);
    }
    return crc;
}

static inline void checkpoint_write_state(const std::string& path, const CheckpointState* s) {
    int64_t h[CHECKPOINT_STATE_HEADER_INTS] = {0};
    h[0] = CHECKPOINT_STATE_MAGIC; h[1] = CHECKPOINT_VERSION; h[2] = s->step; h[3] = s->rank; h[4] = s->world_size;
    h[5] = s->data_state[0]; h[6] = s->data_state[1]; h[7] = s->data_state[2]; h[8] = s->skipped_steps;
    h[9] = (int64_t)s->settings.size(); h[10] = (int64_t)s->m.size(); h[11] = (int64_t)s->v.size();
    h[12] = (int64_t)s->extras.size();
    uint32_t crc = checkpoint_state_crc(s);  // over everything after the header, in write order
    h[13] = crc;
    std::string tmp = path + ".tmp";
    FILE* f = fopen_check(tmp.c_str(), "wb");
    fwrite_check(h, sizeof(int64_t), CHECKPOINT_STATE_HEADER_INTS, f);
    fwrite_check(s->settings.data(), 1, s->settings.size(), f);
    fwrite_check(s->m.data(), 4, s->m.size(), f);
    fwrite_check(s->v.data(), 4, s->v.size(), f);
    for (const CheckpointArray& a : s->extras) {
        int64_t nl = (int64_t)a.name.size(), nd = (int64_t)a.data.size();
        fwrite_check(&nl, 8, 1, f);
        fwrite_check(a.name.data(), 1, a.name.size(), f);
        fwrite_check(&nd, 8, 1, f);
        fwrite_check(a.data.data(), 4, a.data.size(), f);
    }
    fclose_check(f);
    checkpoint_commit(tmp, path);
}

// Parses a state file of `size` bytes from f without exiting (also the fuzzing entry point).
// On failure *why completes "state file 'X' ...".
static inline bool checkpoint_parse_state(FILE* f, long long size, CheckpointState* s, std::string* why) {
    char b[256];
    int64_t h[CHECKPOINT_STATE_HEADER_INTS];
    if (fread(h, 8, CHECKPOINT_STATE_HEADER_INTS, f) != CHECKPOINT_STATE_HEADER_INTS) {
        snprintf(b, sizeof(b), "is truncated: %lld bytes, shorter than its %d-byte header", size, CHECKPOINT_STATE_HEADER_INTS * 8);
        *why = b; return false;
    }
    if (h[0] != CHECKPOINT_STATE_MAGIC) { snprintf(b, sizeof(b), "is not a state file: expected magic %d, found %lld", CHECKPOINT_STATE_MAGIC, (long long)h[0]); *why = b; return false; }
    if (h[1] != CHECKPOINT_VERSION) { snprintf(b, sizeof(b), "has version %lld, expected %d", (long long)h[1], CHECKPOINT_VERSION); *why = b; return false; }
    for (int k = 9; k <= 12; k++) {
        if (h[k] < 0 || h[k] > size) { snprintf(b, sizeof(b), "is corrupted (section size %lld in a %lld-byte file)", (long long)h[k], size); *why = b; return false; }
    }
    s->step = h[2]; s->rank = h[3]; s->world_size = h[4];
    s->data_state[0] = h[5]; s->data_state[1] = h[6]; s->data_state[2] = h[7]; s->skipped_steps = h[8];
    long long fixed = CHECKPOINT_STATE_HEADER_INTS * 8LL + h[9] + 4LL * (h[10] + h[11]);
    if (size < fixed) { snprintf(b, sizeof(b), "is truncated: %lld bytes, expected at least %lld", size, fixed); *why = b; return false; }
    s->settings.assign((size_t)h[9], '\0');
    s->m.resize((size_t)h[10]);
    s->v.resize((size_t)h[11]);
    bool ok = fread(&s->settings[0], 1, (size_t)h[9], f) == (size_t)h[9] &&
              fread(s->m.data(), 4, s->m.size(), f) == s->m.size() &&
              fread(s->v.data(), 4, s->v.size(), f) == s->v.size();
    s->extras.clear();
    for (int64_t e = 0; ok && e < h[12]; e++) {
        int64_t nl = 0, nd = 0;
        CheckpointArray a;
        ok = fread(&nl, 8, 1, f) == 1 && nl >= 0 && nl < 4096;
        if (ok) { a.name.assign((size_t)nl, '\0'); ok = fread(&a.name[0], 1, (size_t)nl, f) == (size_t)nl; }
        ok = ok && fread(&nd, 8, 1, f) == 1 && nd >= 0 && nd <= (size - ftell(f)) / 4;
        if (ok) { a.data.resize((size_t)nd); ok = fread(a.data.data(), 4, (size_t)nd, f) == (size_t)nd; }
        if (ok) s->extras.push_back(std::move(a));
    }
    if (!ok) { snprintf(b, sizeof(b), "is truncated or corrupted (%lld bytes)", size); *why = b; return false; }
    if (ftell(f) != size) { snprintf(b, sizeof(b), "has trailing bytes (%lld bytes in all); corrupted?", size); *why = b; return false; }
    uint32_t crc = checkpoint_state_crc(s);
    if ((int64_t)crc != h[13]) { snprintf(b, sizeof(b), "is corrupted: CRC-32 %08x, the header says %08llx", crc, (unsigned long long)h[13]); *why = b; return false; }
    return true;
}

// Reads and validates a state file; every problem is a user_error naming the file.
static inline void checkpoint_read_state(const std::string& path, CheckpointState* s) {
    const char* p = path.c_str();
    FILE* f = fopen(p, "rb");
    if (!f) user_error("-y: missing state file '%s' (the checkpoint is incomplete or was written by another number of ranks)", p);
    long long size = file_size_bytes(f);
    std::string why;
    bool ok = checkpoint_parse_state(f, size, s, &why);
    fclose(f);
    if (!ok) user_error("-y: state file '%s' %s", p, why.c_str());
}

static inline const CheckpointArray* checkpoint_find_extra(const CheckpointState* s, const std::string& name) {
    for (const CheckpointArray& a : s->extras) if (a.name == name) return &a;
    return NULL;
}

// ----------------------------------------------------------------------------
// directory helpers

static inline void checkpoint_write_done(const std::string& dir, int step) {
    std::string path = checkpoint_done_path(dir, step), tmp = path + ".tmp";
    FILE* f = fopen_check(tmp.c_str(), "wb");
    fclose_check(f);
    checkpoint_commit(tmp, path);
}

// Steps that have a DONE marker, ascending.
static inline std::vector<int> checkpoint_complete_steps(const std::string& dir) {
    std::vector<int> steps;
    DIR* d = opendir(dir.c_str());
    if (!d) return steps;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        int step; char tail;
        if (sscanf(e->d_name, "DONE_%d%c", &step, &tail) == 1 && strlen(e->d_name) == 13) steps.push_back(step);
    }
    closedir(d);
    std::sort(steps.begin(), steps.end());
    return steps;
}

// True if dir holds any model or state file (complete or not).
static inline bool checkpoint_any_files(const std::string& dir) {
    DIR* d = opendir(dir.c_str());
    if (!d) return false;
    struct dirent* e;
    bool any = false;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "model_", 6) == 0 || strncmp(e->d_name, "state_", 6) == 0) { any = true; break; }
    }
    closedir(d);
    return any;
}

// Deletes the files of step (DONE first, so a half-deleted checkpoint never looks complete).
static inline void checkpoint_delete(const std::string& dir, int step, int world_size) {
    remove(checkpoint_done_path(dir, step).c_str());
    remove(checkpoint_model_path(dir, step).c_str());
    for (int r = 0; r < world_size; r++) remove(checkpoint_state_path(dir, step, r).c_str());
}

// Keeps the newest `keep` complete checkpoints (keep <= 0: keep all).
static inline void checkpoint_prune(const std::string& dir, int keep, int world_size) {
    if (keep <= 0) return;
    std::vector<int> steps = checkpoint_complete_steps(dir);
    for (size_t i = 0; i + (size_t)keep < steps.size(); i++) checkpoint_delete(dir, steps[i], world_size);
}

// mkdir -p; a user error if the path (or a parent) exists and is not a directory.
static inline void checkpoint_make_dir(const std::string& dir) {
    struct stat st;
    if (stat(dir.c_str(), &st) == 0) {
        if (!S_ISDIR(st.st_mode)) user_error("-o: '%s' exists and is not a directory", dir.c_str());
        return;
    }
    size_t slash = dir.find_last_of('/');
    if (slash != std::string::npos && slash > 0) checkpoint_make_dir(dir.substr(0, slash));
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
        user_error("-o: cannot create directory '%s' (%s)", dir.c_str(), strerror(errno));
}
