/* SPDX-License-Identifier: Apache-2.0 */
/* Alpha-beta model of one allreduce (Thakur et al. 2005; the rail variant of
 * Horovod and UCC's split_rail). Times in microseconds, bandwidths in GB/s
 * (1e9 bytes/s):
 *
 *   flat ring over p = N*g ranks:
 *     T_F = 2N(g-1)a_l + 2(N-1)a_r + 2(p-1)/p * n / min(B_l, B_node)
 *   hierarchical rail (intra reduce-scatter, per-rail allreduce, intra allgather):
 *     T_H = 2[(g-1)a_l + (g-1)/g * n/B_l] + 2(N-1)a_r + 2(N-1)/N * n/B_node
 *
 * B_node is the node's injection bandwidth (its NICs used by the ranks). */
#include "ddptopo.h"

static double us_for(double bytes, double gbps)
{
    return gbps > 0 ? bytes / (gbps * 1e3) : 0; /* bytes / (GB/s) in us */
}

void dt_cost_allreduce(dt_cost_t *c)
{
    double N = c->nodes, g = c->ranks_per_node, p = N * g, n = c->bytes;
    double bmin = c->intra_gbps < c->inter_gbps ? c->intra_gbps : c->inter_gbps;

    if (N <= 1) { /* one node: only the intra-node ring */
        c->flat_us = 2 * (g - 1) * c->intra_us + 2 * (g - 1) / g * us_for(n, c->intra_gbps);
        c->hier_us = c->flat_us;
        c->hier_wins = 0;
        return;
    }
    if (g <= 1)
        bmin = c->inter_gbps;
    c->flat_us = 2 * N * (g - 1) * c->intra_us + 2 * (N - 1) * c->inter_us +
                 2 * (p - 1) / p * us_for(n, bmin);
    c->hier_us = 2 * ((g - 1) * c->intra_us + (g - 1) / g * us_for(n, c->intra_gbps)) +
                 2 * (N - 1) * c->inter_us + 2 * (N - 1) / N * us_for(n, c->inter_gbps);
    c->hier_wins = c->uniform && g > 1 && c->hier_us < c->flat_us;
}
