// checkpoint.h — model and training-state files (DESIGN §8), host only, shared by both engines.
//
//   DIR/model_%08d.bin        256 int32 header + fp32 weights in the flat layout (llama.h)
//   DIR/state_%08d_%05d.bin   one per rank: step, data position, settings text, the rank's
//                             share of the optimizer moments (the state file section below),
//                             and named extra arrays (GeoFP8 factors and residuals)
//   DIR/DONE_%08d             empty; written last, so its presence means the checkpoint is whole
//
//   DIR/LOCK                  "pid P host H": the run writing DIR holds an fcntl lock on it
//
// Every file is written to "<name>.tmp-<host>-<pid>", flushed to disk (fsync), renamed into
// place, and the directory is synced, so neither a crash nor a power loss mid-write damages an
// earlier checkpoint or leaves a renamed but empty file. Each file carries a CRC-32 of its
// payload. A failed write (a full disk) is one line naming the file, and the partial file is
// removed. Readers validate everything a user could hand them and fail with one line naming the
// file (user_error); the resume path uses the non-exiting checks to fall back to an older
// checkpoint when the newest is damaged (llmc/run.h).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
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

// An I/O failure while writing `path` (a full disk, a quota, a read-only mount): one line
// naming the file and the system's reason, then exit 1; on a checkpoint writer's thread
// (checkpoint_write_throws, llmc/checkpoint_writer.h) the line is thrown instead, for the ranks to
// stop together.
struct CheckpointWriteError { std::string line; };
static thread_local bool checkpoint_write_throws = false;
[[noreturn]] static inline void checkpoint_write_failed(const std::string& path, const char* what, int err) {
    if (checkpoint_write_throws) throw CheckpointWriteError{std::string("cannot ") + what + " '" + path + "' (" + strerror(err) + ")"};
    user_error("cannot %s '%s' (%s)", what, path.c_str(), strerror(err));
}

// The directory part of a path ("." for a bare name).
static inline std::string checkpoint_dir_of(const std::string& path) {
    size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? std::string(".") : slash == 0 ? std::string("/") : path.substr(0, slash);
}

// fsync of a directory, so the renames in it survive a power loss.
static inline void checkpoint_sync_dir(const std::string& dir) {
    int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd < 0) checkpoint_write_failed(dir, "open directory", errno);
    if (fsync(fd) != 0 && errno != EINVAL) { int e = errno; close(fd); checkpoint_write_failed(dir, "sync directory", e); }
    close(fd);
}

// A file written as "<path>.tmp-<host>-<pid>" (unique to the writing process, so two writers
// never share a temporary name) and committed by checkpoint_file_commit.
typedef struct {
    std::string path, tmp;
    FILE* f;
} CheckpointFile;

static inline std::string checkpoint_tmp_suffix() {
    char host[256] = "host";
    gethostname(host, sizeof(host) - 1);
    host[sizeof(host) - 1] = '\0';
    for (char* c = host; *c; c++) if (*c == '/') *c = '_';
    return std::string(".tmp-") + host + "-" + std::to_string((long long)getpid());
}

static inline void checkpoint_file_open(CheckpointFile* w, const std::string& path) {
    w->path = path;
    w->tmp = path + checkpoint_tmp_suffix();
    w->f = fopen(w->tmp.c_str(), "wb");
    if (!w->f) checkpoint_write_failed(w->tmp, "create", errno);
}

static inline void checkpoint_file_write(CheckpointFile* w, const void* data, size_t size, size_t n) {
    if (n > 0 && fwrite(data, size, n, w->f) != n) {
        int e = errno;
        fclose(w->f);
        remove(w->tmp.c_str());
        checkpoint_write_failed(w->tmp, "write", e ? e : EIO);
    }
}

