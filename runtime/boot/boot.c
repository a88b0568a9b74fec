/* SPDX-License-Identifier: Apache-2.0 */
/* Bootstrap over TCP: every rank tells rank 0 (at MASTER_ADDR:DDPRT_PORT,
 * else MASTER_ADDR:MASTER_PORT)
 * where it listens, rank 0 answers everyone with the whole table (one
 * gather, one broadcast), then each rank connects to the peers its rings
 * need on other nodes. Every connection is mutually authenticated (auth.c):
 * the job's secret never crosses the wire, strangers are closed and logged
 * and the job goes on. */
#include "../internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    uint32_t ip, port, node, local, pid;
    char name[RT_NAME]; /* its node's: drt_node_name */
} endpoint_t;

/* This node's name as the launcher gives it (SLURM's node name, ddp-run's
 * emulated node), else the host's: what a person excludes or drains. */
static void node_name(char out[RT_NAME])
{
    const char *v = getenv(DRT_ENV_NODENAME);

    memset(out, 0, RT_NAME);
    if (v && *v)
        snprintf(out, RT_NAME, "%s", v);
    else if (gethostname(out, RT_NAME - 1) < 0 || !out[0])
        snprintf(out, RT_NAME, "?");
}

static endpoint_t endpoint_mine(const drt_comm_t *c, int port, uint32_t ip)
{
    endpoint_t e = {ip, (uint32_t)port, c->env.node_rank, c->env.local_rank,
                    (uint32_t)getpid(), {0}};

    node_name(e.name);
    return e;
}

static void hello_fill(const drt_comm_t *c, hello_t *h, int port, uint32_t ip)
{
    memset(h, 0, sizeof(*h));
    h->size = (uint32_t)c->size;
    h->rank = (uint32_t)c->rank;
    h->node = c->env.node_rank;
    h->local = c->env.local_rank;
    h->port = (uint32_t)port;
    h->pid = (uint32_t)getpid();
    h->ip = ip;
    node_name(h->name);
}

static void list_missing(const char *seen, int n, char *buf, size_t len)
{
    size_t o = 0;

    buf[0] = '\0';
    for (int r = 0; r < n && o + 16 < len; r++)
        if (!seen[r])
            o += (size_t)snprintf(buf + o, len - o, "%s%d", o ? "," : "", r);
}

/* Where peers reach this rank: the interface toward MASTER_ADDR by the rule
 * the plugin follows too (contract.h): one named in DDPRT_SOCKET_IFNAME or
 * GLOO_SOCKET_IFNAME, else the one routing there. That is loopback on the
 * master's node when its name maps to 127.0.1.1 (Debian's /etc/hosts does
 * this), which no other node can reach: then a multi-node job takes the
 * first interface that is up and not loopback. */
static int choose_ip(const drt_comm_t *c, uint32_t *ip, drt_error_t *err)
{
    contract_iface_t ifc;
    char why[sizeof(err->text)], text[INET_ADDRSTRLEN];

    if (contract_iface_choose(c->env.master_addr, c->env.node_count, getenv(DRT_ENV_IFNAME),
                              getenv(DRT_ENV_GLOO_IFNAME), &ifc, why, sizeof(why)) < 0)
        return rt_fail(err, "%s", why);
    *ip = ifc.ip;
    inet_ntop(AF_INET, ip, text, sizeof(text));
    if (ifc.how == CONTRACT_IF_NAMED)
        rt_log(c, "data connections on %s (%s, from %s)", ifc.name, text, ifc.var);
    else if (ifc.how == CONTRACT_IF_FALLBACK)
        rt_log(c, "MASTER_ADDR %s is loopback here; other nodes reach this one at %s",
               c->env.master_addr, text);
    return 0;
}

/* What rank 0 collects: one authenticated connection per rank. */
typedef struct {
    drt_comm_t *c;
    endpoint_t *tab;
    int *fds, got;
    auth_session_t *sess;
} gather_t;

