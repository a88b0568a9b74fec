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

/* Take core c: its CPUs (PUs) count against `need`, and against *avail. */
static void take_core(const dt_node_t *node, unsigned c, char *taken, hwloc_bitmap_t out,
                      long *need, long *avail)
{
    long pus = hwloc_bitmap_weight(node->cores[c]);

    taken[c] = 1;
    hwloc_bitmap_or(out, out, node->cores[c]);
    *need = *need > pus ? *need - pus : 0;
    if (avail)
        *avail = *avail > pus ? *avail - pus : 0;
}

/* The cores SLURM allocates on an idle node for `need` CPUs, tasks of `cpt`
 * CPUs, among the cores a GPU request left (select/cons_tres, CR_Core, the
 * default distribution: dist_tasks.c, _cyclic_sync_core_bitmap, the same in
 * 22.05, 24.11 and 26.05): with cpt > 1 each socket's CPUs, rounded down to
 * whole tasks, are filled socket after socket, so a task's CPUs stay on one
 * socket; what is left (all of it for cpt 1) is taken one core per socket in
 * turn. sock[c]: core c's socket; NO_SOCKET for a core the GPUs' filter
 * removed (gpu_sockets). */
static void slurm_cores(const dt_node_t *node, const unsigned *sock, long need, unsigned cpt,
                        char *taken, hwloc_bitmap_t out)
{
    unsigned nsock = node->npackages + 1;
    long before = 0;

    for (unsigned s = 0; cpt > 1 && s < nsock; s++) {
        long avail = 0;
        for (unsigned c = 0; c < node->ncores; c++)
            avail += sock[c] == s ? hwloc_bitmap_weight(node->cores[c]) : 0;
        avail -= avail % cpt;
        for (unsigned c = 0; c < node->ncores && avail > 0 && need > 0; c++)
            if (sock[c] == s)
                take_core(node, c, taken, out, &need, &avail);
    }
    while (need > 0 && need != before) { /* stops when no core is left */
        before = need;
        for (unsigned s = 0; s < nsock && need > 0; s++) {
            unsigned c = 0;
            while (c < node->ncores && (taken[c] || sock[c] != s))
                c++;
            if (c < node->ncores)
                take_core(node, c, taken, out, &need, NULL);
        }
    }
}

/* A job that asks for GPUs first has its cores cut to what it needs, spread
 * over the sockets of its GPUs (22.05: cons_common/gres_select_filter.c,
 * gres_select_filter_sock_core, which clears the cores; 24.11 and 26.05:
 * topology/common/gres_filter.c, gres_filter_sock_core, counting cores per
 * socket, and eval_nodes.c, eval_nodes_clip_socket_cores, clearing them):
 * one core at a time comes off the socket with the most left (the first of
 * equals), its highest-numbered core, until the tasks' cores remain. So
 * 8 tasks x 4 CPUs with GPUs on both sockets get 16 cores on each, not 32 on
 * the first. Its GPUs' sockets are the ones gres.conf's Cores= puts them on,
 * taken here as the topology's (what AutoDetect=nvml writes); GPUs without
 * a known socket (gres.conf without Cores=) make every socket one, and so do
 * sockets with too few cores (SLURM's second pass, unless enforce-binding). */
