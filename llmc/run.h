// run.h — the host-side plumbing both trainers share (host only): resolving the model config
// and the batch from the flags, the settings text ranks and checkpoints must agree on, finding
// and validating the resume point, and small helpers of the main loop (timing, the config table,
// sampling a token). Every check here is a user_error before anything is written.
#pragma once
#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>
#include "checkpoint.h"
#include "checkpoint_writer.h"
#include "dataloader.h"
#include "gradcomm_common.h"
#include "llama.h"
#include "logger.h"
#include "train_config.h"
#include "utils.h"
#include "watchdog.h"

// --prompt-tokens as ids (train_config_parse checked the syntax); <|endoftext|> alone when unset
// (run_sample_first_tokens).
static inline std::vector<int> run_prompt_tokens(const TrainConfig* tc) {
    std::vector<int> ids;
    const char* at = tc->prompt_tokens.c_str();
    while (*at) {
        char* end = NULL;
        ids.push_back((int)strtol(at, &end, 10));
        at = *end ? end + 1 : end;
    }
    return ids;
}

// The model config from -e (a preset or a checkpoint file), -t checked against it, and -d
// checked against B*T*ranks. Returns the micro-steps per optimizer step; sets *from_file.
static inline int run_resolve_config(TrainConfig* tc, LlamaConfig* lc, int world_size, bool* from_file) {
    *from_file = !llama_preset(tc->model.c_str(), lc);
    if (*from_file) checkpoint_read_model_header(tc->model.c_str(), "-e", lc, NULL);
    if (tc->vocab_size > 0 && *from_file && tc->vocab_size != lc->V)
        user_error("--vocab-size: the checkpoint '%s' has a vocabulary of %d, found --vocab-size %d (hint: leave --vocab-size out with a checkpoint)",
                   tc->model.c_str(), lc->V, tc->vocab_size);
    if (tc->vocab_size > 0) { lc->V = tc->vocab_size; lc->Vp = llama_padded_vocab(lc->V); }
    for (int id : run_prompt_tokens(tc))
        if (id >= lc->V) user_error("--prompt-tokens: token id %d, expected < the model's vocabulary size %d", id, lc->V);
    if (tc->T == 0) tc->T = lc->T;
    if (tc->T > lc->T) user_error("-t: expected at most the model's maximum sequence length %d, found %d", lc->T, tc->T);
    // the layers index a micro-batch's tokens with int: B*T must fit (64-bit products below)
    if ((long long)tc->B * tc->T > INT_MAX)
        user_error("-b, -t: B*T = %d*%d = %lld tokens per micro-batch, expected at most %d (hint: lower -b and raise -d)",
                   tc->B, tc->T, (long long)tc->B * tc->T, INT_MAX);
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

// -e FILE: its weights, read and CRC-checked before anything is written (none for a preset);
// *crc is their CRC-32, which the ranks compare (run_check_same_model_file).
static inline std::vector<float> run_read_model_file(const TrainConfig* tc, const LlamaConfig* lc, bool from_file, uint32_t* crc) {
    std::vector<float> params;
    *crc = 0;
    if (!from_file) return params;
    params.resize(llama_num_params(lc));
    *crc = checkpoint_read_model(tc->model.c_str(), "-e", lc, params.data());
    return params;
}

// The train and (with -v) val loaders of this process's logical ranks `first` to `last` - 1
// (logical rank rank0 + v reads train[v]), every one over the same files. Logical rank 0's are made
// first and alone: the start-up checks read them, and the others (each a copy of the current
// shard) only once --virtual-ranks' memory check has passed, so that a count too large for the
// node is refused at once instead of after V loaders have filled its memory.
static inline void run_open_loaders(const TrainConfig* tc, int vocab, int rank0, int N, int first, int last,
                                    std::vector<DataLoader>* train, std::vector<DataLoader>* val) {
    for (int v = first; v < last; v++) {
        dataloader_init(&(*train)[v], tc->train_data.c_str(), "-i", tc->B, tc->T, rank0 + v, N, vocab);
        if (tc->val_every > 0) dataloader_init(&(*val)[v], tc->val_data.c_str(), "-j", tc->B, tc->T, rank0 + v, N, vocab);
    }
}

// -x -1 (one epoch) and -u -1 (1% of the steps), once the data is known.
static inline void run_resolve_steps(TrainConfig* tc, const DataLoader* train) {
    if (tc->steps == -1) tc->steps = (int)std::max(1LL, (long long)(train->total_tokens / tc->total_batch));
    if (tc->warmup == -1) tc->warmup = tc->steps / 100;
}

// The settings a resumed run compares with its checkpoint (ranks = false: the OPT_RUN flags)
// or the ranks of one job compare with each other (ranks = true: every flag), plus
// fingerprints of the data files (names, sizes, content samples; the val files only between ranks). Both engines write the same
// text, so either can resume the other's checkpoint.
static inline std::string run_settings(const TrainConfig* tc, const LlamaConfig* lc, int world_size,
                                       const DataLoader* train, const DataLoader* val_or_null, bool ranks) {
    // the val data shapes no step: it may change on resume, like -v, but the ranks must agree on it
    return train_config_settings(tc, llama_config_string(lc), world_size, ranks) +
           "train_files=" + dataloader_fingerprint(train) + "\n" +
           (ranks ? "val_files=" + (val_or_null ? dataloader_fingerprint(val_or_null) : std::string("off")) + "\n" : std::string());
}

// ----------------------------------------------------------------------------
// start-up checks every rank takes together

// The few collectives the start-up checks need, from either engine (MPI or NCCL), so both
// share one path and every rank of a job calls the same collectives in the same order.
typedef struct {
    int rank, world_size;
    void* ctx;
    int (*max_int)(void* ctx, int x);                          // max over ranks; also a barrier
    std::string (*broadcast)(void* ctx, const std::string& s);  // rank 0's string on every rank
    void (*finalize)(void* ctx);                               // before exiting on an error
    void (*broadcast_floats)(void* ctx, float* x, size_t n, int root);  // root's x[0, n) on every rank (a resume's weights and moments)
} RunRanks;

// Every rank's verdict on one check: each rank with a problem prints its line, and if any rank
// has one, every rank exits 1 (so no rank goes on into a collective the others never reach).
static inline void run_agree(RunRanks* r, const std::string& problem) {
    int any = r->max_int(r->ctx, problem.empty() ? 0 : 1);
    if (!problem.empty()) {
        fflush(stdout);
        std::string line = "error: " + problem + "\n";
        fwrite(line.data(), 1, line.size(), stderr);
    }
    if (any) {
        fflush(stderr);
        r->finalize(r->ctx);
        exit(1);
    }
}

// ----------------------------------------------------------------------------
// stopping on a signal: SIGTERM, SIGINT or SIGUSR1 (Slurm's --signal, a preemption, Ctrl-C) lets
// the step in progress finish; the flag rides on the step's skip all-reduce (a MAX, in both
// engines), so a signal to one rank stops them all at the same step; the run writes a checkpoint
// of that step, prints one line with the resume command and exits with RUN_EXIT_STOPPED. The
// handlers are installed first thing in main (run_install_stop_signals), so a signal during
// start-up (data fingerprints, model init, the -y 1 load) stops the run too: at the next
// start-up stop point (run_startup_stop) every rank exits RUN_EXIT_STOPPED with one line that
// says nothing was trained, before the run commits to -o.
// A second signal ends the process at once (exit 128 + signal), unless it comes within
// RUN_STOP_REPEAT_S of the first: then it is the same stop arriving by another route (Slurm
// signals every task and srun forwards, a batch script forwards what the tasks also got). A
// second Ctrl-C at a terminal always ends it at once. The checkpoints already complete stay
// intact, as each one is renamed into place whole and DONE is written last.

#define RUN_EXIT_STOPPED 75  // EX_TEMPFAIL: stopped on a signal after a checkpoint; resume with -y 1
#define RUN_STOP_REPEAT_S 3  // seconds in which a second stop signal counts as a copy of the first

static volatile sig_atomic_t run_stop_signal = 0;
static volatile sig_atomic_t run_stop_from_tty = 0;  // the first one was a Ctrl-C at a terminal
static struct timespec run_stop_time = {0, 0};       // when the first one came (CLOCK_MONOTONIC)

static void run_on_stop_signal(int sig, siginfo_t* info, void*) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);  // async-signal-safe
    const bool tty = sig == SIGINT && info && info->si_code == SI_KERNEL;
    if (run_stop_signal != 0) {
        const double since = (double)(now.tv_sec - run_stop_time.tv_sec) + 1e-9 * (double)(now.tv_nsec - run_stop_time.tv_nsec);
        if ((tty && run_stop_from_tty) || since >= RUN_STOP_REPEAT_S) _exit(128 + sig);
        return;
    }
    run_stop_time = now;
    run_stop_from_tty = tty;
    run_stop_signal = sig;
}

