/* SPDX-License-Identifier: Apache-2.0 */
/* gpumulti MODE: libddprt's GPU path, multi-rank, on the CUDA/NCCL stand-in
 * (tests/standin/README.md), under ddp-run or srun. Run by
 * tests/integration/gpu-standin.test, which says what each mode must print.
 * Every line is "rank R: MODE: ..."; the exit status is 0 only when the
 * mode's own checks held.
 *
 *   sweep ALGO     every dtype x op x count (0, 1, odd, 2^k+1, past the
 *                  pipelining threshold), in place and out of place, the
 *                  output poisoned first: "N checked, W wrong"
 *   buckets        a short training loop on host buckets and on device
 *                  buckets (drt_buckets_gpu): "max weight difference D"
 *   context        the devices this process made a context on
 *   warmup         the stand-in's connect waits in attach and after it
 *   fault          20 steps of allreduce + drt_gpu_sync (DDPRT_GPU_ALGO):
 *                  the first failure, how long its call took, finalize's
 *   faultreq       the same with drt_gpu_iallreduce + drt_test polling: the
 *                  longest single drt_test call
 *   order          NCCL loaded and used before drt_gpu_attach (as PyTorch
 *                  does), then hier past the threshold: the stand-in's
 *                  count of overlapping kernels of two communicators
 *   shrink         20 steps of allreduce + drt_gpu_sync; the rank whose
 *                  RANK is GPUMULTI_DIE SIGKILLs itself at step 3, the
 *                  survivors get DRT_ELOST, drt_shrink and go on with new
 *                  NCCL communicators: "world N -> M, S steps, W wrong";
 *                  with GPUMULTI_WAIT_STREAM=1 they first wait on their
 *                  stream, as a caller that ignores DRT_ELOST would:
 *                  "stream wait after the loss: T s" */
#include "config.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <math.h>
#include <signal.h>
#include <nccl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddprt.h"
#include "standin.h"

static int me, nranks;
static const char *mode = "?";

static struct {
    cudaError_t (*malloc)(void **, size_t);
    cudaError_t (*free)(void *);
    cudaError_t (*memcpy)(void *, const void *, size_t, enum cudaMemcpyKind);
    cudaError_t (*memcpy_async)(void *, const void *, size_t, enum cudaMemcpyKind, cudaStream_t);
    cudaError_t (*stream_create)(cudaStream_t *, unsigned);
    cudaError_t (*stream_destroy)(cudaStream_t);
    cudaError_t (*stream_sync)(cudaStream_t);
    ncclResult_t (*nccl_version)(int *);
    int (*stats)(struct ddp_standin_stats *);
} cu;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;

    printf("rank %d: %s: ", me, mode);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* the stand-in's functions, by dlsym on the file the runtime loads */
static int load(void)
{
    const char *file = getenv("DDPRT_CUDART_LIBRARY");
    void *h = file ? dlopen(file, RTLD_NOW | RTLD_LOCAL) : NULL;

    if (!h) {
        say("cannot load DDPRT_CUDART_LIBRARY=%s: %s", file ? file : "(unset)", dlerror());
        return -1;
    }
    *(void **)&cu.malloc = dlsym(h, "cudaMalloc");
    *(void **)&cu.free = dlsym(h, "cudaFree");
    *(void **)&cu.memcpy = dlsym(h, "cudaMemcpy");
    *(void **)&cu.memcpy_async = dlsym(h, "cudaMemcpyAsync");
    *(void **)&cu.stream_create = dlsym(h, "cudaStreamCreateWithFlags");
    *(void **)&cu.stream_destroy = dlsym(h, "cudaStreamDestroy");
    *(void **)&cu.stream_sync = dlsym(h, "cudaStreamSynchronize");
    *(void **)&cu.nccl_version = dlsym(h, "ncclGetVersion");
    *(void **)&cu.stats = dlsym(h, "ddp_standin_stats");
    if (!cu.malloc || !cu.free || !cu.memcpy || !cu.memcpy_async || !cu.stream_create ||
        !cu.stream_destroy || !cu.stream_sync || !cu.nccl_version || !cu.stats) {
        say("%s lacks a function this test calls (not the stand-in?)", file);
        return -1;
    }
    return 0;
}