// Flush, fsync, close, rename into place, fsync the directory.
static inline void checkpoint_file_commit(CheckpointFile* w, const char* crash_point, int step) {
    if (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0) {
        int e = errno;
        fclose(w->f);
        remove(w->tmp.c_str());
        checkpoint_write_failed(w->tmp, "write", e);
    }
    if (fclose(w->f) != 0) { int e = errno; remove(w->tmp.c_str()); checkpoint_write_failed(w->tmp, "write", e); }
    w->f = NULL;
    if (crash_point) checkpoint_test_crash(crash_point, step);
    if (rename(w->tmp.c_str(), w->path.c_str()) != 0) {
        int e = errno;
        remove(w->tmp.c_str());
        checkpoint_write_failed(w->path, ("rename " + w->tmp + " to").c_str(), e);
    }
    checkpoint_sync_dir(checkpoint_dir_of(w->path));
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
    CheckpointFile w;
    checkpoint_file_open(&w, path);
    checkpoint_file_write(&w, h, sizeof(int32_t), CHECKPOINT_HEADER_INTS);
    checkpoint_file_write(&w, params, sizeof(float), n);
    checkpoint_file_commit(&w, "model", step);
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

// Loads the weights (params must hold llama_num_params(c) floats) and checks the CRC; returns it.
static inline uint32_t checkpoint_read_model(const char* path, const char* flag, const LlamaConfig* c, float* params) {
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
    return got;
}

// The resume path's check of a model file, without exiting: header, config equal to *want,
// step in the header equal to `step`, payload CRC. Loads the weights into *params. On failure
// *why completes "model file 'X' ...", *config_differs says whether the file is sound but
// holds another model (the user's mistake, not damage), and *io_error whether the file could not
// be read at all (a permission, a failing disk: not damage either, so no reason to fall back).
static inline bool checkpoint_try_read_model(const std::string& path, const LlamaConfig* want, int step, std::vector<float>* params,
                                             std::string* why, bool* config_differs, bool* io_error = NULL) {
    *config_differs = false;
    if (io_error) *io_error = false;
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) {
        *why = errno == ENOENT ? std::string("is missing") : std::string("cannot be opened (") + strerror(errno) + ")";
        if (io_error) *io_error = errno != ENOENT;
        return false;
    }
    errno = 0;
    long long size = file_size_bytes(f);
    int32_t h[CHECKPOINT_HEADER_INTS];
    LlamaConfig c;
    bool ok = fread(h, sizeof(int32_t), CHECKPOINT_HEADER_INTS, f) == CHECKPOINT_HEADER_INTS;
    if (!ok) *why = "is truncated (" + std::to_string(size) + " bytes)";
    if (ok) ok = checkpoint_check_model_header(h, size, &c, why);
    if (ok && !llama_config_equal(&c, want)) {  // a sound file of another model: the user's mistake
        *why = "has model " + llama_config_string(&c) + ", but this run asks for " + llama_config_string(want);
        *config_differs = true;
        ok = false;
    }
    if (ok && h[10] != step) { *why = "has step " + std::to_string(h[10]) + " in its header, expected " + std::to_string(step); ok = false; }
    if (ok) {
        params->resize(llama_num_params(want));
        ok = fread(params->data(), sizeof(float), params->size(), f) == params->size();
        if (!ok) *why = "is truncated";
    }
    if (ferror(f)) {  // a read that failed, not a short file
        *why = std::string("cannot be read (") + strerror(errno ? errno : EIO) + ")";
        if (io_error) *io_error = true;
        *config_differs = false;
        ok = false;
    }
    fclose(f);
    if (ok) {
        uint32_t want_crc, got = crc32_update(0, params->data(), params->size() * sizeof(float));
        memcpy(&want_crc, &h[11], 4);
        if (got != want_crc) {
            char b[128];
            snprintf(b, sizeof(b), "is corrupted: payload CRC-32 %08x, the header says %08x", got, want_crc);
            *why = b;
            ok = false;
        }
    }
    return ok;
}

// ----------------------------------------------------------------------------
// state file
//
// One per rank. The optimizer moments are the same on every rank of a data-parallel run, so
// since version 2 they are split across the ranks' files: rank r of N keeps values
// [r P / N, (r + 1) P / N) of m and of v (checkpoint_moments_slice; P the parameters), and a
// checkpoint holds them once instead of N times (llama600m on 32 ranks: 4.9 GB in all instead of
// 4.9 GB a rank). A file may hold the whole moments instead (the slice [0, P)): one rank's, what
// every rank writes if the ranks' moments were found to differ (run_moments_share), and what
// every version-1 file holds.
//   header, 64 int64: 0 magic, 1 version, 2 step, 3 rank, 4 world size, 5-7 data position
//     (shard, token, epoch), 8 skipped steps, 9 settings bytes, 10 and 11 the m and v values in
//     the file, 12 extras, 13 CRC-32 of the settings and the extras (version 1: of the whole
//     payload), 14 the slice's first parameter, 15 P, 16 CRC-32 of the moments (version 2)
//   payload: the settings, m's slice, v's slice, then per extra its name's length (int64), the
//     name, its length (int64) and its values (fp32)
#define CHECKPOINT_STATE_VERSION 2

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
    std::vector<float> m;     // first moments (AdamW) / momentum (Muon): values [moments_begin, moments_begin + m.size())
    std::vector<float> v;     // second moments (AdamW), the same values
    int64_t moments_begin = 0;   // the first parameter m and v hold
    int64_t moments_total = -1;  // the parameters the moments cover (-1: m.size(), m and v whole)
    std::vector<CheckpointArray> extras;  // GeoFP8 factors, residuals, ...
} CheckpointState;

