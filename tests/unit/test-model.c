/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-train's model, data set, sampler and dump comparison
 * (runtime/tools/train/{model,data,compare}.c, compiled in). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data.h"
#include "model.h"
#include "tap.h"
#include "tools.h"

#define NS 256 /* samples of the small data sets */

static char err[256];

/* A batch of B rows of a data set of NS samples of seed 1, unshuffled. */
static void first_rows(float *x, int *y, int B)
{
    dataset_t *d = data_create(NS, 1, err, sizeof(err));
    uint32_t perm[NS];

    for (uint32_t i = 0; i < NS; i++)
        perm[i] = i;
    data_batch(d, perm, 0, 1, 0, B, x, y);
    data_free(d);
}

/* ---- gradients ---------------------------------------------------------- */

/* Every weight's gradient against central differences of the mean loss, in
 * double; float32 forward passes leave about 1e-4 of noise at h = 1e-3.
 * Near a ReLU's kink a finite difference is wrong, so the mlp's seed is one
 * where no ReLU input of the batch lies within 0.017 of 0 (seen in a debug
 * build), well beyond what a step of h moves it. */
static void gradient_check(const char *kind, int hidden, int layers, uint64_t seed)
{
    enum { B = 4 };
    float x[B * DATA_FEATURES];
    int y[B], np, bad = 0;
    model_t *m = model_create(kind, hidden, layers, seed, err, sizeof(err));
    param_t *p;
    double worst = 0;

    first_rows(x, y, B);
    np = model_params(m, &p);
    model_step(m, x, y, B, NULL, NULL);
    for (int i = 0; i < np; i++)
        for (size_t j = 0; j < p[i].n; j++) {
            float w = p[i].w[j], wp = w + 1e-3f, wm = w - 1e-3f;
            double lp, lm, fd, diff;

            p[i].w[j] = wp;
            lp = model_loss(m, x, y, B) / B;
            p[i].w[j] = wm;
            lm = model_loss(m, x, y, B) / B;
            p[i].w[j] = w;
            fd = (lp - lm) / ((double)wp - (double)wm);
            diff = fabs(fd - p[i].g[j]);
            if (diff > worst)
                worst = diff;
            if (diff > 2e-4 + 1e-2 * fabs(fd) && bad++ < 5)
                printf("# %s %s[%zu]: backward %.6g, finite difference %.6g\n", kind,
                       p[i].name, j, p[i].g[j], fd);
        }
    ok(bad == 0, "%s: %zu gradients match finite differences (worst difference %.2g)", kind,
       model_size(m), worst);
    model_free(m);
}

/* ---- the ready callback -------------------------------------------------- */

typedef struct {
    model_t *m;
    int order[2 * 8], n;
    double sum[2 * 8]; /* each gradient's sum when it was announced */
} ready_log_t;

static double grad_sum(const param_t *p)
{
    double s = 0;

    for (size_t j = 0; j < p->n; j++)
        s += p->g[j];
    return s;
}

static void on_ready(void *ctx, int i)
{
    ready_log_t *log = ctx;
    param_t *p;

    model_params(log->m, &p);
    if (log->n < 16) {
        log->sum[log->n] = grad_sum(&p[i]);
        log->order[log->n++] = i;
    }
}

static void test_ready(void)
{
    enum { B = 8 };
    float x[B * DATA_FEATURES];
    int y[B], np, in_order = 1, final = 1;
    ready_log_t log = {0};
    param_t *p;

    log.m = model_create("mlp", 8, 2, 0, err, sizeof(err));
    np = model_params(log.m, &p);
    first_rows(x, y, B);
    model_step(log.m, x, y, B, on_ready, &log);
    for (int k = 0; k < log.n; k++) {
        in_order &= log.order[k] == np - 1 - k;
        final &= log.sum[k] == grad_sum(&p[log.order[k]]);
    }
    ok(np == 8 && log.n == np && in_order, "ready: once per parameter, %d..0 (got %d calls)",
       np - 1, log.n);
    ok(final, "ready: each gradient was final when announced");
    model_free(log.m);
}

