/* SPDX-License-Identifier: Apache-2.0 */
/* TCP helpers with deadlines: nothing here blocks past the caller's time. */
#define _GNU_SOURCE
#include "../internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SOCKBUF (4 << 20)

static int wait_fd(int fd, short events, double deadline)
{
    struct pollfd p = {.fd = fd, .events = events};

    for (;;) {
        double left = deadline - rt_now();
        int rc;
        if (left <= 0)
            return 0;
        rc = poll(&p, 1, left > 1 ? 1000 : (int)(left * 1000) + 1);
        if (rc > 0)
            return 1;
        if (rc < 0 && errno != EINTR)
            return -1;
    }
}

void net_tune(int fd)
{
    int one = 1, size = SOCKBUF;

    /* small messages must not wait for Nagle; large ones need big windows */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

int net_listen(int port, int *out_port, drt_error_t *err)
{
    return net_listen_on(htonl(INADDR_ANY), port, out_port, err);
}

int net_listen_on(uint32_t ip, int port, int *out_port, drt_error_t *err)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = ip};
    socklen_t len = sizeof(a);
    int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const char *hint = "";
    char where[INET_ADDRSTRLEN] = "";

    if (fd < 0)
        return rt_fail(err, "cannot create a socket: %s", strerror(errno));
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 1024) < 0) {
        int e = errno;
        close(fd);
        if (e == EADDRINUSE)
            hint = " (another job on this node? set DDPRT_PORT, the runtime's port, or "
                   "MASTER_PORT when DDPRT_PORT is unset)";
        if (ip == htonl(INADDR_ANY))
            rt_fail(err, "cannot listen on port %d: %s%s", port, strerror(e), hint);
        else
            rt_fail(err, "cannot listen on %s port %d: %s%s",
                    inet_ntop(AF_INET, &ip, where, sizeof(where)), port, strerror(e), hint);
        errno = e; /* callers retry on EADDRINUSE */
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    getsockname(fd, (struct sockaddr *)&a, &len);
    if (out_port)
        *out_port = ntohs(a.sin_port);
    return fd;
}

/* Connected to itself: with nobody listening on a local port in the
 * ephemeral range, the kernel may pick that very port as the source, and
 * the connection then holds the port the listener (rank 0) must bind. */
static int self_connected(int fd)
{
    struct sockaddr_in me, peer;
    socklen_t l1 = sizeof(me), l2 = sizeof(peer);

    return getsockname(fd, (struct sockaddr *)&me, &l1) == 0 &&
           getpeername(fd, (struct sockaddr *)&peer, &l2) == 0 && me.sin_port == peer.sin_port &&
           me.sin_addr.s_addr == peer.sin_addr.s_addr;
}

/* From src, its port left to connect (which may reuse one toward another
 * destination): 0, NET_ELOCAL when src is no address of this machine,
 * NET_EANSWER for a failure worth another try (errno says why). */
static int bind_source(int fd, uint32_t src)
{
    struct sockaddr_in from = {.sin_family = AF_INET, .sin_addr.s_addr = src};
    int one = 1;

    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&from, sizeof(from)) == 0)
        return 0;
    return errno == EADDRNOTAVAIL ? NET_ELOCAL : NET_EANSWER;
}

/* One attempt: the socket, NET_EANSWER when nobody (but this socket itself)
 * answered by the deadline, NET_ELOCAL when the source address cannot be
 * bound here (errno says why). */
static int try_connect(const struct addrinfo *ai, uint32_t src, double deadline)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), e = 0, rc;
    socklen_t len = sizeof(e);
    struct linger reset = {1, 0};

    if (fd < 0)
        return NET_EANSWER;
    if (src && (rc = bind_source(fd, src)) < 0) {
        e = errno;
        close(fd);
        errno = e;
        return rc;
    }
    if ((connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ||
         (errno == EINPROGRESS && wait_fd(fd, POLLOUT, deadline) > 0 &&
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) == 0 && e == 0)) &&
        !self_connected(fd))
        return fd;
    /* a reset, not a close: a closed self-connection's TIME_WAIT would keep
     * the port from rank 0 for a minute */
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
    close(fd);
    return NET_EANSWER;
}

int net_probe(uint32_t ip, uint32_t port, double deadline)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = ip};
    struct addrinfo ai = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
                          .ai_addr = (struct sockaddr *)&a, .ai_addrlen = sizeof(a)};
    struct linger reset = {1, 0};
    int fd = try_connect(&ai, 0, deadline);

    if (fd < 0)
        return 0;
    /* a reset: nothing lingers in TIME_WAIT, and the listener's owner drops it at once */
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
    close(fd);
    return 1;
}

/* Retry with backoff until the deadline: the listener may start last. */
int net_connect(const char *host, int port, double deadline, drt_error_t *err)
{
    return net_connect_from(host, port, 0, deadline, err);
}

int net_connect_from(const char *host, int port, uint32_t src, double deadline,
                     drt_error_t *err)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    char service[16], from[INET_ADDRSTRLEN];
    double backoff = 0.01;
    int rc;

    snprintf(service, sizeof(service), "%d", port);
    if ((rc = getaddrinfo(host, service, &hints, &ai)) != 0) {
        rt_fail(err, "cannot resolve '%s': %s", host, gai_strerror(rc));
        return NET_ERESOLVE;
    }
    for (;;) {
        double step = rt_now() + 1.0 < deadline ? rt_now() + 1.0 : deadline;
        int fd = try_connect(ai, src, step);
        if (fd >= 0) {
            freeaddrinfo(ai);
            net_tune(fd);
            return fd;
        }
        if (fd == NET_ELOCAL) {
            int e = errno;
            freeaddrinfo(ai);
            inet_ntop(AF_INET, &src, from, sizeof(from));
            rt_fail(err, "cannot connect from %s: %s", from, strerror(e));
            return NET_ELOCAL;
        }
        if (rt_now() + backoff >= deadline)
            break;
        struct timespec ts = {0, (long)(backoff * 1e9)};
        nanosleep(&ts, NULL);
        backoff = backoff < 0.5 ? backoff * 2 : 0.5;
    }
    freeaddrinfo(ai);
    rt_fail(err, "no answer from %s:%d", host, port);
    return NET_EANSWER;
}

/* All of buf, or -1 on error, EOF or the deadline. */
static int io_all(int fd, char *p, size_t len, double deadline, int sending)
{
    while (len) {
        ssize_t n = sending ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (wait_fd(fd, sending ? POLLOUT : POLLIN, deadline) <= 0)
                return -1;
        } else {
            return -1; /* EOF or error */
        }
    }
    return 0;
}

int net_send_all(int fd, const void *buf, size_t len, double deadline)
{
    return io_all(fd, (char *)buf, len, deadline, 1);
}

int net_recv_all(int fd, void *buf, size_t len, double deadline)
{
    return io_all(fd, buf, len, deadline, 0);
}
