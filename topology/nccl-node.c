/* SPDX-License-Identifier: Apache-2.0 */
/* Node model from an NCCL topology XML (the NCCL_TOPO_FILE format cloud
 * vendors ship), read with libxml2. Elements: <system> of <cpu numaid
 * affinity> holding a tree of <pci busid class vendor> (class 0x0604xx is a
 * switch), <gpu dev sm> with <nvlink target count tclass>, and <nic> with
 * <net name port speed>. NCCL files carry no cores and no packages: each
 * CPU in the affinity mask counts as a core, each <cpu> as its own package. */
#include "ddptopo.h"
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/parser.h>
#include <libxml/tree.h>

#define NVSWITCH_CLASS 0x068000

typedef struct {
    dt_node_t *node;
    unsigned pci_cap, nic_cap, gpu_cap;
    int all_indexed;
    double *switch_bw; /* per GPU position, after numbering */
    dt_error_t *err;
} loader_t;

static char *attr(xmlNodePtr n, const char *name)
{
    return (char *)xmlGetProp(n, (const xmlChar *)name);
}

/* A number attribute ("16" of "16 GT/s"); absent, not a number, or
 * outside lo..hi (a hostile 99999999999 would wrap an int) gives dflt. */
static long attr_range(xmlNodePtr n, const char *name, int base, long dflt, long lo, long hi)
{
    char *s = attr(n, name), *end;
    long v = dflt;

    if (s) {
        long x;
        errno = 0;
        x = strtol(s, &end, base);
        if (end != s && !errno && x >= lo && x <= hi)
            v = x;
        xmlFree(s);
    }
    return v;
}

static long attr_long(xmlNodePtr n, const char *name, int base, long dflt)
{
    return attr_range(n, name, base, dflt, INT_MIN, INT_MAX);
}

/* Linux numbers NUMA nodes below 1024 (the plugin's memory binding
 * limit); a negative or larger numaid counts as absent. */
static long numa_id(xmlNodePtr cpu, long dflt)
{
    return attr_range(cpu, "numaid", 10, dflt, 0, 1023);
}

static int is(xmlNodePtr n, const char *name)
{
    return n->type == XML_ELEMENT_NODE && !xmlStrcmp(n->name, (const xmlChar *)name);
}

/* "000000ff,ffff0000,00ffffff": 32-bit words, most significant first. */
static int parse_affinity(const char *s, hwloc_bitmap_t set)
{
    size_t nwords = 1;

    for (const char *p = s; *p; p++)
        nwords += *p == ',';
    for (size_t w = 0; w < nwords; w++) {
        char *end;
        unsigned long v = strtoul(s, &end, 16);
        if (end == s || (*end && *end != ','))
            return -1;
        for (unsigned b = 0; b < 32; b++)
            if (v & (1ul << b))
                hwloc_bitmap_set(set, (unsigned)((nwords - 1 - w) * 32 + b));
        s = *end ? end + 1 : end;
    }
    return 0;
}

static int grow(void **arr, unsigned *cap, unsigned n, size_t size)
{
    void *na;

    if (n < *cap)
        return 0;
    if (!(na = realloc(*arr, (*cap = *cap ? *cap * 2 : 16) * size)))
        return -1;
    *arr = na;
    return 0;
}

static int add_cpu(loader_t *l, xmlNodePtr cpu)
{
    dt_node_t *node = l->node;
    char *aff = attr(cpu, "affinity");
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    dt_numa_t *numa;
    unsigned pcap = node->npackages, ncap = node->nnuma;

    if (!set || !aff || parse_affinity(aff, set) < 0) {
        topo_seterr(l->err, "topology file '%.300s': <cpu numaid=\"%ld\"> has %s affinity "
                    "(expected hex words like 0000ffff,ffff0000)", node->path,
                    numa_id(cpu, -1), aff ? "a malformed" : "no");
        xmlFree(aff);
        hwloc_bitmap_free(set);
        return -1;
    }
    xmlFree(aff);
    if (grow((void **)&node->numa, &ncap, node->nnuma, sizeof(dt_numa_t)) < 0 ||
        grow((void **)&node->packages, &pcap, node->npackages, sizeof(hwloc_bitmap_t)) < 0 ||
        !(node->packages[node->npackages] = hwloc_bitmap_dup(set))) {
        hwloc_bitmap_free(set);
        return -1;
    }
    numa = &node->numa[node->nnuma++];
    numa->os_index = (unsigned)numa_id(cpu, (long)node->nnuma - 1);
    numa->cpuset = set;
    numa->package = (int)node->npackages++;
    return 0;
}

