/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-allreduce-bench: allreduce bandwidth in the style of nccl-tests'
 * all_reduce_perf. Every iteration's result is checked (bench-check.c).
 * Host buffers here; device buffers (--device cuda) in bench-gpu.c. */
#include "config.h"
#include "bench.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define USAGE \
    "Usage: ddp-allreduce-bench [-b MIN] [-e MAX] [-f FACTOR] [--algo flat|hier|auto]\n" \
    "                           [--dtype float32|float64|bfloat16|float16|int32|int64]\n" \
    "                           [--op sum|avg|min|max] [-w WARMUP] [-n ITERS]\n" \
    "                           [--device cpu|cuda [--nccl]]\n" \
    "       ddp-allreduce-bench --help | --version\n" \
    "Run under srun --ddp-topo=auto or ddp-run. Sizes in bytes (K, M, G suffixes).\n" \
    "Columns: size, count, type, time (us), algbw and busbw (GB/s; busbw =\n" \
    "algbw x 2(n-1)/n), #wrong; then the average busbw.\n" \
    "--device cuda: device buffers on the rank's GPU (drt_gpu_attach), each call\n" \
    "timed with CUDA events and its result copied back and checked; --algo\n" \
    "defaults to DDPRT_GPU_ALGO, else flat. --nccl times NCCL's own ncclAllReduce\n" \
    "the same way, for a side-by-side line.\n"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Buffers past this are a typo: two of them must fit in memory. */
#define MAX_BYTES (64.0 * 1024 * 1024 * 1024)

static int bad_value(const char *opt, const char *s, const char *expected)
{
    fprintf(stderr, "ddp-allreduce-bench: %s '%.40s': %s (see --help)\n", opt, s, expected);
    return -1;
}

/* A decimal number (strtod also reads hex, inf and nan: refused), finite
 * and within [min, max]; *end is left after it. */
static int parse_number(const char *s, double min, double max, char **end, double *v)
{
    errno = 0;
    *v = strtod(s, end);
    return (isdigit((unsigned char)s[0]) || s[0] == '.') && !strpbrk(s, "xX") && !errno &&
           isfinite(*v) &&
           *v >= min && *v <= max ? 0 : -1;
}

static int parse_size(const char *opt, const char *s, size_t *bytes)
{
    static const char units[] = "KMG";
    char *end;
    double v;
    const char *u;

    if (parse_number(s, 0, MAX_BYTES, &end, &v) < 0)
        return bad_value(opt, s, "expected a size in bytes, with an optional K, M or G");
    if (*end && (end[1] || !(u = strchr(units, toupper((unsigned char)*end)))))
        return bad_value(opt, s, "expected a size in bytes, with an optional K, M or G");
    if (*end)
        v = ldexp(v, 10 * (int)(u - units + 1));
    if (v < 1 || v > MAX_BYTES)
        return bad_value(opt, s, "expected a size from 1 byte to 64G");
    *bytes = (size_t)v;
    return 0;
}

static int parse_count(const char *opt, const char *s, int min, int *v)
{
    char *end;
    long x;

    errno = 0;
    x = strtol(s, &end, 10);
    if (!isdigit((unsigned char)s[0]) || *end || errno || x < min || x > 1000000000)
        return min ? bad_value(opt, s, "expected a whole number from 1 to 1000000000")
                   : bad_value(opt, s, "expected a whole number from 0 to 1000000000");
    *v = (int)x;
    return 0;
}

