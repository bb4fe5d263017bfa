// bench_checkpoint.cpp — what a checkpoint costs the ranks of a data-parallel run, on this
// machine's disk. Three tables, each row printed as it completes, the files removed.
//
// 1. A rank's state file, version 1 against version 2 (llmc/checkpoint.h). v1 = the version
// replaced: every rank wrote all the optimizer moments (m and v, 8 bytes a parameter) and took
// their CRC-32 a byte at a time; v2 = llmc/'s: each rank writes its 1/N share of them, its CRC-32
// eight bytes at a time. Both rows write the same header and settings, with fsync and rename
// (checkpoint_file_commit), and time it end to end; the bytes on the file system a checkpoint are
// N times a rank's (v1) or the moments once (v2). v1 is timed twice (the faster kept: the first
// write of a size pays the page cache's turnover). One process stands for one rank.
//
// 2. Rank 0's checkpoint (the model file and its share of the moments) on the training loop,
// written by llmc/checkpoint_writer.h as the engines write it: --checkpoint-async 0 (the loop
// waits for the files) against 1 (the loop copies them and goes on; the writes run on a thread).
// The loop's steps are idle sleeps of --step-ms, as a GPU engine's host thread is while its
// device trains. "held" is the loop's time on the checkpoint: the copies, and with 0 the writes;
// the second of two checkpoints is timed (the first pays the copies' page faults).
//
// 3. A resume's reads (-y 1), rank 0's, from the disk: the page cache is dropped from every file
// first (posix_fadvise DONTNEED), so each row reads what a rank on another node would. before =
// the replaced resume: every rank read the model file, its own state file and every other
// rank's state file (the shares of the moments); now = llmc/run.h's: each rank reads its own
// state file and rank 0 the model file too, and the ranks pass the weights and shares round over
// their collectives (run_resume_gather; not timed here, it needs ranks). Rank 0 reads the most
// either way; "in all" is what the N ranks read together. Each is timed twice (before, now, now,
// before), the faster kept.
//
// --tables LIST picks the tables (default 1,2,3).
#include <chrono>
#include <fcntl.h>
#include <cmath>
#include <sstream>
#include <thread>
#include "../llmc/checkpoint.h"
#include "../llmc/checkpoint_writer.h"