// The slice [*begin, *end) of the P parameters' moments that rank `rank` of `world_size` keeps.
static inline void checkpoint_moments_slice(size_t P, int rank, int world_size, size_t* begin, size_t* end) {
    *begin = (size_t)((unsigned long long)P * (unsigned long long)rank / (unsigned long long)world_size);
    *end = (size_t)((unsigned long long)P * (unsigned long long)(rank + 1) / (unsigned long long)world_size);
}

static inline void checkpoint_crc_i64(uint32_t* crc, int64_t x) { *crc = crc32_update(*crc, &x, 8); }

static inline uint32_t checkpoint_extras_crc(uint32_t crc, const CheckpointState* s) {
    for (const CheckpointArray& a : s->extras) {
        checkpoint_crc_i64(&crc, (int64_t)a.name.size());
        crc = crc32_update(crc, a.name.data(), a.name.size());
        checkpoint_crc_i64(&crc, (int64_t)a.data.size());
        crc = crc32_update(crc, a.data.data(), a.data.size() * 4);
    }
    return crc;
}

static inline uint32_t checkpoint_moments_crc(const float* m, const float* v, size_t n) {
    return crc32_update(crc32_update(0, m, n * 4), v, n * 4);
}

// Writes a state file: the header h, then s's payload (settings, m, v, extras), committed.
static inline void checkpoint_write_state_file(const std::string& path, const int64_t h[CHECKPOINT_STATE_HEADER_INTS], const CheckpointState* s) {
    CheckpointFile w;
    checkpoint_file_open(&w, path);
    checkpoint_file_write(&w, h, sizeof(int64_t), CHECKPOINT_STATE_HEADER_INTS);
    checkpoint_file_write(&w, s->settings.data(), 1, s->settings.size());
    checkpoint_file_write(&w, s->m.data(), 4, s->m.size());
    checkpoint_file_write(&w, s->v.data(), 4, s->v.size());
    for (const CheckpointArray& a : s->extras) {
        int64_t nl = (int64_t)a.name.size(), nd = (int64_t)a.data.size();
        checkpoint_file_write(&w, &nl, 8, 1);
        checkpoint_file_write(&w, a.name.data(), 1, a.name.size());
        checkpoint_file_write(&w, &nd, 8, 1);
        checkpoint_file_write(&w, a.data.data(), 4, a.data.size());
    }
    checkpoint_file_commit(&w, NULL, 0);
}

static inline void checkpoint_write_state(const std::string& path, const CheckpointState* s) {
    int64_t h[CHECKPOINT_STATE_HEADER_INTS] = {0};
    h[0] = CHECKPOINT_STATE_MAGIC; h[1] = CHECKPOINT_STATE_VERSION; h[2] = s->step; h[3] = s->rank; h[4] = s->world_size;
    h[5] = s->data_state[0]; h[6] = s->data_state[1]; h[7] = s->data_state[2]; h[8] = s->skipped_steps;
    h[9] = (int64_t)s->settings.size(); h[10] = (int64_t)s->m.size(); h[11] = (int64_t)s->v.size();
    h[12] = (int64_t)s->extras.size();
    h[13] = checkpoint_extras_crc(crc32_update(0, s->settings.data(), s->settings.size()), s);
    h[14] = s->moments_begin;
    h[15] = s->moments_total >= 0 ? s->moments_total : (int64_t)s->m.size();
    h[16] = checkpoint_moments_crc(s->m.data(), s->v.data(), std::min(s->m.size(), s->v.size()));
    checkpoint_write_state_file(path, h, s);
}

