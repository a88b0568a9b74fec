/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-topo: command-line front end of libddptopo. */
#include "config.h"
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define USAGE_MAIN \
    "Usage: ddp-topo COMMAND [OPTIONS]\n" \
    "       ddp-topo --help | --version\n" \
    "\n" \
    "Commands:\n" \
    "  hostnames LIST      expand a SLURM hostlist, one name per line\n" \
    "  hostlist NAMES...   compress host names into a SLURM hostlist\n" \
    "  layout              rank -> node/local rank table for a task layout\n" \
    "  port                the MASTER_PORT (or DDPRT_PORT) the plugin sets for a step\n" \
    "  report              dry run: every rank's GPU, cores, NIC; allreduce cost\n" \
    "  detect              describe this node's topology, or save it (-o FILE)\n" \
    "  check               preflight, in every task: srun --ddp-topo=auto ddp-topo check\n" \
    "  check-config 'ARGS' check a plugstack.conf line's ddp_topo.so arguments\n" \
    "  trace DIR           after a hang or fault: the flight recorder's verdict\n" \
    "\n" \
    "Run 'ddp-topo COMMAND --help' for a command's options; see ddp-topo(1).\n"

#define USAGE_HOSTNAMES \
    "Usage: ddp-topo hostnames LIST\n" \
    "Expand a SLURM hostlist such as 'gpu[001-004,010],login1' (like\n" \
    "'scontrol show hostnames'), one host per line.\n"

#define USAGE_HOSTLIST \
    "Usage: ddp-topo hostlist NAME...\n" \
    "Compress host names (arguments, or one per line on standard input when\n" \
    "none are given) into a SLURM hostlist, keeping their order.\n"

#define USAGE_LAYOUT \
    "Usage: ddp-topo layout --tasks-per-node SPEC [--nodelist LIST]\n" \
    "                       [--distribution block|cyclic|plane=N]\n" \
    "Print one line per rank: RANK NODE_RANK HOST LOCAL_RANK LOCAL_WORLD_SIZE,\n" \
    "as SLURM lays the tasks out. SPEC is SLURM's syntax ('2', '3(x2),2').\n" \
    "Without --nodelist, hosts are shown as node0, node1, ...\n"

#define USAGE_PORT \
    "Usage: ddp-topo port --job-id ID [--step-id ID] [--restart-count N]\n" \
    "                     [--port-range LO-HI] [--resv-ports SPEC] [--runtime | --ras]\n" \
    "Print the MASTER_PORT the plugin sets: the first reserved port when\n" \
    "--resv-ports is given, else a port derived from job, step and restart\n" \
    "count within --port-range (default 61000-65535).\n" \
    "With --runtime, print DDPRT_PORT instead, libddprt's own rendezvous port:\n" \
    "the second reserved port, else one derived counting down from the job's\n" \
    "slot where MASTER_PORT counts up.\n" \
    "With --ras, print the port of NCCL_RAS_ADDR (NCCL's RAS listener on every\n" \
    "node of the step): the third reserved port, else one derived half the\n" \
    "range away from MASTER_PORT. Query a running job with ncclras -p PORT.\n"

static int wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return 1;
    return 0;
}

static int cmd_hostnames(int argc, char **argv)
{
    char **hosts;
    size_t n;
    dt_error_t err;

    if (wants_help(argc, argv))
        return fputs(USAGE_HOSTNAMES, stdout), 0;
    if (argc != 2)
        return cli_fail("hostnames", "expected exactly one hostlist argument",
                    "see 'ddp-topo hostnames --help'");
    if (dt_hostlist_expand(argv[1], &hosts, &n, &err) < 0)
        return cli_fail("hostnames", err.text, "write ranges as prefix[1-4,7], e.g. gpu[001-004]");
    for (size_t i = 0; i < n; i++)
        puts(hosts[i]);
    dt_hostlist_free(hosts, n);
    return 0;
}

static int read_names(char ***names, size_t *n)
{
    char *line = NULL;
    size_t cap = 0, len = 0, alloc = 0;
    ssize_t got;

    *names = NULL;
    while ((got = getline(&line, &cap, stdin)) >= 0) {
        char *name = strtok(line, " \t\r\n");
        for (; name; name = strtok(NULL, " \t\r\n")) {
            if (len == alloc) {
                char **nv = realloc(*names, (alloc = alloc ? alloc * 2 : 64) * sizeof(char *));
                if (!nv)
                    return free(line), -1;
                *names = nv;
            }
            if (!((*names)[len] = strdup(name)))
                return free(line), -1;
            len++;
        }
    }
    free(line);
    *n = len;
    return 0;
}

