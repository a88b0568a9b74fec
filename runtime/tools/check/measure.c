/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-check: the timed part. Two measurements, each run by every group at
 * once, so the whole check costs about the same on 4 nodes as on 4,000:
 *  - each node's ranks allreduce among themselves (a libddprt communicator
 *    per node: shared memory), against the cost model's prediction;
 *  - along each rail (same local rank, one per node), every rank streams to
 *    the next node's rank for a fixed time while taking its predecessor's
 *    stream: the sending step of a rail ring allreduce, timed per link, so
 *    a slow link is pinned on the node it leaves from. The streams run from
 *    the node's own address, as the MASTER_PORT probe does (master.c), to a
 *    listener on the address they go to, and are libddprt connections: a
 *    stranger who connects first is refused, never counted in its place. */
#include "config.h"
#include "check.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ddptopo.h"
#include "internal.h"

/* the cost model's shared-memory figures for CPU-only nodes (README, "The
 * cost model"): the node groups allreduce host buffers through shared memory */
#define CK_SHM_GBPS 10.0
#define CK_SHM_US 1.0
#define CK_ROUNDS 6
#define CK_SOCKBUF (256 << 10) /* little left in flight when the time is up */

/* the ring's bus bandwidth: what each link carried per second */
static double busbw(double bytes, int n, double seconds)
{
    return seconds > 0 ? 2.0 * (n - 1) / n * bytes / seconds / 1e9 : 0;
}

static int fail(drt_error_t *err, const char *why)
{
    snprintf(err->text, sizeof(err->text), "node group: %s", why);
    return -1;
}

static int setenv_u(const char *name, unsigned v)
{
    char text[16];

    snprintf(text, sizeof(text), "%u", v);
    return setenv(name, text, 1);
}

/* This node's ranks as a world of their own: rendezvous at local rank 0's
 * port on loopback (it hands libddprt the socket it already bound). */
static int group_env(const ck_rank_t *me, uint32_t n, uint32_t port, int listen_fd)
{
    int rc = setenv_u("RANK", me->local) | setenv_u("WORLD_SIZE", n) |
             setenv_u("LOCAL_RANK", me->local) | setenv_u("LOCAL_WORLD_SIZE", n) |
             setenv_u("GROUP_RANK", 0) | setenv_u("NODE_RANK", 0) |
             setenv_u("GROUP_WORLD_SIZE", 1) | setenv("MASTER_ADDR", "127.0.0.1", 1) |
             setenv_u("MASTER_PORT", port) | setenv_u("DDPRT_PORT", port) |
             setenv("DDPRT_BOOTSTRAP", "tcp", 1);

    return rc | (listen_fd >= 0 ? setenv_u(DRT_ENV_LISTEN_FD, (unsigned)listen_fd)
                                : unsetenv(DRT_ENV_LISTEN_FD));
}

/* The fastest of CK_ROUNDS rounds: on a shared machine a round can lose its
 * cores to other work, which says nothing about the node's memory path. */
static int time_allreduce(drt_comm_t *g, size_t bytes, double *seconds, drt_error_t *err)
{
    size_t count = bytes / sizeof(float);
    float *buf = calloc(count ? count : 1, sizeof(float));
    int rc = buf ? 0 : fail(err, "out of memory");

    *seconds = 0;
    for (int i = 0; rc == 0 && i <= CK_ROUNDS; i++) {
        double t0 = rt_now();
        rc = drt_allreduce(g, buf, buf, count, DRT_FLOAT32, DRT_SUM, err);
        /* the first round sets up the rings */
        if (i && (*seconds == 0 || rt_now() - t0 < *seconds))
            *seconds = rt_now() - t0;
    }
    free(buf);
    return rc;
}

int ck_group_listen(ck_rank_t *me)
{
    drt_error_t err;
    int port = 0, fd = net_listen_on(htonl(INADDR_LOOPBACK), 0, &port, &err);

    if (fd < 0)
        ck_note(me, 1, "node group: %s", err.text);
    me->group_port = (uint32_t)port;
    return fd;
}

