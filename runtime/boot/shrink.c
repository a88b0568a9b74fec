/* SPDX-License-Identifier: Apache-2.0 */
/* drt_shrink: the survivors of a lost rank agree on who is left and
 * rebuild the communicator over them, in place.
 *
 * One survivor decides: the lowest old rank still alive. Every survivor
 * finds it the same way, without talking: it probes the listeners of the
 * ranks below it in order (a process that died has none, so the probe is
 * refused at once; a node gone dark does not answer within PROBE_S). The
 * decider takes authenticated AUTH_SHRINK connections from the others on
 * its listener while a thread probes those not arrived yet; once each rank
 * has arrived or is gone (or DDPRT_TIMEOUT has passed) it sends every
 * arrival the member list, signed with the job's secret over that
 * connection's handshake. A survivor whose decider dies before answering
 * probes again and follows the next one. Assumed: the survivors can reach
 * one another (a partition would let each side decide alone). */
#define _GNU_SOURCE /* pipe2 */
#include "../internal.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROBE_S 2.0 /* a listener silent this long counts as gone */
#define ROUND_MS 50 /* the decider's probes of the ranks not arrived yet */

/* What the last drt_shrink_info_t points into. */
struct shrink_info {
    int *lost, *old_of;
    char (*names)[RT_NAME];
    const char **name_of;
};

/* The member list on the wire: epoch, count, old ranks ascending. */
typedef struct {
    uint32_t epoch, n;
} table_head_t;

static int alive(const drt_comm_t *c, int r, double deadline)
{
    double until = rt_now() + PROBE_S;

    return net_probe(c->ep_ip[r], c->ep_port[r], until < deadline ? until : deadline);
}

/* The lowest rank not gone, probing those below this one (gone[] remembers:
 * a listener that closed never comes back). */
static int find_decider(const drt_comm_t *c, unsigned char *gone, double deadline)
{
    for (int r = 0; r < c->rank; r++) {
        if (gone[r])
            continue;
        if (alive(c, r, deadline))
            return r;
        gone[r] = 1;
    }
    return c->rank;
}

/* ---- the decider ---- */

typedef struct {
    drt_comm_t *c;
    pthread_mutex_t m;
    int *fd;               /* per old rank: its connection, -1 before it arrives */
    auth_session_t *sess;
    unsigned char *gone;
    int waiting;           /* ranks neither arrived nor gone */
    int wake[2];           /* the prober's word that nobody is left to wait for */
    int stop;
    double deadline;
} decide_t;

static int take_survivor(void *ctx, int fd, const auth_session_t *s, const hello_t *h)
{
    decide_t *d = ctx;
    drt_comm_t *c = d->c;
    int r = (int)h->rank, done;

    pthread_mutex_lock(&d->m);
    if ((int)h->size != c->size || r >= c->size || r == c->rank || d->fd[r] >= 0 ||
        h->port != c->epoch) {
        pthread_mutex_unlock(&d->m);
        rt_log(c, "shrink: closed a connection claiming rank %u of %u, epoch %u", h->rank,
               h->size, h->port);
        close(fd);
        return 0;
    }
    d->fd[r] = fd;
    d->sess[r] = *s;
    if (d->gone[r]) /* a probe timed out, yet here it is */
        d->gone[r] = 0;
    else
        d->waiting--;
    done = d->waiting == 0;
    pthread_mutex_unlock(&d->m);
    return done;
}

/* One round: probe each rank not arrived and not gone; 1 when none is left. */
static int probe_round(decide_t *d)
{
    drt_comm_t *c = d->c;
    int left;

    for (int r = 0; r < c->size; r++) {
        pthread_mutex_lock(&d->m);
        int skip = r == c->rank || d->fd[r] >= 0 || d->gone[r] || d->stop;
        pthread_mutex_unlock(&d->m);
        if (skip || alive(c, r, d->deadline))
            continue;
        pthread_mutex_lock(&d->m);
        if (d->fd[r] < 0 && !d->gone[r]) {
            d->gone[r] = 1;
            d->waiting--;
        }
        pthread_mutex_unlock(&d->m);
    }
    pthread_mutex_lock(&d->m);
    left = d->waiting > 0 && !d->stop;
    pthread_mutex_unlock(&d->m);
    return !left;
}

