// bench_checkpoint.cpp — what writing its state file costs each rank of a data-parallel run at
// a checkpoint, version 1 against version 2 of the file (llmc/checkpoint.h), on this machine's
// disk. v1 = the version replaced: every rank wrote all the optimizer moments (m and v, 8 bytes a
// parameter) and took their CRC-32 a byte at a time; v2 = llmc/'s: each rank writes its 1/N
// share of them, its CRC-32 eight bytes at a time. Both rows write the same header and settings,
// with fsync and rename (checkpoint_file_commit), and time it end to end; the bytes on the file
// system a checkpoint are N times a rank's (v1) or the moments once (v2). v1 is timed twice
// (the faster kept: the first write of a size pays the page cache's turnover); a row is printed
// as it completes; the files are removed. One process stands for one rank (the others write
// their shares beside it).
// Usage: build/bench_checkpoint [--dir DIR] [--presets LIST] [--ranks LIST]
//   --dir      where the files go (default /tmp)
//   --presets  comma list of llama.h presets (default llama300m,llama600m)
//   --ranks    comma list of rank counts (default 1,8,32)
#include <chrono>
#include <cmath>
#include <sstream>
#include "../llmc/checkpoint.h"

static double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

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

static std::vector<std::string> split_list(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream in(s);
    std::string x;
    while (std::getline(in, x, ',')) out.push_back(x);
    return out;
}

int main(int argc, char** argv) {
    std::string dir = "/tmp", presets = "llama300m,llama600m", ranks = "1,8,32";
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if ((a == "--dir" || a == "--presets" || a == "--ranks") && i + 1 < argc) (a == "--dir" ? dir : a == "--presets" ? presets : ranks) = argv[++i];
        else { fprintf(stderr, "usage: bench_checkpoint [--dir DIR] [--presets LIST] [--ranks LIST]\n"); return 2; }
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
    printf("# dev/bench_checkpoint.cpp: a rank's state file at a checkpoint, in %s; v1 = all the moments a rank, CRC-32 a byte at a time;\n"
           "# v2 = llmc/checkpoint.h's: the rank's share, CRC-32 eight bytes at a time (write = CRC, write, fsync, rename)\n", dir.c_str());
    printf("| preset | params | ranks | v1 GB a rank | v1 s | v2 GB a rank | v2 s | v1 / v2 | state files GB a checkpoint, v1 -> v2 |\n|---|---|---|---|---|---|---|---|---|\n");
    fflush(stdout);
    for (const std::string& name : split_list(presets)) {
        LlamaConfig c = {};
        if (!llama_preset(name.c_str(), &c)) { fprintf(stderr, "error: --presets: unknown preset '%s' (expected %s)\n", name.c_str(), LLAMA_PRESET_LIST); return 1; }
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
            double t0 = now_s();
            write_state_v1(path, &s);
            v1_s = std::min(v1_s, now_s() - t0);
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
            double t0 = now_s();
            checkpoint_write_state(path, &s);
            double v2_s = now_s() - t0;
            remove(path.c_str());
            double g1 = 8.0 * P / 1e9, g2 = 8.0 * (e - b) / 1e9;
            printf("| %s | %zu | %d | %.2f | %.2f | %.3f | %.2f | %.1fx | %.1f -> %.1f |\n", name.c_str(), P, N, g1, v1_s, g2, v2_s, v1_s / v2_s,
                   g1 * N, 8.0 * P / 1e9);
            fflush(stdout);
        }
    }
    return 0;
}
