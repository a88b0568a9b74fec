/* SPDX-License-Identifier: Apache-2.0 */
/* Mutual authentication of every runtime connection, so that the job's
 * secret never crosses the wire and neither a process squatting on a port
 * nor a stranger connecting to one learns anything usable:
 *
 *   client -> server  magic, kind, nonce_c
 *   server -> client  magic, kind, nonce_s, HMAC(K, "server" kind nonce_c nonce_s)
 *   client -> server  HMAC(K, "client" kind nonce_c nonce_s payload), payload
 *
 * K is the job's secret; HMAC-SHA256 and the nonces come from libsodium.
 * The server proves itself first, so a client never answers an impostor;
 * the labels differ, so no proof can be reflected; fresh nonces from both
 * sides make every proof useless for any other connection.
 *
 * The server side handles many connections at once (poll), each with its
 * own short deadline, so strangers that connect and say nothing cost the
 * job nothing but a file descriptor for AUTH_WAIT seconds. */
#define _GNU_SOURCE /* accept4 */
#include "../internal.h"

#include <errno.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define AUTH_WAIT 5.0     /* seconds a connection gets to finish its handshake */
#define AUTH_PENDING 256  /* handshakes served at once; a flood drops the oldest */

typedef struct {
    uint32_t magic, kind;
    unsigned char nonce[AUTH_NONCE];
} auth_hello_t;

typedef struct {
    uint32_t magic, kind;
    unsigned char nonce[AUTH_NONCE];
    unsigned char mac[AUTH_MAC];
} auth_reply_t;

typedef struct {
    unsigned char mac[AUTH_MAC];
    hello_t payload;
} auth_proof_t;

/* A connection whose handshake is under way (server side). */
typedef struct {
    int fd;
    double until;
    int proving;        /* hello answered, waiting for the client's proof */
    size_t got;
    auth_session_t s;
    union {
        auth_hello_t hello;
        auth_proof_t proof;
        unsigned char bytes[1];
    } in;
} pending_t;

int auth_ready(void)
{
    return sodium_init() < 0 ? -1 : 0;
}

void auth_mac(const drt_comm_t *c, const char *label, const void *a, size_t alen,
              const void *b, size_t blen, unsigned char out[AUTH_MAC])
{
    crypto_auth_hmacsha256_state st;

    crypto_auth_hmacsha256_init(&st, c->secret, DRT_SECRET_LEN);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)label, strlen(label) + 1);
    if (alen)
        crypto_auth_hmacsha256_update(&st, a, alen);
    if (blen)
        crypto_auth_hmacsha256_update(&st, b, blen);
    crypto_auth_hmacsha256_final(&st, out);
}

int auth_check(const drt_comm_t *c, const char *label, const void *a, size_t alen,
               const void *b, size_t blen, const unsigned char mac[AUTH_MAC])
{
    unsigned char want[AUTH_MAC];

    auth_mac(c, label, a, alen, b, blen, want);
    return sodium_memcmp(want, mac, AUTH_MAC) == 0;
}

void auth_random(void *buf, size_t len)
{
    randombytes_buf(buf, len);
}

/* ---- client ---------------------------------------------------------------- */

enum { HS_OK = 0, HS_IO = -1, HS_IMPOSTOR = -2 };

static int client_handshake(drt_comm_t *c, int fd, uint32_t kind, const hello_t *payload,
                            double deadline, auth_session_t *s)
{
    auth_hello_t h = {.magic = RT_MAGIC, .kind = kind};
    auth_reply_t r;
    auth_proof_t p;

    s->kind = kind;
    auth_random(s->nc, AUTH_NONCE);
    memcpy(h.nonce, s->nc, AUTH_NONCE);
    if (net_send_all(fd, &h, sizeof(h), deadline) < 0 ||
        net_recv_all(fd, &r, sizeof(r), deadline) < 0)
        return HS_IO;
    memcpy(s->ns, r.nonce, AUTH_NONCE);
    if (r.magic != RT_MAGIC || r.kind != kind ||
        !auth_check(c, "ddprt server", s, sizeof(*s), NULL, 0, r.mac))
        return HS_IMPOSTOR;
    p.payload = *payload;
    auth_mac(c, "ddprt client", s, sizeof(*s), &p.payload, sizeof(p.payload), p.mac);
    return net_send_all(fd, &p, sizeof(p), deadline) < 0 ? HS_IO : HS_OK;
}

static void pause_for(double seconds)
{
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};

    nanosleep(&ts, NULL);
}

/* the deadline passed with an impostor answering on the port: name it, so
 * the job's failure points at the stranger, not at a rank that never came */
