/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-topo report: the dry run of a job, from the command line's options,
 * SLURM's variables or a job script's (read by libddptopo's dt_script_load,
 * what undoes ddp-topo in it found by lint.c). */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define USAGE_REPORT \
    "Usage: ddp-topo report [OPTIONS]\n" \
    "The dry run: what each rank of a job gets (GPU, cores, NUMA node, NIC),\n" \
    "rails, MASTER_ADDR/PORT, DDPRT_PORT, predicted allreduce time and warnings.\n" \
    "\n" \
    "Job (else --sbatch FILE's options, else SLURM's variables in an allocation):\n" \
    "  -w, --nodelist LIST        nodes, SLURM hostlist (default node[1-N])\n" \
    "  -N, --nodes N              number of nodes when no --nodelist\n" \
    "      --ntasks-per-node N    ranks per node\n" \
    "      --tasks-per-node SPEC  SLURM syntax, e.g. 3(x2),2\n" \
    "  -n, --ntasks N             ranks, spread over the nodes as SLURM does\n" \
    "  -m, --distribution D       block (default), cyclic, plane=N\n" \
    "      --gpus-per-node N      the first N GPUs of each node are allocated\n" \
    "      --gpus LIST            allocated GPU indexes, e.g. 0,1,4,5\n" \
    "  -c, --cpus-per-task C      ranks split the cores SLURM allocates for C CPUs\n" \
    "                             per task (default: all of a node's cores)\n" \
    "      --sbatch FILE          read the job's #SBATCH lines and its first srun\n" \
    "                             line's options (they override #SBATCH); name the\n" \
    "                             script's lines that undo ddp-topo (a launcher under\n" \
    "                             srun, MASTER_PORT, MASTER_ADDR, ranks): exit 1\n" \
    "      --convert              with --sbatch: print the script with those fixed\n" \
    "Topology and binding:\n" \
    "      --topology SRC         live (default), FILE, or PATTERN with %%n / %%h\n" \
    "      --bind LIST            none, or gpu,cpu,mem,nic (default gpu,cpu)\n" \
    "      --share                allow more ranks than GPUs\n" \
    "Allreduce prediction:\n" \
    "      --model-params N       parameters (7e9, 7B, 350M)\n" \
    "      --dtype T              bf16 (default), fp16, fp32\n" \
    "      --intra-bw GBPS  --intra-lat US  --inter-bw GBPS  --inter-lat US\n" \
    "                             override the model's per-level numbers\n" \
    "Port: --job-id ID --step-id ID --restart-count N --port-range LO-HI --resv-ports SPEC\n" \
    "Output: --format text|json|dot (default text)\n"

typedef struct {
    dt_report_opts_t o;
    char tpn[64];
    const char *nodelist;
    char nodes_buf[64];
    long nodes, ntasks, ntasks_per_node, gpus_per_node;
    const char *tasks_per_node, *dist, *gpus, *format;
    dt_script_t script; /* the --sbatch file: option values point into it */
    cli_lint_t lint;    /* what in the script undoes ddp-topo's setup */
    int convert;        /* --convert: print the script to write instead */
    long line;          /* the #SBATCH or srun line being read */
    const char *script_path;
    /* from the job script only: SLURM's meanings, resolved with the layout */
    long gpus_per_task, gpus_total;
    const char *mode;  /* the script's --ddp-topo value as written, NULL: none */
    dt_request_t req;  /* ... as the plugin reads it */
    int mode_seen;
    dt_script_src_t src; /* the options being read: #SBATCH or srun */
    int srun_gpus;     /* the srun line asked for GPUs: the script's are replaced */
    int srun_tpn;      /* the srun line gave its tasks per node */
    char read[2][600], ignored[2][300]; /* options read / ignored, by src */
    char gpus_note[200];          /* how the script's GPU request was placed */
    int gpu_list[DT_NODE_MAX_GPUS];
} report_args_t;

static double parse_count(const char *s, int *ok)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (*end == 'K' || *end == 'k')
        v *= 1e3, end++;
    else if (*end == 'M')
        v *= 1e6, end++;
    else if (*end == 'B' || *end == 'G')
        v *= 1e9, end++;
    else if (*end == 'T')
        v *= 1e12, end++;
    /* "inf", "nan", 1e999, " 7" and "-0" are no counts */
    *ok = (isdigit((unsigned char)s[0]) || s[0] == '.') && !*end && !errno && isfinite(v);
    return v;
}

/* The bad value itself goes into every message, elided past 60 characters. */
#define SHOWN(s) (int)(strlen(s) > 60 ? 60 : strlen(s)), (s), strlen(s) > 60 ? "..." : ""

