// tokenizer.h — GPT-2 token id -> bytes, for printing samples (host only; decoding only,
// encoding is done offline by the Python scripts in data/).
// Reads the table written by data/make_tokenizer_table.py (llm.c's format): a header of 256
// uint32 -- [0] magic 20240328, [1] version (2; llm.c's version 1, without an EOT field, is
// also read and means EOT 50256), [2] vocab size, [3] EOT id -- then for every token id in
// order: uint8 length, then `length` bytes.
// A missing or malformed table is not fatal: tokenizer_init prints one warning line and
// leaves ok = 0, and the trainer prints token ids instead of text.
#pragma once
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include "utils.h"

#define TOKENIZER_MAGIC 20240328
#define TOKENIZER_HEADER_INTS 256
#define TOKENIZER_DEFAULT_EOT 50256u
#define TOKENIZER_MAX_VOCAB (1u << 24)  // guards the allocation against a corrupt header

typedef struct {
    uint32_t vocab_size;
    uint32_t eot_token;
    char** token_table;  // (vocab_size) NUL-terminated byte strings
    int ok;              // 1 when the table loaded; 0 means decode returns NULL
} Tokenizer;

static inline void tokenizer_free(Tokenizer* tok) {
    if (tok->token_table != NULL) {
        for (uint32_t i = 0; i < tok->vocab_size; i++) free(tok->token_table[i]);
        free(tok->token_table);
    }
    tok->token_table = NULL;
    tok->vocab_size = 0;
    tok->ok = 0;
}

// Fails soft: a bad table leaves ok = 0 after one "warning: ..." line on stderr.
static inline void tokenizer_init(Tokenizer* tok, const char* path) {
    memset(tok, 0, sizeof(*tok));
    tok->eot_token = TOKENIZER_DEFAULT_EOT;
    if (strcmp(path, "none") == 0) return;  // --tokenizer none: token ids, asked for
    const char* hint = "samples print token ids; hint: python data/make_tokenizer_table.py";
    FILE* f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "warning: tokenizer '%s' not found (%s)\n", path, hint);
        return;
    }
    uint32_t header[TOKENIZER_HEADER_INTS];
    if (fread(header, sizeof(uint32_t), TOKENIZER_HEADER_INTS, f) != TOKENIZER_HEADER_INTS) {
        fprintf(stderr, "warning: tokenizer '%s': expected a %d-byte header, file is shorter (%s)\n",
                path, (int)sizeof(header), hint);
        fclose(f);
        return;
    }
    if (header[0] != TOKENIZER_MAGIC) {
        fprintf(stderr, "warning: tokenizer '%s': expected magic %d, found %u (%s)\n",
                path, TOKENIZER_MAGIC, header[0], hint);
        fclose(f);
        return;
    }
    if (header[1] != 1 && header[1] != 2) {
        fprintf(stderr, "warning: tokenizer '%s': expected version 1 or 2, found %u (%s)\n",
                path, header[1], hint);
        fclose(f);
        return;
    }
    uint32_t vocab_size = header[2];
    if (vocab_size == 0 || vocab_size > TOKENIZER_MAX_VOCAB) {
        fprintf(stderr, "warning: tokenizer '%s': expected a vocab size in [1, %u], found %u (%s)\n",
                path, (unsigned)TOKENIZER_MAX_VOCAB, vocab_size, hint);
        fclose(f);
        return;
    }
    tok->eot_token = header[1] == 2 ? header[3] : TOKENIZER_DEFAULT_EOT;
    tok->token_table = (char**)calloc_check(vocab_size, sizeof(char*));
    tok->vocab_size = vocab_size;
    for (uint32_t i = 0; i < vocab_size; i++) {
        unsigned char len = 0;
        if (fread(&len, 1, 1, f) != 1 || len == 0) {
            fprintf(stderr, "warning: tokenizer '%s': token %u of %u is %s (%s)\n", path, i, vocab_size,
                    len == 0 && !feof(f) ? "empty" : "missing (file truncated)", hint);
            fclose(f);
            tokenizer_free(tok);
            return;
        }
        char* piece = (char*)malloc_check((size_t)len + 1);
        tok->token_table[i] = piece;
        if (fread(piece, 1, len, f) != len) {
            fprintf(stderr, "warning: tokenizer '%s': token %u of %u is cut short (file truncated; %s)\n",
                    path, i, vocab_size, hint);
            fclose(f);
            tokenizer_free(tok);
            return;
        }
        piece[len] = '\0';
    }
    fclose(f);
    tok->ok = 1;
}

// The bytes of token `id` (NUL-terminated), or NULL when the table is not loaded or the id is
// out of range.
static inline const char* tokenizer_decode(const Tokenizer* tok, uint32_t id) {
    if (!tok->ok || id >= tok->vocab_size) return NULL;
    return tok->token_table[id];
}

// Prints a decoded piece, dropping ASCII control bytes other than whitespace so raw tokens
// cannot garble the terminal. Bytes >= 0x80 pass through: a GPT-2 token may hold part of a
// multi-byte UTF-8 character, which the following tokens complete.
static inline void tokenizer_print_safe(const char* piece) {
    if (piece == NULL) return;
    for (const unsigned char* p = (const unsigned char*)piece; *p; p++) {
        if (*p >= 0x80 || isprint(*p) || isspace(*p)) fputc(*p, stdout);
    }
}
