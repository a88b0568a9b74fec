/* SPDX-License-Identifier: Apache-2.0 */
/* Abort notices: a small UDP datagram (signed with the job's secret) sent to every
 * rank's data port when a rank sees a peer die. Without it, a rank whose
 * neighbour gave up would blame that neighbour; with it, every survivor
 * names the rank that died and the collective it died in. Best effort: the
 * timeout and broken connections still end every wait. */
#include "../internal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
    uint32_t magic, dead, reporter, kind; /* kind: NOTICE_* (internal.h) */
    uint32_t epoch, pad;     /* ranks are numbered anew by each drt_shrink */
    uint64_t seq;
    unsigned char nonce[16]; /* two notices never sign the same bytes */
    unsigned char mac[AUTH_MAC]; /* HMAC of everything above: the secret stays here */
} notice_t;

void notice_open(drt_comm_t *c, int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_ANY)};

    c->notice_fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->notice_fd >= 0 && bind(c->notice_fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(c->notice_fd);
        c->notice_fd = -1;
    }
}

void notice_send(drt_comm_t *c, int dead)
{
    notice_send_kind(c, dead, NOTICE_DIED, c->seq);
}

void notice_send_kind(drt_comm_t *c, int dead, int kind, uint64_t seq)
{
    notice_t n = {.magic = RT_MAGIC, .dead = (uint32_t)dead, .reporter = (uint32_t)c->rank,
                  .kind = (uint32_t)kind, .epoch = c->epoch, .seq = seq};

    if (c->notice_fd < 0 || !c->ep_ip)
        return;
    auth_random(n.nonce, sizeof(n.nonce));
    auth_mac(c, "ddprt notice", &n, offsetof(notice_t, mac), NULL, 0, n.mac);
    for (int r = 0; r < c->size; r++) {
        struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->ep_port[r]),
                                 .sin_addr.s_addr = c->ep_ip[r]};
        if (r != c->rank && r != dead)
            sendto(c->notice_fd, &n, sizeof(n), 0, (struct sockaddr *)&to, sizeof(to));
    }
}

/* -1 with err naming the rank when a notice of one of kinds (a mask of
 * 1 << NOTICE_*) has arrived; others are dropped */
int notice_check(drt_comm_t *c, unsigned kinds, drt_error_t *err)
{
    notice_t n;

    if (c->notice_fd < 0)
        return 0;
    while (recv(c->notice_fd, &n, sizeof(n), 0) == (ssize_t)sizeof(n)) {
        char where[64];
        if (n.magic != RT_MAGIC || (int)n.dead >= c->size || n.kind >= 32 || n.epoch != c->epoch ||
            !(kinds & (1u << n.kind)) ||
            !auth_check(c, "ddprt notice", &n, offsetof(notice_t, mac), NULL, 0, n.mac))
            continue;
        if (n.kind == NOTICE_GPU_ERROR)
            return rt_fail(err, "rank %u (%s) reported an NCCL error in collective #%llu "
                           "(its own error says which)", n.dead,
                           rt_where(c, (int)n.dead, where, sizeof(where)),
                           (unsigned long long)n.seq);
        if (n.kind == NOTICE_GPU_INIT)
            return rt_fail(err, "ddprt: rank %u (%s) could not start its NCCL communicators "
                           "(its own error says why)", n.dead,
                           rt_where(c, (int)n.dead, where, sizeof(where)));
        rt_mark_lost(c, (int)n.dead);
        return rt_fail(err, "rank %u (%s) died during collective #%llu (reported by rank %u)",
                       n.dead, rt_where(c, (int)n.dead, where, sizeof(where)),
                       (unsigned long long)n.seq, n.reporter);
    }
    return 0;
}
