/* SPDX-License-Identifier: Apache-2.0 */
/* The binding plan of one node: GPU, cores, memory node and NIC for each
 * local rank. */
#include "ddptopo.h"
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dt_bind_parse(const char *spec, unsigned *bind, dt_error_t *err)
{
    static const char *const names[] = {"gpu", "cpu", "mem", "nic"};
    const char *s = spec ? spec : "";
    unsigned b = 0;

    if (!strcmp(s, "none")) {
        *bind = 0;
        return 0;
    }
    do {
        size_t len = strcspn(s, ",");
        unsigned i;
        for (i = 0; i < 4; i++)
            if (strlen(names[i]) == len && !strncmp(s, names[i], len))
                break;
        if (i == 4) {
            topo_seterr(err, "binding '%.100s': unknown item '%.*s' (expected none, or a comma "
                        "list of gpu, cpu, mem, nic)", spec ? spec : "", (int)(len > 40 ? 40 : len), s);
            return -1;
        }
        b |= 1u << i;
        s += len;
    } while (*s++ == ',');
    *bind = b;
    return 0;
}

const char *dt_bind_name(unsigned bind, char *buf, size_t len)
{
    static const char *const names[] = {"gpu", "cpu", "mem", "nic"};
    size_t used = 0;

    snprintf(buf, len, "none");
    for (unsigned i = 0; i < 4; i++)
        if (bind & (1u << i))
            used += (size_t)snprintf(buf + used, used < len ? len - used : 0, "%s%s",
                                     used ? "," : "", names[i]);
    return buf;
}

void dt_node_plan_free(dt_node_plan_t *plan)
{
    for (unsigned i = 0; plan->ranks && i < plan->nranks; i++)
        hwloc_bitmap_free(plan->ranks[i].cpus);
    topo_strv_free(plan->warnings, plan->nwarnings);
    free(plan->ranks);
    free(plan->visible);
    memset(plan, 0, sizeof(*plan));
}

#define warn(plan, ...) topo_strv_addf(&(plan)->warnings, &(plan)->nwarnings, __VA_ARGS__)

/* ---- GPUs ------------------------------------------------------------------ */

/* How well two GPUs talk: NVLink bandwidth first, then PCIe proximity. */
static double closeness(const dt_node_t *node, int a, int b)
{
    return dt_node_nvlink(node, (unsigned)a, (unsigned)b) * 10.0 +
           (double)(DT_PATH_SYSTEM - dt_node_pci_path(node, node->gpus[a].pci, node->gpus[b].pci));
}

/* The allocated NVIDIA GPUs, as positions in node->gpus. */
static int candidate_gpus(const dt_node_t *node, const dt_plan_request_t *req, int *out,
                          unsigned *n, dt_error_t *err)
{
    *n = 0;
    if (!req->gpus) {
        for (unsigned i = 0; i < node->ngpus; i++)
            if (node->gpus[i].nvidia)
                out[(*n)++] = (int)i;
        return 0;
    }
    for (unsigned k = 0; k < req->ngpus; k++) {
        unsigned i;
        for (i = 0; i < node->ngpus; i++)
            if (node->gpus[i].nvidia && node->gpus[i].index == req->gpus[k])
                break;
        if (i == node->ngpus) {
            /* the fact only: the plugin blames the file, the dry run the request */
            topo_seterr_code(err, DT_E_GPU_MISSING, "GPU %d was allocated but the topology "
                             "has %u NVIDIA GPU%s", req->gpus[k], dt_node_nvidia_gpus(node),
                             dt_node_nvidia_gpus(node) == 1 ? "" : "s");
            return -1;
        }
        out[(*n)++] = (int)i;
    }
    return 0;
}

/* GPU cand[i]'s closest partner among the candidates. */
static double best_partner(const dt_node_t *node, const int *cand, unsigned n, unsigned i)
{
    double s = 0;

    for (unsigned j = 0; j < n; j++) {
        double c = j == i ? 0 : closeness(node, cand[i], cand[j]);
        s = c > s ? c : s;
    }
    return s;
}

