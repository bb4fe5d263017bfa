// utils.h — small host helpers shared by both engines: checked file I/O and allocation,
// the one-line user error, CRC-32 for checkpoint payloads.
// Conventions: *_check helpers abort with file:line on an internal failure (disk full,
// out of memory); user_error() is for bad user input: one line naming what was expected
// and what was found, then exit code 1.
#pragma once
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

// Bad user input (a flag, a shard, a checkpoint): one clear line, exit 1. The line is written
// with one call, so that the lines of several ranks sharing a stderr never interleave.
[[noreturn]] static inline void user_error(const char* fmt, ...) {
    fflush(stdout);
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    std::string line = std::string("error: ") + msg + "\n";
    fwrite(line.data(), 1, line.size(), stderr);
    fflush(stderr);
    exit(1);
}

static inline FILE* fopen_check_impl(const char* path, const char* mode, const char* file, int line) {
    FILE* f = fopen(path, mode);
    if (f == NULL) {
        fprintf(stderr, "error: %s:%d: cannot open '%s' (mode %s)\n", file, line, path, mode);
        exit(1);
    }
    return f;
}
#define fopen_check(path, mode) fopen_check_impl(path, mode, __FILE__, __LINE__)

static inline void fread_check_impl(void* ptr, size_t size, size_t n, FILE* f, const char* file, int line) {
    size_t got = fread(ptr, size, n, f);
    if (got != n) {
        fprintf(stderr, "error: %s:%d: short read: expected %zu items of %zu bytes, got %zu\n",
                file, line, n, size, got);
        exit(1);
    }
}
#define fread_check(ptr, size, n, f) fread_check_impl(ptr, size, n, f, __FILE__, __LINE__)

static inline void fwrite_check_impl(const void* ptr, size_t size, size_t n, FILE* f, const char* file, int line) {
    size_t put = fwrite(ptr, size, n, f);
    if (put != n) {
        fprintf(stderr, "error: %s:%d: short write: %zu of %zu items (disk full?)\n", file, line, put, n);
        exit(1);
    }
}
#define fwrite_check(ptr, size, n, f) fwrite_check_impl(ptr, size, n, f, __FILE__, __LINE__)

static inline void fclose_check_impl(FILE* f, const char* file, int line) {
    if (fclose(f) != 0) {
        fprintf(stderr, "error: %s:%d: fclose failed (disk full?)\n", file, line);
        exit(1);
    }
}
#define fclose_check(f) fclose_check_impl(f, __FILE__, __LINE__)

static inline void* malloc_check_impl(size_t size, const char* file, int line) {
    void* p = malloc(size == 0 ? 1 : size);
    if (p == NULL) {
        fprintf(stderr, "error: %s:%d: out of memory allocating %zu bytes\n", file, line, size);
        exit(1);
    }
    return p;
}
#define malloc_check(size) malloc_check_impl(size, __FILE__, __LINE__)

static inline void* calloc_check_impl(size_t n, size_t size, const char* file, int line) {
    void* p = calloc(n == 0 ? 1 : n, size == 0 ? 1 : size);
    if (p == NULL) {
        fprintf(stderr, "error: %s:%d: out of memory allocating %zu x %zu bytes\n", file, line, n, size);
        exit(1);
    }
    return p;
}
#define calloc_check(n, size) calloc_check_impl(n, size, __FILE__, __LINE__)

// Size of an open file in bytes (restores the position to the start).
static inline long long file_size_bytes(FILE* f) {
    fseek(f, 0, SEEK_END);
    long long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    return n;
}

// CRC-32 (IEEE 802.3, reflected, poly 0xEDB88320): the same value as Python's zlib.crc32,
// so the reference scripts can write checkpoints the engines accept. Eight bytes a step through
// eight tables (slicing-by-8, on little-endian hosts; byte by byte elsewhere): the large presets'
// checkpoints are gigabytes, and the byte-at-a-time loop ran at about 0.5 GB/s.
struct Crc32Tables {
    uint32_t t[8][256];  // t[0]: one byte; t[s][b]: byte b followed by s zero bytes
};
static inline const Crc32Tables& crc32_tables() {
    static const Crc32Tables tables = [] {
        Crc32Tables x;
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = (c & 1) ? (0xEDB88320u ^ (c >> 1)) : (c >> 1);
            x.t[0][i] = c;
        }
        for (int s = 1; s < 8; s++)
            for (uint32_t i = 0; i < 256; i++) x.t[s][i] = (x.t[s - 1][i] >> 8) ^ x.t[0][x.t[s - 1][i] & 0xFF];
        return x;
    }();
    return tables;
}

static inline uint32_t crc32_update(uint32_t crc, const void* data, size_t n) {
    const uint32_t (*t)[256] = crc32_tables().t;
    const unsigned char* p = (const unsigned char*)data;
    crc = ~crc;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; n >= 8; p += 8, n -= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= crc;
        crc = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
              t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
    }
#endif
    for (; n > 0; p++, n--) crc = t[0][(crc ^ *p) & 0xFF] ^ (crc >> 8);
    return ~crc;
}
