// The run's logs in the log directory, written by rank 0 only:
// main.log (llm.c's format), one line per event: "s:STEP trl:LOSS lr:LR norm:NORM" for a
// training step (with " skip:WHY" when its update was skipped), "s:STEP tel:LOSS" for validation,
// "s:STEP eval:ACC" for HellaSwag and "s:STEP ckpt:failed" for a checkpoint that could not be
// written;
// metrics.jsonl, its machine-readable twin: a first {"config": {...}} record, then one JSON
// object per step with every number logged for it ("step", "train_loss", "lr", "grad_norm",
// "ms", "tokens_per_s", "mfu", "skipped", "val_loss", "hellaswag", "checkpoint_failed"). A
// step's record is written when the next step's numbers begin (and at the end), so validation
// after step N joins step N's record. With -op 1 a last {"profile": {...}} record
// (llmc/op_profile.h).
// A line is written whole or not at all; a log that cannot be written (a full disk) never stops
// training: see LogFile.
#ifndef LLMC_LOGGER_H
#define LLMC_LOGGER_H

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "utils.h"
#include "gpt2_model.h"
#include "args.h"

// One log file. Lines are appended with write(2), whole: a write that fails or comes up short
// (a full disk, an I/O error) is cut back to where the file ended, the line is kept in a backlog
// and written before the next line, a warning goes to stderr once (and a note when writing works
// again), and training goes on. The backlog holds at most LOG_BACKLOG_MAX bytes; lines beyond it
// are dropped and counted.
#define LOG_BACKLOG_MAX (1 << 20)
typedef struct {
    int fd;             // -1: not open
    char path[4200];
    char* backlog;      // lines not written yet, oldest first
    size_t backlog_len, backlog_cap;
    long dropped;       // lines lost because the backlog was full
    int failing;        // the last write failed (the warning is out)
} LogFile;

typedef struct {
    int on;             // rank 0 with a log dir
    LogFile log, jsonl; // main.log, metrics.jsonl
    int pending_step;   // the step whose record is being collected, -1 for none
    char pending[2048]; // its fields so far, each ", \"name\": value"
    size_t pending_len;
} Logger;

// Writes all of buf at the end of fd; returns 0, or the errno of the failure (the file then ends
// where it ended before: nothing of buf stays).
static int log_write_whole(int fd, const char* buf, size_t len) {
    off_t end = lseek(fd, 0, SEEK_END);
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, buf + done, len - done);
        if (n < 0 && errno == EINTR) { continue; }
        if (n <= 0) {
            int err = n < 0 ? errno : ENOSPC;
            if (done > 0 && end >= 0 && ftruncate(fd, end) != 0) { /* the file cannot be cut back either */ }
            return err;
        }
        done += (size_t)n;
    }
    return 0;
}

static void log_file_keep(LogFile* f, const char* text, size_t len) {
    if (f->backlog_len + len > LOG_BACKLOG_MAX) {
        f->dropped++;
        return;
    }
    if (f->backlog_len + len > f->backlog_cap) {
        size_t cap = f->backlog_cap ? f->backlog_cap : 4096;
        while (cap < f->backlog_len + len) { cap *= 2; }
        char* grown = (char*)malloc_check(cap);
        if (f->backlog_len) { memcpy(grown, f->backlog, f->backlog_len); }
        free(f->backlog);
        f->backlog = grown;
        f->backlog_cap = cap;
    }
    memcpy(f->backlog + f->backlog_len, text, len);
    f->backlog_len += len;
}

// Appends text (whole lines) after the lines held back by earlier failures.
static void log_file_append(LogFile* f, const char* text, size_t len) {
    if (f->fd < 0) { return; }
    if (f->backlog_len > 0) {
        log_file_keep(f, text, len);
        text = f->backlog;
        len = f->backlog_len;
    }
    int err = log_write_whole(f->fd, text, len);
    if (err == 0) {
        if (f->failing) {
            fprintf(stderr, "note: %s: written again (the lines held back are in it", f->path);
            if (f->dropped > 0) { fprintf(stderr, ", but %ld lines were dropped: more than %d bytes waited", f->dropped, LOG_BACKLOG_MAX); }
            fprintf(stderr, ")\n");
            fflush(stderr);
        }
        f->failing = 0;
        f->dropped = 0;
        f->backlog_len = 0;
        return;
    }
    if (text != f->backlog) { log_file_keep(f, text, len); }
    if (!f->failing) {
        fprintf(stderr, "warning: %s: cannot be written (%s); training goes on, its lines are held back and "
                "tried again with the next one\n", f->path, strerror(err));
        fflush(stderr);
        f->failing = 1;
    }
}

