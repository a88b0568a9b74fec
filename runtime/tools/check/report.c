/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-check: rank 0's table, one row per node, and the verdicts. A node is
 * named when one of its ranks failed a check, or when its node group or its
 * link measured under half the median of its peers. Each named node also
 * gets a line of its own for scripts (a drain script, docs/admins.md):
 *   ddp-topo check: node NAME FAIL: rank R: WHY     (or SLOW: WHAT)
 * NAME one word, the verdict the rest of the line (ddp-check(1), OUTPUT),
 * also when the ranks never met and only the probes' rows are known. */
#include "config.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptopo.h"

typedef struct {
    int first;           /* its first rank: the row's name and "checked" */
    int failed;          /* a rank whose check failed, -1 none */
    unsigned ranks;
    double node, node_pred, link, link_pred; /* the node's slowest rank; < 0 none */
} ck_node_t;

/* what the nodes came to: the bad ones named while they fit, then "..." */
typedef struct {
    int bad;
    char named[512];
} ck_named_t;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* the median of the values >= 0 (the nodes that measured), -1 for none */
static double median(const ck_node_t *nodes, int n, int link)
{
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1)), m = -1;
    int k = 0;

    for (int i = 0; v && i < n; i++)
        if ((link ? nodes[i].link : nodes[i].node) >= 0)
            v[k++] = link ? nodes[i].link : nodes[i].node;
    if (k) {
        qsort(v, (size_t)k, sizeof(double), cmp_double);
        m = k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
    }
    free(v);
    return m;
}

static double slowest(double have, double x)
{
    return x >= 0 && (have < 0 || x < have) ? x : have;
}

/* The rows into one entry per node; have: which rows are there (NULL: all). */
static void fold(ck_node_t *nodes, int nnodes, const ck_rank_t *all, const unsigned char *have,
                 int n)
{
    for (int i = 0; i < nnodes; i++)
        nodes[i] = (ck_node_t){-1, -1, 0, -1, -1, -1, -1};
    for (int r = 0; r < n; r++) {
        ck_node_t *d;
        if ((have && !have[r]) || all[r].node >= (uint32_t)nnodes)
            continue; /* ck_rank_parse refuses such a row */
        d = &nodes[all[r].node];
        d->first = d->first < 0 ? r : d->first;
        d->failed = d->failed < 0 && all[r].fail ? r : d->failed;
        d->ranks++;
        d->node = slowest(d->node, all[r].node_gbps);
        d->node_pred = all[r].node_pred;
        d->link = slowest(d->link, all[r].link_gbps);
        d->link_pred = all[r].link_pred;
    }
}

static void cell(char *buf, size_t len, double x, double pred)
{
    if (x < 0)
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%.3g (%.3g)", x, pred);
}

/* The verdict for one node into buf; 1 when it is not ok. */
static int verdict(const ck_node_t *d, const ck_rank_t *all, double node_med, double link_med,
                   char *buf, size_t len)
{
    if (d->failed >= 0) {
        snprintf(buf, len, "FAIL: rank %u: %s", all[d->failed].rank, all[d->failed].problem);
        return 1;
    }
    if (d->link >= 0 && link_med > 0 && d->link < link_med / 2) {
        snprintf(buf, len, "SLOW: link %.3g GB/s, under half the median %.3g", d->link,
                 link_med);
        return 1;
    }
    if (d->node >= 0 && node_med > 0 && d->node < node_med / 2) {
        snprintf(buf, len, "SLOW: node group %.3g GB/s, under half the median %.3g", d->node,
                 node_med);
        return 1;
    }
    snprintf(buf, len, "ok");
    return 0;
}

static void name_bad(ck_named_t *b, const char *host)
{
    size_t o = strlen(b->named);

    if (o + 80 < sizeof(b->named))
        snprintf(b->named + o, sizeof(b->named) - o, "%s%s", b->bad ? ", " : "", host);
    else if (!strstr(b->named, ", ..."))
        snprintf(b->named + o, sizeof(b->named) - o, ", ...");
    b->bad++;
}

/* What each node checked (its first rank), then the bad nodes' own lines. */
static void node_lines(FILE *out, const ck_node_t *nodes, int nnodes, const ck_rank_t *all,
                       double node_med, double link_med)
{
    char v[CK_TEXT + 64];

    for (int i = 0; i < nnodes; i++)
        if (nodes[i].first >= 0)
            fprintf(out, "  %s checked: %s\n", all[nodes[i].first].host,
                    all[nodes[i].first].checked);
    for (int i = 0; i < nnodes; i++)
        if (nodes[i].first >= 0 && verdict(&nodes[i], all, node_med, link_med, v, sizeof(v)))
            fprintf(out, "ddp-topo check: node %s %s\n", all[nodes[i].first].host, v);
}

