/* SPDX-License-Identifier: Apache-2.0 */
/* Node model from hwloc: live discovery or an hwloc XML export (v1 or v2;
 * hwloc 2 imports both). */
#include "ddptopo.h"
#include "internal.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/parser.h>
#include <libxml/tree.h>

#define PCI_VENDOR_NVIDIA 0x10de
#define PCI_VENDOR_AMAZON 0x1d0f

/* userdata of a PCI object: its index in node->pci, plus one */
static int pci_index(hwloc_obj_t obj)
{
    return obj && obj->userdata ? (int)(intptr_t)obj->userdata - 1 : -1;
}

static int fill_sets(hwloc_topology_t topo, hwloc_obj_type_t type, hwloc_bitmap_t **sets,
                     unsigned *n)
{
    int count = hwloc_get_nbobjs_by_type(topo, type);

    *n = 0;
    if (count <= 0)
        return 0;
    if (!(*sets = calloc((size_t)count, sizeof(hwloc_bitmap_t))))
        return -1;
    for (int i = 0; i < count; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(topo, type, (unsigned)i);
        if (!((*sets)[i] = hwloc_bitmap_dup(o->cpuset)))
            return -1;
        (*n)++;
    }
    return 0;
}

static int fill_cpu_side(dt_node_t *node, hwloc_topology_t topo)
{
    int nnuma = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);

    if (fill_sets(topo, HWLOC_OBJ_PACKAGE, &node->packages, &node->npackages) < 0 ||
        fill_sets(topo, HWLOC_OBJ_CORE, &node->cores, &node->ncores) < 0)
        return -1;
    if (node->npackages == 0 && fill_sets(topo, HWLOC_OBJ_MACHINE, &node->packages,
                                          &node->npackages) < 0)
        return -1;
    if (node->ncores == 0 && fill_sets(topo, HWLOC_OBJ_PU, &node->cores, &node->ncores) < 0)
        return -1;
    if (nnuma > 0 && !(node->numa = calloc((size_t)nnuma, sizeof(dt_numa_t))))
        return -1;
    for (int i = 0; i < nnuma; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, (unsigned)i);
        dt_numa_t *n = &node->numa[node->nnuma];
        if (!(n->cpuset = hwloc_bitmap_dup(o->cpuset)))
            return -1;
        n->os_index = o->os_index;
        node->nnuma++;
        n->package = topo_package_of(node, n->cpuset);
    }
    return 0;
}

static void pci_ids(hwloc_obj_t obj, dt_pci_t *p)
{
    const struct hwloc_pcidev_attr_s *a = NULL;

    if (obj->type == HWLOC_OBJ_PCI_DEVICE)
        a = &obj->attr->pcidev;
    else if (obj->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI)
        a = &obj->attr->bridge.upstream.pci;
    if (a) {
        snprintf(p->busid, sizeof(p->busid), "%04x:%02x:%02x.%x", a->domain, a->bus, a->dev,
                 a->func);
        p->vendor = a->vendor_id;
        p->device = a->device_id;
        p->class_id = a->class_id;
    } else {
        snprintf(p->busid, sizeof(p->busid), "host:%04x:%02x",
                 obj->attr->bridge.downstream.pci.domain,
                 obj->attr->bridge.downstream.pci.secondary_bus);
    }
}

/* Number the PCI tree depth-first, parents before children. */
static int add_pci(dt_node_t *node, hwloc_topology_t topo, hwloc_obj_t obj, int parent,
                   unsigned *cap)
{
    dt_pci_t *p;
    hwloc_obj_t anc;

    if (node->npci == *cap) {
        dt_pci_t *np = realloc(node->pci, (*cap = *cap ? *cap * 2 : 64) * sizeof(*np));
        if (!np)
            return -1;
        node->pci = np;
    }
    p = memset(&node->pci[node->npci], 0, sizeof(*p));
    pci_ids(obj, p);
    p->parent = parent;
    p->bridge = obj->type == HWLOC_OBJ_PCI_DEVICE ? 0
              : obj->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST ? 2 : 1;
    anc = hwloc_get_non_io_ancestor_obj(topo, obj);
    p->numa = topo_numa_of(node, anc ? anc->cpuset : NULL);
    p->package = topo_package_of(node, anc ? anc->cpuset : NULL);
    obj->userdata = (void *)(intptr_t)(++node->npci);
    return 0;
}

