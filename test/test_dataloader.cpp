// test_dataloader.cpp — llmc/dataloader.h and llmc/tokenizer.h.
// Batches are checked against positions computed here from the documented order (rounds of
// B*T*ranks per shard, rank r at offset r*B*T, next shard when a round no longer fits), on
// shards whose token values encode (shard, index). Bad inputs run in a forked child with
// stderr captured: exit status 1, exactly one line, naming the flag and file.
// Build: g++ -O2 -std=c++17 -fopenmp -Wall -Wextra test/test_dataloader.cpp -o build/test_dataloader -lm
#include <sys/wait.h>
#include <unistd.h>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>
#include "../llmc/dataloader.h"
#include "../llmc/tokenizer.h"
#include "test_util.h"

static const int VOCAB = 50257;
static std::string tmp_dir;

static std::string tmp_path(const std::string& name) { return tmp_dir + "/" + name; }

// Writes an llm.c shard; magic, version, the header count and the number of tokens actually
// written can each be set wrong on purpose.
static void write_shard(const std::string& path, const std::vector<uint16_t>& tokens,
                        int32_t magic = DATA_SHARD_MAGIC, int32_t version = DATA_SHARD_VERSION,
                        long long header_count = -1, long long write_count = -1) {
    int32_t header[DATA_SHARD_HEADER_INTS] = {0};
    header[0] = magic;
    header[1] = version;
    header[2] = (int32_t)(header_count >= 0 ? header_count : (long long)tokens.size());
    size_t n = write_count >= 0 ? (size_t)write_count : tokens.size();
    FILE* f = fopen_check(path.c_str(), "wb");
    fwrite_check(header, sizeof(int32_t), DATA_SHARD_HEADER_INTS, f);
    if (n > 0) fwrite_check(tokens.data(), sizeof(uint16_t), n, f);
    fclose_check(f);
}

// Token i of shard s has value s*1000 + i % 1000, so a value tells where it came from.
static std::vector<uint16_t> shard_tokens_for(int s, size_t n) {
    std::vector<uint16_t> t(n);
    for (size_t i = 0; i < n; i++) t[i] = (uint16_t)(s * 1000 + i % 1000);
    return t;
}

struct Pos { int shard; size_t pos; int epoch; };

// The documented order, written independently of the loader: every rank's read positions.
static std::vector<Pos> expected_positions(const std::vector<size_t>& counts, size_t B, size_t T,
                                           int rank, int ranks, int epochs) {
    std::vector<Pos> out;
    size_t round = B * T * ranks;
    for (int e = 0; e < epochs; e++) {
        for (int s = 0; s < (int)counts.size(); s++) {
            for (size_t start = 0; start + round + 1 <= counts[s]; start += round) {
                out.push_back({s, start + rank * B * T, e});
            }
        }
    }
    return out;
}

static bool batch_matches(const DataLoader& l, const std::vector<std::vector<uint16_t>>& shards, const Pos& p) {
    size_t BT = l.B * l.T;
    for (size_t i = 0; i < BT; i++) {
        if (l.inputs[i] != shards[p.shard][p.pos + i]) return false;
        if (l.targets[i] != shards[p.shard][p.pos + i + 1]) return false;
    }
    return true;
}

// ----------------------------------------------------------------------------
// forked child runs

struct ChildResult { int status; std::string err; std::string out; };

// Runs fn in a child process and returns its exit status (-1 if it did not exit normally),
// its stderr and its stdout.
static ChildResult run_child(const std::function<void()>& fn) {
    fflush(stdout);
    fflush(stderr);
    int err_pipe[2], out_pipe[2];
    if (pipe(err_pipe) != 0 || pipe(out_pipe) != 0) { perror("pipe"); exit(2); }
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); exit(2); }
    if (pid == 0) {
        dup2(err_pipe[1], 2);
        dup2(out_pipe[1], 1);
        close(err_pipe[0]); close(err_pipe[1]);
        close(out_pipe[0]); close(out_pipe[1]);
        fn();
        fflush(stdout);
        fflush(stderr);
        _exit(0);
    }
    close(err_pipe[1]);
    close(out_pipe[1]);
    ChildResult r;
    // drain both pipes until closed (outputs here are tiny; read stderr first, then stdout)
    char buf[4096];
    ssize_t n;
    while ((n = read(err_pipe[0], buf, sizeof(buf))) > 0) r.err.append(buf, (size_t)n);
    while ((n = read(out_pipe[0], buf, sizeof(buf))) > 0) r.out.append(buf, (size_t)n);
    close(err_pipe[0]);
    close(out_pipe[0]);
    int wstatus = 0;
    waitpid(pid, &wstatus, 0);
    r.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
    return r;
}

