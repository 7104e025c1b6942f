// main.log in the log directory, written by rank 0 only: one line per event,
// "s:STEP trl:LOSS lr:LR norm:NORM" for a training step, "s:STEP tel:LOSS" for validation and
// "s:STEP eval:ACC" for the HellaSwag accuracy.
#ifndef LLMC_LOGGER_H
#define LLMC_LOGGER_H

#include <stdio.h>
#include "utils.h"

typedef struct {
    FILE* file; // NULL when no log dir was given or on ranks other than 0
} Logger;

static void logger_init(Logger* l, const char* log_dir, int rank, int resuming) {
    l->file = NULL;
    if (rank != 0 || log_dir == NULL || log_dir[0] == '\0') { return; }
    make_dirs(log_dir);
    char path[4096];
    snprintf(path, sizeof(path), "%s/main.log", log_dir);
    l->file = fopen_check(path, resuming ? "a" : "w");
}

static void logger_log_train(Logger* l, int step, float loss, float lr, float norm) {
    if (!l->file) { return; }
    fprintf(l->file, "s:%d trl:%.6f lr:%e norm:%f\n", step, loss, lr, norm);
    fflush(l->file);
}

static void logger_log_val(Logger* l, int step, float loss) {
    if (!l->file) { return; }
    fprintf(l->file, "s:%d tel:%.6f\n", step, loss);
    fflush(l->file);
}

static void logger_log_eval(Logger* l, int step, float accuracy) {
    if (!l->file) { return; }
    fprintf(l->file, "s:%d eval:%.6f\n", step, accuracy);
    fflush(l->file);
}

static void logger_free(Logger* l) {
    if (l->file) { fclose(l->file); }
}

#endif