static int walk_io(dt_node_t *node, hwloc_topology_t topo, hwloc_obj_t obj, int parent,
                   unsigned *cap)
{
    for (hwloc_obj_t c = obj->first_child; c; c = c->next_sibling)
        if (walk_io(node, topo, c, parent, cap) < 0)
            return -1;
    for (hwloc_obj_t c = obj->io_first_child; c; c = c->next_sibling) {
        int me = parent;
        if (c->type == HWLOC_OBJ_BRIDGE || c->type == HWLOC_OBJ_PCI_DEVICE) {
            if (add_pci(node, topo, c, parent, cap) < 0)
                return -1;
            me = (int)node->npci - 1;
        }
        if (walk_io(node, topo, c, me, cap) < 0)
            return -1;
    }
    return 0;
}

static int is_gpu_class(unsigned vendor, unsigned class_id, int *nvidia)
{
    *nvidia = vendor == PCI_VENDOR_NVIDIA && (class_id == 0x0300 || class_id == 0x0302);
    if (*nvidia)
        return 1;
    /* Other vendors' compute GPUs are 3D or display controllers (AMD
     * Instinct: 0x0380); their VGA functions are BMC or server display
     * chips (Matrox, ASPEED, ATI ES1000). */
    return class_id == 0x0302 || class_id == 0x0380;
}

/* cuda3 / nvml3 give the index NVML and SLURM use. */
static int osdev_gpu_index(hwloc_obj_t pcidev, const char **model)
{
    int idx = -1;

    for (hwloc_obj_t c = pcidev->io_first_child; c; c = c->next_sibling) {
        int v;
        const char *m;
        if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name)
            continue;
        if ((sscanf(c->name, "cuda%d", &v) == 1 || sscanf(c->name, "nvml%d", &v) == 1) && idx < 0)
            idx = v;
        if ((m = hwloc_obj_get_info_by_name(c, "GPUModel")) && !*model)
            *model = m;
    }
    return idx;
}

static int add_gpus(dt_node_t *node, hwloc_topology_t topo)
{
    int all_indexed = 1;
    hwloc_obj_t o = NULL;

    if (!(node->gpus = calloc(node->npci ? node->npci : 1, sizeof(dt_gpu_t))))
        return -1;
    while ((o = hwloc_get_next_pcidev(topo, o))) {
        int nvidia, idx = pci_index(o);
        const char *model = NULL;
        dt_gpu_t *g;
        if (idx < 0 || !is_gpu_class(o->attr->pcidev.vendor_id, o->attr->pcidev.class_id, &nvidia))
            continue;
        if (node->ngpus == DT_NODE_MAX_GPUS)
            return -2;
        g = &node->gpus[node->ngpus++];
        g->pci = idx;
        g->nvidia = nvidia;
        memcpy(g->busid, node->pci[idx].busid, sizeof(g->busid));
        model = hwloc_obj_get_info_by_name(o, "GPUModel"); /* our own export adds it */
        g->index = osdev_gpu_index(o, &model);
        if (model)
            topo_copy_elided(g->model, sizeof(g->model), model);
        else if ((model = hwloc_obj_get_info_by_name(o, "PCIDevice")))
            topo_gpu_name(g->model, sizeof(g->model), model);
        else
            topo_gpu_name_ids(g->model, sizeof(g->model), o->attr->pcidev.vendor_id,
                              o->attr->pcidev.device_id);
        if (nvidia && g->index < 0)
            all_indexed = 0;
    }
    topo_number_gpus(node, all_indexed);
    return 0;
}

static void classify_nic(dt_nic_t *nic, hwloc_obj_t os, const dt_pci_t *pci)
{
    const char *ll = hwloc_obj_get_info_by_name(os, "Port1LinkLayer");
    const char *st = hwloc_obj_get_info_by_name(os, "Port1State");

    if (!strncmp(nic->name, "hfi", 3) || pci->class_id == 0x0208)
        nic->kind = DT_NIC_OMNIPATH;
    else if (pci->vendor == PCI_VENDOR_AMAZON || !strncmp(nic->name, "rdmap", 5) ||
             !strncmp(nic->name, "efa", 3))
        nic->kind = DT_NIC_EFA;
    else if (ll && !strcmp(ll, "Ethernet"))
        nic->kind = DT_NIC_ROCE;
    else
        nic->kind = DT_NIC_INFINIBAND;
    /* IB port states: 4 is ACTIVE; 1 DOWN, 2 INIT, 3 ARMED */
    if (st)
        nic->state = atoi(st) == 4 ? DT_PORT_UP : DT_PORT_DOWN;
}

