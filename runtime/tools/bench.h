/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-allreduce-bench: what its files share. bench.c (options, host side,
 * output) calls down into bench-gpu.c (--device cuda), and both into
 * bench-check.c (inputs, expected results, the check); nothing calls back
 * up. */
#ifndef DDP_BENCH_H
#define DDP_BENCH_H

#include <stddef.h>

#include "ddprt.h"

typedef struct {
    size_t min, max;
    double factor;
    int warmup, iters;
    drt_algo_t algo;
    drt_dtype_t dtype;
    drt_op_t op;
    const char *dtype_name, *op_name;
    int cuda; /* --device cuda */
    int nccl; /* --nccl: time ncclAllReduce on a communicator of our own */
} opts_t;

/* bench-check.c. Rank r's input element i, and the exact result over n
 * ranks. */
double input(int r, size_t i);
double expected(const opts_t *o, int n, size_t i);
void store(void *buf, size_t i, drt_dtype_t t, double v);
/* Elements of recv further from the expected result than 1e-9 plus rel
 * times its size times n (rel 0 on the host path: exact). */
long check(const opts_t *o, const void *recv, size_t count, int n, double rel);

/* bench-gpu.c. gpu_open: load CUDA and NCCL, attach the device, make the
 * stream (and with --nccl a communicator); describes it in desc. */
int gpu_open(drt_comm_t *c, const opts_t *o, char *desc, size_t len, drt_error_t *err);
/* Warm up, then run, time (CUDA events around each call) and check every
 * iteration: *seconds per call on average, *wrong elements in all. */
int gpu_measure(drt_comm_t *c, const opts_t *o, size_t count, double *seconds, long *wrong,
                drt_error_t *err);
void gpu_close(void);

#endif
