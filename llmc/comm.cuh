// comm.cuh — data-parallel communication of the CUDA engine over NCCL: one rank per GPU.
// CommGridGPU holds this process's place (rank, world size, rank on its node, GPU) and the NCCL
// communicator with the stream every collective is enqueued on (the trainer's compute stream, so
// collectives are ordered with the kernels around them without events).
//
// Launch (DESIGN §1, scripts/slurm):
//   comm_gpu_init_mpi          mpirun / srun --mpi=pmix: ranks from MPI_COMM_WORLD, the rank on the
//                              node from an MPI_COMM_TYPE_SHARED split, the NCCL unique id broadcast
//                              over MPI. Needs the MPI include path at build time
//                              ($(mpicxx --showme:compile)) and its libraries at link time.
//   comm_gpu_init_slurm_file   plain srun, no MPI: SLURM_PROCID / SLURM_STEP_NUM_TASKS (else
//                              SLURM_NTASKS) / SLURM_LOCALID; rank 0 writes the NCCL id to a file on a
//                              shared file system (path argument or $TRAIN_LLAMA_NCCL_ID_FILE, with
//                              .$SLURM_JOB_ID.$SLURM_STEP_ID appended), the others poll for it (timeout
//                              $TRAIN_LLAMA_NCCL_ID_TIMEOUT seconds, default 600; rank 1 prints a line
//                              each minute it waits).
//   comm_gpu_init_single       one process; with use_nccl a one-rank communicator, so the same
//                              collectives run (a copy) — what dev/cuda/geofp8.cu uses.
// MPI is optional: without <mpi.h> on the include path (or with -DCOMM_GPU_NO_MPI) the MPI launch
// reports how to rebuild and exits; the other two work.
//
// Collectives (sizes in elements unless the name says bytes; send == recv is in place; every
// call is asynchronous on g->stream; with no communicator they copy send to recv):
//   comm_gpu_allreduce_f32_sum / _f64_sum / _u64_sum / _bf16_sum / _fp8_sum, comm_gpu_allreduce_f32_max,
//   comm_gpu_alltoall_bytes (grouped ncclSend / ncclRecv), comm_gpu_allgather_bytes,
//   comm_gpu_broadcast_f32 / _bytes (from a root, in place).
// The FP8 sum is NCCL's native ncclFloat8e4m3 / ncclFloat8e5m2 + ncclSum (NCCL >= 2.24, Hopper or
// newer GPUs): every combine rounds back to the format, which the CPU engine's MPI operator
// (comm.h, fp8_sum_codes) models. It is
// never ncclAvg: the average is decode(sum) / (s N) afterwards (geofp8_dequantize_units).
// A grid with a virtual group (--virtual-ranks, llmc/comm_virtual.cuh) is one logical rank of
// this process: its collectives go to the group, which folds the logical ranks in rank order.
// Errors: NCCL_CHECK prints file:line, the call and NCCL's text, then exits 1 (Slurm's
// --kill-on-bad-exit takes the other ranks down); bad launch settings get one "error:" line.
// A dead peer: a collective whose peer is gone never completes, so the host would wait forever in
// whatever synchronizes next (cudaStreamSynchronize, a device-to-host cudaMemcpy, the next
// blocking enqueue), and those waits are spread over the trainer and its subsystems. Instead, a
// thread started with the communicator polls ncclCommGetAsyncError every COMM_GPU_WATCH_MS; when
// NCCL reports an error (a closed connection, a network failure: what a dead rank looks like to
// the others) it prints one "error: rank R: ..." line, aborts the communicator and exits 1 —
// whatever the main thread is waiting on — so the launcher ends the job. The thread stops in
// comm_gpu_finalize before the communicator is destroyed.
#pragma once
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <unistd.h>
#include <nccl.h>
#include "comm_virtual.cuh"
#include "cuda_common.cuh"
#include "fp8.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 24, 0)
#error "llmc/comm.cuh needs NCCL 2.24 or newer (ncclFloat8e4m3)"
#endif