static void *prober(void *arg)
{
    decide_t *d = arg;
    struct timespec ts = {0, ROUND_MS * 1000000L};

    while (!probe_round(d))
        nanosleep(&ts, NULL);
    if (write(d->wake[1], "x", 1) < 0) { /* auth_serve_wake's timeout still ends the wait */
    }
    return NULL;
}

static int send_table(drt_comm_t *c, const decide_t *d, const uint32_t *m, int n)
{
    table_head_t head = {c->epoch, (uint32_t)n};
    size_t bytes = (size_t)n * sizeof(uint32_t);

    for (int i = 0; i < n; i++) {
        int fd = d->fd[m[i]];
        unsigned char mac[AUTH_MAC];
        if (fd < 0)
            continue;
        auth_mac(c, "ddprt shrink", &d->sess[m[i]], sizeof(auth_session_t), m, bytes, mac);
        if (net_send_all(fd, &head, sizeof(head), d->deadline) < 0 ||
            net_send_all(fd, m, bytes, d->deadline) < 0 ||
            net_send_all(fd, mac, sizeof(mac), d->deadline) < 0)
            rt_warn(c, "shrink: could not send the member list to rank %u", m[i]);
    }
    return 0;
}

static void wait_arrivals(decide_t *d)
{
    drt_error_t e;
    pthread_t t;
    int started;

    if (d->waiting == 0)
        return;
    started = pthread_create(&t, NULL, prober, d) == 0;
    /* -1 is the deadline: the decision goes on with those that came */
    if (auth_serve_wake(d->c, d->c->listen_fd, AUTH_SHRINK, d->deadline, d->wake[0],
                        take_survivor, d, &e) < 0)
        rt_warn(d->c, "shrink: %d rank(s) alive but absent after %.0f s (DDPRT_TIMEOUT): "
                "going on without them", d->waiting, d->c->timeout);
    pthread_mutex_lock(&d->m);
    d->stop = 1;
    pthread_mutex_unlock(&d->m);
    if (started)
        pthread_join(t, NULL);
}

static int decide(drt_comm_t *c, unsigned char *gone, double deadline, uint32_t *m, int *n,
                  drt_error_t *err)
{
    decide_t d = {.c = c, .fd = malloc((size_t)c->size * sizeof(int)),
                  .sess = calloc((size_t)c->size, sizeof(auth_session_t)), .gone = gone,
                  .wake = {-1, -1}, .deadline = deadline};
    int rc = -1;

    pthread_mutex_init(&d.m, NULL);
    if (!d.fd || !d.sess || pipe2(d.wake, O_CLOEXEC | O_NONBLOCK) < 0) {
        rt_fail(err, "shrink: out of memory or descriptors");
        goto out;
    }
    for (int r = 0; r < c->size; r++) {
        d.fd[r] = -1;
        d.waiting += r != c->rank && !gone[r];
    }
    wait_arrivals(&d);
    *n = 0;
    for (int r = 0; r < c->size; r++)
        if (r == c->rank || d.fd[r] >= 0)
            m[(*n)++] = (uint32_t)r;
    rc = send_table(c, &d, m, *n);
out:
    for (int r = 0; d.fd && r < c->size; r++)
        if (d.fd[r] >= 0)
            close(d.fd[r]);
    for (int i = 0; i < 2; i++)
        if (d.wake[i] >= 0)
            close(d.wake[i]);
    pthread_mutex_destroy(&d.m);
    free(d.fd);
    free(d.sess);
    return rc;
}

/* ---- a follower ---- */