static struct ddp_standin_stats stats(void)
{
    struct ddp_standin_stats s;

    memset(&s, 0, sizeof(s));
    cu.stats(&s);
    return s;
}

/* ---- values: small integers, exact in every type, as doubles ---- */

static double value(int rank, size_t i)
{
    return (double)(((unsigned)rank * 7u + (unsigned)(i % 1009) * 3u) % 11u) - 3.0;
}

static uint16_t to_bf16(float f)
{
    uint32_t u;

    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;

    memcpy(&f, &u, 4);
    return f;
}

/* IEEE half for the small values here (no subnormals, no overflow) */
static uint16_t to_f16(float f)
{
    uint32_t u, sign, mant;
    int exp;

    memcpy(&u, &f, 4);
    sign = (u >> 16) & 0x8000u;
    if ((u & 0x7fffffffu) == 0)
        return (uint16_t)sign;
    exp = (int)((u >> 23) & 0xff) - 127 + 15;
    mant = u & 0x7fffffu;
    if (exp <= 0)
        return (uint16_t)sign; /* below half's normal range: not used here */
    mant += 0xfffu + ((mant >> 13) & 1u);
    if (mant & 0x800000u) {
        mant = 0;
        exp++;
    }
    return (uint16_t)(sign | (uint32_t)exp << 10 | mant >> 13);
}

static float from_f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu, u;
    float f;

    u = exp == 0 && mant == 0 ? sign : sign | (exp - 15 + 127) << 23 | mant << 13;
    memcpy(&f, &u, 4);
    return f;
}

static void put(void *buf, drt_dtype_t t, size_t i, double v)
{
    switch (t) {
    case DRT_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case DRT_FLOAT64: ((double *)buf)[i] = v; break;
    case DRT_BFLOAT16: ((uint16_t *)buf)[i] = to_bf16((float)v); break;
    case DRT_FLOAT16: ((uint16_t *)buf)[i] = to_f16((float)v); break;
    case DRT_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case DRT_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    }
}

static double get(const void *buf, drt_dtype_t t, size_t i)
{
    switch (t) {
    case DRT_FLOAT32: return ((const float *)buf)[i];
    case DRT_FLOAT64: return ((const double *)buf)[i];
    case DRT_BFLOAT16: return from_bf16(((const uint16_t *)buf)[i]);
    case DRT_FLOAT16: return from_f16(((const uint16_t *)buf)[i]);
    case DRT_INT32: return ((const int32_t *)buf)[i];
    case DRT_INT64: return (double)((const int64_t *)buf)[i];
    }
    return NAN;
}

static double expected(drt_dtype_t t, drt_op_t op, size_t i)
{
    double r = value(0, i);

    for (int k = 1; k < nranks; k++) {
        double v = value(k, i);
        r = op == DRT_MIN ? fmin(r, v) : op == DRT_MAX ? fmax(r, v) : r + v;
    }
    if (op != DRT_AVG)
        return r;
    return t == DRT_INT32 || t == DRT_INT64 ? trunc(r / nranks) : r / nranks;
}

/* how far a result may be from exact: only averages of floats round */
static double slack(drt_dtype_t t, drt_op_t op)
{
    if (op != DRT_AVG)
        return 0;
    return t == DRT_BFLOAT16 ? 0.1 : t == DRT_FLOAT16 ? 0.02 : t == DRT_FLOAT32 ? 1e-5 : 1e-12;
}

/* ---- sweep ---- */

static const char *const type_names[] = {"float32", "float64", "bfloat16",
                                         "float16", "int32",   "int64"};
static const char *const op_names[] = {"sum", "avg", "min", "max"};