#if !defined(COMM_GPU_NO_MPI) && defined(__has_include)
#if __has_include(<mpi.h>)
#define COMM_GPU_HAVE_MPI 1
#endif
#endif

#ifdef COMM_GPU_HAVE_MPI
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // C API only: the C++ bindings are deprecated and warn
#endif
#include <mpi.h>
#ifndef MPI_CHECK  // the same definition as llmc/comm.h
#define MPI_CHECK(call) do { int err_ = (call); if (err_ != MPI_SUCCESS) { \
    char msg_[MPI_MAX_ERROR_STRING]; int len_ = 0; MPI_Error_string(err_, msg_, &len_); \
    fprintf(stderr, "MPI error %s:%d: %s: %s\n", __FILE__, __LINE__, #call, msg_); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)
#endif
#endif

#define NCCL_CHECK(call) do { ncclResult_t r_ = (call); if (r_ != ncclSuccess) { \
    fprintf(stderr, "NCCL error %s:%d: %s: %s\n", __FILE__, __LINE__, #call, ncclGetErrorString(r_)); \
    exit(1); } } while (0)

#define COMM_GPU_ID_FILE_ENV "TRAIN_LLAMA_NCCL_ID_FILE"
#define COMM_GPU_ID_TIMEOUT_ENV "TRAIN_LLAMA_NCCL_ID_TIMEOUT"
static const double COMM_GPU_ID_TIMEOUT_S = 600.0;  // a large job's ranks start over minutes
static const int COMM_GPU_ID_POLL_MS = 200;
// How often the watch thread asks NCCL for asynchronous errors: each query reads a flag, so the
// cost is nil, and half a second is instant next to a launcher's own timeouts.
static const int COMM_GPU_WATCH_MS = 500;

enum { COMM_GPU_SINGLE = 0, COMM_GPU_MPI, COMM_GPU_SLURM_FILE };

// The thread that watches a communicator for asynchronous errors (see the header comment).
typedef struct {
    ncclComm_t comm;
    int rank;
    std::mutex mu;
    std::condition_variable cv;
    bool stop;  // set under mu by comm_gpu_watch_stop
    std::thread thread;
} CommWatchGPU;

typedef struct {
    int rank;          // 0..world_size-1
    int world_size;    // data-parallel ranks (one per GPU)
    int local_rank;    // rank on this node
    int device;        // CUDA device this rank uses
    ncclComm_t comm;   // NULL: one process without NCCL (collectives are copies)
    cudaStream_t stream;
    int launcher;      // COMM_GPU_SINGLE / COMM_GPU_MPI / COMM_GPU_SLURM_FILE
    CommWatchGPU* watch;  // NULL without a communicator
    CommVirtualGroup* vgroup;  // --virtual-ranks: the logical ranks of this process (comm_virtual.cuh), else NULL
    int vrank;                 // with vgroup: this grid's logical rank (= rank)
} CommGridGPU;

// The watch thread's body. The exit is _exit, not exit: the main thread is inside the CUDA
// runtime or NCCL at this moment, and exit's teardown (static destructors, the CUDA runtime's
// atexit handlers) would run under it and could block; the process's end closes its connections
// and frees its GPU context, which is what the peers and the launcher need to see.
static inline void comm_gpu_watch_loop(CommWatchGPU* w) {
    std::unique_lock<std::mutex> lock(w->mu);
    while (!w->cv.wait_for(lock, std::chrono::milliseconds(COMM_GPU_WATCH_MS), [w] { return w->stop; })) {
        ncclResult_t async = ncclSuccess;
        ncclResult_t query = ncclCommGetAsyncError(w->comm, &async);
        if (query == ncclSuccess && (async == ncclSuccess || async == ncclInProgress)) continue;
        ncclResult_t bad = query != ncclSuccess ? query : async;
        const char* detail = ncclGetLastError(w->comm);
        fprintf(stderr, "error: rank %d: NCCL reports '%s'%s%s%s on the communicator: another rank has died or the network "
                        "between ranks failed; aborting the communicator and exiting instead of waiting for it\n",
                w->rank, ncclGetErrorString(bad), detail && *detail ? " (" : "", detail && *detail ? detail : "",
                detail && *detail ? ")" : "");
        // every stdio stream: the last step lines and metrics rows, when they go to files (the main
        // thread holds a stream's lock only inside one stdio call, so this cannot wait on NCCL)
        fflush(NULL);
        ncclCommAbort(w->comm);
        _exit(1);
    }
}

