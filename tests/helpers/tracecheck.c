/* SPDX-License-Identifier: Apache-2.0 */
/* The flight recorder's mismatched collective (trace.test): every rank
 * runs 6 allreduces of 100000 floats, but rank R (argv[1]) gives 1000 in
 * the fourth, as a rank whose code took another path would. Whatever the
 * runtime makes of it (an error or a timeout), each rank's dump holds
 * the fourth as it issued it. Prints each call's status; exits 1 when one
 * failed. */
#include "ddprt.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    static float buf[100000];
    drt_comm_t *c;
    drt_error_t err;
    int odd = argc > 1 ? atoi(argv[1]) : 1, rc = 0;

    if (drt_init(&c, &err) < 0) {
        fprintf(stderr, "tracecheck: %s\n", err.text);
        return 1;
    }
    for (int i = 0; i < 6 && rc == 0; i++) {
        size_t n = i == 3 && drt_rank(c) == odd ? 1000 : 100000;
        rc = drt_allreduce(c, buf, buf, n, DRT_FLOAT32, DRT_SUM, &err);
        printf("rank %d: allreduce %d of %zu: %s\n", drt_rank(c), i + 1, n,
               rc == 0 ? "ok" : err.text);
    }
    drt_finalize(c);
    return rc != 0;
}
