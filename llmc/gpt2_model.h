// The GPT-2 model description shared by both trainers: the config, the 16 parameter tensors
// and their sizes, model descriptors ("d12"), seeded GPT-2 initialisation, and reading and
// writing model .bin files (magic 20240326, version 3 = fp32, version 5 = bf16).
#ifndef LLMC_GPT2_MODEL_H
#define LLMC_GPT2_MODEL_H

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include "utils.h"
#include "rng.h"
#include "crc32c.h"

#define MODEL_MAGIC 20240326
#define MODEL_VERSION_FP32 3
#define MODEL_VERSION_BF16 5
#define NUM_PARAMETER_TENSORS 16

typedef struct {
    int max_seq_len;       // T_max
    int vocab_size;        // V
    int padded_vocab_size; // Vp: V rounded up to a multiple of 128
    int num_layers;        // L
    int num_heads;         // NH
    int channels;          // C
} GPT2Config;

// The 16 tensors in file order. Weights are (out, in): y = x W^T + b.
typedef struct {
    float* wte;      // (Vp, C)
    float* wpe;      // (T_max, C)
    float* ln1w;     // (L, C)
    float* ln1b;     // (L, C)
    float* qkvw;     // (L, 3C, C)
    float* qkvb;     // (L, 3C)
    float* attprojw; // (L, C, C)
    float* attprojb; // (L, C)
    float* ln2w;     // (L, C)
    float* ln2b;     // (L, C)
    float* fcw;      // (L, 4C, C)
    float* fcb;      // (L, 4C)
    float* fcprojw;  // (L, C, 4C)
    float* fcprojb;  // (L, C)
    float* lnfw;     // (C)
    float* lnfb;     // (C)
} ParameterTensors;

// The model these tensors define (docs/design.md section 1), for each position's row x (C):
//   x = wte[token] + wpe[position]
//   for each layer l (ln(x; w, b): LayerNorm with weight w, bias b):
//     x = x + attprojw[l] attention(qkvw[l] ln(x; ln1w[l], ln1b[l]) + qkvb[l]) + attprojb[l]
//     x = x + fcprojw[l] gelu(fcw[l] ln(x; ln2w[l], ln2b[l]) + fcb[l]) + fcprojb[l]
//   logits = wte ln(x; lnfw, lnfb)     (Vp of them; the output projection is wte, tied)
// attention mixes rows causally, each head over its C/NH channels of q, k and v.

static const char* const parameter_names[NUM_PARAMETER_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

// Tensors that get weight decay: the 2-D ones.
static const int parameter_is_matrix[NUM_PARAMETER_TENSORS] = {1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};

// Whether tensor i has a leading layer dimension (L, ...).
static int parameter_is_per_layer(int i) { return i >= 2 && i <= 13; }

static void gpt2_parameter_sizes(const GPT2Config* c, size_t sizes[NUM_PARAMETER_TENSORS]) {
    size_t Vp = c->padded_vocab_size, C = c->channels, L = c->num_layers, T = c->max_seq_len;
    sizes[0] = Vp * C;
    sizes[1] = T * C;
    sizes[2] = L * C;
    sizes[3] = L * C;
    sizes[4] = L * 3 * C * C;
    sizes[5] = L * 3 * C;
    sizes[6] = L * C * C;
    sizes[7] = L * C;
    sizes[8] = L * C;
    sizes[9] = L * C;
    sizes[10] = L * 4 * C * C;
    sizes[11] = L * 4 * C;
    sizes[12] = L * C * 4 * C;
    sizes[13] = L * C;
    sizes[14] = C;
    sizes[15] = C;
}

static size_t gpt2_num_parameters(const GPT2Config* c) {
    size_t sizes[NUM_PARAMETER_TENSORS], total = 0;
    gpt2_parameter_sizes(c, sizes);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { total += sizes[i]; }
    return total;
}

// Points the 16 tensors into one flat block, in file order.
static void gpt2_point_parameters(ParameterTensors* p, const GPT2Config* c, float* memory) {
    size_t sizes[NUM_PARAMETER_TENSORS];
    gpt2_parameter_sizes(c, sizes);
    float** ptrs[NUM_PARAMETER_TENSORS] = {
        &p->wte, &p->wpe, &p->ln1w, &p->ln1b, &p->qkvw, &p->qkvb, &p->attprojw, &p->attprojb,
        &p->ln2w, &p->ln2b, &p->fcw, &p->fcb, &p->fcprojw, &p->fcprojb, &p->lnfw, &p->lnfb};
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        *ptrs[i] = memory;
        memory += sizes[i];
    }
}