static void log_file_vprintf(LogFile* f, const char* fmt, va_list args) {
    char line[1024];
    va_list again;
    va_copy(again, args);
    int n = vsnprintf(line, sizeof(line), fmt, args);
    if (n >= 0 && (size_t)n < sizeof(line)) {
        log_file_append(f, line, (size_t)n);
    } else if (n >= 0) {
        char* big = (char*)malloc_check((size_t)n + 1);
        vsnprintf(big, (size_t)n + 1, fmt, again);
        log_file_append(f, big, (size_t)n);
        free(big);
    }
    va_end(again);
}

static void log_file_open(LogFile* f, const char* path, int append) {
    snprintf(f->path, sizeof(f->path), "%s", path);
    f->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | (append ? 0 : O_TRUNC), 0644);
    if (f->fd < 0) { fail("cannot open %s: %s", path, strerror(errno)); }
}

static void log_file_close(LogFile* f) {
    if (f->fd < 0) { return; }
    if (f->backlog_len > 0) { log_file_append(f, "", 0); }
    if (f->backlog_len > 0 || f->dropped > 0) {
        fprintf(stderr, "warning: %s: the last %zu bytes of its lines could not be written", f->path, f->backlog_len);
        if (f->dropped > 0) { fprintf(stderr, ", and %ld more lines were dropped", f->dropped); }
        fprintf(stderr, "\n");
        fflush(stderr);
    }
    close(f->fd);
    f->fd = -1;
    free(f->backlog);
    f->backlog = NULL;
    f->backlog_len = f->backlog_cap = 0;
}

// Removes ", \"name\": value" from a one-line JSON record written by logger_field.
static void json_drop_field(char* line, const char* name) {
    char key[64];
    snprintf(key, sizeof(key), ", \"%s\": ", name);
    char* at = strstr(line, key);
    if (!at) { return; }
    char* end = at + strlen(key);
    while (*end && *end != ',' && *end != '}') { end++; }
    memmove(at, end, strlen(end) + 1);
}

// Trims a log of an interrupted run for a resume from resume_step (see logger_init); lines
// without a step (metrics.jsonl's config records) are kept. Where what is kept is the file's
// beginning (main.log; metrics.jsonl unless the record of resume_step changes) the file is cut
// there: no space needed, nothing rewritten. Otherwise it is rewritten to a temporary file and
// renamed; when that cannot be written (a full disk), the file is cut where it first differs and
// the rest of what is kept is returned in *rest (malloc'd, *rest_len bytes) for the logger to
// append (it holds lines back until there is room).
static void logger_trim(const char* path, int resume_step, int jsonl, char** rest, size_t* rest_len) {
    *rest = NULL;
    *rest_len = 0;
    FILE* old = fopen(path, "rb");
    if (!old) { return; }
    size_t size = (size_t)file_size_of(old);
    char* text = (char*)malloc_check(size + 1);
    size_t got = fread(text, 1, size, old);
    fclose(old);
    text[got] = '\0';
    char* kept = (char*)malloc_check(got + 1);
    size_t kept_len = 0, common = 0; // common: bytes at the start that stay as they are
    int same = 1;
    for (size_t at = 0; at < got;) {
        char* nl = (char*)memchr(text + at, '\n', got - at);
        size_t len = nl ? (size_t)(nl - (text + at)) + 1 : got - at;
        char* line = (char*)malloc_check(len + 1);
        memcpy(line, text + at, len);
        line[len] = '\0';
        int step = -1, keep;
        if (jsonl) {
            keep = sscanf(line, "{\"step\": %d", &step) != 1 || step <= resume_step;
            if (step == resume_step) { // the resumed run measures these again
                json_drop_field(line, "val_loss");
                json_drop_field(line, "hellaswag");
            }
        } else {
            keep = sscanf(line, "s:%d", &step) != 1 || step < resume_step ||
                   (step == resume_step && strstr(line, " tel:") == NULL && strstr(line, " eval:") == NULL);
        }
        size_t out = strlen(line);
        same = same && keep && out == len;
        if (same) { common += len; }
        if (keep) {
            memcpy(kept + kept_len, line, out);
            kept_len += out;
        }
        free(line);
        at += len;
    }
    free(text);
    if (kept_len == common) {
        if (common < got && truncate(path, (off_t)common) != 0) { fail("%s: cannot be cut back: %s", path, strerror(errno)); }
        free(kept);
        return;
    }
    char tmp[4200];
    soft_write_begin();
    FILE* f = fopen_tmp_for(path, tmp, sizeof(tmp));
    fwrite_check(kept, 1, kept_len, f, tmp);
    commit_tmp(f, tmp, path);
    if (soft_write_end()) {
        fprintf(stderr, "warning: %s: cannot be rewritten for the resume (%s: %s: %s); cut back instead\n", path,
                soft_write.path, soft_write.op, strerror(soft_write.err));
        fflush(stderr);
        remove(tmp);
        if (truncate(path, (off_t)common) != 0) { fail("%s: cannot be cut back: %s", path, strerror(errno)); }
        *rest_len = kept_len - common;
        *rest = (char*)malloc_check(*rest_len);
        memcpy(*rest, kept + common, *rest_len);
    }
    free(kept);
}