static bool one_line(const std::string& s) {
    return !s.empty() && s.back() == '\n' && s.find('\n') == s.size() - 1;
}

// A user error: exit 1, one line starting "error: ", containing every string in `needles`.
static void check_user_error(const char* name, const std::function<void()>& fn,
                             const std::vector<std::string>& needles) {
    ChildResult r = run_child(fn);
    bool ok = r.status == 1 && one_line(r.err) && r.err.rfind("error: ", 0) == 0;
    std::string missing;
    for (const std::string& n : needles) {
        if (r.err.find(n) == std::string::npos) { ok = false; missing += " '" + n + "'"; }
    }
    std::string shown = r.err;
    while (!shown.empty() && shown.back() == '\n') shown.pop_back();
    test_check(name, ok, "exit %d, stderr [%s]%s%s", r.status, shown.c_str(),
               missing.empty() ? "" : ", missing", missing.c_str());
}

static void init_and_read(const std::string& pattern, size_t B, size_t T, int rank, int ranks, int batches) {
    DataLoader l;
    dataloader_init(&l, pattern.c_str(), "-i", B, T, rank, ranks, VOCAB);
    for (int i = 0; i < batches; i++) dataloader_next_batch(&l);
    dataloader_free(&l);
}

// ----------------------------------------------------------------------------