/* one allreduce of count elements on device buffers; wrong elements */
static long one(drt_comm_t *c, cudaStream_t s, drt_dtype_t t, drt_op_t op, size_t count,
                int in_place, unsigned char *host, void *dsend, void *drecv, long *checked)
{
    size_t es = drt_dtype_size(t), bytes = count * es;
    drt_error_t err;
    long wrong = 0;

    for (size_t i = 0; i < count; i++)
        put(host, t, i, value(me, i));
    if (bytes && cu.memcpy(in_place ? drecv : dsend, host, bytes, cudaMemcpyHostToDevice))
        return say("cudaMemcpy to the device failed"), 1;
    if (!in_place) {
        memset(host, 0x7f, bytes); /* poison: only the result may overwrite it */
        if (bytes && cu.memcpy(drecv, host, bytes, cudaMemcpyHostToDevice))
            return 1;
    }
    if (drt_gpu_allreduce(c, in_place ? drecv : dsend, drecv, count, t, op, s, &err) < 0 ||
        drt_gpu_sync(c, s, &err) < 0) {
        say("%s %s %zu %s: %s", type_names[t], op_names[op], count,
            in_place ? "in place" : "out of place", err.text);
        return 1;
    }
    if (bytes && cu.memcpy(host, drecv, bytes, cudaMemcpyDeviceToHost))
        return say("cudaMemcpy from the device failed"), 1;
    for (size_t i = 0; i < count; i++) {
        double got = get(host, t, i), want = expected(t, op, i);
        if (!(fabs(got - want) <= slack(t, op))) {
            if (wrong++ < 3)
                say("%s %s count %zu %s: element %zu is %g, not %g", type_names[t], op_names[op],
                    count, in_place ? "in place" : "out of place", i, got, want);
        }
    }
    (*checked)++;
    return wrong;
}

/* the large count only for some pairs: it is the pipelining's size */
static int large_for(drt_dtype_t t, drt_op_t op)
{
    return (t == DRT_FLOAT32 && op == DRT_SUM) || (t == DRT_BFLOAT16 && op == DRT_AVG) ||
           (t == DRT_FLOAT64 && op == DRT_MIN) || (t == DRT_INT64 && op == DRT_MAX);
}

static int sweep(drt_comm_t *c, const char *algo)
{
    static const size_t counts[] = {0, 1, 7, 1001, (1u << 12) + 1, (1u << 20) + 3};
    const size_t ncounts = sizeof(counts) / sizeof(counts[0]), most = counts[ncounts - 1];
    drt_algo_t a;
    cudaStream_t s;
    void *dsend, *drecv;
    unsigned char *host = malloc(most * 8);
    long wrong = 0, checked = 0;

    if (drt_algo_parse(algo, &a) < 0 || !host)
        return say("bad algorithm %s", algo), 1;
    drt_gpu_set_algo(c, a);
    if (cu.stream_create(&s, cudaStreamNonBlocking) || cu.malloc(&dsend, most * 8) ||
        cu.malloc(&drecv, most * 8))
        return say("cannot set up device buffers"), 1;
    for (int t = 0; t < 6; t++)
        for (int op = 0; op < 4; op++)
            for (size_t k = 0; k < ncounts; k++)
                for (int in_place = 0; in_place < 2; in_place++)
                    if (k + 1 < ncounts || large_for((drt_dtype_t)t, (drt_op_t)op))
                        wrong += one(c, s, (drt_dtype_t)t, (drt_op_t)op, counts[k], in_place,
                                     host, dsend, drecv, &checked);
    say("%s: %ld checked, %ld wrong", algo, checked, wrong);
    cu.free(dsend);
    cu.free(drecv);
    cu.stream_destroy(s);
    free(host);
    return wrong != 0;
}

/* ---- buckets: the same loop on host and device buckets ---- */

#define NGRAD 3
static const size_t grad_count[NGRAD] = {4096, 300007, 17};

/* the gradient of 0.5 (w - target)^2, the target this rank's data */
static void gradient(float *g, const float *w, int j, int step)
{
    for (size_t i = 0; i < grad_count[j]; i++)
        g[i] = w[i] - (float)value(me + step, i + (size_t)j);
}

