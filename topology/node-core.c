/* SPDX-License-Identifier: Apache-2.0 */
/* The node model beneath the loaders: freeing it, the questions the plan
 * asks of it (how close two devices are, NVLink bandwidth), and the helpers
 * every loader shares. It calls no loader: hwloc-node.c, nccl-node.c and
 * nvml.c call down into it, node.c's dispatch calls them. */
#include "ddptopo.h"
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static void free_sets(hwloc_bitmap_t *sets, unsigned n)
{
    for (unsigned i = 0; sets && i < n; i++)
        hwloc_bitmap_free(sets[i]);
    free(sets);
}

void dt_node_free(dt_node_t *node)
{
    free_sets(node->packages, node->npackages);
    free_sets(node->cores, node->ncores);
    for (unsigned i = 0; node->numa && i < node->nnuma; i++)
        hwloc_bitmap_free(node->numa[i].cpuset);
    free(node->numa);
    free(node->pci);
    free(node->gpus);
    free(node->nics);
    free(node->nvlink);
    memset(node, 0, sizeof(*node));
}

unsigned dt_node_nvidia_gpus(const dt_node_t *node)
{
    unsigned n = 0;

    for (unsigned i = 0; i < node->ngpus; i++)
        n += node->gpus[i].nvidia != 0;
    return n;
}

static unsigned pci_depth(const dt_node_t *node, int x)
{
    unsigned d = 0;

    for (; x >= 0; x = node->pci[x].parent)
        d++;
    return d;
}

/* The nearest common PCI ancestor, by depth: linear in the tree's depth. */
static int pci_common(const dt_node_t *node, int a, int b)
{
    unsigned da = pci_depth(node, a), db = pci_depth(node, b);

    for (; da > db; da--)
        a = node->pci[a].parent;
    for (; db > da; db--)
        b = node->pci[b].parent;
    while (a != b) {
        a = node->pci[a].parent;
        b = node->pci[b].parent;
    }
    return a;
}

dt_path_t dt_node_pci_path(const dt_node_t *node, int a, int b)
{
    int common;

    if (a < 0 || b < 0)
        return DT_PATH_SYSTEM;
    common = pci_common(node, a, b);
    if (common >= 0)
        return node->pci[common].bridge == 2 ? DT_PATH_HOSTBRIDGE : DT_PATH_SWITCH;
    if (node->pci[a].numa >= 0 && node->pci[a].numa == node->pci[b].numa)
        return DT_PATH_NUMA;
    if (node->pci[a].package >= 0 && node->pci[a].package == node->pci[b].package)
        return DT_PATH_PACKAGE;
    return DT_PATH_SYSTEM;
}

const char *dt_path_name(dt_path_t path)
{
    static const char *const names[] = {"same PCIe switch", "same host bridge", "same NUMA node",
                                        "same package", "cross-socket"};
    return names[path];
}

const char *dt_nic_kind_name(dt_nic_kind_t kind)
{
    static const char *const names[] = {"InfiniBand", "RoCE", "EFA", "Omni-Path", "Ethernet"};
    return names[kind];
}

double dt_node_nvlink(const dt_node_t *node, unsigned a, unsigned b)
{
    if (!node->nvlink || a >= node->ngpus || b >= node->ngpus || a == b)
        return 0;
    return node->nvlink[a * node->ngpus + b];
}

/* Helpers for the loaders ------------------------------------------------ */

double topo_nvlink_gbps(int sm)
{
    /* effective GB/s per link, as NCCL's topo.h models them */
    return sm >= 100 ? 40.1 : sm >= 90 ? 20.6 : sm >= 70 ? 20.0 : 18.0;
}


int topo_numa_of(const dt_node_t *node, hwloc_const_bitmap_t locality)
{
    if (!locality || hwloc_bitmap_iszero(locality))
        return -1;
    for (unsigned i = 0; i < node->nnuma; i++)
        if (!hwloc_bitmap_iszero(node->numa[i].cpuset) &&
            hwloc_bitmap_isincluded(node->numa[i].cpuset, locality) &&
            hwloc_bitmap_isincluded(locality, node->numa[i].cpuset))
            return (int)i;
    /* a locality wider than one NUMA node (a whole package) names none */
    return -1;
}

int topo_package_of(const dt_node_t *node, hwloc_const_bitmap_t locality)
{
    if (!locality || hwloc_bitmap_iszero(locality))
        return -1;
    for (unsigned i = 0; i < node->npackages; i++)
        if (hwloc_bitmap_isincluded(locality, node->packages[i]))
            return (int)i;
    return -1;
}

static int gpu_cmp(const void *a, const void *b)
{
    const dt_gpu_t *x = a, *y = b;

    if (x->nvidia != y->nvidia)
        return y->nvidia - x->nvidia;
    if (x->index != y->index)
        return x->index - y->index;
    return strcmp(x->busid, y->busid);
}

/* NVIDIA GPUs by bus id; equal ids (a bad file) keep the file's order. */
static int busid_cmp(const void *a, const void *b)
{
    const dt_gpu_t *x = *(const dt_gpu_t *const *)a, *y = *(const dt_gpu_t *const *)b;
    int c = strcmp(x->busid, y->busid);

    return c ? c : (x > y) - (x < y);
}

/* GPUs as NVML and SLURM's gres number them: the loader's index when every
 * NVIDIA GPU has one (cuda/nvml names, NCCL's dev), else PCI bus order.
 * Sorting keeps this n log n for the largest file accepted. */
void topo_number_gpus(dt_node_t *node, int have_index)
{
    dt_gpu_t **order = calloc(node->ngpus + 1, sizeof(*order));
    unsigned n = 0;
    int next = 0;

    for (unsigned i = 0; order && !have_index && i < node->ngpus; i++) {
        node->gpus[i].index = -1;
        if (node->gpus[i].nvidia)
            order[n++] = &node->gpus[i];
    }
    if (order)
        qsort(order, n, sizeof(*order), busid_cmp);
    for (unsigned i = 0; i < n; i++)
        order[i]->index = next++;
    free(order);
    for (unsigned i = 0; i < node->ngpus; i++)
        if (!node->gpus[i].nvidia)
            node->gpus[i].index = next++;
    if (node->ngpus > 1) /* gpus is NULL without GPUs: qsort's pointer must be valid */
        qsort(node->gpus, node->ngpus, sizeof(dt_gpu_t), gpu_cmp);
}

/* GPUs that reach NVSwitches talk to each other through them at the lower
 * of their switch bandwidths (sw[i]: GB/s from GPU i into switches). */
void topo_nvlink_switches(dt_node_t *node, const double *sw)
{
    unsigned n = node->ngpus;

    for (unsigned a = 0; a < n; a++)
        for (unsigned b = 0; b < n; b++)
            if (a != b && sw[a] > 0 && sw[b] > 0) {
                double via = sw[a] < sw[b] ? sw[a] : sw[b];
                node->nvswitch = 1;
                if (via > node->nvlink[a * n + b])
                    node->nvlink[a * n + b] = via;
            }
}
