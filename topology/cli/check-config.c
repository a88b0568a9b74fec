/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-topo check-config: a plugstack.conf line checked with the plugin's
 * own parser (spank_plugin/config.c), so that the answer is the one every
 * node will give; and, for the deployed line, what this node will meet:
 * its topology file (there, root's, this machine's), the checker, the
 * ports. --health says it in one line for SLURM's HealthCheckProgram or NHC. */
#include "config.h"
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define USAGE_CHECK_CONFIG \
    "Usage: ddp-topo check-config 'ARGS'\n" \
    "       ddp-topo check-config 'required|optional PLUGIN ARGS' [--node NAME]\n" \
    "       ddp-topo check-config [--plugstack FILE] [--node NAME] [--health]\n" \
    "Check a ddp_topo.so line of plugstack.conf with the plugin's own parser and\n" \
    "print the settings every job gets, or the error the plugin would log (exit 1).\n" \
    "ARGS alone (as written after the plugin's path) are checked before deploying.\n" \
    "A whole line, or the deployed plugstack.conf (slurm.conf's PlugStackConfig,\n" \
    "includes followed; --plugstack FILE names another), is also checked on this\n" \
    "node: the topology file exists, only root can change it and it describes\n" \
    "this machine; check= names an executable only root can change; port_range\n" \
    "has room for a step's ports. --node NAME: the SLURM node name for %n\n" \
    "(default $SLURMD_NODENAME, else the short host name). --health: print\n" \
    "nothing and exit 0 when all is well, else one line and exit 1, for\n" \
    "HealthCheckProgram or NHC (docs/admins.md).\n"

#ifdef DDP_CHECK_CONFIG
#include "plugin.h"

typedef struct {
    char node[256];
    bool health;     /* one line, the first problem, on stdout */
    int problems;
} node_check_t;

