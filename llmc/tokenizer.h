// The tokenizer file (magic 20240328, version 2): vocab size, end-of-text id, then for each
// token a uint8 length and its bytes. Used to print samples as text.
#ifndef LLMC_TOKENIZER_H
#define LLMC_TOKENIZER_H

#include <ctype.h>
#include "utils.h"

#define TOKENIZER_MAGIC 20240328
#define TOKENIZER_VERSION 2

typedef struct {
    int vocab_size;
    int eot_token;
    char** tokens; // NUL-terminated bytes of each token
} Tokenizer;

static void tokenizer_init(Tokenizer* t, const char* path) {
    FILE* f = fopen_check(path, "rb");
    int header[256];
    fread_check(header, sizeof(int), 256, f, path, "tokenizer header");
    if (header[0] != TOKENIZER_MAGIC) { fail("%s: bad magic %d in tokenizer file (expected %d)", path, header[0], TOKENIZER_MAGIC); }
    if (header[1] != TOKENIZER_VERSION) { fail("%s: unsupported tokenizer version %d (expected %d)", path, header[1], TOKENIZER_VERSION); }
    t->vocab_size = header[2];
    t->eot_token = header[3];
    long room = (file_size_of(f) - 1024) / 2; // each token takes at least 2 bytes
    if (t->vocab_size <= 0 || t->eot_token < 0 || t->eot_token >= t->vocab_size || t->vocab_size > room) {
        fail("%s: bad tokenizer header (vocab %d, end-of-text %d) for a file of %ld bytes", path, t->vocab_size,
             t->eot_token, file_size_of(f));
    }
    t->tokens = (char**)malloc_check(t->vocab_size * sizeof(char*));
    for (int i = 0; i < t->vocab_size; i++) {
        unsigned char len;
        fread_check(&len, 1, 1, f, path, "token length");
        if (len == 0) { fail("%s: token %d has length 0", path, i); }
        t->tokens[i] = (char*)malloc_check(len + 1);
        fread_check(t->tokens[i], 1, len, f, path, "token bytes");
        t->tokens[i][len] = '\0';
    }
    fclose(f);
}

static const char* tokenizer_decode(const Tokenizer* t, int token) {
    if (token < 0 || token >= t->vocab_size) { return "<?>"; }
    return t->tokens[token];
}

// Prints a token's bytes, replacing control bytes other than newline and tab by '?'. A
// single byte of a multi-byte character (byte-level vocabularies) passes through.
static void tokenizer_print(const Tokenizer* t, int token) {
    const char* s = tokenizer_decode(t, token);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        putchar((ch < 32 && ch != '\n' && ch != '\t') ? '?' : ch);
    }
}

static void tokenizer_free(Tokenizer* t) {
    for (int i = 0; i < t->vocab_size; i++) { free(t->tokens[i]); }
    free(t->tokens);
}

#endif
