/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-train: random numbers, the synthetic data set and the distributed
 * sampler (data.h says what each promises). */
#include "data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Random numbers ----------------------------------------------------- */

/* splitmix64: spreads a seed over the 256 bits of xoshiro's state (the
 * seeding its authors recommend; an all-zero state is impossible). */
static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15u);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

void rng_seed(rng_t *r, uint64_t seed, uint64_t stream)
{
    /* mix the stream in first, so seed 1 of one stream is not seed 2 of another */
    uint64_t x = stream * 0xD1B54A32D192ED03u;

    x = splitmix64(&x) ^ seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* xoshiro256** (Blackman and Vigna, public domain) */
uint64_t rng_next(rng_t *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;

    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double rng_uniform(rng_t *r)
{
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

/* Rejection sampling: draws from the largest multiple of n below 2^64, so
 * that every value in [0, n) is equally likely. */
uint64_t rng_below(rng_t *r, uint64_t n)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t v;

    do
        v = rng_next(r);
    while (v >= limit);
    return v % n;
}

double rng_normal(rng_t *r)
{
    double u1 = 1.0 - rng_uniform(r); /* in (0, 1]: log(u1) is finite */
    double u2 = rng_uniform(r);

    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2); /* 2 pi u2 */
}

/* ---- The data set ------------------------------------------------------- */

struct dataset {
    size_t n;
    float *x; /* n rows of DATA_FEATURES */
    int *y;
};

/* The label the teacher gives x: argmax over classes of T x + noise. */
static int teacher_label(const double t[DATA_CLASSES][DATA_FEATURES], const float *x, rng_t *r)
{
    int best = 0;
    double best_score = -INFINITY;

    for (int c = 0; c < DATA_CLASSES; c++) {
        double score = 0.5 * rng_normal(r);

        for (int k = 0; k < DATA_FEATURES; k++)
            score += t[c][k] * x[k];
        if (score > best_score) {
            best_score = score;
            best = c;
        }
    }
    return best;
}

dataset_t *data_create(size_t samples, uint64_t seed, char *err, size_t errlen)
{
    double teacher[DATA_CLASSES][DATA_FEATURES];
    dataset_t *d;
    rng_t r;

    if (samples == 0 || samples > DATA_MAX_SAMPLES) {
        snprintf(err, errlen, "%zu samples: out of range (give 1..%zu)", samples,
                 DATA_MAX_SAMPLES);
        return NULL;
    }
    d = calloc(1, sizeof(*d));
    if (d) {
        d->x = malloc(samples * DATA_FEATURES * sizeof(float));
        d->y = malloc(samples * sizeof(int));
    }
    if (!d || !d->x || !d->y) {
        snprintf(err, errlen, "%zu samples: out of memory (give fewer)", samples);
        data_free(d);
        return NULL;
    }
    d->n = samples;
    rng_seed(&r, seed, RNG_DATA);
    for (int c = 0; c < DATA_CLASSES; c++)
        for (int k = 0; k < DATA_FEATURES; k++)
            teacher[c][k] = rng_normal(&r);
    for (size_t i = 0; i < samples; i++) {
        float *x = d->x + i * DATA_FEATURES;

        for (int k = 0; k < DATA_FEATURES; k++)
            x[k] = (float)rng_normal(&r);
        d->y[i] = teacher_label(teacher, x, &r);
    }
    return d;
}

const float *data_x(const dataset_t *d, size_t i)
{
    return d->x + i * DATA_FEATURES;
}

int data_y(const dataset_t *d, size_t i)
{
    return d->y[i];
}

void data_free(dataset_t *d)
{
    if (!d)
        return;
    free(d->x);
    free(d->y);
    free(d);
}

/* ---- The distributed sampler -------------------------------------------- */

void data_permutation(uint32_t *perm, size_t samples, uint64_t seed, uint64_t epoch)
{
    rng_t r;

    rng_seed(&r, seed + epoch, RNG_SAMPLER);
    for (size_t i = 0; i < samples; i++)
        perm[i] = (uint32_t)i;
    /* Fisher-Yates: position i gets a uniform pick of the i+1 not yet placed */
    for (size_t i = samples; i > 1; i--) {
        size_t j = (size_t)rng_below(&r, i);
        uint32_t t = perm[i - 1];

        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

size_t data_steps(size_t samples, size_t offset, int world, int B)
{
    size_t global = (size_t)world * (size_t)B;

    return offset >= samples || global == 0 ? 0 : (samples - offset) / global;
}

void data_batch(const dataset_t *d, const uint32_t *perm, size_t offset, int world, int rank,
                int B, float *x, int *y)
{
    for (int i = 0; i < B; i++) {
        size_t s = perm[offset + (size_t)rank + (size_t)world * (size_t)i];

        memcpy(x + (size_t)i * DATA_FEATURES, data_x(d, s), DATA_FEATURES * sizeof(float));
        y[i] = d->y[s];
    }
}