/* 1 with the list, 0 when the decider closed or stopped answering */
static int recv_table(drt_comm_t *c, int fd, const auth_session_t *s, double deadline,
                      uint32_t *m, int *n)
{
    table_head_t head;
    unsigned char mac[AUTH_MAC];
    size_t bytes;
    int me = 0;

    if (net_recv_all(fd, &head, sizeof(head), deadline) < 0 || head.epoch != c->epoch ||
        head.n == 0 || head.n > (uint32_t)c->size)
        return 0;
    bytes = head.n * sizeof(uint32_t);
    if (net_recv_all(fd, m, bytes, deadline) < 0 || net_recv_all(fd, mac, sizeof(mac), deadline) < 0 ||
        !auth_check(c, "ddprt shrink", s, sizeof(*s), m, bytes, mac))
        return 0;
    for (uint32_t i = 0; i < head.n; i++) {
        if (m[i] >= (uint32_t)c->size || (i && m[i] <= m[i - 1]))
            return 0; /* signed, so only a bug of ours: still never trusted blindly */
        me |= m[i] == (uint32_t)c->rank;
    }
    *n = me ? (int)head.n : -1;
    return 1;
}

static int ask(drt_comm_t *c, int decider, double deadline, uint32_t *m, int *n)
{
    hello_t h = {.size = (uint32_t)c->size, .rank = (uint32_t)c->rank,
                 .port = c->epoch, .pid = (uint32_t)getpid()};
    double until = rt_now() + 1.0 < deadline ? rt_now() + 1.0 : deadline;
    char host[INET_ADDRSTRLEN];
    auth_session_t s;
    drt_error_t why;
    int fd, rc;

    inet_ntop(AF_INET, &c->ep_ip[decider], host, sizeof(host));
    /* a short try: a decider that died meanwhile is found by the next probe */
    if ((fd = auth_connect(c, host, (int)c->ep_port[decider], AUTH_SHRINK, &h, until, &s,
                           &why)) < 0)
        return 0;
    rc = recv_table(c, fd, &s, deadline, m, n);
    close(fd);
    return rc;
}

static int agree(drt_comm_t *c, double deadline, uint32_t *m, int *n, drt_error_t *err)
{
    unsigned char *gone = calloc((size_t)c->size, 1);
    int rc = -1;

    if (!gone)
        return rt_fail(err, "shrink: out of memory");
    for (;;) {
        int d = find_decider(c, gone, deadline);
        if (d == c->rank) {
            rc = decide(c, gone, deadline, m, n, err);
            break;
        }
        if (ask(c, d, deadline, m, n) > 0) {
            rc = *n > 0 ? 0 : rt_fail(err, "shrink: rank %d formed the new world without "
                                      "this rank (it came too late)", d);
            break;
        }
        if (rt_now() >= deadline) {
            rc = rt_fail(err, "shrink: no decision on the survivors within %.0f s "
                         "(DDPRT_TIMEOUT); rank %d was asked last", c->timeout, d);
            break;
        }
    }
    free(gone);
    return rc;
}

/* ---- the communicator over the members ---- */

static void close_channels(drt_comm_t *c)
{
    for (int r = 0; r < c->size; r++)
        if (c->chan[r].tp && c->chan[r].tp->close)
            c->chan[r].tp->close(&c->chan[r]);
    shm_detach(c);
    cpu_set_free(c);
    free(c->bounce);
    c->bounce = NULL;
}

void shrink_free(drt_comm_t *c)
{
    struct shrink_info *s = c->shrunk;

    if (!s)
        return;
    free(s->lost);
    free(s->old_of);
    free(s->names);
    free(s->name_of);
    free(s);
    c->shrunk = NULL;
}

/* The lost ranks and their nodes' names, before renumbering overwrites them. */
static int record(drt_comm_t *c, const uint32_t *m, int n, drt_shrink_info_t *info)
{
    struct shrink_info *s = calloc(1, sizeof(*s));
    int k = 0, nl = c->size - n;

    shrink_free(c);
    if (!s || !(s->lost = calloc((size_t)nl + 1, sizeof(int))) ||
        !(s->old_of = calloc((size_t)n, sizeof(int))) ||
        !(s->names = calloc((size_t)nl + 1, RT_NAME)) ||
        !(s->name_of = calloc((size_t)nl + 1, sizeof(char *)))) {
        c->shrunk = s;
        shrink_free(c);
        return -1;
    }
    for (int r = 0, i = 0; r < c->size; r++) {
        if (i < n && m[i] == (uint32_t)r) {
            s->old_of[i++] = r;
            continue;
        }
        s->lost[k] = r;
        memcpy(s->names[k], c->names[r], RT_NAME);
        s->name_of[k] = s->names[k];
        k++;
    }
    c->shrunk = s;
    *info = (drt_shrink_info_t){.old_size = c->size, .new_size = n, .old_rank = c->rank,
                                .old_nodes = c->nnodes, .nlost = nl, .lost_ranks = s->lost,
                                .lost_nodes = s->name_of, .old_rank_of = s->old_of};
    return 0;
}

