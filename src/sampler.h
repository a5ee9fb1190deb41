/* sampler.h - next-token choice: greedy, temperature, top-k, top-p, min-p, penalties, seed. */
#ifndef HM_SAMPLER_H
#define HM_SAMPLER_H
#include <stdint.h>
#include <stddef.h>

typedef struct {
    float temperature;      /* <= 0: greedy */
    int top_k;              /* <= 0: off */
    float top_p;            /* >= 1: off */
    float min_p;            /* <= 0: off */
    float repetition_penalty; /* 1: off (HF/llama.cpp style: divide positive logits, multiply negative) */
    float presence_penalty;   /* 0: off (OpenAI style) */
    float frequency_penalty;  /* 0: off */
    int penalty_last_n;     /* how many recent tokens the penalties look at; <= 0: all */
    uint64_t seed;
} sampler_params;

typedef struct {
    sampler_params p;
    uint64_t rng;
    int n_vocab;
    int32_t *hist; size_t n_hist, cap_hist;  /* tokens seen (prompt + generated) */
    int *count;             /* scratch (n_vocab) */
    int *order;             /* scratch (n_vocab) */
    float *prob;            /* scratch (n_vocab) */
    uint64_t *key, *ktmp;   /* scratch (n_vocab): sort keys (probability descending, id ascending) */
} sampler;

sampler_params sampler_defaults(void);
void sampler_init(sampler *s, const sampler_params *p, int n_vocab);
void sampler_free(sampler *s);
/* Records a token (prompt or generated) for the penalties. */
void sampler_accept(sampler *s, int32_t tok);
/* Picks the next token from logits[n_vocab] (modified in place by penalties/temperature). */
int32_t sampler_sample(sampler *s, float *logits);
/* The same choice by sorting the whole vocabulary every time (the reference for tests). */
int32_t sampler_sample_ref(sampler *s, float *logits);
/* 1 when sampler_sample's choice is sampler_argmax of the raw logits (greedy, no penalties): a
 * GPU target can then take the argmax beside the step and skip copying the logits out. */
int sampler_greedy_only(const sampler *s);
/* The first index of the largest of x[0..n) (NaNs never win; x[0] NaN: 0). */
int32_t sampler_argmax(const float *x, int n);

#endif