int ck_node_group(drt_comm_t *world, ck_rank_t *all, const ck_opts_t *o, int *listen_fd,
                  drt_error_t *err)
{
    ck_rank_t *me = &all[drt_rank(world)];
    uint32_t n = (uint32_t)drt_local_size(world), port = 0;
    drt_comm_t *g;
    double t;
    dt_cost_t cost = {.bytes = (double)o->bytes, .nodes = 1, .ranks_per_node = n,
                      .uniform = 1, .intra_gbps = CK_SHM_GBPS, .intra_us = CK_SHM_US,
                      .inter_gbps = me->link_pred, .inter_us = 25};

    if (n < 2)
        return 0;
    for (int r = 0; r < drt_size(world); r++)
        if (all[r].node == me->node && all[r].local == 0)
            port = all[r].group_port;
    if (group_env(me, n, port, me->local == 0 ? *listen_fd : -1) < 0)
        return fail(err, "cannot set the group's environment");
    *listen_fd = -1; /* libddprt closes the socket it was handed */
    if (drt_init(&g, err) < 0)
        return -1;
    if (time_allreduce(g, o->bytes, &t, err) == 0) {
        dt_cost_allreduce(&cost);
        me->node_gbps = busbw((double)o->bytes, (int)n, t);
        me->node_pred = busbw((double)o->bytes, (int)n, cost.flat_us * 1e-6);
    }
    drt_finalize(g);
    return me->node_gbps < 0 ? -1 : 0;
}

/* The rank with local rank `local` on the k-th node after `node` that has
 * one (dir = 1) or before it (dir = -1); -1 when no other node has one. */
static int rail_peer(const ck_rank_t *all, int size, uint32_t nodes, const ck_rank_t *me, int dir)
{
    for (uint32_t k = 1; k < nodes; k++) {
        uint32_t node = (me->node + (dir > 0 ? k : nodes - k)) % nodes;
        for (int r = 0; r < size; r++)
            if (all[r].node == node && all[r].local == me->local)
                return r;
    }
    return -1;
}

typedef struct {
    drt_comm_t *world;
    int listen_fd, from; /* from: the predecessor, the one rank whose stream counts */
    double deadline;
} sink_t;

/* The predecessor's stream: count it until it ends, then say how much came. */
static void count_stream(int fd, double deadline)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    static char buf[1 << 16];
    uint64_t got = 0;
    int size = CK_SOCKBUF;

    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
    while (rt_now() < deadline && poll(&p, 1, 100) >= 0) {
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n > 0) {
            got += (uint64_t)n;
        } else if (n == 0) {
            send(fd, &got, sizeof(got), MSG_NOSIGNAL);
            break;
        } else if (errno != EAGAIN && errno != EINTR) {
            break;
        }
    }
}

/* An authenticated connection: the predecessor's (1, counted), or some
 * other rank's of this job, which has no business here (0, closed). */
static int take_stream(void *ctx, int fd, const auth_session_t *s, const hello_t *h)
{
    sink_t *k = ctx;

    (void)s;
    if ((int)h->size == drt_size(k->world) && (int)h->rank == k->from) {
        count_stream(fd, k->deadline);
        close(fd);
        return 1;
    }
    rt_log(k->world, "link: closed a stream from rank %u, not from rank %d", h->rank, k->from);
    close(fd);
    return 0;
}
/* Send for `seconds`, then wait for the sink's count: bytes that arrived
 * per second, from the first byte to the count's arrival. */
