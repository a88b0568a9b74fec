/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-train: the model, forward and backward with softmax cross-entropy, and
 * SGD with momentum (model.h says what each promises).
 *
 * A model is a chain of L linear layers; layer l maps width[l] inputs to
 * width[l+1] outputs: out = in W^T + b, W out x in row-major like torch.
 * Every layer but the last is followed by ReLU. The three products of a
 * layer (forward, weight gradient, input gradient) are written as loops
 * over one row of W at a time, reused for every sample of the batch while
 * it is in the L1 cache, with an inner loop over contiguous floats that the
 * compiler turns into SIMD. Each float's operations happen in the same
 * order with or without SIMD, so the results do not depend on it. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LINEAR (MODEL_MAX_LAYERS + 2) /* the mlp's first and last layer too */

struct model {
    int nlinear;                  /* L, linear layers */
    int width[MAX_LINEAR + 1];    /* width[0] = DATA_FEATURES, width[L] = DATA_CLASSES */
    int nparam;                   /* 2L: W1, b1, ..., WL, bL */
    param_t p[2 * MAX_LINEAR];
    char names[2 * MAX_LINEAR][16]; /* "W66": 16 leaves GCC no doubt it fits */
    float *own_g;                 /* the gradients' own storage (p[i].g may point elsewhere) */
    float *store;                 /* weights, gradients and momentum of all parameters */
    size_t size;                  /* floats per copy (weights) */
    bool momentum_started;
    /* workspace for a batch of up to `cap` rows: act[l] is the input of layer
     * l (act[0] unused: the caller's x), act[L] the logits; d0/d1 hold the
     * gradient of a layer's output and of its input during backward */
    int cap;
    float *act[MAX_LINEAR + 1];
    float *d0, *d1;
};

/* ---- the inner loops ---------------------------------------------------- */

/* y += a * x over n floats. In blocks of 8 so that GCC's -O2 (whose cost
 * model skips loops of unknown length) still uses SIMD: 2.5 times faster;
 * restrict: x and y never overlap, so it needs no runtime overlap check. */
static void axpy(size_t n, float a, const float *restrict x, float *restrict y)
{
    size_t i = 0;

    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            y[i + j] += a * x[i + j];
    for (; i < n; i++)
        y[i] += a * x[i];
}

/* x . y over n floats, in 8 interleaved partial sums: a fixed order (the
 * result is deterministic) that maps onto SIMD lanes, where one running sum
 * would be a chain of additions the compiler may not reorder. */
static float dot(size_t n, const float *restrict x, const float *restrict y)
{
    float part[8] = {0};
    float sum = 0;
    size_t i = 0;

    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            part[j] += x[i + j] * y[i + j];
    for (int j = 0; j < 8; j++)
        sum += part[j];
    for (; i < n; i++)
        sum += x[i] * y[i];
    return sum;
}

/* ---- creating the model ------------------------------------------------- */

static int check_args(const char *kind, int hidden, int layers, char *err, size_t errlen)
{
    if (strcmp(kind, "linear") == 0)
        return 0;
    if (strcmp(kind, "mlp") != 0) {
        snprintf(err, errlen, "model '%s': unknown (give linear or mlp)", kind);
        return -1;
    }
    if (hidden < 1 || hidden > MODEL_MAX_HIDDEN) {
        snprintf(err, errlen, "hidden %d: out of range (give 1..%d)", hidden, MODEL_MAX_HIDDEN);
        return -1;
    }
    if (layers < 1 || layers > MODEL_MAX_LAYERS) {
        snprintf(err, errlen, "layers %d: out of range (give 1..%d)", layers, MODEL_MAX_LAYERS);
        return -1;
    }
    return 0;
}

/* The widths of the chain: 64 -> 10, or 64 -> hidden (-> hidden) x layers -> 10. */
static void set_widths(model_t *m, bool mlp, int hidden, int layers)
{
    m->nlinear = mlp ? layers + 2 : 1;
    m->width[0] = DATA_FEATURES;
    for (int l = 1; l < m->nlinear; l++)
        m->width[l] = hidden;
    m->width[m->nlinear] = DATA_CLASSES;
}

