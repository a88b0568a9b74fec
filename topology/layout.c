/* SPDX-License-Identifier: Apache-2.0 */
/* Task layout: which node and local rank each global rank gets, computed the
 * way SLURM's step layout does it (src/common/slurm_step_layout.c: block,
 * cyclic and plane), so a dry run agrees with SLURM_PROCID/SLURM_LOCALID. */
#include "ddptopo.h"
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tasks in one step; far above any real step, low enough that arrays of
 * uint32 per rank stay small. */
#define DT_MAX_TASKS (1u << 24)

static int parse_u32(const char **p, uint32_t *val)
{
    char *end;
    unsigned long v;

    if (!isdigit((unsigned char)**p))
        return -1;
    errno = 0;
    v = strtoul(*p, &end, 10);
    if (errno || v > UINT32_MAX)
        return -1;
    *val = (uint32_t)v;
    *p = end;
    return 0;
}

/* One "N" or "N(xM)" item of a tasks-per-node spec. */
static int parse_tpn_item(const char **p, uint32_t *count, uint32_t *repeat)
{
    *repeat = 1;
    if (parse_u32(p, count) < 0 || *count == 0)
        return -1;
    if (**p != '(')
        return 0;
    (*p)++;
    if (**p != 'x')
        return -1;
    (*p)++;
    if (parse_u32(p, repeat) < 0 || *repeat == 0 || **p != ')')
        return -1;
    (*p)++;
    return 0;
}

int dt_tasks_per_node_parse(const char *spec, uint32_t **counts, uint32_t *nnodes,
                            dt_error_t *err)
{
    const char *p = spec ? spec : "";
    uint32_t *c = NULL, n = 0;
    uint64_t tasks = 0;

    do {
        uint32_t count, repeat;
        uint32_t *nc;

        if (parse_tpn_item(&p, &count, &repeat) < 0 || (*p && *p != ',')) {
            topo_seterr(err, "tasks per node '%.200s': expected counts like '4', '2,1' or "
                        "'3(x2),2' (each at least 1), stopped at character %zu",
                        spec ? spec : "", (size_t)(p - (spec ? spec : "")) + 1);
            goto fail;
        }
        if ((uint64_t)n + repeat > DT_HOSTLIST_MAX_HOSTS ||
            (tasks += (uint64_t)count * repeat) > DT_MAX_TASKS) {
            topo_seterr(err, "tasks per node '%.200s': more than %u nodes or %u tasks",
                        spec, DT_HOSTLIST_MAX_HOSTS, DT_MAX_TASKS);
            goto fail;
        }
        if (!(nc = realloc(c, (n + repeat) * sizeof(*c)))) {
            topo_seterr(err, "tasks per node: out of memory");
            goto fail;
        }
        c = nc;
        while (repeat--)
            c[n++] = count;
    } while (*p++ == ',');
    *counts = c;
    *nnodes = n;
    return 0;
fail:
    free(c);
    return -1;
}

int dt_dist_parse(const char *spec, dt_dist_t *dist, dt_error_t *err)
{
    size_t len = spec ? strcspn(spec, ":,") : 0;

    dist->plane_size = 0;
    if (len == 0 || (len == 5 && !strncmp(spec, "block", 5)) || (len == 1 && spec[0] == '*')) {
        dist->kind = DT_DIST_BLOCK;
        return 0;
    }
    if (len == 6 && !strncmp(spec, "cyclic", 6)) {
        dist->kind = DT_DIST_CYCLIC;
        return 0;
    }
    if (len > 6 && !strncmp(spec, "plane=", 6)) {
        const char *p = spec + 6;
        uint32_t size;
        if (parse_u32(&p, &size) == 0 && size > 0 && p == spec + len) {
            dist->kind = DT_DIST_PLANE;
            dist->plane_size = size;
            return 0;
        }
    }
    topo_seterr(err, "distribution '%.100s': expected block, cyclic or plane=N "
                "(arbitrary layouts come from a host file and cannot be derived)",
                spec);
    return -1;
}

void dt_layout_free(dt_layout_t *layout)
{
    free(layout->tasks_per_node);
    free(layout->node_of);
    free(layout->local_of);
    memset(layout, 0, sizeof(*layout));
}

/* Give node `node` up to `take` more ranks, starting at *rank. */
static void place(dt_layout_t *l, uint32_t *used, uint32_t node, uint32_t take, uint32_t *rank)
{
    while (take-- && used[node] < l->tasks_per_node[node]) {
        l->node_of[*rank] = node;
        l->local_of[*rank] = used[node]++;
        (*rank)++;
    }
}

/* Block is plane with an infinite plane; cyclic is plane=1. */
static void lay_out(dt_layout_t *l, uint32_t *used, uint32_t plane)
{
    uint32_t rank = 0;

    while (rank < l->ntasks)
        for (uint32_t node = 0; node < l->nnodes; node++)
            place(l, used, node, plane, &rank);
}

int dt_layout_build(dt_layout_t *layout, const uint32_t *tasks_per_node, uint32_t nnodes,
                    dt_dist_t dist, dt_error_t *err)
{
    dt_layout_t l = {.nnodes = nnodes};
    uint32_t *used = calloc(nnodes ? nnodes : 1, sizeof(*used));
    uint32_t plane = dist.kind == DT_DIST_BLOCK ? UINT32_MAX
                   : dist.kind == DT_DIST_CYCLIC ? 1 : dist.plane_size;

    if (nnodes == 0 || plane == 0) {
        topo_seterr(err, "layout: %s", nnodes ? "plane size 0" : "no nodes");
        free(used);
        return -1;
    }
    for (uint32_t i = 0; i < nnodes; i++)
        l.ntasks += tasks_per_node[i];
    l.tasks_per_node = malloc(nnodes * sizeof(uint32_t));
    l.node_of = malloc((l.ntasks ? l.ntasks : 1) * sizeof(uint32_t));
    l.local_of = malloc((l.ntasks ? l.ntasks : 1) * sizeof(uint32_t));
    if (!used || !l.tasks_per_node || !l.node_of || !l.local_of) {
        topo_seterr(err, "layout: out of memory for %u tasks", l.ntasks);
        free(used);
        dt_layout_free(&l);
        return -1;
    }
    memcpy(l.tasks_per_node, tasks_per_node, nnodes * sizeof(uint32_t));
    lay_out(&l, used, plane);
    free(used);
    *layout = l;
    return 0;
}