static dt_nic_t *nic_for_pci(dt_node_t *node, int pci, unsigned *cap)
{
    for (unsigned i = 0; i < node->nnics; i++)
        if (node->nics[i].pci == pci)
            return &node->nics[i];
    if (node->nnics == DT_NODE_MAX_NICS)
        return NULL;
    if (node->nnics == *cap) {
        dt_nic_t *nn = realloc(node->nics, (*cap = *cap ? *cap * 2 : 8) * sizeof(*nn));
        if (!nn)
            return NULL;
        node->nics = nn;
    }
    dt_nic_t *n = memset(&node->nics[node->nnics++], 0, sizeof(dt_nic_t));
    n->pci = pci;
    n->port = 1;
    n->kind = DT_NIC_ETHERNET;
    memcpy(n->busid, node->pci[pci].busid, sizeof(n->busid));
    return n;
}

/* NIC names go into NCCL_IB_HCA: one that does not fit is refused, not cut. */
static int nic_name(const dt_node_t *node, char *dst, size_t size, const char *name,
                    dt_error_t *err)
{
    if ((size_t)snprintf(dst, size, "%s", name) < size)
        return 0;
    topo_seterr(err, "topology %.300s: NIC name '%.40s...' is longer than %zu characters",
                node->path[0] ? node->path : "(live)", name, size - 1);
    return -1;
}

static int add_nics(dt_node_t *node, hwloc_topology_t topo, dt_error_t *err)
{
    unsigned cap = 0;
    hwloc_obj_t o = NULL;

    while ((o = hwloc_get_next_osdev(topo, o))) {
        int pci = pci_index(o->parent);
        hwloc_obj_osdev_type_t t = o->attr->osdev.type;
        dt_nic_t *nic;
        if (pci < 0 || !o->name || (t != HWLOC_OBJ_OSDEV_OPENFABRICS && t != HWLOC_OBJ_OSDEV_NETWORK))
            continue;
        if (!(nic = nic_for_pci(node, pci, &cap))) {
            if (node->nnics == DT_NODE_MAX_NICS)
                topo_seterr(err, "topology %.300s: more than %u NICs (is the file this "
                            "node's?)", node->path[0] ? node->path : "(live)", DT_NODE_MAX_NICS);
            return -1;
        }
        if (t == HWLOC_OBJ_OSDEV_NETWORK) {
            if (nic_name(node, nic->netdev, sizeof(nic->netdev), o->name, err) < 0 ||
                (!nic->name[0] && nic_name(node, nic->name, sizeof(nic->name), o->name, err) < 0))
                return -1;
        } else {
            if (nic_name(node, nic->name, sizeof(nic->name), o->name, err) < 0)
                return -1;
            classify_nic(nic, o, &node->pci[pci]);
        }
    }
    return 0;
}

/* Position of a distances object in node->gpus, or -2 for an NVSwitch. */
static int nvlink_endpoint(const dt_node_t *node, hwloc_obj_t obj)
{
    hwloc_obj_t pcidev = obj->type == HWLOC_OBJ_OS_DEVICE ? obj->parent : obj;
    int idx = pci_index(pcidev);

    if (idx < 0)
        return -1;
    for (unsigned i = 0; i < node->ngpus; i++)
        if (node->gpus[i].pci == idx)
            return (int)i;
    if (node->pci[idx].vendor == PCI_VENDOR_NVIDIA && node->pci[idx].class_id == 0x0680)
        return -2;
    return -1;
}

/* hwloc's NVLinkBandwidth (MB/s) may mix GPUs with NVSwitches and CPU
 * packages. A DGX-2's matrix shows two baseboard islands, but its switch
 * trunks join all 16 GPUs: see topo_nvlink_switches. */
