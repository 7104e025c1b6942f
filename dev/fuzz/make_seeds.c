// Writes the seed corpus of every fuzz harness in dev/fuzz: a few tiny valid files written with
// the project's own writers where there is one (model, state) or by the formats' layouts
// (shard, tokenizer, debug state, eval file, command lines), plus broken ones (truncated, wrong
// magic, wrong version, headers whose sizes overflow). Seeds are generated at test time, never
// committed. Usage: make_seeds OUTDIR  (writes OUTDIR/<harness>/<seed> and OUTDIR/args.dict)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../llmc/utils.h"
#include "../../llmc/gpt2_model.h"
#include "../../llmc/checkpoint.h"
#include "../../llmc/args.h"

static const char* out_dir;

typedef struct {
    unsigned char* p;
    size_t n, cap;
} Buf;

static void put(Buf* b, const void* src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = (unsigned char*)realloc(b->p, b->cap);
        if (b->p == NULL) { fail("out of memory"); }
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void put_int(Buf* b, int v) { put(b, &v, 4); }
static void put_header(Buf* b, const int* first, int count) {
    int header[256] = {0};
    memcpy(header, first, count * sizeof(int));
    put(b, header, sizeof(header));
}

static void write_seed(const char* harness, const char* name, const void* data, size_t n) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", out_dir, harness);
    make_dirs(path);
    snprintf(path, sizeof(path), "%s/%s/%s", out_dir, harness, name);
    FILE* f = fopen_check(path, "wb");
    fwrite_check(data, 1, n, f, path);
    fclose_check(f, path);
}

static Buf read_all(const char* path) {
    Buf b = {0};
    FILE* f = fopen_check(path, "rb");
    unsigned char chunk[4096];
    size_t got;
    while ((got = fread(chunk, 1, sizeof(chunk), f)) > 0) { put(&b, chunk, got); }
    fclose(f);
    return b;
}

// A seed from a file plus a prefix of harness settings, and its broken variants: one byte
// short, the magic changed, the version changed.
static void write_with_variants(const char* harness, const char* name, const unsigned char* prefix, size_t np,
                                const Buf* file) {
    Buf b = {0};
    put(&b, prefix, np);
    put(&b, file->p, file->n);
    char seed[256];
    write_seed(harness, name, b.p, b.n);
    snprintf(seed, sizeof(seed), "%s_truncated", name);
    write_seed(harness, seed, b.p, b.n - 1);
    b.p[np] ^= 1;
    snprintf(seed, sizeof(seed), "%s_bad_magic", name);
    write_seed(harness, seed, b.p, b.n);
    b.p[np] ^= 1;
    b.p[np + 4] += 1;
    snprintf(seed, sizeof(seed), "%s_bad_version", name);
    write_seed(harness, seed, b.p, b.n);
    free(b.p);
}

static const GPT2Config tiny = {3, 7, 128, 2, 1, 2}; // T_max 3, V 7, Vp 128, L 2, NH 1, C 2

static void model_seeds(void) {
    size_t n = gpt2_num_parameters(&tiny);
    float* params = (float*)malloc_check(n * sizeof(float));
    gpt2_init_parameters(params, &tiny, 1);
    char path[4096];
    snprintf(path, sizeof(path), "%s/tmp_model.bin", out_dir);
    for (int version = MODEL_VERSION_FP32; version <= MODEL_VERSION_BF16; version += 2) {
        gpt2_write_model(path, &tiny, params, version);
        Buf b = read_all(path);
        write_with_variants("model", version == MODEL_VERSION_FP32 ? "v3_fp32" : "v5_bf16", NULL, 0, &b);
        free(b.p);
    }
    remove(path);
    free(params);
    // headers only: heads that do not divide the channels; and a config (found by a search
    // over C and L) whose parameter count n is 2^63 + 1 mod 2^64, so that 4 n wraps to 4,
    // followed by the 4 bytes it then seems to promise
    Buf b = {0};
    int heads[8] = {MODEL_MAGIC, MODEL_VERSION_FP32, 3, 7, 2, 3, 2, 128};
    put_header(&b, heads, 8);
    write_seed("model", "heads_do_not_divide", b.p, b.n);
    b.n = 0;
    int wrap[8] = {MODEL_MAGIC, MODEL_VERSION_FP32, 2147437765, 2147437568, 1579468796, 1, 22059, 2147437568};
    put_header(&b, wrap, 8);
    put_int(&b, 0);
    write_seed("model", "size_wraps", b.p, b.n);
    free(b.p);
}

