// dataloader.h — reads llm.c token shards into (B, T) batches of inputs and next-token targets
// (host only).
// Shard format (written by data/prepare_text.py and data/openwebtext.py): a header of 256 int32
// -- [0] magic 20240520, [1] version 1, [2] token count -- then `count` uint16 tokens, with
// EOT (50256) before each document.
// Order (as llm.c, deterministic, no shuffling): the shards are the glob matches of a pattern,
// sorted bytewise. Within a shard, batches go in rounds of num_processes batches: round k starts
// at position k*B*T*num_processes and rank r reads tokens [start + r*B*T, start + r*B*T + B*T + 1);
// inputs are the first B*T of them, targets the same shifted by one. When the next round would
// not fit in the shard, every rank moves to the next shard together (so all ranks take the same
// number of steps per epoch); wrapping back to shard 0 increments the epoch. The tail of a shard
// shorter than a round is skipped.
// Checks: at init every shard's magic, version, file size (1024 + 2*count bytes) and that it
// holds at least one round (B*T*num_processes + 1 tokens), and the tokens of its content sample
// (the whole shard up to DATA_SAMPLE_WHOLE_BYTES, else DATA_SAMPLE_BLOCKS evenly spaced blocks)
// are < vocab_size; when a shard is loaded (the whole shard, into memory), every token again.
// Each failure is one user_error line naming the flag, the file, what was expected and what was
// found. The same sample's CRC-32 goes into the fingerprint ranks and checkpoints compare, so
// other content under the same name and size is noticed.
#pragma once
#include <glob.h>
#include <sys/stat.h>
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include "utils.h"

#define DATA_SHARD_MAGIC 20240520
#define DATA_SHARD_VERSION 1
#define DATA_SHARD_HEADER_INTS 256
#define DATA_SHARD_HEADER_BYTES (DATA_SHARD_HEADER_INTS * 4)
#define DATA_SHARD_HINT "hint: make shards with data/prepare_text.py"
// The content sample: shards up to 8 MiB are read whole at init (the tests' and the demo's),
// larger ones as 256 blocks of 4 KiB spread evenly from the first token to the last (1 MiB
// of a 200 MB shard of 100M tokens).
#define DATA_SAMPLE_WHOLE_BYTES (8LL << 20)
#define DATA_SAMPLE_BLOCKS 256
#define DATA_SAMPLE_BLOCK_TOKENS 2048

// Holds std::vector/std::string members: declare it (DataLoader l;) and call dataloader_init;
// never memset it.
typedef struct DataLoader {
    // configuration
    size_t B;                     // batch size (sequences per rank)
    size_t T;                     // sequence length
    int process_rank;             // this rank, in [0, num_processes)
    int num_processes;            // ranks reading the same shards
    int vocab_size;               // every token must be < vocab_size
    std::string flag;             // the command-line flag the pattern came from, for errors
    // shards
    std::vector<std::string> shard_paths;  // (num_shards) sorted glob matches
    std::vector<size_t> shard_tokens;      // (num_shards) token count of each shard
    std::vector<uint32_t> shard_crc;       // (num_shards) CRC-32 of the header and the content sample
    int num_shards;
    size_t total_tokens;          // tokens in all shards, for "one epoch" step counts
    size_t num_batches;           // batches per epoch, the same on every rank
    // position of the next batch
    int current_shard;            // in [0, num_shards)
    size_t current_position;      // start of the current round (without the rank offset)
    int epoch;                    // completed passes over all shards
    // the loaded shard
    int loaded_shard;             // index of the shard in `tokens`, -1 if none
    uint16_t* tokens;             // (shard_tokens[loaded_shard])
    size_t tokens_capacity;       // allocated entries of `tokens`
    // the batch filled by dataloader_next_batch
    int* inputs;                  // (B, T)
    int* targets;                 // (B, T) inputs shifted by one token
} DataLoader;

// Validates a shard header against the file size, without exiting (also the fuzzing entry
// point). On failure *why completes the sentence "shard 'X' ...".
static inline bool dataloader_check_header(const int32_t header[DATA_SHARD_HEADER_INTS], long long size, std::string* why) {
    char b[512];
    if (header[0] != DATA_SHARD_MAGIC) {
        snprintf(b, sizeof(b), "has magic %d, expected %d (not an llm.c token shard; %s)", header[0], DATA_SHARD_MAGIC, DATA_SHARD_HINT);
    } else if (header[1] != DATA_SHARD_VERSION) {
        snprintf(b, sizeof(b), "has version %d, expected %d (%s)", header[1], DATA_SHARD_VERSION, DATA_SHARD_HINT);
    } else if (header[2] < 0) {
        snprintf(b, sizeof(b), "has token count %d in its header, expected a count >= 0 (%s)", header[2], DATA_SHARD_HINT);
    } else {
        long long expected = (long long)DATA_SHARD_HEADER_BYTES + 2LL * header[2];
        if (size == expected) return true;
        snprintf(b, sizeof(b), "is %lld bytes, expected %lld = %d + 2*%d for the %d tokens its header counts (%s; hint: regenerate it)",
                 size, expected, DATA_SHARD_HEADER_BYTES, header[2], header[2], size < expected ? "truncated" : "oversized");
    }
    *why = b;
    return false;
}

