// fixture.h — reader for the named-tensor fixture files written by test/reference/fixture_io.py.
// File layout (little endian): magic "LLFX" (4 bytes), uint32 version (1), uint32 count, then
// `count` records: uint32 name_len, name bytes (no NUL), uint32 dtype (0 = float32,
// 1 = int32), uint32 ndim, uint32 dims[ndim], then prod(dims) elements of the dtype.
#pragma once
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>
#include "../llmc/utils.h"

struct FixtureTensor {
    int dtype = 0;              // 0 float32, 1 int32
    std::vector<int> shape;
    std::vector<float> f;       // filled when dtype == 0
    std::vector<int32_t> i;     // filled when dtype == 1
    size_t numel() const { size_t n = 1; for (int d : shape) n *= (size_t)d; return n; }
};

struct Fixture {
    std::map<std::string, FixtureTensor> tensors;
    bool has(const std::string& name) const { return tensors.count(name) > 0; }
    const FixtureTensor& get(const std::string& name) const {
        auto it = tensors.find(name);
        if (it == tensors.end()) { fprintf(stderr, "fixture: missing tensor '%s'\n", name.c_str()); exit(1); }
        return it->second;
    }
    const float* f(const std::string& name) const { return get(name).f.data(); }
    const int32_t* i(const std::string& name) const { return get(name).i.data(); }
    float scalar(const std::string& name) const {
        const FixtureTensor& t = get(name);
        return t.dtype == 0 ? t.f[0] : (float)t.i[0];
    }
};

// Returns false (and prints why) if the file is missing or malformed.
static inline bool fixture_load(Fixture* fx, const char* path) {
    FILE* fp = fopen(path, "rb");
    if (!fp) { fprintf(stderr, "fixture: cannot open %s\n", path); return false; }
    char magic[4];
    uint32_t version = 0, count = 0;
    if (fread(magic, 1, 4, fp) != 4 || memcmp(magic, "LLFX", 4) != 0 ||
        fread(&version, 4, 1, fp) != 1 || version != 1 || fread(&count, 4, 1, fp) != 1) {
        fprintf(stderr, "fixture: %s: bad header\n", path); fclose(fp); return false;
    }
    for (uint32_t r = 0; r < count; r++) {
        uint32_t nlen = 0, dtype = 0, ndim = 0;
        if (fread(&nlen, 4, 1, fp) != 1 || nlen > 4096) { fclose(fp); return false; }
        std::string name(nlen, '\0');
        if (fread(&name[0], 1, nlen, fp) != nlen || fread(&dtype, 4, 1, fp) != 1 ||
            fread(&ndim, 4, 1, fp) != 1 || ndim > 8 || dtype > 1) { fclose(fp); return false; }
        FixtureTensor t;
        t.dtype = (int)dtype;
        for (uint32_t d = 0; d < ndim; d++) {
            uint32_t v; if (fread(&v, 4, 1, fp) != 1) { fclose(fp); return false; }
            t.shape.push_back((int)v);
        }
        size_t n = t.numel();
        bool ok = dtype == 0 ? (t.f.resize(n), fread(t.f.data(), 4, n, fp) == n)
                             : (t.i.resize(n), fread(t.i.data(), 4, n, fp) == n);
        if (!ok) { fprintf(stderr, "fixture: %s: truncated at '%s'\n", path, name.c_str()); fclose(fp); return false; }
        fx->tensors[name] = std::move(t);
    }
    fclose(fp);
    return true;
}