static void test_batches(void) {
    // three shards, globbed out of order on purpose; a non-matching file sits beside them
    // 64 = 4 rounds of 16 exactly (only 3 fit, each needs 17 tokens), 49 = 3*16 + 1 (3 fit)
    std::vector<size_t> counts = {100, 64, 49};
    std::vector<std::vector<uint16_t>> shards;
    for (int s = 0; s < 3; s++) {
        shards.push_back(shard_tokens_for(s, counts[s]));
        char name[64];
        snprintf(name, sizeof(name), "seq_train_%06d.bin", s + 1);
        write_shard(tmp_path(name), shards[s]);
    }
    write_shard(tmp_path("seq_val_000000.bin"), shard_tokens_for(9, 50));
    std::string pattern = tmp_path("seq_train_*.bin");
    const size_t B = 2, T = 8;

    DataLoader l;
    dataloader_init(&l, pattern.c_str(), "-i", B, T, 0, 1, VOCAB);
    test_check("dataloader_counts", l.num_shards == 3 && l.total_tokens == 213 && l.epoch == 0 &&
               l.num_batches == 6 + 3 + 3,
               "num_shards %d total_tokens %zu num_batches %zu", l.num_shards, l.total_tokens, l.num_batches);

    // the first batch, spelled out: inputs 0..15, targets 1..16 of shard 0
    dataloader_next_batch(&l);
    bool first = true;
    for (int i = 0; i < 16; i++) first = first && l.inputs[i] == i && l.targets[i] == i + 1;
    test_check("dataloader_first_batch", first, "inputs[0]=%d targets[15]=%d", l.inputs[0], l.targets[15]);
    dataloader_reset(&l);

    // two full epochs over all shards, each batch against the independently computed position;
    // shard 0 holds 6 rounds (80 + 17 <= 100), shards 1 and 2 hold 3 each
    std::vector<Pos> want = expected_positions(counts, B, T, 0, 1, 2);
    bool all = want.size() == 24;
    int bad = -1;
    bool after_ok = true;  // dataloader_state_after(k): where k batches from the start lead
    for (size_t k = 0; k < want.size() && all; k++) {
        int64_t st[3], at[3];
        dataloader_get_state(&l, st);
        dataloader_state_after(&l, (long long)k, at);
        after_ok = after_ok && at[0] == want[k].shard && (size_t)at[1] == want[k].pos && at[2] == want[k].epoch;
        if (st[0] != want[k].shard || (size_t)st[1] != want[k].pos || st[2] != want[k].epoch) { all = false; bad = (int)k; break; }
        dataloader_next_batch(&l);
        if (!batch_matches(l, shards, want[k])) { all = false; bad = (int)k; }
    }
    test_check("dataloader_order_two_epochs", all, "%zu expected batches, first mismatch at batch %d", want.size(), bad);
    {
        int64_t at[3];
        dataloader_state_after(&l, (long long)want.size(), at);  // two whole epochs: shard 0, position 0, epoch 2
        test_check("dataloader_state_after_batches", after_ok && at[0] == 0 && at[1] == 0 && at[2] == 2,
                   "state after %zu batches {%lld,%lld,%lld}", want.size(), (long long)at[0], (long long)at[1], (long long)at[2]);
    }
    test_check("dataloader_epoch_wrap", l.epoch == 2 && l.current_shard == 0 && l.current_position == 0,
               "epoch %d shard %d position %zu", l.epoch, l.current_shard, l.current_position);
    // batch 7 (index 6) is the first of shard 1: a shard switch, not a read past shard 0's end
    dataloader_reset(&l);
    for (int i = 0; i < 7; i++) dataloader_next_batch(&l);
    test_check("dataloader_shard_switch", l.inputs[0] == 1000 && l.targets[15] == 1016 && l.epoch == 0,
               "inputs[0]=%d targets[15]=%d", l.inputs[0], l.targets[15]);

    // reset restarts the sequence
    dataloader_reset(&l);
    dataloader_next_batch(&l);
    test_check("dataloader_reset", batch_matches(l, shards, want[0]) && l.epoch == 0, "first batch differs after reset");

    // get/set state round trip: stop mid-shard after a shard switch, resume in a fresh loader
    dataloader_reset(&l);
    for (int i = 0; i < 8; i++) dataloader_next_batch(&l);
    int64_t state[3];
    dataloader_get_state(&l, state);
    std::vector<int> seq_a, seq_b;
    for (int i = 0; i < 20; i++) {
        dataloader_next_batch(&l);
        seq_a.insert(seq_a.end(), l.inputs, l.inputs + B * T);
        seq_a.insert(seq_a.end(), l.targets, l.targets + B * T);
    }
    int epoch_a = l.epoch;
    DataLoader l2;
    dataloader_init(&l2, pattern.c_str(), "-i", B, T, 0, 1, VOCAB);
    dataloader_next_batch(&l2);  // move it elsewhere first, so set_state must actually move it
    dataloader_set_state(&l2, state);
    for (int i = 0; i < 20; i++) {
        dataloader_next_batch(&l2);
        seq_b.insert(seq_b.end(), l2.inputs, l2.inputs + B * T);
        seq_b.insert(seq_b.end(), l2.targets, l2.targets + B * T);
    }
    test_check("dataloader_state_roundtrip", state[0] == 1 && state[1] == 32 && seq_a == seq_b && epoch_a == l2.epoch,
               "state {%lld,%lld,%lld}, sequences %s, epochs %d vs %d", (long long)state[0], (long long)state[1],
               (long long)state[2], seq_a == seq_b ? "equal" : "differ", epoch_a, l2.epoch);
    dataloader_free(&l2);
    dataloader_free(&l);

    // two ranks: each round, rank 0's batch then rank 1's batch is the one-rank batch with 2B rows
    DataLoader r0, r1, one;
    dataloader_init(&r0, pattern.c_str(), "-i", B, T, 0, 2, VOCAB);
    dataloader_init(&r1, pattern.c_str(), "-i", B, T, 1, 2, VOCAB);
    dataloader_init(&one, pattern.c_str(), "-i", 2 * B, T, 0, 1, VOCAB);
    std::vector<Pos> w0 = expected_positions(counts, B, T, 0, 2, 2);
    std::vector<Pos> w1 = expected_positions(counts, B, T, 1, 2, 2);
    bool ranks_ok = r0.num_batches == r1.num_batches && r0.num_batches == one.num_batches &&
                    w0.size() == 2 * r0.num_batches && r0.num_batches == 3 + 1 + 1;
    bool union_ok = true;
    size_t BT = B * T;
    for (size_t k = 0; k < w0.size() && ranks_ok; k++) {
        dataloader_next_batch(&r0);
        dataloader_next_batch(&r1);
        dataloader_next_batch(&one);
        ranks_ok = ranks_ok && batch_matches(r0, shards, w0[k]) && batch_matches(r1, shards, w1[k]) &&
                   w1[k].pos == w0[k].pos + BT;
        for (size_t i = 0; i < BT; i++) {
            union_ok = union_ok && one.inputs[i] == r0.inputs[i] && one.inputs[BT + i] == r1.inputs[i] &&
                       one.targets[i] == r0.targets[i] && one.targets[BT + i] == r1.targets[i];
        }
    }
    test_check("dataloader_two_ranks_positions", ranks_ok, "num_batches %zu/%zu/%zu", r0.num_batches,
               r1.num_batches, one.num_batches);
    test_check("dataloader_two_ranks_union", union_ok, "rank batches do not tile the 2B batch");
    test_check("dataloader_two_ranks_epoch", r0.epoch == 2 && r1.epoch == 2 && one.epoch == 2,
               "epochs %d %d %d", r0.epoch, r1.epoch, one.epoch);
    dataloader_free(&r0);
    dataloader_free(&r1);
    dataloader_free(&one);
}

