/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by libddptopo's source files; not part of the public API
 * (the library exports only dt_* symbols). */
#ifndef DDPTOPO_INTERNAL_H
#define DDPTOPO_INTERNAL_H

#include "ddptopo.h"

void topo_seterr(dt_error_t *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void topo_seterr_code(dt_error_t *err, dt_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* xml.c: parse XML from memory (no network, silent), for both loaders */
struct _xmlDoc *topo_xml_read(const char *buf, size_t len);
/* Append a formatted string to a malloc'd vector (warnings). */
void topo_strv_addf(char ***v, unsigned *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void topo_strv_free(char **v, unsigned n);
/* Copy a display string (a GPU model) into a fixed field, ending it with
 * "..." when it does not fit, so a cut is never silent. */
void topo_copy_elided(char *dst, size_t size, const char *src);

/* pciname.c: a GPU's model from a PCI database name ("GA100 [A100 SXM4
 * 40GB]" -> "A100 SXM4 40GB"), or from its ids: pci.ids's name where
 * libpci knows them (returns 1), else "NVIDIA [10de:20b0]" (returns 0). */
void topo_gpu_name(char *dst, size_t size, const char *name);
int topo_gpu_name_ids(char *dst, size_t size, unsigned vendor, unsigned device);
/* pciids.c, in libddptopo only: pci.ids's name for the ids (returns 1).
 * Weak and hidden: where it is not linked in (the SPANK plugin) it is
 * NULL, and no other object can supply it at load time. */
int topo_pci_ids_lookup(char *buf, size_t size, unsigned vendor, unsigned device)
    __attribute__((weak, visibility("hidden")));

/* file.c: write a whole file so that readers see the old one or the new */
/* s as a JSON string, quotes and escapes included (report-write.c) */
void topo_json_str(FILE *f, const char *s);
int topo_write_atomic(const char *path, const char *buf, size_t len, dt_error_t *err);

/* The loaders are layered, each calling only down: node.c dispatches a
 * file to hwloc-node.c or nccl-node.c; hwloc-node.c asks nvml.c; all of
 * them sit on node-core.c and xml.c, which call none of them back. */

/* node-core.c: shared by the loaders */
int topo_numa_of(const dt_node_t *node, hwloc_const_bitmap_t locality);
int topo_package_of(const dt_node_t *node, hwloc_const_bitmap_t locality);
void topo_number_gpus(dt_node_t *node, int have_index);
void topo_nvlink_switches(dt_node_t *node, const double *sw);
/* GB/s of one NVLink by compute capability (NCCL's effective figures). */
double topo_nvlink_gbps(int sm);

/* nvml.c: GPU names and NVLink from NVML, when libnvidia-ml can be loaded
 * (returns 1 then). Fills node->nvlink only when the source had none. */
int topo_nvml_augment(dt_node_t *node);

/* the loaders, on a file's contents (NUL-terminated, len bytes), its
 * prolog already checked by dt_node_load_file */
int topo_load_hwloc_xml(dt_node_t *node, const char *path, const char *buf, size_t len,
                        dt_error_t *err);
int topo_load_nccl_xml(dt_node_t *node, const char *path, const char *buf, size_t len,
                       dt_error_t *err);

/* report.c and report-write.c: the report, built then written */
typedef struct {
    char path[512];  /* "" for live discovery */
    unsigned ntasks;
    dt_node_t node;
    dt_node_plan_t plan;
    char *nodes;     /* hostlist of the nodes with this plan */
    unsigned count;
} kind_t;

struct dt_report {
    dt_report_opts_t opts;
    char **hosts;
    size_t nhosts;
    uint32_t *counts;
    dt_layout_t layout;
    unsigned nkinds;
    kind_t *kinds;
    unsigned *kind_of;        /* per node */
    uint32_t *first_rank;     /* per node + 1: ranks of node i are node_ranks[first..next) */
    uint32_t *node_ranks;
    char master_addr[256];
    char master_port[160];
    char runtime_port[160]; /* DDPRT_PORT, or how it will be chosen */
    int have_cost;
    dt_cost_t cost;
    char intra_why[96], inter_why[96];
    unsigned nwarnings;
    char **warnings;
};

#endif