/* "ddp-topo: report: WHY (TODO)"; while the srun line's options are read,
 * "report: srun (line L): ...", as that line is where the value is. */
static int fail(const report_args_t *a, const char *why, const char *todo)
{
    char what[48];

    snprintf(what, sizeof(what), "report: srun (line %ld)", a->script.srun_line);
    return cli_fail(a->src == DT_SCRIPT_SRUN ? what : "report", why, todo);
}

static int number(const report_args_t *a, const char *opt, const char *s, long max, long *v)
{
    char *end;

    errno = 0;
    *v = strtol(s, &end, 10);
    /* digits only: strtol would also take " 5", "+5" and "-0" */
    if (!isdigit((unsigned char)s[0]) || *end || errno || *v > max) {
        char why[200];
        snprintf(why, sizeof(why), "%s '%.*s%s' is not an integer from 0 to %ld", opt, SHOWN(s),
                 max);
        return fail(a, why, "pass a number in that range");
    }
    return 0;
}

static int real(const report_args_t *a, const char *opt, const char *s, double *v)
{
    int ok;

    *v = parse_count(s, &ok);
    if (ok)
        return 0;
    char why[160];
    snprintf(why, sizeof(why), "%s '%.*s%s' is not a finite non-negative number", opt, SHOWN(s));
    return fail(a, why, "pass a number such as 7e9, 7B or 12.5");
}

/* One GPU index of --gpus: p..end. */
static int gpu_index(report_args_t *a, const char *s, const char *p, const char *end,
                     const char *seen)
{
    char why[240];
    long v;

    errno = 0;
    v = strtol(p, NULL, 10);
    if (!errno && v >= 0 && v < DT_NODE_MAX_GPUS && !seen[v] && a->o.ngpus < DT_NODE_MAX_GPUS) {
        a->gpu_list[a->o.ngpus++] = (int)v;
        return (int)v;
    }
    if (!errno && v >= 0 && v < DT_NODE_MAX_GPUS && seen[v])
        snprintf(why, sizeof(why), "--gpus '%.*s%s' names GPU %ld twice", SHOWN(s), v);
    else
        snprintf(why, sizeof(why), "--gpus '%.*s%s': GPU index '%.*s' is out of range (0-%d)",
                 SHOWN(s), (int)(end - p > 24 ? 24 : end - p), p, DT_NODE_MAX_GPUS - 1);
    return fail(a, why, "e.g. --gpus 0,1,4,5");
}

static int gpu_list(report_args_t *a, const char *s)
{
    char seen[DT_NODE_MAX_GPUS] = {0};
    const char *p = s;

    a->o.ngpus = 0;
    while (*p) {
        const char *end = p + strspn(p, "0123456789");
        int v;
        if (end == p || (*end && *end != ',')) {
            char why[160];
            snprintf(why, sizeof(why), "--gpus '%.*s%s' is not a list of GPU indexes", SHOWN(s));
            return fail(a, why, "e.g. --gpus 0,1,4,5");
        }
        if ((v = gpu_index(a, s, p, end, seen)) < 0)
            return -1;
        seen[v] = 1;
        p = *end ? end + 1 : end;
    }
    a->o.gpus = a->gpu_list;
    return 0;
}

static int dtype(report_args_t *a, const char *s)
{
    static const struct { const char *name; unsigned bytes; } types[] = {
        {"bf16", 2}, {"fp16", 2}, {"fp32", 4}};

    for (size_t i = 0; i < 3; i++)
        if (!strcmp(s, types[i].name)) {
            a->o.dtype = types[i].name;
            a->o.dtype_bytes = types[i].bytes;
            return 0;
        }
    char why[96];
    snprintf(why, sizeof(why), "--dtype '%.40s' is not one of bf16, fp16, fp32", s);
    return fail(a, why, "pass --dtype bf16, fp16 or fp32");
}

/* One option, from the command line or an #SBATCH line. Returns 1 when
 * `name` is not a report option (ignored in job scripts). */
