// A checkpoint's manifest DONE_S (docs/checkpoints.md), written last by rank 0 once every rank has
// written its files: every file of the checkpoint with its size and (the model file) its CRC-32C,
// then a CRC-32C of the manifest itself; checking a checkpoint against it, and choosing the newest
// one that verifies to resume from.
#ifndef LLMC_CKPT_MANIFEST_H
#define LLMC_CKPT_MANIFEST_H

#include "utils.h"
#include "crc32c.h"
#include "ckpt_state_file.h"
#include "ckpt_retention.h"

#define MANIFEST_TITLE "train_gpt2 checkpoint manifest v1"

// Rank 0, after every rank has written its state file: the manifest, atomically (in soft mode an
// error is recorded, not fatal, and DONE_S does not appear).
static void checkpoint_write_manifest(const char* dir, int step, uint32_t model_crc, long model_bytes, int world,
                                      long state_bytes) {
    char path[4096], tmp[4200], name[512];
    size_t cap = 512 + (size_t)world * 96 + 16, len = 0;
    char* text = (char*)malloc_check(cap);
    len += snprintf(text + len, cap - len, "%s\nstep %d\nworld %d\n", MANIFEST_TITLE, step, world);
    checkpoint_path(name, sizeof(name), "", "model", step, -1);
    len += snprintf(text + len, cap - len, "file %s %ld %08x\n", name + 1, model_bytes, model_crc);
    for (int r = 0; r < world; r++) {
        checkpoint_path(name, sizeof(name), "", "state", step, r);
        len += snprintf(text + len, cap - len, "file %s %ld self\n", name + 1, state_bytes);
    }
    uint32_t crc = crc32c_update(0, text, len);
    checkpoint_path(path, sizeof(path), dir, "DONE", step, -1);
    len += snprintf(text + len, cap - len, "end %08x\n", crc);
    FILE* f = fopen_tmp_for(path, tmp, sizeof(tmp));
    fwrite_check(text, 1, len, f, tmp);
    commit_tmp(f, tmp, path);
    free(text);
}

// Checks checkpoint `step` of dir: the manifest's own CRC, then every file it lists (size, then
// CRC: the model file against the manifest, state files against their own). Returns 1 when all
// match, else 0 with the first problem in why. world_out: the world size that wrote it.
static int checkpoint_verify(const char* dir, int step, int* world_out, char* why, size_t why_len) {
    char path[4096];
    checkpoint_path(path, sizeof(path), dir, "DONE", step, -1);
    FILE* f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(why, why_len, "%s: cannot be read", path);
        return 0;
    }
    long size = file_size_of(f);
    if (size <= 0 || size > (1 << 24)) {
        fclose(f);
        snprintf(why, why_len, "%s: manifest of %ld bytes", path, size);
        return 0;
    }
    char* text = (char*)malloc_check((size_t)size + 1);
    size_t got = fread(text, 1, (size_t)size, f);
    fclose(f);
    text[got] = '\0';
    int ok = 0;
    char* end = got >= 13 ? text + got - 13 : NULL; // the last line: "end xxxxxxxx\n"
    unsigned stored = 0;
    char hex[9] = {0};
    if (end) { memcpy(hex, end + 4, 8); }
    if (end == NULL || (end != text && end[-1] != '\n') || strncmp(end, "end ", 4) != 0 || end[12] != '\n' ||
        strspn(hex, "0123456789abcdef") != 8 || sscanf(hex, "%8x", &stored) != 1) {
        snprintf(why, why_len, "%s: manifest incomplete or not a manifest (no end line)", path);
    } else if (crc32c_update(0, text, (size_t)(end - text)) != stored) {
        snprintf(why, why_len, "%s: manifest checksum mismatch", path);
    } else if (strncmp(text, MANIFEST_TITLE "\n", strlen(MANIFEST_TITLE) + 1) != 0) {
        snprintf(why, why_len, "%s: not a %s", path, MANIFEST_TITLE);
    } else {
        ok = 1;
        int mstep = -1, world = 0, files = 0;
        char* save = NULL;
        for (char* line = strtok_r(text, "\n", &save); ok && line && line < end; line = strtok_r(NULL, "\n", &save)) {
            char name[512], crc_text[16];
            long bytes;
            if (sscanf(line, "step %d", &mstep) == 1 || sscanf(line, "world %d", &world) == 1) { continue; }
            if (sscanf(line, "file %511s %ld %15s", name, &bytes, crc_text) != 3) { continue; }
            files++;
            char file[4096 + 600];
            snprintf(file, sizeof(file), "%s/%s", dir, name);
            FILE* g = fopen(file, "rb");
            if (g == NULL) {
                snprintf(why, why_len, "%s: missing", file);
                ok = 0;
                break;
            }
            long actual = file_size_of(g);
            if (actual != bytes) {
                snprintf(why, why_len, "%s: %ld bytes, the manifest says %ld (truncated or replaced)", file, actual, bytes);
                ok = 0;
            } else if (strcmp(crc_text, "self") == 0) {
                TrainState s;
                ok = state_check_file(file, &s, why, why_len);
            } else {
                uint32_t crc = crc32c_file_from(g, 0, NULL);
                unsigned want = (unsigned)strtoul(crc_text, NULL, 16);
                if (crc != want) {
                    snprintf(why, why_len, "%s: checksum mismatch (manifest %08x, file %08x)", file, want, crc);
                    ok = 0;
                }
            }
            fclose(g);
        }
        if (ok && (mstep != step || world < 1 || files != world + 1)) {
            snprintf(why, why_len, "%s: manifest names step %d, world %d, %d files", path, mstep, world, files);
            ok = 0;
        }
        if (world_out) { *world_out = world; }
    }
    free(text);
    return ok;
}

// The step to resume from: the newest checkpoint in dir that verifies, or -1 when dir holds no
// complete-looking checkpoint (a missing or empty dir, or only unfinished writes: start fresh).
// Newer ones that fail verification are named with the reason (print: rank 0) and skipped;
// when there are some but none verifies, the run stops.
static int checkpoint_select(const char* dir, int print) {
    int count;
    int* steps = checkpoint_list(dir, &count);
    int chosen = -1;
    char why[8192];
    for (int i = 0; i < count && chosen < 0; i++) {
        if (checkpoint_verify(dir, steps[i], NULL, why, sizeof(why))) {
            chosen = steps[i];
        } else if (print) {
            printf("checkpoint %d skipped: %s\n", steps[i], why);
            fflush(stdout);
        }
    }
    if (count > 0 && chosen < 0) {
        fail("-y 1: none of the %d checkpoints in %s verifies (newest, step %d: %s)", count, dir, steps[0], why);
    }
    free(steps);
    return chosen;
}

#endif
