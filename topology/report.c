/* SPDX-License-Identifier: Apache-2.0 */
/* The dry-run report: what every rank of a job will get, before it runs.
 * Nodes that share a topology and a task count share one plan, computed
 * once, so a 10,000-node report costs little more than a one-node one. */
#include "ddptopo.h"
#include "internal.h"

#include <stdlib.h>
#include <string.h>

int dt_topology_path(const char *pattern, const char *node, const char *host, char *buf,
                     size_t len, dt_error_t *err)
{
    size_t o = 0;

    for (const char *p = pattern; *p; p++) {
        const char *add = NULL;
        char one[2] = {*p, '\0'};
        if (*p == '%') {
            p++;
            add = *p == 'n' ? node : *p == 'h' ? host : *p == '%' ? "%" : NULL;
            if (!add) {
                topo_seterr(err, "topology pattern '%.200s': unknown '%%%c' (use %%n for the "
                            "node name, %%h for the host name, %%%% for %%)", pattern,
                            *p ? *p : ' ');
                return -1;
            }
        } else {
            add = one;
        }
        if (o + strlen(add) + 1 > len) {
            topo_seterr(err, "topology pattern '%.200s': path too long", pattern);
            return -1;
        }
        memcpy(buf + o, add, strlen(add));
        o += strlen(add);
        if (!*p)
            break;
    }
    buf[o] = '\0';
    return 0;
}

#define report_warn(r, ...) topo_strv_addf(&(r)->warnings, &(r)->nwarnings, __VA_ARGS__)

void dt_report_free(dt_report_t *r)
{
    if (!r)
        return;
    for (unsigned k = 0; k < r->nkinds; k++) {
        dt_node_free(&r->kinds[k].node);
        dt_node_plan_free(&r->kinds[k].plan);
        free(r->kinds[k].nodes);
    }
    topo_strv_free(r->warnings, r->nwarnings);
    free(r->kinds);
    free(r->kind_of);
    free(r->first_rank);
    free(r->node_ranks);
    free(r->counts);
    dt_layout_free(&r->layout);
    if (r->hosts)
        dt_hostlist_free(r->hosts, r->nhosts);
    free(r);
}

/* A single count applies to every node ("8" on 4 nodes). */
static int tasks_per_node(dt_report_t *r, dt_error_t *err)
{
    uint32_t n;

    if (dt_tasks_per_node_parse(r->opts.tasks_per_node, &r->counts, &n, err) < 0)
        return -1;
    if (n == 1 && r->nhosts > 1) {
        uint32_t c = r->counts[0];
        uint32_t *all = realloc(r->counts, r->nhosts * sizeof(uint32_t));
        if (!all)
            return -1;
        r->counts = all;
        for (size_t i = 0; i < r->nhosts; i++)
            all[i] = c;
        n = (uint32_t)r->nhosts;
    }
    if (n != r->nhosts) {
        topo_seterr(err, "tasks per node '%.100s' describes %u nodes but the node list has %zu",
                    r->opts.tasks_per_node, n, r->nhosts);
        return -1;
    }
    return dt_layout_build(&r->layout, r->counts, n, r->opts.dist, err);
}

static int new_kind(dt_report_t *r, const char *path, unsigned ntasks, dt_error_t *err)
{
    kind_t *k, *nk = realloc(r->kinds, (r->nkinds + 1) * sizeof(kind_t));
    dt_plan_request_t req = {.nranks = ntasks, .gpus = r->opts.gpus, .ngpus = r->opts.ngpus,
                             .share_gpus = r->opts.share_gpus};
    int rc;

    if (!nk)
        return -1;
    r->kinds = nk;
    k = memset(&nk[r->nkinds], 0, sizeof(*k));
    snprintf(k->path, sizeof(k->path), "%s", path);
    k->ntasks = ntasks;
    rc = path[0] ? dt_node_load_file(&k->node, path, err) : dt_node_load_live(&k->node, err);
    if (rc < 0)
        return -1;
    if (dt_plan_node(&k->node, &req, &k->plan, err) < 0) {
        static const char srun_hint[] = "(--ddp-topo=auto,share)";
        char msg[sizeof(err->text)];
        size_t n = strlen(err->text), h = sizeof(srun_hint) - 1;
        int hint = n >= h && !strcmp(err->text + n - h, srun_hint);
        /* the plan's hint is the job's flag; the report's own comes first here */
        snprintf(msg, sizeof(msg), "%.*s%s", (int)(hint ? n - h : n), err->text,
                 hint ? "(--share here; --ddp-topo=auto,share in the job)" : "");
        topo_seterr(err, "plan for %s: %s", path[0] ? path : "this machine", msg);
        dt_node_free(&k->node);
        return -1;
    }
    r->nkinds++;
    return 0;
}