static dt_nic_t *new_nic(loader_t *l, int pci)
{
    dt_node_t *node = l->node;
    dt_nic_t *n;

    if (node->nnics == DT_NODE_MAX_NICS) {
        topo_seterr(l->err, "topology file '%.300s': more than %u NICs (is the file this "
                    "node's?)", node->path, DT_NODE_MAX_NICS);
        return NULL;
    }
    if (grow((void **)&node->nics, &l->nic_cap, node->nnics, sizeof(dt_nic_t)) < 0)
        return NULL;
    n = memset(&node->nics[node->nnics++], 0, sizeof(*n));
    n->pci = pci;
    n->port = 1;
    n->kind = DT_NIC_INFINIBAND;
    if (pci >= 0) {
        unsigned cls = node->pci[pci].class_id;
        memcpy(n->busid, node->pci[pci].busid, sizeof(n->busid));
        if (node->pci[pci].vendor == 0x1d0f)
            n->kind = DT_NIC_EFA;
        else if (cls == 0x0200)
            n->kind = DT_NIC_ETHERNET;
        else if (cls == 0x0208)
            n->kind = DT_NIC_OMNIPATH;
    }
    return n;
}

/* <nic><net name="mlx5_0" port="1" speed="100000"/></nic>: one NIC per net. */
static int add_nets(loader_t *l, xmlNodePtr nic, int pci, dt_nic_t *first)
{
    for (xmlNodePtr c = nic->children; c; c = c->next) {
        char *name;
        dt_nic_t *n;
        if (!is(c, "net"))
            continue;
        n = first ? first : new_nic(l, pci);
        first = NULL;
        if (!n)
            return -1;
        if ((name = attr(c, "name"))) {
            /* it goes into NCCL_IB_HCA: refused rather than cut */
            int fits = (size_t)snprintf(n->name, sizeof(n->name), "%s", name) < sizeof(n->name);
            xmlFree(name);
            if (!fits) {
                topo_seterr(l->err, "topology file '%.300s': <net name> '%.40s...' is longer "
                            "than %zu characters", l->node->path, n->name, sizeof(n->name) - 1);
                return -1;
            }
        }
        n->port = (int)attr_range(c, "port", 10, 1, 0, 255);
        n->gbps = (double)attr_range(c, "speed", 10, 0, 0, LONG_MAX) / 1000.0;
        if (!strncmp(n->name, "rdmap", 5) || !strncmp(n->name, "efa", 3))
            n->kind = DT_NIC_EFA;
    }
    return 0;
}

static int add_gpu(loader_t *l, xmlNodePtr pcinode, int pci)
{
    dt_node_t *node = l->node;
    dt_gpu_t *g;
    long sm = -1, dev = -1;
    unsigned vendor;

    if (node->ngpus == DT_NODE_MAX_GPUS) {
        topo_seterr(l->err, "topology file '%.300s': more than %u GPUs (is the file this "
                    "node's?)", node->path, DT_NODE_MAX_GPUS);
        return -1;
    }
    if (grow((void **)&node->gpus, &l->gpu_cap, node->ngpus, sizeof(dt_gpu_t)) < 0)
        return -1;
    g = memset(&node->gpus[node->ngpus++], 0, sizeof(*g));
    g->pci = pci;
    /* a file without vendor ids is NVIDIA's (NCCL lists only its GPUs) */
    vendor = node->pci[pci].vendor ? node->pci[pci].vendor : 0x10de;
    g->nvidia = vendor == 0x10de;
    memcpy(g->busid, node->pci[pci].busid, sizeof(g->busid));
    for (xmlNodePtr c = pcinode->children; c; c = c->next)
        if (is(c, "gpu")) {
            sm = attr_range(c, "sm", 10, -1, 0, 10000);
            dev = attr_range(c, "dev", 10, -1, 0, INT_MAX);
        }
    g->index = (int)dev;
    if (dev < 0)
        l->all_indexed = 0;
    /* pci.ids's name, else what the file says: the compute capability, the ids */
    if (node->pci[pci].device &&
        topo_gpu_name_ids(g->model, sizeof(g->model), vendor, node->pci[pci].device))
        return 0;
    if (sm > 0)
        snprintf(g->model, sizeof(g->model), "NVIDIA sm_%ld", sm);
    else if (!node->pci[pci].device)
        snprintf(g->model, sizeof(g->model), "NVIDIA (model not in file)");
    return 0;
}

