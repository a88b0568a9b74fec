/* SPDX-License-Identifier: Apache-2.0 */
/* The SPANK remote context, slurmstepd: compute the launch environment
 * once per node per step (user_init) and apply it to each task
 * (task_init); mode auto's binding is bind.c's.
 *
 * Errors found in init or user_init are kept and raised in task_init:
 * SLURM drains the node when the batch step's init/user_init fails and
 * silently ignores a failing user_init of an srun step, while a failing
 * task_init fails just the job, with our message on the user's terminal. */
#define _GNU_SOURCE /* sched_getaffinity */
#include "config.h"
#include "plugin.h"

#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <slurm/slurm.h>

#include "contract.h"
#include "ddptopo.h"

/* This file's state, in one struct: slurmstepd serves one step, and forks
 * each of its tasks after user_init, so every task reads what init and
 * user_init left here. */
typedef struct {
    /* init: the admin's plugstack.conf arguments, once per slurmstepd */
    ddp_config_t config;
    char config_error[DDP_ERRLEN];
    /* user_init: the step as planned for this node */
    bool active; /* this step asked for (or defaults to) the environment */
    bool disabled; /* the user asked, and plugstack.conf says disable */
    ddp_request_t req;
    bool req_invalid; /* the request itself did not parse (--ddp-topo, DDP_TOPO) */
    char error[DDP_ERRLEN];
    uint32_t job_id, step_id, world, local_count, node_id, nnodes, cpus_per_task, restart;
    char master_addr[256];
    char node_name[256];
    uint16_t master_port;
    uint16_t runtime_port; /* DDPRT_PORT; 0 when port_range has no room for it */
    uint16_t ras_port;     /* NCCL_RAS_ADDR's; 0 when port_range has no room for it */
    bool port_busy; /* the derived port is already bound on this node */
    bool runtime_busy; /* the same for DDPRT_PORT */
} step_t;

static step_t step;

static void step_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void step_fail(const char *fmt, ...)
{
    va_list ap;

    if (step.error[0])
        return; /* the first error is the one to fix */
    va_start(ap, fmt);
    vsnprintf(step.error, sizeof(step.error), fmt, ap);
    va_end(ap);
}

/* Runs once per slurmstepd, so each message lands once per step in
 * slurmd's log, where the admin looks. */
int ddp_remote_init(int ac, char **av)
{
    char warning[DDP_ERRLEN];

    /* Never fail here: a failing init of the batch step drains the node. */
    if (ddp_config_parse(ac, av, &step.config, step.config_error, sizeof(step.config_error)) < 0)
        slurm_error("ddp-topo: %s (" DDP_FIX_PLUGSTACK ")", step.config_error);
    else if (ddp_port_range_warning(&step.config, DDP_EPHEMERAL_PATH, warning, sizeof(warning)))
        slurm_info("ddp-topo: warning: %s", warning);
    return 0;
}

/* A user variable ddp_getenv_alloc cannot read fails the step, naming it. */
static char *getenv_or_fail(spank_t sp, const char *name, spank_err_t *rc)
{
    char *value = NULL;

    *rc = ddp_getenv_alloc(sp, name, &value);
    if (*rc == ESPANK_NOSPACE)
        step_fail("%s is longer than %d bytes (unset it or shorten it)", name, DDP_GETENV_MAX);
    else if (*rc != ESPANK_SUCCESS && *rc != ESPANK_ENV_NOEXIST)
        step_fail("cannot read %s: %s (report this to your admin)", name, spank_strerror(*rc));
    return value;
}

/* The user's request: --ddp-topo (command line or inherited from sbatch),
 * else DDP_TOPO in the job's environment (for submissions that cannot pass
 * SPANK options, such as slurmrestd), else the admin's default. */
static void resolve_request(spank_t sp)
{
    const ddp_options_t *opt = ddp_options();
    char *env, err[DDP_ERRLEN];
    spank_err_t rc;

    if (opt->error[0]) {
        step.req.given = step.req_invalid = true;
        step_fail("%s", opt->error);
    } else if (opt->request.given) {
        step.req = opt->request;
    } else if ((env = getenv_or_fail(sp, "DDP_TOPO", &rc)) != NULL) {
        if (ddp_request_parse(env, &step.req, err, sizeof(err)) < 0) {
            step.req.given = step.req_invalid = true;
            step_fail("DDP_TOPO=%.100s: %s", env, err);
        }
        free(env);
    } else if (rc == ESPANK_ENV_NOEXIST) {
        step.req.mode = step.config.default_mode;
    } else {
        step.req.given = step.req_invalid = true; /* set but unreadable: fail, never ignore it */
    }
}

