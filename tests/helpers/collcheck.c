/* SPDX-License-Identifier: Apache-2.0 */
/* collcheck: every collective of libddprt against a float64 reference, on
 * every data type and operation, odd counts and misaligned buffers, with
 * each algorithm; and every rank must hold the same bytes. Every rank can
 * compute every rank's input, so each checks its own result. Exit 0 when
 * everything passed; failures are printed (up to 20 per rank). */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddprt.h"

static const drt_dtype_t types[] = {DRT_FLOAT32, DRT_FLOAT64, DRT_BFLOAT16,
                                    DRT_FLOAT16, DRT_INT32, DRT_INT64};
static const char *const type_names[] = {"float32", "float64", "bfloat16", "float16", "int32", "int64"};
static const char *const op_names[] = {"sum", "avg", "min", "max"};
static const size_t counts[] = {0, 1, 3, 7, 1000, 65537};

static drt_comm_t *comm;
static int me, n, checks, failures;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void fail(const char *fmt, ...)
{
    va_list ap;

    if (++failures > 20)
        return;
    fprintf(stderr, "collcheck: rank %d: FAIL: ", me);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static size_t tsize(drt_dtype_t t)
{
    return t == DRT_FLOAT64 || t == DRT_INT64 ? 8 : t == DRT_BFLOAT16 || t == DRT_FLOAT16 ? 2 : 4;
}

static uint16_t to_half(double v, drt_dtype_t t)
{
    float f = (float)v;
    uint32_t u;

    memcpy(&u, &f, 4);
    if (t == DRT_BFLOAT16)
        return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
    /* the inputs below are multiples of 1/64 below 8: exact in float16 */
    int e = 0;
    double m = fabs(v);
    if (m == 0)
        return v < 0 ? 0x8000 : 0;
    while (m >= 2) { m /= 2; e++; }
    while (m < 1) { m *= 2; e--; }
    return (uint16_t)((v < 0 ? 0x8000 : 0) | ((e + 15) << 10) | (uint16_t)lround((m - 1) * 1024));
}

static double from_half(uint16_t h, drt_dtype_t t)
{
    if (t == DRT_BFLOAT16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    int e = (h >> 10) & 0x1f;
    double v = e ? ldexp(1.0 + (h & 0x3ff) / 1024.0, e - 15) : ldexp((h & 0x3ff) / 1024.0, -14);
    return h & 0x8000 ? -v : v;
}

static void put(unsigned char *p, size_t i, drt_dtype_t t, double v)
{
    unsigned char *d = p + i * tsize(t);
    float f = (float)v;
    int32_t i32 = (int32_t)v;
    int64_t i64 = (int64_t)v;
    uint16_t h;

    switch (t) {
    case DRT_FLOAT64: memcpy(d, &v, 8); break;
    case DRT_INT32: memcpy(d, &i32, 4); break;
    case DRT_INT64: memcpy(d, &i64, 8); break;
    case DRT_BFLOAT16: case DRT_FLOAT16: h = to_half(v, t); memcpy(d, &h, 2); break;
    default: memcpy(d, &f, 4);
    }
}

static double get(const unsigned char *p, size_t i, drt_dtype_t t)
{
    const unsigned char *s = p + i * tsize(t);
    double v;
    float f;
    int32_t i32;
    int64_t i64;
    uint16_t h;

    switch (t) {
    case DRT_FLOAT64: memcpy(&v, s, 8); return v;
    case DRT_INT32: memcpy(&i32, s, 4); return i32;
    case DRT_INT64: memcpy(&i64, s, 8); return (double)i64;
    case DRT_BFLOAT16: case DRT_FLOAT16: memcpy(&h, s, 2); return from_half(h, t);
    default: memcpy(&f, s, 4); return f;
    }
}

/* Rank r's element i, as the type stores it (bfloat16 rounds it). */
static double value(int r, size_t i, drt_dtype_t t)
{
    long k = (long)((r * 7919 + (long)i * 104729) % 801) - 400;
    unsigned char tmp[8];

    put(tmp, 0, t, t == DRT_INT32 || t == DRT_INT64 ? (double)k : (double)k / 64.0);
    return get(tmp, 0, t);
}

static double reference(size_t i, drt_dtype_t t, drt_op_t op, double *abs_sum)
{
    double acc = op == DRT_MIN ? INFINITY : op == DRT_MAX ? -INFINITY : 0;

    *abs_sum = 0;
    for (int r = 0; r < n; r++) {
        double v = value(r, i, t);
        *abs_sum += fabs(v);
        acc = op == DRT_MIN ? fmin(acc, v) : op == DRT_MAX ? fmax(acc, v) : acc + v;
    }
    if (op == DRT_AVG)
        acc = t == DRT_INT32 || t == DRT_INT64 ? trunc(acc / n) : acc / n;
    return acc;
}

/* Rounding allowed: accumulation in float32 (float64 for float64), then
 * one rounding to the type; 16-bit floats travel as such, so each of the
 * n - 1 reduction steps rounds to the type too. */
static double tolerance(drt_dtype_t t, double ref, double abs_sum)
{
    static const double eps[] = {[DRT_FLOAT32] = 6e-8, [DRT_FLOAT64] = 1.2e-16,
                                 [DRT_BFLOAT16] = 4e-3, [DRT_FLOAT16] = 5e-4};
    double acc = t == DRT_FLOAT64 ? 1.2e-16 : t == DRT_BFLOAT16 || t == DRT_FLOAT16 ? eps[t] : 6e-8;

    if (t == DRT_INT32 || t == DRT_INT64)
        return 0;
    return acc * n * abs_sum + eps[t] * fabs(ref) + 1e-300;
}

static uint64_t fnv(const unsigned char *p, size_t len)
{
    uint64_t h = 1469598103934665603ull;

    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* Every rank holds the same bytes: gather each rank's hash. */
static void same_bytes(const unsigned char *p, size_t len, const char *what)
{
    uint64_t h = fnv(p, len), *all = calloc((size_t)n, sizeof(uint64_t));
    drt_error_t err;

    if (drt_allgather(comm, &h, all, sizeof(h), &err) < 0)
        fail("%s: allgather of hashes: %s", what, err.text);
    for (int r = 0; r < n; r++)
        if (all[r] != h)
            fail("%s: rank %d holds different bytes", what, r);
    checks++;
    free(all);
}

static void check_allreduce(int ti, drt_op_t op, size_t count, size_t misalign, int in_place)
{
    drt_dtype_t t = types[ti];
    size_t es = tsize(t), bad = 0;
    unsigned char *sb = malloc(count * es + 8), *rb = malloc(count * es + 8);
    /* out of place: an aligned recv (the algorithms read send directly) and a
     * send at the offset; in place: the offset (a misaligned working copy) */
    unsigned char *s = sb + misalign, *r = in_place ? s : rb;
    drt_error_t err;
    char what[128];

    snprintf(what, sizeof(what), "allreduce %s %s count %zu offset %zu%s", type_names[ti],
             op_names[op], count, misalign, in_place ? " in place" : "");
    for (size_t i = 0; i < count; i++)
        put(s, i, t, value(me, i, t));
    if (drt_allreduce(comm, s, r, count, t, op, &err) < 0) {
        fail("%s: %s", what, err.text);
        exit(1); /* the others are stuck now; the launcher ends them */
    }
    for (size_t i = 0; i < count; i++) {
        double abs_sum, ref = reference(i, t, op, &abs_sum), got = get(r, i, t);
        if (fabs(got - ref) > tolerance(t, ref, abs_sum) && bad++ < 3)
            fail("%s: element %zu is %.9g, want %.9g", what, i, got, ref);
    }
    checks++;
    same_bytes(r, count * es, what);
    free(sb);
    free(rb);
}

static void check_others(void)
{
    drt_error_t err;
    const size_t sizes[] = {0, 1, 1000, (3 << 20) + 5};

    for (size_t k = 0; k < 4; k++)
        for (int root = 0; root < n; root++) {
            unsigned char *b = malloc(sizes[k] + 1);
            size_t bad = 0;
            for (size_t i = 0; i < sizes[k]; i++)
                b[i] = (unsigned char)(me == root ? (i * 31 + (size_t)root) : 0);
            if (drt_broadcast(comm, b, sizes[k], root, &err) < 0)
                fail("broadcast %zu bytes from %d: %s", sizes[k], root, err.text);
            for (size_t i = 0; i < sizes[k]; i++)
                bad += b[i] != (unsigned char)(i * 31 + (size_t)root);
            if (bad)
                fail("broadcast %zu bytes from %d: %zu wrong bytes", sizes[k], root, bad);
            checks++;
            free(b);
        }
    for (size_t bytes = 0; bytes < 100000; bytes = bytes * 13 + 1) {
        unsigned char *mine = malloc(bytes + 1), *all = malloc(bytes * (size_t)n + 1);
        size_t bad = 0;
        for (size_t i = 0; i < bytes; i++)
            mine[i] = (unsigned char)(me * 7 + (int)i);
        if (drt_allgather(comm, mine, all, bytes, &err) < 0)
            fail("allgather %zu bytes: %s", bytes, err.text);
        for (int q = 0; q < n; q++)
            for (size_t i = 0; i < bytes; i++)
                bad += all[(size_t)q * bytes + i] != (unsigned char)(q * 7 + (int)i);
        if (bad)
            fail("allgather %zu bytes: %zu wrong bytes", bytes, bad);
        checks++;
        free(mine);
        free(all);
    }
    if (drt_barrier(comm, &err) < 0)
        fail("barrier: %s", err.text);
    checks++;
}

static void check_reduce_scatter(void)
{
    const size_t per[] = {0, 1, 5, 4097};
    drt_error_t err;

    for (int ti = 0; ti < 6; ti++)
        for (size_t k = 0; k < 4; k++) {
            drt_dtype_t t = types[ti];
            size_t total = per[k] * (size_t)n, es = tsize(t), bad = 0;
            unsigned char *s = malloc(total * es + 1), *r = malloc(per[k] * es + 1);
            for (size_t i = 0; i < total; i++)
                put(s, i, t, value(me, i, t));
            if (drt_reduce_scatter(comm, s, r, per[k], t, DRT_SUM, &err) < 0)
                fail("reduce_scatter %s %zu: %s", type_names[ti], per[k], err.text);
            for (size_t i = 0; i < per[k]; i++) {
                double abs_sum, ref = reference((size_t)me * per[k] + i, t, DRT_SUM, &abs_sum);
                if (fabs(get(r, i, t) - ref) > tolerance(t, ref, abs_sum) && bad++ < 3)
                    fail("reduce_scatter %s %zu: element %zu is %g, want %g", type_names[ti],
                         per[k], i, get(r, i, t), ref);
            }
            checks++;
            free(s);
            free(r);
        }
}

static void check_nonblocking(void)
{
    enum { REQS = 3 };
    const size_t sizes[REQS] = {10, 100000, 3};
    float *buf[REQS];
    drt_request_t *req[REQS];
    drt_error_t err;

    for (int k = 0; k < REQS; k++) {
        buf[k] = malloc(sizes[k] * sizeof(float) + 1);
        for (size_t i = 0; i < sizes[k]; i++)
            buf[k][i] = (float)value(me, i, DRT_FLOAT32);
        if (drt_iallreduce(comm, buf[k], buf[k], sizes[k], DRT_FLOAT32, DRT_SUM, &req[k], &err) < 0)
            fail("iallreduce %d: %s", k, err.text);
    }
    for (int k = REQS - 1; k >= 0; k--) {
        size_t bad = 0;
        if (drt_wait(req[k], &err) < 0)
            fail("wait %d: %s", k, err.text);
        for (size_t i = 0; i < sizes[k]; i++) {
            double abs_sum, ref = reference(i, DRT_FLOAT32, DRT_SUM, &abs_sum);
            bad += fabs(buf[k][i] - ref) > tolerance(DRT_FLOAT32, ref, abs_sum);
        }
        if (bad)
            fail("iallreduce %d: %zu wrong elements", k, bad);
        checks++;
        free(buf[k]);
    }
}

/* Counts above the pipelined hier's threshold (2 MiB) run its segments and
 * its second lane: every op, in and out of place, misaligned, an integer
 * type and a 16-bit one; 3 MiB plus a few elements so no split is
 * even. */
static void check_pipelined(void)
{
    const size_t big = (3u << 18) + 5;

    drt_set_algo(comm, DRT_ALGO_HIER);
    for (int op = 0; op < 4; op++) {
        check_allreduce(0, (drt_op_t)op, big, op % 2 ? 3 : 0, 0);
        check_allreduce(4, (drt_op_t)op, big, op % 2 ? 0 : 2, op % 2);
    }
    check_allreduce(2, DRT_AVG, big, 1, 1);
}

int main(void)
{
    drt_error_t err;
    const drt_algo_t algos[] = {DRT_ALGO_FLAT, DRT_ALGO_HIER, DRT_ALGO_AUTO};

    if (drt_init(&comm, &err) < 0) {
        fprintf(stderr, "collcheck: %s\n", err.text);
        return 1;
    }
    me = drt_rank(comm);
    n = drt_size(comm);
    for (int a = 0; a < 3; a++) {
        drt_set_algo(comm, algos[a]);
        for (int ti = 0; ti < 6; ti++)
            for (int op = 0; op < 4; op++)
                for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
                    check_allreduce(ti, (drt_op_t)op, counts[k], (k + (size_t)op) % 2 ? 3 : 0, 0);
    }
    for (int ti = 0; ti < 6; ti++)
        check_allreduce(ti, DRT_SUM, 999, 1, 1);
    check_pipelined();
    check_others();
    check_reduce_scatter();
    check_nonblocking();
    if (drt_allreduce(comm, &failures, &failures, 1, DRT_INT32, DRT_SUM, &err) < 0)
        fail("final tally: %s", err.text);
    if (me == 0)
        printf("collcheck: %d ranks on %d nodes: %d checks per rank, %d failures\n", n,
               drt_node_count(comm), checks, failures);
    drt_finalize(comm);
    return failures ? 1 : 0;
}
