/* Reference for tests/bench/allreduce-perf: Open MPI's MPI_Allreduce
 * (float32 sum, out of place like ddp-allreduce-bench) at the sizes given,
 * busbw as nccl-tests counts it. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank, n, iters = 20;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    for (int a = 1; a < argc; a++) {
        size_t bytes = strtoull(argv[a], NULL, 10), count = bytes / sizeof(float);
        float *buf = malloc(bytes), *out = malloc(bytes);
        double t0, t;
        for (size_t i = 0; i < count; i++)
            buf[i] = 1.0f;
        for (int w = 0; w < 3; w++)
            MPI_Allreduce(buf, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++)
            MPI_Allreduce(buf, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        t = (MPI_Wtime() - t0) / iters;
        MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (rank == 0)
            printf("%zu %.1f %.3f\n", bytes, t * 1e6, bytes / t / 1e9 * 2.0 * (n - 1) / n);
        free(buf);
        free(out);
    }
    MPI_Finalize();
    return 0;
}