static int cmd_hostlist(int argc, char **argv)
{
    char **names = argv + 1;
    size_t n = (size_t)argc - 1;
    char *list;
    int from_stdin = argc == 1;

    if (wants_help(argc, argv))
        return fputs(USAGE_HOSTLIST, stdout), 0;
    if (from_stdin && read_names(&names, &n) < 0)
        return cli_fail("hostlist", "out of memory reading names", "pass fewer names");
    if (n == 0)
        return cli_fail("hostlist", "no host names given", "pass names as arguments or on stdin");
    list = dt_hostlist_compress(names, n);
    if (from_stdin) {
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
    }
    if (!list)
        return cli_fail("hostlist", "out of memory", "pass fewer names");
    puts(list);
    free(list);
    return 0;
}

static int print_layout(const dt_layout_t *l, char **hosts)
{
    for (uint32_t r = 0; r < l->ntasks; r++) {
        uint32_t node = l->node_of[r];
        char name[32];

        if (!hosts)
            snprintf(name, sizeof(name), "node%u", node);
        printf("%u %u %s %u %u\n", r, node, hosts ? hosts[node] : name, l->local_of[r],
               l->tasks_per_node[node]);
    }
    return 0;
}

static int cmd_layout(int argc, char **argv)
{
    static const struct option opts[] = {
        {"tasks-per-node", required_argument, NULL, 't'},
        {"nodelist", required_argument, NULL, 'w'},
        {"distribution", required_argument, NULL, 'm'},
        {"help", no_argument, NULL, 'h'},
        {0}};
    const char *tpn = NULL, *nodelist = NULL, *distspec = NULL;
    char **hosts = NULL;
    size_t nhosts = 0;
    uint32_t *counts, nnodes;
    dt_dist_t dist;
    dt_layout_t layout;
    dt_error_t err;
    int c, rc;

    while ((c = getopt_long(argc, argv, "t:w:m:h", opts, NULL)) != -1) {
        switch (c) {
        case 't': tpn = optarg; break;
        case 'w': nodelist = optarg; break;
        case 'm': distspec = optarg; break;
        case 'h': return fputs(USAGE_LAYOUT, stdout), 0;
        default: return cli_fail("layout", "unknown option", "see 'ddp-topo layout --help'");
        }
    }
    if (!tpn || optind != argc)
        return cli_fail("layout", tpn ? "unexpected argument" : "--tasks-per-node is required",
                    "see 'ddp-topo layout --help'");
    if (dt_tasks_per_node_parse(tpn, &counts, &nnodes, &err) < 0)
        return cli_fail("layout", err.text, "use SLURM's syntax, e.g. 3(x2),2");
    if (dt_dist_parse(distspec, &dist, &err) < 0) {
        free(counts);
        return cli_fail("layout", err.text, "pass --distribution block, cyclic or plane=N");
    }
    if (nodelist && dt_hostlist_expand(nodelist, &hosts, &nhosts, &err) < 0) {
        free(counts);
        return cli_fail("layout", err.text, "write ranges as prefix[1-4,7]");
    }
    if (hosts && nhosts != nnodes) {
        char why[128];
        snprintf(why, sizeof(why), "--nodelist names %zu hosts but --tasks-per-node %u nodes",
                 nhosts, nnodes);
        rc = cli_fail("layout", why, "give one count per host");
    } else if (dt_layout_build(&layout, counts, nnodes, dist, &err) < 0) {
        rc = cli_fail("layout", err.text, "check --tasks-per-node");
    } else {
        rc = print_layout(&layout, hosts);
        dt_layout_free(&layout);
    }
    free(counts);
    if (hosts)
        dt_hostlist_free(hosts, nhosts);
    return rc;
}

static int parse_u32_opt(const char *name, const char *s, uint32_t *v)
{
    char *end;
    unsigned long x;

    errno = 0;
    x = strtoul(s, &end, 10);
    /* digits only: strtoul alone takes " 1", "+1" and wraps "-1" */
    if (!isdigit((unsigned char)*s) || *end || errno || x > UINT32_MAX) {
        char why[160];
        snprintf(why, sizeof(why), "%s '%.60s' is not a non-negative integer", name, s);
        cli_fail("port", why, "pass a number such as 1234");
        return -1;
    }
    *v = (uint32_t)x;
    return 0;
}

typedef struct {
    uint32_t job, step, restart;
    uint16_t lo, hi;
    const char *resv;
    int have_job;
    enum { PORT_MASTER, PORT_RUNTIME, PORT_RAS } which;
} port_args_t;