// Starts watching g->comm (a no-op without one). The struct lives on the heap until
// comm_gpu_watch_stop: a process that exits without comm_gpu_finalize must not destroy a
// joinable std::thread (that would call std::terminate).
static inline void comm_gpu_watch_start(CommGridGPU* g) {
    if (!g->comm || g->watch) return;
    CommWatchGPU* w = new CommWatchGPU();
    w->comm = g->comm;
    w->rank = g->rank;
    w->stop = false;
    w->thread = std::thread(comm_gpu_watch_loop, w);
    g->watch = w;
}

static inline void comm_gpu_watch_stop(CommGridGPU* g) {
    CommWatchGPU* w = g->watch;
    if (!w) return;
    {
        std::lock_guard<std::mutex> lock(w->mu);
        w->stop = true;
    }
    w->cv.notify_one();
    w->thread.join();
    delete w;
    g->watch = NULL;
}

// Picks this rank's GPU from the GPUs this task sees: local_rank modulo their count. That is
// local_rank when the task sees the whole node, device 0 when it was given one GPU
// (--gpus-per-task=1), and the right one of its socket's GPUs under --gpu-bind=closest (tasks are
// numbered in node order, so each socket's tasks map onto its own GPUs).
static inline void comm_gpu_select_device(CommGridGPU* g) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        fprintf(stderr, "error: rank %d sees no CUDA device (launch one task per GPU, e.g. srun --gpus-per-task=1)\n", g->rank);
        exit(1);
    }
    g->device = g->local_rank % count;
    CUDA_CHECK(cudaSetDevice(g->device));
}

// One process, world size 1. use_nccl: also a one-rank NCCL communicator on the current device.
static inline void comm_gpu_init_single(CommGridGPU* g, cudaStream_t stream, int use_nccl) {
    memset(g, 0, sizeof(*g));
    g->world_size = 1;
    g->stream = stream;
    g->launcher = COMM_GPU_SINGLE;
    CUDA_CHECK(cudaGetDevice(&g->device));
    if (use_nccl) {
        int dev = g->device;
        NCCL_CHECK(ncclCommInitAll(&g->comm, 1, &dev));
        comm_gpu_watch_start(g);
    }
}

// MPI launch: MPI_Init (unless already initialized), ranks, the node-local rank, the GPU, the
// NCCL communicator from rank 0's unique id. A single rank gets no communicator.
static inline void comm_gpu_init_mpi(CommGridGPU* g, int* argc, char*** argv, cudaStream_t stream) {
    memset(g, 0, sizeof(*g));
    g->stream = stream;
    g->launcher = COMM_GPU_MPI;
#ifdef COMM_GPU_HAVE_MPI
    int inited = 0;
    MPI_CHECK(MPI_Initialized(&inited));
    if (!inited) MPI_CHECK(MPI_Init(argc, argv));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &g->rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &g->world_size));
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g->rank, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &g->local_rank));
    MPI_CHECK(MPI_Comm_free(&node));
    comm_gpu_select_device(g);
    if (g->world_size == 1) return;
    ncclUniqueId id;
    if (g->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_CHECK(MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD));
    NCCL_CHECK(ncclCommInitRank(&g->comm, g->world_size, id, g->rank));
    comm_gpu_watch_start(g);