static int parse(int argc, char **argv, opts_t *o)
{
    static const struct option lo[] = {{"algo", 1, 0, 'a'}, {"dtype", 1, 0, 'd'}, {"op", 1, 0, 'o'},
                                       {"device", 1, 0, 'D'}, {"nccl", 0, 0, 'N'},
                                       {"help", 0, 0, 'h'}, {"version", 0, 0, 'V'}, {0, 0, 0, 0}};
    static const char *const ops[] = {"sum", "avg", "min", "max"};
    int c, algo_given = 0;
    char *end;

    *o = (opts_t){8, 64 << 20, 2, 5, 20, DRT_ALGO_AUTO, DRT_FLOAT32, DRT_SUM, "float32", "sum", 0, 0};
    if (getenv("DDPRT_ALGO"))
        drt_algo_parse(getenv("DDPRT_ALGO"), &o->algo);
    while ((c = getopt_long(argc, argv, "b:e:f:w:n:h", lo, NULL)) != -1) {
        switch (c) {
        case 'b': if (parse_size("-b", optarg, &o->min) < 0) return -1; break;
        case 'e': if (parse_size("-e", optarg, &o->max) < 0) return -1; break;
        case 'f':
            if (parse_number(optarg, 1, 1e6, &end, &o->factor) < 0 || *end || o->factor <= 1)
                return bad_value("-f", optarg, "expected a number above 1, e.g. -f 2");
            break;
        case 'w': if (parse_count("-w", optarg, 0, &o->warmup) < 0) return -1; break;
        case 'n': if (parse_count("-n", optarg, 1, &o->iters) < 0) return -1; break;
        case 'a':
            if (drt_algo_parse(optarg, &o->algo) < 0)
                return fprintf(stderr, "ddp-allreduce-bench: --algo '%s': expected flat, hier or auto\n", optarg), -1;
            algo_given = 1;
            break;
        case 'd':
            if (drt_dtype_parse(optarg, &o->dtype) < 0)
                return fprintf(stderr, "ddp-allreduce-bench: --dtype '%s': expected float32, float64, bfloat16, float16, int32 or int64\n", optarg), -1;
            o->dtype_name = optarg;
            break;
        case 'o':
            for (c = 0; c < 4 && strcmp(optarg, ops[c]); c++)
                ;
            if (c == 4)
                return fprintf(stderr, "ddp-allreduce-bench: --op '%s': expected sum, avg, min or max\n", optarg), -1;
            o->op = (drt_op_t)c;
            o->op_name = optarg;
            break;
        case 'D':
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda"))
                return fprintf(stderr, "ddp-allreduce-bench: --device '%.40s': expected cpu or cuda\n", optarg), -1;
            o->cuda = !strcmp(optarg, "cuda");
            break;
        case 'N': o->nccl = 1; break;
        case 'h': fputs(USAGE, stdout); exit(0);
        case 'V': puts("ddp-allreduce-bench (ddp-topo) " PACKAGE_VERSION); exit(0);
        default: return -1;
        }
    }
    if (o->max < o->min)
        return fprintf(stderr, "ddp-allreduce-bench: -b %zu is above -e %zu (the sizes run from "
                       "-b up to -e)\n", o->min, o->max), -1;
    if (o->nccl && !o->cuda)
        return fputs("ddp-allreduce-bench: --nccl times NCCL on device buffers: add --device cuda\n",
                     stderr), -1;
    if (o->cuda && !algo_given) { /* the library's default for device buffers */
        o->algo = DRT_ALGO_FLAT;
        if (getenv("DDPRT_GPU_ALGO"))
            drt_algo_parse(getenv("DDPRT_GPU_ALGO"), &o->algo);
    }
    return 0;
}

/* Host buffers: warm up, then time and check each iteration. */
static int cpu_measure(drt_comm_t *c, const opts_t *o, size_t count, double *seconds, long *wrong,
                       drt_error_t *err)
{
    size_t esize = drt_dtype_size(o->dtype);
    int n = drt_size(c), rc = 0;
    void *send = malloc(count * esize + 1), *recv = malloc(count * esize + 1);

    if (!send || !recv) {
        snprintf(err->text, sizeof(err->text), "out of memory for 2 x %zu bytes (lower -e)",
                 count * esize);
        rc = -1;
    }
    for (size_t i = 0; rc == 0 && i < count; i++)
        store(send, i, o->dtype, input(drt_rank(c), i));
    for (int i = 0; rc == 0 && i < o->warmup + o->iters; i++) {
        double t0;
        if (drt_barrier(c, err) < 0)
            rc = -1;
        t0 = now();
        if (rc < 0 || drt_allreduce(c, send, recv, count, o->dtype, o->op, err) < 0)
            rc = -1;
        else if (i >= o->warmup) {
            *seconds += now() - t0;
            *wrong += check(o, recv, count, n, 0);
        }
    }
    *seconds /= o->iters;
    free(send);
    free(recv);
    return rc;
}