static int add_nvlink(dt_node_t *node, hwloc_topology_t topo)
{
    unsigned nr = 1, n = node->ngpus;
    struct hwloc_distances_s *d;
    double *sw;
    int *end;

    if (n == 0 || hwloc_distances_get_by_name(topo, "NVLinkBandwidth", &nr, &d, 0) < 0 || nr == 0)
        return 0;
    node->nvlink = calloc((size_t)n * n, sizeof(double));
    sw = calloc(n, sizeof(double));
    end = calloc(d->nbobjs + 1, sizeof(int));
    if (!node->nvlink || !sw || !end) {
        free(sw);
        free(end);
        hwloc_distances_release(topo, d);
        return -1;
    }
    /* each object's endpoint once: the matrix walk stays quadratic, not cubic */
    for (unsigned i = 0; i < d->nbobjs; i++)
        end[i] = nvlink_endpoint(node, d->objs[i]);
    for (unsigned i = 0; i < d->nbobjs; i++) {
        int a = end[i];
        for (unsigned j = 0; a >= 0 && j < d->nbobjs; j++) {
            int b = end[j];
            double gbps = (double)d->values[i * d->nbobjs + j] / 1000.0;
            if (b >= 0 && a != b)
                node->nvlink[a * n + (unsigned)b] += gbps;
            else if (b == -2)
                sw[a] += gbps;
        }
    }
    free(end);
    topo_nvlink_switches(node, sw);
    free(sw);
    hwloc_distances_release(topo, d);
    return 0;
}

static int from_hwloc(dt_node_t *node, hwloc_topology_t topo, dt_error_t *err)
{
    unsigned cap = 0;
    int rc;

    if (err)
        err->text[0] = '\0';
    rc = fill_cpu_side(node, topo) < 0 || walk_io(node, topo, hwloc_get_root_obj(topo), -1, &cap) < 0
         ? -1 : add_gpus(node, topo);
    if (rc == -2)
        topo_seterr(err, "topology %.300s: more than %u GPUs (is the file this node's?)",
                    node->path[0] ? node->path : "(live)", DT_NODE_MAX_GPUS);
    if (rc == 0 && (add_nics(node, topo, err) < 0 || add_nvlink(node, topo) < 0))
        rc = -1;
    if (rc < 0) {
        if (err && !err->text[0])
            topo_seterr(err, "topology: out of memory");
        return -1;
    }
    if (node->ncores == 0) {
        topo_seterr(err, "topology %s: no cores or PUs", node->path[0] ? node->path : "(live)");
        return -1;
    }
    return 0;
}

/* An hwloc XML file's contents; NULL for live discovery. */
typedef struct {
    const char *path, *buf;
    size_t len;
} xml_src_t;

/* hwloc 2.9 dereferences the complete set of an object that has a cpuset
 * or nodeset without one (SIGSEGV inside hwloc_topology_load: its core, not
 * its XML reader); every export has both, so refuse the file instead. */
/* hwloc's bitmap text: "0x"-prefixed hex groups joined by commas, an
 * empty group for a zero one ("0x1,,0x0"), the first possibly "0xf...f"
 * (an infinite set). hwloc 2.9's parser asserts on others, e.g. a leading
 * comma, which it does not count (the fuzzer found it). */
static int bitmap_ok(const char *s)
{
    if (!strncmp(s, "0xf...f", 7) && (!s[7] || s[7] == ','))
        s += s[7] ? 8 : 7;
    if (*s == ',')
        return 0;
    for (size_t n; *s; s += n + (s[n] == ',')) {
        n = 0;
        if (*s == ',')
            continue; /* an empty (zero) group */
        if (strncmp(s, "0x", 2))
            return 0;
        s += 2;
        n = strspn(s, "0123456789abcdefABCDEF");
        if (n == 0 || n > 16 || (s[n] && s[n] != ',') || (s[n] == ',' && !s[n + 1]))
            return 0;
    }
    return 1;
}

/* Every cpuset and nodeset attribute of an element (objects, cpukinds)
 * in hwloc's own format. */
static int sets_well_formed(xmlNode *n, const char *path, dt_error_t *err)
{
    for (xmlAttr *a = n->properties; a; a = a->next) {
        const char *name = (const char *)a->name, *set = strstr(name, "set");
        xmlChar *v;
        int good;
        if (!set || set[3] || set - name < 3 || (strncmp(set - 3, "cpu", 3) &&
                                                 (set - name < 4 || strncmp(set - 4, "node", 4))))
            continue; /* names ending in cpuset or nodeset only */
        v = xmlGetProp(n, a->name);
        good = v && bitmap_ok((const char *)v);
        if (!good)
            topo_seterr(err, "topology file '%.300s': line %ld: %s='%.40s' is not an hwloc "
                        "bitmap (a damaged hwloc export: write it again with 'ddp-topo detect "
                        "-o FILE')", path, xmlGetLineNo(n), (const char *)a->name,
                        v ? (const char *)v : "");
        xmlFree(v);
        if (!good)
            return -1;
    }
    return 0;
}

