/* SPDX-License-Identifier: Apache-2.0 */
/* slurmstepd, mode auto: the node's binding plan (once per node per step, in
 * user_init) and its application to each task (task_init): GPU, CPU
 * affinity, memory policy, NIC, and the NCCL/Gloo variables. Called by
 * remote.c only; the plan and the task's part of it live in `state`. */
#define _GNU_SOURCE /* sched_setaffinity, CPU_SET */
#include "plugin.h"

#include <errno.h>
#include <limits.h>
#include <net/if.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "contract.h"
#include "ddptopo.h"

#define MPOL_PREFERRED 1

typedef struct {
    bool ready;
    unsigned bind;
    dt_node_t node;
    dt_node_plan_t plan;
    char ifname[IF_NAMESIZE]; /* reaches MASTER_ADDR */
    int step_gpus[DDP_GPUS_MAX]; /* SLURM_STEP_GPUS: node indexes */
    unsigned nstep;
    bool have_step;             /* SLURM allocated GPUs (GRES) */
    ddp_gpu_numbering_t numbering;
    char numbering_why[200];
    char gpu_skip[512];         /* why SLURM's GPUs are left as SLURM set them */
    char admin[900];            /* the admin's part of a failure, "" when the user's */
    char path[512];             /* the topology file, "" for live */
    char node_name[256];
    dt_code_t fail_code;        /* the plan's, when planning failed */
    /* this task's (slurmstepd forks one process per task) */
    const dt_rank_plan_t *task_rank;
    bool task_slurm_bound;
    int task_gpu;               /* SLURM's choice, -1 unknown */
} bind_state_t;

static bind_state_t state;

/* A failure only the admin can fix (a node's topology file): said apart
 * from what the user can do meanwhile. */
static void admin_fix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void admin_fix(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(state.admin, sizeof(state.admin), fmt, ap);
    va_end(ap);
}

const char *ddp_bind_admin_fix(void)
{
    return state.admin[0] ? state.admin : NULL;
}

bool ddp_bind_needs_share(void)
{
    return state.fail_code == DT_E_NEEDS_SHARE;
}

/* The topology describes another machine than this node. */
static void wrong_topology(void)
{
    if (state.path[0])
        admin_fix("regenerate %.300s on %s: ddp-topo detect -o %.300s", state.path,
                  state.node_name, state.path);
    else
        admin_fix("hwloc's view of %s differs from SLURM's: compare slurm.conf's node line with "
                  "lstopo there", state.node_name);
}

/* SLURM's allocated cores ("0-3,8") as the PUs of those cores. Core ids
 * past the topology's are dropped: a warning, not an error, unless none is
 * left. */
static int allocated_cpus(spank_t sp, hwloc_bitmap_t cpus, char *err, size_t errlen)
{
    char *cores = NULL;
    int list[4096];
    unsigned n, dropped = 0;

    if (spank_get_item(sp, S_STEP_ALLOC_CORES, &cores) != ESPANK_SUCCESS || !cores)
        return 1; /* unknown: the whole node */
    if (ddp_index_list_parse(cores, list, 4096, &n) < 0) {
        snprintf(err, errlen, "cannot parse SLURM's allocated cores '%.100s'", cores);
        return -1;
    }
    for (unsigned i = 0; i < n; i++) {
        if ((unsigned)list[i] < state.node.ncores)
            hwloc_bitmap_or(cpus, cpus, state.node.cores[list[i]]);
        else
            dropped++;
    }
    if (dropped == n) {
        snprintf(err, errlen, "none of the allocated cores %.100s exists in the topology "
                 "(%u cores): is the topology file this node's?", cores, state.node.ncores);
        wrong_topology();
        return -1;
    }
    return 0;
}

/* A job variable's value in buf, NULL when unset. One too long for buf is
 * no interface name: it stays named, so no interface of ours replaces it. */
static const char *job_value(spank_t sp, const char *name, char *buf, size_t len)
{
    spank_err_t rc = spank_getenv(sp, name, buf, (int)len);

    if (rc == ESPANK_NOSPACE)
        return "(too long)";
    return rc == ESPANK_SUCCESS ? buf : NULL;
}

