/* Bootstrap over TCP: every rank tells rank 0 (at MASTER_ADDR:MASTER_PORT)
 * where it listens, rank 0 answers everyone with the whole table (one
 * gather, one broadcast), then each rank connects to the peers its rings
 * need on other nodes. Every connection starts with the job's secret; one
 * without it is closed and logged, and the job goes on. */
#include "internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HELLO_WAIT 2.0 /* seconds a connected client gets to introduce itself */

typedef struct {
    uint32_t magic, size;
    unsigned char secret[DRT_SECRET_LEN];
    uint32_t rank, node, local, port, pid;
    uint32_t ip; /* where this rank takes data connections; 0: its source address */
} hello_t;

typedef struct {
    uint32_t ip, port, node, local, pid;
} endpoint_t;

static int valid_hello(const drt_comm_t *c, const hello_t *h)
{
    return h->magic == DRT_MAGIC && net_secret_equal(h->secret, c->secret) &&
           (int)h->size == c->size && (int)h->rank < c->size;
}

static void hello_fill(const drt_comm_t *c, hello_t *h, int port, uint32_t ip)
{
    memset(h, 0, sizeof(*h));
    h->magic = DRT_MAGIC;
    h->size = (uint32_t)c->size;
    memcpy(h->secret, c->secret, DRT_SECRET_LEN);
    h->rank = (uint32_t)c->rank;
    h->node = c->env.node_rank;
    h->local = c->env.local_rank;
    h->port = (uint32_t)port;
    h->pid = (uint32_t)getpid();
    h->ip = ip;
}

/* Accept one authenticated hello; strangers are closed and logged. */
static int accept_hello(drt_comm_t *c, int lfd, double deadline, hello_t *h, drt_error_t *err)
{
    for (;;) {
        int fd = net_accept(lfd, deadline, err);
        if (fd < 0)
            return -1;
        if (net_recv_all(fd, h, sizeof(*h), drt_now() + HELLO_WAIT) == 0 && valid_hello(c, h))
            return fd;
        drt_log(c, "closed a connection without this job's secret");
        close(fd);
    }
}

static void list_missing(const char *seen, int n, char *buf, size_t len)
{
    size_t o = 0;

    buf[0] = '\0';
    for (int r = 0; r < n && o + 16 < len; r++)
        if (!seen[r])
            o += (size_t)snprintf(buf + o, len - o, "%s%d", o ? "," : "", r);
}

static uint32_t master_ip(const drt_comm_t *c)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    uint32_t ip = htonl(INADDR_LOOPBACK);

    if (getaddrinfo(c->env.master_addr, NULL, &hints, &ai) == 0) {
        ip = ((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr;
        freeaddrinfo(ai);
    }
    return ip;
}

/* The address that routes towards MASTER_ADDR. */
static uint32_t route_ip(const drt_comm_t *c)
{
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(9), .sin_addr.s_addr = master_ip(c)};
    struct sockaddr_in local = {0};
    socklen_t len = sizeof(local);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);

    if (fd >= 0 && connect(fd, (struct sockaddr *)&to, sizeof(to)) == 0)
        getsockname(fd, (struct sockaddr *)&local, &len);
    if (fd >= 0)
        close(fd);
    return local.sin_addr.s_addr ? local.sin_addr.s_addr : htonl(INADDR_LOOPBACK);
}

/* The interface data connections must use: DDPRT_SOCKET_IFNAME, else
 * GLOO_SOCKET_IFNAME (what the plugin's plan sets for CPU collectives;
 * Gloo's syntax allows a comma list, the first entry counts). */
static const char *wanted_iface(const char **var, char *buf, size_t len)
{
    const char *v = getenv("DDPRT_SOCKET_IFNAME");

    *var = "DDPRT_SOCKET_IFNAME";
    if (!v || !*v) {
        v = getenv("GLOO_SOCKET_IFNAME");
        *var = "GLOO_SOCKET_IFNAME";
    }
    if (!v || !*v)
        return NULL;
    snprintf(buf, len, "%.*s", (int)strcspn(v, ","), v);
    return buf;
}

static int is_loopback(uint32_t ip)
{
    return (ntohl(ip) >> 24) == 127;
}

