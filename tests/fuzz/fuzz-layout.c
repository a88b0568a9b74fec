/* SPDX-License-Identifier: Apache-2.0 */
/* SLURM task layouts: line 1 is a tasks-per-node spec (SLURM_STEP_TASKS_PER_NODE,
 * "3(x2),2"), line 2 a distribution (SLURM_DISTRIBUTION, "plane=4:block").
 * What parses must lay out every rank exactly once, within its node's count. */
#include "ddptopo.h"
#include "fuzz.h"

#include <stdlib.h>

/* Layouts above this many tasks are parsed but not built: building is linear
 * in the tasks, and a few 16M-task inputs would take most of the run. */
#define MAX_BUILD_TASKS (1u << 20)

static uint64_t total_tasks(const uint32_t *counts, uint32_t nnodes)
{
    uint64_t total = 0;

    for (uint32_t i = 0; i < nnodes; i++)
        total += counts[i];
    return total;
}

static void check_layout(const dt_layout_t *l, const uint32_t *counts, uint32_t nnodes)
{
    uint32_t *seen = calloc(nnodes ? nnodes : 1, sizeof(*seen));
    uint64_t total = total_tasks(counts, nnodes);

    if (!seen)
        fuzz_fail("out of memory");
    if (l->nnodes != nnodes || l->ntasks != total)
        fuzz_fail("layout has %u nodes %u tasks, the spec %u and %llu", l->nnodes, l->ntasks,
                  nnodes, (unsigned long long)total);
    for (uint32_t r = 0; r < l->ntasks; r++) {
        uint32_t node = l->node_of[r];
        if (node >= nnodes || l->local_of[r] >= counts[node])
            fuzz_fail("rank %u on node %u local %u, outside the layout", r, node, l->local_of[r]);
        seen[node]++;
    }
    for (uint32_t i = 0; i < nnodes; i++)
        if (seen[i] != counts[i] || l->tasks_per_node[i] != counts[i])
            fuzz_fail("node %u: %u ranks placed, %u asked", i, seen[i], counts[i]);
    free(seen);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int n;
    char **line = fuzz_lines(data, size, &n);
    uint32_t *counts = NULL, nnodes;
    dt_dist_t dist;
    dt_layout_t layout;
    dt_error_t err = {.code = DT_OK};
    int rc = dt_tasks_per_node_parse(line[0], &counts, &nnodes, &err);

    if (rc == 0)
        rc = dt_dist_parse(n > 1 ? line[1] : NULL, &dist, &err);
    if (rc == 0 && total_tasks(counts, nnodes) <= MAX_BUILD_TASKS) {
        rc = dt_layout_build(&layout, counts, nnodes, dist, &err);
        if (rc == 0) {
            check_layout(&layout, counts, nnodes);
            dt_layout_free(&layout);
        }
    }
    if (rc < 0 && !err.text[0])
        fuzz_fail("'%.200s' refused without a message", line[0]);
    free(counts);
    fuzz_lines_free(line);
    return 0;
}
