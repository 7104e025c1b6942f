// The activation table: every activation buffer a trainer keeps for a (B, T) micro-batch, one
// row each (name, element type, layer slabs, elements per slab), as an X-macro. The struct of
// pointers, each buffer's size, the allocation and the memory report are all generated from the
// table, so adding a buffer is one row. The rows both trainers share are GPT2_ACTIVATIONS and
// GPT2_ACTIVATION_GRADS below; each trainer appends its own in ACTIVATIONS / ACTIVATION_GRADS.
// Per-slab sizes are expressions in B, T, BT (= B T), C, NH, Vp and threads.
// Saved for backward, and why: every layer's input (the residual streams: each layer's
// matmul weight gradients need their inputs), the LayerNorm outputs (the next matmul's input)
// with their means and rstds (LayerNorm's backward), qkv (attention's backward needs Q, K and
// V), fch (GELU's backward needs its input) and fch_gelu (the MLP projection's input).
#ifndef LLMC_ACTIVATION_TABLE_H
#define LLMC_ACTIVATION_TABLE_H

#include <stddef.h>
#include "gpt2_model.h"

// How many slabs of per_slab elements a buffer holds. LAYERS: one per layer. LN and GELU: one per
// layer, or a single slab shared by every layer when backward recomputes the LayerNorm outputs
// (-r 2) or the GELU output (-r 1 and 2) instead of keeping them. IN_LOGITS: none of its own; the
// trainer places it inside the logits buffer while the logits are dead (the GPU trainer: during the
// forward's layers, and in backward once the dlogits are consumed), and sizes logits to hold it.
typedef enum { SLABS_ONE, SLABS_LAYERS, SLABS_LN, SLABS_GELU, SLABS_IN_LOGITS } SlabKind;

static size_t act_slabs(SlabKind kind, size_t num_layers, int recompute) {
    switch (kind) {
        case SLABS_LAYERS: return num_layers;
        case SLABS_LN: return recompute >= 2 ? 1 : num_layers;
        case SLABS_GELU: return recompute >= 1 ? 1 : num_layers;
        case SLABS_IN_LOGITS: return 0;
        default: return 1;
    }
}

// What the sizes depend on: the model, the micro-batch, -r, and (CPU) the OpenMP threads.
typedef struct {
    size_t B, T, C, NH, L, Vp, threads;
    int recompute;
} ActShape;

static ActShape act_shape(const GPT2Config* c, int B, int T, int recompute, int threads) {
    ActShape s = {(size_t)B, (size_t)T, (size_t)c->channels, (size_t)c->num_heads, (size_t)c->num_layers,
                  (size_t)c->padded_vocab_size, (size_t)threads, recompute};
    return s;
}

// The forward activations of both trainers, with elements of type `type` (float on the CPU,
// floatX on the GPU) and logits rows of logits_width elements (at least Vp). L: layers; per-layer
// buffers have a leading L.
#define GPT2_ACTIVATIONS(X, type, logits_width)                                                     \
    X(encoded, type, ONE, BT * C)            /* (B, T, C) wte[token] + wpe[position] */             \
    X(ln1, type, LN, BT * C)                 /* (L, B, T, C) LayerNorm 1 output */                  \
    X(ln1_mean, float, LAYERS, BT)           /* (L, B, T) */                                        \
    X(ln1_rstd, float, LAYERS, BT)           /* (L, B, T) 1 / standard deviation */                 \
    X(qkv, type, LAYERS, BT * 3 * C)         /* (L, B, T, 3C) Q, K, V for every head */             \
    X(atty, type, LAYERS, BT * C)            /* (L, B, T, C) attention output, heads side by side */ \
    X(residual2, type, LAYERS, BT * C)       /* (L, B, T, C) x + attention projection */            \
    X(ln2, type, LN, BT * C)                 /* (L, B, T, C) LayerNorm 2 output */                  \
    X(ln2_mean, float, LAYERS, BT)           /* (L, B, T) */                                        \
    X(ln2_rstd, float, LAYERS, BT)           /* (L, B, T) */                                        \
    X(fch, type, LAYERS, BT * 4 * C)         /* (L, B, T, 4C) MLP hidden layer before GELU */       \
    X(fch_gelu, type, GELU, BT * 4 * C)      /* (L, B, T, 4C) after GELU */                         \
    X(residual3, type, LAYERS, BT * C)       /* (L, B, T, C) the layer's output */                  \
    X(lnf, type, ONE, BT * C)                /* (B, T, C) final LayerNorm output */                 \
    X(lnf_mean, float, ONE, BT)              /* (B, T) */                                           \
    X(lnf_rstd, float, ONE, BT)              /* (B, T) */                                           \
    X(logits, type, ONE, BT * (logits_width)) /* (B, T, Vp); dlogits after a training forward */    \
    X(losses, float, ONE, BT)                /* (B, T) per-token loss */