static int sets_complete(xmlNode *n, const char *path, dt_error_t *err)
{
    static const char *const pairs[][2] = {{"cpuset", "complete_cpuset"},
                                           {"nodeset", "complete_nodeset"}};

    for (; n; n = n->next) {
        if (n->type != XML_ELEMENT_NODE)
            continue;
        if (sets_well_formed(n, path, err) < 0)
            return -1;
        for (int i = 0; i < 2 && !xmlStrcmp(n->name, BAD_CAST "object"); i++)
            if (xmlHasProp(n, BAD_CAST pairs[i][0]) && !xmlHasProp(n, BAD_CAST pairs[i][1])) {
                topo_seterr(err, "topology file '%.300s': line %ld: an object with a %s but "
                            "no %s (a damaged hwloc export: write it again with "
                            "'ddp-topo detect -o FILE')", path, xmlGetLineNo(n),
                            pairs[i][0], pairs[i][1]);
                return -1;
            }
        if (sets_complete(n->children, path, err) < 0)
            return -1;
    }
    return 0;
}

static int check_sets(const xml_src_t *xml, dt_error_t *err)
{
    xmlDoc *doc = topo_xml_read(xml->buf, xml->len);
    int rc;

    if (!doc) {
        topo_seterr(err, "topology file '%.300s': not a valid hwloc XML export "
                    "(malformed or truncated?)", xml->path);
        return -1;
    }
    rc = sets_complete(xmlDocGetRootElement(doc), xml->path, err);
    xmlFreeDoc(doc);
    return rc;
}

/* hwloc's XML plugin points libxml2's generic error handler at a function
 * of its own and leaves it there when hwloc unloads the plugin (destroying
 * the last topology): the next libxml2 error anywhere in the process then
 * jumps into unmapped memory (the fuzzer found it; hwloc 2.9's
 * topology-xml-libxml.c). So every topology ends here, and the handler
 * goes back to libxml2's own. */
static void close_topology(hwloc_topology_t topo)
{
    hwloc_topology_destroy(topo);
    xmlSetGenericErrorFunc(NULL, NULL);
}