static void gpt2_check_config(const GPT2Config* c, const char* source) {
    if (c->max_seq_len <= 0 || c->vocab_size <= 0 || c->num_layers <= 0 || c->num_heads <= 0 || c->channels <= 0) {
        fail("%s: invalid model config (T_max %d, V %d, L %d, NH %d, C %d)", source, c->max_seq_len,
             c->vocab_size, c->num_layers, c->num_heads, c->channels);
    }
    if (c->channels % c->num_heads != 0) {
        fail("%s: channels %d not divisible by heads %d", source, c->channels, c->num_heads);
    }
    if (c->padded_vocab_size < c->vocab_size || c->padded_vocab_size % 128 != 0) {
        fail("%s: padded vocab size %d must be a multiple of 128 and >= vocab size %d", source,
             c->padded_vocab_size, c->vocab_size);
    }
    // at most 2^40 parameters, so that no size computed from the config wraps around
    double C = c->channels;
    double n = ((double)c->padded_vocab_size + c->max_seq_len + 2.0) * C + c->num_layers * (12.0 * C * C + 13.0 * C);
    if (n > 1099511627776.0) {
        fail("%s: model config (T_max %d, V %d, L %d, C %d) has %.3g parameters, more than 2^40", source,
             c->max_seq_len, c->padded_vocab_size, c->num_layers, c->channels, n);
    }
}

// "dN": N layers; GPT-2's widths for 12/24/36/48, else 64*N channels with N heads.
static void gpt2_config_from_descriptor(GPT2Config* c, const char* descriptor, int vocab_size, int max_seq_len) {
    const char* s = descriptor + 1;
    if (descriptor[0] != 'd' || *s == '\0') { fail("-e %s: not a model file or descriptor like d12", descriptor); }
    for (const char* q = s; *q; q++) {
        if (!isdigit((unsigned char)*q)) { fail("-e %s: not a model file or descriptor like d12", descriptor); }
    }
    int depth = atoi(s);
    if (depth <= 0 || depth > 128) { fail("-e %s: depth must be in 1..128", descriptor); }
    c->num_layers = depth;
    switch (depth) {
        case 12: c->channels = 768; c->num_heads = 12; break;
        case 24: c->channels = 1024; c->num_heads = 16; break;
        case 36: c->channels = 1280; c->num_heads = 20; break;
        case 48: c->channels = 1600; c->num_heads = 25; break;
        default: c->channels = 64 * depth; c->num_heads = depth; break;
    }
    c->vocab_size = vocab_size;
    c->padded_vocab_size = (int)round_up((size_t)vocab_size, 128);
    c->max_seq_len = max_seq_len;
    gpt2_check_config(c, descriptor);
}

// GPT-2 initialisation: weights normal(0, 0.02), the two residual projections scaled by
// 1/sqrt(2L), LayerNorm weights 1, biases 0, padded vocabulary rows 0. One generator in file
// order, so every rank that uses the same seed builds the same model.
static void gpt2_init_parameters(float* memory, const GPT2Config* c, uint64_t seed) {
    size_t sizes[NUM_PARAMETER_TENSORS];
    gpt2_parameter_sizes(c, sizes);
    Rng rng;
    rng_seed(&rng, seed);
    float residual_std = 0.02f / sqrtf(2.0f * c->num_layers);
    float* p = memory;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        int is_layernorm_weight = (i == 2 || i == 8 || i == 14);
        if (parameter_is_matrix[i]) {
            float std = (i == 6 || i == 12) ? residual_std : 0.02f;
            rng_normal_fill(&rng, p, sizes[i], std);
        } else {
            for (size_t j = 0; j < sizes[i]; j++) { p[j] = is_layernorm_weight ? 1.0f : 0.0f; }
        }
        p += sizes[i];
    }
    // padded rows of wte stay zero
    memset(memory + (size_t)c->vocab_size * c->channels, 0,
           (size_t)(c->padded_vocab_size - c->vocab_size) * c->channels * sizeof(float));
}