/* The caller's buffers replace p[i].g between steps (as the buckets do). */
static void test_moved_grads(void)
{
    enum { B = 8 };
    float x[B * DATA_FEATURES], *mine;
    int y[B], np, same = 1;
    model_t *m = model_create("mlp", 8, 2, 0, err, sizeof(err));
    param_t *p;
    size_t off = 0;

    np = model_params(m, &p);
    first_rows(x, y, B);
    model_step(m, x, y, B, NULL, NULL);
    mine = calloc(model_size(m), sizeof(float));
    for (int i = 0; i < np; i++) {
        memcpy(mine + off, p[i].g, p[i].n * sizeof(float)); /* the expected gradient */
        memset(p[i].g, 0, p[i].n * sizeof(float));
        p[i].g = mine + off;
        off += p[i].n;
    }
    float *want = malloc(model_size(m) * sizeof(float));
    memcpy(want, mine, model_size(m) * sizeof(float));
    memset(mine, 0, model_size(m) * sizeof(float));
    model_step(m, x, y, B, NULL, NULL);
    same = memcmp(mine, want, model_size(m) * sizeof(float)) == 0;
    ok(same, "gradients go to the buffers the caller put in p[i].g");
    free(want);
    free(mine);
    model_free(m);
}

/* ---- determinism and the optimizer -------------------------------------- */

/* Three steps of SGD with momentum; the weights in a new array. */
static float *train3(uint64_t seed, const float *x, const int *y, int B, double *loss)
{
    model_t *m = model_create("mlp", 16, 2, seed, err, sizeof(err));
    param_t *p;
    int np = model_params(m, &p);
    float *w = malloc(model_size(m) * sizeof(float));
    size_t off = 0;

    for (int s = 0; s < 3; s++) {
        *loss = model_step(m, x, y, B, NULL, NULL);
        model_sgd(m, 0.05f, 0.9f);
    }
    for (int i = 0; i < np; i++) {
        memcpy(w + off, p[i].w, p[i].n * sizeof(float));
        off += p[i].n;
    }
    model_free(m);
    return w;
}

static void test_determinism(void)
{
    enum { B = 16 };
    float x[B * DATA_FEATURES], *a, *b, *c;
    int y[B];
    double la, lb, lc;
    model_t *m1 = model_create("mlp", 16, 2, 5, err, sizeof(err));
    size_t n = model_size(m1) * sizeof(float);

    first_rows(x, y, B);
    a = train3(5, x, y, B, &la);
    b = train3(5, x, y, B, &lb);
    c = train3(6, x, y, B, &lc);
    ok(memcmp(a, b, n) == 0 && memcmp(&la, &lb, sizeof(la)) == 0,
       "same seed: bitwise the same weights and losses after 3 steps (loss %.17g, %.17g)", la,
       lb);
    ok(memcmp(a, c, n) != 0, "another seed: other weights");
    free(a);
    free(b);
    free(c);
    model_free(m1);
}

/* One step on a batch of 2B, or the mean of two steps on its halves: what
 * an allreduce AVG over 2 ranks gives. Equal within float rounding. */