static int take_rank(void *ctx, int fd, const auth_session_t *s, const hello_t *h)
{
    gather_t *g = ctx;
    struct sockaddr_in peer;
    socklen_t len = sizeof(peer);

    if ((int)h->size != g->c->size || h->rank == 0 || (int)h->rank >= g->c->size ||
        g->fds[h->rank] >= 0) {
        rt_log(g->c, "closed a connection claiming rank %u of %u (this job has %d ranks%s)",
               h->rank, h->size, g->c->size,
               (int)h->rank < g->c->size && h->rank && g->fds[h->rank] >= 0 ? ", that one "
               "has arrived" : "");
        close(fd);
        return 0;
    }
    getpeername(fd, (struct sockaddr *)&peer, &len);
    g->tab[h->rank] = (endpoint_t){h->ip ? h->ip : peer.sin_addr.s_addr, h->port, h->node,
                                   h->local, h->pid, {0}};
    memcpy(g->tab[h->rank].name, h->name, RT_NAME - 1); /* the last NUL stays */
    g->fds[h->rank] = fd;
    g->sess[h->rank] = *s;
    return ++g->got == g->c->size;
}

/* The variable that named the rendezvous port, for messages: DDPRT_PORT
 * when the launcher set it (env.c), else MASTER_PORT. */
static const char *port_var(void)
{
    const char *v = getenv(DRT_ENV_PORT);

    return v && *v ? DRT_ENV_PORT : DRT_ENV_MASTER_PORT;
}

/* The rendezvous port, retried while something else holds it: a stranger's
 * socket, or the remains of one (a connection it accepted lingers for up to
 * a minute), may go away before the other ranks give up. */
static int listen_retrying(const drt_comm_t *c, double deadline, drt_error_t *err)
{
    int warned = 0;

    for (;;) {
        int fd = net_listen(c->env.runtime_port, NULL, err);
        if (fd >= 0 || errno != EADDRINUSE || rt_now() + 0.2 >= deadline)
            return fd;
        if (!warned++)
            rt_warn(c, "%s %u is in use on this node by a process outside this "
                    "job; retrying until %.0f s (DDPRT_TIMEOUT) have passed", port_var(),
                    c->env.runtime_port, c->timeout);
        struct timespec ts = {0, 200000000};
        nanosleep(&ts, NULL);
    }
}

/* The rendezvous socket: the one a launcher bound for rank 0 and passed in
 * DDPRT_LISTEN_FD (no window in which another process can take the port),
 * when it is a listening socket on the rendezvous port; else a new one. */
static int master_listener(const drt_comm_t *c, double deadline, drt_error_t *err)
{
    const char *v = getenv(DRT_ENV_LISTEN_FD);
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int fd, on = 0;
    socklen_t onlen = sizeof(on);
    struct stat st;
    char *end;
    long x;

    if (v && *v && (x = strtol(v, &end, 10)) >= 0 && !*end && x < 1 << 20 &&
        fstat(fd = (int)x, &st) == 0 && S_ISSOCK(st.st_mode) &&
        getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &onlen) == 0 && on &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0 && a.sin_family == AF_INET &&
        ntohs(a.sin_port) == c->env.runtime_port) {
        fcntl(fd, F_SETFD, FD_CLOEXEC);
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        return fd;
    }
    return listen_retrying(c, deadline, err);
}

static int send_tables(drt_comm_t *c, const gather_t *g, double deadline, drt_error_t *err)
{
    size_t bytes = sizeof(endpoint_t) * (size_t)c->size;
    int rc = 0;

    for (int r = 1; r < c->size; r++) {
        unsigned char mac[AUTH_MAC];
        auth_mac(c, "ddprt table", &g->sess[r], sizeof(auth_session_t), g->tab, bytes, mac);
        if (net_send_all(g->fds[r], g->tab, bytes, deadline) < 0 ||
            net_send_all(g->fds[r], mac, sizeof(mac), deadline) < 0)
            rc = rt_fail(err, "bootstrap: cannot send the table to rank %d", r);
    }
    return rc;
}

static int gather_as_root(drt_comm_t *c, int port, uint32_t ip, endpoint_t *tab,
                          drt_error_t *err)
{
    double deadline = rt_now() + c->timeout;
    gather_t g = {c, tab, calloc((size_t)c->size, sizeof(int)), 1,
                  calloc((size_t)c->size, sizeof(auth_session_t))};
    char *seen = calloc((size_t)c->size, 1), missing[256];
    int lfd = -1, rc = -1;

    for (int r = 0; g.fds && r < c->size; r++)
        g.fds[r] = -1; /* before any exit: calloc's 0 would close stdin below */
    if (!g.fds || !g.sess || !seen || (lfd = master_listener(c, deadline, err)) < 0)
        goto out;
    tab[0] = endpoint_mine(c, port, ip);
    if (c->size > 1 && auth_serve(c, lfd, AUTH_BOOT, deadline, take_rank, &g, err) < 0) {
        for (int r = 0; r < c->size; r++)
            seen[r] = r == 0 || g.fds[r] >= 0;
        list_missing(seen, c->size, missing, sizeof(missing));
        rt_fail(err, "bootstrap: rank%s %s never arrived at %s:%u within %.0f s (DDPRT_TIMEOUT)",
                strchr(missing, ',') ? "s" : "", missing, c->env.master_addr,
                c->env.runtime_port, c->timeout);
        goto out;
    }
    rc = send_tables(c, &g, deadline, err);
out:
    for (int r = 1; g.fds && r < c->size; r++)
        if (g.fds[r] >= 0)
            close(g.fds[r]);
    if (lfd >= 0)
        close(lfd);
    free(g.fds);
    free(g.sess);
    free(seen);
    return rc;
}