// The header's checks that need no payload: magic, version, the sections within `size` bytes, and
// (version 2) the moments' slice within its parameters. On failure *why completes "state file 'X' ...".
static inline bool checkpoint_check_state_header(const int64_t* h, long long size, std::string* why) {
    char b[256];
    if (h[0] != CHECKPOINT_STATE_MAGIC) { snprintf(b, sizeof(b), "is not a state file: expected magic %d, found %lld", CHECKPOINT_STATE_MAGIC, (long long)h[0]); *why = b; return false; }
    if (h[1] != 1 && h[1] != CHECKPOINT_STATE_VERSION) {
        snprintf(b, sizeof(b), "has version %lld, expected 1 or %d", (long long)h[1], CHECKPOINT_STATE_VERSION); *why = b; return false;
    }
    for (int k = 9; k <= 12; k++) {
        if (h[k] < 0 || h[k] > size) { snprintf(b, sizeof(b), "is corrupted (section size %lld in a %lld-byte file)", (long long)h[k], size); *why = b; return false; }
    }
    long long fixed = CHECKPOINT_STATE_HEADER_INTS * 8LL + h[9] + 4LL * (h[10] + h[11]);
    if (size < fixed) { snprintf(b, sizeof(b), "is truncated: %lld bytes, expected at least %lld", size, fixed); *why = b; return false; }
    if (h[1] >= 2 && (h[10] != h[11] || h[14] < 0 || h[15] < 0 || h[14] > h[15] || h[10] > h[15] - h[14])) {
        snprintf(b, sizeof(b), "is corrupted (%lld values of m and %lld of v from parameter %lld of %lld)", (long long)h[10], (long long)h[11],
                 (long long)h[14], (long long)h[15]);
        *why = b; return false;
    }
    return true;
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
    if (!checkpoint_check_state_header(h, size, why)) return false;
    s->step = h[2]; s->rank = h[3]; s->world_size = h[4];
    s->data_state[0] = h[5]; s->data_state[1] = h[6]; s->data_state[2] = h[7]; s->skipped_steps = h[8];
    s->settings.assign((size_t)h[9], '\0');
    s->m.resize((size_t)h[10]);
    s->v.resize((size_t)h[11]);
    s->moments_begin = h[1] >= 2 ? h[14] : 0;
    s->moments_total = h[1] >= 2 ? h[15] : h[10];
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
    uint32_t crc = crc32_update(0, s->settings.data(), s->settings.size()), want_moments = 0, moments = 0;
    if (h[1] == 1) crc = crc32_update(crc32_update(crc, s->m.data(), s->m.size() * 4), s->v.data(), s->v.size() * 4);
    else { moments = checkpoint_moments_crc(s->m.data(), s->v.data(), s->m.size()); want_moments = (uint32_t)h[16]; }
    crc = checkpoint_extras_crc(crc, s);
    if ((int64_t)crc != h[13] || moments != want_moments) {
        if ((int64_t)crc != h[13]) snprintf(b, sizeof(b), "is corrupted: CRC-32 %08x, the header says %08llx", crc, (unsigned long long)h[13]);
        else snprintf(b, sizeof(b), "is corrupted: the optimizer values' CRC-32 %08x, the header says %08x", moments, want_moments);
        *why = b; return false;
    }
    return true;
}

// Reads and validates a state file without exiting; on failure *why completes "state file 'X' ..."
// and *io_error says whether the file could not be read at all (rather than being damaged).
static inline bool checkpoint_try_read_state(const std::string& path, CheckpointState* s, std::string* why, bool* io_error = NULL) {
    if (io_error) *io_error = false;
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) {
        *why = errno == ENOENT ? std::string("is missing") : std::string("cannot be opened (") + strerror(errno) + ")";
        if (io_error) *io_error = errno != ENOENT;
        return false;
    }
    errno = 0;
    bool ok = checkpoint_parse_state(f, file_size_bytes(f), s, why);
    if (!ok && ferror(f)) {  // a read that failed, not a damaged file
        *why = std::string("cannot be read (") + strerror(errno ? errno : EIO) + ")";
        if (io_error) *io_error = true;
    }
    fclose(f);
    return ok;
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
    CheckpointFile w;
    checkpoint_file_open(&w, checkpoint_done_path(dir, step));
    checkpoint_file_commit(&w, NULL, 0);
}