static void test_halves(void)
{
    enum { B = 8 };
    float x[2 * B * DATA_FEATURES];
    int y[2 * B], np;
    model_t *m = model_create("mlp", 16, 2, 0, err, sizeof(err));
    param_t *p;
    double d2 = 0, n2 = 0, whole, halves;
    float *full = malloc(model_size(m) * sizeof(float)), *g1 = malloc(model_size(m) * sizeof(float));
    size_t off;

    first_rows(x, y, 2 * B);
    np = model_params(m, &p);
    whole = model_step(m, x, y, 2 * B, NULL, NULL);
    off = 0;
    for (int i = 0; i < np; off += p[i].n, i++)
        memcpy(full + off, p[i].g, p[i].n * sizeof(float));
    halves = model_step(m, x, y, B, NULL, NULL);
    off = 0;
    for (int i = 0; i < np; off += p[i].n, i++)
        memcpy(g1 + off, p[i].g, p[i].n * sizeof(float));
    halves += model_step(m, x + B * DATA_FEATURES, y + B, B, NULL, NULL);
    off = 0;
    for (int i = 0; i < np; i++)
        for (size_t j = 0; j < p[i].n; j++, off++) {
            double mean = ((double)g1[off] + p[i].g[j]) / 2, d = mean - full[off];

            d2 += d * d;
            n2 += (double)full[off] * full[off];
        }
    ok(sqrt(d2 / n2) < 1e-6 && fabs(whole - halves) < 1e-5 * whole,
       "batch 2B = mean of the halves' gradients (relative %.2g), losses %.9g and %.9g",
       sqrt(d2 / n2), whole, halves);
    free(full);
    free(g1);
    model_free(m);
}

static void test_sgd(void)
{
    model_t *m = model_create("linear", 0, 0, 0, err, sizeof(err));
    param_t *p;
    float w0, w1, w2;

    model_params(m, &p);
    w0 = p[0].w[0];
    p[0].g[0] = 1.0f;
    model_sgd(m, 0.5f, 0.9f);
    w1 = p[0].w[0];
    model_sgd(m, 0.5f, 0.9f);
    w2 = p[0].w[0];
    ok(w1 == w0 - 0.5f && p[0].m[0] == 1.9f && w2 == w1 - 0.5f * 1.9f,
       "sgd: first step buf = g, then buf = 0.9 buf + g (w %g %g %g, buf %g)", w0, w1, w2,
       p[0].m[0]);
    ok(model_momentum_started(m), "sgd: the momentum buffers exist after a step");
    model_set_momentum_started(m, false); /* as a checkpoint from before the first step */
    model_sgd(m, 0.5f, 0.9f);
    ok(p[0].m[0] == 1.0f, "sgd: a restored 'not started' makes the next step buf = g again");
    model_free(m);
}

static void test_bad_args(void)
{
    ok(!model_create("cnn", 8, 1, 0, err, sizeof(err)) && strstr(err, "'cnn'"),
       "model 'cnn' refused: %s", err);
    ok(!model_create("mlp", 0, 1, 0, err, sizeof(err)) && strstr(err, "hidden 0"),
       "hidden 0 refused: %s", err);
    ok(!model_create("mlp", 8, 65, 0, err, sizeof(err)) && strstr(err, "layers 65"),
       "layers 65 refused: %s", err);
    ok(!data_create(0, 0, err, sizeof(err)) && strstr(err, "0 samples"), "0 samples refused: %s",
       err);
}

/* 50 steps of the tutorial's setup: the mean loss over all 4096 samples. */
static void test_learns(void)
{
    enum { N = 4096, B = 32 };
    dataset_t *d = data_create(N, 0, err, sizeof(err));
    model_t *m = model_create("linear", 0, 0, 0, err, sizeof(err));
    uint32_t *perm = malloc(N * sizeof(uint32_t));
    float x[B * DATA_FEATURES];
    int y[B];
    double before, after;

    data_permutation(perm, N, 0, 0);
    float *all = malloc((size_t)N * DATA_FEATURES * sizeof(float));
    int *labels = malloc(N * sizeof(int));
    for (size_t i = 0; i < N; i++) {
        memcpy(all + i * DATA_FEATURES, data_x(d, i), DATA_FEATURES * sizeof(float));
        labels[i] = data_y(d, i);
    }
    before = model_loss(m, all, labels, N) / N;
    for (size_t s = 0; s < 50; s++) {
        data_batch(d, perm, s * B, 1, 0, B, x, y);
        model_step(m, x, y, B, NULL, NULL);
        model_sgd(m, 0.01f, 0.9f);
    }
    after = model_loss(m, all, labels, N) / N;
    ok(before > 2.0 && before < 2.7 && after < before - 0.5,
       "linear model learns: mean loss %.4f -> %.4f after 50 steps", before, after);
    free(all);
    free(labels);
    free(perm);
    model_free(m);
    data_free(d);
}