#define NO_SOCKET (~0u)
static void gpu_sockets(const dt_node_t *node, const dt_report_opts_t *o, unsigned *sock,
                        long need)
{
    unsigned nsock = node->npackages + 1, tpc = hwloc_bitmap_weight(node->cores[0]);
    long *cnt = calloc(nsock, sizeof(long)), total = 0, want;
    char *req = calloc(nsock, 1);
    int all = 0;

    if (!cnt || !req || !tpc)
        goto out; /* out of memory: the cores dist_tasks alone would give */
    want = (need + tpc - 1) / tpc;
    for (unsigned k = 0; k < o->ngpus; k++) {
        unsigned g = 0;
        while (g < node->ngpus && !(node->gpus[g].nvidia && node->gpus[g].index == o->gpus[k]))
            g++;
        if (g < node->ngpus && node->gpus[g].pci >= 0 && node->pci[node->gpus[g].pci].package >= 0 &&
            (unsigned)node->pci[node->gpus[g].pci].package < node->npackages)
            req[node->pci[node->gpus[g].pci].package] = 1;
        else
            all = 1;
    }
    for (unsigned c = 0; c < node->ncores; c++)
        total += all || req[sock[c]];
    all |= total < want; /* too few near the GPUs: SLURM's second pass takes any socket */
    total = 0;
    for (unsigned c = 0; c < node->ncores; c++)
        if (all || req[sock[c]]) {
            cnt[sock[c]]++;
            total++;
        }
    while (total > want) {
        unsigned full = 0;
        for (unsigned s = 1; s < nsock; s++)
            full = cnt[s] > cnt[full] ? s : full;
        cnt[full]--;
        total--;
    }
    for (unsigned c = 0; c < node->ncores; c++) { /* each socket keeps its first cnt cores */
        unsigned s = sock[c];
        if (cnt[s] > 0 && (all || req[s]))
            cnt[s]--;
        else
            sock[c] = NO_SOCKET;
    }
out:
    free(cnt);
    free(req);
}

/* The node's CPUs for ntasks x cpus_per_task into `out`, or an error
 * when the node has fewer. */
static int allocated_cpus(const dt_node_t *node, const dt_report_opts_t *o, unsigned ntasks,
                          unsigned cpt, hwloc_bitmap_t out, dt_error_t *err)
{
    unsigned *sock = calloc(node->ncores + 1, sizeof(unsigned));
    char *taken = calloc(node->ncores + 1, 1);
    long have = 0, need = (long)ntasks * cpt;
    int rc = -1;

    if (!sock || !taken) {
        topo_seterr(err, "report: out of memory");
        goto out;
    }
    for (unsigned c = 0; c < node->ncores; c++) {
        have += hwloc_bitmap_weight(node->cores[c]);
        sock[c] = node->npackages;
        for (unsigned p = 0; p < node->npackages && sock[c] == node->npackages; p++)
            if (hwloc_bitmap_isincluded(node->cores[c], node->packages[p]))
                sock[c] = p;
    }
    if (need > have) {
        topo_seterr_code(err, DT_E_CPUS, "--cpus-per-task=%u x %u tasks = %ld CPUs, but the "
                         "node has %ld CPUs (%u cores)", cpt, ntasks, need, have, node->ncores);
        goto out;
    }
    if (o->gpus && o->ngpus)
        gpu_sockets(node, o, sock, need);
    slurm_cores(node, sock, need, cpt, taken, out);
    rc = 0;
out:
    free(sock);
    free(taken);
    return rc;
}

/* Cores of a node with a CPU in `cpus`. */
static unsigned cores_in(const dt_node_t *node, hwloc_const_bitmap_t cpus)
{
    unsigned n = 0;

    for (unsigned c = 0; cpus && c < node->ncores; c++)
        n += hwloc_bitmap_intersects(node->cores[c], cpus);
    return n;
}

/* Cores of a node kind the plan gave out: a core counts when any rank has
 * one of its CPUs. */
static unsigned cores_used(const kind_t *k)
{
    hwloc_bitmap_t all = hwloc_bitmap_alloc();
    unsigned n;

    for (unsigned r = 0; all && r < k->plan.nranks; r++)
        hwloc_bitmap_or(all, all, k->plan.ranks[r].cpus);
    n = cores_in(&k->node, all);
    hwloc_bitmap_free(all);
    return n;
}

/* Threads of one core share its package: CPUs in two packages never pair. */
static int same_package(const dt_node_t *node, int a, int b)
{
    for (unsigned p = 0; p < node->npackages; p++)
        if (hwloc_bitmap_isset(node->packages[p], (unsigned)a))
            return hwloc_bitmap_isset(node->packages[p], (unsigned)b);
    return 1;
}