static int apply(report_args_t *a, const char *name, const char *val)
{
    dt_error_t err;
    long v;

#define IS(s) (!strcmp(name, s))
    if (IS("nodelist") || IS("w"))
        a->nodelist = val;
    else if (IS("nodes") || IS("N"))
        return number(a, "--nodes", val, DT_HOSTLIST_MAX_HOSTS, &a->nodes);
    else if (IS("ntasks") || IS("n"))
        return number(a, "--ntasks", val, UINT32_MAX, &a->ntasks);
    else if (IS("ntasks-per-node"))
        return number(a, "--ntasks-per-node", val, UINT32_MAX, &a->ntasks_per_node);
    else if (IS("tasks-per-node"))
        a->tasks_per_node = val;
    else if (IS("distribution") || IS("m")) {
        dt_dist_t dist; /* checked here, so that an srun line's error names it */
        if (dt_dist_parse(val, &dist, &err) < 0)
            return fail(a, err.text, "pass --distribution block, cyclic or plane=N");
        a->dist = val;
    } else if (IS("gpus-per-node"))
        return number(a, "--gpus-per-node", strchr(val, ':') ? strrchr(val, ':') + 1 : val,
                      DT_NODE_MAX_GPUS, &a->gpus_per_node);
    else if (IS("gpus"))
        return gpu_list(a, val);
    else if (IS("cpus-per-task") || IS("c")) {
        if (number(a, "--cpus-per-task", val, UINT16_MAX, &v) < 0) /* SLURM's is 16-bit */
            return -1;
        if (v == 0)
            return fail(a, "--cpus-per-task '0' is not a CPU count",
                        "pass 1 or more, or leave it out to split all cores");
        a->o.cpus_per_task = (unsigned)v;
    } else if (IS("topology"))
        a->o.topology = val;
    else if (IS("bind") || IS("ddp-topo-bind")) {
        if (dt_bind_parse(val, &a->o.bind, &err) < 0)
            return fail(a, err.text, "e.g. --bind gpu,cpu,nic");
    } else if (IS("model-params"))
        return real(a, "--model-params", val, &a->o.model_params);
    else if (IS("dtype"))
        return dtype(a, val);
    else if (IS("intra-bw"))
        return real(a, "--intra-bw", val, &a->o.intra_gbps);
    else if (IS("intra-lat"))
        return real(a, "--intra-lat", val, &a->o.intra_us);
    else if (IS("inter-bw"))
        return real(a, "--inter-bw", val, &a->o.inter_gbps);
    else if (IS("inter-lat"))
        return real(a, "--inter-lat", val, &a->o.inter_us);
    else if (IS("job-id") || IS("step-id") || IS("restart-count")) {
        char opt[32];
        snprintf(opt, sizeof(opt), "--%s", name);
        if (number(a, opt, val, UINT32_MAX, &v) < 0) /* SLURM's ids are 32-bit */
            return -1;
        *(IS("job-id") ? &a->o.job_id : IS("step-id") ? &a->o.step_id : &a->o.restart_count) = v;
    } else if (IS("port-range")) {
        if (dt_port_range_parse(val, &a->o.port_lo, &a->o.port_hi, &err) < 0)
            return fail(a, err.text, "e.g. --port-range 61000-65535");
    } else if (IS("resv-ports"))
        a->o.resv_ports = val;
    else if (IS("format"))
        a->format = val;
    else if (IS("ddp-topo"))
        a->o.share_gpus = val && strstr(val, "share") != NULL;
    else
        return 1;
#undef IS
    return 0;
}

/* Append " --name=val" (and " (why)") to a list, once: a long value (a
 * 1,000-host nodelist) is elided, and a full list ends in " ..." rather
 * than losing options silently. */
static void note(char *buf, size_t len, const char *name, const char *val, const char *why)
{
    char item[160];
    size_t o = strlen(buf), n;
    const char *seen = buf;

    snprintf(item, sizeof(item), " -%s%s%s%.*s%s%s%s%s", name[1] ? "-" : "", name,
             val ? (name[1] ? "=" : " ") : "", val ? 60 : 0, val ? val : "",
             val && strlen(val) > 60 ? "..." : "", why ? " (" : "", why ? why : "",
             why ? ")" : "");
    n = strlen(item);
    while ((seen = strstr(seen, item)) && seen[n] && seen[n] != ' ')
        seen += n; /* " --gres=gpu:4" is no repeat of " --gres=gpu:40" */
    if ((o >= 4 && !strcmp(buf + o - 4, " ...")) || seen)
        return;
    if (o + n + 5 > len)
        snprintf(buf + o, len - o, " ...");
    else
        memcpy(buf + o, item, n + 1);
}

/* The GPU count of a --gres list ("gpu:4", "gpu:a100:4,nvme:1"), *n kept
 * without a gpu item: SLURM counts a bare "gpu" or "gpu:TYPE" as one. */