// The names in dir (none if it does not exist). A directory that cannot be listed is a user
// error, or with err given, sets *err and returns no names.
static inline std::vector<std::string> checkpoint_list_dir(const std::string& dir, std::string* err = NULL) {
    std::vector<std::string> names;
    DIR* d = opendir(dir.c_str());
    if (!d) {
        if (errno == ENOENT) return names;
        std::string why = "-o: cannot list directory '" + dir + "' (" + strerror(errno) + ")";
        if (err) { *err = why; return names; }
        user_error("%s", why.c_str());
    }
    struct dirent* e;
    while ((e = readdir(d)) != NULL) names.push_back(e->d_name);
    closedir(d);
    return names;
}

// The step of a checkpoint file name ("model_%08d.bin", "state_%08d_%05d.bin", "DONE_%08d",
// or any of them with a temporary suffix), or -1; *tmp says whether it has a temporary suffix.
static inline int checkpoint_name_step(const std::string& name, bool* tmp) {
    int step = -1, n = 0;
    if (sscanf(name.c_str(), "model_%8d.bin%n", &step, &n) == 1 || sscanf(name.c_str(), "DONE_%8d%n", &step, &n) == 1) {
    } else {
        int rank;
        if (sscanf(name.c_str(), "state_%8d_%5d.bin%n", &step, &rank, &n) != 2) return -1;
    }
    if (n <= 0) return -1;
    *tmp = name.compare(n, 5, ".tmp-") == 0 || name.compare(n, std::string::npos, ".tmp") == 0;
    if (!*tmp && (size_t)n != name.size()) return -1;
    return step;
}

// Steps that have a DONE marker, ascending.
static inline std::vector<int> checkpoint_complete_steps(const std::string& dir) {
    std::vector<int> steps;
    for (const std::string& name : checkpoint_list_dir(dir)) {
        bool tmp = false;
        if (name.compare(0, 5, "DONE_") == 0 && checkpoint_name_step(name, &tmp) >= 0 && !tmp) steps.push_back(checkpoint_name_step(name, &tmp));
    }
    std::sort(steps.begin(), steps.end());
    return steps;
}

// True if dir holds any checkpoint file (complete or not, temporary files aside).
static inline bool checkpoint_any_files(const std::string& dir) {
    for (const std::string& name : checkpoint_list_dir(dir)) {
        bool tmp = false;
        if (checkpoint_name_step(name, &tmp) >= 0 && !tmp) return true;
    }
    return false;
}

// The checkpoint files of dir to remove, DONE markers first (so that a half-cleaned step never
// looks complete): temporary files left by a killed writer (always), and the files of every step
// not in `keep` when remove_steps is set.
static inline std::vector<std::string> checkpoint_removable_files(const std::string& dir, bool remove_steps, const std::vector<int>& keep) {
    std::vector<std::string> out, names = checkpoint_list_dir(dir);
    std::sort(names.begin(), names.end());
    std::stable_partition(names.begin(), names.end(), [](const std::string& n) { return n.compare(0, 5, "DONE_") == 0; });
    for (const std::string& name : names) {
        bool tmp = false;
        int step = checkpoint_name_step(name, &tmp);
        if (step >= 0 && (tmp || (remove_steps && std::find(keep.begin(), keep.end(), step) == keep.end()))) out.push_back(name);
    }
    return out;
}