static void state_seeds(void) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/tmp_state.bin", out_dir);
    float m[5] = {1, 2, 3, 4, 5}, v[5] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f}, master[5] = {-1, -2, -3, -4, -5};
    for (int has_master = 0; has_master <= 1; has_master++) {
        TrainState s = {.rank = 1, .world = 2, .dp_shard = 2, .zero_stage = 1, .B = 4, .T = 8, .total_batch = 64,
                        .step = 17, .epoch = 1, .file_pos = 0, .row_pos = 40, .rng = 0x1234567890abcdefull,
                        .owned = 5, .has_master = has_master};
        state_write(path, &s, m, v, master);
        Buf b = read_all(path);
        unsigned char same_layout = 0;
        write_with_variants("state", has_master ? "zero1_master" : "zero1", &same_layout, 1, &b);
        unsigned char other_layout = 1 | 4; // another rank and dp_shard
        Buf p = {0};
        put(&p, &other_layout, 1);
        put(&p, b.p, b.n);
        write_seed("state", has_master ? "zero1_master_other_layout" : "zero1_other_layout", p.p, p.n);
        free(p.p);
        free(b.p);
    }
    remove(path);
}

// Loader settings (see fuzz_shard.c): B 2, T 4, vocab 50, 20 or 40 micro-batches.
static void shard_seed(const char* name, const unsigned char settings[18], const Buf* a, const Buf* b, const Buf* c) {
    Buf s = {0};
    put(&s, settings, 18);
    s.p[9] = (unsigned char)(a->n & 255); // B starts after A, C after B
    s.p[10] = (unsigned char)(a->n >> 8);
    s.p[16] = (unsigned char)((a->n + b->n) & 255);
    s.p[17] = (unsigned char)((a->n + b->n) >> 8);
    put(&s, a->p, a->n);
    put(&s, b->p, b->n);
    put(&s, c->p, c->n);
    write_seed("shard", name, s.p, s.n);
    free(s.p);
}

static Buf shard_file(int ntok, int shift) {
    Buf file = {0};
    int header[3] = {20240520, 1, ntok};
    put_header(&file, header, 3);
    for (int i = 0; i < ntok; i++) {
        unsigned short tok = (unsigned short)((i * 7 + shift) % 50);
        put(&file, &tok, 2);
    }
    return file;
}

static void shard_seeds(void) {
    Buf a = shard_file(64, 0), b = shard_file(48, 3), c = shard_file(96, 5), none = {0};
    unsigned char plain[18] = {1, 3, 0, 0, 0, 49, 0, 0, 20};
    write_with_variants("shard", "one_file", plain, 18, &a);
    unsigned char shuffled[18] = {1, 3, 1, 1, 1, 49, 0, 1, 40, 0, 0, 0, 0, 0, 0, 7};
    shard_seed("shuffled_two_ranks", shuffled, &a, &none, &none);
    a.p[1024 + 10] = 60; // a token >= vocab 50
    shard_seed("token_out_of_vocab", plain, &a, &none, &none);
    a.p[1024 + 10] = 1;
    unsigned char two[18] = {1, 3, 0, 0, 1, 49, 0, 1 | 2, 40, 0, 0, 0, 0, 0, 0, 3};
    shard_seed("two_files", two, &a, &b, &none);
    two[7] |= 4; // resumed at epoch 1, file 1, row 2
    two[11] = 1;
    two[12] = 1;
    two[13] = 2;
    shard_seed("two_files_resumed", two, &a, &b, &none);
    two[7] = 1 | 2 | 8; // the first file is rewritten longer under the running loader
    shard_seed("two_files_first_grows", two, &a, &b, &c);
    free(a.p);
    free(b.p);
    free(c.p);
}

static void tokenizer_seeds(void) {
    static const char* const tokens[] = {"a", "b", " the", "\n", "\xe2\x80", "\x99", "ok", "<|endoftext|>"};
    int V = 8;
    Buf file = {0};
    int header[4] = {20240328, 2, V, V - 1};
    put_header(&file, header, 4);
    for (int i = 0; i < V; i++) {
        unsigned char len = (unsigned char)strlen(tokens[i]);
        put(&file, &len, 1);
        put(&file, tokens[i], len);
    }
    write_with_variants("tokenizer", "tiny", NULL, 0, &file);
    Buf b = {0};
    int huge[4] = {20240328, 2, 1 << 30, 0}; // a vocab the file cannot hold
    put_header(&b, huge, 4);
    put(&b, "\x01x", 2);
    write_seed("tokenizer", "vocab_larger_than_file", b.p, b.n);
    free(b.p);
    free(file.p);
}

