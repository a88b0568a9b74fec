/* SPDX-License-Identifier: Apache-2.0 */
/* Parsing of the user's --ddp-topo value and the admin's plugstack.conf
 * arguments. Pure string handling, shared by every context. */
#include "plugin.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddptopo.h"

#define VALID_ARGS "default=off|env|auto, port_range=LO-HI, topology=live|PATTERN, " \
                   "topology_match=yes|no, bind=none|gpu,cpu,mem,nic, check=PATH, disable"

/* the plugin's modes are libddptopo's, which the dry run shares */
_Static_assert((int)DDP_MODE_OFF == (int)DT_MODE_OFF && (int)DDP_MODE_ENV == (int)DT_MODE_ENV &&
                   (int)DDP_MODE_AUTO == (int)DT_MODE_AUTO, "ddp_mode_t follows dt_mode_t");

const char *ddp_mode_name(ddp_mode_t mode)
{
    return dt_mode_name((dt_mode_t)mode);
}

static int mode_lookup(const char *s, size_t len, ddp_mode_t *mode)
{
    dt_mode_t m;

    if (dt_mode_lookup(s, len, &m) < 0)
        return -1;
    *mode = (ddp_mode_t)m;
    return 0;
}

int ddp_request_parse(const char *value, ddp_request_t *req, char *err, size_t errlen)
{
    dt_request_t r;
    dt_error_t derr;

    if (dt_request_parse(value, &r, &derr) < 0) {
        snprintf(err, errlen, "%s", derr.text);
        return -1;
    }
    *req = (ddp_request_t){.given = true, .mode = (ddp_mode_t)r.mode, .verbose = r.verbose,
                           .share = r.share, .check = r.check};
    return 0;
}

static int config_arg(const char *arg, ddp_config_t *cfg, char *err, size_t errlen)
{
    dt_error_t derr;

    if (!strncmp(arg, "default=", 8)) {
        const char *v = arg + 8;
        if (mode_lookup(v, strlen(v), &cfg->default_mode) == 0)
            return 0;
        snprintf(err, errlen, "plugstack.conf argument '%.80s': unknown mode (expected "
                 "default=off, default=env or default=auto)", arg);
        return -1;
    }
    if (!strncmp(arg, "port_range=", 11)) {
        if (dt_port_range_parse(arg + 11, &cfg->port_lo, &cfg->port_hi, &derr) == 0)
            return 0;
        snprintf(err, errlen, "plugstack.conf argument '%.80s': %s", arg, derr.text);
        return -1;
    }
    if (!strncmp(arg, "topology=", 9)) {
        const char *v = arg + 9;
        char path[512];
        if (strcmp(v, "live") && (v[0] != '/' ||
                                  dt_topology_path(v, "n", "h", path, sizeof(path), &derr) < 0)) {
            snprintf(err, errlen, "plugstack.conf argument '%.80s': %s", arg, v[0] != '/'
                     ? "expected live or an absolute path pattern (%n node name, %h host name)"
                     : derr.text);
            return -1;
        }
        if (strlen(v) >= sizeof(cfg->topology)) {
            snprintf(err, errlen, "plugstack.conf argument '%.80s...': the pattern is longer "
                     "than %zu characters", arg, sizeof(cfg->topology) - 1);
            return -1;
        }
        memcpy(cfg->topology, v, strlen(v) + 1);
        return 0;
    }
    if (!strncmp(arg, "check=", 6)) {
        const char *v = arg + 6;
        if (v[0] != '/' || strlen(v) >= sizeof(cfg->checker)) {
            snprintf(err, errlen, "plugstack.conf argument '%.80s': expected the absolute path "
                     "of ddp-check, shorter than %zu characters", arg, sizeof(cfg->checker));
            return -1;
        }
        memcpy(cfg->checker, v, strlen(v) + 1);
        return 0;
    }
    if (!strncmp(arg, "bind=", 5)) {
        if (dt_bind_parse(arg + 5, &cfg->bind, &derr) == 0)
            return 0;
        snprintf(err, errlen, "plugstack.conf argument '%.80s': %s", arg, derr.text);
        return -1;
    }
    if (!strncmp(arg, "topology_match=", 15)) {
        const char *v = arg + 15;
        if (strcmp(v, "yes") && strcmp(v, "no")) {
            snprintf(err, errlen, "plugstack.conf argument '%.80s': expected topology_match=yes "
                     "or topology_match=no", arg);
            return -1;
        }
        cfg->topology_match = !strcmp(v, "yes");
        return 0;
    }
    if (!strcmp(arg, "disable")) {
        cfg->disabled = true;
        return 0;
    }
    snprintf(err, errlen, "plugstack.conf argument '%.80s': unknown argument (valid: %s)",
             arg, VALID_ARGS);
    return -1;
}

/* The setting an argument names (its text up to '=', or all of it), so
 * that a second one is caught: last-wins would hide an admin's mistake. */
static size_t setting_len(const char *arg)
{
    return strcspn(arg, "=");
}

