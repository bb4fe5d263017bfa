// checkpoint_writer.h — a checkpoint's files written on a host thread while training goes on
// (--checkpoint-async 1, the default), for both engines. Host only.
//
// At a checkpoint each rank copies what its files hold into its CheckpointWriter (rank 0 the
// weights, every rank its state file's CheckpointState), and a thread writes them exactly as
// checkpoint.h always has: a temporary name, fsync, rename, fsync of the directory. The training
// goes on meanwhile; the copies are what it may not change. A checkpoint is whole only when every
// rank's files are in place, which no rank sees alone, so the ranks settle it together at step
// boundaries (run_checkpoint_settle, llmc/run.h) and only then does rank 0 write DONE. A crash at
// any moment therefore leaves the newest DONE checkpoint whole, as with synchronous writes; the
// files' bytes are the same either way.
//
// A failed write (a full disk) does not exit from the thread: checkpoint_write_failed throws on a
// writer (checkpoint_write_throws), the writer keeps the line, and the ranks stop together when
// they settle, each failed rank printing its line. Signals are blocked on the thread, so the
// trainer's handlers (llmc/run.h) always run on the training thread.
#pragma once
#include <atomic>
#include <chrono>
#include <csignal>
#include <pthread.h>
#include <string>
#include <thread>
#include <vector>
#include "checkpoint.h"

enum { CHECKPOINT_WRITTEN = 0, CHECKPOINT_WRITING = 1, CHECKPOINT_FAILED = 2 };

struct CheckpointWriter {
    std::thread thread;
    int step = -1;                      // the checkpoint in flight, not yet settled (-1: none)
    std::atomic<int> status{CHECKPOINT_WRITTEN};
    std::string error;                  // the failed write's line (status CHECKPOINT_FAILED)
    std::string dir;
    bool model = false;                 // this rank writes the model file (rank 0)
    LlamaConfig config = {};
    const float* weights = nullptr;     // the weights at `step` the model file holds (rank 0)
    std::vector<float> params;          // their copy, when the training goes on meanwhile (kept for the next checkpoint)
    CheckpointState state;              // this rank's state file
    double write_seconds = 0.0;         // the writes' own time
    double held_seconds = 0.0;          // the training thread's time on this checkpoint (copies, waits)
    std::atomic<int> loop_step{0};      // the training loop's step (the test hook below)
    std::atomic<int> hold_steps{0};     // test hook: the writes start once the loop is this far past `step`
    ~CheckpointWriter() { if (thread.joinable()) thread.join(); }
};

static inline double checkpoint_writer_now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Test hook: TRAIN_LLAMA_TEST_WRITE_HOLD=K holds each checkpoint's writes until the training loop
// has reached K steps past it (at most 120 s), to show that training goes on while they run.
static inline void checkpoint_writer_hold(CheckpointWriter* w) {
    const double until = checkpoint_writer_now() + 120.0;
    while (w->hold_steps > 0 && w->loop_step.load() < w->step + w->hold_steps && checkpoint_writer_now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

// The writes themselves (on the writer's thread, or on the caller's with background off).
static inline void checkpoint_writer_files(CheckpointWriter* w) {
    const bool throws = checkpoint_write_throws;
    checkpoint_write_throws = true;
    checkpoint_writer_hold(w);
    const double t0 = checkpoint_writer_now();
    try {
        if (w->model) checkpoint_write_model(checkpoint_model_path(w->dir, w->step), &w->config, w->weights, w->step);
        checkpoint_write_state(checkpoint_state_path(w->dir, w->step, w->state.rank), &w->state);
        w->write_seconds = checkpoint_writer_now() - t0;
        w->status.store(CHECKPOINT_WRITTEN);
    } catch (const CheckpointWriteError& e) {
        w->error = e.line;
        w->status.store(CHECKPOINT_FAILED);
    }
    checkpoint_write_throws = throws;
}

// The weights the model file holds: `weights` itself when the writes run before the training
// goes on, else a copy in w->params (unless they are there already).
static inline void checkpoint_writer_set_weights(CheckpointWriter* w, const float* weights, size_t n, bool background) {
    w->weights = weights;
    if (background && weights != w->params.data()) {
        w->params.assign(weights, weights + n);
        w->weights = w->params.data();
    }
}

// Writes checkpoint `step` of w (w->model, w->config, w->weights and w->state filled in by the
// caller) to dir: on a thread of its own when background, else here, before returning. No
// checkpoint may be in flight (run_checkpoint_settle first).
static inline void checkpoint_writer_start(CheckpointWriter* w, const std::string& dir, int step, bool background) {
    w->dir = dir;
    w->step = step;
    w->error.clear();
    w->write_seconds = 0.0;
    w->status.store(CHECKPOINT_WRITING);
    const char* hold = getenv("TRAIN_LLAMA_TEST_WRITE_HOLD");
    w->hold_steps.store(background && hold ? atoi(hold) : 0);
    if (background) {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);  // the thread inherits the mask
        try {
            w->thread = std::thread(checkpoint_writer_files, w);
        } catch (...) {}  // no thread to be had: written below
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (w->thread.joinable()) return;
    }
    checkpoint_writer_files(w);
}

// This rank's writes: CHECKPOINT_WRITTEN, _WRITING or _FAILED. wait: block until they end
// (returns the seconds it waited in *waited).
static inline int checkpoint_writer_status(CheckpointWriter* w, bool wait, double* waited) {
    *waited = 0.0;
    if (wait && w->thread.joinable()) {
        w->hold_steps.store(0);  // the loop goes no further until this checkpoint is settled
        const double t0 = checkpoint_writer_now();
        w->thread.join();
        *waited = checkpoint_writer_now() - t0;
    }
    int s = w->status.load();
    if (s != CHECKPOINT_WRITING && w->thread.joinable()) w->thread.join();  // ended: only reaps the thread
    return s;
}