/* Keep the k best-connected of the n candidates: the GPU with the closest
 * partner first, then each time the GPU most tied to those kept. Each
 * GPU's tie to the kept set grows as GPUs join, so the whole choice costs
 * n x n closeness questions, not k x n x n. */
static void best_subset(const dt_node_t *node, int *cand, unsigned n, unsigned k)
{
    char *kept = calloc(n, 1);
    double *tie = calloc(n, sizeof(double));

    for (unsigned i = 0; kept && tie && i < n; i++)
        tie[i] = best_partner(node, cand, n, i);
    for (unsigned nk = 0; kept && tie && nk < k; nk++) {
        unsigned best = n;
        double best_score = -1;
        for (unsigned i = 0; i < n; i++)
            if (!kept[i] && tie[i] > best_score) {
                best_score = tie[i];
                best = i;
            }
        kept[best] = 1;
        for (unsigned i = 0; i < n; i++) /* from now on: the sum of ties to those kept */
            tie[i] = (nk == 0 ? 0 : tie[i]) + (kept[i] ? 0 : closeness(node, cand[i], cand[best]));
    }
    for (unsigned i = 0, o = 0; kept && tie && i < n; i++)
        if (kept[i])
            cand[o++] = cand[i];
    free(kept);
    free(tie);
}

/* Order GPUs as a chain of nearest neighbours from the lowest index, so
 * NVLink and switch neighbours get neighbouring local ranks. */
static void chain_order(const dt_node_t *node, int *g, unsigned n)
{
    for (unsigned i = 1; i < n; i++) {
        unsigned best = i;
        for (unsigned j = i + 1; j < n; j++) {
            double cj = closeness(node, g[i - 1], g[j]), cb = closeness(node, g[i - 1], g[best]);
            if (cj > cb || (cj == cb && node->gpus[g[j]].index < node->gpus[g[best]].index))
                best = j;
        }
        int t = g[i];
        g[i] = g[best];
        g[best] = t;
    }
}

static int plan_gpus(const dt_node_t *node, const dt_plan_request_t *req, dt_node_plan_t *plan,
                     dt_error_t *err)
{
    int *g = calloc(node->ngpus + 1, sizeof(int));
    unsigned n;

    if (!g || candidate_gpus(node, req, g, &n, err) < 0) {
        free(g);
        return -1;
    }
    for (unsigned r = 0; r < plan->nranks; r++)
        plan->ranks[r].gpu = plan->ranks[r].device = -1;
    if (n == 0 || plan->nranks == 0) {
        free(g);
        return 0;
    }
    if (plan->nranks > n && !req->share_gpus) {
        /* the fact only: each caller adds the flag its users write */
        topo_seterr_code(err, DT_E_NEEDS_SHARE, "%u ranks but %u GPU%s on this node: one "
                         "rank per GPU, or allow sharing", plan->nranks, n, n == 1 ? "" : "s");
        free(g);
        return DT_PLAN_NEEDS_SHARE;
    }
    if (plan->nranks < n) {
        warn(plan, "%u of %u GPUs left idle", n - plan->nranks, n);
        best_subset(node, g, n, plan->nranks);
        n = plan->nranks;
    } else if (plan->nranks > n) {
        warn(plan, "%u ranks share %u GPU%s", plan->nranks, n, n == 1 ? "" : "s");
    }
    chain_order(node, g, n);
    plan->visible = calloc(n, sizeof(int));
    if (!plan->visible) {
        free(g);
        return -1;
    }
    plan->nvisible = n;
    for (unsigned i = 0; i < n; i++)
        plan->visible[i] = node->gpus[g[i]].index;
    /* round robin, so LOCAL_RANK % device_count() still names the device */
    for (unsigned r = 0; r < plan->nranks; r++) {
        plan->ranks[r].device = (int)(r % n);
        plan->ranks[r].gpu = g[r % n];
    }
    free(g);
    return 0;
}

/* ---- Cores and memory -------------------------------------------------------- */