static int gres_gpus(const report_args_t *a, const char *val, long *n)
{
    char item[128];

    for (const char *p = val; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',')) {
        const char *colon;
        snprintf(item, sizeof(item), "%.*s", (int)strcspn(p, ","), p);
        if (strncmp(item, "gpu", 3) || (item[3] && item[3] != ':'))
            continue;
        colon = strrchr(item, ':');
        if (!colon || !isdigit((unsigned char)colon[1]))
            *n = 1; /* "gpu" or "gpu:a100" */
        else if (number(a, "--gres=gpu", colon + 1, DT_NODE_MAX_GPUS, n) < 0)
            return -1;
    }
    return 0;
}

/* The mode item of MODE[,FLAGS] in any order ("verbose,env"); none: auto,
 * as the plugin reads it. */
/* --ddp-topo=MODE[,FLAGS] of the script: the mode the job will run in, by
 * the plugin's grammar, so a value sbatch refuses fails the report too. */
static int script_mode(report_args_t *a, const char *val)
{
    dt_error_t err;
    char where[64];

    if (dt_request_parse(val, &a->req, &err) < 0) {
        snprintf(where, sizeof(where), "report: %s line %ld", a->src == DT_SCRIPT_SRUN ? "srun" : "#SBATCH",
                 a->line);
        return cli_fail(where, err.text, "sbatch and srun refuse it the same way: fix the value");
    }
    a->mode_seen = 1;
    a->mode = val ? val : "auto";
    a->o.share_gpus = a->req.share;
    return 0;
}

static int listed(const char *name, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(name, names[i]))
            return 1;
    return 0;
}
#define IN(name, names) listed(name, names, sizeof(names) / sizeof(names[0]))

/* sbatch options the report does not model but that can change what the
 * job gets: named in the report so nobody trusts it blindly. */
static int may_matter(const char *name)
{
    static const char *const names[] = {
        "cpu-bind", "gpu-bind", "tres-bind", "mem-bind", "hint", "exclusive", "gpus-per-socket",
        "ntasks-per-gpu", "ntasks-per-socket", "ntasks-per-core", "cpus-per-gpu",
        "sockets-per-node", "cores-per-socket", "threads-per-core", "B", "extra-node-info",
        "constraint", "C", "exclude", "x", "overcommit", "O", "spread-job", "gres-flags",
        "tres-per-task", "use-min-nodes", "nodefile", "F",
        /* node sharing (--share is SLURM's old --oversubscribe), not GPU sharing */
        "oversubscribe", "s", "share"};

    return IN(name, names);
}

/* Why an srun line's value for an option the report reads cannot be used,
 * or NULL: a shell's ($N, ${N}, `cmd`: known only when the job runs) or
 * none (a bare -n ending the line). The script's own value then stays. */
static const char *unusable(const report_args_t *a, const char *name, const char *val)
{
    static const char *const reads[] = {
        "nodelist", "w", "nodes", "N", "ntasks", "n", "ntasks-per-node", "tasks-per-node",
        "distribution", "m", "gpus-per-node", "gpus", "G", "gpus-per-task", "gres",
        "cpus-per-task", "c", "ddp-topo", "ddp-topo-bind"};

    if (a->src != DT_SCRIPT_SRUN || !IN(name, reads))
        return NULL;
    if (val && strpbrk(val, "$`"))
        return "shell value";
    return !val && strcmp(name, "ddp-topo") ? "no value" : NULL; /* a bare --ddp-topo: auto */
}

/* What an srun option replaces rather than overrides: its GPU request
 * all of the script's, its task count the script's tasks per node. */
static void srun_replaces(report_args_t *a, const char *name, const char *val)
{
#define IS(s) (!strcmp(name, s))
    if (!a->srun_gpus && val && ((IS("gres") && strstr(val, "gpu")) || IS("gpus") || IS("G") ||
                                 IS("gpus-per-task") || IS("gpus-per-node"))) {
        a->srun_gpus = 1;
        a->gpus_per_task = a->gpus_total = a->gpus_per_node = 0;
    }
    if (IS("ntasks-per-node") || IS("tasks-per-node"))
        a->srun_tpn = 1;
    else if (!a->srun_tpn && (IS("ntasks") || IS("n"))) {
        a->ntasks_per_node = 0;
        a->tasks_per_node = NULL;
    }
#undef IS
}

/* One #SBATCH or srun option with SLURM's meaning where it differs from
 * the report's own flag (--gpus is a count there, an index list here);
 * noted as read, or as ignored where it may matter or its value is unusable. */
