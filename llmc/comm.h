// comm.h — data-parallel communication of the CPU engine over MPI (host only).
// CommGrid holds this process's rank among the data-parallel ranks. Single-process runs need
// no mpirun: MPI starts as a singleton with world size 1.
// These are the transport: MPI collectives on fp32, bf16 and FP8 (E4M3 or E5M2) buffers (the low-precision
// sums round to their format at every combine, as an all-reduce on the wire in that format
// would). The gradient communication modes built on them live in llmc/gradcomm.h.
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
#include "fp8.h"
#include "train_config.h"
#include "utils.h"
#include "watchdog.h"

// Every MPI call is a wait the --comm-timeout watchdog sees (llmc/watchdog.h).
#define MPI_CHECK(call) do { watchdog_enter(#call); int err_ = (call); watchdog_leave(); if (err_ != MPI_SUCCESS) { \
    char msg_[MPI_MAX_ERROR_STRING]; int len_ = 0; MPI_Error_string(err_, msg_, &len_); \
    fprintf(stderr, "MPI error %s:%d: %s: %s\n", __FILE__, __LINE__, #call, msg_); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

// MPI counts are int: large buffers go in chunks.
#define COMM_CHUNK (1 << 28)

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

// ----------------------------------------------------------------------------
// collectives used by the FP8 modes (llmc/gradcomm.h); each is a no-op with one rank

static inline void comm_max_ints(CommGrid* g, int* x, int n) {
    if (g->world_size > 1) MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_INT, MPI_MAX, g->comm));
}

static inline void comm_max_floats(CommGrid* g, float* x, size_t n) {
    if (g->world_size == 1 || n == 0) return;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_MAX, g->comm));
}

static inline void comm_sum_floats(CommGrid* g, float* x, size_t n) {
    if (g->world_size == 1 || n == 0) return;
    for (size_t off = 0; off < n; off += COMM_CHUNK) {
        int cnt = (int)std::min((size_t)COMM_CHUNK, n - off);
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, x + off, cnt, MPI_FLOAT, MPI_SUM, g->comm));
    }
}

static inline void comm_sum_doubles(CommGrid* g, double* x, size_t n) {
    if (g->world_size == 1 || n == 0) return;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_DOUBLE, MPI_SUM, g->comm));
}

static inline void comm_sum_longs(CommGrid* g, long* x, size_t n) {
    if (g->world_size == 1 || n == 0) return;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_LONG, MPI_SUM, g->comm));
}

static inline void comm_broadcast_floats(CommGrid* g, float* x, size_t n, int root = 0) {
    if (g->world_size == 1 || n == 0) return;
    for (size_t off = 0; off < n; off += COMM_CHUNK) {
        int cnt = (int)std::min((size_t)COMM_CHUNK, n - off);
        MPI_CHECK(MPI_Bcast(x + off, cnt, MPI_FLOAT, root, g->comm));
    }
}

// fp8_sum_codes(F, a, b) for every pair of codes, table[a * 256 + b] (64 KiB, made on first use
// from fp8_sum_codes itself, so it is that function bit for bit at a lookup's cost).
template <Fp8Format F>
static inline const uint8_t* comm_fp8_sum_table() {
    static std::vector<uint8_t> table;
    if (table.empty()) {
        table.resize(256 * 256);
        for (int a = 0; a < 256; a++)
            for (int b = 0; b < 256; b++) table[a * 256 + b] = fp8_sum_codes(F, (uint8_t)a, (uint8_t)b);
    }
    return table.data();
}

// MPI user ops on FP8 codes: inout[i] = fp8_sum_codes(F, in[i], inout[i]), the rounding a
// native FP8 SUM reduction (NCCL ncclFloat8e4m3 / ncclFloat8e5m2 + ncclSum) performs at every
// combine.
template <Fp8Format F>
static inline void comm_fp8_sum_op(void* in, void* inout, int* len, MPI_Datatype*) {
    const uint8_t* a = (const uint8_t*)in;
    uint8_t* b = (uint8_t*)inout;
    const uint8_t* table = comm_fp8_sum_table<F>();
    for (int i = 0; i < *len; i++) b[i] = table[a[i] * 256 + b[i]];
}