static int get_u32(spank_t sp, spank_item_t item, const char *name, uint32_t *v)
{
    spank_err_t rc = spank_get_item(sp, item, v);

    if (rc != ESPANK_SUCCESS)
        step_fail("cannot read %s from SLURM: %s (report this to your admin)", name,
                  spank_strerror(rc));
    return rc == ESPANK_SUCCESS ? 0 : -1;
}

/* SLURM 22.05 reports S_SLURM_RESTART_COUNT as 0 in the srun steps of a
 * requeued batch job, while SLURM_RESTART_COUNT in the job's environment is
 * right: take the larger, so a requeued job moves to a new port. */
static void read_restart_env(spank_t sp)
{
    spank_err_t rc;
    char *buf = getenv_or_fail(sp, "SLURM_RESTART_COUNT", &rc), *end;
    unsigned long v;

    if (!buf)
        return;
    errno = 0;
    v = strtoul(buf, &end, 10);
    if (!isdigit((unsigned char)buf[0]) || *end || errno || v > UINT32_MAX)
        step_fail("SLURM_RESTART_COUNT='%.40s' is not a non-negative integer (unset it; SLURM "
                  "sets it in requeued jobs)", buf);
    else if (v > step.restart)
        step.restart = (uint32_t)v;
    free(buf);
}

static int read_items(spank_t sp)
{
    if (get_u32(sp, S_JOB_ID, "the job id", &step.job_id) < 0 ||
        get_u32(sp, S_JOB_NNODES, "the step's node count", &step.nnodes) < 0 ||
        get_u32(sp, S_JOB_NODEID, "this node's index", &step.node_id) < 0 ||
        get_u32(sp, S_JOB_LOCAL_TASK_COUNT, "the local task count", &step.local_count) < 0 ||
        get_u32(sp, S_JOB_TOTAL_TASK_COUNT, "the task count", &step.world) < 0 ||
        get_u32(sp, S_STEP_CPUS_PER_TASK, "cpus per task", &step.cpus_per_task) < 0 ||
        get_u32(sp, S_SLURM_RESTART_COUNT, "the restart count", &step.restart) < 0)
        return -1;
    read_restart_env(sp);
    return step.error[0] ? -1 : 0;
}

/* Host names longer than the step's fields are refused, never cut. */
static int copy_host(char *dst, size_t len, const char *host)
{
    if (strlen(host) >= len) {
        step_fail("host name '%.60s...' is longer than %zu characters (set MASTER_ADDR "
                  "yourself and report this)", host, len - 1);
        return -1;
    }
    memcpy(dst, host, strlen(host) + 1);
    return 0;
}

/* MASTER_ADDR: the first host of the step (not of the job: `srun -r1` or
 * `-w` start a step elsewhere), which runs rank 0 for every distribution
 * we can derive. */
static int find_master_addr(spank_t sp)
{
    char *list = NULL, **hosts;
    size_t n;
    dt_error_t err;
    int rc;

    if (ddp_getenv_alloc(sp, "SLURM_STEP_NODELIST", &list) != ESPANK_SUCCESS) {
        step_fail("MASTER_ADDR: SLURM_STEP_NODELIST is missing or longer than %d bytes "
                  "(set MASTER_ADDR yourself)", DDP_GETENV_MAX);
        return -1;
    }
    if (dt_hostlist_expand(list, &hosts, &n, &err) < 0) {
        step_fail("MASTER_ADDR: cannot parse SLURM_STEP_NODELIST: %s (set MASTER_ADDR "
                  "yourself and report this)", err.text);
        free(list);
        return -1;
    }
    rc = copy_host(step.master_addr, sizeof(step.master_addr), hosts[0]);
    if (rc == 0 && step.node_id < n)
        rc = copy_host(step.node_name, sizeof(step.node_name), hosts[step.node_id]);
    dt_hostlist_free(hosts, n);
    free(list);
    return rc;
}