// Model settings (see fuzz_debug_state.c) that give the tiny config: V 7, L 2, NH 1, C 2, T 3.
static void debug_state_seeds(void) {
    unsigned char settings[5] = {6, 1, 0, 1, 2};
    int B = 1, T = 2;
    size_t n = gpt2_num_parameters(&tiny);
    Buf file = {0};
    int header[4] = {20240327, 2, B, T};
    put_header(&file, header, 4);
    for (int i = 0; i < 2 * B * T; i++) { put_int(&file, i % 7); }
    for (int i = 0; i < B * T * tiny.vocab_size + 1 + (int)n; i++) {
        float x = 0.01f * (i % 13);
        put(&file, &x, 4);
    }
    write_with_variants("debug_state", "tiny", settings, 5, &file);
    // B * T * (8 + 4V) wraps around 2^64 to 0 for V 62: a header that promises 2^56 rows
    Buf b = {0};
    unsigned char wide[5] = {61, 1, 0, 1, 2};
    put(&b, wide, 5);
    int wrap[4] = {20240327, 2, 1 << 28, 1 << 28};
    put_header(&b, wrap, 4);
    GPT2Config c = tiny;
    c.vocab_size = 62;
    for (size_t i = 0; i < 1 + gpt2_num_parameters(&c); i++) { put_int(&b, 0); }
    write_seed("debug_state", "size_wraps", b.p, b.n);
    free(b.p);
    free(file.p);
}

// Command lines: byte 0 = GPU trainer bit + ranks (see fuzz_args.c), then NUL-separated args.
static void args_seed(const char* name, unsigned char mode, const char* const* argv) {
    Buf b = {0};
    put(&b, &mode, 1);
    for (int i = 0; argv[i]; i++) { put(&b, argv[i], strlen(argv[i]) + 1); }
    write_seed("args", name, b.p, b.n);
    free(b.p);
}

static void args_seeds(void) {
    const char* quickstart[] = {"-i", "data/kjv/kjv_train.bin", "-j", "data/kjv/kjv_val.bin", "-tk",
                                "data/kjv/kjv_tokenizer.bin", "-e", "d6", "-sl", "256", "-b", "8", "-t", "256",
                                "-x", "600", "-l", "1e-3", "-u", "30", "-q", "0.1", "-k", "cosine", "-c", "0.1",
                                "-v", "100", "-m", "16", "-s", "200", "-g", "200", "-o", "log_quickstart", NULL};
    args_seed("quickstart", 0, quickstart);
    const char* zero2[] = {"-e", "d12", "-b", "4", "-t", "64", "-d", "2048", "-z", "2", "-ds", "2", "-n", "10",
                           "-y", "1", "-o", "out", NULL};
    args_seed("zero2_4ranks", 3 << 1, zero2);
    const char* gpu[] = {"-e", "model.bin", "-r", "2", "-w", "0", "-pi", "tcp", "-ps", "10.0.0.1", "-pp",
                         "29500", "-V", "50304", NULL};
    args_seed("gpu_tcp", 1, gpu);
    const char* bad[] = {"-b", "0", "-l", "nan", "-x", "-2", "-q", "2", NULL};
    args_seed("out_of_range", 0, bad);
    const char* wide[] = {"-b", "1048576", "-t", "4096", NULL}; // 2^32 tokens per micro-step
    args_seed("micro_batch_over_int", 0, wide);
    const char* unknown[] = {"-zz", "1", NULL};
    args_seed("unknown_flag", 0, unknown);
    const char* missing[] = {"-b", NULL};
    args_seed("missing_value", 0, missing);
    // every flag and a few values, for libFuzzer's -dict
    char path[4096];
    snprintf(path, sizeof(path), "%s/args.dict", out_dir);
    FILE* f = fopen_check(path, "w");
    for (int i = 0; i < NUM_ARG_SPECS; i++) { fprintf(f, "\"%s\\x00\"\n", arg_specs[i].flag); }
    fprintf(f, "\"d12\\x00\"\n\"0\\x00\"\n\"1\\x00\"\n\"1048576\\x00\"\n\"2147483647\\x00\"\n\"-1\\x00\"\n\"1e-3\\x00\"\n");
    fclose_check(f, path);
}