/* One size: measure, then rank 0 prints the row (the slowest rank's time,
 * every rank's wrong elements). 1 when any was wrong. */
static int run_size(drt_comm_t *c, const opts_t *o, size_t bytes, double *busbw_sum, int *rows,
                    drt_error_t *err)
{
    size_t esize = drt_dtype_size(o->dtype), count = bytes / esize;
    int n = drt_size(c);
    double t = 0, tmax;
    long wrong = 0;

    if ((o->cuda ? gpu_measure(c, o, count, &t, &wrong, err)
                 : cpu_measure(c, o, count, &t, &wrong, err)) < 0)
        return -1;
    tmax = t;
    if (drt_allreduce(c, &t, &tmax, 1, DRT_FLOAT64, DRT_MAX, err) < 0 ||
        drt_allreduce(c, &wrong, &wrong, 1, DRT_INT64, DRT_SUM, err) < 0)
        return -1;
    if (drt_rank(c) == 0) {
        double algbw = (double)(count * esize) / tmax / 1e9, busbw = algbw * 2.0 * (n - 1) / n;
        printf("%12zu %12zu %9s %12.1f %11.3f %11.3f %8ld\n", count * esize, count, o->dtype_name,
               tmax * 1e6, algbw, busbw, wrong);
        fflush(stdout);
        *busbw_sum += busbw;
        (*rows)++;
    }
    return wrong ? 1 : 0;
}

static void header(drt_comm_t *c, const opts_t *o, const char *device)
{
    printf("# ddp-allreduce-bench: %d ranks on %d node%s (%d per node), algo %s, %s, op %s%s%s\n"
           "# %10s %12s %9s %12s %11s %11s %8s\n", drt_size(c), drt_node_count(c),
           drt_node_count(c) == 1 ? "" : "s", drt_local_size(c),
           o->nccl ? "ncclAllReduce" : drt_algo_name(o->algo), o->dtype_name, o->op_name,
           *device ? ", " : "", device, "size(B)", "count", "type", "time(us)", "algbw(GB/s)",
           "busbw(GB/s)", "#wrong");
}

static int fail_rank(drt_comm_t *c, const drt_error_t *err)
{
    fprintf(stderr, "ddp-allreduce-bench: rank %d: %s\n", drt_rank(c), err->text);
    gpu_close();
    drt_finalize(c);
    return 1;
}

int main(int argc, char **argv)
{
    opts_t o;
    drt_comm_t *c;
    drt_error_t err;
    double busbw = 0;
    int rows = 0, bad = 0;
    char device[400] = "";

    if (parse(argc, argv, &o) < 0)
        return 2;
    if (drt_init(&c, &err) < 0) {
        fprintf(stderr, "ddp-allreduce-bench: %s\n", err.text);
        return 1;
    }
    drt_set_algo(c, o.algo);
    if (o.cuda && gpu_open(c, &o, device, sizeof(device), &err) < 0)
        return fail_rank(c, &err);
    if (drt_rank(c) == 0)
        header(c, &o, device);
    for (double b = (double)o.min; b <= (double)o.max; b *= o.factor) {
        int rc = run_size(c, &o, (size_t)b, &busbw, &rows, &err);
        if (rc < 0)
            return fail_rank(c, &err);
        bad |= rc;
    }
    if (drt_rank(c) == 0)
        printf("# Avg bus bandwidth    : %.3f GB/s\n", rows ? busbw / rows : 0);
    gpu_close();
    drt_finalize(c);
    return bad ? 3 : 0;
}