/* Whether the task environment holds name (ESPANK_NOSPACE: it does). */
static bool task_has(spank_t sp, const char *name)
{
    char buf[8];

    return spank_getenv(sp, name, buf, sizeof(buf)) != ESPANK_ENV_NOEXIST;
}

/* With -m arbitrary rank 0 may run on another node than the step's first;
 * the node that holds it can tell, and fails rather than let every rank
 * wait for a TCPStore that never starts. */
static void check_rank0_here(spank_t sp)
{
    if (step.node_id == 0 || task_has(sp, DRT_ENV_MASTER_ADDR))
        return;
    for (uint32_t local = 0; local < step.local_count; local++) {
        uint32_t global;
        if (spank_get_item(sp, S_JOB_LOCAL_TO_GLOBAL_ID, local, &global) == ESPANK_SUCCESS &&
            global == 0)
            step_fail("MASTER_ADDR: rank 0 runs on node %u of the step, not on its first host "
                      "%s (arbitrary distribution?); export MASTER_ADDR to rank 0's host",
                      step.node_id, step.master_addr);
    }
}

static bool port_in_use(uint16_t port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_ANY)};
    int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
    bool busy;

    if (fd < 0)
        return false;
    /* As TCPStore binds: a port in TIME_WAIT is usable, a listener is not. */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    busy = bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0;
    close(fd);
    return busy;
}

/* MASTER_PORT the first reserved port, DDPRT_PORT the second, NCCL's RAS
 * port the third; each derived from port_range when SLURM reserved too few. */
static void find_ports(spank_t sp)
{
    spank_err_t rc;
    char *resv = getenv_or_fail(sp, "SLURM_STEP_RESV_PORTS", &rc);
    dt_error_t err;
    int second = 1, third = 1;

    if (resv && (dt_resv_ports_first(resv, &step.master_port, &err) < 0 ||
                 (second = dt_resv_ports_nth(resv, 1, &step.runtime_port, &err)) < 0 ||
                 (third = dt_resv_ports_nth(resv, 2, &step.ras_port, &err)) < 0))
        step_fail("SLURM_STEP_RESV_PORTS: %s (report this to your admin)", err.text);
    free(resv);
    if (step.error[0])
        return;
    if (!resv)
        step.master_port = dt_master_port(step.job_id, step.step_id, step.restart,
                                          step.config.port_lo, step.config.port_hi);
    if (second)
        step.runtime_port = dt_runtime_port(step.job_id, step.step_id, step.restart,
                                            step.config.port_lo, step.config.port_hi);
    if (third)
        step.ras_port = dt_ras_port(step.job_id, step.step_id, step.restart, step.config.port_lo,
                                    step.config.port_hi);
    if (step.node_id != 0)
        return;
    if (!resv && !task_has(sp, DRT_ENV_MASTER_PORT))
        step.port_busy = port_in_use(step.master_port);
    if (second && step.runtime_port && !task_has(sp, DRT_ENV_PORT))
        step.runtime_busy = port_in_use(step.runtime_port);
}

/* What failed, then who fixes it: the admin (a node's topology) apart
 * from what the user can do meanwhile. `env` would give the ranks past the
 * GPU count a device that does not exist: there the plan's own advice
 * (share, fewer tasks) stands alone. */
static void bind_failed(const char *err)
{
    static const char env[] = "--ddp-topo=env sets the environment without binding";
    const char *admin = ddp_bind_admin_fix();

    if (admin)
        step_fail("binding on %s: %s (admin: %s; you: %s)", step.node_name, err, admin, env);
    else if (ddp_bind_needs_share())
        step_fail("binding on %s: %s", step.node_name, err);
    else
        step_fail("binding on %s: %s (%s)", step.node_name, err, env);
}