static const char *same_setting(char **av, int i)
{
    size_t len = setting_len(av[i]);

    for (int j = 0; j < i; j++)
        if (setting_len(av[j]) == len && !strncmp(av[j], av[i], len))
            return av[j];
    return NULL;
}

/* Every argument is parsed even after a bad one: the valid ones (default=
 * above all) still say which jobs asked for ddp-topo and must fail. */
int ddp_config_parse(int ac, char **av, ddp_config_t *cfg, char *err, size_t errlen)
{
    ddp_config_t c = {.default_mode = DDP_MODE_OFF,
                      .port_lo = DT_PORT_RANGE_DEFAULT_LO,
                      .port_hi = DT_PORT_RANGE_DEFAULT_HI,
                      .topology = "live",
                      .checker = DDP_CHECK_PATH,
                      .topology_match = true,
                      .bind = DT_BIND_GPU | DT_BIND_CPU};
    int rc = 0;

    /* the first error is the one to fix; later ones are parsed, not kept */
    for (int i = 0; i < ac; i++) {
        const char *first = same_setting(av, i);
        if (first) {
            /* the first value stays: the error fails every job that asks */
            if (rc == 0)
                snprintf(err, errlen, "plugstack.conf arguments '%.80s' and '%.80s': the same "
                         "setting twice (keep one)", first, av[i]);
            rc = -1;
        } else if (config_arg(av[i], &c, rc == 0 ? err : NULL, rc == 0 ? errlen : 0) < 0) {
            rc = -1;
        }
    }
    *cfg = c;
    return rc;
}

/* The kernel hands ports of ip_local_port_range to outgoing connections, so
 * a derived MASTER_PORT inside it can be taken by any process on rank 0's
 * node. `path` is /proc/sys/net/ipv4/ip_local_port_range (a parameter for
 * the tests). Returns 1 with msg set when the ranges overlap, else 0. */
int ddp_port_range_warning(const ddp_config_t *cfg, const char *path, char *msg, size_t len)
{
    FILE *f = fopen(path, "re");
    unsigned lo, hi;
    int n;

    if (!f)
        return 0;
    n = fscanf(f, "%u %u", &lo, &hi);
    fclose(f);
    if (n != 2 || cfg->port_lo > hi || lo > cfg->port_hi)
        return 0;
    snprintf(msg, len, "plugstack.conf port_range=%u-%u overlaps the kernel's ephemeral port "
             "range %u-%u (%s), so an outgoing connection can take a job's MASTER_PORT (move "
             "port_range out of %u-%u, or have SLURM reserve ports: MpiParams=ports=LO-HI in "
             "slurm.conf)", cfg->port_lo, cfg->port_hi, lo, hi, path, lo, hi);
    return 1;
}

int ddp_bind_option_parse(const char *value, unsigned *bind, char *err, size_t errlen)
{
    dt_error_t derr;

    if (dt_bind_parse(value ? value : "", bind, &derr) == 0)
        return 0;
    snprintf(err, errlen, "invalid --ddp-topo-bind value: %s", derr.text);
    return -1;
}

/* Run in every task that asks: a user who could replace the checker would
 * run code as everyone else (the rule for topology files). */
int ddp_checker_usable(const char *checker, char *err, size_t errlen)
{
    char real[PATH_MAX] = "";
    dt_error_t derr;

    if (realpath(checker, real) &&
        dt_path_trusted("preflight checker", checker, real, "install it where only root can "
                        "change it, e.g. /usr/bin, and name it with check=PATH", &derr) < 0) {
        snprintf(err, errlen, "%s", derr.text);
        return -1;
    }
    if (!real[0] || access(checker, X_OK) < 0) {
        snprintf(err, errlen, "the preflight check %s cannot run: %s (install ddp-check "
                 "there, or name it with check=PATH in plugstack.conf)", checker,
                 strerror(errno));
        return -1;
    }
    return 0;
}

ddp_topo_file_t ddp_topology_locate(const char *pattern, const char *node_name, char *path,
                                    size_t pathlen, char real[PATH_MAX], char *err,
                                    size_t errlen)
{
    char host[256] = "";
    dt_error_t derr;

    gethostname(host, sizeof(host) - 1);
    if (dt_topology_path(pattern, node_name, host, path, pathlen, &derr) < 0) {
        snprintf(err, errlen, "%s", derr.text);
        return DDP_TOPO_FILE_PATTERN;
    }
    if (!realpath(path, real)) {
        snprintf(err, errlen, "topology file '%.300s': %s", path, strerror(errno));
        return DDP_TOPO_FILE_MISSING;
    }
    if (dt_path_trusted("topology file", path, real, "keep topology files where only root can "
                        "change them, e.g. /etc/ddp-topo", &derr) < 0) {
        snprintf(err, errlen, "%s", derr.text);
        return DDP_TOPO_FILE_UNTRUSTED;
    }
    return DDP_TOPO_FILE_OK;
}
