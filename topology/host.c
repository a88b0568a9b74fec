/* SPDX-License-Identifier: Apache-2.0 */
/* Whether a topology file describes this machine, from what sysfs says
 * cheaply (no hwloc discovery, which costs up to a second on a large node):
 * the online CPUs, the core and NUMA counts, the NICs by name and the GPUs
 * by PCI address. A copied or stale cache otherwise binds ranks to NICs and
 * GPUs the node lacks, and the errors then blame the user's options. */
#include "ddptopo.h"
#include "internal.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    char *text;
    size_t len, used;
    unsigned count;
} diff_t;

static void diff_add(diff_t *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void diff_add(diff_t *d, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (d->count++ && d->used + 2 < d->len) {
        memcpy(d->text + d->used, "; ", 3);
        d->used += 2;
    }
    if (d->used >= d->len)
        return;
    va_start(ap, fmt);
    n = vsnprintf(d->text + d->used, d->len - d->used, fmt, ap);
    va_end(ap);
    d->used = n < 0 ? d->len : d->used + (size_t)n;
}

/* A sysfs CPU or node list ("0-3,8") into set; 0 when unreadable. */
static int read_list(const char *path, hwloc_bitmap_t set)
{
    char buf[4096];
    FILE *f = fopen(path, "re");
    int ok;

    if (!f)
        return 0;
    /* hwloc 2.9 reads "0-1\n" but takes "0\n" for an empty set: no newline */
    ok = fgets(buf, sizeof(buf), f) && (buf[strcspn(buf, "\n")] = '\0', 1) &&
         hwloc_bitmap_list_sscanf(set, buf) == 0;
    fclose(f);
    return ok;
}

static int path_exists(const char *fmt, const char *name)
{
    char path[512];

    snprintf(path, sizeof(path), fmt, name);
    return access(path, F_OK) == 0;
}

/* Cores: the online CPUs that come first among their thread siblings. */
static unsigned count_cores(hwloc_const_bitmap_t online)
{
    hwloc_bitmap_t sib = hwloc_bitmap_alloc();
    char path[128];
    unsigned n = 0;
    int cpu;

    hwloc_bitmap_foreach_begin(cpu, online) {
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list",
                 cpu);
        if (sib && read_list(path, sib) && hwloc_bitmap_first(sib) == cpu)
            n++;
    }
    hwloc_bitmap_foreach_end();
    hwloc_bitmap_free(sib);
    return n;
}

static void compare_cpus(const dt_node_t *node, diff_t *d)
{
    hwloc_bitmap_t file = hwloc_bitmap_alloc(), online = hwloc_bitmap_alloc();
    char *a = NULL, *b = NULL;
    unsigned cores;

    if (!file || !online || !read_list("/sys/devices/system/cpu/online", online))
        goto out;
    for (unsigned i = 0; i < node->ncores; i++)
        hwloc_bitmap_or(file, file, node->cores[i]);
    if (!hwloc_bitmap_isequal(file, online) && hwloc_bitmap_list_asprintf(&a, file) >= 0 &&
        hwloc_bitmap_list_asprintf(&b, online) >= 0)
        diff_add(d, "CPUs %.60s where this node has %.60s", a, b);
    cores = count_cores(online);
    if (cores && cores != node->ncores)
        diff_add(d, "%u cores where this node has %u", node->ncores, cores);
out:
    free(a);
    free(b);
    hwloc_bitmap_free(file);
    hwloc_bitmap_free(online);
}

static void compare_numa(const dt_node_t *node, diff_t *d)
{
    hwloc_bitmap_t online = hwloc_bitmap_alloc();
    int have;

    if (!online)
        return;
    /* a kernel without NUMA has no node directory: one node, as hwloc says */
    have = read_list("/sys/devices/system/node/online", online) ? hwloc_bitmap_weight(online) : 1;
    if (have > 0 && (unsigned)have != node->nnuma)
        diff_add(d, "%u NUMA nodes where this node has %d", node->nnuma, have);
    hwloc_bitmap_free(online);
}

/* What the node lacks, as "a, b, c and 5 more": the first few say enough. */
typedef struct {
    char names[160];
    unsigned n;
} missing_t;

static void missing_add(missing_t *m, const char *name)
{
    size_t used = strlen(m->names);

    if (m->n++ < 3)
        snprintf(m->names + used, sizeof(m->names) - used, "%s%.40s", used ? ", " : "", name);
}

static void missing_say(diff_t *d, const missing_t *m, const char *one, const char *many,
                        const char *where)
{
    if (m->n == 1)
        diff_add(d, "%s %s, which %s lacks", one, m->names, where);
    else if (m->n > 3)
        diff_add(d, "%u %s (%s and %u more), which %s lacks", m->n, many, m->names, m->n - 3,
                 where);
    else if (m->n)
        diff_add(d, "%s %s, which %s lacks", many, m->names, where);
}

static void compare_nics(const dt_node_t *node, diff_t *d)
{
    missing_t m = {.n = 0};

    for (unsigned i = 0; i < node->nnics; i++) {
        const char *name = node->nics[i].name;
        if (name[0] && !strchr(name, '/') && !path_exists("/sys/class/infiniband/%s", name) &&
            !path_exists("/sys/class/net/%s", name))
            missing_add(&m, name);
    }
    missing_say(d, &m, "NIC", "NICs", "this node");
}

static void compare_gpus(const dt_node_t *node, diff_t *d)
{
    missing_t m = {.n = 0};

    for (unsigned i = 0; i < node->ngpus; i++) {
        char bus[sizeof(node->gpus[i].busid)];
        size_t k;

        for (k = 0; node->gpus[i].busid[k] && k + 1 < sizeof(bus); k++)
            bus[k] = (char)tolower((unsigned char)node->gpus[i].busid[k]);
        bus[k] = '\0';
        if (bus[0] && !strchr(bus, '/') && !path_exists("/sys/bus/pci/devices/%s", bus))
            missing_add(&m, bus);
    }
    missing_say(d, &m, "a GPU at PCI", "GPUs at PCI", "this node's PCI bus");
}

int dt_node_check_host(const dt_node_t *node, dt_error_t *err)
{
    char text[600]; /* with the path and host name, within dt_error_t */
    diff_t d = {.text = text, .len = sizeof(text)};

    text[0] = '\0';
    compare_cpus(node, &d);
    compare_numa(node, &d);
    compare_nics(node, &d);
    compare_gpus(node, &d);
    if (!d.count)
        return 0;
    topo_seterr(err, "topology file '%.300s'%s%.64s%s describes another machine: %s",
                node->path[0] ? node->path : "(live)", node->hostname[0] ? " (made on " : "",
                node->hostname, node->hostname[0] ? ")" : "", text);
    return 1;
}
