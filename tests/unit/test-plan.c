/* SPDX-License-Identifier: Apache-2.0 */
/* dt_plan_node's error for more ranks than GPUs: DT_PLAN_NEEDS_SHARE and the
 * fact, with no caller's flag (the plugin adds --ddp-topo=auto,share, the
 * report its --share); any other failure returns -1. */
#include "ddptopo.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

static int plan(const dt_node_t *node, unsigned nranks, int share, const int *gpus,
                unsigned ngpus, dt_error_t *err)
{
    dt_plan_request_t req = {.nranks = nranks, .gpus = gpus, .ngpus = ngpus, .share_gpus = share};
    dt_node_plan_t p;
    int rc = dt_plan_node(node, &req, &p, err);

    if (rc == 0)
        dt_node_plan_free(&p);
    return rc;
}

int main(void)
{
    const char *top = getenv("top_srcdir");
    static const int missing[] = {9};
    char path[4096];
    dt_error_t err = {{0}};
    dt_node_t node;
    int rc;

    snprintf(path, sizeof(path), "%s/tests/fixtures/nccl-aws-p4d-24xl-topo.xml", top ? top : ".");
    if (dt_node_load_file(&node, path, &err) < 0) {
        printf("Bail out! %s: %s\n", path, err.text);
        return 1;
    }
    rc = plan(&node, 9, 0, NULL, 0, &err);
    ok(rc == DT_PLAN_NEEDS_SHARE, "9 ranks on 8 GPUs without sharing: DT_PLAN_NEEDS_SHARE (%d: %s)",
       rc, err.text);
    ok(!strcmp(err.text, "9 ranks but 8 GPUs on this node: one rank per GPU, or allow sharing"),
       "... its text is the fact, no caller's flag: '%s'", err.text);
    ok(plan(&node, 9, 1, NULL, 0, &err) == 0, "... and plans with sharing allowed: %s", err.text);
    rc = plan(&node, 1, 0, missing, 1, &err);
    ok(rc == -1, "another failure (a GPU the node lacks) returns -1 (%d: %s)", rc, err.text);
    dt_node_free(&node);
    printf("1..%d\n", tap_n);
    return tap_failed != 0;
}