static double stream(int fd, double seconds, double deadline)
{
    static const char buf[1 << 16];
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    double t0 = rt_now();
    uint64_t got = 0;
    size_t have = 0;
    int size = CK_SOCKBUF;

    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
    while (rt_now() < t0 + seconds && poll(&p, 1, 20) >= 0)
        if (send(fd, buf, sizeof(buf), MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN &&
            errno != EINTR)
            return 0;
    shutdown(fd, SHUT_WR);
    p.events = POLLIN;
    while (have < sizeof(got) && rt_now() < deadline && poll(&p, 1, 100) >= 0) {
        ssize_t n = recv(fd, (char *)&got + have, sizeof(got) - have, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            return 0;
        have += n > 0 ? (size_t)n : 0;
    }
    return have == sizeof(got) ? (double)got / (rt_now() - t0) / 1e9 : 0;
}

/* The sink: auth_serve takes connections side by side, so strangers that
 * connect first wait out their handshake while the predecessor's stream is
 * counted. */
static void *sink(void *arg)
{
    sink_t *k = arg;
    drt_error_t err;

    if (auth_serve(k->world, k->listen_fd, AUTH_LINK, k->deadline, take_stream, k, &err) < 0)
        rt_log(k->world, "link: no stream from rank %d: %s", k->from, err.text);
    return NULL;
}

/* to's address for the stream, and where to listen for one (by_host: the
 * nodes' own addresses, ck_host_addresses) */
static uint32_t link_ip(const ck_rank_t *r, int by_host)
{
    return by_host ? r->host_ip : r->data_ip;
}

int ck_link_listen(drt_comm_t *world, ck_rank_t *all, int *fd, drt_error_t *err)
{
    int size = drt_size(world), rank = drt_rank(world), port = 0, rc = -1;
    uint32_t *ports = calloc((size_t)size, sizeof(*ports)), mine;
    drt_error_t why;

    *fd = net_listen_on(link_ip(&all[rank], ck_host_addresses(all, size)), 0, &port, &why);
    if (*fd < 0)
        ck_note(&all[rank], 1, "link: %s", why.text);
    mine = (uint32_t)port;
    if (!ports)
        rt_fail(err, "out of memory");
    else if (drt_allgather(world, &mine, ports, sizeof(mine), err) == 0)
        rc = 0;
    for (int r = 0; rc == 0 && r < size; r++)
        all[r].link_port = ports[r];
    free(ports);
    return rc;
}

/* A libddprt connection to `to`'s link listener before the deadline; the
 * socket, or -1 with why. */
static int link_connect(drt_comm_t *world, const ck_rank_t *me, const ck_rank_t *to,
                        int by_host, double deadline, char *why, size_t len)
{
    hello_t h = {(uint32_t)drt_size(world), me->rank, me->node, me->local, 0, 0, 0, {0}};
    uint32_t dst = link_ip(to, by_host);
    double bound = deadline - rt_now();
    char host[INET_ADDRSTRLEN];
    auth_session_t s;
    drt_error_t err;
    int fd;

    if (!to->link_port)
        return snprintf(why, len, "it has no listener"), -1;
    if (bound <= 0)
        return snprintf(why, len, "no time left to connect"), -1;
    inet_ntop(AF_INET, &dst, host, sizeof(host));
    fd = auth_connect_from(world, by_host ? me->host_ip : 0, host, (int)to->link_port,
                           AUTH_LINK, &h, deadline, &s, &err);
    if (fd == NET_EANSWER)
        snprintf(why, len, "no answer within %.1f s", bound);
    else if (fd < 0)
        snprintf(why, len, "%s", err.text);
    return fd < 0 ? -1 : fd;
}

/* Every rank's link phase ends at `end`, the same for all (they enter it
 * together, after a barrier), so a failed link never leaves its peers
 * waiting in the next collective for longer than the world's timeout. */
static void link_out(drt_comm_t *world, ck_rank_t *me, const ck_rank_t *to, int by_host,
                     const ck_opts_t *o, double end)
{
    char why[320];
    int fd = link_connect(world, me, to, by_host, end - o->seconds - CK_LINK_SLACK, why,
                          sizeof(why));

    if (fd < 0) {
        ck_note(me, 1, "link to %s (rank %u) failed: %.120s", to->host, to->rank, why);
        me->link_gbps = 0;
        return;
    }
    me->link_gbps = stream(fd, o->seconds, end);
    close(fd);
    if (me->link_gbps <= 0)
        ck_note(me, 1, "link to %s (rank %u): the stream was not received within %.1f s",
                to->host, to->rank, o->seconds + CK_LINK_SLACK);
}

void ck_link(drt_comm_t *world, ck_rank_t *all, const ck_opts_t *o, int listen_fd)
{
    int size = drt_size(world);
    uint32_t nodes = (uint32_t)drt_node_count(world);
    ck_rank_t *me = &all[drt_rank(world)];
    int to = rail_peer(all, size, nodes, me, 1), from = rail_peer(all, size, nodes, me, -1);
    double end = rt_now() + ck_link_seconds(o);
    sink_t k = {world, listen_fd, from, end};
    pthread_t thread;
    int started = from >= 0 && listen_fd >= 0 && pthread_create(&thread, NULL, sink, &k) == 0;

    if (to >= 0)
        link_out(world, me, &all[to], ck_host_addresses(all, size), o, end);
    if (started)
        pthread_join(thread, NULL);
}