/* Group nodes by (topology file, task count); plan each group once. */
static int plan_nodes(dt_report_t *r, dt_error_t *err)
{
    const char *pat = r->opts.topology && strcmp(r->opts.topology, "live") ? r->opts.topology : "";

    if (!(r->kind_of = calloc(r->nhosts, sizeof(unsigned))))
        return -1;
    for (size_t i = 0; i < r->nhosts; i++) {
        char path[512];
        unsigned k;
        if (dt_topology_path(pat, r->hosts[i], r->hosts[i], path, sizeof(path), err) < 0)
            return -1;
        for (k = 0; k < r->nkinds; k++)
            if (r->kinds[k].ntasks == r->counts[i] && !strcmp(r->kinds[k].path, path))
                break;
        if (k == r->nkinds && new_kind(r, path, r->counts[i], err) < 0)
            return -1;
        r->kind_of[i] = k;
        r->kinds[k].count++;
    }
    for (unsigned k = 0; k < r->nkinds; k++) {
        char **names = calloc(r->kinds[k].count, sizeof(char *));
        size_t n = 0;
        for (size_t i = 0; names && i < r->nhosts; i++)
            if (r->kind_of[i] == k)
                names[n++] = r->hosts[i];
        r->kinds[k].nodes = names ? dt_hostlist_compress(names, n) : NULL;
        free(names);
        if (!r->kinds[k].nodes)
            return -1;
    }
    return 0;
}

static int index_ranks(dt_report_t *r)
{
    uint32_t *fill;

    r->first_rank = calloc(r->nhosts + 1, sizeof(uint32_t));
    r->node_ranks = calloc(r->layout.ntasks + 1, sizeof(uint32_t));
    fill = calloc(r->nhosts + 1, sizeof(uint32_t));
    if (!r->first_rank || !r->node_ranks || !fill) {
        free(fill);
        return -1;
    }
    for (size_t i = 0; i < r->nhosts; i++)
        r->first_rank[i + 1] = r->first_rank[i] + r->counts[i];
    for (uint32_t q = 0; q < r->layout.ntasks; q++) {
        uint32_t node = r->layout.node_of[q];
        r->node_ranks[r->first_rank[node] + fill[node]++] = q;
    }
    free(fill);
    return 0;
}

/* MASTER_PORT (runtime 0) or DDPRT_PORT (1) as the plugin picks it
 * (spank_plugin/remote.c): reserved port 0 or 1, else derived in the range,
 * else how it will be. */
static int port_text(const dt_report_t *r, int runtime, char *buf, size_t len, dt_error_t *err)
{
    const dt_report_opts_t *o = &r->opts;
    uint16_t lo = o->port_lo, hi = o->port_hi;
    uint16_t port = 0;
    int rc = 1;

    if (o->resv_ports && (rc = dt_resv_ports_nth(o->resv_ports, (unsigned)runtime, &port, err)) < 0)
        return -1;
    if (rc && o->job_id >= 0) {
        uint32_t job = (uint32_t)o->job_id, step = (uint32_t)(o->step_id < 0 ? 0 : o->step_id),
                 restart = (uint32_t)(o->restart_count < 0 ? 0 : o->restart_count);
        port = runtime ? dt_runtime_port(job, step, restart, lo, hi)
                       : dt_master_port(job, step, restart, lo, hi);
    }
    if (port && rc && o->job_id >= 0) /* derived: for one step only */
        snprintf(buf, len, "%u (step %ld%s)", port, o->step_id < 0 ? 0 : o->step_id,
                 o->step_id < 0 ? ", the job's first srun; --step-id N for another" : "");
    else if (port)
        snprintf(buf, len, "%u", port);
    else if (runtime && lo == hi)
        snprintf(buf, len, "not set: port range %u-%u holds MASTER_PORT only", lo, hi);
    else
        snprintf(buf, len, "derived at launch from job id, step id and restart count (%u-%u%s)",
                 lo, hi, runtime ? ", counting down where MASTER_PORT counts up" : "");
    return 0;
}