/* steps of SGD on w[NGRAD]; dev: device buckets on stream s */
static int train(drt_comm_t *c, int dev, cudaStream_t s, float *w[NGRAD], drt_error_t *err)
{
    drt_buckets_t *b;
    float *g[NGRAD], *dg[NGRAD] = {0};
    int rc = -1;

    if (drt_buckets_create(c, 256 << 10, 16 << 10, DRT_AVG, &b, err) < 0)
        return -1;
    if (dev && drt_buckets_gpu(b, s, err) < 0)
        goto out;
    for (int j = 0; j < NGRAD; j++) {
        g[j] = calloc(grad_count[j], sizeof(float));
        if (dev && cu.malloc((void **)&dg[j], grad_count[j] * sizeof(float)))
            goto out;
        if (drt_buckets_add(b, dev ? (void *)dg[j] : (void *)g[j], grad_count[j], DRT_FLOAT32,
                            err) < 0)
            goto out;
    }
    for (int step = 0; step < 5; step++) {
        if (drt_buckets_begin(b, err) < 0)
            goto out;
        for (int j = NGRAD - 1; j >= 0; j--) { /* backward: the last layer first */
            gradient(g[j], w[j], j, step);
            if (dev && cu.memcpy_async(dg[j], g[j], grad_count[j] * sizeof(float),
                                       cudaMemcpyHostToDevice, s))
                goto out;
            if (drt_buckets_ready(b, j, err) < 0)
                goto out;
        }
        if (drt_buckets_finish(b, NULL, err) < 0 || (dev && drt_gpu_sync(c, s, err) < 0))
            goto out;
        for (int j = 0; j < NGRAD; j++) {
            if (dev && cu.memcpy(g[j], dg[j], grad_count[j] * sizeof(float),
                                 cudaMemcpyDeviceToHost))
                goto out;
            for (size_t i = 0; i < grad_count[j]; i++)
                w[j][i] -= 0.1f * g[j][i];
        }
    }
    rc = 0;
out:
    drt_buckets_free(b);
    for (int j = 0; j < NGRAD; j++) {
        free(g[j]);
        if (dg[j])
            cu.free(dg[j]);
    }
    return rc;
}

static int buckets(drt_comm_t *c)
{
    float *w[2][NGRAD];
    double diff = 0;
    cudaStream_t s;
    drt_error_t err;

    if (cu.stream_create(&s, cudaStreamNonBlocking))
        return say("cannot create a stream"), 1;
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < NGRAD; j++)
            w[k][j] = calloc(grad_count[j], sizeof(float));
    if (train(c, 0, NULL, w[0], &err) < 0 || train(c, 1, s, w[1], &err) < 0)
        return say("%s", err.text), 1;
    for (int j = 0; j < NGRAD; j++)
        for (size_t i = 0; i < grad_count[j]; i++)
            diff = fmax(diff, fabs((double)w[0][j][i] - (double)w[1][j][i]));
    say("max weight difference %g between host and device buckets (%s)", diff,
        diff <= 1e-6 ? "ok" : "WRONG");
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < NGRAD; j++)
            free(w[k][j]);
    cu.stream_destroy(s);
    return diff > 1e-6;
}

/* ---- what the stand-in saw ---- */

static int context(drt_comm_t *c)
{
    struct ddp_standin_stats st = stats();
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    char list[256] = "";
    int want = drt_gpu_device(c), bad = 0;

    /* the stand-in counts physical devices: the ordinal's entry */
    for (int i = 0; vis && *vis && i <= drt_gpu_device(c); i++, vis = strchr(vis, ',') ? strchr(vis, ',') + 1 : "")
        want = atoi(vis);

    for (int d = 0; d < 64; d++)
        if (st.contexts[d]) {
            snprintf(list + strlen(list), sizeof(list) - strlen(list), " dev%d=%d", d,
                     st.contexts[d]);
            bad |= d != want;
        }
    say("contexts%s (%s)", list, bad || !st.contexts[want] ? "WRONG" : "ok");
    return bad;
}

/* connect waits: in the attach (the warm-up), then in the first flat and
 * hier allreduces (none, when the warm-up did its job) */
