/* SPDX-License-Identifier: Apache-2.0 */
/* DRT_ALGO_AUTO: which allreduce algorithm for which message size.
 *
 * Per power-of-two size class, the first message times both algorithms (the
 * trial), later calls run the winner, and calls 256, 512, 1024, ... of the
 * class re-check the other one: the network a long run sees can change, and
 * a training loop makes thousands of calls. (Starting at call 64, 200 calls
 * of 4 KiB measured 1 % slower than hier alone: two fences, an agreement
 * and a run of the slower algorithm are a lot next to 60 us.)
 *
 * Every timing that enters a decision starts right after a fence. Without
 * one, a rank times its own lateness, and in back-to-back runs the rank that
 * arrives last finds its data waiting and times almost nothing (measured
 * here: unfenced trials made the slower algorithm look twice as fast).
 * Decisions compare the median of each algorithm's latest fenced runs, as
 * robust to one stalled run as to one lucky burst (the minimum is not: on a
 * shaped link, a run that finds the token bucket full looked 40% faster
 * than the algorithm ever was). The ranks agree on the slowest rank's view
 * (max), so all of them always choose alike.
 *
 * Flat and hier add the ranks' values in different orders, so the choice
 * shows in the result's last bits: a restarted run repeats a run's bits
 * only with its decisions (autostate.c carries them) and without re-checks
 * (drt_auto_pin), whose timing a restart cannot repeat. */
#include "../internal.h"

#include <stdlib.h>
#include <string.h>

#define RECHECK_FIRST 256 /* the first re-check, at this call of a size class */
#define SWITCH_MARGIN 0.9 /* switch when the other is at least 10% faster */

static auto_class_t *class_of(coll_set_t *s, size_t bytes)
{
    int b = 0;

    while (b < 63 && ((size_t)1 << (b + 1)) <= bytes)
        b++;
    return &s->sizes[b];
}

static int slot(drt_algo_t a)
{
    return a == DRT_ALGO_HIER;
}

