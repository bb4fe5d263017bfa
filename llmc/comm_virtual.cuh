// comm_virtual.cuh — virtual ranks in the CUDA engine (DESIGN §6 "Virtual ranks"): V logical
// ranks of one process, each with its own gradient and its own communication state (a
// GradCommGPU each, llmc/gradcomm.cuh), communicate inside one GPU as V GPUs would over NCCL.
//
// How: comm_virtual_run runs one function per logical rank, each on a host thread of its own,
// but only one thread runs at a time. A baton passes from rank 0 to rank V-1 in order. A thread
// that reaches a collective (comm.cuh sends every collective of a grid with a group here) leaves
// its buffers' addresses in the group and passes the baton on; the last rank's thread, finding
// every rank at the same collective, enqueues it on the shared stream and hands the baton back
// to rank 0. So the host code of a logical rank is the code of a real rank, and the stream sees
// every rank's work between two collectives in rank order, then the collective: no events, no
// second stream. Only one thread at a time also means the CUDA libraries' handles, the pinned
// buffers and dev/emu's runtime are never used by two threads at once.
//
// The sums fold the ranks' contributions left to right in rank order, rounding to the element
// type at every combine, ((c_0 + c_1) + c_2) + ...: what llmc/comm.h's comm_fold does on the CPU
// and what dev/emu's NCCL does, so that under dev/emu V virtual ranks give bitwise what V real
// ranks give. A real N-GPU job sums in NCCL's order (its ring or tree, chunk by chunk), which
// rounds FP8 and bf16 differently in the last bits: the simulation is of one fixed order.
//
// Collectives (the same as comm.cuh's, the element type and the operation in CommVirtualOp):
// sums of f32, f64, u64, bf16, E4M3 and E5M2, the f32 max (dev/emu's NCCL NaN rule), broadcast
// from a root, all-gather and all-to-all of bytes. Every logical rank must call the same
// collectives with the same counts in the same order, as real ranks must; a rank that does not
// stops the process with an internal error instead of a hang.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>
#include "cuda_common.cuh"
#include "fp8.h"

typedef enum {
    COMM_VIRTUAL_SUM_F32 = 0, COMM_VIRTUAL_SUM_F64, COMM_VIRTUAL_SUM_U64, COMM_VIRTUAL_SUM_BF16, COMM_VIRTUAL_SUM_E4M3,
    COMM_VIRTUAL_SUM_E5M2, COMM_VIRTUAL_MAX_F32, COMM_VIRTUAL_BROADCAST, COMM_VIRTUAL_ALLGATHER, COMM_VIRTUAL_ALLTOALL
} CommVirtualOp;

enum { COMM_VIRTUAL_RUNNING = 0, COMM_VIRTUAL_WAITING, COMM_VIRTUAL_DONE };

// What one logical rank asked for at its current collective.
struct CommVirtualCall {
    int state = COMM_VIRTUAL_RUNNING;
    long seq = 0;              // collectives this rank has reached in this comm_virtual_run
    int op = 0;
    size_t count = 0;          // elements (sums, max) or bytes (the others; per block for all-gather / all-to-all)
    int root = 0;
    const void* send = NULL;
    void* recv = NULL;
};

struct CommVirtualGroup {
    int V = 0;                 // logical ranks
    int device = 0;            // the CUDA device every thread works on
    cudaStream_t stream = 0;   // the one stream of every logical rank
    std::mutex mu;
    std::condition_variable cv;
    int turn = -1;             // the logical rank whose thread may run (-1: none)
    std::vector<CommVirtualCall> at;  // (V)
    void** table = NULL;       // (2 V) device: the send pointers, then the distinct recv pointers
    std::vector<void*> host_table;
};

static inline void comm_virtual_init(CommVirtualGroup* g, int V, int device, cudaStream_t stream) {
    g->V = V;
    g->device = device;
    g->stream = stream;
    g->turn = -1;
    g->at.assign(V, CommVirtualCall());
    g->table = cuda_malloc<void*>(2 * (size_t)V);
    g->host_table.assign(2 * (size_t)V, NULL);
}

static inline void comm_virtual_free(CommVirtualGroup* g) {
    if (g->table) CUDA_CHECK(cudaFree(g->table));
    g->table = NULL;
}

// ----------------------------------------------------------------------------
// the collectives as kernels over the ranks' buffers