static inline void run_install_stop_signals() {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = run_on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_SIGINFO;
    const int sigs[3] = {SIGTERM, SIGINT, SIGUSR1};
    for (int s : sigs) sigaction(s, &sa, NULL);
}

// Test hook TRAIN_LLAMA_TEST_SIGNAL="STEP:RANK:SIG": RANK raises SIG (a number) at the start of
// (1-based) STEP, as if it had arrived during that step; STEP 0: during start-up, before the data
// is read; STEP -1: during the -y 1 load. "STEP:RANK:SIG:2" raises it a second time, after
// RUN_STOP_REPEAT_S (a second stop, not a copy of the first).
static inline void run_test_signal(int step, int rank) {
    const char* env = getenv("TRAIN_LLAMA_TEST_SIGNAL");
    int s = -2, r = -1, sig = 0, times = 1;
    if (!env || sscanf(env, "%d:%d:%d:%d", &s, &r, &sig, &times) < 3 || s != step || r != rank) return;
    for (int k = 0; k < times; k++) {
        if (k > 0) usleep((RUN_STOP_REPEAT_S * 1000 + 300) * 1000);
        raise(sig);
    }
}

// Test hook TRAIN_LLAMA_TEST_SLOW_START=1: start-up waits (up to 10 s) until a stop signal has
// come, so that a test can signal a run that is surely still starting.
static inline void run_test_slow_start() {
    if (!getenv("TRAIN_LLAMA_TEST_SLOW_START")) return;
    for (int i = 0; i < 200 && run_stop_signal == 0; i++) usleep(50 * 1000);
}

static inline const char* run_signal_name(int sig) {
    return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : sig == SIGUSR1 ? "SIGUSR1" : "a signal";
}

// argv as given, shell-quoted; with resume, -y (--resume) set to 1.
static inline std::string run_command_line(int argc, char** argv, bool resume) {
    std::string cmd;
    bool has_y = false;
    for (int i = 0; i < argc; i++) {
        std::string a = argv[i];
        if (resume && i > 0 && i + 1 < argc && (a == "-y" || a == "--resume")) { cmd += " " + a + " 1"; has_y = true; i++; continue; }
        bool plain = !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=,:+@%") == std::string::npos;
        if (!plain) {
            std::string q = "'";
            for (char ch : a) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
            a = q + "'";
        }
        cmd += (i ? " " : "") + a;
    }
    if (resume && !has_y) cmd += " -y 1";
    return cmd;
}

// The launcher a job of world_size processes ran under, as the prefix (or suffix) that runs the
// command the same way: TRAIN_LLAMA_LAUNCHER (scripts/mpirun.sh sets it), srun (SLURM_STEP_ID
// with SLURM_PROCID, without mpirun's OMPI_MCA_orte_hnp_uri: "under the same srun", whose options
// the job script holds; Open MPI sets OMPI_COMM_WORLD_SIZE under srun too), Open MPI's mpirun
// (OMPI_COMM_WORLD_SIZE), MPICH's mpiexec (PMI_SIZE). One process: no launcher.
static inline std::string run_launched_command(const std::string& cmd, int world_size) {
    if (world_size <= 1) return cmd;
    const std::string n = std::to_string(world_size);
    const char* own = getenv("TRAIN_LLAMA_LAUNCHER");
    if (own && *own) return std::string(own) + " -np " + n + " " + cmd;
    const bool srun = getenv("SLURM_STEP_ID") && getenv("SLURM_PROCID") && !getenv("OMPI_MCA_orte_hnp_uri");  // not mpirun's daemons under Slurm
    if (srun) return cmd + " (under the same srun, " + n + " tasks)";
    if (getenv("OMPI_COMM_WORLD_SIZE")) return "mpirun -np " + n + " " + cmd;
    if (getenv("PMI_SIZE")) return "mpiexec -n " + n + " " + cmd;
    return cmd + " (under the launcher this job ran under, " + n + " ranks)";
}