static int master(dt_report_t *r, dt_error_t *err)
{
    const char *host = r->layout.ntasks ? r->hosts[r->layout.node_of[0]] : r->hosts[0];

    if ((size_t)snprintf(r->master_addr, sizeof(r->master_addr), "%s", host) >=
        sizeof(r->master_addr)) {
        topo_seterr(err, "node name '%.60s...' is longer than %zu characters (no host name is)",
                    host, sizeof(r->master_addr) - 1);
        return -1;
    }
    return port_text(r, 0, r->master_port, sizeof(r->master_port), err) < 0 ||
           port_text(r, 1, r->runtime_port, sizeof(r->runtime_port), err) < 0 ? -1 : 0;
}

static void job_warnings(dt_report_t *r)
{
    for (size_t i = 1; i < r->nhosts; i++)
        if (r->counts[i] != r->counts[0]) {
            report_warn(r, "uneven tasks per node (%s): hierarchical allreduce is disabled, "
                        "the flat ring is used", r->opts.tasks_per_node);
            break;
        }
    for (unsigned k = 0; k < r->nkinds; k++)
        for (unsigned w = 0; w < r->kinds[k].plan.nwarnings; w++)
            report_warn(r, "%s: %s", r->kinds[k].nodes, r->kinds[k].plan.warnings[w]);
}

/* NVLink GPUs (SXM) by PCI device id, for sources without an NVLink matrix:
 * NCCL's effective ring bandwidth (links x GB/s per link). */
static const struct {
    unsigned device;
    double gbps;
    const char *name;
} sxm_gpus[] = {
    {0x15f9, 4 * 18.0, "P100 SXM2"},  {0x1db1, 6 * 20.0, "V100 SXM2"},
    {0x1db5, 6 * 20.0, "V100 SXM2"},  {0x1db8, 6 * 20.0, "V100 SXM3"},
    {0x20b0, 12 * 20.0, "A100 SXM4"}, {0x20b2, 12 * 20.0, "A100 SXM4"},
    {0x2330, 18 * 20.6, "H100 SXM5"}, {0x2335, 18 * 20.6, "H200 SXM"},
};

/* Intra-node level: the ring over the plan's GPU order. */
static void intra_level(const kind_t *k, dt_cost_t *c, char *why, size_t len)
{
    const dt_node_t *node = &k->node;
    const dt_node_plan_t *plan = &k->plan;
    double ring = -1;

    c->intra_gbps = 10;
    c->intra_us = 1;
    snprintf(why, len, "shared memory (default 10 GB/s, 1 us)");
    if (plan->nvisible < 1)
        return;
    for (unsigned d = 0; node->nvlink && d < plan->nvisible && d < plan->nranks; d++) {
        double bw = dt_node_nvlink(node, (unsigned)plan->ranks[d].gpu,
                                   (unsigned)plan->ranks[(d + 1) % plan->nvisible].gpu);
        ring = ring < 0 || bw < ring ? bw : ring;
    }
    if (ring > 0) {
        c->intra_gbps = ring;
        c->intra_us = 2;
        snprintf(why, len, "NVLink from the topology (%.0f GB/s per ring hop, 2 us)", ring);
        return;
    }
    for (size_t i = 0; !node->nvlink && i < sizeof(sxm_gpus) / sizeof(sxm_gpus[0]); i++) {
        int pci = node->gpus[plan->ranks[0].gpu].pci;
        if (pci >= 0 && node->pci[pci].device == sxm_gpus[i].device) {
            c->intra_gbps = sxm_gpus[i].gbps;
            c->intra_us = 2;
            snprintf(why, len, "NVLink default for %s (%.0f GB/s, 2 us)", sxm_gpus[i].name,
                     sxm_gpus[i].gbps);
            return;
        }
    }
    c->intra_gbps = 12;
    c->intra_us = 3;
    snprintf(why, len, "PCIe (default 12 GB/s, 3 us: %s)",
             node->nvlink ? "GPUs without NVLink between them" : "no NVLink information");
}