static int allocated_gpus(spank_t sp, char *err, size_t errlen)
{
    char buf[8192];
    spank_err_t rc = spank_getenv(sp, "SLURM_STEP_GPUS", buf, sizeof(buf));

    /* slurmstepd names every step's GPUs (SLURM 22.05 slurmstepd.c, before
     * user_init): a GPU job's step without them has none SLURM would say
     * (--gres=none, --gpus=0; --gpu-bind=none hides which the step has) */
    if (rc == ESPANK_ENV_NOEXIST &&
        spank_getenv(sp, "SLURM_JOB_GPUS", buf, sizeof(buf)) != ESPANK_ENV_NOEXIST) {
        snprintf(state.gpu_skip, sizeof(state.gpu_skip), "GPU binding skipped: the job has GPUs "
                 "(SLURM_JOB_GPUS=%.100s) but SLURM names none for this step (srun --gres=none, "
                 "--gpus=0 or --gpu-bind=none; CPU, memory and NIC binding still apply)", buf);
        return 2;
    }
    if (rc == ESPANK_NOSPACE) { /* not "no GPU GRES": that would bind every GPU */
        snprintf(err, errlen, "SLURM's allocated GPU list is longer than %zu characters",
                 sizeof(buf) - 1);
        return -1;
    }
    if (rc != ESPANK_SUCCESS)
        return 1; /* no GPU GRES: every GPU of the node */
    if (ddp_index_list_parse(buf, state.step_gpus, DDP_GPUS_MAX, &state.nstep) < 0) {
        snprintf(err, errlen, "cannot parse SLURM's allocated GPUs '%.100s'", buf);
        return -1;
    }
    state.have_step = true;
    return 0;
}

/* How the step's tasks number GPUs, from the CUDA_VISIBLE_DEVICES SLURM put
 * in the step's environment. GPUs SLURM names otherwise (MIG instances,
 * UUIDs) are not the topology's: they stay as SLURM set them. */
static void find_numbering(spank_t sp)
{
    char cvd[8192];
    const char *v = job_value(sp, "CUDA_VISIBLE_DEVICES", cvd, sizeof(cvd));

    if (ddp_gpus_numbering(state.step_gpus, state.nstep, v, &state.numbering,
                           state.numbering_why, sizeof(state.numbering_why)) < 0)
        snprintf(state.gpu_skip, sizeof(state.gpu_skip), "GPU binding skipped: %s, which the "
                 "topology does not know (CUDA_VISIBLE_DEVICES stays as SLURM set it; CPU, "
                 "memory and NIC binding still apply)", state.numbering_why);
}

/* A file pattern: expanded, its symlinks resolved, checked, and loaded by
 * that resolved path, which only root can change under us. */
static int load_file(const char *pattern, const char *node_name, char *err, size_t errlen)
{
    char path[512], real[PATH_MAX];
    dt_error_t derr;

    switch (ddp_topology_locate(pattern, node_name, path, sizeof(path), real, err, errlen)) {
    case DDP_TOPO_FILE_OK:
        break;
    case DDP_TOPO_FILE_PATTERN:
        admin_fix("fix topology= on the ddp_topo.so line of plugstack.conf; ddp-topo "
                  "check-config tests a line");
        return -1;
    case DDP_TOPO_FILE_MISSING:
        admin_fix("save this node's topology there: ddp-topo detect -o %.300s, on %s", path,
                  node_name);
        return -1;
    case DDP_TOPO_FILE_UNTRUSTED:
        return -1;
    }
    if (dt_node_load_file(&state.node, real, &derr) < 0) {
        snprintf(err, errlen, "%s", derr.text);
        admin_fix("regenerate it: ddp-topo detect -o %.300s, on %s", path, node_name);
        return -1;
    }
    snprintf(state.path, sizeof(state.path), "%s", path);
    return 0;
}

/* A cached file copied from another node, or left from before a hardware
 * change, would bind to NICs and GPUs this node lacks: said as what it is,
 * not as an error of the user's options. */
