/* SPDX-License-Identifier: Apache-2.0 */
/* Communicator life cycle and queries: the top of the library. */
#include "../internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_TIMEOUT 300.0

static const char *env_get(const char *name)
{
    return getenv(name);
}

static int parse_secret(drt_comm_t *c, drt_error_t *err)
{
    const char *s = getenv(DRT_ENV_SECRET);

    if (!s || strlen(s) != 2 * DRT_SECRET_LEN)
        return rt_fail(err, DRT_ENV_SECRET " is %s (%d hex digits; launchers set it: srun "
                       "--ddp-topo, ddp-run)", s ? "malformed" : "not set", 2 * DRT_SECRET_LEN);
    for (int i = 0; i < DRT_SECRET_LEN; i++) {
        unsigned v;
        if (!isxdigit((unsigned char)s[2 * i]) || !isxdigit((unsigned char)s[2 * i + 1]) ||
            sscanf(s + 2 * i, "%2x", &v) != 1)
            return rt_fail(err, DRT_ENV_SECRET " is malformed (%d hex digits)",
                           2 * DRT_SECRET_LEN);
        c->secret[i] = (unsigned char)v;
    }
    return 0;
}

static int parse_settings(drt_comm_t *c, drt_error_t *err)
{
    const char *t = getenv("DDPRT_TIMEOUT"), *a = getenv("DDPRT_ALGO"), *v = getenv("DDPRT_VERBOSE");
    char *end;

    c->timeout = DEFAULT_TIMEOUT;
    if (t) {
        c->timeout = strtod(t, &end);
        /* !(x > 0) also refuses nan, which would make every wait endless */
        if (end == t || *end || !(c->timeout > 0) || c->timeout > 1e9)
            return rt_fail(err, "DDPRT_TIMEOUT='%.40s' is not a positive number of seconds", t);
    }
    if (a && drt_algo_parse(a, &c->algo) < 0)
        return rt_fail(err, "DDPRT_ALGO='%.40s' is not flat, hier or auto", a);
    c->verbose = v && *v && strcmp(v, "0");
    return 0;
}

static int alloc_tables(drt_comm_t *c)
{
    size_t n = (size_t)c->size;

    c->node_of = calloc(n, sizeof(int));
    c->local_of = calloc(n, sizeof(int));
    c->chan = calloc(n, sizeof(chan_t));
    c->world.ranks = calloc(n, sizeof(int));
    c->node.ranks = calloc(n, sizeof(int));
    c->rail.ranks = calloc(n, sizeof(int));
    c->ep_ip = calloc(n, sizeof(uint32_t));
    c->ep_port = calloc(n, sizeof(uint32_t));
    c->names = calloc(n, RT_NAME);
    c->lost = calloc(n, 1);
    c->lost_list = calloc(n, sizeof(int));
    /* no channel yet: calloc's fd 0 would make drt_finalize close stdin */
    for (size_t r = 0; c->chan && r < n; r++)
        c->chan[r] = (chan_t){.peer = -1, .fd = -1};
    return c->node_of && c->local_of && c->chan && c->world.ranks && c->node.ranks &&
           c->rail.ranks && c->ep_ip && c->ep_port && c->names && c->lost && c->lost_list
               ? 0 : -1;
}

int drt_init(drt_comm_t **out, drt_error_t *err)
{
    drt_comm_t *c = calloc(1, sizeof(*c));

    *out = NULL;
    if (!c)
        return rt_fail(err, "out of memory");
    c->notice_fd = c->listen_fd = -1;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    if (auth_ready() < 0) {
        rt_fail(err, "libsodium failed to initialise (no randomness source?)");
        goto fail;
    }
    if (drt_env_load(&c->env, env_get, err) < 0 || parse_secret(c, err) < 0 ||
        parse_settings(c, err) < 0)
        goto fail;
    c->rank = (int)c->env.rank;
    c->size = (int)c->env.world_size;
    if (alloc_tables(c) < 0) {
        rt_fail(err, "out of memory for %d ranks", c->size);
        goto fail;
    }
    if (boot_exchange(c, err) < 0 || shm_attach(c, err) < 0 || trace_open(c, err) < 0 ||
        metrics_open(c, err) < 0)
        goto fail;
    if (cpu_set_init(c) < 0) {
        rt_fail(err, "out of memory");
        goto fail;
    }
    if (!c->uniform)
        rt_log(c, "ranks per node differ: hierarchical allreduce is disabled, the flat ring "
               "is used");
    *out = c;
    return 0;
fail:
    drt_finalize(c);
    return -1;
}

void drt_finalize(drt_comm_t *c)
{
    if (!c)
        return;
    request_stop(c);
    trace_close(c);
    metrics_close(c);
    gpu_finalize(c); /* its watchdog reads the channels and the notice socket */
    pmix_finalize(c);
    for (int r = 0; c->chan && r < c->size; r++)
        if (c->chan[r].tp && c->chan[r].tp->close)
            c->chan[r].tp->close(&c->chan[r]);
    shm_detach(c);
    if (c->notice_fd >= 0)
        close(c->notice_fd);
    if (c->listen_fd >= 0)
        close(c->listen_fd);
    shrink_free(c);
    free(c->names);
    free(c->lost);
    free(c->lost_list);
    free(c->ep_ip);
    free(c->ep_port);
    free(c->node_of);
    free(c->local_of);
    free(c->chan);
    free(c->world.ranks);
    free(c->node.ranks);
    free(c->rail.ranks);
    free(c->bounce);
    cpu_set_free(c);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->cond);
    free(c);
}

int drt_rank(const drt_comm_t *c) { return c->rank; }
int drt_size(const drt_comm_t *c) { return c->size; }
int drt_local_rank(const drt_comm_t *c) { return c->node.me; }
int drt_local_size(const drt_comm_t *c) { return c->node.n; }
int drt_node_rank(const drt_comm_t *c) { return c->node_of[c->rank]; }
int drt_node_count(const drt_comm_t *c) { return c->nnodes; }
int drt_rail_rank(const drt_comm_t *c) { return c->rail.me; }
int drt_rail_size(const drt_comm_t *c) { return c->rail.n; }

void drt_set_algo(drt_comm_t *c, drt_algo_t algo)
{
    c->algo = algo;
}

drt_algo_t drt_get_algo(const drt_comm_t *c)
{
    return c->algo;
}

/* set by the thread that ran it; a caller that waited for that allreduce
 * is ordered after the write by the request's lock */
drt_algo_t drt_last_algo(const drt_comm_t *c)
{
    return c->cpu.last == DRT_ALGO_HIER ? DRT_ALGO_HIER : DRT_ALGO_FLAT;
}

int drt_node_of(const drt_comm_t *c, int rank)
{
    return rank >= 0 && rank < c->size ? c->node_of[rank] : -1;
}

const char *drt_node_name(const drt_comm_t *c, int rank)
{
    return rank >= 0 && rank < c->size ? c->names[rank] : NULL;
}

int drt_lost_count(const drt_comm_t *c)
{
    return __atomic_load_n(&c->nlost, __ATOMIC_ACQUIRE);
}

int drt_lost_rank(const drt_comm_t *c, int i)
{
    return i >= 0 && i < drt_lost_count(c) ? c->lost_list[i] : -1;
}