static int gather_as_client(drt_comm_t *c, int port, uint32_t ip, endpoint_t *tab,
                            drt_error_t *err)
{
    double deadline = rt_now() + c->timeout;
    size_t bytes = sizeof(endpoint_t) * (size_t)c->size;
    unsigned char mac[AUTH_MAC];
    auth_session_t s;
    drt_error_t why;
    hello_t h;
    int fd;

    hello_fill(c, &h, port, ip);
    fd = auth_connect(c, c->env.master_addr, c->env.runtime_port, AUTH_BOOT, &h, deadline, &s, &why);
    if (fd == NET_ERESOLVE)
        return rt_fail(err, "bootstrap: MASTER_ADDR: %.200s (set it to a name or IPv4 address "
                       "that every node resolves)", why.text);
    if (fd == AUTH_EIMPOSTOR)
        return rt_fail(err, "bootstrap: %s", why.text);
    if (fd < 0)
        return rt_fail(err, "bootstrap: rank 0 at %s:%u did not answer within %.0f s "
                       "(DDPRT_TIMEOUT)", c->env.master_addr, c->env.runtime_port, c->timeout);
    if (net_recv_all(fd, tab, bytes, deadline) < 0 || net_recv_all(fd, mac, sizeof(mac), deadline) < 0) {
        close(fd);
        return rt_fail(err, "bootstrap: rank 0 at %s:%u closed the connection or timed out "
                       "(other ranks missing? the same WORLD_SIZE everywhere?)",
                       c->env.master_addr, c->env.runtime_port);
    }
    close(fd);
    if (!auth_check(c, "ddprt table", &s, sizeof(s), tab, bytes, mac))
        return rt_fail(err, "bootstrap: the table from %s:%u fails its check (corrupted in "
                       "transit?)", c->env.master_addr, c->env.runtime_port);
    return 0;
}

static int needs_tcp(const drt_comm_t *c, int peer)
{
    const group_t *g[] = {&c->world, &c->rail};

    if (peer == c->rank || c->node_of[peer] == c->node_of[c->rank])
        return 0;
    for (int i = 0; i < 2; i++) {
        if (g[i]->n < 2)
            continue;
        if (g[i]->ranks[(g[i]->me + 1) % g[i]->n] == peer ||
            g[i]->ranks[(g[i]->me + g[i]->n - 1) % g[i]->n] == peer)
            return 1;
    }
    return 0;
}

typedef struct {
    drt_comm_t *c;
    int expect; /* connections still to come from higher ranks */
} peers_t;

static int take_peer(void *ctx, int fd, const auth_session_t *s, const hello_t *h)
{
    peers_t *w = ctx;
    drt_comm_t *c = w->c;

    (void)s;
    if ((int)h->size != c->size || (int)h->rank >= c->size || (int)h->rank <= c->rank ||
        !needs_tcp(c, (int)h->rank) || c->chan[h->rank].fd >= 0) {
        rt_log(c, "closed an unexpected connection from rank %u", h->rank);
        close(fd);
        return 0;
    }
    c->chan[h->rank].fd = fd;
    c->chan[h->rank].tp = &xfer_tcp;
    return --w->expect == 0;
}

