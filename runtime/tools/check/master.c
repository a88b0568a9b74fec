/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-check: MASTER_ADDR resolves and MASTER_PORT answers, from every node.
 * Rank 0 listens on MASTER_PORT, which torch's TCPStore will use (the
 * runtime rendezvous is on DDPRT_PORT), and every rank connects to it from
 * its node's own address, so a firewall that drops one node's packets to
 * that port is found and named. A probe is a libddprt connection
 * (auth_connect_from: retried until --timeout, never taking a connection to
 * itself for rank 0) that proves the job's secret and brings its rank's row,
 * so when the rendezvous fails rank 0 can say which ranks never got this
 * far, and which node's ranks failed and why. Rank 0 serves the probes side
 * by side (auth_serve): a stranger's silent connections cost it nothing and
 * end with the serving, which ends when the rendezvous does. */
#define _GNU_SOURCE /* pipe2 */
#include "config.h"
#include "check.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

#define CK_ROW_WAIT 2.0 /* seconds an authenticated probe gets to send its row */

struct ck_master {
    drt_comm_t *auth;
    int fd, wake[2];  /* the listener; a pipe whose write end stops the serving */
    double until;
    uint32_t world, nodes, got;
    ck_rank_t *rows;
    unsigned char *seen;
    pthread_t thread;
};

/* A row, and its MAC binding it to this probe's handshake. */
typedef struct {
    ck_rank_t row;
    unsigned char mac[AUTH_MAC];
} ck_probe_t;

static int take_probe(void *ctx, int fd, const auth_session_t *s, const hello_t *h)
{
    ck_master_t *m = ctx;
    ck_probe_t p;
    ck_rank_t row;
    char why[128];

    if (h->size != m->world || h->rank >= m->world ||
        net_recv_all(fd, &p, sizeof(p), rt_now() + CK_ROW_WAIT) < 0)
        rt_log(m->auth, "closed a probe claiming rank %u of %u (the check has %u ranks)",
               h->rank, h->size, m->world);
    else if (!auth_check(m->auth, "ddck row", s, sizeof(*s), &p.row, sizeof(p.row), p.mac))
        rt_log(m->auth, "closed a probe from rank %u: its row fails its check", h->rank);
    else if (ck_rank_parse(&p.row, sizeof(p.row), h->rank, m->world, m->nodes, &row, why,
                           sizeof(why)) < 0)
        rt_log(m->auth, "closed a probe: %s", why);
    else if (!m->seen[h->rank]) {
        m->seen[h->rank] = 1;
        m->rows[h->rank] = row;
        m->got++;
    }
    close(fd);
    return m->got == m->world;
}

static void *serve(void *arg)
{
    ck_master_t *m = arg;
    drt_error_t err;

    auth_serve_wake(m->auth, m->fd, AUTH_PROBE, m->until, m->wake[0], take_probe, m, &err);
    return NULL;
}

static void master_free(ck_master_t *m)
{
    if (m->fd >= 0)
        close(m->fd);
    for (int i = 0; i < 2; i++)
        if (m->wake[i] >= 0)
            close(m->wake[i]);
    free(m->rows);
    free(m->seen);
    free(m);
}

ck_master_t *ck_master_serve(drt_comm_t *auth, uint16_t port, double seconds, char *why,
                             size_t len)
{
    ck_master_t *m = calloc(1, sizeof(*m));
    drt_error_t err = {"out of memory"};

    if (!m) {
        snprintf(why, len, "out of memory");
        return NULL;
    }
    *m = (ck_master_t){auth, -1, {-1, -1}, rt_now() + seconds, auth->env.world_size,
                       auth->env.node_count, 0, calloc(auth->env.world_size, sizeof(ck_rank_t)),
                       calloc(auth->env.world_size, 1), 0};
    /* every address, as torch's TCPStore listens on MASTER_PORT */
    if (m->rows && m->seen && (m->fd = net_listen(port, NULL, &err)) >= 0) {
        if (pipe2(m->wake, O_CLOEXEC) == 0 && pthread_create(&m->thread, NULL, serve, m) == 0)
            return m;
        snprintf(err.text, sizeof(err.text), "cannot start its thread: %s", strerror(errno));
    }
    snprintf(why, len, "%s", err.text);
    master_free(m);
    return NULL;
}