// A run resuming from step resume_step (-1: a fresh run, which truncates both files) keeps what
// the interrupted run logged up to resume_step and drops what it wrote after its checkpoint: in
// main.log the lines of steps up to resume_step (the validation line of resume_step itself is
// repeated by the resumed run), in metrics.jsonl the records up to resume_step, less the
// validation and HellaSwag numbers of resume_step (the resumed run adds a record for them). A file that was moved away is
// started anew.
static void logger_init(Logger* l, const char* log_dir, int rank, int resume_step) {
    memset(l, 0, sizeof(*l));
    l->log.fd = l->jsonl.fd = -1;
    l->pending_step = -1;
    if (rank != 0 || log_dir == NULL || log_dir[0] == '\0') { return; }
    make_dirs(log_dir);
    char path[4096];
    const char* names[2] = {"main.log", "metrics.jsonl"};
    for (int k = 0; k < 2; k++) {
        LogFile* f = k == 0 ? &l->log : &l->jsonl;
        char* rest = NULL;
        size_t rest_len = 0;
        snprintf(path, sizeof(path), "%s/%s", log_dir, names[k]);
        if (resume_step >= 0) { logger_trim(path, resume_step, k, &rest, &rest_len); }
        log_file_open(f, path, resume_step >= 0);
        if (rest) { log_file_append(f, rest, rest_len); }
        free(rest);
    }
    l->on = 1;
}

// One line of main.log (fmt ends with "\n").
static void logger_line(Logger* l, const char* fmt, ...) {
    if (!l->on) { return; }
    va_list args;
    va_start(args, fmt);
    log_file_vprintf(&l->log, fmt, args);
    va_end(args);
}

static void logger_flush_record(Logger* l) {
    if (!l->on || l->pending_step < 0) { return; }
    char line[2200];
    int n = snprintf(line, sizeof(line), "{\"step\": %d%.*s}\n", l->pending_step, (int)l->pending_len, l->pending);
    if (n > 0 && (size_t)n < sizeof(line)) { log_file_append(&l->jsonl, line, (size_t)n); }
    l->pending_step = -1;
    l->pending_len = 0;
}

// Adds "name": value to step's record (JSON has no inf or NaN: those become null).
static void logger_field(Logger* l, int step, const char* name, double value) {
    if (!l->on) { return; }
    if (step != l->pending_step) {
        logger_flush_record(l);
        l->pending_step = step;
    }
    char* out = l->pending + l->pending_len;
    size_t room = sizeof(l->pending) - l->pending_len;
    int n = isfinite(value) ? snprintf(out, room, ", \"%s\": %.9g", name, value) : snprintf(out, room, ", \"%s\": null", name);
    if (n > 0 && (size_t)n < room) { l->pending_len += (size_t)n; }
}

// s is written as a JSON string (quotes, backslashes and control characters escaped).
static void json_string(FILE* f, const char* s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') { fprintf(f, "\\%c", ch); }
        else if (ch < 0x20) { fprintf(f, "\\u%04x", ch); }
        else { fputc(ch, f); }
    }
    fputc('"', f);
}

// The run's configuration, the first record of metrics.jsonl (again after a resume).
static void logger_log_config(Logger* l, const char* trainer, const char* model_source, const GPT2Config* c,
                              size_t num_parameters, const TrainArgs* a, int ranks, int grad_accum, int max_steps,
                              double flops_per_token, double peak_flops) {
    if (!l->on) { return; }
    char* text = NULL;
    size_t len = 0;
    FILE* f = open_memstream(&text, &len);
    if (f == NULL) { fail("out of memory for the config record"); }
    fprintf(f, "{\"config\": {\"trainer\": ");
    json_string(f, trainer);
    fprintf(f, ", \"model\": ");
    json_string(f, model_source);
    fprintf(f, ", \"L\": %d, \"NH\": %d, \"C\": %d, \"V\": %d, \"Vp\": %d, \"T_max\": %d, \"parameters\": %zu",
            c->num_layers, c->num_heads, c->channels, c->vocab_size, c->padded_vocab_size, c->max_seq_len,
            num_parameters);
    fprintf(f, ", \"B\": %d, \"T\": %d, \"ranks\": %d, \"grad_accum\": %d, \"tokens_per_step\": %d, \"steps\": %d",
            a->B, a->T, ranks, grad_accum, a->total_batch, max_steps);
    fprintf(f, ", \"lr\": %.9g, \"warmup\": %d, \"final_fraction\": %.9g, \"schedule\": ", a->lr, a->warmup,
            a->final_fraction);
    json_string(f, a->schedule);
    fprintf(f, ", \"weight_decay\": %.9g, \"grad_clip\": %.9g, \"zero_stage\": %d, \"seed\": %d", a->weight_decay,
            a->grad_clip, a->zero_stage, a->seed);
    fprintf(f, ", \"optimizer\": ");
    json_string(f, a->optimizer);
    if (strcmp(a->optimizer, "muon") == 0) {
        fprintf(f, ", \"muon_lr\": %.9g, \"muon_momentum\": %.9g", a->muon_lr, a->muon_momentum);
    }
    fprintf(f, ", \"flops_per_token\": %.9g, \"peak_flops\": %.9g}}\n", flops_per_token, peak_flops);
    fclose(f);
    log_file_append(&l->jsonl, text, len);
    free(text);
}

