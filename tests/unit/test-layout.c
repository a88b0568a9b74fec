/* SPDX-License-Identifier: Apache-2.0 */
/* Tasks-per-node parsing, distributions and SLURM's block/cyclic/plane layouts. */
#include <stdlib.h>

#include "ddptopo.h"
#include "tap.h"

/* "node/local" per rank, joined with spaces. */
static void lays_out(const char *tpn, const char *dist, const char *want)
{
    uint32_t *counts, nnodes;
    dt_dist_t d;
    dt_layout_t l;
    dt_error_t err = {.code = DT_OK};
    char got[1024] = "";

    if (dt_tasks_per_node_parse(tpn, &counts, &nnodes, &err) < 0 ||
        dt_dist_parse(dist, &d, &err) < 0 || dt_layout_build(&l, counts, nnodes, d, &err) < 0) {
        ok(0, "layout %s %s: %s", tpn, dist, err.text);
        return;
    }
    for (uint32_t r = 0; r < l.ntasks; r++)
        snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%u/%u", r ? " " : "",
                 l.node_of[r], l.local_of[r]);
    is_str(got, want, "layout %s -m %s", tpn, dist ? dist : "(default)");
    dt_layout_free(&l);
    free(counts);
}

static void tpn_refused(const char *spec)
{
    uint32_t *counts = NULL, n;
    dt_error_t err = {.code = DT_OK};

    ok(dt_tasks_per_node_parse(spec, &counts, &n, &err) < 0 && strstr(err.text, "tasks per node"),
       "refuse tasks per node '%s': %s", spec, err.text);
}

static void dist_refused(const char *spec)
{
    dt_dist_t d;
    dt_error_t err = {.code = DT_OK};

    ok(dt_dist_parse(spec, &d, &err) < 0 && strstr(err.text, "distribution"),
       "refuse distribution '%s': %s", spec, err.text);
}

int main(void)
{
    uint32_t *counts, n;
    dt_error_t err;

    ok(dt_tasks_per_node_parse("3(x2),2", &counts, &n, &err) == 0 && n == 3 && counts[0] == 3 &&
       counts[1] == 3 && counts[2] == 2, "3(x2),2 is 3,3,2");
    free(counts);
    ok(dt_tasks_per_node_parse("4(x1000)", &counts, &n, &err) == 0 && n == 1000 &&
       counts[999] == 4, "4(x1000) is 1000 nodes");
    free(counts);
    tpn_refused("");
    tpn_refused("0");
    tpn_refused("3(x)");
    tpn_refused("3(2)");
    tpn_refused("3(x2");
    tpn_refused("3,,2");
    tpn_refused("3,");
    tpn_refused("-1");
    tpn_refused("99999999999");
    tpn_refused("1(x2000000)");
    tpn_refused("65535(x65535)");

    lays_out("2(x2)", "block", "0/0 0/1 1/0 1/1");
    lays_out("2(x2)", NULL, "0/0 0/1 1/0 1/1");
    lays_out("3(x2),2", "block", "0/0 0/1 0/2 1/0 1/1 1/2 2/0 2/1");
    lays_out("3(x2),2", "cyclic", "0/0 1/0 2/0 0/1 1/1 2/1 0/2 1/2");
    lays_out("3,1,2", "cyclic", "0/0 1/0 2/0 0/1 2/1 0/2");
    lays_out("4,4", "plane=2", "0/0 0/1 1/0 1/1 0/2 0/3 1/2 1/3");
    lays_out("3,1", "plane=2", "0/0 0/1 1/0 0/2");
    lays_out("2(x2)", "cyclic:block", "0/0 1/0 0/1 1/1");
    lays_out("2(x2)", "block:cyclic,Pack", "0/0 0/1 1/0 1/1");
    lays_out("1", "*", "0/0");

    dist_refused("arbitrary");
    dist_refused("plane");
    dist_refused("plane=0");
    dist_refused("plane=2x");
    dist_refused("blocky");
    return tap_done();
}