int ck_report(FILE *out, const ck_rank_t *all, int n, const drt_env_t *env, double seconds)
{
    int nnodes = (int)env->node_count;
    ck_node_t *nodes = calloc((size_t)nnodes, sizeof(*nodes));
    char nodebw[32], linkbw[32], v[CK_TEXT + 64];
    ck_named_t b = {0, ""};
    double node_med, link_med;

    if (!nodes)
        return fputs("ddp-topo check: out of memory\n", stderr), 1;
    fold(nodes, nnodes, all, NULL, n);
    /* node groups on one machine share its cores: their speeds say nothing
     * about each other */
    node_med = ck_one_machine(all, n) ? -1 : median(nodes, nnodes, 0);
    link_med = median(nodes, nnodes, 1);
    fprintf(out, "ddp-topo check: %d rank%s on %d node%s, MASTER_ADDR %s MASTER_PORT %u\n", n,
            n > 1 ? "s" : "", nnodes, nnodes > 1 ? "s" : "", env->master_addr,
            env->master_port);
    fprintf(out, "%4s %-16s %5s  %-18s %-18s %s\n", "#", "NODE", "RANKS", "NODE GB/s (model)",
            "LINK GB/s (model)", "VERDICT");
    for (int i = 0; i < nnodes; i++) {
        const ck_node_t *d = &nodes[i];
        if (d->first < 0)
            continue;
        cell(nodebw, sizeof(nodebw), d->node, d->node_pred);
        cell(linkbw, sizeof(linkbw), d->link, d->link_pred);
        if (verdict(d, all, node_med, link_med, v, sizeof(v)))
            name_bad(&b, all[d->first].host);
        fprintf(out, "%4d %-16s %5u  %-18s %-18s %s\n", i, all[d->first].host, d->ranks, nodebw,
                linkbw, v);
    }
    node_lines(out, nodes, nnodes, all, node_med, link_med);
    if (node_med < 0 && nnodes > 1)
        fprintf(out, "  node groups not compared: the nodes are one machine, sharing its cores\n");
    if (b.bad)
        fprintf(out, "ddp-topo check: FAILED on %d node%s: %s (%.2f s)\n", b.bad,
                b.bad > 1 ? "s" : "", b.named, seconds);
    else
        fprintf(out, "ddp-topo check: %s %d node%s ok (%.2f s)\n", nnodes > 1 ? "all" : "the",
                nnodes, nnodes > 1 ? "s" : "", seconds);
    fflush(out); /* before the other ranks hear the verdict and may exit */
    free(nodes);
    return b.bad != 0;
}

/* The node SLURM placed rank r on, from the step's own variables. */
static void slurm_node_of(uint32_t r, char *buf, size_t len)
{
    const char *list = getenv("SLURM_STEP_NODELIST"), *tpn = getenv("SLURM_STEP_TASKS_PER_NODE");
    char **hosts = NULL;
    size_t nhosts = 0;
    uint32_t *counts = NULL, ncounts = 0;
    dt_layout_t lay = {0};
    dt_dist_t dist;
    dt_error_t err;

    snprintf(buf, len, "node unknown outside SLURM");
    if (!list || !tpn || dt_hostlist_expand(list, &hosts, &nhosts, &err) < 0)
        return;
    if (dt_tasks_per_node_parse(tpn, &counts, &ncounts, &err) == 0 && ncounts == nhosts &&
        dt_dist_parse(getenv("SLURM_DISTRIBUTION"), &dist, &err) == 0 &&
        dt_layout_build(&lay, counts, ncounts, dist, &err) == 0) {
        if (r < lay.ntasks)
            snprintf(buf, len, "on %s", hosts[lay.node_of[r]]);
        else
            snprintf(buf, len, "not one of the step's %u tasks: WORLD_SIZE is larger",
                     lay.ntasks);
        dt_layout_free(&lay);
    }
    free(counts);
    dt_hostlist_free(hosts, nhosts);
}

void ck_report_partial(FILE *out, const ck_rank_t *rows, const unsigned char *have,
                       int missing_known, const drt_env_t *env, const char *why,
                       double seconds)
{
    int nnodes = (int)env->node_count;
    ck_node_t *nodes = calloc(nnodes ? (size_t)nnodes : 1, sizeof(*nodes));
    ck_named_t b = {0, ""};
    char where[128];

    fprintf(out, "ddp-topo check: %u rank%s, MASTER_ADDR %s MASTER_PORT %u\n", env->world_size,
            env->world_size > 1 ? "s" : "", env->master_addr, env->master_port);
    for (uint32_t r = 0; missing_known && r < env->world_size; r++) {
        if (have[r])
            continue;
        slurm_node_of(r, where, sizeof(where));
        fprintf(out, "ddp-topo check: rank %u (%s) never arrived: it did not reach MASTER_PORT "
                "%u within the timeout\n", r, where, env->master_port);
    }
    if (nodes) {
        /* only failures are known: nothing was measured */
        fold(nodes, nnodes, rows, have, (int)env->world_size);
        for (int i = 0; i < nnodes; i++)
            if (nodes[i].failed >= 0)
                name_bad(&b, rows[nodes[i].first].host);
        node_lines(out, nodes, nnodes, rows, -1, -1);
    }
    if (b.bad)
        fprintf(out, "ddp-topo check: FAILED on %d node%s: %s; the rendezvous failed: %s "
                "(%.2f s)\n", b.bad, b.bad > 1 ? "s" : "", b.named, why, seconds);
    else
        fprintf(out, "ddp-topo check: FAILED: %s (%.2f s)\n", why, seconds);
    fflush(out);
    free(nodes);
}