static void plan_binding(spank_t sp)
{
    char err[DDP_ERRLEN], *user = NULL;
    const ddp_options_t *opt = ddp_options();
    ddp_bind_request_t req = {.topology = step.config.topology,
                              .topology_match = step.config.topology_match,
                              .node_name = step.node_name,
                              .master_addr = step.master_addr, .nnodes = step.nnodes,
                              .local_count = step.local_count,
                              .bind = opt->bind_given ? opt->bind : step.config.bind,
                              .share = step.req.share};

    /* the interface goes toward the MASTER_ADDR the tasks get: a user's wins */
    if (ddp_getenv_alloc(sp, DRT_ENV_MASTER_ADDR, &user) == ESPANK_SUCCESS)
        req.master_addr = user;
    if (ddp_bind_user_init(sp, &req, err, sizeof(err)) < 0)
        bind_failed(err);
    free(user);
}

/* "job J step S node N uid U": whose step, where. The node is SLURM's name
 * for it when the step's host list gave one, else slurmd's SLURMD_NODENAME,
 * else the host name; the uid is SLURM's (a user name would need an NSS
 * lookup, which may hang slurmstepd on a slow directory). */
static void audit_who(spank_t sp, char *who, size_t len)
{
    char node[256] = "", *env = NULL;
    uid_t uid;
    bool have_uid = spank_get_item(sp, S_JOB_UID, &uid) == ESPANK_SUCCESS;

    if (step.node_name[0])
        snprintf(node, sizeof(node), "%s", step.node_name);
    else if (ddp_getenv_alloc(sp, "SLURMD_NODENAME", &env) == ESPANK_SUCCESS && *env)
        snprintf(node, sizeof(node), "%.255s", env);
    else if (gethostname(node, sizeof(node) - 1) < 0)
        snprintf(node, sizeof(node), "?");
    free(env);
    if (have_uid)
        snprintf(who, len, "job %u step %u node %s uid %u", step.job_id, step.step_id, node,
                 (unsigned)uid);
    else
        snprintf(who, len, "job %u step %u node %s uid ?", step.job_id, step.step_id, node);
}

/* The admin's audit trail: one line per step on each node in slurmd's log,
 * saying who used ddp-topo and how, or why it failed. */
static void audit(spank_t sp)
{
    char path[512], host[256] = "?", who[400];
    const char *topo = "none";
    dt_error_t err;

    audit_who(sp, who, sizeof(who));
    if (step.disabled) {
        slurm_info("ddp-topo: %s: asked for ddp-topo: disabled by plugstack.conf", who);
        return;
    }
    if (step.error[0]) {
        slurm_info("ddp-topo: %s: mode=%s failed: %s", who,
                   step.req_invalid ? "invalid" : ddp_mode_name(step.req.mode), step.error);
        return;
    }
    if (step.req.mode == DDP_MODE_AUTO) {
        gethostname(host, sizeof(host) - 1);
        topo = strcmp(step.config.topology, "live") &&
               dt_topology_path(step.config.topology, step.node_name, host, path, sizeof(path),
                                &err) == 0 ? path : "live";
    }
    slurm_info("ddp-topo: %s: mode=%s topology=%s MASTER_PORT=%u", who,
               ddp_mode_name(step.req.mode), topo, step.master_port);
}

/* Soft-off: --ddp-topo stays a valid option, so queued jobs still run; a
 * user who asked is told, once per step, that nothing was set. */
static void resolve_disabled(spank_t sp)
{
    step.disabled = step.req.given && (step.error[0] || step.req.mode != DDP_MODE_OFF);
    step.error[0] = '\0';
    if (step.disabled)
        audit(sp);
}

/* A step starts from what init parsed and nothing else. */
static void step_reset(void)
{
    step_t fresh = {.config = step.config};

    memcpy(fresh.config_error, step.config_error, sizeof(fresh.config_error));
    step = fresh;
}

int ddp_remote_user_init(spank_t sp)
{
    step_reset();
    /* Batch, extern and interactive steps are not training steps: giving the
     * batch shell RANK or MASTER_ADDR would leak into every srun inside it. */
    if (spank_get_item(sp, S_JOB_STEPID, &step.step_id) != ESPANK_SUCCESS ||
        step.step_id >= SLURM_INTERACTIVE_STEP)
        return 0;
    /* for the audit line, whatever fails next (read_items reads it again) */
    spank_get_item(sp, S_JOB_ID, &step.job_id);
    resolve_request(sp);
    if (step.config.disabled) {
        resolve_disabled(sp);
        return 0;
    }
    /* A broken plugstack.conf breaks only the steps that asked for us (the
     * option, DDP_TOPO, or a default= that parsed). */
    if (!step.error[0] && step.req.mode == DDP_MODE_OFF)
        return 0;
    step.active = true;
    if (step.config_error[0])
        step_fail("%s (ask your admin to fix the ddp_topo.so line in plugstack.conf)",
                  step.config_error);
    if (!step.error[0] && read_items(sp) == 0 && find_master_addr(sp) == 0) {
        check_rank0_here(sp);
        find_ports(sp);
        if (step.req.mode == DDP_MODE_AUTO)
            plan_binding(sp);
    }
    audit(sp);
    return 0;
}