static int warmup(drt_comm_t *c, long in_attach)
{
    cudaStream_t s;
    void *d;
    drt_error_t err;
    long after;

    if (cu.stream_create(&s, cudaStreamNonBlocking) || cu.malloc(&d, 4096 * sizeof(float)))
        return say("cannot set up device buffers"), 1;
    drt_gpu_set_algo(c, DRT_ALGO_FLAT);
    if (drt_gpu_allreduce(c, d, d, 4096, DRT_FLOAT32, DRT_SUM, s, &err) < 0)
        return say("%s", err.text), 1;
    drt_gpu_set_algo(c, DRT_ALGO_HIER);
    if (drt_gpu_allreduce(c, d, d, 4096, DRT_FLOAT32, DRT_SUM, s, &err) < 0 ||
        drt_gpu_sync(c, s, &err) < 0)
        return say("%s", err.text), 1;
    after = stats().connect_waits - in_attach;
    say("connect waits: %ld in drt_gpu_attach, %ld after it (%s)", in_attach, after,
        after == 0 ? "ok" : "WRONG");
    cu.free(d);
    cu.stream_destroy(s);
    return after != 0;
}

/* ---- faults: the first failure, and how long its call took ---- */

static int fault(drt_comm_t *c, int requests)
{
    cudaStream_t s;
    void *d;
    drt_error_t err;
    double longest = 0, t0 = 0;
    int step, rc = 0;

    if (cu.stream_create(&s, cudaStreamNonBlocking) || cu.malloc(&d, 4096 * sizeof(float)))
        return say("cannot set up device buffers"), 1;
    for (step = 1; step <= 20 && rc == 0; step++) {
        drt_request_t *req = NULL;
        int done = 0;
        t0 = now();
        if (!requests) {
            rc = drt_gpu_allreduce(c, d, d, 4096, DRT_FLOAT32, DRT_SUM, s, &err);
            if (rc == 0)
                rc = drt_gpu_sync(c, s, &err);
            continue;
        }
        rc = drt_gpu_iallreduce(c, d, d, 4096, DRT_FLOAT32, DRT_SUM, s, &req, &err);
        while (rc == 0 && !done) {
            double t = now();
            rc = drt_test(req, &done, &err);
            longest = fmax(longest, now() - t);
        }
        if (req)
            drt_wait(req, rc == 0 ? &err : &(drt_error_t){{0}});
    }
    if (rc == 0)
        say("no failure in 20 steps");
    else
        say("step %d failed after %.1f s: %s", step - 1, now() - t0, err.text);
    if (requests)
        say("longest drt_test call %.2f s", longest);
    cu.free(d);
    cu.stream_destroy(s);
    return rc == 0; /* the failure is what this mode expects */
}

/* ---- a lost rank: shrink and go on ---- */

/* one step: every rank adds its first RANK + 1; the sum over the members */
static int shrink_step(drt_comm_t *c, cudaStream_t s, float *d, const int *orig, int *wrong,
                       drt_error_t *err)
{
    float h[256], want = 0;
    int rc;

    for (int i = 0; i < drt_size(c); i++)
        want += (float)(orig[i] + 1);
    for (int i = 0; i < 256; i++)
        h[i] = (float)(me + 1);
    if (cu.memcpy(d, h, sizeof(h), cudaMemcpyHostToDevice))
        return say("cudaMemcpy failed"), -1;
    if ((rc = drt_gpu_allreduce(c, d, d, 256, DRT_FLOAT32, DRT_SUM, s, err)) < 0 ||
        (rc = drt_gpu_sync(c, s, err)) < 0)
        return rc;
    if (cu.memcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost))
        return say("cudaMemcpy failed"), -1;
    for (int i = 0; i < 256; i++)
        *wrong += h[i] != want;
    return 0;
}