static double median(const auto_class_t *k, int s)
{
    uint32_t n = k->n[s] < AUTO_SAMPLES ? k->n[s] : AUTO_SAMPLES;
    double v[AUTO_SAMPLES];

    memcpy(v, k->t[s], n * sizeof(double));
    for (uint32_t i = 1; i < n; i++) /* insertion sort: at most 8 values */
        for (uint32_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double tmp = v[j];
            v[j] = v[j - 1];
            v[j - 1] = tmp;
        }
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One fenced, timed run of a, recorded in the size class. */
static int fenced_run(coll_set_t *s, auto_class_t *k, drt_algo_t a, const coll_args_t *x,
                      drt_error_t *err)
{
    int i = slot(a);
    double t;

    if (s->ops->fence(s, err) < 0 || s->ops->timer_start(s, err) < 0 ||
        algo_run(s, a, x, err) < 0 || s->ops->timer_stop(s, &t, err) < 0)
        return -1;
    k->t[i][k->n[i]++ % AUTO_SAMPLES] = t;
    return 0;
}

/* times[] = the slowest rank's median flat and hier times */
static int agree(coll_set_t *s, const auto_class_t *k, double times[2], drt_error_t *err)
{
    times[0] = median(k, 0);
    times[1] = median(k, 1);
    return cpu_agree_max(s->c, times, 2, err);
}

/* A trial run before the last: out of place it reads the untouched send
 * buffer and overwrites the result buffer; in place it works on a copy of
 * the input, refreshed each time. */
static int scratch_run(coll_set_t *s, auto_class_t *k, drt_algo_t a, const coll_args_t *scratch,
                       const unsigned char *input, size_t bytes, drt_error_t *err)
{
    if (!scratch->src && s->ops->copy(s, scratch->buf, input, bytes, err) < 0)
        return -1;
    return fenced_run(s, k, a, scratch, err);
}

/* The first message of a size class: both algorithms, alternating (a
 * shaped or shared network favours whoever goes first), a discarded warm-up
 * round then 7 runs each up to 256 KiB, 3 up to 4 MiB, one above; the last
 * hier run gives the result. Only in place does it cost a copy of the
 * message. */
static int trial(coll_set_t *s, auto_class_t *k, const coll_args_t *x, drt_error_t *err)
{
    size_t bytes = x->count * x->esize;
    int reps = bytes <= (256u << 10) ? 8 : bytes <= (4u << 20) ? 4 : 1, rc = 0;
    unsigned char *copy = NULL;
    coll_args_t scratch = *x;
    double times[2];

    if (!x->src && !(copy = scratch.buf = s->ops->alloc(s, bytes, err)))
        return -1;
    for (int i = 0; rc == 0 && i < reps; i++) {
        rc = scratch_run(s, k, DRT_ALGO_FLAT, &scratch, x->buf, bytes, err);
        if (rc == 0 && i < reps - 1)
            rc = scratch_run(s, k, DRT_ALGO_HIER, &scratch, x->buf, bytes, err);
        if (i == 0 && reps > 1) /* warms caches and connections */
            k->n[0] = k->n[1] = 0;
    }
    if (copy)
        s->ops->release(s, copy);
    if (rc < 0 || fenced_run(s, k, DRT_ALGO_HIER, x, err) < 0 || agree(s, k, times, err) < 0)
        return -1;
    k->choice = times[1] < times[0] ? DRT_ALGO_HIER : DRT_ALGO_FLAT;
    rt_log(s->c, "auto: messages of %zu+ bytes: flat %.1f us, hier %.1f us: %s",
           (size_t)1 << (k - s->sizes), times[0] * 1e6, times[1] * 1e6,
           drt_algo_name((drt_algo_t)k->choice));
    return 0;
}

static int power_of_two_from(uint32_t n, uint32_t first)
{
    return n >= first && (n & (n - 1)) == 0;
}

/* A re-check takes two calls that each do their real work: the first runs
 * the other algorithm, the next the chosen one, both fenced and timed; then
 * the ranks agree and maybe switch. It costs two fences, a 16-byte
 * allreduce and the difference between the algorithms, no extra run. */
static int recheck(coll_set_t *s, auto_class_t *k, const coll_args_t *x, int second,
                   drt_error_t *err)
{
    drt_algo_t cur = (drt_algo_t)k->choice;
    drt_algo_t other = cur == DRT_ALGO_HIER ? DRT_ALGO_FLAT : DRT_ALGO_HIER;
    double times[2];
    int change;

    if (!second)
        return fenced_run(s, k, other, x, err);
    if (fenced_run(s, k, cur, x, err) < 0 || agree(s, k, times, err) < 0)
        return -1;
    change = times[slot(other)] < SWITCH_MARGIN * times[slot(cur)];
    rt_log(s->c, "auto: messages of %zu+ bytes: re-check at call %u: flat %.1f us, hier %.1f us "
           "(medians): %s %s", (size_t)1 << (k - s->sizes), k->calls - 1, times[0] * 1e6,
           times[1] * 1e6, change ? "switching to" : "keeping",
           drt_algo_name(change ? other : cur));
    if (change) {
        k->choice = other;
        k->calls = 0;
    }
    return 0;
}

/* With one node, or one rank per node, hier is the flat ring (the cost
 * model's T_H = T_F there): nothing to choose, no trial to pay for. */
int auto_allreduce(coll_set_t *s, const coll_args_t *x, drt_error_t *err)
{
    auto_class_t *k = class_of(s, x->count * x->esize);

    if (s->nnodes < 2 || s->node->n < 2 || !s->uniform)
        return algo_run(s, DRT_ALGO_FLAT, x, err);
    if (k->choice < 0)
        return trial(s, k, x, err);
    k->calls++;
    if (s->c->auto_pinned) /* drt_auto_pin: what a restarted run can replay */
        return algo_run(s, (drt_algo_t)k->choice, x, err);
    if (power_of_two_from(k->calls, RECHECK_FIRST))
        return recheck(s, k, x, 0, err);
    if (power_of_two_from(k->calls - 1, RECHECK_FIRST))
        return recheck(s, k, x, 1, err);
    return algo_run(s, (drt_algo_t)k->choice, x, err);
}