/* Lay out W1, b1, W2, ... in one block of three copies (w, g, m). */
static int place_params(model_t *m)
{
    size_t off = 0;

    m->nparam = 2 * m->nlinear;
    m->size = 0;
    for (int l = 0; l < m->nlinear; l++)
        m->size += (size_t)m->width[l + 1] * ((size_t)m->width[l] + 1);
    /* calloc: zero gradients and momentum, and it checks 3*size*4 for overflow */
    m->store = calloc(3 * m->size, sizeof(float));
    if (!m->store)
        return -1;
    m->own_g = m->store + m->size;
    for (int i = 0; i < m->nparam; i++) {
        int l = i / 2;
        param_t *p = &m->p[i];

        snprintf(m->names[i], sizeof(m->names[i]), "%c%d", i % 2 ? 'b' : 'W', l + 1);
        p->name = m->names[i];
        p->n = (size_t)m->width[l + 1] * (i % 2 ? 1 : (size_t)m->width[l]);
        p->w = m->store + off;
        p->g = m->own_g + off;
        p->m = m->store + 2 * m->size + off;
        off += p->n;
    }
    return 0;
}

/* torch's nn.Linear.reset_parameters: kaiming_uniform_(a=sqrt(5)) for the
 * weight, which is uniform in +-1/sqrt(fan_in), and the same bound for the
 * bias; layer by layer, weight before bias. */
static void init_weights(model_t *m, uint64_t seed)
{
    rng_t r;

    rng_seed(&r, seed, RNG_MODEL);
    for (int i = 0; i < m->nparam; i++) {
        double bound = 1.0 / sqrt((double)m->width[i / 2]);

        for (size_t j = 0; j < m->p[i].n; j++)
            m->p[i].w[j] = (float)((2.0 * rng_uniform(&r) - 1.0) * bound);
    }
}

model_t *model_create(const char *kind, int hidden, int layers, uint64_t seed, char *err,
                      size_t errlen)
{
    model_t *m;

    if (check_args(kind, hidden, layers, err, errlen) < 0)
        return NULL;
    m = calloc(1, sizeof(*m));
    if (!m) {
        snprintf(err, errlen, "model: out of memory");
        return NULL;
    }
    set_widths(m, strcmp(kind, "mlp") == 0, hidden, layers);
    if (place_params(m) < 0) {
        snprintf(err, errlen, "model of %zu parameters: out of memory (give a smaller --hidden "
                 "or --layers)", m->size);
        free(m);
        return NULL;
    }
    init_weights(m, seed);
    return m;
}

int model_params(model_t *m, param_t **p)
{
    *p = m->p;
    return m->nparam;
}

size_t model_size(const model_t *m)
{
    return m->size;
}

void model_free(model_t *m)
{
    if (!m)
        return;
    for (int l = 1; l <= m->nlinear; l++)
        free(m->act[l]);
    free(m->d0);
    free(m->d1);
    free(m->store);
    free(m);
}

/* ---- forward ------------------------------------------------------------ */

/* Room for a batch of B rows (kept for the next steps). */
static int reserve(model_t *m, int B)
{
    int widest = 0;

    if (B <= m->cap)
        return 0;
    for (int l = 0; l <= m->nlinear; l++)
        if (m->width[l] > widest)
            widest = m->width[l];
    for (int l = 1; l <= m->nlinear; l++) {
        free(m->act[l]);
        m->act[l] = malloc((size_t)B * (size_t)m->width[l] * sizeof(float));
    }
    free(m->d0);
    free(m->d1);
    m->d0 = malloc((size_t)B * (size_t)widest * sizeof(float));
    m->d1 = malloc((size_t)B * (size_t)widest * sizeof(float));
    m->cap = B;
    for (int l = 1; l <= m->nlinear; l++)
        if (!m->act[l])
            m->cap = 0;
    if (!m->d0 || !m->d1)
        m->cap = 0;
    return m->cap ? 0 : -1;
}

/* out[b] = W in[b] + bias for the B rows, then ReLU unless the last layer. */
static void layer_forward(const model_t *m, int l, const float *in, float *out, int B)
{
    size_t K = (size_t)m->width[l], N = (size_t)m->width[l + 1];
    const float *W = m->p[2 * l].w, *bias = m->p[2 * l + 1].w;
    bool relu = l + 1 < m->nlinear;

    for (size_t o = 0; o < N; o++)
        for (int b = 0; b < B; b++) {
            float z = bias[o] + dot(K, in + (size_t)b * K, W + o * K);

            out[(size_t)b * N + o] = relu && z < 0 ? 0 : z;
        }
}

/* The logits of the batch, in act[L]; -1 when out of memory. */
static int forward(model_t *m, const float *x, int B)
{
    if (reserve(m, B) < 0)
        return -1;
    for (int l = 0; l < m->nlinear; l++)
        layer_forward(m, l, l ? m->act[l] : x, m->act[l + 1], B);
    return 0;
}