/* node ids and local ranks without gaps, in their old order */
static int renumber(drt_comm_t *c, const uint32_t *m, int n)
{
    int nodes = (int)c->env.node_count, *new_node = calloc((size_t)nodes + 1, sizeof(int));
    int *local = calloc((size_t)n, sizeof(int)), count = 0, me = 0;

    if (!new_node || !local) {
        free(new_node);
        free(local);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (c->node_of[m[i]] >= 0 && c->node_of[m[i]] < nodes)
            new_node[c->node_of[m[i]]] = 1;
    for (int v = 0; v < nodes; v++)
        new_node[v] = new_node[v] ? count++ : -1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            local[i] += c->node_of[m[j]] == c->node_of[m[i]] &&
                        c->local_of[m[j]] < c->local_of[m[i]];
    /* m ascends, so m[i] >= i: copying forward reads nothing already written */
    for (int i = 0; i < n; i++) {
        int r = (int)m[i];
        me = r == c->rank ? i : me;
        c->node_of[i] = new_node[c->node_of[r]];
        c->local_of[i] = local[i];
        c->ep_ip[i] = c->ep_ip[r];
        c->ep_port[i] = c->ep_port[r];
        memmove(c->names[i], c->names[r], RT_NAME);
        c->chan[i] = (chan_t){.peer = i, .fd = -1, .pid = c->chan[r].pid};
    }
    for (int r = n; r < c->size; r++)
        c->chan[r] = (chan_t){.peer = -1, .fd = -1};
    /* c->env stays as the launcher set it: the task's GPU (LOCAL_RANK's
     * device, gpudev.c) and binding do not move */
    c->rank = me;
    c->size = n;
    free(new_node);
    free(local);
    return 0;
}

static int rebuild(drt_comm_t *c, const uint32_t *m, int n, drt_error_t *err)
{
    close_channels(c);
    if (renumber(c, m, n) < 0)
        return rt_fail(err, "shrink: out of memory");
    c->epoch++;
    memset(c->lost, 0, (size_t)c->size);
    c->nlost = 0;
    boot_groups(c);
    if (shm_attach(c, err) < 0 || boot_connect(c, err) < 0)
        return -1;
    return cpu_set_init(c) < 0 ? rt_fail(err, "shrink: out of memory") : 0;
}

/* What was running stops: queued requests fail at once (abort); the GPU
 * path's watchdog stops, its communicators wait for the members (gpu_shrink). */
static void quiesce(drt_comm_t *c)
{
    __atomic_store_n(&c->abort, 1, __ATOMIC_RELEASE);
    request_drain(c);
    __atomic_store_n(&c->abort, 0, __ATOMIC_RELEASE);
    gpu_pause(c);
}

int drt_shrink(drt_comm_t *c, drt_shrink_info_t *info, drt_error_t *err)
{
    double t0 = rt_now(), deadline = t0 + c->timeout;
    uint32_t *m = calloc((size_t)c->size, sizeof(uint32_t));
    int n = 0, rc = -1;

    if (!m)
        return rt_fail(err, "shrink: out of memory");
    quiesce(c);
    if (agree(c, deadline, m, &n, err) < 0) {
        gpu_finalize(c);
        goto out;
    }
    /* before the renumbering: the world communicator drops old ranks */
    gpu_shrink(c, m, n);
    if (record(c, m, n, info) < 0) {
        rt_fail(err, "shrink: out of memory");
        goto out;
    }
    if (rebuild(c, m, n, err) < 0)
        goto out;
    info->new_nodes = c->nnodes;
    metrics_shrink(c, info->old_size - info->new_size);
    info->seconds = rt_now() - t0;
    rt_log(c, "shrink: world %d -> %d in %.3f s", info->old_size, info->new_size, info->seconds);
    rc = 0;
out:
    free(m);
    return rc;
}
