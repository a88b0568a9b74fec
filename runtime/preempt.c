/* SPDX-License-Identifier: Apache-2.0 */
/* Preemption: a flag set by SIGUSR1 or SIGTERM. The handler does nothing
 * else (only async-signal-safe work is allowed there); the ranks agree on
 * it in drt_buckets_finish, which carries every rank's flag in its step
 * exchange, so all of them stop after the same step. */
#include "internal.h"

#include <errno.h>
#include <signal.h>
#include <string.h>

static volatile sig_atomic_t seen;

static void on_signal(int sig)
{
    seen = sig;
}

int drt_preempt_watch(drt_error_t *err)
{
    static const int sigs[] = {SIGUSR1, SIGTERM};
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* SA_RESTART: a signal during a transfer's poll or write must not turn
     * into a failed collective */
    sa.sa_flags = SA_RESTART;
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        if (sigaction(sigs[i], &sa, NULL) < 0)
            return drt_fail(err, "cannot catch signal %d: %s", sigs[i], strerror(errno));
    return 0;
}

int drt_preempt_signal(void)
{
    return seen;
}