// ms, tokens_per_s and mfu (a fraction; < 0 = not known) go to metrics.jsonl only.
static void logger_log_train(Logger* l, int step, float loss, float lr, float norm, double ms, double tokens_per_s,
                             double mfu) {
    if (!l->on) { return; }
    logger_line(l, "s:%d trl:%.6f lr:%e norm:%f\n", step, loss, lr, norm);
    logger_field(l, step, "train_loss", loss);
    logger_field(l, step, "lr", lr);
    logger_field(l, step, "grad_norm", norm);
    logger_field(l, step, "ms", ms);
    logger_field(l, step, "tokens_per_s", tokens_per_s);
    if (mfu >= 0.0) { logger_field(l, step, "mfu", mfu); }
}

// A step whose update was skipped (llmc/step_guard.h): its line ends with skip:nonfinite|spike.
static void logger_log_skip(Logger* l, int step, float loss, float lr, float norm, int spike) {
    if (!l->on) { return; }
    logger_line(l, "s:%d trl:%.6f lr:%e norm:%f skip:%s\n", step, loss, lr, norm, spike ? "spike" : "nonfinite");
    logger_field(l, step, "train_loss", loss);
    logger_field(l, step, "lr", lr);
    logger_field(l, step, "grad_norm", norm);
    logger_field(l, step, "skipped", 1.0);
}

// -ls: an outer sync after `step`, with the norm of the mean pseudo-gradient (outer - local).
static void logger_log_outer(Logger* l, int step, float pg_norm) {
    if (!l->on) { return; }
    logger_line(l, "s:%d outer_sync pgnorm:%f\n", step, pg_norm);
    logger_field(l, step, "outer_sync_pgnorm", pg_norm);
}

// -ls: an outer sync after `step` skipped on every replica (a pseudo-gradient not finite):
// "s:STEP outer_skip", and "outer_sync_skipped": 1 in the step's record.
static void logger_log_outer_skip(Logger* l, int step) {
    if (!l->on) { return; }
    logger_line(l, "s:%d outer_skip\n", step);
    logger_field(l, step, "outer_sync_skipped", 1.0);
}

// The checkpoint of `step` could not be written (llmc/train_loop.h): "s:STEP ckpt:failed", and
// "checkpoint_failed": 1 in the step's record.
static void logger_log_ckpt_failed(Logger* l, int step) {
    if (!l->on) { return; }
    logger_line(l, "s:%d ckpt:failed\n", step);
    logger_field(l, step, "checkpoint_failed", 1.0);
}

// -le 1: from step on, `live` replicas train (one was lost).
static void logger_log_replicas(Logger* l, int step, int live) {
    if (!l->on) { return; }
    logger_line(l, "s:%d replicas:%d\n", step, live);
    logger_field(l, step, "replicas", (double)live);
}

static void logger_log_val(Logger* l, int step, float loss) {
    if (!l->on) { return; }
    logger_line(l, "s:%d tel:%.6f\n", step, loss);
    logger_field(l, step, "val_loss", loss);
}

static void logger_log_eval(Logger* l, int step, float accuracy) {
    if (!l->on) { return; }
    logger_line(l, "s:%d eval:%.6f\n", step, accuracy);
    logger_field(l, step, "hellaswag", accuracy);
}

// A record of its own (one line, with its newline) after the step records so far.
static void logger_log_record(Logger* l, const char* line, size_t len) {
    if (!l->on || len == 0) { return; }
    logger_flush_record(l);
    log_file_append(&l->jsonl, line, len);
}

static void logger_free(Logger* l) {
    logger_flush_record(l);
    log_file_close(&l->log);
    log_file_close(&l->jsonl);
    l->on = 0;
}

#endif