/* An IPv4 address of interface `name` (prefer, if it has that one), or with
 * name NULL of the first interface that is up and not loopback; 0 if none. */
static uint32_t iface_ip(const char *name, uint32_t prefer)
{
    struct ifaddrs *all;
    uint32_t found = 0;

    if (getifaddrs(&all) < 0)
        return 0;
    for (struct ifaddrs *i = all; i; i = i->ifa_next) {
        uint32_t a;
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET ||
            (name ? strcmp(i->ifa_name, name) != 0
                  : (i->ifa_flags & IFF_LOOPBACK) || !(i->ifa_flags & IFF_UP)))
            continue;
        a = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
        if (!found || a == prefer)
            found = a;
    }
    freeifaddrs(all);
    return found;
}

/* Where peers reach this rank: an address of the wanted interface (the one
 * routing towards MASTER_ADDR if it is on it), else the routing address.
 * That is loopback on the master's node when its name maps to 127.0.1.1
 * (Debian's /etc/hosts does this), which no other node can reach: then a
 * multi-node job takes the first address that is up and not loopback. */
static int choose_ip(const drt_comm_t *c, uint32_t *ip, drt_error_t *err)
{
    const char *var, *want;
    char name[IF_NAMESIZE + 1], text[INET_ADDRSTRLEN];
    uint32_t other;

    *ip = route_ip(c);
    if ((want = wanted_iface(&var, name, sizeof(name)))) {
        if (!(*ip = iface_ip(want, *ip)))
            return drt_fail(err, "%s=%s: this node has no interface %s with an IPv4 address "
                            "(name one that has, see `ip -4 addr`, or unset %s)", var, want,
                            want, var);
        inet_ntop(AF_INET, ip, text, sizeof(text));
        drt_log(c, "data connections on %s (%s, from %s)", want, text, var);
    } else if (is_loopback(*ip) && c->env.node_count > 1 && (other = iface_ip(NULL, 0))) {
        *ip = other;
        inet_ntop(AF_INET, ip, text, sizeof(text));
        drt_log(c, "MASTER_ADDR %s is loopback here; other nodes reach this one at %s",
                c->env.master_addr, text);
    }
    return 0;
}

static int gather_as_root(drt_comm_t *c, int port, uint32_t ip, endpoint_t *tab,
                          drt_error_t *err)
{
    double deadline = drt_now() + c->timeout;
    int lfd = net_listen(c->env.master_port, NULL, err), *fds = calloc((size_t)c->size, sizeof(int));
    char *seen = calloc((size_t)c->size, 1), missing[256];
    int rc = -1, got = 1;

    if (lfd < 0 || !fds || !seen)
        goto out;
    tab[0] = (endpoint_t){ip, (uint32_t)port, c->env.node_rank, c->env.local_rank,
                          (uint32_t)getpid()};
    seen[0] = 1;
    while (got < c->size) {
        hello_t h;
        struct sockaddr_in peer;
        socklen_t len = sizeof(peer);
        int fd = accept_hello(c, lfd, deadline, &h, err);
        if (fd < 0) {
            list_missing(seen, c->size, missing, sizeof(missing));
            drt_fail(err, "bootstrap: rank%s %s never arrived at %s:%u within %.0f s (DDPRT_TIMEOUT)",
                     strchr(missing, ',') ? "s" : "", missing, c->env.master_addr,
                     c->env.master_port, c->timeout);
            goto out;
        }
        if (seen[h.rank]) {
            drt_log(c, "closed a second connection claiming rank %u", h.rank);
            close(fd);
            continue;
        }
        getpeername(fd, (struct sockaddr *)&peer, &len);
        tab[h.rank] = (endpoint_t){h.ip ? h.ip : peer.sin_addr.s_addr, h.port, h.node, h.local,
                                   h.pid};
        seen[h.rank] = 1;
        fds[h.rank] = fd;
        got++;
    }
    rc = 0;
    for (int r = 1; r < c->size; r++)
        if (net_send_all(fds[r], tab, sizeof(endpoint_t) * (size_t)c->size, deadline) < 0)
            rc = drt_fail(err, "bootstrap: cannot send the table to rank %d", r);
out:
    for (int r = 1; fds && r < c->size; r++)
        if (fds[r] > 0)
            close(fds[r]);
    if (lfd >= 0)
        close(lfd);
    free(fds);
    free(seen);
    return rc;
}