static int apply_sbatch(report_args_t *a, const char *name, const char *val)
{
    const char *why = unusable(a, name, val);
    int rc = 0;

#define IS(s) (!strcmp(name, s))
    if (a->src == DT_SCRIPT_SBATCH && IS("exclusive")) {
        a->o.exclusive = !val; /* whole nodes; =user and =mcs share them */
        if (!val) {
            note(a->read[a->src], sizeof(a->read[a->src]), name, val, NULL);
            return 0;
        }
    }
    if (why || may_matter(name)) {
        note(a->ignored[a->src], sizeof(a->ignored[a->src]), name, val, why);
        return 0;
    }
    /* before the value replaces the script's: a bad one fails the report */
    if (a->src == DT_SCRIPT_SRUN)
        srun_replaces(a, name, val);
    if (IS("ddp-topo"))
        rc = script_mode(a, val);
    else if (!val)
        return 0;
    else if (IS("gres"))
        rc = gres_gpus(a, val, &a->gpus_per_node);
    else if (IS("gpus") || IS("G"))
        rc = number(a, "--gpus", strchr(val, ':') ? strrchr(val, ':') + 1 : val,
                    (long)DT_NODE_MAX_GPUS * DT_HOSTLIST_MAX_HOSTS, &a->gpus_total);
    else if (IS("gpus-per-task"))
        rc = number(a, "--gpus-per-task", strchr(val, ':') ? strrchr(val, ':') + 1 : val,
                    DT_NODE_MAX_GPUS, &a->gpus_per_task);
    else if ((rc = apply(a, name, val)) == 1)
        return 0; /* --time, --job-name: no part of the plan */
#undef IS
    if (rc == 0)
        note(a->read[a->src], sizeof(a->read[a->src]), name, val, NULL);
    return rc;
}

/* The job script's options, applied in its order: #SBATCH lines, then the
 * first srun line's (they override #SBATCH). Every body command is linted
 * as well. The script is kept: the options' values point into it. */
static int read_sbatch(report_args_t *a, const char *path)
{
    dt_error_t err;

    if (a->script_path)
        return cli_fail("report", "--sbatch given twice", "pass one job script");
    a->script_path = path;
    if (dt_script_load(&a->script, path, &err) < 0)
        return cli_fail("report", err.text,
                        err.code == DT_E_FILE ? "check the --sbatch path" : "retry");
    for (unsigned i = 0; i < a->script.ncmds; i++)
        cli_lint_line(&a->lint, a->script.cmds[i].text, a->script.cmds[i].line,
                      a->script.cmds[i].last);
    for (unsigned i = 0; i < a->script.nopts; i++) {
        const dt_script_opt_t *o = &a->script.opts[i];
        a->src = o->src;
        a->line = o->line;
        if (apply_sbatch(a, o->name, o->value) < 0)
            return -1;
    }
    a->src = DT_SCRIPT_SBATCH; /* the command line's errors are no srun line's */
    if (a->mode_seen && a->req.mode != DT_MODE_AUTO)
        a->o.bind = 0; /* env and off never bind: the report shows no binding */
    return 0;
}

/* Inside an allocation: the step's (or job's) own layout. */
static int from_slurm_env(report_args_t *a)
{
    const char *v;

    if ((v = getenv("SLURM_STEP_NODELIST")) || (v = getenv("SLURM_JOB_NODELIST")))
        a->nodelist = v;
    if ((v = getenv("SLURM_STEP_TASKS_PER_NODE")) || (v = getenv("SLURM_TASKS_PER_NODE")))
        a->tasks_per_node = v;
    if ((v = getenv("SLURM_DISTRIBUTION")))
        a->dist = v;
    return (v = getenv("SLURM_JOB_ID")) ? number(a, "SLURM_JOB_ID", v, UINT32_MAX, &a->o.job_id)
                                        : 0;
}

static int node_count(const report_args_t *a, long *n)
{
    dt_error_t err;
    char **h;
    size_t len;

    if (dt_hostlist_expand(a->nodelist, &h, &len, &err) < 0)
        return cli_fail("report", err.text, "write ranges as prefix[1-4,7]");
    dt_hostlist_free(h, len);
    *n = (long)len;
    return 0;
}

/* The script's --gpus-per-task and --gpus as GPUs per node: what SLURM
 * allocates on free nodes, said in the report since it is an assumption. */
