// main.log in the log directory, written by rank 0 only: one line per event,
// "s:STEP trl:LOSS lr:LR norm:NORM" for a training step (with " skip:WHY" when its update was
// skipped) and "s:STEP tel:LOSS" for validation.
#ifndef LLMC_LOGGER_H
#define LLMC_LOGGER_H

#include <stdio.h>
#include <string.h>
#include "utils.h"

typedef struct {
    FILE* file; // NULL when no log dir was given or on ranks other than 0
} Logger;

// A run resuming from step resume_step (-1: a fresh run, which truncates main.log) keeps the
// lines of steps up to resume_step (the validation line of resume_step itself is repeated by the
// resumed run) and drops those the interrupted run wrote after its checkpoint; a main.log that
// was moved away is started anew.
static void logger_init(Logger* l, const char* log_dir, int rank, int resume_step) {
    l->file = NULL;
    if (rank != 0 || log_dir == NULL || log_dir[0] == '\0') { return; }
    make_dirs(log_dir);
    char path[4096];
    snprintf(path, sizeof(path), "%s/main.log", log_dir);
    if (resume_step >= 0) {
        FILE* old = fopen(path, "r");
        if (old) {
            char tmp[4200], line[4096];
            FILE* kept = fopen_tmp_for(path, tmp, sizeof(tmp));
            while (fgets(line, sizeof(line), old)) {
                int step = -1;
                if (sscanf(line, "s:%d", &step) != 1 || step < resume_step ||
                    (step == resume_step && strstr(line, " tel:") == NULL)) {
                    fputs(line, kept);
                }
            }
            fclose(old);
            commit_tmp(kept, tmp, path);
        }
    }
    l->file = fopen_check(path, resume_step >= 0 ? "a" : "w");
}

static void logger_log_train(Logger* l, int step, float loss, float lr, float norm) {
    if (!l->file) { return; }
    fprintf(l->file, "s:%d trl:%.6f lr:%e norm:%f\n", step, loss, lr, norm);
    fflush(l->file);
}

// A step whose update was skipped (llmc/step_guard.h): its line ends with skip:nonfinite|spike.
static void logger_log_skip(Logger* l, int step, float loss, float lr, float norm, int spike) {
    if (!l->file) { return; }
    fprintf(l->file, "s:%d trl:%.6f lr:%e norm:%f skip:%s\n", step, loss, lr, norm, spike ? "spike" : "nonfinite");
    fflush(l->file);
}

static void logger_log_val(Logger* l, int step, float loss) {
    if (!l->file) { return; }
    fprintf(l->file, "s:%d tel:%.6f\n", step, loss);
    fflush(l->file);
}

static void logger_free(Logger* l) {
    if (l->file) { fclose(l->file); }
}

#endif
