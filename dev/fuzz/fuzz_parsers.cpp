// fuzz_parsers.cpp — libFuzzer target for the parsers that read user files: the llm.c shard
// header (dataloader_check_header), the model checkpoint header (checkpoint_check_model_header)
// and the training-state file (checkpoint_parse_state, read through fmemopen).
// The first input byte picks the parser; the rest is the file's bytes. A parser must never
// crash, hang or read out of bounds, whatever the bytes: it returns false with a reason.
// Build and run: make fuzz (FUZZ_SECONDS=60 by default).
#include <cstdint>
#include <cstdio>
#include <string>
#include "../../llmc/checkpoint.h"
#include "../../llmc/dataloader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    int which = data[0] % 3;
    const uint8_t* file = data + 1;
    size_t n = size - 1;
    std::string why;
    if (which == 0 || which == 1) {
        int32_t header[CHECKPOINT_HEADER_INTS] = {0};  // both headers are 256 int32
        memcpy(header, file, std::min(n, sizeof(header)));
        if (n < sizeof(header)) return 0;  // the callers reject short files before parsing
        if (which == 0) {
            dataloader_check_header(header, (long long)n, &why);
        } else {
            LlamaConfig c;
            if (checkpoint_check_model_header(header, (long long)n, &c, &why)) {
                // a header that passes must describe a model whose size matches the file
                if ((size_t)llama_num_params(&c) * 4 + sizeof(header) != n) __builtin_trap();
            }
        }
    } else {
        FILE* f = fmemopen((void*)file, n == 0 ? 1 : n, "rb");
        if (!f) return 0;
        CheckpointState s;
        checkpoint_parse_state(f, (long long)n, &s, &why);
        fclose(f);
    }
    return 0;
}