#else
    (void)argc; (void)argv;
    fprintf(stderr, "error: this binary was built without MPI, so it cannot start from mpirun; rebuild with the MPI flags "
                    "(nvcc ... $(mpicxx --showme:compile) ... $(mpicxx --showme:link)) or launch with srun and %s set\n",
            COMM_GPU_ID_FILE_ENV);
    exit(1);
#endif
}

static inline int comm_gpu_env_int(const char* name, int fallback, bool required) {
    const char* v = getenv(name);
    if (!v || !*v) {
        if (required) {
            fprintf(stderr, "error: %s is not set; comm_gpu_init_slurm_file runs under srun (one task per GPU)\n", name);
            exit(1);
        }
        return fallback;
    }
    char* end = NULL;
    long x = strtol(v, &end, 10);
    if (end == v || x < 0 || x > (1L << 30)) {
        fprintf(stderr, "error: %s='%s' is not a non-negative integer\n", name, v);
        exit(1);
    }
    return (int)x;
}

// What identifies this launch in the id file, so that a file left by an earlier job, job step or
// requeued run is never taken for this one's.
static inline std::string comm_gpu_launch_tag(int world_size) {
    const char* job = getenv("SLURM_JOB_ID");
    const char* step = getenv("SLURM_STEP_ID");
    const char* restart = getenv("SLURM_RESTART_COUNT");
    char buf[256];
    snprintf(buf, sizeof(buf), "train_llama-nccl-id job=%s step=%s restart=%s world=%d", job ? job : "none", step ? step : "none",
             restart ? restart : "0", world_size);
    return buf;
}

static inline std::string comm_gpu_hex(const unsigned char* p, size_t n) {
    static const char* digits = "0123456789abcdef";
    std::string s;
    for (size_t i = 0; i < n; i++) { s += digits[p[i] >> 4]; s += digits[p[i] & 15]; }
    return s;
}

// Reads an id file: 0 if it holds `tag` and a well-formed id (into *id); 1 if absent, stale or
// incomplete (*found gets the first line seen, for the error message).
static inline int comm_gpu_read_id_file(const char* path, const std::string& tag, ncclUniqueId* id, std::string* found) {
    FILE* f = fopen(path, "r");
    if (!f) return 1;
    char line[512], hex[2 * sizeof(ncclUniqueId) + 8];
    int ok = fgets(line, sizeof(line), f) != NULL && fgets(hex, sizeof(hex), f) != NULL;
    fclose(f);
    if (!ok) return 1;
    line[strcspn(line, "\n")] = 0;
    hex[strcspn(hex, "\n")] = 0;
    *found = line;
    if (tag != line || strlen(hex) != 2 * sizeof(ncclUniqueId)) return 1;
    unsigned char* out = reinterpret_cast<unsigned char*>(id);
    for (size_t i = 0; i < sizeof(ncclUniqueId); i++) {
        unsigned int b = 0;
        if (sscanf(hex + 2 * i, "%2x", &b) != 1) return 1;
        out[i] = (unsigned char)b;
    }
    return 0;
}

// Rank 0's side: `tag` and the id in hex, written to a temporary name, flushed to disk and renamed
// onto `path`, so that a reader never sees half a file. Exits with one error line on failure.
static inline void comm_gpu_write_id_file(const char* path, const std::string& tag, const ncclUniqueId* id) {
    std::string tmp = std::string(path) + ".tmp." + std::to_string((long)getpid());
    FILE* f = fopen(tmp.c_str(), "w");
    if (!f) {
        fprintf(stderr, "error: rank 0 cannot write the NCCL id file '%s': %s (is its directory there and writable?)\n", tmp.c_str(),
                strerror(errno));
        exit(1);
    }
    std::string body = tag + "\n" + comm_gpu_hex(reinterpret_cast<const unsigned char*>(id), sizeof(*id)) + "\n";
    bool ok = fwrite(body.data(), 1, body.size(), f) == body.size();
    ok &= fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp.c_str(), path) != 0) {
        fprintf(stderr, "error: rank 0 cannot write the NCCL id file '%s': %s\n", path, strerror(errno));
        exit(1);
    }
}

