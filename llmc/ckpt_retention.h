// The checkpoints of a log dir as a set: the steps it holds (their DONE_S markers), setting aside
// the markers of steps a run is about to rewrite, removing a checkpoint whole or the part a rank
// wrote of one that failed, and -nk retention (the K newest complete ones kept).
#ifndef LLMC_CKPT_RETENTION_H
#define LLMC_CKPT_RETENTION_H

#include <dirent.h>
#include "utils.h"
#include "ckpt_state_file.h"

// Steps of the DONE_S markers in dir, newest first (malloc'd; *count of them; NULL if none).
static int* checkpoint_list(const char* dir, int* count) {
    *count = 0;
    DIR* d = opendir(dir);
    if (d == NULL) { return NULL; }
    int cap = 16, n = 0;
    int* steps = (int*)malloc_check(cap * sizeof(int));
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        int step;
        char rest;
        if (sscanf(e->d_name, "DONE_%d%c", &step, &rest) == 1 && step >= 0) {
            if (n == cap) {
                cap *= 2;
                int* grown = (int*)malloc_check(cap * sizeof(int));
                memcpy(grown, steps, n * sizeof(int));
                free(steps);
                steps = grown;
            }
            steps[n++] = step;
        }
    }
    closedir(d);
    for (int i = 1; i < n; i++) { // insertion sort, descending
        int v = steps[i], j = i - 1;
        while (j >= 0 && steps[j] < v) { steps[j + 1] = steps[j]; j--; }
        steps[j + 1] = v;
    }
    *count = n;
    return steps;
}

// Rank 0, before training: a fresh run (-y 0) or a resume from step `start` will write
// checkpoints of later steps, so the DONE markers of any later ones (those that failed
// verification, or an earlier run's) are renamed DONE_S.stale: a crash in the middle of
// rewriting such a step can then never leave an old manifest over new files. Leftover
// temporary files of an interrupted write are removed.
static void checkpoint_prepare_dir(const char* dir, int start) {
    int count;
    int* steps = checkpoint_list(dir, &count);
    for (int i = 0; i < count; i++) {
        if (steps[i] <= start) { continue; }
        char path[4096], stale[4200];
        checkpoint_path(path, sizeof(path), dir, "DONE", steps[i], -1);
        snprintf(stale, sizeof(stale), "%s.stale", path);
        if (rename(path, stale) == 0) { printf("checkpoint %d set aside: %s renamed %s\n", steps[i], path, stale); }
    }
    free(steps);
    DIR* d = opendir(dir);
    if (d == NULL) { return; }
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        int ours = strncmp(e->d_name, "model_", 6) == 0 || strncmp(e->d_name, "state_", 6) == 0 ||
                   strncmp(e->d_name, "DONE_", 5) == 0;
        if (ours && n > 4 && strcmp(e->d_name + n - 4, ".tmp") == 0) {
            char path[4096 + 300];
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            remove(path);
        }
    }
    closedir(d);
    fsync_parent_dir(dir);
}

// Removes every file of checkpoint `step` (its DONE marker first, so that a crash in between
// leaves files without a marker, never a marker without files).
static void checkpoint_remove(const char* dir, int step) {
    char path[4096], prefix[64];
    checkpoint_path(path, sizeof(path), dir, "DONE", step, -1);
    remove(path);
    fsync_parent_dir(path);
    checkpoint_path(path, sizeof(path), dir, "model", step, -1);
    remove(path);
    snprintf(prefix, sizeof(prefix), "state_%08d_", step);
    DIR* d = opendir(dir);
    if (d == NULL) { return; }
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
            char file[4096 + 300];
            snprintf(file, sizeof(file), "%s/%s", dir, e->d_name);
            remove(file);
        }
    }
    closedir(d);
}

// After a checkpoint of `step` failed (on any rank): removes what this rank wrote of it, finished
// or not, so that no file of the step remains and its space is free again: the state file (and
// its .tmp) of `rank`, and on the writer (rank 0; -le 1 with replica 0 lost, the first rank of the
// first replica left) the DONE marker first, then the model file (and their .tmp).
static void remove_with_tmp(const char* path) {
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    remove(path);
    remove(tmp);
}

static void checkpoint_remove_partial(const char* dir, int step, int rank, int writer) {
    char path[4096];
    if (rank == writer) {
        checkpoint_path(path, sizeof(path), dir, "DONE", step, -1);
        remove_with_tmp(path);
        fsync_parent_dir(path);
        checkpoint_path(path, sizeof(path), dir, "model", step, -1);
        remove_with_tmp(path);
    }
    checkpoint_path(path, sizeof(path), dir, "state", step, rank);
    remove_with_tmp(path);
    fsync_parent_dir(path);
}

// -nk K (rank 0, after DONE_S is written): keeps the K newest complete checkpoints.
static void checkpoint_retain(const char* dir, int keep) {
    if (keep <= 0) { return; }
    int count;
    int* steps = checkpoint_list(dir, &count);
    for (int i = keep; i < count; i++) { checkpoint_remove(dir, steps[i]); }
    free(steps);
}

#endif