/* An NCCL file lists CPUs, not cores, nor which CPUs are threads of one
 * core: split as cores, two ranks may get the two threads of the same
 * cores. Linux numbers a core's second thread half the node's CPU count
 * higher on most x86 nodes (AWS's p4d: CPU n and n+48, in one package), so
 * the ranks that would pair so are named, as a possibility, not a fact. */
static void sibling_warning(const dt_report_t *r, kind_t *k)
{
    hwloc_bitmap_t all = hwloc_bitmap_alloc(), twin = hwloc_bitmap_alloc();
    char pairs[160] = "";
    size_t o = 0;
    unsigned n = 0;
    int half;

    if (!all || !twin || k->node.source != DT_SOURCE_NCCL_XML || !(r->opts.bind & DT_BIND_CPU))
        goto out; /* without CPU binding no rank keeps to its share */
    for (unsigned c = 0; c < k->node.ncores; c++)
        hwloc_bitmap_or(all, all, k->node.cores[c]);
    half = hwloc_bitmap_weight(all) / 2;
    if (half < 1 || hwloc_bitmap_last(all) != 2 * half - 1) /* CPUs 0..N-1, N even */
        goto out;
    for (unsigned a = 0; a < k->plan.nranks; a++) {
        int cpu;
        hwloc_bitmap_zero(twin);
        hwloc_bitmap_foreach_begin(cpu, k->plan.ranks[a].cpus)
            if (same_package(&k->node, cpu, cpu < half ? cpu + half : cpu - half))
                hwloc_bitmap_set(twin, (unsigned)(cpu < half ? cpu + half : cpu - half));
        hwloc_bitmap_foreach_end();
        for (unsigned b = a + 1; b < k->plan.nranks; b++)
            if (hwloc_bitmap_intersects(twin, k->plan.ranks[b].cpus) && o < sizeof(pairs)) {
                int w = snprintf(pairs + o, sizeof(pairs) - o, "%s%u and %u", n ? ", " : "", a, b);
                o = w > 0 && o + (size_t)w < sizeof(pairs) ? o + (size_t)w : sizeof(pairs);
                n++;
            }
    }
    if (n)
        topo_strv_addf(&k->plan.warnings, &k->plan.nwarnings, "local ranks %s%s may share "
                       "physical cores: the NCCL file lists CPUs, not cores, and where CPU n+%d is "
                       "CPU n's hyperthread (Linux's usual x86 numbering; lscpu -e shows it) their "
                       "CPUs are the two threads of the same cores (an hwloc export of the node, "
                       "lstopo --of xml, knows its cores)", pairs,
                       o >= sizeof(pairs) ? " ..." : "", half);
out:
    hwloc_bitmap_free(all);
    hwloc_bitmap_free(twin);
}

/* Plan one kind of node, as the plugin would: over the cores the step is
 * allocated (all of them without --cpus-per-task, or with --exclusive:
 * SLURM 22.05's dist_tasks returns before _cyclic_sync_core_bitmap for a
 * whole-node job). The tasks must still fit the node. */
static int plan_kind(dt_report_t *r, kind_t *k, dt_error_t *err)
{
    dt_plan_request_t req = {.nranks = k->ntasks, .gpus = r->opts.gpus, .ngpus = r->opts.ngpus,
                             .share_gpus = r->opts.share_gpus};
    hwloc_bitmap_t cpus = r->opts.cpus_per_task ? hwloc_bitmap_alloc() : NULL;
    unsigned given;
    int rc = -1;

    if (r->opts.cpus_per_task && !cpus)
        topo_seterr(err, "report: out of memory");
    else if (!cpus || allocated_cpus(&k->node, &r->opts, k->ntasks, r->opts.cpus_per_task, cpus, err) == 0) {
        req.cpus = r->opts.exclusive ? NULL : cpus;
        rc = dt_plan_node(&k->node, &req, &k->plan, err);
        if (rc == DT_PLAN_NEEDS_SHARE) /* the report's flag, then the job's */
            snprintf(err->text + strlen(err->text), sizeof(err->text) - strlen(err->text),
                     " (ddp-topo report --share; --ddp-topo=auto,share in the job)");
    }
    /* -c for every core of the node: groups keep to their GPUs' cores (dt_plan_node), so
     * others may stay idle; part of a node is used whole */
    if (rc == 0 && req.cpus && (given = cores_used(k)) < cores_in(&k->node, cpus))
        topo_strv_addf(&k->plan.warnings, &k->plan.nwarnings, "%u of the %u allocated cores "
                       "left idle: no rank's GPU is near them", cores_in(&k->node, cpus) - given,
                       cores_in(&k->node, cpus));
    if (rc == 0)
        sibling_warning(r, k);
    hwloc_bitmap_free(cpus);
    return rc;
}