// the replaced CRC-32: one table, a byte at a time (the same values as crc32_update)
static uint32_t crc32_bytewise(uint32_t crc, const void* data, size_t n) {
    const uint32_t* t = crc32_tables().t[0];
    const unsigned char* p = (const unsigned char*)data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = t[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

// the replaced writer: version 1, the whole moments, the payload's CRC-32 a byte at a time
static void write_state_v1(const std::string& path, const CheckpointState* s) {
    int64_t h[CHECKPOINT_STATE_HEADER_INTS] = {0};
    h[0] = CHECKPOINT_STATE_MAGIC; h[1] = 1; h[2] = s->step; h[3] = s->rank; h[4] = s->world_size;
    h[9] = (int64_t)s->settings.size(); h[10] = (int64_t)s->m.size(); h[11] = (int64_t)s->v.size();
    uint32_t crc = crc32_bytewise(0, s->settings.data(), s->settings.size());
    crc = crc32_bytewise(crc32_bytewise(crc, s->m.data(), s->m.size() * 4), s->v.data(), s->v.size() * 4);
    h[13] = crc;
    checkpoint_write_state_file(path, h, s);  // (no extras here: the payload version 1 had)
}

// drops a file's pages from the page cache, so the next read comes from the disk
static void drop_cache(const std::string& path) {
    int fd = open(path.c_str(), O_RDONLY);
    if (fd >= 0) { posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); close(fd); }
}

static long long path_bytes(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 ? (long long)st.st_size : 0;
}

// the values the tables write for P parameters: weights, m and v (varied, as a CRC-32 sees real values)
static void bench_values(size_t P, std::vector<float>* params, std::vector<float>* m, std::vector<float>* v) {
    params->resize(P); m->resize(P); v->resize(P);
    for (size_t i = 0; i < P; i++) {
        (*params)[i] = 1e-2f * (float)((int)(i % 997) - 498); (*m)[i] = 1e-3f * (float)((int)(i % 2003) - 1001); (*v)[i] = 1e-7f * (float)(i % 1999);
    }
}

// a folder of the table's own under --dir (removed by the table); one line and exit 1 if it cannot be made
static std::string bench_subdir(const std::string& dir, const char* table) {
    const std::string sub = dir + "/bench_checkpoint_" + table + "." + std::to_string((long long)getpid());
    if (mkdir(sub.c_str(), 0755) != 0) { fprintf(stderr, "error: --dir: cannot create '%s' (%s)\n", sub.c_str(), strerror(errno)); exit(1); }
    return sub;
}

// a table's comment (after a blank line), its header and the separator row, printed at once
static void print_table_head(const char* what, const std::vector<const char*>& columns) {
    printf("\n# %s\n|", what);
    for (const char* c : columns) printf(" %s |", c);
    printf("\n|");
    for (size_t k = 0; k < columns.size(); k++) printf("---|");
    printf("\n");
    fflush(stdout);
}

static std::vector<std::string> split_list(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream in(s);
    std::string x;
    while (std::getline(in, x, ',')) out.push_back(x);
    return out;
}

int main(int argc, char** argv) {
    std::string dir = "/tmp", presets = "llama300m,llama600m", ranks = "1,8,32", step_ms_s = "100", tables_s = "1,2,3";
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if ((a == "--dir" || a == "--presets" || a == "--ranks" || a == "--step-ms" || a == "--tables") && i + 1 < argc)
            (a == "--dir" ? dir : a == "--presets" ? presets : a == "--ranks" ? ranks : a == "--step-ms" ? step_ms_s : tables_s) = argv[++i];
        else { fprintf(stderr, "usage: bench_checkpoint [--dir DIR] [--presets LIST] [--ranks LIST] [--step-ms MS] [--tables LIST]\n"); return 2; }
    }
    bool table[4] = {false, false, false, false};
    for (const std::string& t : split_list(tables_s)) {
        if (t != "1" && t != "2" && t != "3") { fprintf(stderr, "error: --tables: expected a list of 1, 2 and 3, found '%s'\n", t.c_str()); return 1; }
        table[t[0] - '0'] = true;
    }
    if (tables_s.empty()) { fprintf(stderr, "error: --tables: expected a list of 1, 2 and 3, found ''\n"); return 1; }
    char* step_end = NULL;
    const double step_ms = strtod(step_ms_s.c_str(), &step_end);
    if (step_ms_s.empty() || *step_end || !(step_ms >= 1 && step_ms <= 60000)) {
        fprintf(stderr, "error: --step-ms: expected milliseconds from 1 to 60000, found '%s'\n", step_ms_s.c_str());
        return 1;
    }
    struct stat st;
    if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) { fprintf(stderr, "error: --dir: '%s' is not a directory\n", dir.c_str()); return 1; }
    std::vector<int> counts;
    for (const std::string& r : split_list(ranks)) {
        char* end = NULL;
        long n = strtol(r.c_str(), &end, 10);
        if (r.empty() || *end || n < 1 || n > 100000) { fprintf(stderr, "error: --ranks: expected rank counts from 1 to 100000, found '%s'\n", r.c_str()); return 1; }
        counts.push_back((int)n);
    }
    std::vector<std::pair<std::string, LlamaConfig>> configs;
    for (const std::string& name : split_list(presets)) {
        LlamaConfig c = {};
        if (!llama_preset(name.c_str(), &c)) { fprintf(stderr, "error: --presets: unknown preset '%s' (expected %s)\n", name.c_str(), LLAMA_PRESET_LIST); return 1; }
        configs.push_back({name, c});
    }
    if (table[1]) {
        printf("# dev/bench_checkpoint.cpp: a rank's state file at a checkpoint, in %s; v1 = all the moments a rank, CRC-32 a byte at a time;\n"
               "# v2 = llmc/checkpoint.h's: the rank's share, CRC-32 eight bytes at a time (write = CRC, write, fsync, rename)\n", dir.c_str());
        printf("| preset | params | ranks | v1 GB a rank | v1 s | v2 GB a rank | v2 s | v1 / v2 | state files GB a checkpoint, v1 -> v2 |\n|---|---|---|---|---|---|---|---|---|\n");
        fflush(stdout);
        for (const auto& [name, c] : configs) {
            size_t P = llama_num_params(&c);
            std::vector<float> m(P), v(P);
            for (size_t i = 0; i < P; i++) { m[i] = 1e-3f * (float)((int)(i % 2003) - 1001); v[i] = 1e-7f * (float)(i % 1999); }
            std::string path = dir + "/bench_checkpoint_state.bin";
            CheckpointState s;
            s.step = 1; s.rank = 0; s.world_size = 1; s.data_state[0] = s.data_state[1] = s.data_state[2] = 0; s.skipped_steps = 0;
            s.settings = "model_config=" + llama_config_string(&c) + "\n";
            // v1 does not depend on N: timed twice, once cold (the first write of the preset's size)
            // and once after a v2 write of the same size, the faster kept
            double v1_s = INFINITY;
            for (int rep = 0; rep < 2; rep++) {
                s.m = m; s.v = v;
                s.moments_begin = 0; s.moments_total = (int64_t)P;
                double t0 = checkpoint_writer_now();
                write_state_v1(path, &s);
                v1_s = std::min(v1_s, checkpoint_writer_now() - t0);
                remove(path.c_str());
                if (rep == 0) {
                    checkpoint_write_state(path, &s);
                    remove(path.c_str());
                }
            }
            for (int N : counts) {
                size_t b, e;
                checkpoint_moments_slice(P, 0, N, &b, &e);
                s.world_size = N;
                s.m.assign(m.begin() + b, m.begin() + e);
                s.v.assign(v.begin() + b, v.begin() + e);
                s.moments_begin = (int64_t)b; s.moments_total = (int64_t)P;
                double t0 = checkpoint_writer_now();
                checkpoint_write_state(path, &s);
                double v2_s = checkpoint_writer_now() - t0;
                remove(path.c_str());
                double g1 = 8.0 * P / 1e9, g2 = 8.0 * (e - b) / 1e9;
                printf("| %s | %zu | %d | %.2f | %.2f | %.3f | %.2f | %.1fx | %.1f -> %.1f |\n", name.c_str(), P, N, g1, v1_s, g2, v2_s, v1_s / v2_s,
                       g1 * N, 8.0 * P / 1e9);
                fflush(stdout);
            }
        }
    }

    // table 2: rank 0's checkpoint on the training loop, --checkpoint-async 0 against 1
    if (table[2]) {
        char what[256];
        snprintf(what, sizeof(what), "rank 0's checkpoint (model file + its share of the moments) on a training loop of %.0f ms idle steps, written by\n"
                 "# llmc/checkpoint_writer.h; held = the loop's time on it (copies; with --checkpoint-async 0 the writes too)", step_ms);
        print_table_head(what, {"preset", "ranks", "rank 0's files GB", "write s", "held s, async 0", "held s, async 1", "0 / 1", "steps the writes overlapped"});
        for (const auto& [name, c] : configs) {
            size_t P = llama_num_params(&c);
            std::vector<float> params, m, v;
            bench_values(P, &params, &m, &v);
            CheckpointWriter w;
            const std::string sub = bench_subdir(dir, "writer");
            for (int N : counts) {
                double held[2] = {0, 0}, write_s = 0;
                int overlapped = 0;
                size_t b, e;
                checkpoint_moments_slice(P, 0, N, &b, &e);
                for (int rep = 0; rep < 2; rep++) {  // the second timed
                    for (int async = 0; async < 2; async++) {
                        const int step = 1 + 2 * rep + async;
                        double t0 = checkpoint_writer_now();
                        checkpoint_writer_set_weights(&w, params.data(), P, async == 1);  // the copies the engines make
                        CheckpointState& st = w.state;
                        st.step = step; st.rank = 0; st.world_size = N; st.data_state[0] = st.data_state[1] = st.data_state[2] = 0; st.skipped_steps = 0;
                        st.settings = "model_config=" + llama_config_string(&c) + "\n";
                        st.m.assign(m.begin() + b, m.begin() + e);
                        st.v.assign(v.begin() + b, v.begin() + e);
                        st.moments_begin = (int64_t)b; st.moments_total = (int64_t)P;
                        w.model = true; w.config = c;
                        checkpoint_writer_start(&w, sub, step, async == 1);
                        held[async] = checkpoint_writer_now() - t0;
                        int steps = 0, status;
                        double waited;
                        while ((status = checkpoint_writer_status(&w, false, &waited)) == CHECKPOINT_WRITING) {
                            std::this_thread::sleep_for(std::chrono::microseconds((long long)(step_ms * 1e3)));
                            steps++;
                        }
                        if (status == CHECKPOINT_FAILED) { fprintf(stderr, "error: %s\n", w.error.c_str()); rmdir(sub.c_str()); return 1; }
                        if (async == 1) { write_s = w.write_seconds; overlapped = steps; }
                        w.step = -1;
                        remove(checkpoint_model_path(sub, step).c_str());
                        remove(checkpoint_state_path(sub, step, 0).c_str());
                    }
                }
                printf("| %s | %d | %.2f | %.2f | %.2f | %.2f | %.0fx | %d |\n", name.c_str(), N, 4.0 * P / 1e9 + 8.0 * (e - b) / 1e9, write_s, held[0], held[1],
                       held[0] / std::max(held[1], 1e-9), overlapped);
                fflush(stdout);
            }
            rmdir(sub.c_str());
        }
    }

    // table 3: a resume's reads, rank 0's, cold: every rank's files (before) against its own (now)
    if (table[3]) {
        print_table_head("a resume's reads from the disk (-y 1), rank 0's, the page cache dropped first; before = the model file and every\n"
                         "# rank's state file on every rank, now = its own state file, and on rank 0 the model file (llmc/run.h)",
                         {"preset", "ranks", "rank 0 reads GB, before", "before s", "rank 0 reads GB, now", "now s", "before / now",
                          "the ranks read GB in all, before -> now"});
        for (const auto& [name, c] : configs) {
            size_t P = llama_num_params(&c);
            std::vector<float> params, m, v;
            bench_values(P, &params, &m, &v);
            const std::string sub = bench_subdir(dir, "resume");
            const std::string model = checkpoint_model_path(sub, 1);
            checkpoint_write_model(model, &c, params.data(), 1);
            for (int N : counts) {
                for (int q = 0; q < N; q++) {  // the N ranks' state files, each with its share
                    CheckpointState st;
                    size_t b, e;
                    checkpoint_moments_slice(P, q, N, &b, &e);
                    st.step = 1; st.rank = q; st.world_size = N; st.data_state[0] = st.data_state[1] = st.data_state[2] = 0; st.skipped_steps = 0;
                    st.settings = "model_config=" + llama_config_string(&c) + "\n";
                    st.m.assign(m.begin() + b, m.begin() + e);
                    st.v.assign(v.begin() + b, v.begin() + e);
                    st.moments_begin = (int64_t)b; st.moments_total = (int64_t)P;
                    checkpoint_write_state(checkpoint_state_path(sub, 1, q), &st);
                }
                double secs[2] = {INFINITY, INFINITY}, gb[2];
                for (int k = 0; k < 4; k++) {  // before, now, now, before (a drift of the disk falls on both): the faster of each kept
                    const int now = k == 1 || k == 2;
                    drop_cache(model);
                    for (int q = 0; q < N; q++) drop_cache(checkpoint_state_path(sub, 1, q));
                    std::vector<float> back;
                    std::string why;
                    bool differs = false, ok = true;
                    double t0 = checkpoint_writer_now();
                    long long bytes = 0;
                    for (int q = 0; q < (now ? 1 : N); q++) {  // its own state file first, as run_check_checkpoint reads it
                        CheckpointState st;
                        std::string path = checkpoint_state_path(sub, 1, q);
                        ok = ok && checkpoint_try_read_state(path, &st, &why);
                        bytes += path_bytes(path);
                        if (q == 0) { ok = ok && checkpoint_try_read_model(model, &c, 1, &back, &why, &differs); bytes += path_bytes(model); }
                    }
                    secs[now] = std::min(secs[now], checkpoint_writer_now() - t0);
                    gb[now] = bytes / 1e9;
                    if (!ok) { fprintf(stderr, "error: the bench's checkpoint in '%s' did not read back: %s\n", sub.c_str(), why.c_str()); return 1; }
                }
                long long once = path_bytes(model);  // now every file is read once, by its rank
                for (int q = 0; q < N; q++) once += path_bytes(checkpoint_state_path(sub, 1, q));
                printf("| %s | %d | %.2f | %.2f | %.2f | %.2f | %.1fx | %.1f -> %.1f |\n", name.c_str(), N, gb[0], secs[0], gb[1], secs[1],
                       secs[0] / std::max(secs[1], 1e-9), gb[0] * N, once / 1e9);
                fflush(stdout);
                for (int q = 0; q < N; q++) remove(checkpoint_state_path(sub, 1, q).c_str());
            }
            remove(model.c_str());
            rmdir(sub.c_str());
        }
    }

    return 0;
}