// One element of a fold, in rank order, rounding to the type at every combine (dev/emu's NCCL:
// a float add of two floats, then the type's rounding; its max keeps a NaN).
__device__ static inline void comm_virtual_fold_one(int op, const void* const* send, void* const* recv, int V, int R, size_t i) {
    switch (op) {
    case COMM_VIRTUAL_SUM_F32: case COMM_VIRTUAL_MAX_F32: {
        float acc = ((const float*)send[0])[i];
        for (int r = 1; r < V; r++) {
            float v = ((const float*)send[r])[i];
            if (op == COMM_VIRTUAL_SUM_F32) acc = __fadd_rn(acc, v);
            else acc = acc > v ? acc : (v != v ? v : (acc != acc ? acc : v));
        }
        for (int k = 0; k < R; k++) ((float*)recv[k])[i] = acc;
        return;
    }
    case COMM_VIRTUAL_SUM_F64: {
        double acc = ((const double*)send[0])[i];
        for (int r = 1; r < V; r++) acc = acc + ((const double*)send[r])[i];
        for (int k = 0; k < R; k++) ((double*)recv[k])[i] = acc;
        return;
    }
    case COMM_VIRTUAL_SUM_U64: {
        unsigned long long acc = ((const unsigned long long*)send[0])[i];
        for (int r = 1; r < V; r++) acc += ((const unsigned long long*)send[r])[i];
        for (int k = 0; k < R; k++) ((unsigned long long*)recv[k])[i] = acc;
        return;
    }
    case COMM_VIRTUAL_SUM_BF16: {
        uint16_t acc = ((const uint16_t*)send[0])[i];
        for (int r = 1; r < V; r++) acc = fp8_bf16_encode(__fadd_rn(fp8_bf16_decode(acc), fp8_bf16_decode(((const uint16_t*)send[r])[i])));
        for (int k = 0; k < R; k++) ((uint16_t*)recv[k])[i] = acc;
        return;
    }
    default: {  // E4M3, E5M2
        const Fp8Format f = op == COMM_VIRTUAL_SUM_E5M2 ? FP8_E5M2 : FP8_E4M3;
        uint8_t acc = ((const uint8_t*)send[0])[i];
        for (int r = 1; r < V; r++) acc = fp8_sum_codes(f, acc, ((const uint8_t*)send[r])[i]);
        for (int k = 0; k < R; k++) ((uint8_t*)recv[k])[i] = acc;
        return;
    }
    }
}

// table: send (V) then recv (R). Every element's contributions are read before any of its
// results is written, so a rank's recv may be its send (in place).
__global__ void comm_virtual_fold_kernel(int op, void* const* table, int V, int R, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        comm_virtual_fold_one(op, (const void* const*)table, table + V, V, R, i);
}

// Rank r's recv gets `bytes` from every rank j at block j: all-gather (src: send[j]) or
// all-to-all (src: block r of send[j]). blockIdx.y is the receiving rank.
__global__ void comm_virtual_blocks_kernel(void* const* table, int V, size_t bytes, int alltoall) {
    const int r = blockIdx.y;
    uint8_t* dst = (uint8_t*)table[V + r];
    const size_t total = (size_t)V * bytes, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const size_t j = i / bytes, b = i % bytes;
        const uint8_t* src = (const uint8_t*)table[j] + (alltoall ? (size_t)r * bytes : 0);
        dst[i] = src[b];
    }
}

static inline size_t comm_virtual_elem_bytes(int op) {
    switch (op) {
    case COMM_VIRTUAL_SUM_F32: case COMM_VIRTUAL_MAX_F32: return 4;
    case COMM_VIRTUAL_SUM_F64: case COMM_VIRTUAL_SUM_U64: return 8;
    case COMM_VIRTUAL_SUM_BF16: return 2;
    default: return 1;
    }
}

