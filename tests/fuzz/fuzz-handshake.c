/* SPDX-License-Identifier: Apache-2.0 */
/* The runtime's handshake (runtime/net/auth.c) against a peer that sends the
 * input: byte 0 picks the side. Even: the input comes from a client to a
 * rank's listening socket (auth_serve). Odd: it is what a "server" answers
 * a rank that connects (auth_connect). Real loopback sockets, the real
 * code; neither side may crash, hang past its deadline, or accept: without
 * the secret no input can pass, since the other side's nonce is fresh. */
#include "internal.h"
#include "fuzz.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define WAIT 0.003 /* seconds each side serves: everything is local */

typedef struct {
    int lfd;
    const uint8_t *data;
    size_t size;
} answer_t;

static void comm_setup(drt_comm_t *c)
{
    memset(c, 0, sizeof(*c));
    memset(c->secret, 0x5a, sizeof(c->secret));
    c->size = 4;
    c->timeout = WAIT;
}

static int take(void *ctx, int fd, const auth_session_t *s, const hello_t *h)
{
    (void)ctx, (void)s, (void)h;
    close(fd);
    fuzz_fail("a client without the secret passed the handshake");
}

static int connect_to(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
        fuzz_fail("cannot connect to my own listener: %s (out of ephemeral ports? tests/fuzz/run "
                  "caps this target's inputs for that)", strerror(errno));
    return fd;
}

static void as_server(drt_comm_t *c, const uint8_t *data, size_t size)
{
    drt_error_t err;
    int port, lfd = net_listen(0, &port, &err), fd;

    if (lfd < 0)
        fuzz_fail("net_listen: %s", err.text);
    fd = connect_to(port);
    if (size && send(fd, data, size, MSG_NOSIGNAL) < 0)
        fuzz_fail("cannot send the input");
    shutdown(fd, SHUT_WR);
    if (auth_serve(c, lfd, AUTH_BOOT, rt_now() + WAIT, take, NULL, &err) == 0)
        fuzz_fail("auth_serve ended without its deadline or an authenticated client");
    close(fd);
    close(lfd);
}

/* The impostor server: answer the first connection with the input. */
static void *answer(void *arg)
{
    answer_t *a = arg;
    char sink[256];
    int fd = accept(a->lfd, NULL, NULL);

    if (fd < 0)
        return NULL;
    if (a->size)
        send(fd, a->data, a->size, MSG_NOSIGNAL);
    shutdown(fd, SHUT_WR);
    while (recv(fd, sink, sizeof(sink), 0) > 0)
        continue;
    close(fd);
    return NULL;
}

static void as_client(drt_comm_t *c, const uint8_t *data, size_t size)
{
    answer_t a = {.data = data, .size = size};
    auth_session_t s;
    drt_error_t err;
    hello_t h = {.size = 4, .rank = 1};
    pthread_t t;
    int port, fd;

    if ((a.lfd = net_listen(0, &port, &err)) < 0)
        fuzz_fail("net_listen: %s", err.text);
    if (pthread_create(&t, NULL, answer, &a) != 0)
        fuzz_fail("pthread_create failed");
    fd = auth_connect(c, "127.0.0.1", port, AUTH_BOOT, &h, rt_now() + WAIT, &s, &err);
    if (fd >= 0)
        fuzz_fail("a server without the secret passed the handshake");
    shutdown(a.lfd, SHUT_RDWR); /* wakes accept if no connection came */
    pthread_join(t, NULL);
    close(a.lfd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    drt_comm_t c;

    comm_setup(&c);
    if (size == 0)
        return 0;
    if (size > 4096)
        size = 4096; /* the handshake reads 72 bytes at most */
    if (data[0] & 1)
        as_client(&c, data + 1, size - 1);
    else
        as_server(&c, data + 1, size - 1);
    return 0;
}