static int new_kind(dt_report_t *r, const char *path, unsigned ntasks, dt_error_t *err)
{
    kind_t *k, *nk = realloc(r->kinds, (r->nkinds + 1) * sizeof(kind_t));
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
    if (plan_kind(r, k, err) < 0) {
        char msg[sizeof(err->text)];
        snprintf(msg, sizeof(msg), "%s", err->text);
        topo_seterr_code(err, err->code, "plan for %s: %s", path[0] ? path : "this machine", msg);
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

/* Cores SLURM allocates to a kind's tasks; 0 on out of memory. */
static unsigned allocated_cores(const dt_report_t *r, const kind_t *k, unsigned cpt)
{
    hwloc_bitmap_t cpus = hwloc_bitmap_alloc();
    dt_error_t err;
    unsigned n = cpus && allocated_cpus(&k->node, &r->opts, k->ntasks, cpt, cpus, &err) == 0
                 ? cores_in(&k->node, cpus) : 0;

    hwloc_bitmap_free(cpus);
    return n;
}

void dt_report_cores(const dt_report_t *r, char *buf, size_t len)
{
    const kind_t *k = &r->kinds[r->kind_of[0]];
    unsigned same = 1, cpt = r->opts.exclusive ? 0 : r->opts.cpus_per_task;
    char first[48] = "";

    for (unsigned i = 0; i < r->nkinds; i++) /* the same core count: the same allocation */
        same &= r->kinds[i].node.ncores == k->node.ncores &&
                (!cpt || r->kinds[i].ntasks == k->ntasks);
    if (!same) /* nodes of other topologies or task counts differ */
        snprintf(first, sizeof(first), " on the first node");
    /* An NCCL file has no core/thread layout: each of its CPUs counts as a
     * core, so the ranks' shares of all CPUs may pair hyperthreads of one
     * core (sibling_warning names the ranks; without CPU binding it does not
     * matter), and SLURM's -c cores take their siblings along. */
    const char *nccl = k->node.source != DT_SOURCE_NCCL_XML ? ""
                       : cpt ? "; the file lists CPUs, not cores: with hyperthreads SLURM gives "
                               "whole cores, their sibling CPUs included"
                       : r->opts.bind & DT_BIND_CPU
                             ? "; the file lists CPUs, not cores: with hyperthreads two ranks may "
                               "get the two threads of one core"
                             : "";
    if (r->opts.exclusive)
        snprintf(buf, len, "cores: all %u cores of each node%s (--exclusive)%s", k->node.ncores,
                 first, nccl);
    else if (!cpt)
        snprintf(buf, len, "cores: all %u of each node%s (--exclusive or a whole-node partition); "
                 "SLURM gives each task 1 CPU on a shared node unless -c is given%s",
                 k->node.ncores, first, nccl);
    else
        snprintf(buf, len, "cores: --cpus-per-task=%u x %u tasks = %u CPUs: %u of %u cores per "
                 "node%s, as SLURM 22.05-26.05 allocates them on an idle node %s; the job binds "
                 "within the cores SLURM really gives it%s", cpt, k->ntasks, cpt * k->ntasks,
                 allocated_cores(r, k, cpt), k->node.ncores, first, r->opts.gpus && r->opts.ngpus
                 ? "to a job with GPUs (spread evenly over its GPUs' sockets, by gres.conf's "
                   "Cores=)"
                 : "to a job without GPUs (a socket's cores before the next's)", nccl);
}