static int set_one(void *sp, const char *name, const char *value)
{
    return ddp_setenvf(sp, name, 1, "%s", value);
}

/* contract_elastic_env's reader: the task's value, valid until the next
 * call (the last one is freed by set_task_env). */
typedef struct {
    spank_t sp;
    char *last;
} task_env_t;

static const char *get_task(void *ctx, const char *name)
{
    task_env_t *t = ctx;

    free(t->last);
    t->last = NULL;
    if (ddp_getenv_alloc(t->sp, name, &t->last) != ESPANK_SUCCESS)
        t->last = NULL;
    return t->last;
}

/* Keeps an existing value even where get_task could not read it (longer
 * than ddp_getenv_alloc reads): a user's value wins. */
static int set_task(void *ctx, const char *name, const char *value)
{
    return ddp_setenvf(((task_env_t *)ctx)->sp, name, 0, "%s", value);
}

static int set_task_env(spank_t sp, uint32_t rank, int local)
{
    contract_rank_t r = {rank, step.world, (uint32_t)local, step.local_count, step.node_id,
                         step.nnodes, step.restart};
    task_env_t t = {sp, NULL};
    char run_id[16];
    int rc;

    /* torchrun's run id is the rendezvous id, "the job id" in its docs */
    snprintf(run_id, sizeof(run_id), "%u", step.job_id);
    /* a user's MASTER_ADDR, MASTER_PORT, DDPRT_PORT, NCCL_RAS_ADDR,
     * OMP_NUM_THREADS or elastic variable is kept; the node name is
     * SLURM's, always (one inherited from the submitting shell names
     * another node), and missing only where the step's host list lacks
     * this node (the runtime then takes the host name) */
    rc = contract_rank_env(&r, set_one, sp) | contract_elastic_env(run_id, get_task, set_task, &t) |
         (step.node_name[0] ? ddp_setenvf(sp, DRT_ENV_NODENAME, 1, "%s", step.node_name) : 0) |
         ddp_setenvf(sp, DRT_ENV_MASTER_ADDR, 0, "%s", step.master_addr) |
         ddp_setenvf(sp, DRT_ENV_MASTER_PORT, 0, "%u", step.master_port) |
         (step.runtime_port ? ddp_setenvf(sp, DRT_ENV_PORT, 0, "%u", step.runtime_port) : 0) |
         /* NCCL's RAS listens on one fixed port by default: steps sharing a
          * node would meet there (RAS is NCCL 2.24+; older NCCL ignores it) */
         (step.ras_port ? ddp_setenvf(sp, DRT_ENV_NCCL_RAS_ADDR, 0, "localhost:%u", step.ras_port)
                        : 0) |
         ddp_setenvf(sp, DRT_ENV_OMP_THREADS, 0, "%u", step.cpus_per_task ? step.cpus_per_task : 1);
    free(t.last);
    return rc;
}

/* The task's value of a variable, whole (free it), or "?" when unset. */
static char *effective(spank_t sp, const char *name)
{
    char *value = NULL;

    return ddp_getenv_alloc(sp, name, &value) == ESPANK_SUCCESS ? value : strdup("?");
}