static int check_host(char *err, size_t errlen)
{
    dt_error_t derr;

    if (dt_node_check_host(&state.node, &derr) == 0)
        return 0;
    snprintf(err, errlen, "%s", derr.text);
    wrong_topology();
    return -1;
}

static int load_topology(const char *pattern, const char *node_name, char *err, size_t errlen)
{
    dt_error_t derr;

    if (strcmp(pattern, "live"))
        return load_file(pattern, node_name, err, errlen);
    if (dt_node_load_live(&state.node, &derr) < 0) {
        snprintf(err, errlen, "%s", derr.text);
        admin_fix("check hwloc on %s (lstopo), or give the plugin topology files made with "
                  "ddp-topo detect -o", node_name);
        return -1;
    }
    return 0;
}

/* The interface toward MASTER_ADDR by the runtime's own rule
 * (runtime/contract.h), so NCCL and Gloo take the network the runtime's data
 * connections take. Only a named or routing interface is exported: where
 * the rule names none (loopback in a step on several nodes) NCCL and Gloo
 * pick, and a named one this node lacks is left to fail the program that
 * uses it (the runtime says so at drt_init). */
static void find_ifname(spank_t sp, const char *master, unsigned nnodes)
{
    char ddprt[256], gloo[256], err[DDP_ERRLEN];
    contract_iface_t ifc;

    state.ifname[0] = '\0';
    if (contract_iface_choose(master, nnodes, job_value(sp, DRT_ENV_IFNAME, ddprt, sizeof(ddprt)),
                              job_value(sp, DRT_ENV_GLOO_IFNAME, gloo, sizeof(gloo)), &ifc, err,
                              sizeof(err)) == 0 &&
        (ifc.how == CONTRACT_IF_NAMED || ifc.how == CONTRACT_IF_ROUTE))
        snprintf(state.ifname, sizeof(state.ifname), "%s", ifc.name);
}

/* A rank's PUs as "0-3,8", any length (malloc'd, NULL on ENOMEM). */
static char *cpu_list(hwloc_const_bitmap_t set)
{
    char *s;

    return hwloc_bitmap_list_asprintf(&s, set) < 0 ? NULL : s;
}

/* The plan's NICs, checked once per node in user_init: NCCL_IB_HCA can
 * name InfiniBand and RoCE HCAs only. */
static int check_nics(char *err, size_t errlen)
{
    for (unsigned r = 0; r < state.plan.nranks; r++) {
        const dt_rank_plan_t *rp = &state.plan.ranks[r];
        const dt_nic_t *n = rp->nic >= 0 ? &state.node.nics[rp->nic] : NULL;
        if (!n) {
            snprintf(err, errlen, "local rank %u has no NIC to bind to (the topology lists "
                     "none; drop nic from --ddp-topo-bind)", r);
            return -1;
        }
        if (!n->name[0] || (n->kind != DT_NIC_INFINIBAND && n->kind != DT_NIC_ROCE)) {
            snprintf(err, errlen, "local rank %u's NIC %s is %s: NCCL_IB_HCA names "
                     "InfiniBand/RoCE HCAs only (drop nic from --ddp-topo-bind)", r,
                     n->name[0] ? n->name : n->busid,
                     n->name[0] ? dt_nic_kind_name(n->kind) : "unnamed in the topology");
            return -1;
        }
    }
    return 0;
}

/* CPUs the topology has and this machine lacks fail every task's
 * sched_setaffinity alike: said once per node instead. Only a topology file
 * can be another machine's; present CPUs, not a count, since CPU numbers
 * may have holes (hot-removed vCPUs). */