/* The CPUs a rank's GPU sits next to. */
static hwloc_const_bitmap_t gpu_locality(const dt_node_t *node, int gpu)
{
    const dt_pci_t *p;

    if (gpu < 0 || node->gpus[gpu].pci < 0)
        return NULL;
    p = &node->pci[node->gpus[gpu].pci];
    if (p->numa >= 0 && !hwloc_bitmap_iszero(node->numa[p->numa].cpuset))
        return node->numa[p->numa].cpuset;
    return p->package >= 0 ? node->packages[p->package] : NULL;
}

/* gpu_locality as a number: a NUMA node, nnuma + a package, or
 * nnuma + npackages for none. */
static unsigned locality_key(const dt_node_t *node, int gpu)
{
    const dt_pci_t *p;

    if (gpu < 0 || node->gpus[gpu].pci < 0)
        return node->nnuma + node->npackages;
    p = &node->pci[node->gpus[gpu].pci];
    if (p->numa >= 0 && !hwloc_bitmap_iszero(node->numa[p->numa].cpuset))
        return (unsigned)p->numa;
    return p->package >= 0 ? node->nnuma + (unsigned)p->package : node->nnuma + node->npackages;
}

static int memory_node(const dt_node_t *node, hwloc_const_bitmap_t cpus)
{
    for (unsigned i = 0; i < node->nnuma; i++)
        if (hwloc_bitmap_intersects(node->numa[i].cpuset, cpus))
            return (int)i;
    return -1;
}

/* Split `n` cores between the ranks of group `grp` in rank order: evenly,
 * disjointly, and shared round robin when there are fewer cores than ranks. */
static void split_cores(const dt_node_t *node, hwloc_const_bitmap_t allowed, dt_node_plan_t *plan,
                        const int *group, int grp, const int *cores, unsigned n)
{
    unsigned k = 0, i = 0;

    for (unsigned r = 0; r < plan->nranks; r++)
        k += group[r] == grp;
    for (unsigned r = 0, next = 0; r < plan->nranks; r++) {
        dt_rank_plan_t *rp = &plan->ranks[r];
        unsigned take = n >= k ? n / k + (i < n % k) : 1;
        if (group[r] != grp)
            continue;
        for (unsigned t = 0; t < take; t++, next++) {
            hwloc_bitmap_t pus = hwloc_bitmap_dup(node->cores[cores[next % n]]);
            hwloc_bitmap_and(pus, pus, allowed);
            hwloc_bitmap_or(rp->cpus, rp->cpus, pus);
            hwloc_bitmap_free(pus);
        }
        rp->ncores = take;
        rp->numa = memory_node(node, rp->cpus);
        i++;
    }
}

/* Ranks whose GPUs share a locality: a group, named by its first rank. */
typedef struct {
    int first;
    unsigned size, want, got;
    hwloc_const_bitmap_t near; /* NULL: no locality */
} cgroup_t;

/* How far core c is from a locality: 0 inside it, 1 in a package it
 * touches, 2 elsewhere. */
static unsigned core_distance(const dt_node_t *node, unsigned c, hwloc_const_bitmap_t near)
{
    if (!near || hwloc_bitmap_isincluded(node->cores[c], near))
        return 0;
    for (unsigned p = 0; p < node->npackages; p++)
        if (hwloc_bitmap_isincluded(node->cores[c], node->packages[p]))
            return hwloc_bitmap_intersects(node->packages[p], near) ? 1 : 2;
    return 2;
}

/* Give group g free allocated cores no farther than `far` until it has
 * g->want. owner[c]: the group holding core c, -1 when free. */
static void take_cores(const dt_node_t *node, hwloc_const_bitmap_t allowed, int *owner,
                       cgroup_t *g, unsigned far)
{
    for (unsigned d = 0; d <= far; d++)
        for (unsigned c = 0; c < node->ncores && g->got < g->want; c++)
            if (owner[c] < 0 && hwloc_bitmap_intersects(node->cores[c], allowed) &&
                core_distance(node, c, g->near) == d) {
                owner[c] = g->first;
                g->got++;
            }
}

/* Share `ncores` between the groups by size, with cumulative rounding so
 * the shares add up to ncores and each is at least one core per rank when
 * there are that many. With `only_empty`: between the groups with no core
 * yet, the others keeping what they have. */