/* Inter-node level: the NICs the node's ranks use. */
static void inter_level(const kind_t *k, dt_cost_t *c, char *why, size_t len)
{
    const dt_node_t *node = &k->node;
    unsigned used = 0;
    double rate = 0;
    const dt_nic_t *first = NULL;

    for (unsigned i = 0; i < node->nnics; i++) {
        int in_use = 0;
        for (unsigned r = 0; r < k->plan.nranks; r++)
            in_use |= k->plan.ranks[r].nic == (int)i;
        if (!in_use)
            continue;
        used++;
        first = first ? first : &node->nics[i];
        if (node->nics[i].gbps > 0 && (rate == 0 || node->nics[i].gbps < rate))
            rate = node->nics[i].gbps;
    }
    if (!first) {
        c->inter_gbps = 10 / 8.0;
        c->inter_us = 25;
        snprintf(why, len, "no NIC in the topology (default 10 Gb/s TCP, 25 us)");
        return;
    }
    c->inter_us = first->kind == DT_NIC_ETHERNET ? 25 : 5;
    snprintf(why, len, "%u x %s %.0f Gb/s (%s), %.0f us", used, dt_nic_kind_name(first->kind),
             rate > 0 ? rate : first->kind == DT_NIC_ETHERNET ? 25 : 100,
             rate > 0 ? "from the topology" : "default rate", c->inter_us);
    if (rate == 0)
        rate = first->kind == DT_NIC_ETHERNET ? 25 : 100;
    c->inter_gbps = used * rate / 8.0;
}

static void predict(dt_report_t *r)
{
    const kind_t *k = &r->kinds[r->kind_of[0]];
    dt_cost_t *c = &r->cost;
    const dt_report_opts_t *o = &r->opts;

    c->bytes = o->model_params * o->dtype_bytes;
    c->nodes = (unsigned)r->nhosts;
    c->ranks_per_node = k->ntasks;
    c->uniform = 1;
    for (size_t i = 1; i < r->nhosts; i++)
        c->uniform &= r->counts[i] == r->counts[0];
    intra_level(k, c, r->intra_why, sizeof(r->intra_why));
    inter_level(k, c, r->inter_why, sizeof(r->inter_why));
    if (o->intra_gbps > 0 || o->intra_us > 0)
        snprintf(r->intra_why, sizeof(r->intra_why), "given on the command line");
    if (o->inter_gbps > 0 || o->inter_us > 0)
        snprintf(r->inter_why, sizeof(r->inter_why), "given on the command line");
    c->intra_gbps = o->intra_gbps > 0 ? o->intra_gbps : c->intra_gbps;
    c->intra_us = o->intra_us > 0 ? o->intra_us : c->intra_us;
    c->inter_gbps = o->inter_gbps > 0 ? o->inter_gbps : c->inter_gbps;
    c->inter_us = o->inter_us > 0 ? o->inter_us : c->inter_us;
    dt_cost_allreduce(c);
}

int dt_report_build(const dt_report_opts_t *opts, dt_report_t **out, dt_error_t *err)
{
    dt_report_t *r = calloc(1, sizeof(*r));

    if (!r) {
        topo_seterr(err, "report: out of memory");
        return -1;
    }
    r->opts = *opts;
    err->text[0] = '\0';
    if (dt_hostlist_expand(opts->nodelist, &r->hosts, &r->nhosts, err) < 0 ||
        tasks_per_node(r, err) < 0 || plan_nodes(r, err) < 0 || index_ranks(r) < 0 ||
        master(r, err) < 0) {
        if (!err->text[0])
            topo_seterr(err, "report: out of memory");
        dt_report_free(r);
        return -1;
    }
    job_warnings(r);
    r->have_cost = opts->model_params > 0;
    if (r->have_cost)
        predict(r);
    *out = r;
    return 0;
}