// The collective every rank is waiting at, enqueued on the group's stream (the last rank's thread).
static inline void comm_virtual_enqueue(CommVirtualGroup* g) {
    const int V = g->V;
    const CommVirtualCall& c = g->at[V - 1];
    cudaStream_t s = g->stream;
    if (c.op == COMM_VIRTUAL_BROADCAST) {  // in place: root's buffer to every other rank's
        const void* src = g->at[c.root].send;
        for (int r = 0; r < V; r++)
            if (g->at[r].recv != src) CUDA_CHECK(cudaMemcpyAsync(g->at[r].recv, src, c.count, cudaMemcpyDeviceToDevice, s));
        return;
    }
    // the table: every send, then the recv buffers (distinct ones only for the folds: ranks may
    // share a result buffer, llmc/gradcomm.cuh's fidelity reference)
    int R = 0;
    for (int r = 0; r < V; r++) g->host_table[r] = const_cast<void*>(g->at[r].send);
    const bool fold = c.op != COMM_VIRTUAL_ALLGATHER && c.op != COMM_VIRTUAL_ALLTOALL;
    for (int r = 0; r < V; r++) {
        void* p = g->at[r].recv;
        bool seen = false;
        for (int k = 0; k < R && fold; k++) seen = seen || g->host_table[V + k] == p;
        if (!seen) g->host_table[V + R++] = p;
    }
    CUDA_CHECK(cudaMemcpyAsync(g->table, g->host_table.data(), (size_t)(V + R) * sizeof(void*), cudaMemcpyHostToDevice, s));
    if (fold) {
        comm_virtual_fold_kernel<<<cuda_grid_for(c.count, 256), 256, 0, s>>>(c.op, g->table, V, R, c.count);
    } else {
        dim3 grid((unsigned)std::min(cuda_grid_for((size_t)V * c.count, 256), 1024), (unsigned)V);
        comm_virtual_blocks_kernel<<<grid, 256, 0, s>>>(g->table, V, c.count, c.op == COMM_VIRTUAL_ALLTOALL ? 1 : 0);
    }
    KERNEL_CHECK();
}

// ----------------------------------------------------------------------------
// the baton

[[noreturn]] static inline void comm_virtual_mismatch(const CommVirtualGroup* g, int r) {
    const CommVirtualCall& a = g->at[r];
    const CommVirtualCall& b = g->at[g->V - 1];
    fprintf(stderr, "comm_virtual: logical rank %d is %s (collective %ld, op %d, count %zu) while rank %d is at collective %ld "
                    "(op %d, count %zu): the ranks took different paths\n",
            r, a.state == COMM_VIRTUAL_DONE ? "done" : "at a collective", a.seq, a.op, a.count, g->V - 1, b.seq, b.op, b.count);
    exit(1);
}

// Logical rank v's collective (from comm.cuh): returns when it is enqueued and v's turn has
// come again.
static inline void comm_virtual_collective(CommVirtualGroup* g, int v, int op, const void* send, void* recv, size_t count, int root) {
    std::unique_lock<std::mutex> lock(g->mu);
    if (g->turn != v) { fprintf(stderr, "comm_virtual: logical rank %d called a collective out of turn\n", v); exit(1); }
    CommVirtualCall& me = g->at[v];
    me.state = COMM_VIRTUAL_WAITING;
    me.seq++;
    me.op = op; me.count = count; me.root = root; me.send = send; me.recv = recv;
    if (v < g->V - 1) {
        g->turn = v + 1;
    } else {
        for (int r = 0; r < g->V; r++) {
            const CommVirtualCall& a = g->at[r];
            if (a.state != COMM_VIRTUAL_WAITING || a.seq != me.seq || a.op != op || a.count != count || a.root != root)
                comm_virtual_mismatch(g, r);
        }
        comm_virtual_enqueue(g);
        for (CommVirtualCall& a : g->at) a.state = COMM_VIRTUAL_RUNNING;
        g->turn = 0;
    }
    g->cv.notify_all();
    g->cv.wait(lock, [&] { return g->turn == v; });
}

// Runs fn(v) for every logical rank v, on threads of their own, one at a time as described
// above; returns when all have returned. Nested calls are not allowed.
static inline void comm_virtual_run(CommVirtualGroup* g, const std::function<void(int)>& fn) {
    const int V = g->V;
    {
        std::lock_guard<std::mutex> lock(g->mu);
        for (CommVirtualCall& a : g->at) a = CommVirtualCall();
        g->turn = 0;
    }
    std::vector<std::thread> threads;
    for (int v = 0; v < V; v++)
        threads.emplace_back([g, v, V, &fn] {
            {
                std::unique_lock<std::mutex> lock(g->mu);
                g->cv.wait(lock, [&] { return g->turn == v; });
            }
            CUDA_CHECK(cudaSetDevice(g->device));
            fn(v);
            std::lock_guard<std::mutex> lock(g->mu);
            g->at[v].state = COMM_VIRTUAL_DONE;
            if (v == V - 1) {
                for (int r = 0; r < V; r++)
                    if (g->at[r].state != COMM_VIRTUAL_DONE || g->at[r].seq != g->at[v].seq) comm_virtual_mismatch(g, r);
                g->turn = -1;
            } else {
                g->turn = v + 1;
            }
            g->cv.notify_all();
        });
    for (std::thread& t : threads) t.join();
}
