/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-train: random numbers, the synthetic data set and the distributed
 * sampler. Everything here is a pure function of a seed, so that every rank
 * (and every run, and a resumed run) computes the same numbers without
 * talking to the others. */
#ifndef DDP_TRAIN_DATA_H
#define DDP_TRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#define DATA_FEATURES 64 /* inputs per sample, as in the PyTorch DDP tutorial */
#define DATA_CLASSES 10  /* labels 0..9 */

/* ---- Random numbers: xoshiro256** seeded through splitmix64 ------------- */
typedef struct {
    uint64_t s[4];
} rng_t;

/* Distinct streams of one seed, so that the model's initial weights, the data
 * set and the sampler's shuffles do not share numbers. */
enum { RNG_MODEL = 1, RNG_DATA = 2, RNG_SAMPLER = 3 };

void rng_seed(rng_t *r, uint64_t seed, uint64_t stream);
uint64_t rng_next(rng_t *r);
double rng_uniform(rng_t *r);              /* in [0, 1), 53 random bits */
uint64_t rng_below(rng_t *r, uint64_t n);  /* in [0, n), unbiased; n > 0 */
double rng_normal(rng_t *r);               /* N(0, 1), Box-Muller */

/* ---- The data set ------------------------------------------------------- */
typedef struct dataset dataset_t;

/* `samples` rows x ~ N(0,1)^64 with the label argmax(T x + e): T a fixed
 * random 10 x 64 "teacher" map and e ~ N(0, 0.5^2) noise per class, so a
 * linear model can learn most of it (its loss drops from ~2.3). The same
 * seed gives the same set on every rank. NULL with a message in err when
 * samples is 0 or above DATA_MAX_SAMPLES, or memory runs out. */
#define DATA_MAX_SAMPLES ((size_t)1 << 30)
dataset_t *data_create(size_t samples, uint64_t seed, char *err, size_t errlen);
const float *data_x(const dataset_t *d, size_t i); /* DATA_FEATURES floats */
int data_y(const dataset_t *d, size_t i);
void data_free(dataset_t *d);

/* ---- The distributed sampler --------------------------------------------
 * torch.utils.data.DistributedSampler(shuffle=True, seed, drop_last=True),
 * batched, with one change that makes resuming on another world size work:
 *
 * - Epoch e visits the samples in the order perm = data_permutation(seed, e):
 *   a Fisher-Yates shuffle from a generator seeded with seed + e (the same
 *   numbers on every rank; not torch's randperm, whose numbers differ).
 * - Global step s of the epoch covers perm[s*G .. (s+1)*G), G = world * B, and
 *   rank r takes perm[s*G + r + world*i] for i < B: that is torch's
 *   rank-strided shard perm[r::world], cut into batches of B. So the ranks'
 *   batches are disjoint, of equal size, and together they are exactly the
 *   batch that one process with batch world * B takes at that step.
 * - Torch shards the whole epoch up front; here a step only needs `offset`,
 *   the samples the epoch consumed before it (s*G in an uninterrupted run).
 *   A resumed run restarts the epoch at the checkpoint's offset, with the
 *   same or another world size, and sees no sample of the epoch twice.
 * - drop_last: an epoch ends when fewer than G samples are left
 *   (data_steps); those few are skipped, as torch drops the tail. */
void data_permutation(uint32_t *perm, size_t samples, uint64_t seed, uint64_t epoch);
/* Whole steps left in an epoch after `offset` samples: (samples - offset) / G. */
size_t data_steps(size_t samples, size_t offset, int world, int B);
/* Rank `rank`'s batch of the step that starts at `offset`: B rows of x
 * (B * DATA_FEATURES floats) and B labels in y. offset + world*B must not
 * exceed the samples (see data_steps). */
void data_batch(const dataset_t *d, const uint32_t *perm, size_t offset, int world, int rank,
                int B, float *x, int *y);

#endif