// SUM all-reduce of FP8 codes of format f in place, rounding to f at every combine.
static inline void comm_sum_fp8(CommGrid* g, uint8_t* q, size_t n, Fp8Format f) {
    if (g->world_size == 1 || n == 0) return;
    MPI_Op op;
    (void)(f == FP8_E5M2 ? comm_fp8_sum_table<FP8_E5M2>() : comm_fp8_sum_table<FP8_E4M3>());  // made here, before MPI calls the op
    MPI_CHECK(MPI_Op_create(f == FP8_E5M2 ? comm_fp8_sum_op<FP8_E5M2> : comm_fp8_sum_op<FP8_E4M3>, 1, &op));
    for (size_t off = 0; off < n; off += COMM_CHUNK) {
        int cnt = (int)std::min((size_t)COMM_CHUNK, n - off);
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, q + off, cnt, MPI_BYTE, op, g->comm));
    }
    MPI_Op_free(&op);
}

// All-to-all of byte shards: rank r sends send[counts/displs of shard j] to rank j and receives
// every rank's shard r into recv (world_size * shard_count[r] bytes, in rank order).
static inline void comm_alltoall_shards(CommGrid* g, const uint8_t* send, const std::vector<int>& shard_off,
                                        const std::vector<int>& shard_len, uint8_t* recv) {
    int N = g->world_size, me = g->rank;
    if (N == 1) { memcpy(recv, send + shard_off[0], (size_t)shard_len[0]); return; }
    std::vector<int> rcounts(N), rdispls(N);
    for (int r = 0; r < N; r++) { rcounts[r] = shard_len[me]; rdispls[r] = r * shard_len[me]; }
    MPI_CHECK(MPI_Alltoallv(send, shard_len.data(), shard_off.data(), MPI_BYTE, recv, rcounts.data(), rdispls.data(), MPI_BYTE, g->comm));
}

// All-gather of byte shards: rank r contributes `mine` (shard_len[r] bytes); out holds every
// shard at shard_off.
static inline void comm_allgather_shards(CommGrid* g, const uint8_t* mine, const std::vector<int>& shard_off,
                                         const std::vector<int>& shard_len, uint8_t* out) {
    if (g->world_size == 1) { memcpy(out + shard_off[0], mine, (size_t)shard_len[0]); return; }
    MPI_CHECK(MPI_Allgatherv(mine, shard_len[g->rank], MPI_BYTE, out, shard_len.data(), shard_off.data(), MPI_BYTE, g->comm));
}

// All-gather of n ints per rank into out (world_size * n).
static inline void comm_allgather_ints(CommGrid* g, const int* mine, int n, int* out) {
    if (g->world_size == 1) { memcpy(out, mine, (size_t)n * sizeof(int)); return; }
    MPI_CHECK(MPI_Allgather(mine, n, MPI_INT, out, n, MPI_INT, g->comm));
}

// ----------------------------------------------------------------------------
// bf16 SUM all-reduce

// MPI user op: inout[i] = bf16(in[i] + inout[i]), the rounding a bf16 reduction does at every combine.
static inline void comm_bf16_sum_op(void* in, void* inout, int* len, MPI_Datatype*) {
    const uint16_t* a = (const uint16_t*)in;
    uint16_t* b = (uint16_t*)inout;
    for (int i = 0; i < *len; i++) b[i] = fp8_bf16_encode(fp8_bf16_decode(a[i]) + fp8_bf16_decode(b[i]));
}

static inline void comm_sum_bf16(CommGrid* g, uint16_t* x, size_t n) {
    if (g->world_size == 1 || n == 0) return;
    MPI_Datatype t16;
    MPI_Op op;
    MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &t16));
    MPI_CHECK(MPI_Type_commit(&t16));
    MPI_CHECK(MPI_Op_create(comm_bf16_sum_op, 1, &op));
    for (size_t off = 0; off < n; off += COMM_CHUNK) {
        int cnt = (int)std::min((size_t)COMM_CHUNK, n - off);
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, x + off, cnt, t16, op, g->comm));
    }
    MPI_Op_free(&op);
    MPI_Type_free(&t16);
}

