/* The node model: loading by file type, freeing, and the questions the plan
 * asks of it (how close two devices are, NVLink bandwidth). */
#include "ddptopo.h"
#include "internal.h"

#include <errno.h>
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

/* Sniff the root element: hwloc writes <topology>, NCCL <system>. */
static const char *root_element(FILE *f, char *buf, size_t len)
{
    size_t n = fread(buf, 1, len - 1, f);
    char *p = buf;

    buf[n] = '\0';
    while ((p = strchr(p, '<'))) {
        p++;
        if (*p == '?' || *p == '!') /* declaration, comment or doctype */
            continue;
        return p;
    }
    return NULL;
}

int dt_node_load_file(dt_node_t *node, const char *path, dt_error_t *err)
{
    char buf[8192];
    const char *root;
    FILE *f = fopen(path, "r");

    if (!f) {
        topo_seterr(err, "topology file '%.300s': %s", path, strerror(errno));
        return -1;
    }
    root = root_element(f, buf, sizeof(buf));
    fclose(f);
    if (root && !strncmp(root, "topology", 8))
        return topo_load_hwloc_xml(node, path, err);
    if (root && !strncmp(root, "system", 6))
        return topo_load_nccl_xml(node, path, err);
    topo_seterr(err, "topology file '%.300s': neither hwloc XML (<topology>) nor NCCL XML "
                "(<system>) in its first %zu bytes", path, sizeof(buf) - 1);
    return -1;
}

unsigned dt_node_nvidia_gpus(const dt_node_t *node)
{
    unsigned n = 0;

    for (unsigned i = 0; i < node->ngpus; i++)
        n += node->gpus[i].nvidia != 0;
    return n;
}

dt_path_t dt_node_pci_path(const dt_node_t *node, int a, int b)
{
    if (a < 0 || b < 0)
        return DT_PATH_SYSTEM;
    for (int x = a; x >= 0; x = node->pci[x].parent)
        for (int y = b; y >= 0; y = node->pci[y].parent)
            if (x == y)
                return node->pci[x].bridge == 2 ? DT_PATH_HOSTBRIDGE : DT_PATH_SWITCH;
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

/* GPUs as NVML and SLURM's gres number them: the loader's index when every
 * NVIDIA GPU has one (cuda/nvml names, NCCL's dev), else PCI bus order. */
void topo_number_gpus(dt_node_t *node, int have_index)
{
    int next = 0;

    if (!have_index) {
        for (unsigned i = 0; i < node->ngpus; i++)
            node->gpus[i].index = -1;
        for (;;) {
            int best = -1;
            for (unsigned i = 0; i < node->ngpus; i++)
                if (node->gpus[i].nvidia && node->gpus[i].index < 0 &&
                    (best < 0 || strcmp(node->gpus[i].busid, node->gpus[best].busid) < 0))
                    best = (int)i;
            if (best < 0)
                break;
            node->gpus[best].index = next++;
        }
    }
    for (unsigned i = 0; i < node->ngpus; i++)
        if (!node->gpus[i].nvidia)
            node->gpus[i].index = next++;
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