void ck_master_stop(ck_master_t *m, ck_rank_t *rows, unsigned char *seen)
{
    if (!m)
        return;
    /* a write to a pipe of our own does not block; poll wakes on it at once */
    if (write(m->wake[1], "", 1) < 0)
        fprintf(stderr, "ddp-topo check: cannot stop serving MASTER_PORT at once: %s; it "
                "stops within %.0f s\n", strerror(errno), m->until - rt_now());
    pthread_join(m->thread, NULL);
    for (uint32_t r = 0; r < m->world; r++) {
        if (seen)
            seen[r] = m->seen[r] != 0;
        if (rows && m->seen[r])
            rows[r] = m->rows[r];
    }
    master_free(m);
}

/* From this node's own address when the path allows it: a loopback source
 * cannot leave the machine, so it is used only toward a loopback master (the
 * one-machine test cluster, every node on its own 127.0.1.X). */
static uint32_t probe_source(const ck_rank_t *me, uint32_t master)
{
    return me->host_ip && ck_is_loopback(me->host_ip) == ck_is_loopback(master) ? me->host_ip
                                                                                 : 0;
}

/* Connect, prove the secret, hand over this rank's row; 0, or -1 with why. */
static int probe(const ck_rank_t *me, const drt_env_t *env, drt_comm_t *auth, uint32_t ip,
                 double timeout, char *why, size_t len)
{
    hello_t h = {env->world_size, env->rank, env->node_rank, env->local_rank, 0, 0, 0, {0}};
    char text[INET_ADDRSTRLEN];
    auth_session_t s;
    drt_error_t err;
    ck_probe_t p = {*me, {0}};
    double deadline = rt_now() + timeout;
    int fd;

    inet_ntop(AF_INET, &ip, text, sizeof(text));
    fd = auth_connect_from(auth, probe_source(me, ip), text, env->master_port, AUTH_PROBE, &h,
                           deadline, &s, &err);
    if (fd == NET_EANSWER) {
        snprintf(why, len, "no answer within %.1f s (a firewall dropping MASTER_PORT, or no "
                 "route to MASTER_ADDR?)", timeout);
        return -1;
    }
    if (fd == AUTH_EIMPOSTOR) {
        snprintf(why, len, "a process that cannot prove this job's secret holds it (another "
                 "job's or user's: ss -ltnp 'sport = :%u')", env->master_port);
        return -1;
    }
    if (fd < 0) {
        snprintf(why, len, "%s", err.text);
        return -1;
    }
    auth_mac(auth, "ddck row", &s, sizeof(s), &p.row, sizeof(p.row), p.mac);
    if (net_send_all(fd, &p, sizeof(p), deadline + CK_ROW_WAIT) < 0) {
        snprintf(why, len, "it closed before taking this rank's findings");
        close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

void ck_master_probe(ck_rank_t *me, const drt_env_t *env, drt_comm_t *auth, double timeout)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    char why[sizeof(((drt_error_t *)0)->text)], text[INET_ADDRSTRLEN];
    int rc = getaddrinfo(env->master_addr, NULL, &hints, &ai);
    uint32_t ip;

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
    if (!auth)
        return; /* no secret: the problem is noted already */
    if (probe(me, env, auth, ip, timeout, why, sizeof(why)) < 0) {
        ck_note(me, 1, "MASTER_PORT %u on %.60s (%s) unreachable from %s: %s", env->master_port,
                env->master_addr, text, me->host, why);
        return;
    }
    ck_note(me, 0, "MASTER_PORT %u reachable", env->master_port);
}
