// What every libFuzzer harness in dev/fuzz shares: fail() turned into a longjmp back to the
// harness (FUZZING in llmc/utils.h), the fuzz input written to a temporary file (the readers
// take paths), and tracking of the memory and FILEs a reader allocates, so that a reader that
// fails half-way can be cleaned up (in the trainer fail() ends the process, so that is no leak)
// while a reader that succeeds must give back everything through its own free function.
// Include this before any llmc header.
#ifndef FUZZ_COMMON_H
#define FUZZ_COMMON_H

#ifndef FUZZING
#define FUZZING 1
#endif

// Every system header the llmc readers include, first, so that the tracking macros below do
// not rewrite their declarations.
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

// ----------------------------------------------------------------------------
// tracking: an open-addressing set of live blocks and FILEs allocated while tracking is on

#define FUZZ_SLOTS (1 << 16)
static void* fuzz_slot[FUZZ_SLOTS]; // NULL = never used since the last reset, FUZZ_GONE = freed
static char fuzz_slot_is_file[FUZZ_SLOTS];
static int fuzz_slot_call[FUZZ_SLOTS]; // which fuzz_call allocated it
static size_t fuzz_used_slot[FUZZ_SLOTS / 2]; // the slots written since the last reset
static int fuzz_live = 0, fuzz_used = 0, fuzz_tracking = 0, fuzz_calls = 0;
static char fuzz_gone_marker;
#define FUZZ_GONE ((void*)&fuzz_gone_marker)

static size_t fuzz_hash(const void* p) { return (size_t)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull) >> 48; }

static void fuzz_track(void* p, int is_file) {
    if (!fuzz_tracking || p == NULL) { return; }
    if (fuzz_used >= FUZZ_SLOTS / 2) { fprintf(stderr, "fuzz: too many allocations in one input\n"); abort(); }
    size_t i = fuzz_hash(p);
    while (fuzz_slot[i] != NULL) { i = (i + 1) & (FUZZ_SLOTS - 1); }
    fuzz_slot[i] = p;
    fuzz_slot_is_file[i] = (char)is_file;
    fuzz_slot_call[i] = fuzz_calls;
    fuzz_used_slot[fuzz_used++] = i;
    fuzz_live++;
}

static void fuzz_untrack(void* p) {
    if (p == NULL) { return; }
    for (size_t i = fuzz_hash(p); fuzz_slot[i] != NULL; i = (i + 1) & (FUZZ_SLOTS - 1)) {
        if (fuzz_slot[i] == p) {
            fuzz_slot[i] = FUZZ_GONE;
            fuzz_live--;
            return;
        }
    }
}

static void* fuzz_malloc(size_t n) { void* p = malloc(n); fuzz_track(p, 0); return p; }
static void* fuzz_calloc(size_t n, size_t s) { void* p = calloc(n, s); fuzz_track(p, 0); return p; }
static void fuzz_free(void* p) { fuzz_untrack(p); free(p); }
static FILE* fuzz_fopen(const char* path, const char* mode) { FILE* f = fopen(path, mode); fuzz_track(f, 1); return f; }
static int fuzz_fclose(FILE* f) { fuzz_untrack(f); return fclose(f); }

// Frees and closes what the current fuzz_call allocated and still holds (it failed half-way).
static void fuzz_release_call(void) {
    for (int k = 0; k < fuzz_used; k++) {
        size_t i = fuzz_used_slot[k];
        void* p = fuzz_slot[i];
        if (p != NULL && p != FUZZ_GONE && fuzz_slot_call[i] == fuzz_calls) {
            if (fuzz_slot_is_file[i]) { fclose((FILE*)p); } else { free(p); }
            fuzz_slot[i] = FUZZ_GONE;
            fuzz_live--;
        }
    }
}

#define malloc(n) fuzz_malloc(n)
#define calloc(n, s) fuzz_calloc(n, s)
#define free(p) fuzz_free(p)
#define fopen(path, mode) fuzz_fopen(path, mode)
#define fclose(f) fuzz_fclose(f)

