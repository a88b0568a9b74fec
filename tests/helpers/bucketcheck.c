/* SPDX-License-Identifier: Apache-2.0 */
/* The gradient buckets' contract, on every rank of a ddp-run world
 * (train.test): packing, readiness out of order, unused gradients, storage
 * inside the buckets, mixed dtypes, misuse, and the step's stats. Each rank
 * fills gradient i with values that depend on its rank, so the expected
 * average is known. Prints "bucketcheck: N failures" and exits non-zero on
 * any. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddprt.h"

static int failures, rank, size;

#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            failures++;                                                                      \
            fprintf(stderr, "bucketcheck: rank %d: line %d: ", rank, __LINE__);              \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fputc('\n', stderr);                                                             \
        }                                                                                    \
    } while (0)

/* gradient g, element k on rank r */
static double value(int g, size_t k, int r)
{
    return (double)(g + 1) + (double)(k % 7) * 0.25 + (double)r;
}

/* the average over ranks of value(), and over the ranks that marked it
 * ready (the others contribute zeros) */
static double mean(int g, size_t k, int contributors)
{
    double s = 0;

    for (int r = 0; r < contributors; r++)
        s += value(g, k, r);
    return s / size;
}

enum { NG = 6 };
static const size_t counts[NG] = {1000, 3, 70000, 5, 300000, 17};

/* Six gradients, float32 but gradient 3 float64: several buckets (first
 * 16 KiB, then 256 KiB), ready in a scrambled order, gradient 5 unused on
 * every rank but rank 0, gradient 1 in bucket storage. */
static void step_check(drt_buckets_t *b, int idx[NG], void *buf[NG], int step)
{
    static const int order[NG] = {4, 2, 5, 0, 3, 1};
    drt_step_stats_t st;
    drt_error_t e;

    CHECK(drt_buckets_begin(b, &e) == 0, "begin: %s", e.text);
    for (int j = 0; j < NG; j++) {
        int g = order[j];
        void *p = drt_buckets_grad(b, idx[g]);
        if (g == 5 && rank != 0)
            continue; /* unused here */
        for (size_t k = 0; k < counts[g]; k++) {
            if (g == 3)
                ((double *)p)[k] = value(g, k, rank);
            else
                ((float *)p)[k] = (float)value(g, k, rank);
        }
        CHECK(drt_buckets_ready(b, idx[g], &e) == 0, "ready(%d): %s", g, e.text);
    }
    CHECK(drt_buckets_finish(b, &st, &e) == 0, "finish: %s", e.text);
    for (int g = 0; g < NG; g++) {
        const void *p = drt_buckets_grad(b, idx[g]);
        int contributors = g == 5 ? 1 : size;
        for (size_t k = 0; k < counts[g]; k++) {
            double got = g == 3 ? ((const double *)p)[k] : ((const float *)p)[k];
            double want = mean(g, k, contributors);
            if (fabs(got - want) > 1e-5 * fabs(want) + 1e-6) {
                CHECK(0, "step %d gradient %d element %zu: %g, want %g", step, g, k, got, want);
                break;
            }
        }
    }
    CHECK(st.buckets >= 4, "step %d: %d buckets, want at least 4", step, st.buckets);
    CHECK(st.bytes == (counts[0] + counts[1] + counts[2] + counts[4] + counts[5]) * 4 + counts[3] * 8,
          "step %d: %zu bytes", step, st.bytes);
    CHECK(st.step_s >= st.exposed_s && st.exposed_s >= 0 && st.comm_s >= 0, "step %d: times %g %g %g",
          step, st.step_s, st.exposed_s, st.comm_s);
    CHECK((size == 1) == (st.slowest_rank < 0) && st.slowest_rank < size, "slowest rank %d",
          st.slowest_rank);
    CHECK(st.stop == 0, "stop %d without a signal", st.stop);
    (void)buf;
}

static void misuse(drt_buckets_t *b, int idx0)
{
    drt_error_t e;
    drt_step_stats_t st;

    CHECK(drt_buckets_ready(b, idx0, &e) < 0 && strstr(e.text, "outside a step"),
          "ready outside a step: %s", e.text);
    CHECK(drt_buckets_finish(b, &st, &e) < 0 && strstr(e.text, "outside a step"),
          "finish outside a step: %s", e.text);
    CHECK(drt_buckets_add(b, NULL, 4, DRT_FLOAT32, &e) < 0 && strstr(e.text, "packed"),
          "add after the first step: %s", e.text);
    CHECK(drt_buckets_begin(b, &e) == 0, "begin: %s", e.text);
    CHECK(drt_buckets_ready(b, 99, &e) < 0 && strstr(e.text, "no such gradient"), "ready(99): %s",
          e.text);
    CHECK(drt_buckets_ready(b, idx0, &e) == 0, "ready: %s", e.text);
    CHECK(drt_buckets_ready(b, idx0, &e) < 0 && strstr(e.text, "twice"), "ready twice: %s", e.text);
    CHECK(drt_buckets_begin(b, &e) < 0, "begin inside a step succeeded");
    CHECK(drt_buckets_finish(b, &st, &e) == 0, "finish: %s", e.text);
}

int main(void)
{
    drt_comm_t *c;
    drt_buckets_t *b;
    drt_error_t e;
    int idx[NG];
    void *buf[NG] = {0};

    if (drt_init(&c, &e) < 0) {
        fprintf(stderr, "bucketcheck: %s\n", e.text);
        return 1;
    }
    rank = drt_rank(c);
    size = drt_size(c);
    if (drt_buckets_create(c, 256 << 10, 16 << 10, DRT_AVG, &b, &e) < 0) {
        fprintf(stderr, "bucketcheck: %s\n", e.text);
        return 1;
    }
    CHECK(drt_buckets_add(b, NULL, 0, DRT_FLOAT32, &e) < 0, "an empty gradient was accepted");
    for (int g = 0; g < NG; g++) {
        drt_dtype_t t = g == 3 ? DRT_FLOAT64 : DRT_FLOAT32;
        if (g != 1)
            buf[g] = calloc(counts[g], drt_dtype_size(t));
        idx[g] = drt_buckets_add(b, buf[g], counts[g], t, &e);
        CHECK(idx[g] == g, "add(%d): %d %s", g, idx[g], e.text);
    }
    for (int s = 0; s < 3; s++)
        step_check(b, idx, buf, s);
    misuse(b, idx[0]);
    drt_buckets_free(b);
    for (int g = 0; g < NG; g++)
        free(buf[g]);
    drt_finalize(c);
    printf("bucketcheck: rank %d of %d: %d failures\n", rank, size, failures);
    return failures != 0;
}