static int check_cpus(char *err, size_t errlen)
{
    hwloc_bitmap_t present = hwloc_bitmap_alloc();
    char list[256] = "", *have = NULL, *cpus = NULL;
    FILE *f;
    int rc = 0;

    if (!state.path[0] || !present || !(f = fopen("/sys/devices/system/cpu/present", "re"))) {
        hwloc_bitmap_free(present);
        return 0; /* unknown: sched_setaffinity says it per task */
    }
    if (!fgets(list, sizeof(list), f) || hwloc_bitmap_list_sscanf(present, list) < 0)
        hwloc_bitmap_zero(present);
    fclose(f);
    for (unsigned r = 0; !hwloc_bitmap_iszero(present) && r < state.plan.nranks; r++) {
        if (hwloc_bitmap_isincluded(state.plan.ranks[r].cpus, present))
            continue;
        cpus = cpu_list(state.plan.ranks[r].cpus);
        have = cpu_list(present);
        snprintf(err, errlen, "local rank %u's CPUs %.100s are not all on this node (it has "
                 "CPUs %.100s): the topology is another machine's", r, cpus ? cpus : "?",
                 have ? have : "?");
        wrong_topology();
        rc = -1;
        break;
    }
    free(cpus);
    free(have);
    hwloc_bitmap_free(present);
    return rc;
}

/* The GPUs the plan may use: SLURM's (none when binding them is skipped),
 * or, without GPU GRES, every GPU of the node (preq left as it is). */
static int plan_gpus(spank_t sp, dt_plan_request_t *preq, char *err, size_t errlen)
{
    int rc = allocated_gpus(sp, err, errlen);

    if (rc < 0)
        return -1;
    if (rc == 0)
        find_numbering(sp);
    if (rc != 1) {
        preq->gpus = state.step_gpus;
        preq->ngpus = state.gpu_skip[0] ? 0 : state.nstep;
    }
    return 0;
}

static void plan_failed(const dt_error_t *derr, char *err, size_t errlen)
{
    /* SLURM allocated what the file lacks: here it is the file's fault */
    bool foreign = derr->code == DT_E_GPU_MISSING || derr->code == DT_E_CORES_MISSING;

    snprintf(err, errlen, "binding plan: %s%s", derr->text,
             derr->code == DT_E_NEEDS_SHARE ? " (--ddp-topo=auto,share)"
             : foreign ? " (is the topology file this node's?)" : "");
    state.fail_code = derr->code;
    if (foreign)
        wrong_topology();
}

int ddp_bind_user_init(spank_t sp, const ddp_bind_request_t *req, char *err, size_t errlen)
{
    hwloc_bitmap_t cpus = hwloc_bitmap_alloc();
    dt_plan_request_t preq = {.nranks = req->local_count, .share_gpus = req->share};
    dt_error_t derr;
    int rc;

    memset(&state, 0, sizeof(state));
    state.bind = req->bind;
    snprintf(state.node_name, sizeof(state.node_name), "%s", req->node_name);
    find_ifname(sp, req->master_addr, req->nnodes);
    if (!cpus || load_topology(req->topology, req->node_name, err, errlen) < 0)
        goto fail;
    if (state.path[0] && req->topology_match && check_host(err, errlen) < 0)
        goto fail;
    if (plan_gpus(sp, &preq, err, errlen) < 0 || (rc = allocated_cpus(sp, cpus, err, errlen)) < 0)
        goto fail;
    preq.cpus = rc == 0 ? cpus : NULL;
    if (dt_plan_node(&state.node, &preq, &state.plan, &derr) < 0) {
        plan_failed(&derr, err, errlen);
        goto fail;
    }
    if (((state.bind & DT_BIND_CPU) && check_cpus(err, errlen) < 0) ||
        ((state.bind & DT_BIND_NIC) && check_nics(err, errlen) < 0)) {
        dt_node_plan_free(&state.plan);
        goto fail;
    }
    hwloc_bitmap_free(cpus);
    state.ready = true;
    return 0;
fail:
    hwloc_bitmap_free(cpus);
    dt_node_free(&state.node);
    return -1;
}

/* k of SLURM's per-task GPU binding: slurmstepd's SLURMD_TRES_BIND is the
 * step's binding, "gpu:[verbose,]per_task:k" for --gpus-per-task (srun adds
 * it when no other binding is asked, SLURM 22.05 launch.c); -1 for any other
 * binding (single, closest, map_gpu, mask_gpu), whose GPUs follow from CPU
 * masks or lists the plugin does not repeat. */