static void quotas(cgroup_t *gs, unsigned ng, unsigned ncores, int only_empty)
{
    unsigned total = 0, cum = 0;

    for (unsigned i = 0; i < ng; i++)
        total += !only_empty || !gs[i].got ? gs[i].size : 0;
    for (unsigned i = 0; i < ng; i++) {
        if (only_empty && gs[i].got) {
            gs[i].want = gs[i].got;
            continue;
        }
        gs[i].want = (unsigned)(((unsigned long long)ncores * (cum + gs[i].size)) / total -
                                ((unsigned long long)ncores * cum) / total);
        cum += gs[i].size;
    }
}

/* Deal the allocated cores out to the groups. Without `quota`: each group
 * takes every free core of its locality, and groups with none there split
 * the rest. With it: each group gets its share of the allocation, its
 * locality's cores first, then the nearest. */
static void assign_cores(const dt_node_t *node, hwloc_const_bitmap_t allowed, int *owner,
                         cgroup_t *gs, unsigned ng, unsigned nallowed, int quota)
{
    unsigned free_left = nallowed;

    for (unsigned c = 0; c < node->ncores; c++)
        owner[c] = -1;
    for (unsigned i = 0; i < ng; i++) {
        gs[i].got = 0;
        gs[i].want = quota ? 0 : node->ncores;
    }
    if (quota)
        quotas(gs, ng, nallowed, 0);
    for (unsigned i = 0; i < ng; i++) /* a group without a locality waits */
        if (gs[i].near) {
            take_cores(node, allowed, owner, &gs[i], 0);
            free_left -= gs[i].got;
        }
    if (!quota)
        quotas(gs, ng, free_left, 1);
    for (unsigned i = 0; i < ng; i++)
        take_cores(node, allowed, owner, &gs[i], 2);
}

/* Whether a plan leaves ranks sharing cores that need not: a group with no
 * core, or with fewer cores than ranks while the allocation has enough. */
static int needless_sharing(const cgroup_t *gs, unsigned ng, unsigned nallowed, unsigned nranks)
{
    for (unsigned i = 0; i < ng; i++)
        if (!gs[i].got || (nallowed >= nranks && gs[i].got < gs[i].size))
            return 1;
    return 0;
}

/* The groups of the plan's ranks (group[r]: rank r's group's first rank);
 * the number of groups. slot[key]: the group of a locality_key. */
static unsigned make_groups(const dt_node_t *node, const dt_node_plan_t *plan, int *group,
                            int *slot, cgroup_t *gs)
{
    unsigned nkeys = node->nnuma + node->npackages, ng = 0;

    for (unsigned i = 0; i <= nkeys; i++)
        slot[i] = -1;
    for (unsigned r = 0; r < plan->nranks; r++) {
        unsigned key = locality_key(node, plan->ranks[r].gpu);
        if (slot[key] < 0) {
            slot[key] = (int)ng;
            gs[ng++] = (cgroup_t){.first = (int)r, .near = gpu_locality(node, plan->ranks[r].gpu)};
        }
        gs[slot[key]].size++;
        group[r] = gs[slot[key]].first;
    }
    return ng;
}

/* Ranks whose GPUs share a locality form a group that splits the cores
 * assign_cores gives it; a group left without any shares the whole
 * allocation. */
