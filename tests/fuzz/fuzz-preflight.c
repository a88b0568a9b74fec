/* SPDX-License-Identifier: Apache-2.0 */
/* The preflight's wire rows (runtime/tools/check/rows.c): what a probe
 * brings rank 0, what the allgather brings every rank, as ck_rank_parse
 * takes them, then rank 0's reports over what passed (report.c), the full
 * table and the one for a rendezvous that failed. Byte 0 sets the world
 * (1 to 8 ranks), byte 1 the nodes (1 to the world); then one row per rank,
 * the last one possibly short. A refused row must say why; a row taken must
 * hold what the reports rely on: its rank, its node, a host name of one
 * word, text that ends, and no line break anywhere. */
#include "fuzz.h"
#include "check.h"

#include <stdio.h>
#include <string.h>

static int one_line(const char *s, size_t size)
{
    const char *end = memchr(s, '\0', size);

    return end && !memchr(s, '\n', (size_t)(end - s));
}

static void taken(const ck_rank_t *row, uint32_t rank, uint32_t world, uint32_t nodes)
{
    if (row->rank != rank || row->node >= nodes || row->local >= world || row->fail > 1)
        fuzz_fail("rank %u's row taken with rank %u, node %u of %u", rank, row->rank, row->node,
                  nodes);
    if (!one_line(row->host, sizeof(row->host)) || !row->host[0] || strchr(row->host, ' ') ||
        !one_line(row->checked, sizeof(row->checked)) ||
        !one_line(row->problem, sizeof(row->problem)))
        fuzz_fail("rank %u's row taken with text a report cannot print on its line", rank);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *null;
    ck_rank_t rows[8];
    unsigned char have[8] = {0};
    drt_env_t env = {0};
    uint32_t world, nodes, all = 1;
    char why[256];

    if (size < 2)
        return 0;
    if (!null && !(null = fopen("/dev/null", "w")))
        fuzz_fail("cannot open /dev/null");
    world = 1 + (data[0] & 7u);
    nodes = 1 + data[1] % world;
    data += 2, size -= 2;
    for (uint32_t r = 0; r < world; r++) {
        size_t len = size < sizeof(ck_rank_t) ? size : sizeof(ck_rank_t);
        why[0] = '\0';
        if (ck_rank_parse(data, len, r, world, nodes, &rows[r], why, sizeof(why)) == 0) {
            taken(&rows[r], r, world, nodes);
            have[r] = 1;
        } else if (!why[0] || !memchr(why, '\0', sizeof(why))) {
            fuzz_fail("rank %u's row refused without a reason", r);
        }
        all &= have[r];
        data += len, size -= len;
    }
    env.world_size = world;
    env.node_count = nodes;
    env.master_port = 29500;
    snprintf(env.master_addr, sizeof(env.master_addr), "n1");
    if (all)
        ck_report(null, rows, (int)world, &env, 0.5);
    ck_report_partial(null, rows, have, 1, &env, "bootstrap: rank 1 never arrived", 6.0);
    return 0;
}
