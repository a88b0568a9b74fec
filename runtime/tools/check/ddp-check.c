/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-check: the preflight check of a data-parallel step (`ddp-topo check`,
 * `--ddp-topo=auto,check`). Every rank checks its own node, then probes
 * MASTER_PORT; the ranks meet once (libddprt's rendezvous, bounded by twice
 * --timeout), measure their node groups and rail links, all groups at once,
 * and rank 0 prints one table. Exit 0 when all is well, 1 when a check
 * failed (the node is named), 2 for a usage error. */
#include "config.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define USAGE \
    "Usage: ddp-topo check [--timeout S] [--seconds S] [--bytes N]\n" \
    "Run in every task of a step (srun --ddp-topo=auto ddp-topo check): each rank\n" \
    "checks MASTER_ADDR and MASTER_PORT from its node, its planned GPU, cores and\n" \
    "NIC; the ranks time an allreduce in each node and a stream along each rail;\n" \
    "rank 0 prints one table and names the nodes that failed or are slow.\n" \
    "  --timeout S   bound of each probe; a rank missing for 2*S is named (default 3)\n" \
    "  --seconds S   how long each rail link streams (default 0.3)\n" \
    "  --bytes N     the node groups' allreduce size in bytes (default 4194304)\n" \
    "Exit status: 0 all ok, 1 a check failed, 2 a usage error. See ddp-topo(1).\n"

static const char *env_get(const char *name)
{
    return getenv(name);
}

static int usage_fail(const char *opt, const char *value, const char *want)
{
    fprintf(stderr, "ddp-topo check: %s '%.40s': %s (see 'ddp-topo check --help')\n", opt,
            value ? value : "", want);
    return -1;
}

static int number(const char *opt, const char *v, double lo, double hi, double *out)
{
    char *end;
    double x = v ? strtod(v, &end) : 0;

    if (!v || end == v || *end || !(x >= lo && x <= hi))
        return usage_fail(opt, v, lo < 1 ? "expected a positive number of seconds, e.g. 5"
                                          : "expected a number of bytes, e.g. 4194304");
    *out = x;
    return 0;
}

/* 0, 1 for --help or --version (printed), -1 on a bad option */
static int parse(int argc, char **argv, ck_opts_t *o)
{
    /* every option takes a value: they come in pairs */
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x;
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return fputs(USAGE, stdout), 1;
        if (!strcmp(a, "--version"))
            return puts("ddp-check (ddp-topo) " PACKAGE_VERSION), 1;
        if (!strcmp(a, "--timeout")) {
            if (number(a, v, 0.1, 3600, &o->timeout) < 0)
                return -1;
        } else if (!strcmp(a, "--seconds")) {
            if (number(a, v, 0.01, 60, &o->seconds) < 0)
                return -1;
        } else if (!strcmp(a, "--bytes")) {
            if (number(a, v, 4, 1 << 30, &x) < 0)
                return -1;
            o->bytes = (size_t)x;
        } else {
            return usage_fail("option", a, "unknown");
        }
    }
    return 0;
}

/* Everything before the rendezvous: this node's checks and the probe. */
static ck_master_t *before_meeting(ck_rank_t *me, const drt_env_t *env, const ck_opts_t *o,
                                   int *link_fd, int *group_fd)
{
    ck_master_t *m = NULL;
    uint16_t port = 0;
    char why[160], timeout[32];

    if (env->rank == 0 && env->runtime_port != env->master_port &&
        !(m = ck_master_serve(env->master_port, env->world_size, why, sizeof(why))))
        ck_note(me, 1, "MASTER_PORT %u on rank 0: %s (another job on this node?)",
                env->master_port, why);
    ck_local(me, env);
    ck_master_probe(me, env, o->timeout);
    if ((*link_fd = ck_listen(0, &port, why, sizeof(why))) < 0)
        ck_note(me, 1, "link: %s", why);
    me->link_port = port;
    *group_fd = env->local_rank == 0 ? ck_listen(0, &port, why, sizeof(why)) : -1;
    me->group_port = port;
    snprintf(timeout, sizeof(timeout), "%g", ck_meet_seconds(o));
    setenv("DDPRT_TIMEOUT", timeout, 1);
    return m;
}

/* After the rendezvous: exchange, measure, gather; rank 0's verdict for all. */
static int after_meeting(drt_comm_t *w, ck_rank_t *me, const drt_env_t *env,
                         const ck_opts_t *o, int link_fd, int *group_fd, double t0)
{
    int size = drt_size(w), rank = drt_rank(w), bad = 1;
    ck_rank_t *all = calloc((size_t)size, sizeof(*all));
    drt_error_t err;

    if (!all || drt_allgather(w, me, all, sizeof(*me), &err) < 0)
        goto fail;
    if (ck_node_group(w, all, o, group_fd, &err) < 0)
        ck_note(&all[rank], 1, "%s", err.text);
    if (drt_barrier(w, &err) < 0)
        goto fail;
    ck_link(w, all, o, link_fd);
    *me = all[rank];
    if (drt_allgather(w, me, all, sizeof(*me), &err) < 0)
        goto fail;
    if (rank == 0)
        bad = ck_report(all, size, env, ck_now() - t0);
    if (drt_broadcast(w, &bad, sizeof(bad), 0, &err) < 0)
        goto fail;
    free(all);
    return bad;
fail:
    fprintf(stderr, "ddp-topo check: rank %u on %s: %s\n", me->rank, me->host,
            all ? err.text : "out of memory");
    free(all);
    return 1;
}

int main(int argc, char **argv)
{
    ck_opts_t o = {3.0, 0.3, 4 << 20};
    drt_env_t env;
    drt_error_t err;
    drt_comm_t *world;
    ck_rank_t me = {0};
    ck_master_t *m;
    unsigned char *seen;
    int rc = parse(argc, argv, &o), link_fd, group_fd;
    double t0 = ck_now(), t_init;

    if (rc)
        return rc < 0 ? 2 : 0;
    if (drt_env_load(&env, env_get, &err) < 0) {
        fprintf(stderr, "ddp-topo check: this task has no launch environment: %s\n", err.text);
        return 2;
    }
    m = before_meeting(&me, &env, &o, &link_fd, &group_fd);
    t_init = ck_now();
    if (drt_init(&world, &err) < 0) {
        /* only a rendezvous that ran its course says who never came */
        int waited = ck_now() - t_init >= 0.95 * ck_meet_seconds(&o);
        seen = calloc(env.world_size, 1);
        ck_master_stop(m, seen);
        if (env.rank == 0)
            ck_report_partial(&me, &env, m && seen && waited ? seen : NULL, err.text,
                              ck_now() - t0);
        else
            fprintf(stderr, "ddp-topo check: rank %u on %s: %s\n", env.rank, me.host, err.text);
        free(seen);
        /* rank 0 prints once the rendezvous gave up: leave it time to, where a
         * launcher stops the step at the first failed task (KillOnBadExit) */
        if (env.rank)
            sleep(1);
        return 1;
    }
    rc = after_meeting(world, &me, &env, &o, link_fd, &group_fd, t0);
    ck_master_stop(m, NULL);
    drt_finalize(world);
    if (link_fd >= 0)
        close(link_fd);
    if (group_fd >= 0)
        close(group_fd);
    return rc;
}
