// Checked I/O and memory helpers, and the one way the project reports a fatal error:
// fail() prints a single line "error: ..." (prefixed with the rank when there are several)
// and ends the whole job with a non-zero exit.
#ifndef LLMC_UTILS_H
#define LLMC_UTILS_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

#ifdef FUZZING
// Fuzz harnesses (dev/fuzz) point fail_jump at their jmp_buf: fail() then keeps the message
// in fail_message and longjmps back instead of ending the process, so that a reader's error
// path can be exercised millions of times in one process. Never defined in the trainers.
#include <setjmp.h>
static jmp_buf* fail_jump = NULL;
static char fail_message[1024];
#endif

// Set by the trainer once the process mesh is known. When fail_abort_all is set, fail()
// calls it (an MPI_Abort, say) so that one failing rank stops every rank.
static int fail_rank = -1;
static void (*fail_abort_all)(void) = NULL;

static void fail(const char* fmt, ...) {
    char msg[1024];
    va_list args;
    va_start(args, fmt);
    vsnprintf(msg, sizeof(msg), fmt, args);
    va_end(args);
#ifdef FUZZING
    if (fail_jump) {
        snprintf(fail_message, sizeof(fail_message), "%s", msg);
        longjmp(*fail_jump, 1);
    }
#endif
    if (fail_rank >= 0) {
        fprintf(stderr, "error: rank %d: %s\n", fail_rank, msg);
    } else {
        fprintf(stderr, "error: %s\n", msg);
    }
    fflush(stderr);
    if (fail_abort_all) { fail_abort_all(); }
    exit(1);
}

static FILE* fopen_check(const char* path, const char* mode) {
    FILE* f = fopen(path, mode);
    if (f == NULL) { fail("cannot open %s (mode %s)", path, mode); }
    return f;
}

// Reads exactly count items or fails naming the file and what was being read.
static void fread_check(void* dst, size_t size, size_t count, FILE* f, const char* path, const char* what) {
    size_t got = fread(dst, size, count, f);
    if (got != count) {
        fail("%s: file too short while reading %s (%zu of %zu items)", path, what, got, count);
    }
}

static void fwrite_check(const void* src, size_t size, size_t count, FILE* f, const char* path) {
    if (fwrite(src, size, count, f) != count) { fail("%s: write failed", path); }
}

static void fclose_check(FILE* f, const char* path) {
    if (fclose(f) != 0) { fail("%s: close failed (disk full?)", path); }
}

static long file_size_of(FILE* f) {
    long pos = ftell(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, pos, SEEK_SET);
    return size;
}

static void* malloc_check(size_t bytes) {
    void* p = malloc(bytes == 0 ? 1 : bytes);
    if (p == NULL) { fail("out of memory allocating %zu bytes", bytes); }
    return p;
}

static void* calloc_check(size_t count, size_t size) {
    void* p = calloc(count == 0 ? 1 : count, size == 0 ? 1 : size);
    if (p == NULL) { fail("out of memory allocating %zu x %zu bytes", count, size); }
    return p;
}

// Files are written to "<path>.tmp" and renamed into place when complete, so that a crash
// never leaves a file that looks finished.
static FILE* fopen_tmp_for(const char* path, char* tmp_path, size_t tmp_len) {
    snprintf(tmp_path, tmp_len, "%s.tmp", path);
    return fopen_check(tmp_path, "wb");
}

// fsync of the directory holding path, so that a rename into it survives a power loss.
static void fsync_parent_dir(const char* path) {
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    char* slash = strrchr(dir, '/');
    if (slash == NULL) { snprintf(dir, sizeof(dir), "."); }
    else if (slash == dir) { dir[1] = '\0'; }
    else { *slash = '\0'; }
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) { fsync(fd); close(fd); }
}

// Flushes the temporary file to the disk (fsync), closes it, renames it into place and syncs
// the directory: once this returns, path holds the whole file even after a crash.
static void commit_tmp(FILE* f, const char* tmp_path, const char* path) {
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) { fail("%s: write failed (disk full?)", tmp_path); }
    fclose_check(f, tmp_path);
    if (rename(tmp_path, path) != 0) { fail("cannot rename %s to %s", tmp_path, path); }
    fsync_parent_dir(path);
}

// mkdir -p: creates path and any missing parents (existing ones are fine).
static void make_dirs(const char* path) {
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char* p = buf + 1; *p; p++) {
        if (*p == '/') { *p = '\0'; mkdir(buf, 0755); *p = '/'; }
    }
    mkdir(buf, 0755);
}

static size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }
static size_t ceil_div(size_t n, size_t d) { return (n + d - 1) / d; }

// 64-byte aligned memory for vector loads, or fail() naming what it was for.
static void* aligned_alloc_check(size_t bytes, const char* what) {
    void* p = aligned_alloc(64, round_up(bytes == 0 ? 1 : bytes, 64));
    if (p == NULL) { fail("out of memory allocating %zu aligned bytes for %s", bytes, what); }
    return p;
}

// Monotonic wall-clock seconds.
static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#endif