static void say(node_check_t *nc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(node_check_t *nc, const char *fmt, ...)
{
    va_list ap;

    if (nc->health)
        return;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
}

/* A problem this node has: the health form prints the first one only. */
static void problem(node_check_t *nc, const char *what, const char *text)
{
    if (!nc->health)
        printf("  %s: PROBLEM: %s\n", what, text);
    else if (!nc->problems)
        printf("ddp-topo: node %s: %s\n", nc->node, text);
    nc->problems++;
}

static void print_config(const ddp_config_t *c, node_check_t *nc)
{
    char bind[64], warning[DDP_ERRLEN];

    say(nc, "default: %s\n", ddp_mode_name(c->default_mode));
    say(nc, "port_range: %u-%u\n", c->port_lo, c->port_hi);
    if (ddp_port_range_warning(c, DDP_EPHEMERAL_PATH, warning, sizeof(warning)))
        say(nc, "  warning: %s\n", warning);
    say(nc, "topology: %s\n", c->topology);
    say(nc, "topology_match: %s\n", c->topology_match ? "yes" : "no");
    say(nc, "bind: %s\n", dt_bind_name(c->bind, bind, sizeof(bind)));
    say(nc, "check: %s\n", c->checker);
    say(nc, "disable: %s\n", c->disabled ? "yes (--ddp-topo is accepted and sets nothing)" : "no");
}

static void check_topology(const ddp_config_t *c, node_check_t *nc)
{
    char path[512], real[PATH_MAX], err[DDP_ERRLEN];
    dt_node_t node;
    dt_error_t derr;

    if (!strcmp(c->topology, "live")) {
        say(nc, "  topology: live (hwloc discovers the node at each step)\n");
        return;
    }
    if (ddp_topology_locate(c->topology, nc->node, path, sizeof(path), real, err,
                            sizeof(err)) != DDP_TOPO_FILE_OK) {
        problem(nc, "topology", err);
        return;
    }
    if (dt_node_load_file(&node, real, &derr) < 0) {
        snprintf(err, sizeof(err), "%.900s (regenerate it: ddp-topo detect -o %.200s)", derr.text,
                 path);
        problem(nc, "topology", err);
        return;
    }
    if (c->topology_match && dt_node_check_host(&node, &derr)) {
        snprintf(err, sizeof(err), "%.880s (regenerate it on %.60s: ddp-topo detect -o %.200s)",
                 derr.text, nc->node, path);
        problem(nc, "topology", err);
    } else {
        say(nc, "  topology: %s: %u cores, %u GPUs, %u NICs%s\n", path, node.ncores, node.ngpus,
            node.nnics, c->topology_match ? ", this machine's" : " (topology_match=no)");
    }
    dt_node_free(&node);
}

static void check_checker(const ddp_config_t *c, node_check_t *nc)
{
    char err[DDP_ERRLEN];

    if (ddp_checker_usable(c->checker, err, sizeof(err)) < 0)
        problem(nc, "check", err);
    else
        say(nc, "  check: %s runs (--ddp-topo=...,check)\n", c->checker);
}

/* A step wants MASTER_PORT, DDPRT_PORT and NCCL_RAS_ADDR's port: with fewer
 * the plugin leaves the later ones unset (jobs run, libddprt and NCCL RAS
 * then share or lose theirs), so this is said, not failed. */
static void check_ports(const ddp_config_t *c, node_check_t *nc)
{
    unsigned span = (unsigned)c->port_hi - c->port_lo + 1;

    if (span < 3)
        say(nc, "  ports: warning: port_range=%u-%u has %u port%s; a step uses 3 (MASTER_PORT, "
            "DDPRT_PORT, NCCL_RAS_ADDR), so %s (widen port_range, or reserve ports: "
            "MpiParams=ports=LO-HI in slurm.conf)\n", c->port_lo, c->port_hi, span,
            span == 1 ? "" : "s", span == 1 ? "DDPRT_PORT and NCCL_RAS_ADDR are not set"
            : "NCCL_RAS_ADDR is not set");
    else
        say(nc, "  ports: %u-%u: room for a step's 3 ports\n", c->port_lo, c->port_hi);
}

static void check_node(const ddp_config_t *c, node_check_t *nc)
{
    say(nc, "this node (%s):\n", nc->node);
    check_topology(c, nc);
    check_checker(c, nc);
    check_ports(c, nc);
}

/* The plugin's path in a whole line: SLURM loads it as root. */
static void check_plugin(const char *plugin, node_check_t *nc)
{
    char real[PATH_MAX], err[DDP_ERRLEN];
    dt_error_t derr;

    if (plugin[0] != '/') {
        say(nc, "plugin: %s (relative: SLURM looks in slurm.conf's PluginDir)\n", plugin);
        return;
    }
    if (!realpath(plugin, real)) {
        snprintf(err, sizeof(err), "plugin '%.300s': %s (install slurm-spank-ddp-topo, or fix "
                 "the path on the ddp_topo.so line)", plugin, strerror(errno));
        problem(nc, "plugin", err);
    } else if (dt_path_trusted("plugin", plugin, real, "install it where only root can change "
                               "it", &derr) < 0) {
        problem(nc, "plugin", derr.text);
    } else {
        say(nc, "plugin: %s\n", plugin);
    }
}

/* Words split as SLURM splits a plugstack.conf line: on blanks. A line
 * starting with required/optional names the plugin: then this node is
 * checked too. */
static int check_line(char *line, bool whole_is_node, node_check_t *nc)
{
    size_t max = strlen(line) / 2 + 2, n = 0;
    char **av = malloc(max * sizeof(*av)), *save = NULL, err[DDP_ERRLEN];
    ddp_config_t cfg;
    int rc, skip = 0;

    if (!av)
        return cli_fail("check-config", "out of memory", "retry");
    for (char *w = strtok_r(line, " \t\n", &save); w; w = strtok_r(NULL, " \t\n", &save))
        av[n++] = w;
    if (n && (!strcmp(av[0], "required") || !strcmp(av[0], "optional")))
        skip = n > 1 ? 2 : 1;
    if (skip == 2)
        check_plugin(av[1], nc);
    rc = ddp_config_parse((int)n - skip, av + skip, &cfg, err, sizeof(err));
    free(av);
    if (rc < 0) {
        if (nc->health && !nc->problems++)
            printf("ddp-topo: node %s: %s (" DDP_FIX_PLUGSTACK ")\n", nc->node, err);
        else if (!nc->health)
            fprintf(stderr, "ddp-topo: %s (" DDP_FIX_PLUGSTACK ")\n", err);
        return -1;
    }
    print_config(&cfg, nc);
    if (skip || whole_is_node)
        check_node(&cfg, nc);
    return nc->problems ? -1 : 0;
}

static int check_deployed(const char *plugstack, node_check_t *nc)
{
    cli_plug_lines_t lines;
    dt_error_t derr;
    char why[1400];
    int rc = 0;

    if (cli_plugstack_read(plugstack, &lines, &derr) < 0) {
        snprintf(why, sizeof(why), "plugstack.conf: %s", derr.text);
        if (nc->health)
            return printf("ddp-topo: node %s: %s (name it with --plugstack FILE)\n", nc->node,
                          why), -1;
        return cli_fail("check-config", why, "name it with --plugstack FILE");
    }
    if (!lines.n) {
        snprintf(why, sizeof(why), "no ddp_topo.so line in %.400s or its includes", lines.path);
        if (nc->health)
            return printf("ddp-topo: node %s: %s (add one: see ddp_topo(8))\n", nc->node, why),
                   -1;
        return cli_fail("check-config", why, "add one: see ddp_topo(8)");
    }
    for (unsigned i = 0; i < lines.n; i++) {
        say(nc, "%s%s:%u: %s\n", i ? "\n" : "", lines.lines[i].file, lines.lines[i].lineno,
            lines.lines[i].text);
        if (check_line(lines.lines[i].text, true, nc) < 0)
            rc = -1;
    }
    if (lines.n > 1)
        problem(nc, "plugstack", "more than one ddp_topo.so line: SLURM loads each (keep one)");
    cli_plugstack_free(&lines);
    return rc || nc->problems ? -1 : 0;
}

static void default_node(char *node, size_t len)
{
    const char *env = getenv("SLURMD_NODENAME");

    node[0] = '\0';
    if (env && *env) {
        snprintf(node, len, "%s", env);
        return;
    }
    gethostname(node, len - 1);
    node[strcspn(node, ".")] = '\0';
}

/* every word is part of the line: 'a b' and a b say the same */
static int check_words(int argc, char **argv, node_check_t *nc)
{
    size_t len = 1;
    char *line;
    int rc;

    for (int i = 0; i < argc; i++)
        len += strlen(argv[i]) + 1;
    if (!(line = calloc(len, 1)))
        return cli_fail("check-config", "out of memory", "retry");
    for (int i = 0; i < argc; i++)
        strcat(strcat(line, argv[i]), " ");
    rc = check_line(line, false, nc);
    free(line);
    return rc;
}

int cmd_check_config(int argc, char **argv)
{
    static const struct option opts[] = {{"plugstack", 1, 0, 'p'}, {"node", 1, 0, 'n'},
                                         {"health", 0, 0, 'H'}, {"help", 0, 0, 'h'},
                                         {0, 0, 0, 0}};
    node_check_t nc = {.health = false};
    const char *plugstack = NULL;
    int c;

    default_node(nc.node, sizeof(nc.node));
    /* '+': ARGS are words, never options (default=env has no dash anyway) */
    while ((c = getopt_long(argc, argv, "+p:n:Hh", opts, NULL)) != -1) {
        if (c == 'h')
            return fputs(USAGE_CHECK_CONFIG, stdout), 0;
        if (c == 'p')
            plugstack = optarg;
        else if (c == 'n')
            snprintf(nc.node, sizeof(nc.node), "%s", optarg);
        else if (c == 'H')
            nc.health = true;
        else
            return cli_fail("check-config", "unknown option", "see 'ddp-topo check-config --help'");
    }
    if (optind < argc && (plugstack || nc.health))
        return cli_fail("check-config", "ARGS and --plugstack/--health are each a way to name "
                        "the line", "give one of them");
    return optind < argc ? check_words(argc - optind, argv + optind, &nc)
                         : check_deployed(plugstack, &nc);
}
#else
int cmd_check_config(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail("check-config", "this ddp-topo was built without the SPANK plugin",
                    "run the ddp-topo of a build with SLURM's headers: configure without "
                    "--disable-plugin");
}
#endif