static long per_task_binding(spank_t sp)
{
    char buf[256], *end;
    const char *v = job_value(sp, "SLURMD_TRES_BIND", buf, sizeof(buf)), *p;
    long k;

    if (!v || !(p = strcasestr(v, "gpu:")))
        return -1;
    p += 4;
    if (!strncasecmp(p, "verbose,", 8))
        p += 8;
    if (strncasecmp(p, "per_task:", 9))
        return -1;
    p += 9;
    k = strtol(p, &end, 10);
    return end == p || (*end && *end != ',' && *end != ';') ? -1 : k;
}

/* The GPU SLURM chose for a task it bound to part of the step's GPUs
 * (--gpus-per-task, --gpu-bind): 0 and *gpu, a node index or -1 when SLURM's
 * numbering hides which; 1 when SLURM left the choice to the plan. Under
 * ConstrainDevices such a task can reach only that GPU, so it is kept.
 * *per_task: k of --gpus-per-task's binding, -1 for another. */
static int slurm_task_gpu(spank_t sp, int local, int *gpu, long *per_task)
{
    char cvd[8192];
    int bound[DDP_GPUS_MAX];
    unsigned nb;
    int rc;

    *gpu = -1;
    *per_task = -1;
    if (!state.have_step || state.gpu_skip[0])
        return 1;
    *per_task = per_task_binding(sp);
    rc = ddp_gpus_task_bound(state.step_gpus, state.nstep, state.numbering,
                             job_value(sp, "CUDA_VISIBLE_DEVICES", cvd, sizeof(cvd)), *per_task,
                             local, bound, &nb);
    if (rc == 0)
        *gpu = bound[0];
    return rc < 0 ? 0 : rc;
}

/* The plan's ranks holding node GPU g: how many, and the first. */
static unsigned ranks_with_gpu(int g, const dt_rank_plan_t **first)
{
    unsigned n = 0;

    for (unsigned r = 0; r < state.plan.nranks; r++) {
        const dt_rank_plan_t *rp = &state.plan.ranks[r];
        if (rp->gpu >= 0 && state.node.gpus[rp->gpu].index == g && !n++)
            *first = rp;
    }
    return n;
}

static int by_index(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* The cores, memory node and NIC of a task SLURM bound: those the plan gave
 * its GPU, when --gpus-per-task's rule (every task's first GPU known) makes
 * task and plan rank one to one; else the task's own plan rank, so no two
 * tasks ever share a rank's cores. */
static const dt_rank_plan_t *rank_for(int local, int gpu, long per_task)
{
    const dt_rank_plan_t *own = &state.plan.ranks[local], *rp = NULL;
    int sorted[DDP_GPUS_MAX];

    if (gpu < 0 || per_task < 1)
        return own;
    memcpy(sorted, state.step_gpus, state.nstep * sizeof(int));
    qsort(sorted, state.nstep, sizeof(int), by_index);
    for (unsigned l = 0; l < state.plan.nranks; l++) {
        const dt_rank_plan_t *any;
        if ((long)l * per_task >= (long)state.nstep ||
            ranks_with_gpu(sorted[(long)l * per_task], &any) != 1)
            return own;
    }
    return ranks_with_gpu(gpu, &rp) == 1 ? rp : own;
}

/* A task SLURM bound: its CUDA_VISIBLE_DEVICES stays, its first GPU is
 * device 0. */
static int bind_slurm_gpu(spank_t sp, int gpu)
{
    return ddp_setenvf(sp, "CUDA_DEVICE_ORDER", 1, "PCI_BUS_ID") |
           ddp_setenvf(sp, DRT_ENV_DEVICE, 1, "0") |
           (gpu >= 0 ? ddp_setenvf(sp, DRT_ENV_GPU, 1, "%d", gpu) : 0);
}