/* Lower ranks accept, higher ranks connect: each pair makes one connection. */
int boot_connect(drt_comm_t *c, drt_error_t *err)
{
    double deadline = rt_now() + c->timeout;
    peers_t w = {c, 0};
    drt_error_t why;
    hello_t h;

    hello_fill(c, &h, 0, 0);
    for (int p = 0; p < c->size; p++) {
        char host[INET_ADDRSTRLEN];
        auth_session_t s;
        int fd;
        if (!needs_tcp(c, p))
            continue;
        if (p > c->rank) {
            w.expect++;
            continue;
        }
        inet_ntop(AF_INET, &c->ep_ip[p], host, sizeof(host));
        if ((fd = auth_connect(c, host, (int)c->ep_port[p], AUTH_DATA, &h, deadline, &s, &why)) < 0)
            return rt_fail(err, "cannot connect to rank %d at %s:%u: %.200s", p, host,
                           c->ep_port[p], why.text);
        rt_log(c, "connected to rank %d at %s:%u", p, host, c->ep_port[p]);
        c->chan[p].fd = fd;
        c->chan[p].tp = &xfer_tcp;
    }
    if (w.expect > 0 && auth_serve(c, c->listen_fd, AUTH_DATA, deadline, take_peer, &w, err) < 0)
        return rt_fail(err, "ranks that should connect to rank %d did not within %.0f s",
                       c->rank, c->timeout);
    return 0;
}

static const drt_comm_t *sort_comm; /* qsort's context; init is single-threaded */

/* node-major: a node's ranks are neighbours in the world ring, so it crosses
 * each node boundary once whatever the rank numbering (cyclic layouts) */
static int by_node_then_local(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    const drt_comm_t *c = sort_comm;

    if (c->node_of[x] != c->node_of[y])
        return c->node_of[x] - c->node_of[y];
    return c->local_of[x] != c->local_of[y] ? c->local_of[x] - c->local_of[y] : x - y;
}

static void find_me(const drt_comm_t *c, group_t *g)
{
    for (int i = 0; i < g->n; i++)
        if (g->ranks[i] == c->rank)
            g->me = i;
}

void boot_groups(drt_comm_t *c)
{
    int me = c->rank, per = -1;

    sort_comm = c;
    c->world.n = c->size;
    for (int r = 0; r < c->size; r++)
        c->world.ranks[r] = r;
    qsort(c->world.ranks, (size_t)c->size, sizeof(int), by_node_then_local);
    c->node.n = c->rail.n = 0;
    c->nnodes = 0;
    c->uniform = 1;
    for (int i = 0; i < c->size; i++) {
        int r = c->world.ranks[i];
        if (c->node_of[r] == c->node_of[me])
            c->node.ranks[c->node.n++] = r;
        if (c->local_of[r] == c->local_of[me])
            c->rail.ranks[c->rail.n++] = r;
        if (i == 0 || c->node_of[r] != c->node_of[c->world.ranks[i - 1]]) {
            int count = 0;
            for (int j = i; j < c->size && c->node_of[c->world.ranks[j]] == c->node_of[r]; j++)
                count++;
            c->uniform &= per < 0 || count == per;
            per = count;
            c->nnodes++;
        }
    }
    find_me(c, &c->world);
    find_me(c, &c->node);
    find_me(c, &c->rail);
}

static int gather_pmix(drt_comm_t *c, int port, uint32_t ip, endpoint_t *tab, drt_error_t *err)
{
    endpoint_t mine = endpoint_mine(c, port, ip);

    return pmix_exchange(c, &mine, tab, sizeof(mine), err);
}

/* The listener stays open for the communicator's life (drt_finalize closes
 * it): drt_shrink finds the survivors there and rebuilds the channels. */
int boot_exchange(drt_comm_t *c, drt_error_t *err)
{
    endpoint_t *tab = calloc((size_t)c->size, sizeof(endpoint_t));
    int port, rc = -1;
    uint32_t ip;

    if (!tab || (c->listen_fd = net_listen(0, &port, err)) < 0 || choose_ip(c, &ip, err) < 0)
        goto out;
    rt_log(c, pmix_wanted() ? "bootstrap through PMIx" : "bootstrap through TCP at %s:%u",
           c->env.master_addr, c->env.runtime_port);
    if ((pmix_wanted() ? gather_pmix(c, port, ip, tab, err)
         : c->rank == 0 ? gather_as_root(c, port, ip, tab, err)
                        : gather_as_client(c, port, ip, tab, err)) < 0)
        goto out;
    for (int r = 0; r < c->size; r++) {
        c->node_of[r] = (int)tab[r].node;
        c->local_of[r] = (int)tab[r].local;
        c->chan[r] = (chan_t){.peer = r, .fd = -1, .pid = (pid_t)tab[r].pid};
        c->ep_ip[r] = tab[r].ip;
        c->ep_port[r] = tab[r].port;
        memcpy(c->names[r], tab[r].name, RT_NAME);
        c->names[r][RT_NAME - 1] = '\0';
    }
    notice_open(c, port);
    boot_groups(c);
    rc = boot_connect(c, err);
out:
    free(tab);
    return rc;
}