static int gather_as_client(drt_comm_t *c, int port, uint32_t ip, endpoint_t *tab,
                            drt_error_t *err)
{
    double deadline = drt_now() + c->timeout;
    drt_error_t why;
    int fd = net_connect(c->env.master_addr, c->env.master_port, deadline, &why);
    hello_t h;

    if (fd < 0 && !strncmp(why.text, "cannot resolve", 14))
        return drt_fail(err, "bootstrap: MASTER_ADDR: %.200s (set it to a name or IPv4 address "
                        "that every node resolves)", why.text);
    if (fd < 0)
        return drt_fail(err, "bootstrap: rank 0 at %s:%u did not answer within %.0f s "
                        "(DDPRT_TIMEOUT)", c->env.master_addr, c->env.master_port, c->timeout);
    hello_fill(c, &h, port, ip);
    if (net_send_all(fd, &h, sizeof(h), deadline) < 0 ||
        net_recv_all(fd, tab, sizeof(endpoint_t) * (size_t)c->size, deadline) < 0) {
        close(fd);
        return drt_fail(err, "bootstrap: rank 0 at %s:%u closed the connection or timed out "
                        "(other ranks missing? wrong WORLD_SIZE or secret?)",
                        c->env.master_addr, c->env.master_port);
    }
    close(fd);
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

/* Lower ranks accept, higher ranks connect: each pair makes one connection. */
static int connect_peers(drt_comm_t *c, int lfd, const endpoint_t *tab, drt_error_t *err)
{
    double deadline = drt_now() + c->timeout;
    int expect = 0;

    for (int p = 0; p < c->size; p++) {
        hello_t h;
        char host[INET_ADDRSTRLEN];
        int fd;
        if (!needs_tcp(c, p))
            continue;
        if (p > c->rank) {
            expect++;
            continue;
        }
        inet_ntop(AF_INET, &tab[p].ip, host, sizeof(host));
        if ((fd = net_connect(host, (int)tab[p].port, deadline, err)) < 0)
            return drt_fail(err, "cannot connect to rank %d at %s:%u", p, host, tab[p].port);
        hello_fill(c, &h, 0, 0);
        if (net_send_all(fd, &h, sizeof(h), deadline) < 0) {
            close(fd);
            return drt_fail(err, "cannot greet rank %d at %s:%u", p, host, tab[p].port);
        }
        drt_log(c, "connected to rank %d at %s:%u", p, host, tab[p].port);
        c->chan[p].fd = fd;
    }
    while (expect > 0) {
        hello_t h;
        int fd = accept_hello(c, lfd, deadline, &h, err);
        if (fd < 0)
            return drt_fail(err, "ranks that should connect to rank %d did not within %.0f s",
                            c->rank, c->timeout);
        if (!needs_tcp(c, (int)h.rank) || c->chan[h.rank].fd >= 0) {
            drt_log(c, "closed an unexpected connection from rank %u", h.rank);
            close(fd);
            continue;
        }
        c->chan[h.rank].fd = fd;
        expect--;
    }
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

static void build_groups(drt_comm_t *c)
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
    endpoint_t mine = {ip, (uint32_t)port, c->env.node_rank, c->env.local_rank,
                       (uint32_t)getpid()};

    return pmix_exchange(c, &mine, tab, sizeof(mine), err);
}

int boot_exchange(drt_comm_t *c, drt_error_t *err)
{
    endpoint_t *tab = calloc((size_t)c->size, sizeof(endpoint_t));
    int port, lfd = net_listen(0, &port, err), rc = -1;
    uint32_t ip;

    if (!tab || lfd < 0 || choose_ip(c, &ip, err) < 0)
        goto out;
    drt_log(c, pmix_wanted() ? "bootstrap through PMIx" : "bootstrap through TCP at %s:%u",
            c->env.master_addr, c->env.master_port);
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
    }
    notice_open(c, port);
    build_groups(c);
    rc = connect_peers(c, lfd, tab, err);
out:
    if (lfd >= 0)
        close(lfd);
    free(tab);
    return rc;
}