// The fingerprint covers content: a shard with the same name and size but other tokens (two
// tokens swapped) reads differently, both when read whole (small shards) and when sampled (a
// shard over DATA_SAMPLE_WHOLE_BYTES, changed inside a sampled block); a bad token inside the
// sample of a shard that is not loaded yet is refused at init.
static void test_fingerprint(void) {
    const size_t B = 2, T = 8;
    auto fingerprint = [&](const std::string& pattern) {
        DataLoader l;
        dataloader_init(&l, pattern.c_str(), "-i", B, T, 0, 1, VOCAB);
        std::string f = dataloader_fingerprint(&l);
        dataloader_free(&l);
        return f;
    };
    std::vector<uint16_t> small = shard_tokens_for(0, 1000);
    write_shard(tmp_path("fp_small_000.bin"), small);
    std::string a = fingerprint(tmp_path("fp_small_*.bin"));
    std::swap(small[500], small[501]);
    write_shard(tmp_path("fp_small_000.bin"), small);
    std::string b = fingerprint(tmp_path("fp_small_*.bin"));
    test_check("dataloader_fingerprint_small_content", a != b && a.substr(0, a.find("crc")) == b.substr(0, b.find("crc")), "%s vs %s", a.c_str(), b.c_str());

    // 4.5M tokens (9 MB): sampled; block k of 256 starts at k/255 of (count - 2048)
    size_t n = 4500000;
    std::vector<uint16_t> big(n);
    for (size_t i = 0; i < n; i++) big[i] = (uint16_t)(i % 50000);
    write_shard(tmp_path("fp_big_000.bin"), big);
    std::string c = fingerprint(tmp_path("fp_big_*.bin"));
    size_t in_block = (size_t)((double)(n - DATA_SAMPLE_BLOCK_TOKENS) * 100 / (DATA_SAMPLE_BLOCKS - 1)) + 7;
    std::swap(big[in_block], big[in_block + 1]);
    write_shard(tmp_path("fp_big_000.bin"), big);
    std::string d = fingerprint(tmp_path("fp_big_*.bin"));
    test_check("dataloader_fingerprint_sampled_content", c != d, "%s vs %s", c.c_str(), d.c_str());
    big[in_block] = 60000;  // >= VOCAB, in the second shard, which init never loads
    write_shard(tmp_path("fp_big_001.bin"), big);
    check_user_error("dataloader_bad_token_in_sample_at_init", [&] { fingerprint(tmp_path("fp_big_*.bin")); },
                     {"-i", "fp_big_001.bin", "token " + std::to_string(in_block) + " has id 60000"});
    remove(tmp_path("fp_big_000.bin").c_str());
    remove(tmp_path("fp_big_001.bin").c_str());
}

