/* SPDX-License-Identifier: Apache-2.0 */
/* NVML at run time: Debian's hwloc has no NVML component, so live discovery
 * asks libnvidia-ml itself for GPU names and NVLink. It is dlopen'ed, never
 * linked: a machine without NVIDIA's driver simply gets nothing from here.
 * The few declarations below follow NVML's documented, stable ABI. */
#include "ddptopo.h"
#include "internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NVML_MAX_LINKS 18
#define NVML_SUCCESS 0
#define PCI_VENDOR_NVIDIA 0x10de

typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvml_pci_t;

typedef void *nvml_dev_t;

typedef struct {
    void *lib;
    int (*init)(void);
    int (*shutdown)(void);
    int (*count)(unsigned *);
    int (*handle)(unsigned, nvml_dev_t *);
    int (*pci)(nvml_dev_t, nvml_pci_t *);
    int (*name)(nvml_dev_t, char *, unsigned);
    int (*cc)(nvml_dev_t, int *, int *);
    int (*link_state)(nvml_dev_t, unsigned, int *);
    int (*link_pci)(nvml_dev_t, unsigned, nvml_pci_t *);
} nvml_t;

static int nvml_open(nvml_t *n)
{
    const struct {
        void **fn;
        const char *sym;
    } syms[] = {
        {(void **)&n->init, "nvmlInit_v2"}, {(void **)&n->shutdown, "nvmlShutdown"},
        {(void **)&n->count, "nvmlDeviceGetCount_v2"},
        {(void **)&n->handle, "nvmlDeviceGetHandleByIndex_v2"},
        {(void **)&n->pci, "nvmlDeviceGetPciInfo_v3"}, {(void **)&n->name, "nvmlDeviceGetName"},
        {(void **)&n->cc, "nvmlDeviceGetCudaComputeCapability"},
        {(void **)&n->link_state, "nvmlDeviceGetNvLinkState"},
        {(void **)&n->link_pci, "nvmlDeviceGetNvLinkRemotePciInfo_v2"},
    };

    if (!(n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL)))
        return -1;
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
        if (!(*syms[i].fn = dlsym(n->lib, syms[i].sym))) {
            dlclose(n->lib);
            return -1;
        }
    if (n->init() != NVML_SUCCESS) {
        dlclose(n->lib);
        return -1;
    }
    return 0;
}

/* Position in node->gpus of the GPU at this PCI address (function 0). */
static int gpu_at(const dt_node_t *node, const nvml_pci_t *p)
{
    char busid[24];

    snprintf(busid, sizeof(busid), "%04x:%02x:%02x.0", p->domain & 0xffff, p->bus, p->device);
    for (unsigned i = 0; i < node->ngpus; i++)
        if (!strcasecmp(node->gpus[i].busid, busid))
            return (int)i;
    return -1;
}

/* Add device a's active links: to GPUs, or into NVSwitches (sw[a]). Links to
 * other vendors' devices (POWER9 CPUs) are not GPU bandwidth. */
static void add_links(const nvml_t *n, nvml_dev_t dev, dt_node_t *node, int a, double *sw)
{
    int major = 0, minor = 0;
    double per_link;

    n->cc(dev, &major, &minor);
    per_link = topo_nvlink_gbps(major * 10 + minor);
    for (unsigned link = 0; link < NVML_MAX_LINKS; link++) {
        int active = 0, b;
        nvml_pci_t remote;
        if (n->link_state(dev, link, &active) != NVML_SUCCESS || !active ||
            n->link_pci(dev, link, &remote) != NVML_SUCCESS)
            continue;
        b = gpu_at(node, &remote);
        if (b >= 0 && b != a)
            node->nvlink[(unsigned)a * node->ngpus + (unsigned)b] += per_link;
        else if (b < 0 && (remote.pciDeviceId & 0xffff) == PCI_VENDOR_NVIDIA)
            sw[a] += per_link;
    }
}

int topo_nvml_augment(dt_node_t *node)
{
    nvml_t n;
    unsigned count = 0;
    double *sw;
    int have_links = node->nvlink != NULL;

    if (node->ngpus == 0 || nvml_open(&n) < 0)
        return 0;
    sw = calloc(node->ngpus, sizeof(double));
    if (!have_links)
        node->nvlink = calloc((size_t)node->ngpus * node->ngpus, sizeof(double));
    n.count(&count);
    for (unsigned i = 0; sw && node->nvlink && i < count; i++) {
        nvml_dev_t dev;
        nvml_pci_t pci;
        int a;
        if (n.handle(i, &dev) != NVML_SUCCESS || n.pci(dev, &pci) != NVML_SUCCESS ||
            (a = gpu_at(node, &pci)) < 0)
            continue;
        n.name(dev, node->gpus[a].model, sizeof(node->gpus[a].model));
        if (!have_links)
            add_links(&n, dev, node, a, sw);
    }
    if (sw && node->nvlink && !have_links)
        topo_nvlink_switches(node, sw);
    free(sw);
    n.shutdown();
    dlclose(n.lib);
    return 1;
}