static int auth_impostor_fail(const drt_comm_t *c, const char *host, int port, drt_error_t *err)
{
    return rt_fail(err, "%s:%d is held by a process that cannot prove this job's secret, "
                   "not by this job's rank, for %.0f s (DDPRT_TIMEOUT): another job or user "
                   "took the port (see `ss -ltnp 'sport = :%d'`; with srun, have SLURM reserve "
                   "ports: MpiParams=ports=LO-HI)", host, port, c->timeout, port);
}

int auth_connect(drt_comm_t *c, const char *host, int port, uint32_t kind,
                 const hello_t *payload, double deadline, auth_session_t *s, drt_error_t *err)
{
    return auth_connect_from(c, 0, host, port, kind, payload, deadline, s, err);
}

int auth_connect_from(drt_comm_t *c, uint32_t src, const char *host, int port, uint32_t kind,
                      const hello_t *payload, double deadline, auth_session_t *s,
                      drt_error_t *err)
{
    int impostor = 0;

    for (;;) {
        int fd = net_connect_from(host, port, src, deadline, err), rc;
        if (fd < 0 && impostor)
            return auth_impostor_fail(c, host, port, err), AUTH_EIMPOSTOR;
        if (fd < 0)
            return fd; /* NET_EANSWER, NET_ELOCAL or NET_ERESOLVE */
        rc = client_handshake(c, fd, kind, payload,
                              rt_now() + AUTH_WAIT < deadline ? rt_now() + AUTH_WAIT : deadline, s);
        if (rc == HS_OK)
            return fd;
        close(fd);
        if (rc == HS_IMPOSTOR && !impostor++)
            rt_warn(c, "%s:%d answered without proving this job's secret: a process outside "
                    "this job holds that port; nothing was sent to it, retrying until %.0f s "
                    "(DDPRT_TIMEOUT) have passed", host, port, c->timeout);
        if (rt_now() + 0.2 >= deadline && impostor)
            return auth_impostor_fail(c, host, port, err), AUTH_EIMPOSTOR;
        if (rt_now() + 0.2 >= deadline)
            return rt_fail(err, "no handshake with %s:%d (connection closed or timed out)",
                           host, port), AUTH_EHANDSHAKE;
        pause_for(0.2);
    }
}

drt_comm_t *auth_comm_bare(const drt_env_t *env, double timeout, drt_error_t *err)
{
    const char *hex = getenv(DRT_ENV_SECRET), *end = NULL, *v = getenv("DDPRT_VERBOSE");
    size_t n = 0;
    drt_comm_t *c;

    if (auth_ready() < 0)
        return rt_fail(err, "libsodium failed to initialise (no randomness source?)"), NULL;
    if (!hex || strlen(hex) != 2 * DRT_SECRET_LEN)
        return rt_fail(err, DRT_ENV_SECRET " is %s (%d hex digits; launchers set it: srun "
                       "--ddp-topo, ddp-run)", hex ? "malformed" : "not set",
                       2 * DRT_SECRET_LEN), NULL;
    if (!(c = calloc(1, sizeof(*c))))
        return rt_fail(err, "out of memory"), NULL;
    if (sodium_hex2bin(c->secret, DRT_SECRET_LEN, hex, strlen(hex), NULL, &n, &end) != 0 ||
        n != DRT_SECRET_LEN || *end) {
        auth_comm_free(c);
        return rt_fail(err, DRT_ENV_SECRET " is malformed (%d hex digits)",
                       2 * DRT_SECRET_LEN), NULL;
    }
    c->env = *env;
    c->rank = (int)env->rank;
    c->size = (int)env->world_size;
    c->timeout = timeout;
    c->verbose = v && *v && strcmp(v, "0");
    c->notice_fd = -1;
    return c;
}

void auth_comm_free(drt_comm_t *c)
{
    if (!c)
        return;
    sodium_memzero(c->secret, sizeof(c->secret));
    free(c);
}

/* ---- server ---------------------------------------------------------------- */

static void drop(drt_comm_t *c, pending_t *p, int n, int i, const char *why)
{
    rt_log(c, "closed a connection that %s", why);
    close(p[i].fd);
    p[i] = p[n - 1];
}

/* Accept what is waiting; with the table full, the oldest handshake goes. */
static int accept_new(drt_comm_t *c, int lfd, pending_t *p, int n)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            return n;
        net_tune(fd);
        if (n == AUTH_PENDING) {
            int oldest = 0;
            for (int i = 1; i < n; i++)
                if (p[i].until < p[oldest].until)
                    oldest = i;
            drop(c, p, n--, oldest, "was crowded out by newer ones");
        }
        memset(&p[n], 0, sizeof(p[n]));
        p[n].fd = fd;
        p[n].until = rt_now() + AUTH_WAIT;
        n++;
    }
}