// ----------------------------------------------------------------------------
// ordered sums over logical ranks (DESIGN §6 "Virtual ranks")
//
// A job of N logical ranks runs in the P processes of the grid, V = N / P in each (V = 1: every
// rank a process; V > 1: --virtual-ranks). Process p holds the contributions of logical ranks
// pV, ..., pV + V - 1. A fold sums n elements over the N logical ranks left to right in rank
// order, r = ((c_0 + c_1) + c_2) + ... + c_(N-1), rounding to the element type at every combine
// (fp32, fp64, bf16, or an FP8 format: the rounding of a sum on the wire in that format). The
// result depends on N and on the contributions only, not on P, on the MPI library's algorithms
// or on the message size: so V virtual ranks in P processes give bitwise what N processes give,
// and every bucket layout gives the same sums. How: process j folds shard j of the elements, which
// an all-to-all brings it from every logical rank, and an all-gather hands every process the
// whole result. For V = 1 that sends the bytes of a ring all-reduce, 2 (P - 1) / P of the payload.
// comm_fold_start posts the all-to-all (non-blocking, so a bucket's transfer overlaps the
// backward), comm_fold_finish folds and gathers; comm_fold does both.

typedef enum { COMM_FOLD_F32, COMM_FOLD_F64, COMM_FOLD_BF16, COMM_FOLD_E4M3, COMM_FOLD_E5M2 } CommFoldKind;

static inline size_t comm_fold_elem_bytes(CommFoldKind k) {
    return k == COMM_FOLD_F64 ? 8 : k == COMM_FOLD_F32 ? 4 : k == COMM_FOLD_BF16 ? 2 : 1;
}

// acc (n) = acc + x, rounding to the kind's format, for elements [0, n)
static inline void comm_fold_combine(CommFoldKind k, void* acc, const void* x, size_t n) {
    switch (k) {
    case COMM_FOLD_F32: {
        float* a = (float*)acc; const float* b = (const float*)x;
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = a[i] + b[i];
        return;
    }
    case COMM_FOLD_F64: {
        double* a = (double*)acc; const double* b = (const double*)x;
        for (size_t i = 0; i < n; i++) a[i] = a[i] + b[i];
        return;
    }
    case COMM_FOLD_BF16: {
        uint16_t* a = (uint16_t*)acc; const uint16_t* b = (const uint16_t*)x;
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = fp8_bf16_encode(fp8_bf16_decode(a[i]) + fp8_bf16_decode(b[i]));
        return;
    }
    case COMM_FOLD_E4M3: case COMM_FOLD_E5M2: {
        const uint8_t* table = k == COMM_FOLD_E5M2 ? comm_fp8_sum_table<FP8_E5M2>() : comm_fp8_sum_table<FP8_E4M3>();
        uint8_t* a = (uint8_t*)acc; const uint8_t* b = (const uint8_t*)x;
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = table[a[i] * 256 + b[i]];
        return;
    }
    }
}

static inline CommFoldKind comm_fold_kind_fp8(Fp8Format f) { return f == FP8_E5M2 ? COMM_FOLD_E5M2 : COMM_FOLD_E4M3; }

// One fold in flight. The element range is cut into pieces whose all-to-all counts fit MPI's int.
typedef struct {
    CommFoldKind kind;
    size_t n, e;                      // elements, bytes per element
    int V, P;                         // logical ranks per process, processes
    void* out;                        // (n) the result
    std::vector<unsigned char> send;  // per piece: for each process j, this process's V contributions to shard j
    std::vector<unsigned char> recv;  // per piece: for each process p, p's V contributions to this process's shard
    std::vector<size_t> piece_off;    // (pieces + 1) element offsets of the pieces
    std::vector<size_t> recv_off;     // (pieces + 1) byte offsets of the pieces in recv
    std::vector<MPI_Request> reqs;    // (pieces) the all-to-alls
    CommGrid* grid;
    bool active = false;              // started and not yet finished
} CommFold;

// shard j of a piece of len elements: [j * ceil(len / P), ...) clipped
static inline void comm_fold_shard(size_t len, int P, int j, size_t* lo, size_t* cnt) {
    size_t s = (len + P - 1) / P, a = std::min(len, (size_t)j * s), b = std::min(len, (size_t)(j + 1) * s);
    *lo = a; *cnt = b - a;
}