// srun launch without MPI. id_path: a file on a file system every node sees (NULL or "": take
// $TRAIN_LLAMA_NCCL_ID_FILE). Rank 0 writes the id to a temporary name and renames it (readers
// never see half a file), the others poll until the file names this launch; rank 0 removes it
// once the communicator exists.
static inline void comm_gpu_init_slurm_file(CommGridGPU* g, const char* id_path, cudaStream_t stream) {
    memset(g, 0, sizeof(*g));
    g->stream = stream;
    g->launcher = COMM_GPU_SLURM_FILE;
    g->rank = comm_gpu_env_int("SLURM_PROCID", 0, true);
    // the tasks of this srun step (SLURM_NTASKS is the allocation's, also seen in the batch script)
    g->world_size = getenv("SLURM_STEP_NUM_TASKS") ? comm_gpu_env_int("SLURM_STEP_NUM_TASKS", 1, true)
                                                   : comm_gpu_env_int("SLURM_NTASKS", 1, true);
    g->local_rank = comm_gpu_env_int("SLURM_LOCALID", 0, true);
    if (g->world_size < 1 || g->rank >= g->world_size) {
        fprintf(stderr, "error: SLURM_PROCID=%d is not below SLURM_NTASKS=%d\n", g->rank, g->world_size);
        exit(1);
    }
    comm_gpu_select_device(g);
    if (g->world_size == 1) return;
    std::string path = id_path && *id_path ? id_path : (getenv(COMM_GPU_ID_FILE_ENV) ? getenv(COMM_GPU_ID_FILE_ENV) : "");
    if (path.empty()) {
        fprintf(stderr, "error: rank %d: no NCCL id file given; set %s to a path on a file system shared by every node "
                        "(e.g. $OUT_DIR/nccl_id), or launch with MPI\n", g->rank, COMM_GPU_ID_FILE_ENV);
        exit(1);
    }
    // one file per job step: concurrent sruns of one allocation may share the variable
    if (getenv("SLURM_JOB_ID")) path += std::string(".") + getenv("SLURM_JOB_ID");
    if (getenv("SLURM_STEP_ID")) path += std::string(".") + getenv("SLURM_STEP_ID");
    const std::string tag = comm_gpu_launch_tag(g->world_size);
    ncclUniqueId id;
    if (g->rank == 0) {
        NCCL_CHECK(ncclGetUniqueId(&id));
        comm_gpu_write_id_file(path.c_str(), tag, &id);
    } else {
        double timeout = comm_gpu_env_int(COMM_GPU_ID_TIMEOUT_ENV, (int)COMM_GPU_ID_TIMEOUT_S, false);
        auto start = std::chrono::steady_clock::now();
        std::string found;
        int reported = 0;
        while (comm_gpu_read_id_file(path.c_str(), tag, &id, &found) != 0) {
            double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            if (g->rank == 1 && waited >= 60.0 * (reported + 1)) {
                reported++;
                printf("rank 1: still waiting for the NCCL id in '%s' after %.0f s (found %s)\n", path.c_str(), waited,
                       found.empty() ? "no file" : ("'" + found + "'").c_str());
                fflush(stdout);
            }
            if (waited > timeout) {
                fprintf(stderr, "error: rank %d waited %.0f s for the NCCL id that rank 0 writes to '%s' and %s; the file must be on a "
                                "file system every node shares (not /tmp), and rank 0 must have started (raise %s if the job starts slowly)\n",
                        g->rank, waited, path.c_str(),
                        found.empty() ? "found no such file" : ("found only '" + found + "', not '" + tag + "'").c_str(),
                        COMM_GPU_ID_TIMEOUT_ENV);
                exit(1);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(COMM_GPU_ID_POLL_MS));
        }
    }
    NCCL_CHECK(ncclCommInitRank(&g->comm, g->world_size, id, g->rank));
    comm_gpu_watch_start(g);
    // every rank has read the file once the (collective) init returns
    if (g->rank == 0) unlink(path.c_str());
}

