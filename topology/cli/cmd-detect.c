/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-topo detect: this node's topology (or a file's) described, or the
 * live one saved as hwloc XML for the plugin's per-node cache. */
#include "cli.h"

#include <getopt.h>
#include <limits.h>
#include <stdlib.h>

#define USAGE_DETECT \
    "Usage: ddp-topo detect [-o FILE] [--topology FILE]\n" \
    "Without -o: describe this node's topology (or FILE's): packages, NUMA\n" \
    "nodes, GPUs, NICs, NVLink. With -o FILE: write this node's topology as\n" \
    "hwloc XML, for the plugin's per-node cache (plugstack topology=PATTERN).\n"

static void describe(const dt_node_t *node)
{
    char *cpus;

    printf("topology: %s (%s)\n", node->path[0] ? node->path : "this machine",
           node->source == DT_SOURCE_LIVE ? "live hwloc"
           : node->source == DT_SOURCE_HWLOC_XML ? "hwloc XML" : "NCCL XML");
    printf("packages: %u, cores: %u\n", node->npackages, node->ncores);
    for (unsigned i = 0; i < node->nnuma; i++) {
        if (hwloc_bitmap_list_asprintf(&cpus, node->numa[i].cpuset) < 0)
            cpus = NULL;
        printf("NUMA %u: package %d, cpus %s\n", node->numa[i].os_index, node->numa[i].package,
               !cpus ? "(out of memory)" : cpus[0] ? cpus : "none (memory only)");
        free(cpus);
    }
    printf("GPUs: %u (%u NVIDIA)\n", node->ngpus, dt_node_nvidia_gpus(node));
    for (unsigned i = 0; i < node->ngpus; i++) {
        const dt_gpu_t *g = &node->gpus[i];
        int numa = g->pci >= 0 ? node->pci[g->pci].numa : -1;
        printf("  GPU %d %s %s NUMA %d%s\n", g->index, g->busid, g->model,
               numa >= 0 ? (int)node->numa[numa].os_index : -1, g->nvidia ? "" : " (not bound)");
    }
    printf("NICs: %u\n", node->nnics);
    for (unsigned i = 0; i < node->nnics; i++) {
        const dt_nic_t *n = &node->nics[i];
        printf("  %s %s %s port %d %s%s\n", n->name[0] ? n->name : "(unnamed)",
               dt_nic_kind_name(n->kind), n->busid, n->port,
               n->state == DT_PORT_UP ? "up" : n->state == DT_PORT_DOWN ? "down" : "state unknown",
               n->netdev[0] ? "" : "");
    }
    printf("NVLink: %s\n", !node->nvlink ? "no information in the source"
                           : node->nvswitch ? "GPUs joined by NVSwitches" : "GPU to GPU links");
    for (unsigned a = 0; node->nvlink && a < node->ngpus; a++)
        for (unsigned b = a + 1; b < node->ngpus; b++)
            if (dt_node_nvlink(node, a, b) > 0)
                printf("  GPU %d - GPU %d: %.0f GB/s\n", node->gpus[a].index,
                       node->gpus[b].index, dt_node_nvlink(node, a, b));
}

/* A file written where users can change it is one the plugin refuses at
 * every step: said now, while the admin is at the keyboard. Not an error:
 * a file for reading or copying elsewhere may live anywhere. */
static void warn_untrusted(const char *out)
{
    char real[PATH_MAX];
    dt_error_t err;

    if (realpath(out, real) &&
        dt_path_trusted("topology file", out, real, "keep topology files where only root can "
                        "change them, e.g. /etc/ddp-topo", &err) < 0)
        fprintf(stderr, "ddp-topo: warning: ddp_topo.so will refuse this file: %s\n", err.text);
}

int cmd_detect(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", 1, 0, 'o'}, {"topology", 1, 0, 't'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *out = NULL, *file = NULL;
    dt_node_t node;
    dt_error_t err;
    int c, rc;

    while ((c = getopt_long(argc, argv, "o:t:h", opts, NULL)) != -1) {
        if (c == 'h')
            return fputs(USAGE_DETECT, stdout), 0;
        if (c == 'o')
            out = optarg;
        else if (c == 't')
            file = optarg;
        else
            return cli_fail("detect", "unknown option", "see 'ddp-topo detect --help'");
    }
    if (optind != argc || (out && file))
        return cli_fail("detect", optind != argc ? "unexpected argument"
                        : "-o writes the live topology; it cannot be combined with --topology",
                        "see 'ddp-topo detect --help'");
    if (out)
        return dt_node_export_live(out, &err) < 0
               ? cli_fail("detect", err.text, "check that the directory is writable")
               : (warn_untrusted(out), 0);
    rc = file ? dt_node_load_file(&node, file, &err) : dt_node_load_live(&node, &err);
    if (rc < 0)
        return cli_fail("detect", err.text, "pass an hwloc or NCCL topology XML file");
    describe(&node);
    dt_node_free(&node);
    return 0;
}