// The command line that resumes this run: its launcher and rank count, argv as given, -y 1.
static inline std::string run_resume_command(int argc, char** argv, int world_size) {
    return run_launched_command(run_command_line(argc, argv, true), world_size);
}

// Rank 0's line after the stop checkpoint (or without -o, the stop alone).
static inline void run_print_stopped(const TrainConfig& tc, int sig, int step, int argc, char** argv, int world_size) {
    if (tc.output_dir.empty())
        printf("stopped by %s after step %d; no -o, so no checkpoint was written\n", run_signal_name(sig), step);
    else
        printf("stopped by %s after step %d: checkpoint %s (step %d); resume with: %s\n", run_signal_name(sig), step, tc.output_dir.c_str(), step,
               run_resume_command(argc, argv, world_size).c_str());
    fflush(stdout);
}

// A start-up stop point, taken by every rank at the same place before the run commits to -o: if
// any rank has a stop signal, every rank exits RUN_EXIT_STOPPED and rank 0 prints one line (what
// run_output_undo removes at exit leaves -o as it was). start_step: the step a -y 1 run resumes
// from (0: none, or not known yet).
static inline void run_startup_stop(RunRanks* r, const TrainConfig& tc, int start_step, int argc, char** argv) {
    const int sig = r->max_int(r->ctx, (int)run_stop_signal);
    if (sig == 0) return;
    if (r->rank == 0) {
        fflush(stdout);
        const char* nothing = tc.output_dir.empty() ? "nothing was trained" : "nothing was trained or written";
        if (start_step > 0)
            printf("stopped by %s during start-up, resuming from step %d: %s; resume with: %s\n", run_signal_name(sig), start_step, nothing,
                   run_resume_command(argc, argv, r->world_size).c_str());
        else if (tc.resume)
            printf("stopped by %s during start-up: %s; resume with: %s\n", run_signal_name(sig), nothing,
                   run_resume_command(argc, argv, r->world_size).c_str());
        else
            printf("stopped by %s during start-up, before step 1: %s; start again with: %s\n", run_signal_name(sig), nothing,
                   run_launched_command(run_command_line(argc, argv, false), r->world_size).c_str());
        fflush(stdout);
    }
    r->finalize(r->ctx);
    exit(RUN_EXIT_STOPPED);
}

// Every rank must run with rank 0's settings (run_settings(..., true)): rank 0's text is
// broadcast and compared; the differing ranks name the first differing setting.
static inline void run_check_same_settings(RunRanks* r, const std::string& settings) {
    if (r->world_size == 1) return;
    std::string ref = r->broadcast(r->ctx, settings);
    std::string diff = train_config_first_difference(ref, settings), problem;
    if (!diff.empty())
        problem = "rank " + std::to_string(r->rank) + " disagrees with rank 0 on " + diff + " (rank 0 vs rank " +
                  std::to_string(r->rank) + "); every rank must get the same flags and data";
    run_agree(r, problem);
}

// "3, 6 and 9" style list of steps.
static inline std::string run_step_list(const std::vector<int>& steps) {
    std::string out;
    for (size_t i = 0; i < steps.size(); i++) out += (i ? (i + 1 == steps.size() ? " and " : ", ") : "") + std::to_string(steps[i]);
    return out;
}

// Steps of the checkpoint files in dir (complete or not), ascending, without duplicates.
static inline std::vector<int> run_checkpoint_steps(const std::vector<std::string>& names) {
    std::vector<int> steps;
    for (const std::string& n : names) {
        bool tmp = false;
        int step = checkpoint_name_step(n, &tmp);
        if (step >= 0 && !tmp && std::find(steps.begin(), steps.end(), step) == steps.end()) steps.push_back(step);
    }
    std::sort(steps.begin(), steps.end());
    return steps;
}

// What rank 0 made in -o before the run commits to it (run_commit_output): a run refused before
// then removes it again at exit, so it leaves no directory or file of its own behind; and the
// files the run will delete when it commits (--overwrite 1: the earlier run's checkpoints; -y 1:
// the incomplete or damaged steps after the one it resumes), so that no refusal comes after a
// deletion.
typedef struct {
    std::string dir;
    std::vector<std::string> created_dirs;  // parents first
    bool created_lock;
    bool committed;
    std::vector<std::string> doomed;        // names in dir, DONE markers first
    std::string doomed_note;                // the line printed when they are deleted
} RunOutput;

static RunOutput run_output = {"", {}, false, false, {}, ""};

static void run_output_undo() {
    if (run_output.committed || run_output.dir.empty()) return;
    if (run_output.created_lock) unlink((run_output.dir + "/LOCK").c_str());
    for (size_t i = run_output.created_dirs.size(); i-- > 0;) rmdir(run_output.created_dirs[i].c_str());  // only if empty
}