static int shrink(drt_comm_t *c)
{
    const char *die = getenv("GPUMULTI_DIE");
    int n0 = drt_size(c), orig[64], wrong = 0, steps = 0, rc = 0;
    cudaStream_t s;
    drt_error_t err;
    float *d;

    for (int i = 0; i < n0 && i < 64; i++)
        orig[i] = i;
    if (n0 > 64 || cu.stream_create(&s, cudaStreamNonBlocking) ||
        cu.malloc((void **)&d, 256 * sizeof(float)))
        return say("cannot set up device buffers"), 1;
    while (steps < 20 && rc == 0) {
        drt_shrink_info_t in;
        if (steps == 3 && die && atoi(die) == me)
            raise(SIGKILL);
        if ((rc = shrink_step(c, s, d, orig, &wrong, &err)) == 0) {
            steps++;
            continue;
        }
        if (rc == DRT_ELOST && getenv("GPUMULTI_WAIT_STREAM")) {
            double t0 = now();
            cu.stream_sync(s); /* its collective's kernel waits for the dead rank */
            say("stream wait after the loss: %.1f s", now() - t0);
        }
        if (rc != DRT_ELOST || drt_shrink(c, &in, &err) < 0)
            break;
        for (int i = 0; i < in.new_size; i++)
            orig[i] = orig[in.old_rank_of[i]];
        /* a survivor the dead rank's last bytes reached is a step ahead: go on
         * from the least advanced one's step */
        int64_t v = steps;
        if ((rc = drt_allreduce(c, &v, &v, 1, DRT_INT64, DRT_MIN, &err)) < 0)
            break;
        steps = (int)v;
    }
    if (rc)
        say("failed (rc %d): %s", rc, err.text);
    else
        say("world %d -> %d, %d steps, %d wrong", n0, drt_size(c), steps, wrong);
    cu.free(d);
    cu.stream_destroy(s);
    return rc || wrong;
}

/* ---- NCCL loaded and used first, as PyTorch does ---- */

static int order_preloaded(void)
{
    int v = 0;

    if (load() < 0 || cu.nccl_version(&v) != ncclSuccess)
        return say("ncclGetVersion before attach failed"), -1;
    return 0;
}

static int order(drt_comm_t *c)
{
    int rc = sweep(c, "hier");
    struct ddp_standin_stats st = stats();

    say("cross-communicator kernel overlaps %ld", st.cross_comm_overlaps);
    return rc || st.cross_comm_overlaps != 0;
}

int main(int argc, char **argv)
{
    drt_comm_t *c;
    drt_error_t err;
    long waits = 0;
    double t0;
    int rc;

    setvbuf(stdout, NULL, _IOLBF, 0);
    mode = argc > 1 ? argv[1] : "?";
    if (!strncmp(mode, "fault", 5)) /* a survivor: ddp-run's SIGTERM must not end it first */
        signal(SIGTERM, SIG_IGN);
    me = atoi(getenv("RANK") ? getenv("RANK") : "0");
    if (!strcmp(mode, "order") && order_preloaded() < 0)
        return 1;
    if (drt_init(&c, &err) < 0)
        return say("drt_init: %s", err.text), 1;
    me = drt_rank(c);
    nranks = drt_size(c);
    if (getenv("GPUMULTI_NO_ATTACH") && me == 1) { /* a peer busy elsewhere */
        struct timespec ts = {(time_t)atoi(getenv("DDPRT_TIMEOUT") ? getenv("DDPRT_TIMEOUT") : "5") + 3, 0};
        nanosleep(&ts, NULL);
        drt_finalize(c);
        return 0;
    }
    t0 = now();
    if (drt_gpu_attach(c, -1, &err) < 0) {
        say("attach failed after %.1f s: %s", now() - t0, err.text);
        drt_finalize(c);
        return strncmp(mode, "fault", 5) != 0; /* the fault modes expect failures */
    }
    /* only now: a library loaded before attach counts as PyTorch's */
    if (!cu.malloc && load() < 0)
        return 1;
    waits = stats().connect_waits;
    if (!strcmp(mode, "sweep"))
        rc = sweep(c, argc > 2 ? argv[2] : "flat");
    else if (!strcmp(mode, "buckets"))
        rc = buckets(c);
    else if (!strcmp(mode, "context"))
        rc = sweep(c, "hier") | context(c);
    else if (!strcmp(mode, "warmup"))
        rc = warmup(c, waits);
    else if (!strcmp(mode, "fault") || !strcmp(mode, "faultreq"))
        rc = fault(c, !strcmp(mode, "faultreq"));
    else if (!strcmp(mode, "order"))
        rc = order(c);
    else if (!strcmp(mode, "shrink"))
        rc = shrink(c);
    else
        rc = (say("unknown mode (sweep ALGO, buckets, context, warmup, fault, faultreq, order, "
                  "shrink)"), 2);
    t0 = now();
    drt_finalize(c);
    say("finalize %.1f s", now() - t0);
    return rc;
}