static int script_gpus(report_args_t *a)
{
    char *end;
    long nodes, per = strtol(a->tasks_per_node, &end, 10);

    if (a->gpus_per_task > 0) {
        if (*end || !isdigit((unsigned char)a->tasks_per_node[0]))
            return cli_fail("report", "--gpus-per-task with uneven tasks per node",
                            "pass --gpus-per-node N for the largest node");
        a->gpus_per_node = a->gpus_per_task * per;
        snprintf(a->gpus_note, sizeof(a->gpus_note), "--gpus-per-task=%ld x %ld tasks = %ld",
                 a->gpus_per_task, per, a->gpus_per_node);
    } else if (a->gpus_total > 0) {
        if (node_count(a, &nodes) < 0)
            return -1;
        a->gpus_per_node = (a->gpus_total + nodes - 1) / nodes;
        snprintf(a->gpus_note, sizeof(a->gpus_note), "--gpus=%ld over %ld node%s: %s%ld (an "
                 "assumption: SLURM may place them unevenly)", a->gpus_total, nodes,
                 nodes == 1 ? "" : "s", a->gpus_total % nodes ? "at most " : "", a->gpus_per_node);
    }
    if (a->gpus_per_node > DT_NODE_MAX_GPUS)
        return cli_fail("report", "the job script asks for more GPUs per node than a node has",
                        "check --gpus and --gpus-per-task");
    return 0;
}

/* Turn the counts given into a node list and a tasks-per-node spec. */
static int resolve_layout(report_args_t *a)
{
    dt_error_t err;

    if (!a->nodelist) {
        long n = a->nodes > 0 ? a->nodes : 1;
        snprintf(a->nodes_buf, sizeof(a->nodes_buf), n > 1 ? "node[1-%ld]" : "node1", n);
        a->nodelist = a->nodes_buf;
    }
    if (a->ntasks_per_node > 0) {
        snprintf(a->tpn, sizeof(a->tpn), "%ld", a->ntasks_per_node);
        a->tasks_per_node = a->tpn;
    } else if (!a->tasks_per_node && a->ntasks > 0) {
        long n;
        if (node_count(a, &n) < 0)
            return -1;
        long per = a->ntasks / n, extra = a->ntasks % n;
        if (per == 0)
            return cli_fail("report", "fewer tasks than nodes", "pass --ntasks >= --nodes");
        if (extra)
            snprintf(a->tpn, sizeof(a->tpn), "%ld(x%ld),%ld(x%ld)", per + 1, extra, per,
                     (long)n - extra);
        else
            snprintf(a->tpn, sizeof(a->tpn), "%ld", per);
        a->tasks_per_node = a->tpn;
    }
    if (!a->tasks_per_node)
        return cli_fail("report", "no task layout given",
                        "pass --ntasks-per-node N, --tasks-per-node SPEC, --ntasks N or --sbatch FILE");
    a->o.nodelist = a->nodelist;
    a->o.tasks_per_node = a->tasks_per_node;
    if (dt_dist_parse(a->dist, &a->o.dist, &err) < 0)
        return cli_fail("report", err.text, "pass --distribution block, cyclic or plane=N");
    if (script_gpus(a) < 0)
        return -1;
    if (a->gpus_per_node > 0 && !a->o.gpus) {
        for (long i = 0; i < a->gpus_per_node; i++) /* at most DT_NODE_MAX_GPUS */
            a->gpu_list[i] = (int)i;
        a->o.gpus = a->gpu_list;
        a->o.ngpus = (unsigned)a->gpus_per_node;
    }
    return 0;
}