// A random id for this run's LOCK, which the other ranks read back.
static inline std::string run_random_id() {
    unsigned char b[12] = {0};
    FILE* f = fopen("/dev/urandom", "rb");
    bool ok = f && fread(b, 1, sizeof(b), f) == sizeof(b);
    if (f) fclose(f);
    char out[64];
    if (ok) {
        for (size_t i = 0; i < sizeof(b); i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
    } else {
        snprintf(out, sizeof(out), "%lld-%lld", (long long)getpid(), (long long)time(NULL));
    }
    return out;
}

// The absolute form of a path this process sees ("" if it does not exist), and its working directory.
static inline std::string run_real_path(const std::string& path) {
    char b[PATH_MAX];
    return realpath(path.c_str(), b) ? std::string(b) : std::string();
}
static inline std::string run_cwd() {
    char b[PATH_MAX];
    return getcwd(b, sizeof(b)) ? std::string(b) : std::string("?");
}

// Every rank must see rank 0's -o: rank 0 wrote a random id into DIR/LOCK, every other rank reads
// it back through its own view of the path (a node-local directory of the same name, another
// working directory under a relative -o, a missing mount). A short wait covers a network file
// system that shows a new directory late.
static inline std::string run_check_same_output_dir(const TrainConfig* tc, RunRanks* r, const std::string& rank0_id, const std::string& rank0_path) {
    if (r->rank == 0) return "";
    const std::string& dir = tc->output_dir;
    std::string err, id;
    for (int tries = 0; tries < 20; tries++) {
        id = checkpoint_lock_run_id(dir, &err);
        if (id == rank0_id || !err.empty()) break;
        usleep(100 * 1000);
    }
    if (id == rank0_id) return "";
    std::string rank = "rank " + std::to_string(r->rank);
    std::string need = "every rank must see one shared directory (a shared file system; with a relative -o, the same working directory)";
    if (!err.empty()) return rank + ": -o: cannot read '" + dir + "/LOCK' (" + err + ") to check it is rank 0's directory";
    std::string here = run_real_path(dir);
    if (here.empty())
        return rank + ": -o '" + dir + "' does not exist on this rank (rank 0 made it at " + rank0_path + "; this rank's working directory is " +
               run_cwd() + "); " + need;
    return rank + ": -o '" + dir + "' is not rank 0's directory (here it is " + here + ", on rank 0 " + rank0_path +
           ", and its LOCK does not hold rank 0's run id); " + need;
}

// No rank's -e file may be among the files the run deletes (rank 0's list `names` in -o): it is
// what the run starts from, and the user's. The same file, not the same name: each rank compares
// what is behind its own -e with what is behind each name.
static inline void run_check_keeps_model_file(const TrainConfig* tc, RunRanks* r, const std::vector<std::string>& rank0_names, const char* why) {
    std::string joined;
    for (const std::string& n : rank0_names) joined += n + "\n";
    joined = r->broadcast(r->ctx, joined);
    std::string problem;
    struct stat me, other;
    if (stat(tc->model.c_str(), &me) == 0 && S_ISREG(me.st_mode)) {
        size_t pos = 0;
        while (pos < joined.size() && problem.empty()) {
            size_t end = joined.find('\n', pos);
            std::string path = tc->output_dir + "/" + joined.substr(pos, end - pos);
            if (stat(path.c_str(), &other) == 0 && other.st_dev == me.st_dev && other.st_ino == me.st_ino)
                problem = std::string(why) + " would delete '" + path + "', which is this run's -e '" + tc->model +
                          "'; copy it out of -o first, or pass another -o";
            pos = end + 1;
        }
    }
    run_agree(r, problem);
}

// With -o: rank 0 creates the directory and takes its lock for the run's life (a second run
// on the same directory stops here, naming the holder), removes temporary files an interrupted
// writer left, and refuses a fresh run (no -y 1) into a directory that holds an earlier run's
// checkpoints or logs unless --overwrite 1, which deletes them when the run commits. Then every
// rank checks that it sees rank 0's directory, and that its -e is not among the files to delete.
// Before any rank writes there; a run refused from here on removes what this made (run_output_undo).
static inline void run_open_output(const TrainConfig* tc, RunRanks* r) {
    if (tc->output_dir.empty()) return;
    std::string problem, run_id, real;
    const std::string& dir = tc->output_dir;
    if (r->rank == 0) {
        run_output.dir = dir;
        atexit(run_output_undo);
        problem = checkpoint_make_dir_error(dir, &run_output.created_dirs);
        run_id = run_random_id();
        if (problem.empty()) problem = checkpoint_lock_dir(dir, run_id, &run_output.created_lock);
        std::vector<std::string> names;
        if (problem.empty()) names = checkpoint_list_dir(dir, &problem);
        if (problem.empty()) {
            int stale = checkpoint_remove_files(dir, false, {});
            if (stale > 0) printf("-o: removed %d temporary file%s an interrupted checkpoint left in %s\n", stale, stale > 1 ? "s" : "", dir.c_str());
            std::vector<int> steps = run_checkpoint_steps(names);
            std::string logs;
            for (const char* log : {"main.log", "metrics.jsonl"}) {
                struct stat st;
                if (stat((dir + "/" + log).c_str(), &st) == 0 && st.st_size > 0) logs += std::string(logs.empty() ? "" : " and ") + log;
            }
            if (!tc->resume && (!steps.empty() || !logs.empty())) {
                std::string what = !steps.empty() ? std::string("the checkpoints of an earlier run (step") + (steps.size() > 1 ? "s " : " ") +
                                                        run_step_list(steps) + ")"
                                                  : "the logs of an earlier run (" + logs + ")";
                if (!tc->overwrite) {
                    problem = "-o: '" + dir + "' holds " + what + "; pass -y 1 to resume it, --overwrite 1 to " +
                              (steps.empty() ? "replace them" : "delete them") + ", or another -o";
                } else if (!steps.empty()) {
                    run_output.doomed = checkpoint_removable_files(dir, true, {});
                    run_output.doomed_note = std::string("--overwrite 1: deleted the checkpoints of step") + (steps.size() > 1 ? "s " : " ") +
                                             run_step_list(steps) + " in " + dir;
                } else {
                    run_output.doomed_note = "--overwrite 1: replacing the logs of an earlier run in " + dir;
                }
            }
        }
        real = run_real_path(dir);
    }
    run_agree(r, problem);
    std::string ids = r->broadcast(r->ctx, run_id + "\n" + real);
    run_agree(r, run_check_same_output_dir(tc, r, ids.substr(0, ids.find('\n')), ids.substr(ids.find('\n') + 1)));
    run_check_keeps_model_file(tc, r, run_output.doomed, "--overwrite 1");
}

// Every rank must start from the same weights: with -e FILE, the payload CRC-32 of rank 0's file
// is compared with each rank's (the same path can hold another file on another node).
static inline void run_check_same_model_file(const TrainConfig* tc, RunRanks* r, bool from_file, uint32_t crc) {
    if (r->world_size == 1 || !from_file) return;
    char mine[16];
    snprintf(mine, sizeof(mine), "%08x", crc);
    std::string ref = r->broadcast(r->ctx, mine), problem;
    if (ref != mine)
        problem = "rank " + std::to_string(r->rank) + ": -e '" + tc->model + "' holds other weights than on rank 0 (payload CRC-32 " + mine +
                  " here, " + ref + " on rank 0); every rank must start from the same file";
    run_agree(r, problem);
}

// The run is past every start-up check: rank 0 deletes what run_open_output and run_find_resume
// set aside for deletion, and from here on what it made in -o stays. Every rank calls it, right
// before the logs are opened; no rank writes in -o before rank 0 is done (a barrier).
static inline void run_commit_output(const TrainConfig* tc, RunRanks* r) {
    if (tc->output_dir.empty()) return;
    if (r->rank == 0) {
        for (const std::string& name : run_output.doomed) {
            std::string path = tc->output_dir + "/" + name;
            if (remove(path.c_str()) != 0 && errno != ENOENT) checkpoint_write_failed(path, "remove", errno);
        }
        if (!run_output.doomed_note.empty()) printf("%s\n", run_output.doomed_note.c_str());
        fflush(stdout);
        run_output.committed = true;
    }
    r->max_int(r->ctx, 0);
}

static inline std::string run_io_error_hint() {
    return "; the file is not damaged, so no older checkpoint replaces it: fix the permission or the file system and resume again (nothing was changed)";
}

// One candidate checkpoint, checked on this rank: its state file (this rank's, with its share of
// the optimizer moments), on rank 0 the model file, and every header field against the others,
// the file names, this run and the data. No rank reads another rank's state file: once every rank
// has found its own files sound, run_resume_gather hands the weights and the shares round.
// Returns 0 when sound, 1 when damaged (*why says how; an older checkpoint may do), 2 when sound
// but written by another run configuration (*why is the user's error), 3 when a file cannot be
// read (a permission, a failing disk: not damage, so the run stops and changes nothing).
static inline int run_check_checkpoint(const TrainConfig* tc, const LlamaConfig* lc, const std::string& settings, int rank, int world_size,
                                       const DataLoader* train, int accum_steps, int step, CheckpointState* state,
                                       std::vector<float>* params, std::string* why) {
    std::string spath = checkpoint_state_path(tc->output_dir, step, rank), mpath = checkpoint_model_path(tc->output_dir, step), w;
    char b[512];
    bool io_error = false;
    if (!checkpoint_try_read_state(spath, state, &w, &io_error)) {
        if (io_error) { *why = "-y: checkpoint step " + std::to_string(step) + ": state file '" + spath + "' " + w + run_io_error_hint(); return 3; }
        *why = "state file '" + spath + "' " + w;
        return 1;
    }
    if (state->world_size != world_size) {
        snprintf(b, sizeof(b), "-y: checkpoint step %d was written by %lld ranks, this run has %d (resume with the same number of ranks)",
                 step, (long long)state->world_size, world_size);
        *why = b;
        return 2;
    }
    // --virtual-ranks first: it changes the default -d too, and the flag is what the user changed
    // (N logical ranks in N processes is one per process: an older checkpoint may say N)
    std::string ckpt_settings = state->settings;
    std::string vc = train_config_setting(ckpt_settings, "virtual-ranks"), vr = train_config_setting(settings, "virtual-ranks");
    if (vc == std::to_string(world_size) && vr == "0") {
        size_t at = ckpt_settings.find("\nvirtual-ranks=" + vc + "\n");
        if (at != std::string::npos) ckpt_settings.replace(at, vc.size() + 16, "\nvirtual-ranks=0\n");
        vc = "0";
    }
    if (vc != vr) {
        *why = "-y: checkpoint step " + std::to_string(step) + " was written with --virtual-ranks " + vc + ", this run has --virtual-ranks " +
               vr + " (resume with the same number of logical ranks; 0 means one per process)";
        return 2;
    }
    std::string diff = train_config_first_difference(ckpt_settings, settings);
    if (!diff.empty()) {
        *why = "-y: checkpoint step " + std::to_string(step) + " was written with different settings: " + diff + " (checkpoint vs this run)";
        return 2;
    }
    int64_t want_data[3];
    dataloader_state_after(train, (long long)step * accum_steps, want_data);
    size_t P = llama_num_params(lc), begin, end;  // the moments: all of them, or this rank's share
    checkpoint_moments_slice(P, rank, world_size, &begin, &end);
    bool whole = state->moments_begin == 0 && state->m.size() == P;
    bool slice = state->moments_begin == (int64_t)begin && state->m.size() == end - begin;
    if (state->step != step) snprintf(b, sizeof(b), "holds step %lld, expected %d (its name's)", (long long)state->step, step);
    else if (state->rank != rank) snprintf(b, sizeof(b), "holds rank %lld's state, expected rank %d's (its name's)", (long long)state->rank, rank);
    else if (state->moments_total != (int64_t)P || state->v.size() != state->m.size() || !(whole || slice))
        snprintf(b, sizeof(b), "holds optimizer values [%lld, %lld) and [%lld, %lld) of %lld, expected [%zu, %zu) (this rank's share) or all %zu",
                 (long long)state->moments_begin, (long long)(state->moments_begin + (int64_t)state->m.size()), (long long)state->moments_begin,
                 (long long)(state->moments_begin + (int64_t)state->v.size()), (long long)state->moments_total, begin, end, P);
    else if (state->data_state[0] != want_data[0] || state->data_state[1] != want_data[1] || state->data_state[2] != want_data[2])
        snprintf(b, sizeof(b), "holds data position (shard %lld, token %lld, epoch %lld), but step %d of this data is at (shard %lld, token %lld, epoch %lld)",
                 (long long)state->data_state[0], (long long)state->data_state[1], (long long)state->data_state[2], step,
                 (long long)want_data[0], (long long)want_data[1], (long long)want_data[2]);
    else if (state->skipped_steps < 0 || state->skipped_steps > step)
        snprintf(b, sizeof(b), "holds %lld skipped steps at step %d", (long long)state->skipped_steps, step);
    else b[0] = '\0';
    if (b[0]) { *why = "state file '" + spath + "' " + b; return 1; }
    bool config_differs = false;
    if (rank == 0 && !checkpoint_try_read_model(mpath, lc, step, params, &w, &config_differs, &io_error)) {
        if (io_error) { *why = "-y: checkpoint step " + std::to_string(step) + ": model file '" + mpath + "' " + w + run_io_error_hint(); return 3; }
        if (config_differs) {
            *why = "-y: checkpoint '" + mpath + "' " + w + " (hint: pass the same -e, or a new -o)";
            return 2;
        }
        *why = "model file '" + mpath + "' " + w;
        return 1;
    }
    return 0;
}

// The ranks compare their optimizer moments through a CRC-32 of a sample: every
// RUN_MOMENTS_SAMPLE_STRIDE-th value of m, then the same of v, in that order (here from host
// arrays; the GPU engine gathers the same values on the device).
#define RUN_MOMENTS_SAMPLE_STRIDE 61
static inline uint32_t run_moments_sample_crc(const float* m, const float* v, size_t P) {
    uint32_t crc = 0;
    float sample[1024];
    for (const float* x : {m, v}) {
        size_t k = 0;
        for (size_t i = 0; i < P; i += RUN_MOMENTS_SAMPLE_STRIDE) {
            sample[k++] = x[i];
            if (k == 1024) { crc = crc32_update(crc, sample, sizeof(sample)); k = 0; }
        }
        crc = crc32_update(crc, sample, k * sizeof(float));
    }
    return crc;
}

// Which of the optimizer moments (P values each of m and v) this rank's state file keeps:
// [*begin, *end). The ranks of a data-parallel run apply the same update and so hold the same
// moments: each file keeps its rank's share (checkpoint_moments_slice) and a checkpoint holds them
// once, not once a rank. That they are the same is checked first, cheaply: each rank's
// sample_crc (run_moments_sample_crc) against rank 0's. Were they to differ (a defect), each rank
// that differs says so and every rank keeps all its moments, so that each resumes with its own.
// Test hook: TRAIN_LLAMA_TEST_MOMENTS_DIFFER=R changes rank R's CRC.
static inline void run_moments_share(RunRanks* r, int64_t step, uint32_t sample_crc, size_t P, size_t* begin, size_t* end) {
    const char* hook = getenv("TRAIN_LLAMA_TEST_MOMENTS_DIFFER");
    if (hook && atoi(hook) == r->rank) sample_crc ^= 1;
    char mine[16];
    snprintf(mine, sizeof(mine), "%08x", sample_crc);
    std::string first = r->broadcast(r->ctx, mine);
    bool differs = first != mine;
    if (differs) {
        std::string line = "warning: checkpoint step " + std::to_string((long long)step) + ": rank " + std::to_string(r->rank) +
                           "'s optimizer moments differ from rank 0's (CRC-32 of a sample " + mine + ", rank 0's " + first +
                           "): every rank writes all its moments\n";
        fwrite(line.data(), 1, line.size(), stderr);
        fflush(stderr);
    }
    *begin = 0;
    *end = P;
    if (r->max_int(r->ctx, differs ? 1 : 0) == 0) checkpoint_moments_slice(P, r->rank, r->world_size, begin, end);
}

// This rank's share of the optimizer moments (host arrays m and v, P values each) into its state
// file's *st (run_moments_share).
static inline void run_state_moments(RunRanks* r, CheckpointState* st, const float* m, const float* v, size_t P) {
    size_t begin, end;
    run_moments_share(r, st->step, run_moments_sample_crc(m, v, P), P, &begin, &end);
    st->m.assign(m + begin, m + end);
    st->v.assign(v + begin, v + end);
    st->moments_begin = (int64_t)begin;
    st->moments_total = (int64_t)P;
}

// ----------------------------------------------------------------------------
// checkpoints written while training goes on (llmc/checkpoint_writer.h)

// Settles the checkpoint in flight, if any: each rank says whether its files are written (one
// max over ranks, so every rank takes the same path), and once every rank's are, rank 0 marks the
// checkpoint whole (DONE), keeps the newest -nk and prints its line. wait = false asks once and
// leaves a checkpoint still being written in flight (at each step boundary); wait = true first
// waits for this rank's writes (before the next checkpoint, at the run's last step, at a stop). A
// failed write on any rank stops every rank with exit 1, each failed rank printing its line.
// loop_step: the step the training loop is at.
static inline void run_checkpoint_settle(RunRanks* r, CheckpointWriter* w, const TrainConfig* tc, int loop_step, bool wait) {
    if (w->step < 0) return;
    w->loop_step.store(loop_step);
    double waited;
    const int mine = checkpoint_writer_status(w, wait, &waited);
    w->held_seconds += waited;
    watchdog_enter("the checkpoint's barrier");
    const int all = r->max_int(r->ctx, mine);  // every state file is in place before DONE marks the checkpoint whole
    watchdog_leave();
    if (all == CHECKPOINT_FAILED) run_agree(r, mine == CHECKPOINT_FAILED ? w->error : "");
    if (all == CHECKPOINT_WRITING) return;
    checkpoint_test_crash("done", w->step);
    if (r->rank == 0) {
        checkpoint_write_done(tc->output_dir, w->step);
        checkpoint_prune(tc->output_dir, tc->keep_checkpoints, r->world_size);
        printf("checkpoint: %s (step %d; rank 0's files written in %.2f s, the training held %.2f s)\n", tc->output_dir.c_str(), w->step,
               w->write_seconds, w->held_seconds);
        fflush(stdout);
    }
    w->step = -1;
}

// Checkpoint `step` begins: the one in flight is settled first (its wait counted in its own
// line), then w->state gets what every rank's state file holds besides the moments and extras
// (step, rank, the data position of `train`, the skip count, the settings; extras emptied).
// Returns the clock for run_checkpoint_write; the caller adds the moments and the extras.
static inline double run_checkpoint_begin(RunRanks* r, CheckpointWriter* w, const TrainConfig* tc, int step, const DataLoader* train,
                                          int skipped_steps, const std::string& settings) {
    run_checkpoint_settle(r, w, tc, step, true);
    const double t0 = checkpoint_writer_now();
    CheckpointState& st = w->state;
    st.step = step; st.rank = r->rank; st.world_size = r->world_size;
    dataloader_get_state(train, st.data_state);
    st.skipped_steps = skipped_steps;
    st.settings = settings;
    st.extras.clear();
    return t0;
}

// Hands checkpoint `step` to the writer: rank 0 writes the model file (the host weights `weights`,
// config c), every rank its state file (w->state). With --checkpoint-async 1 the writes run on the
// writer's thread, from a copy of the weights unless they are w->params already, and the
// checkpoint is settled at a later step boundary; with 0, or now (the run's last step, a stop),
// they are written (no copy) and settled before this returns. t_begin: run_checkpoint_begin's clock.
static inline void run_checkpoint_write(RunRanks* r, CheckpointWriter* w, const TrainConfig* tc, const LlamaConfig* c, const float* weights, int step,
                                        double t_begin, bool now) {
    const bool background = tc->checkpoint_async != 0 && !now;
    w->model = r->rank == 0;
    w->config = *c;
    if (w->model) checkpoint_writer_set_weights(w, weights, llama_num_params(c), background);
    checkpoint_writer_start(w, tc->output_dir, step, background);
    w->held_seconds = checkpoint_writer_now() - t_begin;
    if (!background) run_checkpoint_settle(r, w, tc, step, true);
}

// The chosen checkpoint, found sound on every rank, on every rank: rank 0's weights (the only
// rank that read the model file) and each rank's share of the optimizer moments, over the ranks'
// collectives, so that a resume of N ranks reads each file once instead of N times (llama600m on
// 8 ranks: 7.3 GB read in all instead of 58 GB; ranks on one node share its page cache either way).
static inline void run_resume_gather(RunRanks* r, size_t P, CheckpointState* state, std::vector<float>* params) {
    if (r->world_size == 1) return;
    params->resize(P);
    r->broadcast_floats(r->ctx, params->data(), P, 0);
    if (state->m.size() == P) return;  // every rank holds all of them (version 1, or moments that differed)
    std::vector<float> m(P), v(P);
    std::copy(state->m.begin(), state->m.end(), m.begin() + state->moments_begin);
    std::copy(state->v.begin(), state->v.end(), v.begin() + state->moments_begin);
    for (int q = 0; q < r->world_size; q++) {
        size_t begin, end;
        checkpoint_moments_slice(P, q, r->world_size, &begin, &end);
        r->broadcast_floats(r->ctx, m.data() + begin, end - begin, q);
        r->broadcast_floats(r->ctx, v.data() + begin, end - begin, q);
    }
    state->m.swap(m);
    state->v.swap(v);
    state->moments_begin = 0;
}

// With -y 1: the newest complete checkpoint in -o that every rank finds sound (each rank checks
// its own state file, rank 0 the model file too), falling back to older complete ones past damaged
// ones, saying why. With none complete it starts from step 0. The files of steps after the
// chosen one (incomplete or damaged) are deleted by rank 0, since the run writes those steps
// again. Fills *state and *params; returns the step (0 = start fresh). Call after
// run_open_output, so this run holds the directory's lock.
static inline int run_find_resume(const TrainConfig* tc, const LlamaConfig* lc, const std::string& settings, RunRanks* r,
                                  const DataLoader* train, int accum_steps, CheckpointState* state, std::vector<float>* params) {
    if (!tc->resume) return 0;
    const std::string& dir = tc->output_dir;
    // rank 0 lists the directory and every rank takes its list, so all try the same steps
    std::string listing, problem;
    if (r->rank == 0) {
        std::vector<std::string> names = checkpoint_list_dir(dir, &problem);
        for (int s : run_checkpoint_steps(names)) listing += std::to_string(s) + "\n";
        for (int s : checkpoint_complete_steps(dir)) listing += "done " + std::to_string(s) + "\n";
    }
    run_agree(r, problem);
    listing = r->broadcast(r->ctx, listing);
    std::vector<int> all, done;
    size_t pos = 0;
    while (pos < listing.size()) {
        size_t end = listing.find('\n', pos);
        std::string line = listing.substr(pos, end - pos);
        if (line.compare(0, 5, "done ") == 0) done.push_back(atoi(line.c_str() + 5)); else all.push_back(atoi(line.c_str()));
        pos = end + 1;
    }
    int chosen = 0;
    const size_t P = llama_num_params(lc);
    for (int i = (int)done.size() - 1; i >= 0; i--) {
        std::string why;
        int verdict = run_check_checkpoint(tc, lc, settings, r->rank, r->world_size, train, accum_steps, done[i], state, params, &why);
        int worst = r->max_int(r->ctx, verdict);
        if (worst >= 2) run_agree(r, verdict >= 2 ? why : "");  // another run's checkpoint, or a file that cannot be read: stop
        if (worst == 0 && r->world_size > 1) {  // every rank a share of the moments, or every rank all of them (a mix: two checkpoints' files)
            bool whole = state->m.size() == P;
            int slices = r->max_int(r->ctx, whole ? 0 : 1), wholes = r->max_int(r->ctx, whole ? 1 : 0);
            if (slices && wholes) {
                worst = 1;
                verdict = whole ? 0 : 1;
                why = "state file '" + checkpoint_state_path(dir, done[i], r->rank) +
                      "' holds this rank's share of the optimizer moments, but another rank's state file holds all of them";
            }
        }
        if (worst == 0) { chosen = done[i]; break; }
        if (verdict == 1) {
            std::string line = "warning: -y: checkpoint step " + std::to_string(done[i]) + " is damaged: " + why +
                               (i > 0 ? "; trying the next older complete checkpoint\n" : "\n");
            fwrite(line.data(), 1, line.size(), stderr);
            fflush(stderr);
        }
    }
    run_test_signal(-1, r->rank);
    if (chosen == 0 && !done.empty()) {
        run_agree(r, r->rank != 0 ? "" : "-y: every complete checkpoint in '" + dir + "' is damaged (the warnings above say how); "
                                         "restore one, or start a fresh run with --overwrite 1 or another -o");
    }
    if (chosen > tc->steps) run_agree(r, "-y: checkpoint step " + std::to_string(chosen) + " is past the run's " + std::to_string(tc->steps) + " steps");
    // the files of later steps go when the run commits (run_commit_output), after every check
    std::vector<int> later, keep;
    for (int s : all) (s > chosen ? later : keep).push_back(s);
    if (r->rank == 0 && !later.empty()) {
        run_output.doomed = checkpoint_removable_files(dir, true, keep);
        run_output.doomed_note = std::string("-y 1: deleted the incomplete or damaged checkpoint files of step") + (later.size() > 1 ? "s " : " ") +
                                 run_step_list(later) + " in " + dir + " (this run writes them again)";
    }
    run_check_keeps_model_file(tc, r, run_output.doomed, "-y 1");
    if (chosen > 0) run_resume_gather(r, P, state, params);
    if (r->rank == 0) {
        if (chosen == 0) printf("-y 1: no complete checkpoint in %s, starting from step 0\n", dir.c_str());
        else printf("-y 1: resuming from step %d in %s\n", chosen, dir.c_str());
        fflush(stdout);
    }
    return chosen;
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
// A sample's first tokens: --prompt-tokens, else <|endoftext|> where the vocabulary has it.
static inline std::vector<int> run_sample_first_tokens(const TrainConfig* tc, int V) {
    std::vector<int> ids = run_prompt_tokens(tc);
    if (ids.empty()) ids.push_back(std::min(LLAMA_GPT2_VOCAB - 1, V - 1));
    return ids;
}

// A token drawn from softmax(logits[0:V] / temperature) over the top_k largest (0: all) with a
// uniform coin in [0, 1); temperature 0 is greedy: the largest logit (the lowest id among equals,
// as torch.argmax). Ties at the k-th place keep the lower ids.
static inline int run_sample_token(const float* logits, int V, double coin, float temperature, int top_k) {
    int best = 0;
    for (int i = 1; i < V; i++) if (logits[i] > logits[best]) best = i;
    if (temperature == 0.0f) return best;
    std::vector<int> ids(V);
    for (int i = 0; i < V; i++) ids[i] = i;
    if (top_k > 0 && top_k < V) {
        std::partial_sort(ids.begin(), ids.begin() + top_k, ids.end(),
                          [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
        ids.resize(top_k);
        std::sort(ids.begin(), ids.end());
    }
    const double maxv = logits[best];
    double sum = 0.0;
    for (int i : ids) sum += exp(((double)logits[i] - maxv) / temperature);
    double target = coin * sum, acc = 0.0;
    for (int i : ids) {
        acc += exp(((double)logits[i] - maxv) / temperature);
        if (acc > target) return i;
    }
    return ids.back();
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

// One row of the settings box; a value wider than its column wraps onto further rows, at a blank
// where there is one (a long path breaks anywhere), so that no row breaks the box.
static inline void run_print_row(const char* key, const std::string& value) {
    const size_t width = 48;
    size_t pos = 0;
    do {
        size_t n = value.size() - pos;
        if (n > width) {
            size_t cut = value.rfind(' ', pos + width);
            n = (cut != std::string::npos && cut > pos) ? cut - pos : width;
        }
        printf("| %-22s | %-48s |\n", pos == 0 ? key : "", value.substr(pos, n).c_str());
        pos += n;
        while (pos < value.size() && value[pos] == ' ') pos++;
    } while (pos < value.size());
}

// Rank 0's report of a val loss: the console line, main.log and metrics.jsonl (with the tokens
// trained on so far, the x axis of scripts/plot_runs.py).
static inline void run_report_val(Logger* logger, int step, float val_loss, long long tokens_per_step) {
    printf("val loss %.6f (step %d)\n", val_loss, step);
    logger_val(logger, step, val_loss);
    std::string line;
    logger_field(&line, "step", step);
    logger_field(&line, "tokens", (double)step * tokens_per_step);
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
// transport: how the gradient travels ("MPI", "NCCL"); buckets: how it is cut and when it is sent.
static inline void run_print_run_rows(const TrainConfig& tc, const std::string& model_desc, size_t num_params, const DataLoader& train,
                                      const DataLoader* val, int world_size, int accum_steps, int start_step, const char* transport,
                                      const std::string& buckets) {
    char b[256];
    run_print_row("model", model_desc);
    snprintf(b, sizeof(b), "%zu (%.1fM)", num_params, num_params / 1e6); run_print_row("parameters", b);
    run_print_row("train data", tc.train_data + " (" + std::to_string(train.num_shards) + " shards, " + std::to_string(train.total_tokens) + " tokens)");
    run_print_row("val data", val ? tc.val_data + " (" + std::to_string(val->total_tokens) + " tokens)" : "off");
    snprintf(b, sizeof(b), "B=%d T=%d ranks=%d accum=%d -> %lld tokens/step", tc.B, tc.T, world_size, accum_steps, tc.total_batch); run_print_row("batch", b);
    snprintf(b, sizeof(b), "%d (from %d)", tc.steps, start_step); run_print_row("steps", b);
    snprintf(b, sizeof(b), "%s: peak %g, warmup %d, final %g x peak", tc.schedule.c_str(), tc.lr, tc.warmup, tc.final_lr_frac); run_print_row("learning rate", b);
    snprintf(b, sizeof(b), "%s%s%s + AdamW, wd %g, clip %g%s", tc.optimizer.c_str(), tc.optimizer == "muon" ? " " : "",
             tc.optimizer == "muon" ? tc.muon.c_str() : "", tc.weight_decay, tc.grad_clip,
             tc.optimizer == "muon" && tc.muon_shard && world_size > 1 ? ", Newton-Schulz sharded over the ranks" : "");
    run_print_row("optimizer", b);
    std::string mode = tc.comm;
    if (tc.comm != "fp32" && tc.comm != "bf16") mode += " (" + tc.fp8_format + ", " + tc.fp8_reduce + (tc.fp8_ef ? ", error feedback on every unit" : "") + ")";
    if (tc.comm == "geofp8") mode += ", layers " + tc.geofp8_layers;
    run_print_row("grad communication", mode + ", " + transport);
    run_print_row("gradient buckets", buckets);
    if (tc.comm == "geofp8") {
        snprintf(b, sizeof(b), "power %s, damping %g, rank %s, refresh %d", tc.geofp8_power.c_str(), tc.geofp8_damping, tc.geofp8_rank.c_str(),
                 tc.geofp8_refresh);
        run_print_row("geofp8 whitening", b);
    }
    if (tc.fidelity_every > 0) {
        const int f = gradcomm_fidelity_interval(&tc);
        std::string row = "every " + std::to_string(f);
        if (f != tc.fidelity_every) row += " (" + std::to_string(tc.fidelity_every) + ", coprime with refresh)";
        if (tc.comm == "geofp8" || tc.comm == "kfac")
            row += tc.fp8_reduce == "twophase" ? "; fair figures native only" : "; windows of " + std::to_string(gradcomm_fidelity_window(&tc));
        run_print_row("fidelity", row);
    }
    run_print_row("output", tc.output_dir.empty() ? "none" : tc.output_dir);
}

static inline double run_now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