static inline void comm_gpu_finalize(CommGridGPU* g) {
    if (g->comm) {
        // still watched: both calls wait on the peers
        CUDA_CHECK(cudaStreamSynchronize(g->stream));
        NCCL_CHECK(ncclCommFinalize(g->comm));
        comm_gpu_watch_stop(g);
        NCCL_CHECK(ncclCommDestroy(g->comm));
        g->comm = NULL;
    }
#ifdef COMM_GPU_HAVE_MPI
    if (g->launcher == COMM_GPU_MPI) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
    }
#endif
}

// Bytes a ring all-reduce of `payload` bytes sends from each rank (the figure the logs report).
static inline double comm_gpu_ring_bytes(const CommGridGPU* g, double payload) {
    return g->world_size > 1 ? 2.0 * (g->world_size - 1) / g->world_size * payload : 0.0;
}

// ----------------------------------------------------------------------------
// collectives

static inline void comm_gpu_copy(CommGridGPU* g, const void* send, void* recv, size_t bytes) {
    if (send != recv && bytes) CUDA_CHECK(cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, g->stream));
}

static inline void comm_gpu_allreduce(CommGridGPU* g, const void* send, void* recv, size_t count, ncclDataType_t type, size_t elem_bytes,
                                      ncclRedOp_t op) {
    if (count == 0) return;
    if (g->vgroup) {
        int vop = op == ncclMax ? COMM_VIRTUAL_MAX_F32 : type == ncclFloat32 ? COMM_VIRTUAL_SUM_F32 : type == ncclFloat64 ? COMM_VIRTUAL_SUM_F64
                : type == ncclUint64 ? COMM_VIRTUAL_SUM_U64 : type == ncclBfloat16 ? COMM_VIRTUAL_SUM_BF16
                : type == ncclFloat8e5m2 ? COMM_VIRTUAL_SUM_E5M2 : COMM_VIRTUAL_SUM_E4M3;
        comm_virtual_collective(g->vgroup, g->vrank, vop, send, recv, count, 0);
        return;
    }
    if (!g->comm) { comm_gpu_copy(g, send, recv, count * elem_bytes); return; }
    NCCL_CHECK(ncclAllReduce(send, recv, count, type, op, g->comm, g->stream));
}

// Collectives between comm_gpu_group_begin and _end go out as one NCCL launch (the per-unit
// all-reduces of a gradient bucket, whose units are not adjacent in the flat buffer; the
// --muon-shard broadcasts of a step).
static inline void comm_gpu_group_begin(CommGridGPU* g) { if (g->comm) NCCL_CHECK(ncclGroupStart()); }
static inline void comm_gpu_group_end(CommGridGPU* g) { if (g->comm) NCCL_CHECK(ncclGroupEnd()); }

// recv (n) = Σ_ranks send (n)
static inline void comm_gpu_allreduce_f32_sum(CommGridGPU* g, const float* send, float* recv, size_t n) {
    comm_gpu_allreduce(g, send, recv, n, ncclFloat32, sizeof(float), ncclSum);
}

static inline void comm_gpu_allreduce_f64_sum(CommGridGPU* g, const double* send, double* recv, size_t n) {
    comm_gpu_allreduce(g, send, recv, n, ncclFloat64, sizeof(double), ncclSum);
}

static inline void comm_gpu_allreduce_u64_sum(CommGridGPU* g, const unsigned long long* send, unsigned long long* recv, size_t n) {
    comm_gpu_allreduce(g, send, recv, n, ncclUint64, sizeof(unsigned long long), ncclSum);
}