#include "../../llmc/utils.h"

// ----------------------------------------------------------------------------
// running a reader

// Runs body(ctx) with tracking on and fail() redirected here. Returns 0 when body returned:
// the caller then owns what it allocated and must free it. Returns 1 when body called
// fail(): everything it allocated is already released and fail_message holds the error.
// Every input ends with fuzz_end().
static int fuzz_call(void (*body)(void*), void* ctx) {
    static jmp_buf jump;
    fuzz_calls++;
    fuzz_tracking = 1;
    fail_message[0] = '\0';
    fail_jump = &jump;
    if (setjmp(jump) != 0) {
        fail_jump = NULL;
        fuzz_release_call();
        if (fail_message[0] == '\0') { fprintf(stderr, "fuzz: fail() with an empty message\n"); abort(); }
        static int verbose = -1; // FUZZ_VERBOSE=1: print why each input was refused
        if (verbose < 0) { verbose = getenv("FUZZ_VERBOSE") != NULL; }
        if (verbose) { fprintf(stderr, "refused: %s\n", fail_message); }
        return 1;
    }
    body(ctx);
    fail_jump = NULL;
    return 0;
}

// At the end of an input, after the reader's own free functions: nothing may be left.
static void fuzz_end(const char* what) {
    if (fuzz_live != 0) {
        fprintf(stderr, "fuzz: %s left %d blocks or FILEs allocated after its free function\n", what, fuzz_live);
        abort();
    }
    fuzz_tracking = 0;
    for (int k = 0; k < fuzz_used; k++) { fuzz_slot[fuzz_used_slot[k]] = NULL; }
    fuzz_used = 0;
}

// An error about a file must name it (the guide: one line naming the file).
static void fuzz_require_names(const char* path) {
    if (strstr(fail_message, path) == NULL || strchr(fail_message, '\n') != NULL) {
        fprintf(stderr, "fuzz: error message does not name %s on one line: %s\n", path, fail_message);
        abort();
    }
}

// ----------------------------------------------------------------------------
// temporary files: one private directory per process, removed at exit

static char fuzz_dir[4096];

static void fuzz_remove_dir(void) {
    DIR* d = opendir(fuzz_dir);
    if (d == NULL) { return; }
    struct dirent* e;
    char path[8192];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') { continue; }
        snprintf(path, sizeof(path), "%s/%s", fuzz_dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(fuzz_dir);
}

// out receives fuzz_dir/name.
static void fuzz_path(char* out, size_t len, const char* name) {
    if (fuzz_dir[0] == '\0') {
        // tmpfs when there is one: rewriting a file on a disk file system costs milliseconds
        const char* tmp = getenv("TMPDIR");
        if (access("/dev/shm", W_OK) == 0) { tmp = "/dev/shm"; }
        snprintf(fuzz_dir, sizeof(fuzz_dir), "%s/llmc_fuzz_XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
        if (mkdtemp(fuzz_dir) == NULL) { perror("fuzz: mkdtemp"); abort(); }
        atexit(fuzz_remove_dir);
    }
    snprintf(out, len, "%s/%s", fuzz_dir, name);
}

// Writes bytes to fuzz_dir/name (untracked) and puts that path into out.
static void fuzz_write_file(char* out, size_t len, const char* name, const uint8_t* data, size_t size) {
    fuzz_path(out, len, name);
    int was = fuzz_tracking;
    fuzz_tracking = 0;
    unlink(out); // a new file rather than a truncated one (ext4 flushes on truncate-and-rewrite)
    FILE* f = fopen(out, "wb");
    if (f == NULL || (size > 0 && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror("fuzz: writing the input file");
        abort();
    }
    fuzz_tracking = was;
}

// Little-endian int32 at offset off of data, or 0 beyond its end.
static int32_t fuzz_int_at(const uint8_t* data, size_t size, size_t off) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) { v |= (uint32_t)(off + i < size ? data[off + i] : 0) << (8 * i); }
    return (int32_t)v;
}

#define FUZZ_CHECK(cond)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "fuzz: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

#endif
