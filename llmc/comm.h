// comm.h — data-parallel communication of the CPU engine over MPI (host only).
// CommGrid holds this process's rank among the data-parallel ranks. Single-process runs need
// no mpirun: MPI starts as a singleton with world size 1.
// comm_reduce_gradients() is the one entry point of gradient communication: after the last
// micro-step it replaces the local fp32 gradient buffer (num_params) by the average over ranks,
// in the mode given by -c, and returns the bytes this rank put on the wire (a ring all-reduce
// sends 2(N-1)/N of the payload). Modes here: fp32 (MPI_SUM in fp32) and bf16 (each value
// rounded to bf16, summed in fp32, the sum rounded to bf16 again after every combine, as a
// bf16 all-reduce on the wire would).
#pragma once
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // C API only: the C++ bindings are deprecated and warn
#endif
#include <mpi.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include "train_config.h"
#include "utils.h"

#define MPI_CHECK(call) do { int err_ = (call); if (err_ != MPI_SUCCESS) { \
    char msg_[MPI_MAX_ERROR_STRING]; int len_ = 0; MPI_Error_string(err_, msg_, &len_); \
    fprintf(stderr, "MPI error %s:%d: %s: %s\n", __FILE__, __LINE__, #call, msg_); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

typedef struct {
    int rank;        // this process, 0..world_size-1
    int world_size;  // data-parallel ranks
    MPI_Comm comm;
} CommGrid;

static inline void comm_init(CommGrid* g, int* argc, char*** argv) {
    MPI_CHECK(MPI_Init(argc, argv));
    g->comm = MPI_COMM_WORLD;
    MPI_CHECK(MPI_Comm_rank(g->comm, &g->rank));
    MPI_CHECK(MPI_Comm_size(g->comm, &g->world_size));
}

static inline void comm_finalize(CommGrid* g) { (void)g; MPI_Finalize(); }

static inline void comm_barrier(CommGrid* g) { MPI_CHECK(MPI_Barrier(g->comm)); }

// Bytes a ring all-reduce of `payload` bytes sends from each rank.
static inline double comm_ring_bytes(const CommGrid* g, double payload) {
    return g->world_size > 1 ? 2.0 * (g->world_size - 1) / g->world_size * payload : 0.0;
}

static inline float comm_sum_float(CommGrid* g, float x) {
    float out = x;
    if (g->world_size > 1) MPI_CHECK(MPI_Allreduce(&x, &out, 1, MPI_FLOAT, MPI_SUM, g->comm));
    return out;
}

static inline double comm_sum_double(CommGrid* g, double x) {
    double out = x;
    if (g->world_size > 1) MPI_CHECK(MPI_Allreduce(&x, &out, 1, MPI_DOUBLE, MPI_SUM, g->comm));
    return out;
}

static inline int comm_max_int(CommGrid* g, int x) {
    int out = x;
    if (g->world_size > 1) MPI_CHECK(MPI_Allreduce(&x, &out, 1, MPI_INT, MPI_MAX, g->comm));
    return out;
}

// Broadcasts rank 0's string to every rank.
static inline std::string comm_broadcast_string(CommGrid* g, const std::string& s) {
    if (g->world_size == 1) return s;
    long long n = (long long)s.size();
    MPI_CHECK(MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, g->comm));
    std::string out = g->rank == 0 ? s : std::string((size_t)n, '\0');
    MPI_CHECK(MPI_Bcast(&out[0], (int)n, MPI_CHAR, 0, g->comm));
    return out;
}

// Every rank must run with the same settings (train_config_settings + data fingerprints):
// each rank compares its text with rank 0's; on any difference the differing ranks name the
// setting and every rank exits 1.
static inline void comm_check_same_settings(CommGrid* g, const std::string& settings) {
    if (g->world_size == 1) return;
    std::string ref = comm_broadcast_string(g, settings);
    std::string diff = train_config_first_difference(ref, settings);
    int any = comm_max_int(g, diff.empty() ? 0 : 1);
    if (!diff.empty())
        fprintf(stderr, "error: rank %d disagrees with rank 0 on %s (rank 0 vs rank %d); every rank must get the same flags and data\n",
                g->rank, diff.c_str(), g->rank);
    if (any) {
        fflush(stderr);
        MPI_Finalize();
        exit(1);
    }
}

// ----------------------------------------------------------------------------
// bf16 (round to nearest even; NaN kept quiet)

static inline uint16_t comm_float_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float comm_bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

// MPI user op: inout[i] = bf16(in[i] + inout[i]), the rounding a bf16 reduction does at every combine.
static inline void comm_bf16_sum_op(void* in, void* inout, int* len, MPI_Datatype*) {
    const uint16_t* a = (const uint16_t*)in;
    uint16_t* b = (uint16_t*)inout;
    for (int i = 0; i < *len; i++) b[i] = comm_float_to_bf16(comm_bf16_to_float(a[i]) + comm_bf16_to_float(b[i]));
}

// MPI counts are int: reduce large buffers in chunks.
#define COMM_CHUNK (1 << 28)

// Averages grads (n) over ranks in place; returns bytes sent by this rank.
static inline double comm_reduce_gradients(CommGrid* g, const std::string& mode, float* grads, size_t n) {
    if (mode == "fp32") {
        if (g->world_size > 1) {
            for (size_t off = 0; off < n; off += COMM_CHUNK) {
                int cnt = (int)std::min((size_t)COMM_CHUNK, n - off);
                MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, grads + off, cnt, MPI_FLOAT, MPI_SUM, g->comm));
            }
            float inv = 1.0f / g->world_size;
            for (size_t i = 0; i < n; i++) grads[i] *= inv;
        }
        return comm_ring_bytes(g, 4.0 * n);
    }
    if (mode == "bf16") {
        std::vector<uint16_t> buf(n);
        for (size_t i = 0; i < n; i++) buf[i] = comm_float_to_bf16(grads[i]);
        if (g->world_size > 1) {
            MPI_Datatype t16;
            MPI_Op op;
            MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &t16));
            MPI_CHECK(MPI_Type_commit(&t16));
            MPI_CHECK(MPI_Op_create(comm_bf16_sum_op, 1, &op));
            for (size_t off = 0; off < n; off += COMM_CHUNK) {
                int cnt = (int)std::min((size_t)COMM_CHUNK, n - off);
                MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf.data() + off, cnt, t16, op, g->comm));
            }
            MPI_Op_free(&op);
            MPI_Type_free(&t16);
        }
        float inv = 1.0f / g->world_size;
        for (size_t i = 0; i < n; i++) grads[i] = comm_bf16_to_float(buf[i]) * inv;
        return comm_ring_bytes(g, 2.0 * n);
    }
    fprintf(stderr, "error: -c %s: this gradient communication mode is not available in the CPU engine\n", mode.c_str());
    MPI_Abort(g->comm, 1);
    return 0;
}