/* The port `ddp-topo port` prints, as the plugin picks it (remote.c). */
static int port_pick(const port_args_t *a, uint16_t *port)
{
    dt_error_t err;
    int rc = 1;

    if (a->resv && (rc = dt_resv_ports_nth(a->resv, (unsigned)a->which, port, &err)) < 0)
        return cli_fail("port", err.text, "pass SLURM_STEP_RESV_PORTS as SLURM sets it");
    if (rc == 0)
        return 0;
    if (!a->have_job)
        return cli_fail("port", a->resv ? "too few reserved ports: this one is derived, and "
                        "--job-id is required" : "--job-id is required",
                        "see 'ddp-topo port --help'");
    if (a->which == PORT_MASTER) {
        *port = dt_master_port(a->job, a->step, a->restart, a->lo, a->hi);
        return 0;
    }
    if (a->which == PORT_RAS) {
        if (!(*port = dt_ras_port(a->job, a->step, a->restart, a->lo, a->hi)))
            return cli_fail("port", "a range of fewer than 3 ports has no room for the RAS port: "
                            "the plugin sets no NCCL_RAS_ADDR", "give a --port-range of 3 "
                            "ports or more");
        return 0;
    }
    if (!(*port = dt_runtime_port(a->job, a->step, a->restart, a->lo, a->hi)))
        return cli_fail("port", "a one-port range holds MASTER_PORT only: the plugin sets no "
                        "DDPRT_PORT", "give a --port-range of 2 ports or more");
    return 0;
}

static int cmd_port(int argc, char **argv)
{
    static const struct option opts[] = {
        {"job-id", required_argument, NULL, 'j'},
        {"step-id", required_argument, NULL, 's'},
        {"restart-count", required_argument, NULL, 'r'},
        {"port-range", required_argument, NULL, 'p'},
        {"resv-ports", required_argument, NULL, 'R'},
        {"runtime", no_argument, NULL, 't'},
        {"ras", no_argument, NULL, 'a'},
        {"help", no_argument, NULL, 'h'},
        {0}};
    port_args_t a = {.lo = DT_PORT_RANGE_DEFAULT_LO, .hi = DT_PORT_RANGE_DEFAULT_HI};
    uint16_t port;
    int c;
    dt_error_t err;

    while ((c = getopt_long(argc, argv, "j:s:r:p:R:tah", opts, NULL)) != -1) {
        switch (c) {
        case 'j':
            if (parse_u32_opt("--job-id", optarg, &a.job) < 0)
                return 1;
            a.have_job = 1;
            break;
        case 's':
            if (parse_u32_opt("--step-id", optarg, &a.step) < 0)
                return 1;
            break;
        case 'r':
            if (parse_u32_opt("--restart-count", optarg, &a.restart) < 0)
                return 1;
            break;
        case 'p':
            if (dt_port_range_parse(optarg, &a.lo, &a.hi, &err) < 0)
                return cli_fail("port", err.text, "e.g. --port-range 61000-65535");
            break;
        case 'R': a.resv = optarg; break;
        case 't': a.which = PORT_RUNTIME; break;
        case 'a': a.which = PORT_RAS; break;
        case 'h': return fputs(USAGE_PORT, stdout), 0;
        default: return cli_fail("port", "unknown option", "see 'ddp-topo port --help'");
        }
    }
    if (optind != argc)
        return cli_fail("port", "unexpected argument", "see 'ddp-topo port --help'");
    if (port_pick(&a, &port) < 0)
        return 1;
    printf("%u\n", port);
    return 0;
}

/* The preflight check is ddp-check, which links libddprt (libddptopo never
 * does): the one installed beside this program, else the first on PATH. */
static int cmd_check(int argc, char **argv)
{
    static char name[] = "ddp-check";
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - sizeof(name));
    char *slash = n > 0 ? (self[n] = '\0', strrchr(self, '/')) : NULL;

    (void)argc;
    argv[0] = name;
    if (slash) {
        memcpy(slash + 1, name, sizeof(name));
        if (access(self, X_OK) == 0)
            execv(self, argv);
    }
    execvp(name, argv);
    fprintf(stderr, "ddp-topo: check: cannot run ddp-check: not at %s nor on PATH: %s "
            "(install ddp-check with ddp-topo, or add its directory to PATH)\n",
            slash ? self : "/proc/self/exe's directory", strerror(errno));
    return 2;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*run)(int, char **);
    } cmds[] = {{"hostnames", cmd_hostnames}, {"hostlist", cmd_hostlist},
                {"layout", cmd_layout}, {"port", cmd_port},
                {"report", cmd_report}, {"detect", cmd_detect}, {"check", cmd_check},
                {"check-config", cmd_check_config}, {"trace", cmd_trace}};

    if (argc == 2 && !strcmp(argv[1], "--version")) {
        puts("ddp-topo " PACKAGE_VERSION);
        return 0;
    }
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(USAGE_MAIN, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        if (!strcmp(argv[1], cmds[i].name)) {
            int rc = cmds[i].run(argc - 1, argv + 1);
            return rc < 0 ? 1 : rc;
        }
    fprintf(stderr, "ddp-topo: unknown command '%s' (run 'ddp-topo --help' for the list)\n",
            argv[1]);
    return 2;
}
