/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-train: the model (a linear layer or an MLP), its forward and backward
 * pass with softmax cross-entropy, and torch's SGD with momentum. Plain C on
 * one core: fixed loop order, no threads, so the same inputs give bitwise the
 * same gradients on every run. */
#ifndef DDP_TRAIN_MODEL_H
#define DDP_TRAIN_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data.h"

/* One parameter tensor: weights, gradient, momentum buffer, n floats each.
 * A layer's weight is out x in, row-major, like torch's nn.Linear.weight. */
typedef struct {
    const char *name; /* "W1", "b1", "W2", ... */
    float *w, *g, *m;
    size_t n;
} param_t;

typedef struct model model_t;

#define MODEL_MAX_HIDDEN 65536
#define MODEL_MAX_LAYERS 64

/* kind "linear": 64 -> 10, the PyTorch DDP tutorial's nn.Linear (hidden and
 * layers unused). kind "mlp": 64 -> hidden, then `layers` hidden x hidden
 * layers, each followed by ReLU (the first too), -> 10. Weights and biases
 * start uniform in +-1/sqrt(fan_in), torch's nn.Linear default, drawn from
 * the RNG_MODEL stream of `seed`: the same on every rank and every run.
 * NULL with a message in err for a bad kind, hidden outside
 * 1..MODEL_MAX_HIDDEN, layers outside 1..MODEL_MAX_LAYERS, or no memory. */
model_t *model_create(const char *kind, int hidden, int layers, uint64_t seed, char *err,
                      size_t errlen);
/* The parameters in forward (registration) order: W1, b1, W2, b2, ...;
 * returns their count. The array belongs to the model. */
int model_params(model_t *m, param_t **p);
size_t model_size(const model_t *m); /* parameters (floats) in all */

/* Forward and backward of softmax cross-entropy on a batch: x is B rows of
 * DATA_FEATURES floats, y B labels 0..DATA_CLASSES-1. Writes each parameter's
 * gradient, the MEAN over the batch, into p[i].g, and calls ready(ctx, i) (if
 * ready is not NULL) the moment p[i].g is final, in backward order: the last
 * parameter first. The caller may point p[i].g elsewhere between steps (the
 * buckets' storage): it is read anew on every step. Returns the SUM of the B
 * per-sample losses, or -1 when the batch's workspace cannot be allocated (a
 * loss is never negative). */
double model_step(model_t *m, const float *x, const int *y, int B,
                  void (*ready)(void *ctx, int i), void *ctx);
/* Forward only: the sum of the B losses (-1 when out of memory). */
double model_loss(model_t *m, const float *x, const int *y, int B);

/* torch.optim.SGD(lr, momentum) with no dampening, Nesterov or weight
 * decay: buf = momentum*buf + g; w -= lr*buf. On the first step buf = g, as
 * torch creates the buffer from the first gradient; momentum 0 uses g alone.
 * Whether the buffers exist is part of the optimizer state that a checkpoint
 * must save with them: model_momentum_started / model_set_momentum_started. */
void model_sgd(model_t *m, float lr, float momentum);
bool model_momentum_started(const model_t *m);
void model_set_momentum_started(model_t *m, bool started);

void model_free(model_t *m);

#endif