static int bind_gpu(spank_t sp, const dt_rank_plan_t *rp)
{
    /* sized for the list: up to 11 characters per index and a comma */
    char *list = calloc((size_t)state.plan.nvisible * 12 + 1, 1);
    size_t o = 0;
    int rc;

    if (rp->gpu < 0 || !list) {
        free(list);
        return rp->gpu < 0 ? 0 : -1;
    }
    for (unsigned i = 0; i < state.plan.nvisible; i++) {
        int g = state.plan.visible[i];
        if (state.have_step)
            g = ddp_gpus_task_index(state.step_gpus, state.nstep, state.numbering, g);
        o += (size_t)sprintf(list + o, "%s%d", i ? "," : "", g);
    }
    /* our indexes are PCI bus order, as NVML and SLURM's gres count */
    rc = ddp_setenvf(sp, "CUDA_DEVICE_ORDER", 1, "PCI_BUS_ID") |
         ddp_setenvf(sp, "CUDA_VISIBLE_DEVICES", 1, "%s", list) |
         ddp_setenvf(sp, DRT_ENV_DEVICE, 1, "%d", rp->device) |
         ddp_setenvf(sp, DRT_ENV_GPU, 1, "%d", state.node.gpus[rp->gpu].index);
    free(list);
    return rc;
}

static int bind_cpu(spank_t sp, const dt_rank_plan_t *rp, int local, char *err, size_t errlen)
{
    cpu_set_t set;
    int pu;

    CPU_ZERO(&set);
    hwloc_bitmap_foreach_begin(pu, rp->cpus)
        if (pu < CPU_SETSIZE)
            CPU_SET(pu, &set);
    hwloc_bitmap_foreach_end();
    if (sched_setaffinity(0, sizeof(set), &set) < 0) {
        char *cpus = cpu_list(rp->cpus);
        snprintf(err, errlen, "cannot bind local rank %d to CPUs %.100s%s: %s (is the topology "
                 "this node's? --ddp-topo-bind=gpu skips CPU binding)", local, cpus ? cpus : "?",
                 cpus && strlen(cpus) > 100 ? "..." : "", strerror(errno));
        free(cpus);
        return -1;
    }
    return ddp_setenvf(sp, DRT_ENV_OMP_THREADS, 0, "%u", rp->ncores ? rp->ncores : 1);
}

static int bind_mem(const dt_rank_plan_t *rp, int local, char *err, size_t errlen)
{
    unsigned long mask[16] = {0};
    unsigned node;

    if (rp->numa < 0)
        return 0;
    node = state.node.numa[rp->numa].os_index;
    if (node >= sizeof(mask) * 8) {
        snprintf(err, errlen, "NUMA node %u is beyond the supported 1024", node);
        return -1;
    }
    mask[node / (8 * sizeof(long))] |= 1ul << (node % (8 * sizeof(long)));
    /* preferred, not bound: a full node spills over instead of OOM-killing */
    if (syscall(SYS_set_mempolicy, MPOL_PREFERRED, mask, sizeof(mask) * 8) < 0) {
        snprintf(err, errlen, "cannot set local rank %d's memory policy to NUMA node %u: %s",
                 local, node, strerror(errno));
        return -1;
    }
    return 0;
}

static int bind_nic(spank_t sp, const dt_rank_plan_t *rp)
{
    const dt_nic_t *n = &state.node.nics[rp->nic];

    return ddp_setenvf(sp, "NCCL_IB_HCA", 1, "=%s:%d", n->name, n->port);
}

/* The task's plan rank, kept for ddp_bind_describe: its own, or the one
 * that follows from the GPU SLURM chose for it. */
static const dt_rank_plan_t *choose_rank(spank_t sp, int local)
{
    int gpu;
    long per_task;

    state.task_slurm_bound = slurm_task_gpu(sp, local, &gpu, &per_task) == 0;
    state.task_gpu = gpu;
    state.task_rank = state.task_slurm_bound ? rank_for(local, gpu, per_task)
                                             : &state.plan.ranks[local];
    return state.task_rank;
}

/* What the task is told of its place, whatever is bound: its CPUs, its NIC,
 * the interface toward MASTER_ADDR and NCCL's topology file. */
