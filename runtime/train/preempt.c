/* SPDX-License-Identifier: Apache-2.0 */
/* Preemption: a flag set by SIGUSR1 or SIGTERM. The handler does nothing
 * else (only async-signal-safe work is allowed there); the ranks agree on
 * it in drt_buckets_finish, which carries every rank's flag in its step
 * exchange, so all of them stop after the same step. A second SIGTERM is
 * the exception: it ends the process as SIGTERM's default action does, the
 * way out (for `timeout`, for an operator's second kill) when a rank
 * cannot get to the end of its step: blocked in a collective whose peer is
 * stopped, in a write nobody reads. */
#include "../internal.h"

#include <errno.h>
#include <signal.h>
#include <string.h>

static volatile sig_atomic_t seen, terms;

static void on_signal(int sig)
{
    if (sig == SIGTERM && terms++) {
        struct sigaction dfl;

        memset(&dfl, 0, sizeof(dfl));
        dfl.sa_handler = SIG_DFL;
        sigaction(SIGTERM, &dfl, NULL);
        /* SIGTERM is blocked while its handler runs: this one is
         * delivered, with the default action, when the handler returns */
        raise(SIGTERM);
        return;
    }
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
            return rt_fail(err, "cannot catch signal %d: %s", sigs[i], strerror(errno));
    return 0;
}

int drt_preempt_signal(void)
{
    return seen;
}
