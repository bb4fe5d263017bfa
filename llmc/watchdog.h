// watchdog.h — --comm-timeout: a rank that dies, stops or hangs must not hang the others (host
// only, both engines). The trainer's thread marks what it is waiting for (watchdog_enter ...
// watchdog_leave); a second thread looks every half second (at most a tenth of the timeout), and
// when one wait has lasted longer than the timeout it prints one line naming the rank, the step
// and the operation, and ends this process with exit status 1. The launcher then ends the job:
// mpirun aborts a job whose process exits non-zero, srun --kill-on-bad-exit=1 (the Slurm
// recipes) the same. The other ranks, if they are waiting too, time out on their own.
//   CPU engine: every MPI call (MPI_CHECK in llmc/comm.h) is a wait, named by its MPI function.
//   GPU engine: a step, a validation pass and a checkpoint are waits (NCCL's collectives run on
//               the stream, and the host waits for them inside these), named by that phase.
// With a timeout of 0 nothing is watched.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <unistd.h>

typedef struct {
    std::atomic<long long> since_ms;  // when the current wait began (steady clock), 0: none
    std::atomic<const char*> what;    // its name (a string literal)
    std::atomic<int> step;            // the (1-based) step being run
    double timeout_s;                 // 0: off
    int rank;
} Watchdog;

static Watchdog watchdog_state = {{0}, {nullptr}, {0}, 0.0, 0};

static inline long long watchdog_now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static inline void watchdog_enter(const char* what) {
    if (watchdog_state.timeout_s <= 0.0) return;
    watchdog_state.what.store(what, std::memory_order_relaxed);
    watchdog_state.since_ms.store(watchdog_now_ms(), std::memory_order_release);
}

static inline void watchdog_leave() {
    if (watchdog_state.timeout_s <= 0.0) return;
    watchdog_state.since_ms.store(0, std::memory_order_release);
}

static inline void watchdog_set_step(int step) { watchdog_state.step.store(step, std::memory_order_relaxed); }

// "MPI_Allreduce(&x, ...)" -> "MPI_Allreduce": the name of a call's text up to its parenthesis.
static inline int watchdog_name_length(const char* what) {
    const char* p = strchr(what, '(');
    return p ? (int)(p - what) : (int)strlen(what);
}

// Starts the watching thread (once per process); timeout_s 0 watches nothing.
static inline void watchdog_start(double timeout_s, int rank) {
    if (timeout_s <= 0.0 || watchdog_state.timeout_s > 0.0) return;
    watchdog_state.rank = rank;
    watchdog_state.timeout_s = timeout_s;
    const long long limit_ms = (long long)(timeout_s * 1000.0);
    const long long poll_ms = limit_ms / 10 < 500 ? (limit_ms / 10 > 10 ? limit_ms / 10 : 10) : 500;
    std::thread([limit_ms, poll_ms]() {
        while (true) {
            std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
            const long long since = watchdog_state.since_ms.load(std::memory_order_acquire);
            if (since == 0 || watchdog_now_ms() - since <= limit_ms) continue;
            const char* what = watchdog_state.what.load(std::memory_order_relaxed);
            if (!what) what = "a collective";
            fprintf(stderr, "error: rank %d, step %d: %.*s waited more than %g s (--comm-timeout): another rank died, stopped or "
                    "hangs; ending the job (the newest complete checkpoint resumes it with -y 1)\n",
                    watchdog_state.rank, watchdog_state.step.load(std::memory_order_relaxed), watchdog_name_length(what), what,
                    watchdog_state.timeout_s);
            fflush(stderr);
            _exit(1);
        }
    }).detach();
}