/* -log softmax(z)[y] for one row of logits, in double; with dz (may be
 * NULL) set to (softmax(z) - onehot(y)) * scale, the loss's gradient. */
static double cross_entropy(const float *z, int y, float *dz, double scale)
{
    double max = z[0], sum = 0, lse;

    for (int c = 1; c < DATA_CLASSES; c++)
        if (z[c] > max)
            max = z[c];
    for (int c = 0; c < DATA_CLASSES; c++)
        sum += exp(z[c] - max);
    lse = max + log(sum);
    for (int c = 0; dz && c < DATA_CLASSES; c++)
        dz[c] = (float)((exp(z[c] - lse) - (c == y)) * scale);
    return lse - z[y];
}

double model_loss(model_t *m, const float *x, const int *y, int B)
{
    double loss = 0;

    if (forward(m, x, B) < 0)
        return -1;
    for (int b = 0; b < B; b++)
        loss += cross_entropy(m->act[m->nlinear] + (size_t)b * DATA_CLASSES, y[b], NULL, 0);
    return loss;
}

/* ---- backward ----------------------------------------------------------- */

/* Layer l's bias and weight gradients from dout, the gradient of its output
 * (B x N): db = sum over rows of dout, dW[o] = sum over rows b of
 * dout[b][o] * in[b]. */
static void layer_param_grads(model_t *m, int l, const float *in, const float *dout, int B)
{
    size_t K = (size_t)m->width[l], N = (size_t)m->width[l + 1];
    float *dW = m->p[2 * l].g, *db = m->p[2 * l + 1].g;

    memset(db, 0, N * sizeof(float));
    for (int b = 0; b < B; b++)
        axpy(N, 1.0f, dout + (size_t)b * N, db);
    memset(dW, 0, N * K * sizeof(float));
    for (size_t o = 0; o < N; o++)
        for (int b = 0; b < B; b++)
            axpy(K, dout[(size_t)b * N + o], in + (size_t)b * K, dW + o * K);
}

/* din = dout W, times the derivative of the ReLU that produced `in` (1
 * where it passed its input on, 0 where it cut it to 0). */
static void layer_input_grad(const model_t *m, int l, const float *in, const float *dout,
                             float *din, int B)
{
    size_t K = (size_t)m->width[l], N = (size_t)m->width[l + 1];
    const float *W = m->p[2 * l].w;

    memset(din, 0, (size_t)B * K * sizeof(float));
    for (size_t o = 0; o < N; o++)
        for (int b = 0; b < B; b++)
            axpy(K, dout[(size_t)b * N + o], W + o * K, din + (size_t)b * K);
    for (size_t j = 0; j < (size_t)B * K; j++)
        if (in[j] <= 0)
            din[j] = 0;
}

double model_step(model_t *m, const float *x, const int *y, int B,
                  void (*ready)(void *ctx, int i), void *ctx)
{
    int L = m->nlinear;
    float *dout, *din, *t;
    double loss = 0;

    if (forward(m, x, B) < 0)
        return -1;
    dout = m->d0; /* after forward: it may have moved the workspace */
    din = m->d1;
    /* the mean over the batch: each row's loss gradient scaled by 1/B */
    for (int b = 0; b < B; b++)
        loss += cross_entropy(m->act[L] + (size_t)b * DATA_CLASSES, y[b],
                              dout + (size_t)b * DATA_CLASSES, 1.0 / B);
    for (int l = L - 1; l >= 0; l--) {
        const float *in = l ? m->act[l] : x;

        layer_param_grads(m, l, in, dout, B);
        if (ready) {
            ready(ctx, 2 * l + 1); /* bL first, then WL, ... */
            ready(ctx, 2 * l);
        }
        if (l == 0)
            break; /* nobody needs the gradient of the data */
        layer_input_grad(m, l, in, dout, din, B);
        t = dout;
        dout = din;
        din = t;
    }
    return loss;
}

/* ---- the optimizer ------------------------------------------------------ */

void model_sgd(model_t *m, float lr, float momentum)
{
    for (int i = 0; i < m->nparam; i++) {
        param_t *p = &m->p[i];

        for (size_t j = 0; j < p->n; j++) {
            float d = p->g[j];

            if (momentum != 0) {
                p->m[j] = m->momentum_started ? momentum * p->m[j] + d : d;
                d = p->m[j];
            }
            p->w[j] -= lr * d;
        }
    }
    if (momentum != 0)
        m->momentum_started = true;
}

bool model_momentum_started(const model_t *m)
{
    return m->momentum_started;
}

void model_set_momentum_started(model_t *m, bool started)
{
    m->momentum_started = started;
}