// Removes checkpoint_removable_files(dir, ...); returns how many it removed. Only the run holding
// the directory's lock calls it, before any of its ranks writes there.
static inline int checkpoint_remove_files(const std::string& dir, bool remove_steps, const std::vector<int>& keep) {
    std::vector<std::string> names = checkpoint_removable_files(dir, remove_steps, keep);
    for (const std::string& name : names)
        if (remove((dir + "/" + name).c_str()) != 0) checkpoint_write_failed(dir + "/" + name, "remove", errno);
    return (int)names.size();
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

// mkdir -p without exiting: "" on success, else the problem ("-o: ..."). The directories it
// made are appended to *created (parents first), so a refused run can remove them again.
static inline std::string checkpoint_make_dir_error(const std::string& dir, std::vector<std::string>* created = NULL) {
    struct stat st;
    if (stat(dir.c_str(), &st) == 0) return S_ISDIR(st.st_mode) ? "" : "-o: '" + dir + "' exists and is not a directory";
    size_t slash = dir.find_last_of('/');
    if (slash != std::string::npos && slash > 0) {
        std::string err = checkpoint_make_dir_error(dir.substr(0, slash), created);
        if (!err.empty()) return err;
    }
    if (mkdir(dir.c_str(), 0755) != 0) {
        if (errno != EEXIST) return "-o: cannot create directory '" + dir + "' (" + strerror(errno) + ")";
    } else if (created) {
        created->push_back(dir);
    }
    return "";
}

// mkdir -p; a user error if the path (or a parent) exists and is not a directory.
static inline void checkpoint_make_dir(const std::string& dir) {
    std::string err = checkpoint_make_dir_error(dir);
    if (!err.empty()) user_error("%s", err.c_str());
}

// The lock that makes one run at a time write a directory: an fcntl write lock on DIR/LOCK,
// held until the process exits (the kernel releases it even after SIGKILL; it also works over
// NFS with a lock daemon). The file is opened without following a symbolic link and must be a
// regular file, so the lock never writes through to a file elsewhere. It says who holds it
// ("pid P on host H") and, on its second line, `run_id`, which the other ranks read back to
// check that they see this very directory. Returns "" when this process now holds the lock,
// else the problem (another run holds it: its pid and host); *created says whether this call
// made the file. The descriptor stays open for the run's life: closing any descriptor of the
// file would drop the lock.
static inline std::string checkpoint_lock_dir(const std::string& dir, const std::string& run_id, bool* created) {
    std::string path = dir + "/LOCK";
    int fd = -1;
    for (int attempt = 0; fd < 0; attempt++) {
        *created = false;
        // O_NONBLOCK: a FIFO planted as LOCK must not block the open
        fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0) *created = true;
        bool existed = fd < 0 && errno == EEXIST;
        if (existed) fd = open(path.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0 && errno == EISDIR) return "-o: the lock file '" + path + "' is not a regular file (remove it)";
        if (fd < 0 && errno == ELOOP)
            return "-o: the lock file '" + path + "' is a symbolic link, expected a regular file (remove the link; no run follows it)";
        if (fd < 0) return std::string("-o: cannot ") + (existed ? "open" : "create") + " the lock file '" + path + "' (" + strerror(errno) + ")";
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            close(fd);
            return "-o: the lock file '" + path + "' is not a regular file (remove it)";
        }
        struct flock fl;
        memset(&fl, 0, sizeof(fl));
        fl.l_type = F_WRLCK;
        fl.l_whence = SEEK_SET;
        if (fcntl(fd, F_SETLK, &fl) == 0) {
            // a run refused at start removes the LOCK it made: if that happened between our open
            // and our lock, we hold a lock on a removed file, and take the new one instead
            struct stat now;
            if (attempt < 8 && (lstat(path.c_str(), &now) != 0 || now.st_ino != st.st_ino || now.st_dev != st.st_dev)) { close(fd); fd = -1; }
            continue;
        }
        int e = errno;
        std::string holder = "an unknown process";
        char b[512] = {0};
        ssize_t n = pread(fd, b, sizeof(b) - 1, 0);
        close(fd);
        if (e != EACCES && e != EAGAIN) return "-o: cannot lock '" + path + "' (" + strerror(e) + ")";
        if (n > 0) holder.assign(b, strcspn(b, "\n"));  // the first line: "pid P on host H"
        if (holder.empty()) holder = "an unknown process";
        return "-o: '" + dir + "' is in use by another run (" + holder + " holds " + path +
               "); wait for it to end, or pass another -o";
    }
    char host[256] = "unknown";
    gethostname(host, sizeof(host) - 1);
    host[sizeof(host) - 1] = '\0';
    std::string text = "pid " + std::to_string((long long)getpid()) + " on host " + host + "\nrun " + run_id + "\n";
    // synced, so that a rank on another node reads this run's id (NFS: close-to-open consistency)
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text.data(), text.size(), 0) != (ssize_t)text.size() || fsync(fd) != 0)
        return "-o: cannot write the lock file '" + path + "' (" + strerror(errno) + ")";
    return "";
}

// The run id in DIR/LOCK (its "run ID" line), read without following a link; "" when the file is
// missing or holds none. *err is set to the system's reason when the file exists but cannot be read.
static inline std::string checkpoint_lock_run_id(const std::string& dir, std::string* err) {
    int fd = open((dir + "/LOCK").c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) { if (errno != ENOENT) *err = strerror(errno); return ""; }
    char b[1024] = {0};
    ssize_t n = pread(fd, b, sizeof(b) - 1, 0);
    close(fd);
    if (n < 0) { *err = strerror(errno); return ""; }
    const char* key = "\nrun ";
    const char* at = strstr(b, key);
    if (!at) return "";
    at += strlen(key);
    return std::string(at, strcspn(at, "\n"));
}
