/* SPDX-License-Identifier: Apache-2.0 */
/* A failed drt_init must leave the caller's descriptors alone: run with an
 * environment that makes it fail, then report whether stdin is still open
 * (it was closed once: the channel table started zeroed, so fd 0 looked
 * like a connection to rank 0). Prints the error and "stdin open|closed". */
#include "ddprt.h"

#include <fcntl.h>
#include <stdio.h>

int main(void)
{
    drt_comm_t *c;
    drt_error_t err;

    if (drt_init(&c, &err) == 0) {
        puts("drt_init succeeded; this test needs an environment that makes it fail");
        drt_finalize(c);
        return 2;
    }
    printf("%s\nstdin %s\n", err.text, fcntl(0, F_GETFD) < 0 ? "closed" : "open");
    return 0;
}