static void print_task(spank_t sp, uint32_t rank, int local)
{
    char host[256], binding[512] = "", note[512];
    char *addr = effective(sp, DRT_ENV_MASTER_ADDR), *port = effective(sp, DRT_ENV_MASTER_PORT),
         *rport = effective(sp, DRT_ENV_PORT), *omp = effective(sp, DRT_ENV_OMP_THREADS);

    if (gethostname(host, sizeof(host)) < 0)
        snprintf(host, sizeof(host), "?");
    host[sizeof(host) - 1] = '\0';
    if (step.req.mode == DDP_MODE_AUTO) {
        binding[0] = ' ';
        ddp_bind_describe(local, binding + 1, sizeof(binding) - 1);
    }
    fprintf(stderr, "ddp-topo: rank %u/%u on %s: node %u/%u local %d/%u MASTER_ADDR=%s "
            "MASTER_PORT=%s DDPRT_PORT=%s OMP_NUM_THREADS=%s mode=%s%s version=%s\n", rank,
            step.world, host, step.node_id, step.nnodes, local, step.local_count,
            addr ? addr : "?", port ? port : "?", rport ? rport : "?", omp ? omp : "?",
            ddp_mode_name(step.req.mode), binding, PACKAGE_VERSION);
    free(addr);
    free(port);
    free(rport);
    free(omp);
    if (local == 0 && step.req.mode == DDP_MODE_AUTO && !ddp_bind_gpu_skipped() &&
        ddp_bind_gpu_note(note, sizeof(note)))
        fprintf(stderr, "ddp-topo: %s: %s\n", host, note);
}

/* Rank 0's terminal hears of a port it will not get, and of a runtime
 * that must share MASTER_PORT with torch's TCPStore. */
static void warn_ports(spank_t sp)
{
    if (step.port_busy)
        fprintf(stderr, "ddp-topo: warning: MASTER_PORT %u is already in use on %s; rank 0 "
                "will fail to listen (another job on this node? use srun --resv-ports, see "
                "ddp_topo(8))\n", step.master_port, step.master_addr);
    if (step.runtime_busy)
        fprintf(stderr, "ddp-topo: warning: DDPRT_PORT %u is already in use on %s; libddprt's "
                "rank 0 will wait for it (another job on this node? use srun --resv-ports=2, "
                "see ddp_topo(8))\n", step.runtime_port, step.master_addr);
    if (!step.runtime_port && !task_has(sp, DRT_ENV_PORT))
        fprintf(stderr, "ddp-topo: warning: plugstack.conf port_range=%u-%u holds one port, "
                "so DDPRT_PORT is not set and libddprt shares MASTER_PORT with torch's "
                "TCPStore (ask your admin for a port_range of 2 ports or more, or use srun "
                "--resv-ports=2)\n", step.config.port_lo, step.config.port_hi);
}

/* --ddp-topo=...,check: last, with the environment the program gets */
static int run_check(spank_t sp, uint32_t rank)
{
    char err[DDP_ERRLEN];

    if (ddp_check_task(sp, step.config.checker, err, sizeof(err)) == 0)
        return 0;
    slurm_error("ddp-topo: rank %u on %s: %s", rank, step.node_name, err);
    return -1;
}

/* The task's program as a launcher's name, NULL for any other program. */
static const char *task_launcher(spank_t sp)
{
    int argc = 0;
    char **argv = NULL;

    if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS)
        return NULL;
    return contract_launcher_name(argc, argv);
}

/* Rank 0 only: srun gathers every task's stderr on one terminal, so this
 * is once per step, however many nodes. */
static void warn_program(spank_t sp, const char *launcher)
{
    int argc = 0;
    char **argv = NULL;
    const char *word;

    if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) == ESPANK_SUCCESS &&
        (word = ddp_mode_as_program(argc, argv)))
        fprintf(stderr, "ddp-topo: --ddp-topo %s: the space made '%s' the program (write "
                "--ddp-topo=%s)\n", word, word, word);
    if (!launcher)
        return;
    fprintf(stderr, "ddp-topo: warning: the program is a launcher (%s): its workers would all "
            "share one task's rank, GPUs and ports. Drop the launcher and start one task per "
            "GPU: srun --ntasks-per-node=GPUS --ddp-topo=auto python train.py (ddp-topo already "
            "sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT). Meanwhile the "
            "launcher keeps %s and OMP_NUM_THREADS is left alone.\n", launcher,
            step.req.mode == DDP_MODE_AUTO ? "the CPU affinity SLURM gave its task, not one "
            "rank's share" : "its CPU affinity");
}

/* What the plan found wrong on this node (cores on another NUMA node than
 * their GPU, a NIC beyond the other socket, GPUs left idle or shared) and a
 * GPU binding left undone: said verbose or not, since the job runs slower
 * than it could, and once per node (local rank 0), since every rank there
 * has the same plan. */