// in[k] (n elements of kind), k = 0..V-1: this process's logical ranks' contributions; out (n) may
// be one of them. Sums in f the fold over every logical rank (comm_fold_finish completes it).
static inline void comm_fold_start(CommGrid* g, CommFoldKind kind, const void* const* in, int V, void* out, size_t n, CommFold* f) {
    f->kind = kind; f->n = n; f->e = comm_fold_elem_bytes(kind); f->V = V; f->P = g->world_size; f->out = out; f->grid = g;
    f->reqs.clear();
    f->active = true;
    const size_t e = f->e;
    const int P = f->P;
    if (P == 1) {  // no transfer: fold the local contributions in order
        if (n == 0) return;
        if (out != in[0]) memmove(out, in[0], n * e);
        for (int k = 1; k < V; k++) comm_fold_combine(kind, out, in[k], n);
        return;
    }
    // pieces of at most 2^30 bytes of this process's contributions, so every count and
    // displacement of the all-to-all fits an int
    const size_t max_piece = std::max<size_t>(1, ((size_t)1 << 30) / ((size_t)V * e));
    f->piece_off.assign(1, 0);
    while (f->piece_off.back() < n) f->piece_off.push_back(std::min(n, f->piece_off.back() + max_piece));
    const size_t pieces = f->piece_off.size() - 1;
    // a piece of len elements receives P V ceil(len / P) elements at most
    f->recv_off.assign(1, 0);
    for (size_t pc = 0; pc < pieces; pc++) {
        const size_t len = f->piece_off[pc + 1] - f->piece_off[pc];
        f->recv_off.push_back(f->recv_off.back() + (size_t)P * V * ((len + P - 1) / P) * e);
    }
    f->send.resize((size_t)V * n * e);
    f->recv.resize(f->recv_off.back());
    const int me = g->rank;
    size_t base = 0;
    for (size_t pc = 0; pc < pieces; pc++) {
        const size_t p0 = f->piece_off[pc], len = f->piece_off[pc + 1] - p0;
        std::vector<int> scount(P), sdispl(P), rcount(P), rdispl(P);
        size_t my_lo, my_cnt;
        comm_fold_shard(len, P, me, &my_lo, &my_cnt);
        size_t so = 0;
        for (int j = 0; j < P; j++) {
            size_t lo, cnt;
            comm_fold_shard(len, P, j, &lo, &cnt);
            scount[j] = (int)(V * cnt * e);
            sdispl[j] = (int)so;
            for (int k = 0; k < V; k++)
                memcpy(f->send.data() + base + so + (size_t)k * cnt * e, (const unsigned char*)in[k] + (p0 + lo) * e, cnt * e);
            so += (size_t)V * cnt * e;
            rcount[j] = (int)(V * my_cnt * e);
            rdispl[j] = (int)((size_t)j * V * my_cnt * e);
        }
        MPI_Request r;
        MPI_CHECK(MPI_Ialltoallv(f->send.data() + base, scount.data(), sdispl.data(), MPI_BYTE,
                                 f->recv.data() + f->recv_off[pc], rcount.data(), rdispl.data(), MPI_BYTE, g->comm, &r));
        f->reqs.push_back(r);
        base += so;
    }
}

// Completes a fold comm_fold_start began (nothing for one that is not in flight).
static inline void comm_fold_finish(CommFold* f) {
    if (!f->active) return;
    f->active = false;
    if (f->P == 1 || f->n == 0) return;
    const size_t e = f->e;
    const int P = f->P, V = f->V, me = f->grid->rank;
    MPI_CHECK(MPI_Waitall((int)f->reqs.size(), f->reqs.data(), MPI_STATUSES_IGNORE));
    f->reqs.clear();
    for (size_t pc = 0; pc + 1 < f->piece_off.size(); pc++) {
        const size_t p0 = f->piece_off[pc], len = f->piece_off[pc + 1] - p0;
        size_t my_lo, my_cnt;
        comm_fold_shard(len, P, me, &my_lo, &my_cnt);
        // logical rank r = p V + k sits at (p V + k) * my_cnt: the fold runs over them in order
        unsigned char* acc = f->recv.data() + f->recv_off[pc];
        for (int r = 1; r < P * V; r++) comm_fold_combine(f->kind, acc, acc + (size_t)r * my_cnt * e, my_cnt);
        std::vector<int> count(P), displ(P);
        for (int j = 0; j < P; j++) {
            size_t lo, cnt;
            comm_fold_shard(len, P, j, &lo, &cnt);
            count[j] = (int)(cnt * e);
            displ[j] = (int)(lo * e);
        }
        MPI_CHECK(MPI_Allgatherv(acc, count[me], MPI_BYTE, (unsigned char*)f->out + p0 * e, count.data(), displ.data(), MPI_BYTE,
                                 f->grid->comm));
    }
}

