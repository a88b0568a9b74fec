/* SPDX-License-Identifier: Apache-2.0 */
/* DRT_ALGO_AUTO's decisions across a restart (drt_auto_state, _restore,
 * _pin; ddp-train keeps them in its checkpoints).
 *
 * A run resumed from a checkpoint would otherwise measure afresh: its
 * first message of each size class runs the trial (whose result is hier's)
 * and its re-checks fall on other calls than the first run's, so the
 * weights differed in their last bits from an uninterrupted run's. The
 * state is text, one header naming the layout the decisions were measured
 * on, then one line per decided size class, smallest message first:
 *
 *     ddprt-auto 1 ranks 4 nodes 2 local 2
 *     65536 hier 410
 *
 * (the class's smallest message in bytes, the algorithm, its calls since
 * the choice). Only the host-buffer set's (c->cpu): the GPU set is made
 * on first use, after a restart has restored. */
#include "../internal.h"

#include <stdio.h>
#include <string.h>

#define STATE_VERSION 1
#define CLASSES 64 /* coll_set_t's sizes[] */

/* local 0 where nodes differ: auto runs flat there, and every rank then
 * writes the same header */
static int header(const drt_comm_t *c, char *buf, size_t len)
{
    return snprintf(buf, len, "ddprt-auto %d ranks %d nodes %d local %d\n", STATE_VERSION, c->size,
                    c->nnodes, c->uniform ? c->node.n : 0);
}

int drt_auto_state(const drt_comm_t *c, void *buf, size_t *len, drt_error_t *err)
{
    char text[DRT_AUTO_STATE_MAX];
    size_t n = (size_t)header(c, text, sizeof(text)), have = *len;

    for (int b = 0; b < CLASSES; b++) {
        const auto_class_t *k = &c->cpu.sizes[b];
        if (k->choice >= 0)
            n += (size_t)snprintf(text + n, sizeof(text) - n, "%zu %s %u\n", (size_t)1 << b,
                                  drt_algo_name((drt_algo_t)k->choice), k->calls);
    }
    *len = n;
    if (!buf || have < n)
        return rt_fail(err, "auto state: %zu bytes, the buffer holds %zu (give it DRT_AUTO_STATE_MAX)",
                       n, buf ? have : 0);
    memcpy(buf, text, n);
    return 0;
}

/* every rank holds the same bytes: the slowest rank's view (max) of the
 * hash and of its negation is everyone's own only when all are equal */
static int same_everywhere(drt_comm_t *c, const void *buf, size_t len, drt_error_t *err)
{
    const unsigned char *p = buf;
    uint64_t h = 1469598103934665603ull;
    double hi, lo, v[4];

    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    hi = (double)(h >> 32); /* halves: a double holds 32 bits exactly */
    lo = (double)(h & 0xffffffffu);
    v[0] = hi;
    v[1] = lo;
    v[2] = -hi;
    v[3] = -lo;
    if (cpu_agree_max(c, v, 4, err) < 0)
        return -1;
    if (v[0] != hi || v[1] != lo || v[2] != -hi || v[3] != -lo)
        return rt_fail(err, "auto state: the ranks were given different decisions (pass every rank "
                       "the same bytes, e.g. broadcast from one rank)");
    return 0;
}

/* One class line into classes[]; only the canonical form drt_auto_state
 * writes is accepted (the state is input, like a checkpoint). */
static int parse_class(const char *line, auto_class_t *classes, int *last, drt_error_t *err)
{
    char name[8], again[96];
    size_t bytes;
    unsigned calls;
    drt_algo_t a;
    int b = 0;

    if (sscanf(line, "%zu %7s %u", &bytes, name, &calls) == 3) {
        snprintf(again, sizeof(again), "%zu %s %u", bytes, name, calls);
        while (b < CLASSES - 1 && ((size_t)1 << b) < bytes)
            b++;
        if (!strcmp(again, line) && bytes == (size_t)1 << b && b > *last &&
            drt_algo_parse(name, &a) == 0 && a != DRT_ALGO_AUTO) {
            classes[b].choice = (int)a;
            classes[b].calls = calls;
            *last = b;
            return 0;
        }
    }
    return rt_fail(err, "auto state: '%.60s' is not '<bytes, a power of two, ascending> flat|hier "
                   "<calls>' (pass drt_auto_state's bytes unchanged)", line);
}

/* 1: another layout's (nothing parsed further) */
static int parse(const drt_comm_t *c, char *text, auto_class_t *classes, drt_error_t *err)
{
    char mine[96], *line, *end = strchr(text, '\n');
    int last = -1, version = 0;

    header(c, mine, sizeof(mine));
    if (!end || sscanf(text, "ddprt-auto %d ", &version) != 1)
        return rt_fail(err, "auto state: no 'ddprt-auto' header (pass drt_auto_state's bytes unchanged)");
    if (version != STATE_VERSION)
        return rt_fail(err, "auto state: version %d, this library reads %d (let auto decide afresh)",
                       version, STATE_VERSION);
    if (strncmp(text, mine, strlen(mine)))
        return 1;
    for (line = end + 1; *line; line = end + 1) {
        if (!(end = strchr(line, '\n')))
            return rt_fail(err, "auto state: the last line is cut off (pass drt_auto_state's bytes "
                           "unchanged)");
        *end = 0;
        if (parse_class(line, classes, &last, err) < 0)
            return -1;
    }
    return 0;
}

int drt_auto_restore(drt_comm_t *c, const void *buf, size_t len, drt_error_t *err)
{
    char text[DRT_AUTO_STATE_MAX + 1];
    auto_class_t classes[CLASSES];
    int rc, applied = 0;

    if (same_everywhere(c, buf, len, err) < 0)
        return -1;
    if (len > DRT_AUTO_STATE_MAX || memchr(buf, 0, len))
        return rt_fail(err, "auto state: %s (pass drt_auto_state's bytes unchanged)",
                       len > DRT_AUTO_STATE_MAX ? "longer than DRT_AUTO_STATE_MAX" : "holds a NUL byte");
    memcpy(text, buf, len);
    text[len] = 0;
    memset(classes, 0, sizeof(classes));
    for (int b = 0; b < CLASSES; b++)
        classes[b].choice = -1;
    if ((rc = parse(c, text, classes, err)) != 0)
        return rc;
    memcpy(c->cpu.sizes, classes, sizeof(classes));
    for (int b = 0; b < CLASSES; b++) /* each said, so a log shows what the run replays */
        if (classes[b].choice >= 0) {
            applied++;
            rt_log(c, "auto: restored: messages of %zu+ bytes: %s", (size_t)1 << b,
                   drt_algo_name((drt_algo_t)classes[b].choice));
        }
    rt_log(c, "auto: %d size class decision%s restored", applied, applied == 1 ? "" : "s");
    return 0;
}

void drt_auto_pin(drt_comm_t *c, int on)
{
    c->auto_pinned = on != 0;
}
