/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-check: the preflight check of a data-parallel step (`ddp-topo check`,
 * `--ddp-topo=auto,check`). Every rank checks its own node, then probes
 * MASTER_PORT (bringing rank 0 its findings); the ranks meet once
 * (libddprt's rendezvous, bounded by twice --timeout), measure their node
 * groups and rail links, all groups at once, and rank 0 prints one table.
 * Exit 0 when all is well, 1 when a check failed (the node is named), 2 for
 * a usage error. */
#include "config.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define USAGE \
    "Usage: ddp-topo check [--timeout S] [--seconds S] [--bytes N]\n" \
    "Run in every task of a step (srun --ddp-topo=auto ddp-topo check): each rank\n" \
    "checks MASTER_ADDR and MASTER_PORT from its node, its planned GPU, cores and\n" \
    "NIC; the ranks time an allreduce in each node and a stream along each rail;\n" \
    "rank 0 prints one table and names the nodes that failed or are slow, each\n" \
    "also on a line 'ddp-topo check: node NODE FAIL: WHY' (or SLOW:) for scripts,\n" \
    "also when the ranks never met. Its connections are libddprt's, authenticated\n" \
    "with the job's secret.\n" \
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
                                   drt_comm_t *auth, int *group_fd)
{
    ck_master_t *m = NULL;
    char why[320], timeout[32];

    /* it serves until the rendezvous is over: a rank may probe as late as
     * that (one whole timeout late, then its own timeout) */
    if (auth && env->rank == 0 && env->runtime_port != env->master_port &&
        !(m = ck_master_serve(auth, env->master_port, ck_meet_seconds(o) + o->timeout + 1, why,
                              sizeof(why))))
        ck_note(me, 1, "MASTER_PORT %u on rank 0: %.140s", env->master_port, why);
    ck_local(me, env);
    ck_master_probe(me, env, auth, o->timeout);
    *group_fd = env->local_rank == 0 ? ck_group_listen(me) : -1;
    snprintf(timeout, sizeof(timeout), "%g", ck_meet_seconds(o));
    setenv("DDPRT_TIMEOUT", timeout, 1);
    return m;
}

/* Every row the world gathered, checked: all ranks see the same rows, so
 * all refuse the same one. 0, or -1 with err set. */
static int rows_check(ck_rank_t *all, int size, uint32_t nodes, drt_error_t *err)
{
    char why[256];
    ck_rank_t row;

    for (int r = 0; r < size; r++) {
        if (ck_rank_parse(&all[r], sizeof(all[r]), (uint32_t)r, (uint32_t)size, nodes, &row,
                          why, sizeof(why)) < 0)
            return rt_fail(err, "%s (another version of ddp-check on its node?)", why);
        all[r] = row;
    }
    return 0;
}

/* After the rendezvous: exchange, measure, gather; rank 0's verdict for all. */
static int after_meeting(drt_comm_t *w, ck_rank_t *me, const drt_env_t *env,
                         const ck_opts_t *o, int *group_fd, double t0)
{
    int size = drt_size(w), rank = drt_rank(w), bad = 1, link_fd = -1;
    uint32_t nodes = (uint32_t)drt_node_count(w);
    ck_rank_t *all = calloc((size_t)size, sizeof(*all));
    drt_error_t err;

    if (!all || drt_allgather(w, me, all, sizeof(*me), &err) < 0 ||
        rows_check(all, size, nodes, &err) < 0 || ck_link_listen(w, all, &link_fd, &err) < 0)
        goto fail;
    if (ck_node_group(w, all, o, group_fd, &err) < 0)
        ck_note(&all[rank], 1, "%s", err.text);
    if (drt_barrier(w, &err) < 0)
        goto fail;
    ck_link(w, all, o, link_fd);
    *me = all[rank];
    if (drt_allgather(w, me, all, sizeof(*me), &err) < 0 || rows_check(all, size, nodes, &err) < 0)
        goto fail;
    if (rank == 0)
        bad = ck_report(stdout, all, size, env, rt_now() - t0);
    if (drt_broadcast(w, &bad, sizeof(bad), 0, &err) < 0)
        goto fail;
    free(all);
    if (link_fd >= 0)
        close(link_fd);
    return bad;
fail:
    fprintf(stderr, "ddp-topo check: rank %u on %s: %s\n", me->rank, me->host,
            all ? err.text : "out of memory");
    free(all);
    if (link_fd >= 0)
        close(link_fd);
    return 1;
}

/* The rendezvous failed: rank 0 says what the probes brought, every other
 * rank what it found itself (on stderr, which srun passes through). */
static int not_met(const ck_rank_t *me, const drt_env_t *env, ck_master_t *m, int waited,
                   const char *why, double seconds)
{
    ck_rank_t *rows = calloc(env->world_size, sizeof(*rows));
    unsigned char *have = calloc(env->world_size, 1);

    ck_master_stop(m, rows, have);
    if (env->rank == 0 && rows && have) {
        rows[0] = *me; /* with what it noted after its own probe */
        have[0] = 1;
        /* only a rendezvous that ran its course says who never came */
        ck_report_partial(stdout, rows, have, m && waited, env, why, seconds);
    } else {
        fprintf(stderr, "ddp-topo check: rank %u on %s: %s%s%s\n", env->rank, me->host,
                me->fail ? me->problem : "", me->fail ? "; the rendezvous failed: " : "", why);
    }
    free(rows);
    free(have);
    /* rank 0 prints once the rendezvous gave up: leave it time to, where a
     * launcher stops the step at the first failed task (KillOnBadExit) */
    if (env->rank)
        sleep(1);
    return 1;
}

int main(int argc, char **argv)
{
    ck_opts_t o = {3.0, 0.3, 4 << 20};
    drt_env_t env;
    drt_error_t err;
    drt_comm_t *world, *auth;
    ck_rank_t me = {0};
    ck_master_t *m;
    int rc = parse(argc, argv, &o), group_fd;
    double t0 = rt_now(), t_init;

    if (rc)
        return rc < 0 ? 2 : 0;
    if (drt_env_load(&env, env_get, &err) < 0) {
        fprintf(stderr, "ddp-topo check: this task has no launch environment: %s\n", err.text);
        return 2;
    }
    /* the probes' secret: the world's own (DDPRT_SECRET), before it exists */
    if (!(auth = auth_comm_bare(&env, o.timeout, &err)))
        ck_note(&me, 1, "the job's secret: %.160s", err.text);
    m = before_meeting(&me, &env, &o, auth, &group_fd);
    t_init = rt_now();
    rc = drt_init(&world, &err);
    if (rc < 0) {
        rc = not_met(&me, &env, m, rt_now() - t_init >= 0.95 * ck_meet_seconds(&o), err.text,
                     rt_now() - t0);
    } else {
        ck_master_stop(m, NULL, NULL); /* every rank has met: no probe is left to come */
        rc = after_meeting(world, &me, &env, &o, &group_fd, t0);
        drt_finalize(world);
    }
    auth_comm_free(auth);
    if (group_fd >= 0)
        close(group_fd);
    return rc;
}