/* ---- data and sampler ----------------------------------------------------- */

static void test_data(void)
{
    dataset_t *d = data_create(4096, 0, err, sizeof(err)), *e = data_create(4096, 0, err, sizeof(err));
    int count[DATA_CLASSES] = {0}, all_classes = 1;
    double sum = 0, sq = 0, n = 4096.0 * DATA_FEATURES;

    for (size_t i = 0; i < 4096; i++) {
        count[data_y(d, i)]++;
        for (int k = 0; k < DATA_FEATURES; k++) {
            sum += data_x(d, i)[k];
            sq += (double)data_x(d, i)[k] * data_x(d, i)[k];
        }
    }
    for (int c = 0; c < DATA_CLASSES; c++)
        all_classes &= count[c] > 100;
    ok(all_classes, "every class is common (%d %d %d ... %d)", count[0], count[1], count[2],
       count[9]);
    ok(fabs(sum / n) < 0.02 && fabs(sq / n - 1) < 0.02, "x ~ N(0,1): mean %.4f, variance %.4f",
       sum / n, sq / n);
    ok(memcmp(data_x(d, 4095), data_x(e, 4095), DATA_FEATURES * sizeof(float)) == 0 &&
       data_y(d, 17) == data_y(e, 17), "same seed: the same data set");
    data_free(d);
    data_free(e);
}

/* Ranks 0..world-1's batches at offset, interleaved into the order of one
 * process with batch world*B (row r + world*i is rank r's row i). */
static void union_of_ranks(const dataset_t *d, const uint32_t *perm, size_t off, int world, int B,
                           float *x, int *y)
{
    float xr[64 * DATA_FEATURES];
    int yr[64];

    for (int r = 0; r < world; r++) {
        data_batch(d, perm, off, world, r, B, xr, yr);
        for (int i = 0; i < B; i++) {
            size_t row = (size_t)r + (size_t)world * (size_t)i;

            memcpy(x + row * DATA_FEATURES, xr + (size_t)i * DATA_FEATURES,
                   DATA_FEATURES * sizeof(float));
            y[row] = yr[i];
        }
    }
}

static bool rows_distinct(const float *x, int n)
{
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            if (memcmp(x + a * DATA_FEATURES, x + b * DATA_FEATURES, DATA_FEATURES * sizeof(float)) == 0)
                return false;
    return true;
}

static void test_sampler(void)
{
    dataset_t *d = data_create(NS, 9, err, sizeof(err));
    uint32_t p0[NS], p1[NS], again[NS];
    float one[32 * DATA_FEATURES], four[32 * DATA_FEATURES], two[32 * DATA_FEATURES];
    int y1[32], y4[32], y2[32], seen[NS] = {0}, perm_ok = 1;

    data_permutation(p0, NS, 9, 0);
    data_permutation(p1, NS, 9, 1);
    data_permutation(again, NS, 9, 0);
    for (int i = 0; i < NS; i++)
        seen[p0[i]]++;
    for (int i = 0; i < NS; i++)
        perm_ok &= seen[i] == 1;
    ok(perm_ok, "the epoch order is a permutation");
    ok(memcmp(p0, p1, sizeof(p0)) != 0 && memcmp(p0, again, sizeof(p0)) == 0,
       "reshuffled every epoch (seed + epoch), the same for the same epoch");
    data_batch(d, p0, 64, 1, 0, 32, one, y1);
    union_of_ranks(d, p0, 64, 4, 8, four, y4);
    ok(memcmp(one, four, sizeof(one)) == 0 && memcmp(y1, y4, sizeof(y1)) == 0 &&
       rows_distinct(four, 32), "4 ranks x 8: disjoint shards whose union is the batch of 32");
    union_of_ranks(d, p0, 64, 2, 16, two, y2);
    ok(memcmp(one, two, sizeof(one)) == 0 && memcmp(y1, y2, sizeof(y1)) == 0,
       "resumed at offset 64 on 2 ranks x 16: the same samples as 4 x 8 would take");
    ok(data_steps(NS, 0, 4, 8) == 8 && data_steps(NS, 64, 4, 8) == 6 && data_steps(NS, 250, 1, 8) == 0 &&
       data_steps(100, 0, 3, 8) == 4, "steps per epoch: floor((samples - offset) / (world B))");
    data_free(d);
}