// Gradients of activations, one slab reused by every layer in backward; scratch (ONE or
// IN_LOGITS): where the layer-local d4C and dqkv live.
#define GPT2_ACTIVATION_GRADS(X, type, scratch)                                                     \
    X(dresidual, type, ONE, BT * C)          /* (B, T, C) gradient of the residual stream */        \
    X(dC, type, ONE, BT * C)                 /* (B, T, C) */                                        \
    X(d4C, type, scratch, BT * 4 * C)        /* (B, T, 4C) */                                       \
    X(dqkv, type, scratch, BT * 3 * C)       /* (B, T, 3C) */

// One buffer of the table: its name, its size, and the pointer it sets (NULL: sizes only).
typedef struct {
    const char* name;
    size_t bytes;
    void** slot;
} ActBuffer;

static void act_row(ActBuffer* out, int* n, size_t* total, const char* name, size_t bytes, void** slot) {
    out[*n].name = name;
    out[*n].bytes = bytes;
    out[*n].slot = slot;
    (*n)++;
    *total += bytes;
}

// The generators a table is expanded with: struct fields, a count, and ActBuffer rows.
#define ACT_FIELD(name, type, slabs, per_slab) type* name;
#define ACT_COUNT(name, type, slabs, per_slab) +1
#define ACT_ROW_OF(base, name, type, slabs, per_slab)                                              \
    act_row(out, &n, &total, #name, act_slabs(SLABS_##slabs, s.L, s.recompute) * (size_t)(per_slab) * sizeof(type), \
            (base) ? (void**)&(base)->name : NULL);
#define ACT_ROW_A(name, type, slabs, per_slab) ACT_ROW_OF(a, name, type, slabs, per_slab)
#define ACT_ROW_G(name, type, slabs, per_slab) ACT_ROW_OF(g, name, type, slabs, per_slab)

// Defines, for a trainer's ACTIVATIONS and ACTIVATION_GRADS tables and its GPT2 struct (fields
// acts and acts_grad), the structs Activations and ActivationGrads, NUM_ACT_BUFFERS, and
//   size_t activation_buffers(GPT2* m, ActShape s, ActBuffer out[NUM_ACT_BUFFERS])
// which lists the buffers in table order (with a model, each pointing at the field it fills) and
// returns their total bytes.
#define DEFINE_ACTIVATION_STRUCTS                                                                  \
    typedef struct { ACTIVATIONS(ACT_FIELD) } Activations;                                         \
    typedef struct { ACTIVATION_GRADS(ACT_FIELD) } ActivationGrads;                                \
    enum { NUM_ACT_BUFFERS = 0 ACTIVATIONS(ACT_COUNT) ACTIVATION_GRADS(ACT_COUNT) };

#define DEFINE_ACTIVATION_BUFFERS                                                                  \
    static size_t activation_buffers(GPT2* m, ActShape s, ActBuffer out[NUM_ACT_BUFFERS]) {        \
        const size_t B = s.B, T = s.T, BT = s.B * s.T, C = s.C, NH = s.NH, Vp = s.Vp, threads = s.threads; \
        (void)B; (void)T; (void)BT; (void)C; (void)NH; (void)Vp; (void)threads;                    \
        Activations* a = m ? &m->acts : NULL;                                                      \
        ActivationGrads* g = m ? &m->acts_grad : NULL;                                             \
        int n = 0;                                                                                 \
        size_t total = 0;                                                                          \
        ACTIVATIONS(ACT_ROW_A)                                                                     \
        ACTIVATION_GRADS(ACT_ROW_G)                                                                \
        return total;                                                                              \
    }

#endif
