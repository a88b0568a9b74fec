/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-check: one rank's row (its findings) and what the rows say about the
 * nodes. A row crosses the wire twice, to rank 0 in the MASTER_PORT probe
 * and to every rank in the allgather, both authenticated; still every
 * receiver checks it before use (ck_rank_parse): rank 0 prints its text in
 * lines a drain script reads, and another node's ddp-check may be another
 * version. */
#include "config.h"
#include "check.h"

#include <arpa/inet.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Appends one finding to `checked`; the first failure is also the problem. */
void ck_note(ck_rank_t *me, int failed, const char *fmt, ...)
{
    char text[CK_TEXT];
    size_t used = strlen(me->checked), len;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    len = strlen(text);
    /* what does not fit is marked, never cut silently: the problem is whole */
    if (used + 2 + len < sizeof(me->checked))
        sprintf(me->checked + used, "%s%s", used ? ", " : "", text);
    else if (used + 5 < sizeof(me->checked) && !strstr(me->checked, "..."))
        strcpy(me->checked + used, ", ...");
    if (failed && !me->problem[0])
        snprintf(me->problem, sizeof(me->problem), "%s", text);
    me->fail |= failed != 0;
}

/* 0 when s ends within its array; control characters become '?', so that
 * what a rank says stays on its own line of rank 0's output */
static int text_ok(char *s, size_t size)
{
    char *end = memchr(s, '\0', size);

    if (!end)
        return -1;
    for (; s < end; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
    return 0;
}

/* a measurement: a finite figure, or -1 for none */
static int figure_ok(double x)
{
    return isfinite(x) && (x >= 0 || x == -1);
}

static int host_ok(const char *host)
{
    if (!host[0])
        return 0;
    for (; *host; host++)
        if ((unsigned char)*host <= ' ' || (unsigned char)*host >= 0x7f)
            return 0; /* the node's name is one word of the node lines */
    return 1;
}

int ck_rank_parse(const void *wire, size_t len, uint32_t rank, uint32_t world, uint32_t nodes,
                  ck_rank_t *out, char *why, size_t whylen)
{
    const char *bad = NULL;

    if (len != sizeof(*out)) {
        snprintf(why, whylen, "rank %u's row: %zu bytes, not %zu", rank, len, sizeof(*out));
        return -1;
    }
    memcpy(out, wire, sizeof(*out));
    if (out->magic != CK_ROW_MAGIC)
        bad = "not a row of this ddp-check";
    else if (out->rank != rank || rank >= world)
        bad = "the row is another rank's";
    else if (out->node >= nodes || out->local >= world || out->fail > 1)
        bad = "its node, local rank or verdict is out of range";
    else if (text_ok(out->host, sizeof(out->host)) < 0 ||
             text_ok(out->checked, sizeof(out->checked)) < 0 ||
             text_ok(out->problem, sizeof(out->problem)) < 0)
        bad = "its text does not end";
    else if (!host_ok(out->host))
        bad = "its host name is empty or not one printable word";
    else if (out->fail && !out->problem[0])
        bad = "it failed without saying why";
    else if (!figure_ok(out->node_gbps) || !figure_ok(out->node_pred) ||
             !figure_ok(out->link_gbps) || !(isfinite(out->link_pred) && out->link_pred >= 0))
        bad = "a measurement is not a number";
    if (!bad)
        return 0;
    snprintf(why, whylen, "rank %u's row: %s", rank, bad);
    return -1;
}

int ck_is_loopback(uint32_t ip)
{
    return (ntohl(ip) >> 24) == 127;
}

/* The nodes are one machine when they share its host name (ddp-run's
 * emulated nodes), or when each node's name resolves to a loopback address
 * of its own (the test cluster, each node on its own 127.0.1.X). */
int ck_one_machine(const ck_rank_t *all, int size)
{
    int same = 1;

    for (int r = 1; r < size; r++)
        same &= !strcmp(all[r].host, all[0].host);
    if (same)
        return 1;
    for (int r = 0; r < size; r++) {
        if (!all[r].host_ip || !ck_is_loopback(all[r].host_ip))
            return 0;
        for (int q = 0; q < r; q++)
            if ((all[q].node == all[r].node) != (all[q].host_ip == all[r].host_ip))
                return 0;
    }
    return 1;
}

/* Nodes' own addresses are usable when every node's name resolves to one
 * that is not loopback, or when the nodes are one machine. Else the
 * runtime's addresses (Debian maps a host's own name to 127.0.1.1). */
int ck_host_addresses(const ck_rank_t *all, int size)
{
    for (int r = 0; r < size; r++)
        if (!all[r].host_ip || ck_is_loopback(all[r].host_ip))
            return ck_one_machine(all, size);
    return 1;
}