static int open_topology(hwloc_topology_t *topo, const xml_src_t *xml, dt_error_t *err)
{
    if (xml && check_sets(xml, err) < 0)
        return -1;
    if (hwloc_topology_init(topo) < 0) {
        topo_seterr(err, "hwloc: cannot initialise a topology: %s", strerror(errno));
        return -1;
    }
    /* Live, the whole machine: inside a step under ConstrainCores, hwloc
     * would otherwise see only the step's cpuset, while SLURM numbers the
     * step's cores among all of the node's. A file keeps its own allowed
     * set (an admin's reserved cores stay out). */
    if (!xml && hwloc_topology_set_flags(*topo, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED) < 0) {
        topo_seterr(err, "hwloc: cannot ask for the whole machine: %s", strerror(errno));
        hwloc_topology_destroy(*topo);
        return -1;
    }
    /* I/O objects are dropped by default; we need PCI devices and bridges,
     * and from a file every one of them (live: the important ones). */
    hwloc_topology_set_io_types_filter(*topo, xml ? HWLOC_TYPE_FILTER_KEEP_ALL
                                                  : HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    /* from memory, as dt_node_load_file read it: hwloc never opens the
     * path itself (it could be swapped for a FIFO after our checks); the
     * size counts the final NUL, as hwloc's own export does */
    if ((xml && hwloc_topology_set_xmlbuffer(*topo, xml->buf, (int)xml->len + 1) < 0) ||
        hwloc_topology_load(*topo) < 0) {
        if (xml)
            topo_seterr_code(err, DT_E_FORMAT, "topology file '%.300s': not a valid hwloc XML "
                             "export "
                        "(malformed or truncated?)", xml->path);
        else
            topo_seterr(err, "hwloc: discovery of this machine failed: %s", strerror(errno));
        close_topology(*topo);
        return -1;
    }
    return 0;
}

/* From an XML file, or live (xml NULL: NVML then adds what hwloc lacks). */
static int load(dt_node_t *node, const xml_src_t *xml, dt_error_t *err)
{
    hwloc_topology_t topo;
    const char *host;
    int rc;

    memset(node, 0, sizeof(*node));
    if (open_topology(&topo, xml, err) < 0)
        return -1;
    node->source = xml ? DT_SOURCE_HWLOC_XML : DT_SOURCE_LIVE;
    snprintf(node->path, sizeof(node->path), "%s", xml ? xml->path : "");
    host = hwloc_obj_get_info_by_name(hwloc_get_root_obj(topo), "HostName");
    snprintf(node->hostname, sizeof(node->hostname), "%s", host ? host : "");
    rc = from_hwloc(node, topo, err);
    if (rc == 0 && !xml)
        topo_nvml_augment(node);
    close_topology(topo);
    if (rc < 0)
        dt_node_free(node);
    return rc;
}

int topo_load_hwloc_xml(dt_node_t *node, const char *path, const char *buf, size_t len,
                        dt_error_t *err)
{
    xml_src_t xml = {.path = path, .buf = buf, .len = len};

    return load(node, &xml, err);
}

int dt_node_load_live(dt_node_t *node, dt_error_t *err)
{
    return load(node, NULL, err);
}

/* Write what NVML told us into the hwloc topology before exporting it, so
 * the cached XML carries GPU names and NVLink like a live discovery. */
static int annotate_nvml(hwloc_topology_t topo, dt_node_t *node, int had_nvlink)
{
    hwloc_obj_t *objs = calloc(node->ngpus + 1, sizeof(hwloc_obj_t)), o = NULL;
    hwloc_uint64_t *values = calloc((size_t)node->ngpus * node->ngpus + 1, sizeof(hwloc_uint64_t));
    hwloc_distances_add_handle_t h;
    unsigned n = node->ngpus;
    int rc = 0;

    while (objs && (o = hwloc_get_next_pcidev(topo, o)))
        for (unsigned i = 0; i < n; i++)
            if (node->gpus[i].pci == pci_index(o)) {
                objs[i] = o;
                hwloc_obj_add_info(o, "GPUModel", node->gpus[i].model);
            }
    for (unsigned i = 0; objs && i < n; i++)
        rc |= objs[i] == NULL;
    if (!objs || !values || rc || had_nvlink || !node->nvlink)
        goto out;
    for (unsigned i = 0; i < n * n; i++)
        values[i] = (hwloc_uint64_t)(node->nvlink[i] * 1000.0); /* MB/s, as hwloc's */
    h = hwloc_distances_add_create(topo, "NVLinkBandwidth", HWLOC_DISTANCES_KIND_FROM_OS |
                                   HWLOC_DISTANCES_KIND_MEANS_BANDWIDTH, 0);
    if (!h || hwloc_distances_add_values(topo, h, n, objs, values, 0) < 0 ||
        hwloc_distances_add_commit(topo, h, 0) < 0)
        rc = -1;
out:
    free(objs);
    free(values);
    return rc ? -1 : 0;
}

/* The plugin may read the file at any moment: a step must see the old file
 * or the new one, never half of one. */
static int export_atomic(hwloc_topology_t topo, const char *path, dt_error_t *err)
{
    char *xml = NULL;
    int len = 0, rc;

    if (hwloc_topology_export_xmlbuffer(topo, &xml, &len, 0) < 0 || len <= 0) {
        topo_seterr(err, "cannot write topology to '%.300s': hwloc export failed: %s", path,
                    strerror(errno));
        return -1;
    }
    /* hwloc counts the final NUL */
    rc = topo_write_atomic(path, xml, (size_t)len - 1, err);
    hwloc_free_xmlbuffer(topo, xml);
    return rc;
}

int dt_node_export_live(const char *path, dt_error_t *err)
{
    hwloc_topology_t topo;
    dt_node_t node = {0};
    unsigned had_nvlink = 0;
    int rc;

    if (open_topology(&topo, NULL, err) < 0)
        return -1;
    hwloc_distances_get_by_name(topo, "NVLinkBandwidth", &had_nvlink, NULL, 0);
    if (from_hwloc(&node, topo, err) < 0) {
        close_topology(topo);
        return -1;
    }
    if (topo_nvml_augment(&node) && annotate_nvml(topo, &node, had_nvlink > 0) < 0)
        fprintf(stderr, "ddp-topo: warning: NVML data could not be added to the export\n");
    dt_node_free(&node);
    rc = export_atomic(topo, path, err);
    close_topology(topo);
    return rc;
}