/* ---- dumps and compare ------------------------------------------------- */

static char dir[] = "/tmp/test-model-XXXXXX";

/* path of a file in the test's directory */
static const char *tmp_path(const char *name)
{
    static char buf[4][128];
    static int k;

    k = (k + 1) % 4;
    snprintf(buf[k], sizeof(buf[k]), "%s/%s", dir, name);
    return buf[k];
}

/* A dump of steps 1..steps of a linear model; weight 0 of step `at` plus
 * delta. */
static void write_dump(const char *name, int steps, int at, float delta)
{
    FILE *f = fopen(tmp_path(name), "wb");
    model_t *m = model_create("linear", 0, 0, 0, err, sizeof(err));
    param_t *p;

    model_params(m, &p);
    for (int s = 1; s <= steps; s++) {
        float keep = p[0].w[0];

        if (s == at)
            p[0].w[0] += delta;
        train_dump(f, (uint64_t)s, m);
        p[0].w[0] = keep;
    }
    fclose(f);
    model_free(m);
}

/* train_compare's result and its output (to out, 512 bytes). */
static int compare(const char *a, const char *b, double rtol, char *out)
{
    FILE *f = tmpfile();
    int rc = train_compare(tmp_path(a), tmp_path(b), rtol, f);
    size_t got;

    rewind(f);
    got = fread(out, 1, 511, f);
    out[got] = 0;
    fclose(f);
    if (*out)
        printf("# %s", out);
    return rc;
}

static void test_compare(void)
{
    char out[512];
    FILE *f;

    if (!mkdtemp(dir)) {
        ok(0, "mkdtemp %s", dir);
        return;
    }
    write_dump("a", 3, 0, 0);
    write_dump("same", 3, 0, 0);
    write_dump("off", 3, 2, 0.5f);
    write_dump("nan", 3, 3, NAN);
    write_dump("short", 2, 0, 0);
    ok(compare("a", "same", 1e-5, out) == 0 && strstr(out, "compare: 3 steps, max relative error 0 (step 1)"),
       "equal dumps: 0");
    ok(compare("a", "off", 1e-5, out) == 1 && strstr(out, "step 2: relative error"),
       "a changed weight at step 2: 1, naming the step");
    ok(compare("a", "off", 0.5, out) == 0, "within a loose rtol: 0");
    ok(compare("a", "nan", 1e-5, out) == 1 && strstr(out, "step 3"), "a NaN weight: 1");
    ok(compare("a", "short", 1e-5, out) == 2, "one dump ends first: 2");
    ok(compare("a", "missing", 1e-5, out) == 2, "a missing file: 2");
    /* cut the last record short */
    f = fopen(tmp_path("cut"), "wb");
    fwrite("0123456789abcdef0123", 1, 20, f);
    fclose(f);
    ok(compare("cut", "cut", 1e-5, out) == 2, "a truncated record: 2");
    f = fopen(tmp_path("empty"), "wb");
    fclose(f);
    ok(compare("empty", "empty", 1e-5, out) == 2, "no records: 2");
    for (const char *const *n = (const char *const[]){"a", "same", "off", "nan", "short", "cut",
                                                      "empty", NULL}; *n; n++)
        unlink(tmp_path(*n));
    rmdir(dir);
}

