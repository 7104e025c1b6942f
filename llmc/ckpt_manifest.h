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
// error is recorded, not fatal, and DONE_S does not appear). lost (R = world / dp_shard bytes, or
// NULL): -le 1, the replicas lost when it was written; their ranks' state files are not listed, and
// a line "missing dp_shard S replicas k ..." names them (a resume rebuilds them from the outer
// state, llmc/ckpt_layout.h). Without lost replicas the manifest is as before, byte for byte.
static void checkpoint_write_manifest(const char* dir, int step, uint32_t model_crc, long model_bytes, int world,
                                      long state_bytes, int dp_shard, const uint8_t* lost) {
    char path[4096], tmp[4200], name[512];
    int R = world / dp_shard, nlost = 0;
    for (int q = 0; lost && q < R; q++) { nlost += lost[q] != 0; }
    size_t cap = 512 + (size_t)world * 96 + (size_t)R * 12 + 16, len = 0;
    char* text = (char*)malloc_check(cap);
    len += snprintf(text + len, cap - len, "%s\nstep %d\nworld %d\n", MANIFEST_TITLE, step, world);
    if (nlost > 0) {
        len += snprintf(text + len, cap - len, "missing dp_shard %d replicas", dp_shard);
        for (int q = 0; q < R; q++) {
            if (lost[q]) { len += snprintf(text + len, cap - len, " %d", q); }
        }
        len += snprintf(text + len, cap - len, "\n");
    }
    checkpoint_path(name, sizeof(name), "", "model", step, -1);
    len += snprintf(text + len, cap - len, "file %s %ld %08x\n", name + 1, model_bytes, model_crc);
    for (int r = 0; r < world; r++) {
        if (nlost > 0 && lost[r / dp_shard]) { continue; }
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

// Whether line is exactly what the format makes of the values (as checkpoint_write_manifest wrote
// it: single spaces, numbers without signs or leading zeros), so that every reader of a verified
// manifest sees the same lines.
static int manifest_canonical(const char* line, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static int manifest_canonical(const char* line, const char* fmt, ...) {
    char canon[1200];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(canon, sizeof(canon), fmt, ap);
    va_end(ap);
    return n >= 0 && (size_t)n < sizeof(canon) && strcmp(canon, line) == 0;
}

// A manifest line "missing dp_shard S replicas k ..." (the replicas lost when the checkpoint was
// written, -le 1): fills lost (R bytes, zeroed first, where given) and returns how many, 0 for
// another line; -1 when the line is malformed (a replica out of 0..R-1 or named twice, every
// replica named, S not dividing world, or not as written: replicas in ascending order).
static int manifest_missing_line(const char* line, int world, uint8_t* lost, int* dp_shard) {
    int S = 0, at = 0, n = 0;
    if (sscanf(line, "missing dp_shard %d replicas%n", &S, &at) != 1 || at == 0) { return 0; }
    if (S < 1 || world % S != 0) { return -1; }
    int R = world / S;
    if (lost) { memset(lost, 0, (size_t)R); }
    uint8_t* seen = (uint8_t*)calloc_check((size_t)R, 1);
    const char* p = line + at;
    while (*p == ' ') {
        char* end;
        long q = strtol(p, &end, 10);
        if (end == p || q < 0 || q >= R || seen[q]) { n = -1; break; }
        seen[q] = 1;
        n++;
        p = end;
    }
    if (n >= 0 && (*p != '\0' || n == 0 || n == R)) { n = -1; }
    if (n > 0) { // as written: rebuilt from the replicas named, in ascending order
        char* canon = (char*)malloc_check((size_t)R * 12 + 64);
        size_t len = (size_t)sprintf(canon, "missing dp_shard %d replicas", S);
        for (int q = 0; q < R; q++) {
            if (seen[q]) { len += (size_t)sprintf(canon + len, " %d", q); }
        }
        if (strcmp(canon, line) != 0) { n = -1; }
        free(canon);
    }
    if (n > 0 && lost) { memcpy(lost, seen, (size_t)R); }
    free(seen);
    *dp_shard = S;
    return n;
}

// The readers below take a manifest that checkpoint_verify passed (text without NUL bytes), a line
// at a time whatever its length, as checkpoint_verify read it; getline's buffer grows as needed
// (a "missing" line of many replicas can be long).
static char* manifest_next_line(FILE* f, char** line, size_t* cap) {
    ssize_t n = getline(line, cap, f);
    if (n < 0) { return NULL; }
    if (n > 0 && (*line)[n - 1] == '\n') { (*line)[n - 1] = '\0'; }
    return *line;
}

// The replicas missing from verified checkpoint `step` of dir, written by R replicas (-le 1; lost:
// R bytes, all 0 when none): returns how many.
static int checkpoint_missing_replicas(const char* dir, int step, int R, uint8_t* lost) {
    char path[4096], *line = NULL;
    size_t cap = 0;
    int n = 0, S = 0, world = 0;
    memset(lost, 0, (size_t)R);
    checkpoint_path(path, sizeof(path), dir, "DONE", step, -1);
    FILE* f = fopen_check(path, "rb");
    while (manifest_next_line(f, &line, &cap)) {
        if (sscanf(line, "world %d", &world) == 1) { continue; }
        int got = manifest_missing_line(line, world, NULL, &S);
        if (got < 0 || (got > 0 && world / S != R)) { fail("%s: malformed line '%.200s'", path, line); }
        if (got > 0) { n = manifest_missing_line(line, world, lost, &S); }
    }
    free(line);
    fclose(f);
    return n;
}

// What checkpoint_verify has read of a manifest so far.
typedef struct {
    const char *dir, *path;
    int step, mstep, world, S, files, has_model;
    uint8_t* lost;   // R bytes once a "missing" line came (else NULL)
    uint8_t* listed; // world bytes once the world line came: the ranks whose state file is listed
} ManifestRead;

#define MANIFEST_MAX_WORLD (1 << 20)

// One "file NAME BYTES CRC" line: NAME must be this step's model file (CRC in hex) or the state
// file (CRC "self") of a rank of the world, not of a lost replica, not listed before; then the
// file's size and CRC. Returns 1, or 0 with why.
static int manifest_check_file(ManifestRead* m, const char* name, long bytes, const char* crc_text, char* why,
                               size_t why_len) {
    char want[64], file[4096 + 600];
    int step = -1, rank = -1, at = 0;
    checkpoint_path(want, sizeof(want), "", "model", m->step, -1);
    int model = strcmp(name, want + 1) == 0 && strcmp(crc_text, "self") != 0 && !m->has_model;
    if (!model && m->listed && sscanf(name, "state_%8d_%5d.bin%n", &step, &rank, &at) == 2 && name[at] == '\0' &&
        step == m->step && rank >= 0 && rank < m->world && strcmp(crc_text, "self") == 0) {
        checkpoint_path(want, sizeof(want), "", "state", step, rank);
        if (strcmp(name, want + 1) != 0 || m->listed[rank] || (m->lost && m->lost[rank / m->S])) { rank = -1; }
    } else {
        rank = -1;
    }
    if (!model && rank < 0) {
        snprintf(why, why_len, "%s: lists '%.200s' %s, which is not a file of this checkpoint (or listed twice)",
                 m->path, name, crc_text);
        return 0;
    }
    m->has_model |= model;
    if (rank >= 0) { m->listed[rank] = 1; }
    m->files++;
    snprintf(file, sizeof(file), "%s/%s", m->dir, name);
    FILE* g = fopen(file, "rb");
    if (g == NULL) {
        snprintf(why, why_len, "%s: missing", file);
        return 0;
    }
    int ok = 1;
    long actual = file_size_of(g);
    if (actual != bytes) {
        snprintf(why, why_len, "%s: %ld bytes, the manifest says %ld (truncated or replaced)", file, actual, bytes);
        ok = 0;
    } else if (!model) {
        TrainState s;
        ok = state_check_file(file, &s, why, why_len);
    } else {
        uint32_t crc = crc32c_file_from(g, 0, NULL);
        unsigned want_crc = (unsigned)strtoul(crc_text, NULL, 16);
        if (!manifest_canonical(crc_text, "%08x", want_crc)) {
            snprintf(why, why_len, "%s: the manifest's checksum '%s' is not 8 lower-case hex digits", file, crc_text);
            ok = 0;
        } else if (crc != want_crc) {
            snprintf(why, why_len, "%s: checksum mismatch (manifest %08x, file %08x)", file, want_crc, crc);
            ok = 0;
        }
    }
    fclose(g);
    return ok;
}

// One line of a manifest (after its title, before its end line): step, world, missing or file, each
// whole. Returns 1, or 0 with why.
static int manifest_line(ManifestRead* m, const char* line, char* why, size_t why_len) {
    char name[512], crc_text[16];
    long bytes;
    int world = 0, S = 1;
    if (sscanf(line, "step %d", &m->mstep) == 1 && manifest_canonical(line, "step %d", m->mstep)) { return 1; }
    if (sscanf(line, "world %d", &world) == 1 && manifest_canonical(line, "world %d", world)) {
        if (m->listed || world < 1 || world > MANIFEST_MAX_WORLD) {
            snprintf(why, why_len, "%s: world %d (1-%d, once, before the files)", m->path, world, MANIFEST_MAX_WORLD);
            return 0;
        }
        m->world = world;
        m->listed = (uint8_t*)calloc_check((size_t)world, 1);
        return 1;
    }
    int lost = manifest_missing_line(line, m->world, NULL, &S);
    if (lost < 0 || (lost > 0 && (m->lost || m->files > 0))) {
        snprintf(why, why_len, "%s: malformed line '%.200s'", m->path, line);
        return 0;
    }
    if (lost > 0) {
        m->lost = (uint8_t*)malloc_check((size_t)(m->world / S));
        manifest_missing_line(line, m->world, m->lost, &m->S);
        return 1;
    }
    if (sscanf(line, "file %511s %ld %15s", name, &bytes, crc_text) != 3 ||
        !manifest_canonical(line, "file %s %ld %s", name, bytes, crc_text)) {
        snprintf(why, why_len, "%s: malformed line '%.200s'", m->path, line);
        return 0;
    }
    return manifest_check_file(m, name, bytes, crc_text, why, why_len);
}

// Checks checkpoint `step` of dir: the manifest's own CRC, then every file it lists (its name one
// of the checkpoint's, listed once; size, then CRC: the model file against the manifest, state
// files against their own), and that it lists the model file and the state file of every rank but
// those of the replicas it names as lost. Returns 1 when all match, else 0 with the first problem
// in why. world_out: the world size that wrote it.
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
    } else if (strlen(text) != got) { // its lines are read as text, here and by the readers above
        snprintf(why, why_len, "%s: manifest holds a NUL byte (at offset %zu)", path, strlen(text));
    } else if (strncmp(text, MANIFEST_TITLE "\n", strlen(MANIFEST_TITLE) + 1) != 0) {
        snprintf(why, why_len, "%s: not a %s", path, MANIFEST_TITLE);
    } else {
        ok = 1;
        ManifestRead m = {.dir = dir, .path = path, .step = step, .mstep = -1, .S = 1};
        char* save = NULL;
        *end = '\0'; // the lines before the end line
        for (char* line = strtok_r(text + strlen(MANIFEST_TITLE) + 1, "\n", &save); ok && line;
             line = strtok_r(NULL, "\n", &save)) {
            ok = manifest_line(&m, line, why, why_len);
        }
        int missing_ranks = 0;
        for (int r = 0; r < m.world; r++) { missing_ranks += m.lost && m.lost[r / m.S]; }
        if (ok && (m.mstep != step || m.world < 1 || !m.has_model || m.files != m.world - missing_ranks + 1)) {
            snprintf(why, why_len, "%s: manifest names step %d, world %d, %d files%s (%d ranks of lost replicas)", path,
                     m.mstep, m.world, m.files, m.has_model ? "" : " without the model file", missing_ranks);
            ok = 0;
        }
        if (world_out) { *world_out = m.world; }
        free(m.lost);
        free(m.listed);
    }
    free(text);
    return ok;
}

// The lowest rank whose state file verified checkpoint `step` of dir lists: 0, or with -le 1 where
// replica 0 was lost when it was written, the first rank of the first replica it has.
static int checkpoint_first_state_rank(const char* dir, int step) {
    char path[4096], *line = NULL;
    size_t cap = 0;
    int first = -1, s = -1, r = -1;
    checkpoint_path(path, sizeof(path), dir, "DONE", step, -1);
    FILE* f = fopen_check(path, "rb");
    while (manifest_next_line(f, &line, &cap)) {
        if (sscanf(line, "file state_%8d_%5d.bin", &s, &r) == 2 && (first < 0 || r < first)) { first = r; }
    }
    free(line);
    fclose(f);
    if (first < 0) { fail("%s: lists no state file", path); }
    return first;
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