// bf16 sum, rounding to bf16 at every combine
static inline void comm_gpu_allreduce_bf16_sum(CommGridGPU* g, const bf16* send, bf16* recv, size_t n) {
    comm_gpu_allreduce(g, send, recv, n, ncclBfloat16, sizeof(bf16), ncclSum);
}

// FP8 codes of format f (n bytes), summed natively (rounding to f at every combine)
static inline void comm_gpu_allreduce_fp8_sum(CommGridGPU* g, const uint8_t* send, uint8_t* recv, size_t n, Fp8Format f) {
    comm_gpu_allreduce(g, send, recv, n, f == FP8_E5M2 ? ncclFloat8e5m2 : ncclFloat8e4m3, 1, ncclSum);
}

// recv (n) = max over ranks (the amax vector: one small collective per step)
static inline void comm_gpu_allreduce_f32_max(CommGridGPU* g, const float* send, float* recv, size_t n) {
    comm_gpu_allreduce(g, send, recv, n, ncclFloat32, sizeof(float), ncclMax);
}

// send (N, bytes) -> recv (N, bytes): rank r's block j goes to rank j, where it lands as block r.
// Grouped point-to-point, so all 2N transfers progress together.
static inline void comm_gpu_alltoall_bytes(CommGridGPU* g, const void* send, void* recv, size_t bytes) {
    if (bytes == 0) return;
    if (g->vgroup) { comm_virtual_collective(g->vgroup, g->vrank, COMM_VIRTUAL_ALLTOALL, send, recv, bytes, 0); return; }
    if (!g->comm) { comm_gpu_copy(g, send, recv, bytes); return; }
    const char* s = static_cast<const char*>(send);
    char* r = static_cast<char*>(recv);
    NCCL_CHECK(ncclGroupStart());
    for (int peer = 0; peer < g->world_size; peer++) {
        NCCL_CHECK(ncclSend(s + (size_t)peer * bytes, bytes, ncclUint8, peer, g->comm, g->stream));
        NCCL_CHECK(ncclRecv(r + (size_t)peer * bytes, bytes, ncclUint8, peer, g->comm, g->stream));
    }
    NCCL_CHECK(ncclGroupEnd());
}

// recv (N, bytes) = every rank's send (bytes), in rank order
static inline void comm_gpu_allgather_bytes(CommGridGPU* g, const void* send, void* recv, size_t bytes) {
    if (bytes == 0) return;
    if (g->vgroup) { comm_virtual_collective(g->vgroup, g->vrank, COMM_VIRTUAL_ALLGATHER, send, recv, bytes, 0); return; }
    if (!g->comm) { comm_gpu_copy(g, send, recv, bytes); return; }
    NCCL_CHECK(ncclAllGather(send, recv, bytes, ncclUint8, g->comm, g->stream));
}

// buf (bytes) = root's buf, in place (the settings text of the launch check)
static inline void comm_gpu_broadcast_bytes(CommGridGPU* g, void* buf, size_t bytes, int root) {
    if (bytes == 0) return;
    if (g->vgroup) { comm_virtual_collective(g->vgroup, g->vrank, COMM_VIRTUAL_BROADCAST, buf, buf, bytes, root); return; }
    if (!g->comm) return;
    NCCL_CHECK(ncclBroadcast(buf, buf, bytes, ncclUint8, root, g->comm, g->stream));
}

// buf (n) = root's buf (n), in place: the factors rank 0 computes
static inline void comm_gpu_broadcast_f32(CommGridGPU* g, float* buf, size_t n, int root) {
    if (n == 0) return;
    if (g->vgroup) { comm_virtual_collective(g->vgroup, g->vrank, COMM_VIRTUAL_BROADCAST, buf, buf, n * sizeof(float), root); return; }
    if (!g->comm) return;
    NCCL_CHECK(ncclBroadcast(buf, buf, n, ncclFloat32, root, g->comm, g->stream));
}