/* ---- plot ------------------------------------------------------------- */

static bool file_has(const char *path, const char *text)
{
    char buf[4096] = "";
    FILE *f = fopen(path, "r");
    size_t got = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;

    if (f)
        fclose(f);
    buf[got] = 0;
    return strstr(buf, text) != NULL;
}

static void test_plot(void)
{
    const char *path = getenv("PATH");
    char keep[4096], here[4096], d[] = "/tmp/test-plot-XXXXXX";
    FILE *f;

    snprintf(keep, sizeof(keep), "%s", path ? path : "/usr/bin:/bin");
    if (!mkdtemp(d) || !getcwd(here, sizeof(here)) || chdir(d) < 0) {
        ok(0, "a directory for the plot test");
        return;
    }
    f = fopen("m.jsonl", "w");
    fprintf(f, "{\"step\": 1, \"loss\": 2.3, \"step_ms\": 10, \"compute_ms\": 6, \"comm_ms\": 5, "
               "\"exposed_ms\": 1.5, \"algo\": \"hier\"}\n{\"step\": 2, \"loss\": \"none\"}\n\n"
               "{\"step\":3,\"loss\":2.1,\"step_ms\":9,\"compute_ms\":6,\"comm_ms\":4,\"exposed_ms\":1}\n");
    fclose(f);
    f = fopen("bad.jsonl", "w");
    fprintf(f, "{\"step\": 1}\nnot json\n");
    fclose(f);
    ok(train_plot("m.jsonl", "a'b.svg", err, sizeof(err)) < 0 && strstr(err, "quote"),
       "plot: a name with a quote refused: %s", err);
    setenv("PATH", "/nonexistent", 1);
    ok(train_plot("m.jsonl", "x.svg", err, sizeof(err)) < 0 &&
       strstr(err, "apt install gnuplot-nox"), "plot without gnuplot: %s", err);
    setenv("PATH", keep, 1);
    if (train_plot("m.jsonl", "probe.svg", err, sizeof(err)) < 0 && strstr(err, "gnuplot-nox")) {
        printf("ok %d # SKIP gnuplot is not installed\n", ++tap_n);
        printf("ok %d # SKIP gnuplot is not installed\n", ++tap_n);
    } else {
        /* "|x.svg" would be a pipe to a command for gnuplot: it must be a file */
        err[0] = 0;
        ok(train_plot("m.jsonl", "|x.svg", err, sizeof(err)) == 0 && file_has("|x.svg", "<svg"),
           "plot: the svg written, a name starting with | is a file (%s)", err);
        ok(train_plot("bad.jsonl", "y.svg", err, sizeof(err)) < 0 && strstr(err, "none of its 2 "
           "lines") && access("y.svg", F_OK) != 0, "plot: no usable line: %s", err);
    }
    ok(train_plot("missing.jsonl", "z.svg", err, sizeof(err)) < 0 && strstr(err, "missing.jsonl"),
       "plot: a missing file: %s", err);
    for (const char *const *n = (const char *const[]){"m.jsonl", "bad.jsonl", "probe.svg",
                                                      "|x.svg", "y.svg", "z.svg", NULL}; *n; n++)
        unlink(*n);
    if (chdir(here) == 0)
        rmdir(d);
}

int main(void)
{
    gradient_check("linear", 0, 0, 3);
    gradient_check("mlp", 8, 2, 4);
    test_ready();
    test_moved_grads();
    test_determinism();
    test_halves();
    test_sgd();
    test_bad_args();
    test_learns();
    test_data();
    test_sampler();
    test_compare();
    test_plot();
    return tap_done();
}