/* The hello has arrived: answer with our nonce and proof. */
static int answer(drt_comm_t *c, pending_t *q, uint32_t kind)
{
    auth_reply_t r = {.magic = RT_MAGIC, .kind = kind};

    if (q->in.hello.magic != RT_MAGIC || q->in.hello.kind != kind)
        return -1;
    q->s.kind = kind;
    memcpy(q->s.nc, q->in.hello.nonce, AUTH_NONCE);
    auth_random(q->s.ns, AUTH_NONCE);
    memcpy(r.nonce, q->s.ns, AUTH_NONCE);
    auth_mac(c, "ddprt server", &q->s, sizeof(q->s), NULL, 0, r.mac);
    /* a fresh socket's buffer takes 72 bytes at once; if not, it is no rank */
    if (send(q->fd, &r, sizeof(r), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(r))
        return -1;
    q->proving = 1;
    q->got = 0;
    return 0;
}

/* Read what q has sent; 1 when its proof is complete and right, 0 to wait,
 * -1 to drop it (with *why). */
static int advance(drt_comm_t *c, pending_t *q, uint32_t kind, const char **why)
{
    size_t need = q->proving ? sizeof(auth_proof_t) : sizeof(auth_hello_t);
    ssize_t n = recv(q->fd, q->in.bytes + q->got, need - q->got, MSG_DONTWAIT);

    if (n <= 0) {
        *why = "closed before finishing the handshake";
        return n < 0 && (errno == EAGAIN || errno == EINTR) ? 0 : -1;
    }
    if ((q->got += (size_t)n) < need)
        return 0;
    if (!q->proving) {
        *why = "did not speak this runtime's protocol";
        return answer(c, q, kind) < 0 ? -1 : 0;
    }
    *why = "could not prove this job's secret";
    return auth_check(c, "ddprt client", &q->s, sizeof(q->s), &q->in.proof.payload,
                      sizeof(hello_t), q->in.proof.mac) ? 1 : -1;
}

static int next_wake(const pending_t *p, int n, double deadline)
{
    double t = deadline, left;

    for (int i = 0; i < n; i++)
        if (p[i].until < t)
            t = p[i].until;
    left = t - rt_now();
    return left <= 0 ? 0 : left > 1 ? 1000 : (int)(left * 1000) + 1;
}

/* Serve handshakes on lfd until take() says it has all it wants (0), or
 * the deadline (-1, err "timed out"). */
int auth_serve(drt_comm_t *c, int lfd, uint32_t kind, double deadline, auth_take_fn take,
               void *ctx, drt_error_t *err)
{
    return auth_serve_wake(c, lfd, kind, deadline, -1, take, ctx, err);
}

int auth_serve_wake(drt_comm_t *c, int lfd, uint32_t kind, double deadline, int wake_fd,
                    auth_take_fn take, void *ctx, drt_error_t *err)
{
    pending_t *p = calloc(AUTH_PENDING, sizeof(*p));
    struct pollfd *fds = calloc(AUTH_PENDING + 2, sizeof(*fds));
    int n = 0, rc = -1;

    if (!p || !fds) {
        rt_fail(err, "out of memory");
        goto out;
    }
    while (rt_now() < deadline) {
        fds[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
        fds[1] = (struct pollfd){.fd = wake_fd, .events = POLLIN}; /* -1: poll skips it */
        for (int i = 0; i < n; i++)
            fds[i + 2] = (struct pollfd){.fd = p[i].fd, .events = POLLIN};
        if (poll(fds, (nfds_t)n + 2, next_wake(p, n, deadline)) < 0 && errno != EINTR) {
            rt_fail(err, "poll failed: %s", strerror(errno));
            goto out;
        }
        if (fds[1].revents) {
            rc = 0;
            goto out;
        }
        for (int i = n - 1; i >= 0; i--) {
            const char *why = "did not finish the handshake in time";
            int r = fds[i + 2].revents ? advance(c, &p[i], kind, &why) : 0;
            if (r == 0 && rt_now() > p[i].until)
                r = -1;
            if (r < 0) {
                drop(c, p, n--, i, why);
            } else if (r > 0) {
                pending_t done = p[i];
                p[i] = p[--n];
                if (take(ctx, done.fd, &done.s, &done.in.proof.payload)) {
                    rc = 0;
                    goto out;
                }
            }
        }
        if (fds[0].revents)
            n = accept_new(c, lfd, p, n);
    }
    rt_fail(err, "timed out");
out:
    for (int i = 0; p && i < n; i++)
        close(p[i].fd);
    free(p);
    free(fds);
    return rc;
}