// fuzz_manifest: a settings byte (0: the harness appends the end line), then a manifest's lines for
// the harness's fixed checkpoint of step 1 (a 16-byte model file, state files of ranks 0-3 of 1048
// bytes): every rank listed; a replica of 2 ranks lost (-le 1); a file listed twice; a wrong name;
// a line with two spaces and the lost replica's line padded past 8 KiB (not as written: refused);
// a NUL byte followed by a line that would name every replica lost (a manifest is text: refused,
// not read two ways).
static void manifest_seeds(void) {
    uint8_t model[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    char model_line[128], text[2048];
    snprintf(model_line, sizeof(model_line), "file model_00000001.bin 16 %08x\n", crc32c_update(0, model, 16));
    const char* cases[][2] = {
        {"all", "world 4\n%sfile state_00000001_00000.bin 1048 self\nfile state_00000001_00001.bin 1048 self\n"
                "file state_00000001_00002.bin 1048 self\nfile state_00000001_00003.bin 1048 self\n"},
        {"lost", "world 4\nmissing dp_shard 2 replicas 1\n%sfile state_00000001_00000.bin 1048 self\n"
                 "file state_00000001_00001.bin 1048 self\n"},
        {"twice", "world 2\n%sfile state_00000001_00000.bin 1048 self\nfile state_00000001_00000.bin 1048 self\n"},
        {"lost_listed", "world 2\nmissing dp_shard 1 replicas 1\n%sfile state_00000001_00001.bin 1048 self\n"},
        {"two_spaces", "world 2\n%sfile  state_00000001_00000.bin 1048 self\nfile state_00000001_00001.bin 1048 self\n"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int n = snprintf(text, sizeof(text), "%c" MANIFEST_TITLE "\nstep 1\n", 0);
        n += snprintf(text + n, sizeof(text) - n, cases[i][1], model_line);
        write_seed("manifest", cases[i][0], text, (size_t)n);
    }
    static char big[16384];
    int n = snprintf(big, sizeof(big), "%c" MANIFEST_TITLE "\nstep 1\nworld 4\nmissing dp_shard 2 replicas", 0);
    memset(big + n, ' ', 9000);
    n += 9000;
    n += snprintf(big + n, sizeof(big) - n, "1\n%sfile state_00000001_00000.bin 1048 self\n"
                  "file state_00000001_00001.bin 1048 self\n", model_line);
    write_seed("manifest", "long_line", big, (size_t)n);
    const char after_nul[] = "\nmissing dp_shard 2 replicas 0 1\n";
    memcpy(big + n + 1, after_nul, sizeof(after_nul) - 1); // big[n] is the NUL
    write_seed("manifest", "nul_byte", big, (size_t)n + sizeof(after_nul));
}

// fuzz_eval: settings (vocab 64, T 16), then an eval file of two examples written here by the
// format's description (llmc/eval_loader.h), with its broken variants; and one whose second
// example claims 17 completions.
static void eval_example(Buf* b, int index, int label, int ctx_len, const int* completion_lens, int nc) {
    uint16_t w[64];
    int n = 0;
    w[n++] = 65535;
    n++; // its bytes, below
    w[n++] = (uint16_t)index;
    w[n++] = (uint16_t)label;
    w[n++] = (uint16_t)nc;
    w[n++] = (uint16_t)ctx_len;
    for (int i = 0; i < ctx_len; i++) { w[n++] = (uint16_t)(3 + i); }
    for (int c = 0; c < nc; c++) {
        w[n++] = (uint16_t)completion_lens[c];
        for (int i = 0; i < completion_lens[c]; i++) { w[n++] = (uint16_t)(10 + c + i); }
    }
    w[1] = (uint16_t)(2 * n);
    put(b, w, 2 * (size_t)n);
}

static void eval_seeds(void) {
    unsigned char settings[2] = {63, 15};
    int lens_a[4] = {1, 2, 3, 2}, lens_b[2] = {5, 1};
    Buf file = {0};
    int header[4] = {20240522, 1, 2, 0};
    put_header(&file, header, 4);
    eval_example(&file, 0, 2, 4, lens_a, 4);
    eval_example(&file, 1, 0, 3, lens_b, 2);
    write_with_variants("eval", "two_examples", settings, 2, &file);
    file.p[1024 + 2 * (22 + 4)] = 17; // the second example's completion count (after 22 words): 17, of at most 16
    Buf b = {0};
    put(&b, settings, 2);
    put(&b, file.p, file.n);
    write_seed("eval", "seventeen_completions", b.p, b.n);
    free(b.p);
    free(file.p);
}

int main(int argc, char** argv) {
    if (argc != 2) { fail("usage: %s OUTDIR", argv[0]); }
    out_dir = argv[1];
    make_dirs(out_dir);
    model_seeds();
    state_seeds();
    shard_seeds();
    eval_seeds();
    tokenizer_seeds();
    debug_state_seeds();
    args_seeds();
    manifest_seeds();
    return 0;
}