static int plan_cpus(const dt_node_t *node, const dt_plan_request_t *req, dt_node_plan_t *plan)
{
    hwloc_bitmap_t allowed = req->cpus ? hwloc_bitmap_dup(req->cpus) : hwloc_bitmap_alloc();
    int *owner = calloc(node->ncores + 1, sizeof(int)), *cores = calloc(node->ncores + 1, sizeof(int));
    int *group = calloc(plan->nranks + 1, sizeof(int));
    int *first = calloc(node->nnuma + node->npackages + 1, sizeof(int));
    cgroup_t *gs = calloc(plan->nranks + 1, sizeof(cgroup_t));
    unsigned ng, nallowed = 0;
    int rc = -1, oversubscribed = 0, quota;

    if (!allowed || !owner || !cores || !group || !first || !gs)
        goto out;
    if (!req->cpus)
        for (unsigned c = 0; c < node->ncores; c++)
            hwloc_bitmap_or(allowed, allowed, node->cores[c]);
    for (unsigned c = 0; c < node->ncores; c++)
        nallowed += hwloc_bitmap_intersects(node->cores[c], allowed);
    if (nallowed == 0 && plan->nranks) {
        rc = -2;
        goto out;
    }
    /* a whole node: each group its locality (idle cores elsewhere), unless
     * that makes ranks share; part of one: every allocated core used */
    quota = nallowed < node->ncores;
    ng = make_groups(node, plan, group, first, gs);
    assign_cores(node, allowed, owner, gs, ng, nallowed, quota);
    if (!quota && needless_sharing(gs, ng, nallowed, plan->nranks))
        assign_cores(node, allowed, owner, gs, ng, nallowed, 1);
    for (unsigned i = 0; i < ng; i++) {
        unsigned n = 0;
        for (unsigned d = 0; d <= 2; d++) /* its locality's cores to its first ranks */
            for (unsigned c = 0; c < node->ncores; c++) /* none of its own: share them all */
                if (core_distance(node, c, gs[i].near) == d &&
                    (gs[i].got ? owner[c] == gs[i].first
                               : hwloc_bitmap_intersects(node->cores[c], allowed)))
                    cores[n++] = (int)c;
        split_cores(node, allowed, plan, group, gs[i].first, cores, n);
    }
    hwloc_bitmap_zero(allowed); /* now: the PUs given so far */
    for (unsigned r = 0; r < plan->nranks; r++) {
        oversubscribed |= hwloc_bitmap_intersects(allowed, plan->ranks[r].cpus);
        hwloc_bitmap_or(allowed, allowed, plan->ranks[r].cpus);
    }
    if (oversubscribed)
        warn(plan, "cores oversubscribed: fewer allocated cores than ranks");
    rc = 0;
out:
    hwloc_bitmap_free(allowed);
    free(owner);
    free(cores);
    free(group);
    free(first);
    free(gs);
    return rc;
}

/* ---- NICs --------------------------------------------------------------------- */

static int rdma(const dt_nic_t *n)
{
    return n->kind != DT_NIC_ETHERNET;
}

static dt_path_t nic_path(const dt_node_t *node, const dt_rank_plan_t *rp, const dt_nic_t *nic)
{
    const dt_pci_t *p = nic->pci >= 0 ? &node->pci[nic->pci] : NULL;

    if (rp->gpu >= 0)
        return dt_node_pci_path(node, node->gpus[rp->gpu].pci, nic->pci);
    if (!p || rp->numa < 0)
        return DT_PATH_SYSTEM;
    if (p->numa == rp->numa)
        return DT_PATH_NUMA;
    return p->package >= 0 && p->package == node->numa[rp->numa].package ? DT_PATH_PACKAGE
                                                                         : DT_PATH_SYSTEM;
}

/* Closest NIC by PCIe path; equidistant NICs spread over the ranks; down
 * ports only when nothing else is there; RDMA NICs before plain Ethernet. */
static void plan_nics(const dt_node_t *node, dt_node_plan_t *plan)
{
    unsigned *used = calloc(node->nnics + 1, sizeof(unsigned));
    char *warned = calloc(node->ngpus + 1, 1); /* ranks sharing a GPU share its warning */
    int any_rdma = 0, any_up = 0;

    for (unsigned i = 0; i < node->nnics; i++) {
        any_rdma |= rdma(&node->nics[i]);
        if (node->nics[i].state == DT_PORT_DOWN)
            warn(plan, "NIC %s: port %d is down", node->nics[i].name[0] ? node->nics[i].name
                 : node->nics[i].busid, node->nics[i].port);
    }
    for (unsigned i = 0; i < node->nnics; i++)
        any_up |= rdma(&node->nics[i]) == any_rdma && node->nics[i].state != DT_PORT_DOWN;
    for (unsigned r = 0; used && warned && r < plan->nranks; r++) {
        dt_rank_plan_t *rp = &plan->ranks[r];
        int best = -1;
        rp->nic = -1;
        for (unsigned i = 0; i < node->nnics; i++) {
            const dt_nic_t *n = &node->nics[i];
            dt_path_t p = nic_path(node, rp, n);
            if (rdma(n) != any_rdma || (any_up && n->state == DT_PORT_DOWN))
                continue;
            if (best < 0 || p < rp->nic_path || (p == rp->nic_path && used[i] < used[best])) {
                best = (int)i;
                rp->nic_path = p;
            }
        }
        if (best >= 0) {
            rp->nic = best;
            used[best]++;
        }
        if (best >= 0 && rp->nic_path == DT_PATH_SYSTEM && rp->gpu >= 0 && !warned[rp->gpu]++)
            warn(plan, "GPU %d: no NIC nearer than the other socket (uses %s)",
                 node->gpus[rp->gpu].index, node->nics[best].name[0] ? node->nics[best].name
                 : node->nics[best].busid);
    }
    free(warned);
    free(used);
}