static int add_pci(loader_t *l, xmlNodePtr n, int parent, const dt_numa_t *numa)
{
    dt_node_t *node = l->node;
    dt_pci_t *p;
    char *busid = attr(n, "busid");
    long cls = attr_long(n, "class", 16, 0);
    int me = (int)node->npci;

    if (!busid) {
        topo_seterr(l->err, "topology file '%.300s': a <pci> element has no busid", node->path);
        return -1;
    }
    if (grow((void **)&node->pci, &l->pci_cap, node->npci, sizeof(dt_pci_t)) < 0) {
        xmlFree(busid);
        return -1;
    }
    p = memset(&node->pci[node->npci++], 0, sizeof(*p));
    if (strlen(busid) >= sizeof(p->busid)) {
        topo_seterr(l->err, "topology file '%.300s': <pci busid> '%.40s...' is longer than %zu "
                    "characters", node->path, busid, sizeof(p->busid) - 1);
        xmlFree(busid);
        return -1;
    }
    for (size_t i = 0; busid[i]; i++)
        p->busid[i] = (char)tolower((unsigned char)busid[i]);
    xmlFree(busid);
    p->parent = parent;
    p->class_id = (unsigned)(cls >> 8) & 0xffff;
    p->vendor = (unsigned)attr_long(n, "vendor", 16, 0);
    p->device = (unsigned)attr_long(n, "device", 16, 0);
    p->bridge = p->class_id == 0x0604;
    p->numa = (int)(numa - node->numa);
    p->package = numa->package;
    if ((p->class_id >> 8) == 0x03 && add_gpu(l, n, me) < 0)
        return -1;
    if ((p->class_id >> 8) == 0x02) {
        xmlNodePtr nic = NULL;
        dt_nic_t *first = new_nic(l, me);
        for (xmlNodePtr c = n->children; c; c = c->next)
            nic = is(c, "nic") ? c : nic;
        if (!first || (nic && add_nets(l, nic, me, first) < 0))
            return -1;
    }
    for (xmlNodePtr c = n->children; c; c = c->next)
        if (is(c, "pci") && add_pci(l, c, me, numa) < 0)
            return -1;
    return 0;
}

static int find_gpu(const dt_node_t *node, const char *busid)
{
    for (unsigned i = 0; i < node->ngpus; i++)
        if (!strcasecmp(node->gpus[i].busid, busid))
            return (int)i;
    return -1;
}

/* NVLink from <gpu sm><nvlink target count tclass/></gpu>. */
static void gpu_links(loader_t *l, xmlNodePtr gpu, int a, double *sw)
{
    dt_node_t *node = l->node;
    double per_link = topo_nvlink_gbps((int)attr_long(gpu, "sm", 10, 80));

    for (xmlNodePtr c = gpu->children; c; c = c->next) {
        char *target;
        int b;
        double gbps = per_link * (double)attr_range(c, "count", 10, 1, 0, 1000);
        if (!is(c, "nvlink"))
            continue;
        if (attr_long(c, "tclass", 16, 0) == NVSWITCH_CLASS) {
            sw[a] += gbps;
            continue;
        }
        if (!(target = attr(c, "target")))
            continue;
        b = find_gpu(node, target);
        xmlFree(target);
        if (b >= 0 && b != a)
            node->nvlink[(unsigned)a * node->ngpus + (unsigned)b] += gbps;
    }
}

static void walk_links(loader_t *l, xmlNodePtr n, double *sw, int *any)
{
    for (xmlNodePtr c = n->children; c; c = c->next) {
        if (is(c, "gpu")) {
            char *busid = attr(n, "busid");
            int a = busid ? find_gpu(l->node, busid) : -1;
            xmlFree(busid);
            for (xmlNodePtr k = c->children; k; k = k->next)
                *any |= is(k, "nvlink");
            if (a >= 0)
                gpu_links(l, c, a, sw);
        } else if (c->type == XML_ELEMENT_NODE) {
            walk_links(l, c, sw, any);
        }
    }
}

