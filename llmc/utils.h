// Checked I/O and memory helpers, and the one way the project reports a fatal error:
// fail() prints a single line "error: ..." (prefixed with the rank when there are several)
// and ends the whole job with a non-zero exit.
#ifndef LLMC_UTILS_H
#define LLMC_UTILS_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

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

// Soft writes. The checkpoint path (llmc/train_loop.h) turns them on around its writes so that a
// full disk or an I/O error costs the checkpoint, never the run: while soft_write.on, the write
// helpers below (fwrite_check, fclose_check, fopen_tmp_for, commit_tmp, and every writer built on
// them) record the first error (the file, what failed and errno) instead of calling fail(), then
// skip whatever that file still had to write; commit_tmp never renames a file into place after an
// error. soft_write_end() says whether all of it reached the disk. Everywhere else (tools, the
// logs' rewrite at a resume) a failed write ends the job as before, with the system's reason.
typedef struct {
    int on;          // soft mode
    int failed;      // an error was recorded since soft_write_begin()
    int err;         // its errno
    char op[16];     // what failed: open, write, seek, fsync, close, rename, stat
    char path[4200]; // the file it failed on
    long budget;     // -fi enospc (llmc/faults.h): bytes that may still be written before a simulated
                     // full disk (-1: no limit; soft_write_end() resets it)
} SoftWrite;
static SoftWrite soft_write = {0, 0, 0, "", "", -1};

static void soft_write_begin(void) {
    soft_write.on = 1;
    soft_write.failed = 0;
    soft_write.err = 0;
    soft_write.op[0] = soft_write.path[0] = '\0';
}

// Ends soft mode; returns 1 when a write failed since soft_write_begin() (soft_write holds which).
static int soft_write_end(void) {
    soft_write.on = 0;
    soft_write.budget = -1;
    return soft_write.failed;
}

// Whether the writes to a file should be skipped: soft mode after an error (or without a file).
static int soft_write_skip(FILE* f) { return soft_write.on && (soft_write.failed || f == NULL); }

// A failed operation op on path, errno still as the call left it: fatal outside soft mode, else
// recorded (the first one only).
static void write_error(const char* op, const char* path) {
    int err = errno;
    if (!soft_write.on) { fail("%s: %s failed: %s", path, op, strerror(err)); }
    if (soft_write.failed) { return; }
    soft_write.failed = 1;
    soft_write.err = err;
    snprintf(soft_write.op, sizeof(soft_write.op), "%s", op);
    snprintf(soft_write.path, sizeof(soft_write.path), "%s", path);
}

static void fwrite_check(const void* src, size_t size, size_t count, FILE* f, const char* path) {
    if (soft_write_skip(f)) { return; }
    size_t bytes = size * count;
    if (soft_write.on && soft_write.budget >= 0) {
        if ((size_t)soft_write.budget < bytes) { // -fi enospc: part of the data, then a full disk
            size_t part = (size_t)soft_write.budget;
            soft_write.budget = 0;
            if (part > 0 && fwrite(src, 1, part, f) != part) {
                write_error("write", path);
                return;
            }
            fflush(f);
            errno = ENOSPC;
            write_error("write", path);
            return;
        }
        soft_write.budget -= (long)bytes;
    }
    if (fwrite(src, size, count, f) != count) { write_error("write", path); }
}

static void fclose_check(FILE* f, const char* path) {
    if (soft_write.on && f == NULL) { return; }
    if (fclose(f) != 0) { write_error("close", path); }
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
// never leaves a file that looks finished. In soft mode a file that cannot be created gives NULL
// (the helpers above and commit_tmp accept it).
static FILE* fopen_tmp_for(const char* path, char* tmp_path, size_t tmp_len) {
    snprintf(tmp_path, tmp_len, "%s.tmp", path);
    if (!soft_write.on) { return fopen_check(tmp_path, "wb"); }
    if (soft_write.failed) { return NULL; }
    FILE* f = fopen(tmp_path, "wb");
    if (f == NULL) { write_error("open", tmp_path); }
    return f;
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
// the directory: once this returns, path holds the whole file even after a crash. In soft mode,
// after an error (this file's or an earlier one) it only closes the file: the .tmp stays for the
// caller to remove, and path is never touched.
static void commit_tmp(FILE* f, const char* tmp_path, const char* path) {
    if (soft_write_skip(f)) {
        if (f) { fclose(f); }
        return;
    }
    if (fflush(f) != 0) {
        write_error("write", tmp_path);
        fclose(f);
        return;
    }
    if (fsync(fileno(f)) != 0) {
        write_error("fsync", tmp_path);
        fclose(f);
        return;
    }
    if (fclose(f) != 0) {
        write_error("close", tmp_path);
        return;
    }
    if (rename(tmp_path, path) != 0) {
        write_error("rename", tmp_path);
        return;
    }
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

#define HUGE_PAGE_BYTES ((size_t)2 << 20)

// Memory for a large array read in long sweeps (parameters, gradients, optimizer state): from 2 MiB
// on, aligned to 2 MiB and marked for transparent huge pages (advice only: 4 KiB pages where the
// kernel refuses), before anything touches it, so that one TLB entry covers 2 MiB instead of 4 KiB.
// Smaller requests are 64-byte aligned. Freed with free(); fail() naming what it was for.
static void* huge_alloc_check(size_t bytes, const char* what) {
    if (bytes < HUGE_PAGE_BYTES) { return aligned_alloc_check(bytes, what); }
    size_t rounded = round_up(bytes, HUGE_PAGE_BYTES);
    void* p = aligned_alloc(HUGE_PAGE_BYTES, rounded);
    if (p == NULL) { fail("out of memory allocating %zu bytes for %s", bytes, what); }
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    madvise(p, rounded, MADV_HUGEPAGE);
#endif
    return p;
}

// Monotonic wall-clock seconds.
static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#endif