static void test_bad_inputs(void) {
    const size_t B = 2, T = 8;
    std::vector<uint16_t> good = shard_tokens_for(0, 100);

    std::string none = tmp_path("nothing_*.bin");
    check_user_error("dataloader_error_no_match", [&] { init_and_read(none, B, T, 0, 1, 1); },
                     {"-i", none, "no file matches"});

    std::string p = tmp_path("magic_000000.bin");
    write_shard(p, good, 12345);
    check_user_error("dataloader_error_magic", [&] { init_and_read(p, B, T, 0, 1, 1); },
                     {"-i", p, "12345", "20240520"});

    p = tmp_path("version_000000.bin");
    write_shard(p, good, DATA_SHARD_MAGIC, 7);
    check_user_error("dataloader_error_version", [&] { init_and_read(p, B, T, 0, 1, 1); },
                     {"-i", p, "version 7", "expected 1"});

    p = tmp_path("truncated_000000.bin");
    write_shard(p, good, DATA_SHARD_MAGIC, DATA_SHARD_VERSION, 100, 90);
    check_user_error("dataloader_error_truncated", [&] { init_and_read(p, B, T, 0, 1, 1); },
                     {"-i", p, "1204 bytes", "1224", "truncated"});

    p = tmp_path("oversized_000000.bin");
    write_shard(p, good, DATA_SHARD_MAGIC, DATA_SHARD_VERSION, 80, 100);
    check_user_error("dataloader_error_oversized", [&] { init_and_read(p, B, T, 0, 1, 1); },
                     {"-i", p, "1224 bytes", "1184", "oversized"});

    p = tmp_path("header_only_000000.bin");
    {
        FILE* f = fopen_check(p.c_str(), "wb");  // shorter than the header itself
        fwrite_check("xyz", 1, 3, f);
        fclose_check(f);
    }
    check_user_error("dataloader_error_short_header", [&] { init_and_read(p, B, T, 0, 1, 1); },
                     {"-i", p, "3 bytes", "1024"});

    std::vector<uint16_t> bad = good;
    bad[37] = 50300;
    p = tmp_path("badtoken_000000.bin");
    write_shard(p, bad);
    check_user_error("dataloader_error_token_range", [&] { init_and_read(p, B, T, 0, 1, 1); },
                     {"-i", p, "token 37", "50300", "50257"});

    // a bad token in the second shard is caught when the loader switches to it
    std::string q = tmp_path("late_000001.bin");
    write_shard(tmp_path("late_000000.bin"), good);
    std::vector<uint16_t> bad2 = shard_tokens_for(1, 100);
    bad2[99] = 60000;
    write_shard(q, bad2);
    check_user_error("dataloader_error_token_range_later_shard",
                     [&] { init_and_read(tmp_path("late_*.bin"), B, T, 0, 1, 100); },
                     {"-i", q, "token 99", "60000"});

    // B*T*ranks+1 = 2*8*2+1 = 33 tokens needed, the shard has 32
    p = tmp_path("small_000000.bin");
    write_shard(p, shard_tokens_for(0, 32));
    check_user_error("dataloader_error_batch_larger_than_shard", [&] { init_and_read(p, B, T, 1, 2, 1); },
                     {"-i", p, "32 tokens", "B=2", "T=8", "ranks=2", "33"});
    // with one rank the same shard is fine
    ChildResult ok = run_child([&] { init_and_read(p, B, T, 0, 1, 5); });
    test_check("dataloader_small_shard_one_rank_ok", ok.status == 0 && ok.err.empty(),
               "exit %d stderr [%s]", ok.status, ok.err.c_str());

    p = tmp_path("state_000000.bin");
    write_shard(p, good);
    check_user_error("dataloader_error_state_range", [&] {
        DataLoader l;
        dataloader_init(&l, p.c_str(), "-i", B, T, 0, 1, VOCAB);
        int64_t st[3] = {0, 90, 0};  // 90 + 16 + 1 > 100
        dataloader_set_state(&l, st);
    }, {"-i", p, "90", "100 tokens"});
    check_user_error("dataloader_error_state_shard", [&] {
        DataLoader l;
        dataloader_init(&l, p.c_str(), "-i", B, T, 0, 1, VOCAB);
        int64_t st[3] = {3, 0, 0};
        dataloader_set_state(&l, st);
    }, {"-i", "shard 3"});
}