// Opens a shard and checks its header and size; returns the file positioned at the first
// token and sets *count.
static inline FILE* dataloader_open_shard(const DataLoader* l, const char* path, size_t* count) {
    const char* flag = l->flag.c_str();
    struct stat st;
    if (stat(path, &st) != 0) {
        user_error("%s: cannot open shard '%s' (%s)", flag, path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {
        user_error("%s: shard '%s' is not a regular file (expected an llm.c .bin shard)", flag, path);
    }
    FILE* f = fopen(path, "rb");
    if (f == NULL) user_error("%s: cannot open shard '%s' (%s)", flag, path, strerror(errno));
    long long size = file_size_bytes(f);
    if (size < DATA_SHARD_HEADER_BYTES) {
        user_error("%s: shard '%s' is %lld bytes, expected at least the %d-byte llm.c header (%s)",
                   flag, path, size, DATA_SHARD_HEADER_BYTES, DATA_SHARD_HINT);
    }
    int32_t header[DATA_SHARD_HEADER_INTS];
    fread_check(header, sizeof(int32_t), DATA_SHARD_HEADER_INTS, f);
    std::string why;
    if (!dataloader_check_header(header, size, &why)) user_error("%s: shard '%s' %s", flag, path, why.c_str());
    *count = (size_t)header[2];
    return f;
}

// Every token of tokens[0:n] (starting at token `first` of the shard) must be < vocab_size.
static inline void dataloader_check_tokens(const DataLoader* l, const char* path, const uint16_t* tokens, size_t n, size_t first) {
    for (size_t i = 0; i < n; i++) {
        if ((int)tokens[i] >= l->vocab_size) {
            user_error("%s: shard '%s': token %zu has id %d, expected < vocab size %d "
                       "(hint: the shard was made with a different tokenizer)",
                       l->flag.c_str(), path, first + i, (int)tokens[i], l->vocab_size);
        }
    }
}

// CRC-32 of the header and the content sample of an open shard of `count` tokens (f positioned
// anywhere); the sampled tokens are checked against the vocabulary.
static inline uint32_t dataloader_sample_shard(const DataLoader* l, const char* path, FILE* f, size_t count) {
    int32_t header[DATA_SHARD_HEADER_INTS];
    fseek(f, 0, SEEK_SET);
    fread_check(header, sizeof(int32_t), DATA_SHARD_HEADER_INTS, f);
    uint32_t crc = crc32_update(0, header, sizeof(header));
    bool whole = 2LL * (long long)count <= DATA_SAMPLE_WHOLE_BYTES;
    size_t block = whole ? count : std::min((size_t)DATA_SAMPLE_BLOCK_TOKENS, count);
    int blocks = whole ? 1 : DATA_SAMPLE_BLOCKS;
    std::vector<uint16_t> buf(block);
    for (int k = 0; k < blocks; k++) {
        // block k starts at k/(blocks-1) of the way to the last full block
        size_t first = blocks == 1 ? 0 : (size_t)((double)(count - block) * k / (blocks - 1));
        fseek(f, (long)(DATA_SHARD_HEADER_BYTES + 2 * first), SEEK_SET);
        fread_check(buf.data(), sizeof(uint16_t), block, f);
        dataloader_check_tokens(l, path, buf.data(), block, first);
        crc = crc32_update(crc, buf.data(), block * sizeof(uint16_t));
    }
    return crc;
}

// Loads shard `s` whole into l->tokens and checks every token against the vocabulary.
static inline void dataloader_load_shard(DataLoader* l, int s) {
    if (l->loaded_shard == s) return;
    const char* path = l->shard_paths[s].c_str();
    size_t count = 0;
    FILE* f = dataloader_open_shard(l, path, &count);
    if (count != l->shard_tokens[s]) {
        user_error("%s: shard '%s' changed while in use: %zu tokens at start, %zu now",
                   l->flag.c_str(), path, l->shard_tokens[s], count);
    }
    if (count > l->tokens_capacity) {
        free(l->tokens);
        l->tokens = (uint16_t*)malloc_check(count * sizeof(uint16_t));
        l->tokens_capacity = count;
    }
    fread_check(l->tokens, sizeof(uint16_t), count, f);
    fclose(f);
    dataloader_check_tokens(l, path, l->tokens, count, 0);
    l->loaded_shard = s;
}

static inline void dataloader_reset(DataLoader* l) {
    l->current_shard = 0;
    l->current_position = 0;
    l->epoch = 0;
    dataloader_load_shard(l, 0);
}

// glob's error callback: a directory that is missing is no match; one that exists but cannot be
// listed (permissions, I/O) stops the expansion, so the user hears which directory, not "no file
// matches". The failing path and errno are kept for the message (init is single-threaded).
typedef struct { std::string dir; int err; } DataGlobFailure;
static inline DataGlobFailure* dataloader_glob_failure() { static DataGlobFailure f; return &f; }
static inline int dataloader_glob_error(const char* path, int err) {
    if (err == ENOENT || err == ENOTDIR) return 0;
    *dataloader_glob_failure() = DataGlobFailure{path, err};
    return 1;
}

// flag: the command-line flag that supplied the pattern ("-i", "-j"), named in every error.
static inline void dataloader_init(DataLoader* l, const char* pattern, const char* flag, size_t B, size_t T,
                                   int process_rank, int num_processes, int vocab_size) {
    l->flag = flag != NULL ? flag : "data";
    const char* fl = l->flag.c_str();
    if (B == 0 || T == 0) user_error("%s: expected batch size and sequence length >= 1, found B=%zu T=%zu", fl, B, T);
    if (num_processes < 1 || process_rank < 0 || process_rank >= num_processes) {
        user_error("%s: expected 0 <= rank < ranks, found rank %d of %d", fl, process_rank, num_processes);
    }
    if (vocab_size <= 0 || vocab_size > 65536) {
        user_error("%s: expected a vocab size in [1, 65536] for uint16 shards, found %d", fl, vocab_size);
    }
    l->B = B;
    l->T = T;
    l->process_rank = process_rank;
    l->num_processes = num_processes;
    l->vocab_size = vocab_size;

    glob_t g;
    int rc = glob(pattern, GLOB_NOSORT, dataloader_glob_error, &g);
    if (rc == GLOB_ABORTED)  // a directory on the way that exists but cannot be read
        user_error("%s: cannot read directory '%s' (%s) while expanding '%s'", fl, dataloader_glob_failure()->dir.c_str(),
                   strerror(dataloader_glob_failure()->err), pattern);
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
        if (rc == 0) globfree(&g);
        user_error("%s: no file matches '%s' (expected llm.c .bin shards; hint: run data/prepare_text.py)",
                   fl, pattern);
    }
    if (rc != 0) user_error("%s: cannot expand '%s' (glob error %d)", fl, pattern, rc);
    l->shard_paths.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
    globfree(&g);
    // bytewise order, independent of the locale, so every rank and every run agree
    std::sort(l->shard_paths.begin(), l->shard_paths.end());
    l->num_shards = (int)l->shard_paths.size();

    size_t round = B * T * (size_t)num_processes;
    l->shard_tokens.assign(l->num_shards, 0);
    l->shard_crc.assign(l->num_shards, 0);
    l->total_tokens = 0;
    l->num_batches = 0;
    for (int s = 0; s < l->num_shards; s++) {
        const char* path = l->shard_paths[s].c_str();
        size_t count = 0;
        FILE* f = dataloader_open_shard(l, path, &count);
        l->shard_crc[s] = dataloader_sample_shard(l, path, f, count);
        fclose(f);
        if (count < round + 1) {
            user_error("%s: shard '%s' has %zu tokens, fewer than one batch needs: B*T*ranks+1 = "
                       "%zu*%zu*%d+1 = %zu (B=%zu, T=%zu, ranks=%d; hint: lower -b or -t, or use more data)",
                       fl, path, count, B, T, num_processes, round + 1, B, T, num_processes);
        }
        l->shard_tokens[s] = count;
        l->total_tokens += count;
        // round k fits when k*round + round + 1 <= count
        l->num_batches += (count - 1) / round;
    }

    l->loaded_shard = -1;
    l->tokens = NULL;
    l->tokens_capacity = 0;
    l->inputs = (int*)malloc_check(B * T * sizeof(int));
    l->targets = (int*)malloc_check(B * T * sizeof(int));
    dataloader_reset(l);
}

// Fills l->inputs and l->targets with the next batch, then advances to the one after it.
static inline void dataloader_next_batch(DataLoader* l) {
    size_t BT = l->B * l->T;
    size_t round = BT * (size_t)l->num_processes;
    const uint16_t* p = l->tokens + l->current_position + (size_t)l->process_rank * BT;
    for (size_t i = 0; i < BT; i++) {
        l->inputs[i] = (int)p[i];
        l->targets[i] = (int)p[i + 1];
    }
    l->current_position += round;
    if (l->current_position + round + 1 > l->shard_tokens[l->current_shard]) {
        l->current_shard = (l->current_shard + 1) % l->num_shards;
        if (l->current_shard == 0) l->epoch++;
        l->current_position = 0;
        dataloader_load_shard(l, l->current_shard);
    }
}

// state = {shard index, position of the next round in that shard, epoch}: enough to resume
// the exact sequence of batches (with the same pattern, B, T and number of ranks).
static inline void dataloader_get_state(const DataLoader* l, int64_t state[3]) {
    state[0] = l->current_shard;
    state[1] = (int64_t)l->current_position;
    state[2] = l->epoch;
}

// The state after `batches` calls of dataloader_next_batch from the start: a checkpoint's data
// position must equal the one its step implies.
static inline void dataloader_state_after(const DataLoader* l, long long batches, int64_t state[3]) {
    size_t round = l->B * l->T * (size_t)l->num_processes;
    state[2] = (int64_t)(batches / (long long)l->num_batches);
    long long left = batches % (long long)l->num_batches;
    int s = 0;
    while (left >= (long long)((l->shard_tokens[s] - 1) / round)) { left -= (long long)((l->shard_tokens[s] - 1) / round); s++; }
    state[0] = s;
    state[1] = (int64_t)((size_t)left * round);
}

static inline void dataloader_set_state(DataLoader* l, const int64_t state[3]) {
    int64_t shard = state[0], pos = state[1], epoch = state[2];
    size_t round = l->B * l->T * (size_t)l->num_processes;
    const char* fl = l->flag.c_str();
    if (shard < 0 || shard >= l->num_shards) {
        user_error("%s: saved data position names shard %lld, expected a shard index in [0, %d) "
                   "(hint: resume with the same data files as the checkpoint)", fl, (long long)shard, l->num_shards);
    }
    if (pos < 0 || (size_t)pos + round + 1 > l->shard_tokens[shard]) {
        user_error("%s: saved data position %lld in shard '%s' is out of range: the shard has %zu tokens "
                   "and a round needs %zu (hint: resume with the same data, -b, -t and rank count)",
                   fl, (long long)pos, l->shard_paths[shard].c_str(), l->shard_tokens[shard], round + 1);
    }
    if (epoch < 0 || epoch > INT32_MAX) {
        user_error("%s: saved data epoch %lld, expected a value in [0, %d]", fl, (long long)epoch, INT32_MAX);
    }
    l->current_shard = (int)shard;
    l->current_position = (size_t)pos;
    l->epoch = (int)epoch;
    dataloader_load_shard(l, l->current_shard);
}

static inline void dataloader_free(DataLoader* l) {
    free(l->tokens);
    free(l->inputs);
    free(l->targets);
    l->tokens = NULL;
    l->inputs = NULL;
    l->targets = NULL;
    l->tokens_capacity = 0;
    l->loaded_shard = -1;
    std::vector<std::string>().swap(l->shard_paths);
    std::vector<size_t>().swap(l->shard_tokens);
    std::vector<uint32_t>().swap(l->shard_crc);
    l->num_shards = 0;
}

// "N shards, M tokens, crc XXXXXXXX" over the shard names, sizes and content samples: ranks (and
// a resumed run) compare it to make sure they read the same data.
static inline std::string dataloader_fingerprint(const DataLoader* l) {
    uint32_t crc = 0;
    for (int s = 0; s < l->num_shards; s++) {
        const std::string& p = l->shard_paths[s];
        size_t slash = p.find_last_of('/');
        std::string base = slash == std::string::npos ? p : p.substr(slash + 1);
        crc = crc32_update(crc, base.data(), base.size());
        uint64_t n = l->shard_tokens[s];
        crc = crc32_update(crc, &n, sizeof(n));
        crc = crc32_update(crc, &l->shard_crc[s], sizeof(uint32_t));
    }
    char buf[96];
    snprintf(buf, sizeof(buf), "%d shards, %zu tokens, crc %08x", l->num_shards, l->total_tokens, crc);
    return buf;
}
