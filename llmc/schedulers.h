// Learning-rate schedules: linear warmup from lr/warmup to lr, then cosine, linear, constant or
// warmup-stable-decay (flat, then a linear decay over the last 20% of steps) down to
// lr * final_fraction at the last step.
#ifndef LLMC_SCHEDULERS_H
#define LLMC_SCHEDULERS_H

#include <math.h>
#include <string.h>
#include "utils.h"

typedef enum { SCHEDULE_COSINE, SCHEDULE_LINEAR, SCHEDULE_CONSTANT, SCHEDULE_WSD } ScheduleKind;

typedef struct {
    ScheduleKind kind;
    float lr;
    int warmup_steps;
    int total_steps;
    float final_fraction;
} LRSchedule;

static ScheduleKind schedule_kind_from_name(const char* name) {
    if (strcmp(name, "cosine") == 0) { return SCHEDULE_COSINE; }
    if (strcmp(name, "linear") == 0) { return SCHEDULE_LINEAR; }
    if (strcmp(name, "constant") == 0) { return SCHEDULE_CONSTANT; }
    if (strcmp(name, "wsd") == 0) { return SCHEDULE_WSD; }
    fail("-k %s: unknown schedule (cosine, linear, constant or wsd)", name);
    return SCHEDULE_COSINE;
}

// lr for step (0-based)
static float schedule_lr(const LRSchedule* s, int step) {
    if (step < s->warmup_steps) { return s->lr * (float)(step + 1) / (float)s->warmup_steps; }
    float lr_min = s->lr * s->final_fraction;
    int decay_steps = s->total_steps - s->warmup_steps;
    if (s->kind == SCHEDULE_CONSTANT || decay_steps <= 1) { return s->lr; }
    float progress = (float)(step - s->warmup_steps) / (float)(decay_steps - 1); // 0 .. 1
    switch (s->kind) {
        case SCHEDULE_COSINE: return lr_min + 0.5f * (s->lr - lr_min) * (1.0f + cosf((float)M_PI * progress));
        case SCHEDULE_LINEAR: return s->lr + (lr_min - s->lr) * progress;
        case SCHEDULE_WSD: {
            int cooldown = (int)(0.2f * s->total_steps);
            int cooldown_start = s->total_steps - cooldown;
            if (cooldown < 1 || step < cooldown_start) { return s->lr; }
            float p = cooldown > 1 ? (float)(step - cooldown_start) / (float)(cooldown - 1) : 1.0f;
            return s->lr + (lr_min - s->lr) * p;
        }
        default: return s->lr;
    }
}

#endif