/* Ranks whose cores SLURM put on another NUMA node (or socket) than their
 * GPU: every host-device copy then crosses the inter-socket link. Whatever
 * SLURM allocated, it is said, with the job options that ask for cores
 * near the GPUs, only those seen to on SLURM 22.05 (corebind-slurm.test;
 * docs/users.md says which and why): a distribution (-m) or --cpus-per-gpu
 * leaves the cores where they were. */
static void warn_far_cores(const dt_node_t *node, dt_node_plan_t *plan)
{
    hwloc_bitmap_t far = hwloc_bitmap_alloc();
    char *ranks = NULL;

    for (unsigned r = 0; far && r < plan->nranks; r++) {
        const dt_rank_plan_t *rp = &plan->ranks[r];
        hwloc_const_bitmap_t near = gpu_locality(node, rp->gpu);
        if (near && !hwloc_bitmap_iszero(rp->cpus) && !hwloc_bitmap_intersects(rp->cpus, near))
            hwloc_bitmap_set(far, r);
    }
    if (far && !hwloc_bitmap_iszero(far) && hwloc_bitmap_list_asprintf(&ranks, far) >= 0)
        warn(plan, "local rank%s %s: cores on another NUMA node than %s (SLURM allocated "
             "the step's cores away from the GPUs: --exclusive gives the plan every core; a job "
             "that asks for its GPUs (--gres=gpu:N) gets cores on their sockets where gres.conf "
             "gives their Cores=, and --gres-flags=enforce-binding makes it wait for those cores "
             "on a busy node)", hwloc_bitmap_weight(far) == 1 ? "" : "s", ranks,
             hwloc_bitmap_weight(far) == 1 ? "its GPU" : "their GPUs");
    free(ranks);
    hwloc_bitmap_free(far);
}

int dt_plan_node(const dt_node_t *node, const dt_plan_request_t *req, dt_node_plan_t *plan,
                 dt_error_t *err)
{
    int rc;

    memset(plan, 0, sizeof(*plan));
    plan->nranks = req->nranks;
    plan->ranks = calloc(req->nranks + 1, sizeof(dt_rank_plan_t));
    for (unsigned r = 0; plan->ranks && r < req->nranks; r++)
        if (!(plan->ranks[r].cpus = hwloc_bitmap_alloc()))
            plan->ranks = NULL;
    if (!plan->ranks) {
        topo_seterr(err, "plan: out of memory");
        return -1;
    }
    if ((rc = plan_gpus(node, req, plan, err)) < 0) {
        dt_node_plan_free(plan);
        return rc;
    }
    rc = plan_cpus(node, req, plan);
    if (rc < 0) {
        topo_seterr_code(err, rc == -2 ? DT_E_CORES_MISSING : DT_E_NOMEM, "%s",
                         rc == -2 ? "no allocated core is in the topology" : "plan: out of memory");
        dt_node_plan_free(plan);
        return -1;
    }
    plan_nics(node, plan);
    warn_far_cores(node, plan);
    if (plan->nvisible > 1 && !node->nvlink)
        warn(plan, "the topology has no NVLink information: GPUs are ordered by PCIe "
             "distance only");
    return 0;
}