static inline void comm_fold(CommGrid* g, CommFoldKind kind, const void* const* in, int V, void* out, size_t n) {
    CommFold f;
    comm_fold_start(g, kind, in, V, out, n, &f);
    comm_fold_finish(&f);
}

// ----------------------------------------------------------------------------
// non-blocking collectives (the gradient buckets of llmc/gradcomm.h): each starts its all-reduce
// in place and appends its requests to reqs (none with one rank); comm_wait_all completes them.
// The MPI ops of the low-precision sums are made on first use and live until MPI_Finalize.

static inline MPI_Op comm_fp8_op(Fp8Format f) {
    static MPI_Op ops[2] = {MPI_OP_NULL, MPI_OP_NULL};
    MPI_Op& op = ops[f == FP8_E5M2 ? 1 : 0];
    if (op == MPI_OP_NULL) (void)(f == FP8_E5M2 ? comm_fp8_sum_table<FP8_E5M2>() : comm_fp8_sum_table<FP8_E4M3>());
    if (op == MPI_OP_NULL) MPI_CHECK(MPI_Op_create(f == FP8_E5M2 ? comm_fp8_sum_op<FP8_E5M2> : comm_fp8_sum_op<FP8_E4M3>, 1, &op));
    return op;
}

static inline void comm_bf16_type_op(MPI_Datatype* type, MPI_Op* op) {
    static MPI_Datatype t16 = MPI_DATATYPE_NULL;
    static MPI_Op sum = MPI_OP_NULL;
    if (t16 == MPI_DATATYPE_NULL) {
        MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &t16));
        MPI_CHECK(MPI_Type_commit(&t16));
        MPI_CHECK(MPI_Op_create(comm_bf16_sum_op, 1, &sum));
    }
    *type = t16;
    *op = sum;
}

// x (n elements of `type`, elem_size bytes each), in chunks of COMM_CHUNK elements
static inline void comm_iallreduce(CommGrid* g, void* x, size_t n, size_t elem_size, MPI_Datatype type, MPI_Op op,
                                   std::vector<MPI_Request>* reqs) {
    if (g->world_size == 1 || n == 0) return;
    for (size_t off = 0; off < n; off += COMM_CHUNK) {
        MPI_Request r;
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, (char*)x + off * elem_size, (int)std::min((size_t)COMM_CHUNK, n - off), type, op, g->comm, &r));
        reqs->push_back(r);
    }
}

static inline void comm_isum_floats(CommGrid* g, float* x, size_t n, std::vector<MPI_Request>* reqs) {
    comm_iallreduce(g, x, n, sizeof(float), MPI_FLOAT, MPI_SUM, reqs);
}

static inline void comm_imax_floats(CommGrid* g, float* x, size_t n, std::vector<MPI_Request>* reqs) {
    comm_iallreduce(g, x, n, sizeof(float), MPI_FLOAT, MPI_MAX, reqs);
}

static inline void comm_isum_bf16(CommGrid* g, uint16_t* x, size_t n, std::vector<MPI_Request>* reqs) {
    if (g->world_size == 1 || n == 0) return;
    MPI_Datatype t16;
    MPI_Op op;
    comm_bf16_type_op(&t16, &op);
    comm_iallreduce(g, x, n, sizeof(uint16_t), t16, op, reqs);
}

static inline void comm_isum_fp8(CommGrid* g, uint8_t* q, size_t n, Fp8Format f, std::vector<MPI_Request>* reqs) {
    if (g->world_size == 1 || n == 0) return;
    comm_iallreduce(g, q, n, 1, MPI_BYTE, comm_fp8_op(f), reqs);
}

// true once every request in reqs has completed (then reqs is empty); lets MPI progress them
static inline bool comm_test_all(std::vector<MPI_Request>* reqs) {
    if (reqs->empty()) return true;
    int done = 0;
    MPI_CHECK(MPI_Testall((int)reqs->size(), reqs->data(), &done, MPI_STATUSES_IGNORE));
    if (done) reqs->clear();
    return done != 0;
}

static inline void comm_wait_all(std::vector<MPI_Request>* reqs) {
    if (reqs->empty()) return;
    MPI_CHECK(MPI_Waitall((int)reqs->size(), reqs->data(), MPI_STATUSES_IGNORE));
    reqs->clear();
}