static void test_tokenizer(void) {
    const char* path = "data/gpt2_tokenizer.bin";
    if (access(path, R_OK) != 0) path = "../data/gpt2_tokenizer.bin";
    Tokenizer tok;
    tokenizer_init(&tok, path);
    test_check("tokenizer_load", tok.ok == 1 && tok.vocab_size == 50257 && tok.eot_token == 50256,
               "ok %d vocab %u eot %u (path %s)", tok.ok, tok.vocab_size, tok.eot_token, path);
    if (tok.ok) {
        struct { uint32_t id; const char* text; } known[] = {
            {15496, "Hello"}, {995, " world"}, {50256, "<|endoftext|>"}, {262, " the"}, {11, ","}, {198, "\n"},
        };
        for (auto& k : known) {
            const char* got = tokenizer_decode(&tok, k.id);
            char name[64];
            snprintf(name, sizeof(name), "tokenizer_decode_%u", k.id);
            test_check(name, got != NULL && strcmp(got, k.text) == 0, "got [%s] expected [%s]",
                       got ? got : "(null)", k.text);
        }
    }
    test_check("tokenizer_decode_out_of_range", tokenizer_decode(&tok, 50257) == NULL, "expected NULL");
    tokenizer_free(&tok);

    // missing and malformed tables: ok = 0, one warning line, no exit
    std::string missing = tmp_path("no_such_tokenizer.bin");
    ChildResult r = run_child([&] {
        Tokenizer t;
        tokenizer_init(&t, missing.c_str());
        printf("ok=%d decode=%s\n", t.ok, tokenizer_decode(&t, 5) == NULL ? "null" : "set");
        tokenizer_free(&t);
    });
    test_check("tokenizer_missing_file", r.status == 0 && one_line(r.err) && r.err.find(missing) != std::string::npos &&
               r.out == "ok=0 decode=null\n", "exit %d stderr [%s] stdout [%s]", r.status, r.err.c_str(), r.out.c_str());

    std::string badmagic = tmp_path("bad_tokenizer.bin");
    {
        uint32_t header[256] = {0};
        header[0] = 1234;
        header[1] = 2;
        FILE* f = fopen_check(badmagic.c_str(), "wb");
        fwrite_check(header, sizeof(uint32_t), 256, f);
        fclose_check(f);
    }
    r = run_child([&] {
        Tokenizer t;
        tokenizer_init(&t, badmagic.c_str());
        printf("ok=%d\n", t.ok);
        tokenizer_free(&t);
    });
    test_check("tokenizer_bad_magic", r.status == 0 && one_line(r.err) && r.err.find("1234") != std::string::npos &&
               r.out == "ok=0\n", "exit %d stderr [%s] stdout [%s]", r.status, r.err.c_str(), r.out.c_str());

    std::string badversion = tmp_path("bad_version_tokenizer.bin");
    {
        uint32_t header[256] = {0};
        header[0] = TOKENIZER_MAGIC;
        header[1] = 9;
        header[2] = 10;
        FILE* f = fopen_check(badversion.c_str(), "wb");
        fwrite_check(header, sizeof(uint32_t), 256, f);
        fclose_check(f);
    }
    r = run_child([&] {
        Tokenizer t;
        tokenizer_init(&t, badversion.c_str());
        printf("ok=%d\n", t.ok);
        tokenizer_free(&t);
    });
    test_check("tokenizer_bad_version", r.status == 0 && one_line(r.err) && r.err.find("version") != std::string::npos &&
               r.out == "ok=0\n", "exit %d stderr [%s] stdout [%s]", r.status, r.err.c_str(), r.out.c_str());

    // control bytes dropped, whitespace and UTF-8 bytes kept
    r = run_child([] { tokenizer_print_safe("a\x01" "b\x1b\t\xc3\xa9\n"); tokenizer_print_safe(NULL); });
    test_check("tokenizer_print_safe", r.status == 0 && r.out == "ab\t\xc3\xa9\n", "stdout [%s]", r.out.c_str());
}

static void remove_tmp_dir(void) {
    glob_t g;
    std::string pattern = tmp_dir + "/*";
    if (glob(pattern.c_str(), 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) remove(g.gl_pathv[i]);
        globfree(&g);
    }
    rmdir(tmp_dir.c_str());
}

int main(void) {
    char dir_template[] = "/tmp/test_dataloader_XXXXXX";
    if (mkdtemp(dir_template) == NULL) { perror("mkdtemp"); return 1; }
    tmp_dir = dir_template;
    test_batches();
    test_fingerprint();
    test_bad_inputs();
    test_tokenizer();
    remove_tmp_dir();
    return test_exit_code();
}