static int add_nvlink(loader_t *l, xmlNodePtr root)
{
    dt_node_t *node = l->node;
    unsigned n = node->ngpus;
    int any = 0;
    double *sw;

    if (n == 0)
        return 0;
    node->nvlink = calloc((size_t)n * n, sizeof(double));
    sw = calloc(n, sizeof(double));
    if (!node->nvlink || !sw) {
        free(sw);
        return -1;
    }
    walk_links(l, root, sw, &any);
    topo_nvlink_switches(node, sw);
    free(sw);
    if (!any) { /* the file says nothing about NVLink */
        free(node->nvlink);
        node->nvlink = NULL;
    }
    return 0;
}

static int add_cores(dt_node_t *node)
{
    hwloc_bitmap_t all = hwloc_bitmap_alloc();
    int pu;

    if (!all)
        return -1;
    for (unsigned i = 0; i < node->nnuma; i++)
        hwloc_bitmap_or(all, all, node->numa[i].cpuset);
    node->cores = calloc((size_t)hwloc_bitmap_weight(all) + 1, sizeof(hwloc_bitmap_t));
    hwloc_bitmap_foreach_begin(pu, all)
        if (node->cores && (node->cores[node->ncores] = hwloc_bitmap_alloc()))
            hwloc_bitmap_only(node->cores[node->ncores++], (unsigned)pu);
    hwloc_bitmap_foreach_end();
    hwloc_bitmap_free(all);
    return node->cores ? 0 : -1;
}

static int load_system(loader_t *l, xmlNodePtr root)
{
    dt_node_t *node = l->node;

    for (xmlNodePtr c = root->children; c; c = c->next)
        if (is(c, "cpu") && add_cpu(l, c) < 0)
            return -1;
    if (node->nnuma == 0) {
        topo_seterr(l->err, "topology file '%.300s': NCCL XML without any <cpu> element",
                    node->path);
        return -1;
    }
    for (xmlNodePtr c = root->children; c; c = c->next) {
        unsigned numa = 0;
        if (!is(c, "cpu"))
            continue;
        for (unsigned i = 0; i < node->nnuma; i++)
            numa = node->numa[i].os_index == (unsigned)numa_id(c, -1) ? i : numa;
        for (xmlNodePtr k = c->children; k; k = k->next) {
            if (is(k, "pci") && add_pci(l, k, -1, &node->numa[numa]) < 0)
                return -1;
            if (is(k, "nic") && add_nets(l, k, -1, NULL) < 0)
                return -1;
        }
    }
    topo_number_gpus(node, l->all_indexed);
    return add_cores(node) < 0 || add_nvlink(l, root) < 0 ? -1 : 0;
}

int topo_load_nccl_xml(dt_node_t *node, const char *path, const char *buf, size_t len,
                       dt_error_t *err)
{
    loader_t l = {.node = node, .all_indexed = 1, .err = err};
    xmlDocPtr doc;
    xmlNodePtr root;
    int rc;

    memset(node, 0, sizeof(*node));
    node->source = DT_SOURCE_NCCL_XML;
    snprintf(node->path, sizeof(node->path), "%s", path);
    /* no network, no entity substitution, no DTD loading: dt_node_load_file
     * refused any DOCTYPE, so an entity reference is an error here */
    doc = topo_xml_read(buf, len);
    if (!doc) {
        const xmlError *e = xmlGetLastError();
        const char *msg = e && e->message ? e->message : "parse error";
        int n = (int)strcspn(msg, "\n"); /* libxml2 ends its messages with one */
        topo_seterr_code(err, DT_E_FORMAT, "topology file '%.300s': not well-formed XML (line "
                         "%d: %.*s)", path,
                    e ? e->line : 0, n > 120 ? 120 : n, msg);
        return -1;
    }
    root = xmlDocGetRootElement(doc);
    if (err)
        err->text[0] = '\0';
    rc = root && is(root, "system") ? load_system(&l, root) : -1;
    if (rc < 0 && err && !err->text[0])
        topo_seterr(err, "topology file '%.300s': %s", path,
                    root && is(root, "system") ? "out of memory" : "root element is not <system>");
    xmlFreeDoc(doc);
    if (rc < 0)
        dt_node_free(node);
    return rc;
}