static void warn_binding(int local)
{
    const char *node = step.node_name[0] ? step.node_name : "this node", **warnings;
    unsigned n;

    if (local != 0 || step.req.mode != DDP_MODE_AUTO)
        return;
    n = ddp_bind_warnings(&warnings);
    for (unsigned i = 0; i < n; i++)
        fprintf(stderr, "ddp-topo: warning: %s: %s\n", node, warnings[i]);
    if (ddp_bind_gpu_skipped())
        fprintf(stderr, "ddp-topo: warning: %s: %s\n", node, ddp_bind_gpu_skipped());
}

/* A step error fails every task; the plugin says it once per node (local
 * rank 0), with how many tasks it stops there. */
static int fail_task(int local)
{
    if (local == 0 && step.local_count > 1)
        slurm_error("ddp-topo: %s (all %u tasks on %s fail with this)", step.error,
                    step.local_count, step.node_name[0] ? step.node_name : "this node");
    else if (local <= 0)
        slurm_error("ddp-topo: %s", step.error);
    return -1;
}

/* Mode auto binds the task; a launcher keeps the CPUs it had, since its
 * workers would all share one rank's cores. */
static int bind_task(spank_t sp, uint32_t rank, int local, bool launcher)
{
    char err[DDP_ERRLEN];
    cpu_set_t before;
    bool keep = launcher && sched_getaffinity(0, sizeof(before), &before) == 0;

    if (ddp_bind_task_init(sp, local, err, sizeof(err)) < 0) {
        slurm_error("ddp-topo: binding rank %u on %s: %s", rank, step.node_name, err);
        return -1;
    }
    if (keep && sched_setaffinity(0, sizeof(before), &before) < 0) {
        slurm_error("ddp-topo: rank %u on %s: cannot give the launcher back its CPUs: %s",
                    rank, step.node_name, strerror(errno));
        return -1;
    }
    return 0;
}

/* The task's binding (mode auto) and variables. */
static int setup_task(spank_t sp, uint32_t rank, int local, const char *launcher)
{
    bool user_omp = task_has(sp, DRT_ENV_OMP_THREADS);

    /* before set_task_env: a CPU binding's OMP_NUM_THREADS wins over cpus per task */
    if (step.req.mode == DDP_MODE_AUTO && bind_task(sp, rank, local, launcher != NULL) < 0)
        return -1;
    if (set_task_env(sp, rank, local) < 0)
        return -1;
    /* a launcher sets its workers' threads itself (torchrun: 1 per worker) */
    if (launcher && !user_omp && spank_unsetenv(sp, DRT_ENV_OMP_THREADS) != ESPANK_SUCCESS) {
        slurm_error("ddp-topo: cannot unset OMP_NUM_THREADS in the task");
        return -1;
    }
    return 0;
}

int ddp_remote_task_init(spank_t sp)
{
    uint32_t rank = 1;
    int local = -1;
    bool ids = spank_get_item(sp, S_TASK_GLOBAL_ID, &rank) == ESPANK_SUCCESS &&
               spank_get_item(sp, S_TASK_ID, &local) == ESPANK_SUCCESS;
    const char *launcher;

    if (step.disabled && ids && rank == 0)
        fprintf(stderr, "ddp-topo: warning: --ddp-topo is disabled on this cluster by the "
                "admin (plugstack.conf 'disable'): nothing was set for this step (no RANK, "
                "MASTER_ADDR or binding; set them yourself or ask your admin)\n");
    if (!step.active)
        return 0;
    launcher = task_launcher(sp);
    if (ids && rank == 0)
        warn_program(sp, step.error[0] ? NULL : launcher);
    if (step.error[0])
        return fail_task(local);
    if (!ids) {
        slurm_error("ddp-topo: cannot read this task's rank from SLURM (report this)");
        return -1;
    }
    if (setup_task(sp, rank, local, launcher) < 0)
        return -1;
    if (rank == 0)
        warn_ports(sp);
    warn_binding(local);
    if (step.req.verbose)
        print_task(sp, rank, local);
    return step.req.check ? run_check(sp, rank) : 0;
}
