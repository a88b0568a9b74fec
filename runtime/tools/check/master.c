/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-check: MASTER_ADDR resolves and MASTER_PORT answers, from every node.
 * Rank 0 listens on MASTER_PORT, which torch's TCPStore will use (the
 * runtime rendezvous is on DDPRT_PORT), and every rank connects to it from
 * its node's own address, so a firewall that drops one node's packets to
 * that port is found and named. A probe says which rank it is, so when the
 * rendezvous fails rank 0 can tell which ranks never got this far. */
#define _GNU_SOURCE /* accept4 */
#include "config.h"
#include "check.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct ck_master {
    int fd;
    uint32_t world;
    unsigned char *seen;
    _Atomic int stop; /* set by the main thread, read by serve */
    pthread_t thread;
};

/* A probe's hello, or nothing from a stranger: never more than 0.5 s. */
static void take_probe(ck_master_t *m, int fd)
{
    uint32_t hello[2];
    size_t got = 0;
    double deadline = ck_now() + 0.5;
    struct pollfd p = {.fd = fd, .events = POLLIN};

    while (got < sizeof(hello) && ck_now() < deadline && poll(&p, 1, 100) >= 0) {
        ssize_t n = recv(fd, (char *)hello + got, sizeof(hello) - got, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            break;
        got += n > 0 ? (size_t)n : 0;
    }
    if (got == sizeof(hello) && ntohl(hello[0]) == CK_MAGIC && ntohl(hello[1]) < m->world)
        m->seen[ntohl(hello[1])] = 1;
    close(fd);
}

static void *serve(void *arg)
{
    ck_master_t *m = arg;
    struct pollfd p = {.fd = m->fd, .events = POLLIN};

    while (!m->stop) {
        int fd;
        if (poll(&p, 1, 100) <= 0)
            continue;
        if ((fd = accept4(m->fd, NULL, NULL, SOCK_CLOEXEC)) >= 0)
            take_probe(m, fd);
    }
    return NULL;
}

ck_master_t *ck_master_serve(uint16_t port, uint32_t world, char *why, size_t len)
{
    ck_master_t *m = calloc(1, sizeof(*m));

    if (!m || !(m->seen = calloc(world, 1))) {
        snprintf(why, len, "out of memory");
        free(m);
        return NULL;
    }
    m->world = world;
    if ((m->fd = ck_listen(port, NULL, why, len)) >= 0 &&
        pthread_create(&m->thread, NULL, serve, m) == 0)
        return m;
    if (m->fd >= 0) {
        snprintf(why, len, "cannot start a thread");
        close(m->fd);
    }
    free(m->seen);
    free(m);
    return NULL;
}

void ck_master_stop(ck_master_t *m, unsigned char *seen)
{
    int fd;

    if (!m)
        return;
    m->stop = 1;
    pthread_join(m->thread, NULL);
    /* probes still in the backlog arrived too */
    while ((fd = accept4(m->fd, NULL, NULL, SOCK_CLOEXEC)) >= 0)
        take_probe(m, fd);
    close(m->fd);
    if (seen)
        memcpy(seen, m->seen, m->world);
    free(m->seen);
    free(m);
}

/* From this node's own address when the path allows it: a loopback source
 * cannot leave the machine, so it is used only toward a loopback master (the
 * one-machine test cluster, every node on its own 127.0.1.X). */
static uint32_t probe_source(const ck_rank_t *me, uint32_t master)
{
    return me->host_ip && ck_is_loopback(me->host_ip) == ck_is_loopback(master) ? me->host_ip
                                                                                 : 0;
}

void ck_master_probe(ck_rank_t *me, const drt_env_t *env, double timeout)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    uint32_t ip, hello[2] = {htonl(CK_MAGIC), htonl(me->rank)};
    char why[128], text[INET_ADDRSTRLEN];
    int rc = getaddrinfo(env->master_addr, NULL, &hints, &ai), fd;

    if (rc) {
        ck_note(me, 1, "MASTER_ADDR '%.60s' does not resolve here: %s", env->master_addr,
                gai_strerror(rc));
        return;
    }
    ip = ((const struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr;
    freeaddrinfo(ai);
    inet_ntop(AF_INET, &ip, text, sizeof(text));
    if (env->runtime_port == env->master_port) {
        ck_note(me, 0, "MASTER_ADDR %.60s resolves", env->master_addr);
        return; /* the rendezvous itself is the probe: it runs on MASTER_PORT */
    }
    fd = ck_connect(probe_source(me, ip), ip, env->master_port, timeout, why, sizeof(why));
    if (fd < 0) {
        ck_note(me, 1, "MASTER_PORT %u on %.60s (%s) unreachable from %s: %s (a firewall "
                "dropping MASTER_PORT, or no route to MASTER_ADDR?)", env->master_port,
                env->master_addr, text, me->host, why);
        return;
    }
    send(fd, hello, sizeof(hello), MSG_NOSIGNAL | MSG_DONTWAIT);
    close(fd);
    ck_note(me, 0, "MASTER_PORT %u reachable", env->master_port);
}
