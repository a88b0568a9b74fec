/* SPDX-License-Identifier: Apache-2.0 */
/* Reference for tests/bench/allreduce-perf: Open MPI's MPI_Allreduce (float32
 * sum, out of place) measured the way ddp-allreduce-bench measures ours, so
 * the two columns compare like with like: the same inputs, 3 warm-up calls,
 * a barrier before every call, each call timed on its own and its result
 * checked (untimed), the slowest rank's mean time, busbw as nccl-tests
 * counts it. Then, for Open MPI's best case, the same calls back to back,
 * timed as a whole. Prints: bytes, time (us), busbw (GB/s), #wrong,
 * back-to-back busbw (GB/s). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define WARMUP 3
#define ITERS 20

static long check(const float *out, size_t count, int n)
{
    long wrong = 0;

    for (size_t i = 0; i < count; i++)
        wrong += out[i] != (float)((i % 7 + 1) * (size_t)n * (size_t)(n + 1) / 2);
    return wrong;
}

static double busbw(size_t bytes, double t, int n)
{
    return (double)bytes / t / 1e9 * 2.0 * (n - 1) / n;
}

int main(int argc, char **argv)
{
    int rank, n;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    for (int a = 1; a < argc; a++) {
        size_t bytes = strtoull(argv[a], NULL, 10), count = bytes / sizeof(float);
        float *buf = malloc(bytes), *out = malloc(bytes);
        double t = 0, t0, loop;
        long wrong = 0;

        if (!buf || !out) {
            fprintf(stderr, "mpi-allreduce-ref: out of memory at %zu bytes\n", bytes);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (size_t i = 0; i < count; i++)
            buf[i] = (float)((rank + 1) * (int)(i % 7 + 1));
        for (int i = 0; i < WARMUP + ITERS; i++) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
            MPI_Allreduce(buf, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            if (i >= WARMUP) {
                t += MPI_Wtime() - t0;
                wrong += check(out, count, n);
            }
        }
        t /= ITERS;
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        for (int i = 0; i < ITERS; i++)
            MPI_Allreduce(buf, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        loop = (MPI_Wtime() - t0) / ITERS;
        MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, &loop, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        if (rank == 0)
            printf("%zu %.1f %.3f %ld %.3f\n", bytes, t * 1e6, busbw(bytes, t, n), wrong,
                   busbw(bytes, loop, n));
        free(buf);
        free(out);
    }
    MPI_Finalize();
    return 0;
}