static int set_locality(spank_t sp, const dt_rank_plan_t *rp)
{
    const dt_nic_t *nic = rp->nic >= 0 ? &state.node.nics[rp->nic] : NULL;
    char *cpus = cpu_list(rp->cpus);
    int rc = cpus ? ddp_setenvf(sp, DRT_ENV_CPUS, 1, "%s", cpus) : -1;

    free(cpus);
    if (rc < 0 ||
        (nic && ddp_setenvf(sp, DRT_ENV_NIC, 1, "%s", nic->name[0] ? nic->name : nic->busid) < 0) ||
        (state.ifname[0] && (ddp_setenvf(sp, DRT_ENV_NCCL_IFNAME, 0, "=%s", state.ifname) < 0 ||
                             ddp_setenvf(sp, DRT_ENV_GLOO_IFNAME, 0, "%s", state.ifname) < 0)) ||
        (state.node.source == DT_SOURCE_NCCL_XML &&
         ddp_setenvf(sp, "NCCL_TOPO_FILE", 0, "%s", state.node.path) < 0))
        return -1;
    return 0;
}

int ddp_bind_task_init(spank_t sp, int local, char *err, size_t errlen)
{
    const dt_rank_plan_t *rp;

    if (!state.ready || local < 0 || (unsigned)local >= state.plan.nranks) {
        snprintf(err, errlen, "no binding plan for local rank %d", local);
        return -1;
    }
    rp = choose_rank(sp, local);
    if (set_locality(sp, rp) < 0) {
        snprintf(err, errlen, "cannot set the binding variables in the task");
        return -1;
    }
    if ((state.bind & DT_BIND_GPU) && !state.gpu_skip[0] &&
        (state.task_slurm_bound ? bind_slurm_gpu(sp, state.task_gpu) : bind_gpu(sp, rp)) < 0) {
        snprintf(err, errlen, "cannot set CUDA_VISIBLE_DEVICES in the task");
        return -1;
    }
    if ((state.bind & DT_BIND_CPU) && bind_cpu(sp, rp, local, err, errlen) < 0)
        return -1;
    if ((state.bind & DT_BIND_MEM) && bind_mem(rp, local, err, errlen) < 0)
        return -1;
    if ((state.bind & DT_BIND_NIC) && bind_nic(sp, rp) < 0) {
        snprintf(err, errlen, "cannot set NCCL_IB_HCA in the task");
        return -1;
    }
    return 0;
}

void ddp_bind_describe(int local, char *buf, size_t len)
{
    const dt_rank_plan_t *rp;
    char *cpus, bind[32], gpu[16];

    if (!state.ready || local < 0 || (unsigned)local >= state.plan.nranks) {
        snprintf(buf, len, "binding=none");
        return;
    }
    rp = state.task_rank ? state.task_rank : &state.plan.ranks[local];
    cpus = cpu_list(rp->cpus);
    if (state.task_slurm_bound && state.task_gpu < 0)
        snprintf(gpu, sizeof(gpu), "?");
    else if (state.task_slurm_bound)
        snprintf(gpu, sizeof(gpu), "%d", state.task_gpu);
    else
        snprintf(gpu, sizeof(gpu), "%d", rp->gpu >= 0 ? state.node.gpus[rp->gpu].index : -1);
    snprintf(buf, len, "GPU=%s%s CPUS=%s NUMA=%d NIC=%s bind=%s", gpu,
             state.task_slurm_bound ? "(SLURM's)" : "", cpus ? cpus : "?",
             rp->numa >= 0 ? (int)state.node.numa[rp->numa].os_index : -1,
             rp->nic >= 0 ? (state.node.nics[rp->nic].name[0] ? state.node.nics[rp->nic].name
                                                               : state.node.nics[rp->nic].busid)
                          : "-",
             dt_bind_name(state.bind, bind, sizeof(bind)));
    free(cpus);
}

const char *ddp_bind_gpu_note(char *buf, size_t len)
{
    if (!state.ready || !state.have_step)
        return NULL;
    if (state.gpu_skip[0])
        snprintf(buf, len, "%s", state.gpu_skip);
    else
        snprintf(buf, len, "gpu numbering: %s (%s)",
                 state.numbering == DDP_GPUS_LOCAL ? "local" : "global", state.numbering_why);
    return buf;
}

const char *ddp_bind_gpu_skipped(void)
{
    return state.ready && state.gpu_skip[0] ? state.gpu_skip : NULL;
}

unsigned ddp_bind_warnings(const char ***warnings)
{
    *warnings = (const char **)state.plan.warnings;
    return state.ready ? state.plan.nwarnings : 0;
}