// ----------------------------------------------------------------------------
// bf16 conversion (round to nearest even; NaN stays NaN)

static uint16_t float_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) { return (uint16_t)((bits >> 16) | 0x40); }
    uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)((bits + rounding) >> 16);
}

static float bf16_to_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

// ----------------------------------------------------------------------------
// model files

static void model_header_to_config(const int* header, GPT2Config* c) {
    c->max_seq_len = header[2];
    c->vocab_size = header[3];
    c->num_layers = header[4];
    c->num_heads = header[5];
    c->channels = header[6];
    c->padded_vocab_size = header[7];
}

// Reads a model header; returns its version (3 or 5) and fills the config.
static int gpt2_read_header(FILE* f, const char* path, GPT2Config* c) {
    int header[256];
    fread_check(header, sizeof(int), 256, f, path, "model header");
    if (header[0] != MODEL_MAGIC) { fail("%s: bad magic %d in model file (expected %d)", path, header[0], MODEL_MAGIC); }
    if (header[1] != MODEL_VERSION_FP32 && header[1] != MODEL_VERSION_BF16) {
        fail("%s: unsupported model version %d (expected 3 fp32 or 5 bf16)", path, header[1]);
    }
    model_header_to_config(header, c);
    gpt2_check_config(c, path);
    return header[1];
}

// Loads a model file of either precision into fp32 memory (allocated here).
static float* gpt2_load_model(const char* path, GPT2Config* c) {
    FILE* f = fopen_check(path, "rb");
    int version = gpt2_read_header(f, path, c);
    size_t n = gpt2_num_parameters(c);
    size_t elem = version == MODEL_VERSION_FP32 ? 4 : 2;
    long expected = 1024 + (long)(n * elem);
    long actual = file_size_of(f);
    if (actual != expected) {
        fail("%s: file size %ld disagrees with its header (%zu parameters need %ld bytes)", path, actual, n, expected);
    }
    float* params = (float*)huge_alloc_check(n * sizeof(float), "the parameters");
    if (version == MODEL_VERSION_FP32) {
        fread_check(params, sizeof(float), n, f, path, "parameters");
    } else {
        uint16_t* tmp = (uint16_t*)malloc_check(n * sizeof(uint16_t));
        fread_check(tmp, sizeof(uint16_t), n, f, path, "parameters");
        for (size_t i = 0; i < n; i++) { params[i] = bf16_to_float(tmp[i]); }
        free(tmp);
    }
    fclose(f);
    return params;
}

// Writes a model file (version 3 fp32 or 5 bf16) atomically (temp name, fsync, rename). When crc
// is given it receives the CRC-32C of the whole file, computed while writing (checkpoints).
static void gpt2_write_model_crc(const char* path, const GPT2Config* c, const float* params, int version,
                                 uint32_t* crc) {
    int header[256] = {0};
    header[0] = MODEL_MAGIC;
    header[1] = version;
    header[2] = c->max_seq_len;
    header[3] = c->vocab_size;
    header[4] = c->num_layers;
    header[5] = c->num_heads;
    header[6] = c->channels;
    header[7] = c->padded_vocab_size;
    char tmp_path[4096];
    FILE* f = fopen_tmp_for(path, tmp_path, sizeof(tmp_path));
    fwrite_check(header, sizeof(int), 256, f, tmp_path);
    uint32_t sum = crc32c_update(0, header, sizeof(header));
    size_t n = gpt2_num_parameters(c);
    if (version == MODEL_VERSION_FP32) {
        fwrite_check(params, sizeof(float), n, f, tmp_path);
        if (crc) { sum = crc32c_update(sum, params, n * sizeof(float)); }
    } else {
        uint16_t* tmp = (uint16_t*)malloc_check(n * sizeof(uint16_t));
        for (size_t i = 0; i < n; i++) { tmp[i] = float_to_bf16(params[i]); }
        fwrite_check(tmp, sizeof(uint16_t), n, f, tmp_path);
        if (crc) { sum = crc32c_update(sum, tmp, n * sizeof(uint16_t)); }
        free(tmp);
    }
    commit_tmp(f, tmp_path, path);
    if (crc) { *crc = sum; }
}

static void gpt2_write_model(const char* path, const GPT2Config* c, const float* params, int version) {
    gpt2_write_model_crc(path, c, params, version, NULL);
}

#endif