static int parse_report_args(report_args_t *a, int argc, char **argv)
{
    static const struct option opts[] = {
        {"nodelist", 1, 0, 'w'}, {"nodes", 1, 0, 'N'}, {"ntasks", 1, 0, 'n'},
        {"ntasks-per-node", 1, 0, 0}, {"tasks-per-node", 1, 0, 0}, {"distribution", 1, 0, 'm'},
        {"gpus-per-node", 1, 0, 0}, {"gpus", 1, 0, 0}, {"cpus-per-task", 1, 0, 'c'},
        {"sbatch", 1, 0, 0}, {"topology", 1, 0, 0},
        {"bind", 1, 0, 0}, {"share", 0, 0, 0}, {"model-params", 1, 0, 0}, {"dtype", 1, 0, 0},
        {"intra-bw", 1, 0, 0}, {"intra-lat", 1, 0, 0}, {"inter-bw", 1, 0, 0},
        {"inter-lat", 1, 0, 0}, {"job-id", 1, 0, 0}, {"step-id", 1, 0, 0},
        {"restart-count", 1, 0, 0}, {"port-range", 1, 0, 0}, {"resv-ports", 1, 0, 0},
        {"format", 1, 0, 0}, {"convert", 0, 0, 0}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int c, idx, rc = 0;

    /* the job script first, so the command line overrides it; getopt
     * finds it however spelt (--sbatch=F, --sba F), errors wait for pass 2 */
    opterr = 0;
    while (rc == 0 && (c = getopt_long(argc, argv, "w:N:n:m:c:h", opts, &idx)) != -1)
        if (c == 0 && !strcmp(opts[idx].name, "sbatch"))
            rc = read_sbatch(a, optarg);
    opterr = 1;
    optind = 0; /* glibc: start afresh */
    if (rc < 0)
        return -1;
    while ((c = getopt_long(argc, argv, "w:N:n:m:c:h", opts, &idx)) != -1) {
        char name[2] = {(char)c, 0};
        if (c == 'h') {
            printf(USAGE_REPORT);
            return 2;
        }
        if (c == '?')
            return cli_fail("report", "unknown option", "see 'ddp-topo report --help'");
        if (c == 0 && !strcmp(opts[idx].name, "sbatch"))
            continue;
        if (c == 0 && !strcmp(opts[idx].name, "share")) {
            a->o.share_gpus = 1;
            continue;
        }
        if (c == 0 && !strcmp(opts[idx].name, "convert")) {
            a->convert = 1;
            continue;
        }
        if (c == 0 && !strncmp(opts[idx].name, "gpus", 4))
            a->gpus_per_task = a->gpus_total = 0; /* the command line's GPUs win */
        if (apply(a, c == 0 ? opts[idx].name : name, optarg) < 0)
            return -1;
    }
    if (optind != argc)
        return cli_fail("report", "unexpected argument", "see 'ddp-topo report --help'");
    return 0;
}

/* What the report took from the job script, and what it means for the job:
 * before the report (text) or on stderr (json, dot: their output stays pure). */
static void script_summary(const report_args_t *a, FILE *f)
{
    const char *m = a->mode;

    fprintf(f, "read from %s:%s\n", a->script_path, a->read[DT_SCRIPT_SBATCH][0] ? a->read[DT_SCRIPT_SBATCH]
            : " no option that changes the plan");
    if (a->ignored[DT_SCRIPT_SBATCH][0])
        fprintf(f, "ignored from %s (could change the plan):%s\n", a->script_path,
                a->ignored[DT_SCRIPT_SBATCH]);
    if (a->read[DT_SCRIPT_SRUN][0])
        fprintf(f, "read from srun (line %ld):%s\n", a->script.srun_line, a->read[DT_SCRIPT_SRUN]);
    if (a->ignored[DT_SCRIPT_SRUN][0])
        fprintf(f, "ignored from srun (line %ld) (could change the plan):%s\n", a->script.srun_line,
                a->ignored[DT_SCRIPT_SRUN]);
    if (a->script.nsrun > 1)
        fprintf(f, "the script has %u srun lines; this report is for the first (line %ld)\n",
                a->script.nsrun, a->script.srun_line);
    if (a->gpus_per_node > 0 && !a->gpus_note[0])
        fprintf(f, "GPUs: %ld per node: the first %ld GPU indexes, as SLURM allocates them on "
                "a free node\n", a->gpus_per_node, a->gpus_per_node);
    else if (a->gpus_note[0])
        fprintf(f, "GPUs per node: %s; the first GPU indexes, as SLURM allocates them on a "
                "free node\n", a->gpus_note);
    if (!a->mode_seen)
        fprintf(f, "warning: %s never asks for ddp-topo: the job gets nothing from it unless "
                "the site's plugstack default= applies (add '#SBATCH --ddp-topo=auto' to the "
                "script, or submit with 'sbatch --ddp-topo=auto %s')\n", a->script_path,
                a->script_path);
    else
        fprintf(f, "mode %s (--ddp-topo=%s): %s\n", dt_mode_name(a->req.mode), m,
                a->req.mode == DT_MODE_ENV ? "variables only, no GPU or CPU binding"
                : a->req.mode == DT_MODE_OFF ? "the job gets nothing from ddp-topo"
                : "variables and binding");
    fflush(f); /* before any error on stderr */
}

/* The hint about the error at hand: the dry run plans another machine than
 * the one it runs on, so what the plugin blames on a node's file is the
 * request here, or a missing --topology. */
static int build_failed(const report_args_t *a, const dt_error_t *err)
{
    static const char target[] = "give a target node's topology: --topology FILE, made there "
                                 "with 'ddp-topo detect -o FILE'";
    int live = !a->o.topology || !strcmp(a->o.topology, "live");
    char hint[400];

    switch (err->code) {
    case DT_E_NEEDS_SHARE: /* its text names the report's flag and the job's */
        fprintf(stderr, "ddp-topo: report: %s\n", err->text);
        return -1;
    case DT_E_FILE:
        return cli_fail("report", err->text, "check the --topology path or pattern");
    case DT_E_FORMAT:
        return cli_fail("report", err->text, "a topology file is hwloc or NCCL XML: make one on "
                        "the node with 'ddp-topo detect -o FILE' or 'lstopo --of xml FILE', or "
                        "take NCCL's NCCL_TOPO_DUMP_FILE; 'nvidia-smi topo -m' prints none");
    case DT_E_GPU_MISSING:
    case DT_E_CORES_MISSING:
        snprintf(hint, sizeof(hint), live ? "the report planned this machine, which lacks "
                 "them: %s" : "the job asks for more %s per node than the topology has: ask for "
                 "fewer (%s), or check --topology", live ? target
                 : err->code == DT_E_GPU_MISSING ? "GPUs" : "cores",
                 err->code == DT_E_GPU_MISSING ? "--gres=gpu:N or --gpus-per-node N" : "-c");
        return cli_fail("report", err->text, hint);
    case DT_E_CPUS:
        snprintf(hint, sizeof(hint), "fewer tasks per node, or a smaller --cpus-per-task%s%s",
                 live ? "; if this machine is not the target, " : "", live ? target : "");
        return cli_fail("report", err->text, hint);
    default:
        return cli_fail("report", err->text, "check the node list and the task layout");
    }
}

static void report_args_free(report_args_t *a)
{
    cli_lint_free(&a->lint);
    dt_script_free(&a->script);
}

/* --convert: the script to write instead, on stdout; what changed, on stderr */
static int convert_script(report_args_t *a)
{
    int rc = 0;

    if (!a->script_path)
        rc = cli_fail("report", "--convert needs --sbatch FILE", "pass the job script to convert");
    else if (a->lint.oom)
        rc = cli_fail("report", "out of memory", "retry");
    else {
        cli_lint_convert(&a->lint, a->script.original,
                         a->mode_seen ? -1 : a->script.last_directive, stdout);
        fprintf(stderr, "ddp-topo: report: %u problem%s in %s changed%s\n", a->lint.n,
                a->lint.n == 1 ? "" : "s", a->script_path,
                a->mode_seen ? "" : ", and #SBATCH --ddp-topo=auto added");
        rc = fflush(stdout) ? -1 : 0;
    }
    report_args_free(a);
    return rc;
}

int cmd_report(int argc, char **argv)
{
    report_args_t a = {.o = {.bind = DT_BIND_GPU | DT_BIND_CPU, .dtype = "bf16", .dtype_bytes = 2,
                             .port_lo = DT_PORT_RANGE_DEFAULT_LO, .port_hi = DT_PORT_RANGE_DEFAULT_HI,
                             .job_id = -1, .step_id = -1, .restart_count = -1}};
    dt_report_t *report;
    dt_error_t err;
    dt_format_t fmt = DT_FORMAT_TEXT;
    int rc;

    rc = from_slurm_env(&a);
    if (rc == 0)
        rc = parse_report_args(&a, argc, argv);
    if (rc == 0 && a.convert)
        return convert_script(&a);
    if (rc == 0)
        rc = resolve_layout(&a);
    if (rc == 0 && a.format) {
        if (!strcmp(a.format, "json"))
            fmt = DT_FORMAT_JSON;
        else if (!strcmp(a.format, "dot"))
            fmt = DT_FORMAT_DOT;
        else if (strcmp(a.format, "text"))
            rc = cli_fail("report", "--format must be text, json or dot", "e.g. --format json");
    }
    if (rc == 0 && a.script_path)
        script_summary(&a, fmt == DT_FORMAT_TEXT ? stdout : stderr);
    if (rc == 0 && dt_report_build(&a.o, &report, &err) < 0)
        rc = build_failed(&a, &err);
    if (rc == 0 && (a.script_path || a.o.cpus_per_task)) {
        char cores[400];
        dt_report_cores(report, cores, sizeof(cores));
        fprintf(fmt == DT_FORMAT_TEXT ? stdout : stderr, "%s\n", cores);
    }
    if (rc == 0) {
        rc = dt_report_write(report, fmt, stdout) < 0 || fflush(stdout) ? -1 : 0;
        dt_report_free(report);
    }
    /* the job would run, but not as ddp-topo means it to: exit 1 */
    if (rc == 0 && a.lint.n) {
        cli_lint_print(&a.lint, a.script.original, a.script_path, fmt == DT_FORMAT_TEXT ? stdout : stderr);
        rc = -1;
    }
    report_args_free(&a);
    return rc == 2 ? 0 : rc;
}
