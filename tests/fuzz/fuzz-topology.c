/* SPDX-License-Identifier: Apache-2.0 */
/* Topology files, hwloc XML and NCCL XML, through dt_node_load_file (the
 * root-element sniff and both loaders, as the plugin and `ddp-topo report
 * --topology` use them), then planned as the plugin would plan the node.
 * Built twice, fuzz-hwloc-xml and fuzz-nccl-xml, each with its own corpus. */
#include "ddptopo.h"
#include "fuzz.h"

/* Ranks planned per node: as many as there are GPUs, up to a real node's. */
#define MAX_RANKS 64

static void plan(const dt_node_t *node)
{
    unsigned gpus = dt_node_nvidia_gpus(node);
    dt_plan_request_t req = {.nranks = gpus ? (gpus < MAX_RANKS ? gpus : MAX_RANKS) : 1,
                             .share_gpus = 1};
    dt_node_plan_t p;
    dt_error_t err = {.code = DT_OK};

    if (dt_plan_node(node, &req, &p, &err) == 0)
        dt_node_plan_free(&p);
    else if (!err.text[0])
        fuzz_fail("planning refused without a message");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dt_node_t node;
    dt_error_t err = {.code = DT_OK};

    if (dt_node_load_file(&node, fuzz_file(data, size), &err) == 0) {
        plan(&node);
        dt_node_free(&node);
    } else if (!err.text[0]) {
        fuzz_fail("topology file refused without a message");
    }
    return 0;
}
