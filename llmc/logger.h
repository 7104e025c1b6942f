// The run's logs in the log directory, written by rank 0 only:
// main.log (llm.c's format), one line per event: "s:STEP trl:LOSS lr:LR norm:NORM" for a
// training step (with " skip:WHY" when its update was skipped), "s:STEP tel:LOSS" for validation
// and "s:STEP eval:ACC" for HellaSwag;
// metrics.jsonl, its machine-readable twin: a first {"config": {...}} record, then one JSON
// object per step with every number logged for it ("step", "train_loss", "lr", "grad_norm",
// "ms", "tokens_per_s", "mfu", "skipped", "val_loss", "hellaswag"). A step's record is written
// when the next step's numbers begin (and at the end), so validation after step N joins step N's
// record.
#ifndef LLMC_LOGGER_H
#define LLMC_LOGGER_H

#include <math.h>
#include <stdio.h>
#include <string.h>
#include "utils.h"
#include "gpt2_model.h"
#include "args.h"

typedef struct {
    FILE* file;         // main.log; NULL when no log dir was given or on ranks other than 0
    FILE* jsonl;        // metrics.jsonl
    int pending_step;   // the step whose record is being collected, -1 for none
    char pending[2048]; // its fields so far, each ", \"name\": value"
    size_t pending_len;
} Logger;

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

// Rewrites a log of an interrupted run for a resume from resume_step (see logger_init); lines
// without a step (metrics.jsonl's config records) are kept.
static void logger_trim(const char* path, int resume_step, int jsonl) {
    FILE* old = fopen(path, "r");
    if (!old) { return; }
    char tmp[4200], line[4096];
    FILE* kept = fopen_tmp_for(path, tmp, sizeof(tmp));
    while (fgets(line, sizeof(line), old)) {
        int step = -1;
        int keep;
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
        if (keep) { fputs(line, kept); }
    }
    fclose(old);
    commit_tmp(kept, tmp, path);
}

// A run resuming from step resume_step (-1: a fresh run, which truncates both files) keeps what
// the interrupted run logged up to resume_step and drops what it wrote after its checkpoint: in
// main.log the lines of steps up to resume_step (the validation line of resume_step itself is
// repeated by the resumed run), in metrics.jsonl the records up to resume_step, less the
// validation and HellaSwag numbers of resume_step (the resumed run adds a record for them). A file that was moved away is
// started anew.
static void logger_init(Logger* l, const char* log_dir, int rank, int resume_step) {
    l->file = l->jsonl = NULL;
    l->pending_step = -1;
    l->pending_len = 0;
    if (rank != 0 || log_dir == NULL || log_dir[0] == '\0') { return; }
    make_dirs(log_dir);
    char path[4096];
    snprintf(path, sizeof(path), "%s/main.log", log_dir);
    if (resume_step >= 0) { logger_trim(path, resume_step, 0); }
    l->file = fopen_check(path, resume_step >= 0 ? "a" : "w");
    snprintf(path, sizeof(path), "%s/metrics.jsonl", log_dir);
    if (resume_step >= 0) { logger_trim(path, resume_step, 1); }
    l->jsonl = fopen_check(path, resume_step >= 0 ? "a" : "w");
}

static void logger_flush_record(Logger* l) {
    if (!l->jsonl || l->pending_step < 0) { return; }
    fprintf(l->jsonl, "{\"step\": %d%.*s}\n", l->pending_step, (int)l->pending_len, l->pending);
    fflush(l->jsonl);
    l->pending_step = -1;
    l->pending_len = 0;
}

// Adds "name": value to step's record (JSON has no inf or NaN: those become null).
static void logger_field(Logger* l, int step, const char* name, double value) {
    if (!l->jsonl) { return; }
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
    if (!l->jsonl) { return; }
    FILE* f = l->jsonl;
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
    fprintf(f, ", \"flops_per_token\": %.9g, \"peak_flops\": %.9g}}\n", flops_per_token, peak_flops);
    fflush(f);
}

// ms, tokens_per_s and mfu (a fraction; < 0 = not known) go to metrics.jsonl only.
static void logger_log_train(Logger* l, int step, float loss, float lr, float norm, double ms, double tokens_per_s,
                             double mfu) {
    if (!l->file) { return; }
    fprintf(l->file, "s:%d trl:%.6f lr:%e norm:%f\n", step, loss, lr, norm);
    fflush(l->file);
    logger_field(l, step, "train_loss", loss);
    logger_field(l, step, "lr", lr);
    logger_field(l, step, "grad_norm", norm);
    logger_field(l, step, "ms", ms);
    logger_field(l, step, "tokens_per_s", tokens_per_s);
    if (mfu >= 0.0) { logger_field(l, step, "mfu", mfu); }
}

// A step whose update was skipped (llmc/step_guard.h): its line ends with skip:nonfinite|spike.
static void logger_log_skip(Logger* l, int step, float loss, float lr, float norm, int spike) {
    if (!l->file) { return; }
    fprintf(l->file, "s:%d trl:%.6f lr:%e norm:%f skip:%s\n", step, loss, lr, norm, spike ? "spike" : "nonfinite");
    fflush(l->file);
    logger_field(l, step, "train_loss", loss);
    logger_field(l, step, "lr", lr);
    logger_field(l, step, "grad_norm", norm);
    logger_field(l, step, "skipped", 1.0);
}

// -ls: an outer sync after `step`, with the norm of the mean pseudo-gradient (outer - local).
static void logger_log_outer(Logger* l, int step, float pg_norm) {
    if (!l->file) { return; }
    fprintf(l->file, "s:%d outer_sync pgnorm:%f\n", step, pg_norm);
    fflush(l->file);
    logger_field(l, step, "outer_sync_pgnorm", pg_norm);
}

static void logger_log_val(Logger* l, int step, float loss) {
    if (!l->file) { return; }
    fprintf(l->file, "s:%d tel:%.6f\n", step, loss);
    fflush(l->file);
    logger_field(l, step, "val_loss", loss);
}

static void logger_log_eval(Logger* l, int step, float accuracy) {
    if (!l->file) { return; }
    fprintf(l->file, "s:%d eval:%.6f\n", step, accuracy);
    fflush(l->file);
    logger_field(l, step, "hellaswag", accuracy);
}

static void logger_free(Logger* l) {
    logger_flush_record(l);
    if (l->file) { fclose(l->file); }
    if (l->jsonl) { fclose(l->jsonl); }
}

#endif
