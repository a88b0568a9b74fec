/* SPDX-License-Identifier: Apache-2.0 */
/* Send to one peer while receiving from another until both are done, over
 * each channel's transport: a node's shared-memory rings or TCP, two tables
 * of operations (xfer_shm, xfer_tcp) that connecting a channel chooses. A
 * peer that dies or stops answering for the timeout ends the wait with an
 * error naming it. */
#define _GNU_SOURCE
#include "../internal.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static size_t ring_write(shm_ring_t *r, const unsigned char *p, size_t len)
{
    uint64_t head = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE), tail = r->tail;
    size_t space = RT_SHM_RING - (size_t)(tail - head), off = (size_t)(tail % RT_SHM_RING);
    size_t n = len < space ? len : space, first = n < RT_SHM_RING - off ? n : RT_SHM_RING - off;

    memcpy(r->data + off, p, first);
    memcpy(r->data, p + first, n - first);
    __atomic_store_n(&r->tail, tail + n, __ATOMIC_RELEASE);
    return n;
}

static size_t ring_read(shm_ring_t *r, unsigned char *p, size_t len)
{
    uint64_t tail = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE), head = r->head;
    size_t avail = (size_t)(tail - head), off = (size_t)(head % RT_SHM_RING);
    size_t n = len < avail ? len : avail, first = n < RT_SHM_RING - off ? n : RT_SHM_RING - off;

    memcpy(p, r->data + off, first);
    memcpy(p + first, r->data, n - first);
    __atomic_store_n(&r->head, head + n, __ATOMIC_RELEASE);
    return n;
}

/* One direction of a transfer in progress. */
struct side {
    chan_t *ch;
    unsigned char *buf;
    size_t len, done;
    int sending;
    /* receiving with reduction: what arrives is combined into buf */
    int reducing;
    drt_dtype_t t;
    drt_op_t op;
    size_t esize;
    unsigned char *bounce; /* TCP: bytes received but not yet reduced */
    size_t have;
    const unsigned char *base; /* out of place: the other operand */
};

/* Combine n arrived bytes into the destination at offset off: in place, or
 * out of place from the base in the same pass. */
static void combine(const side_t *s, size_t off, const unsigned char *in, size_t n)
{
    if (s->base)
        rt_reduce_to(s->buf + off, s->base + off, in, n / s->esize, s->t, s->op);
    else
        rt_reduce(s->buf + off, in, n / s->esize, s->t, s->op);
}

#define BOUNCE (256u << 10)

/* ---- shared memory: a pair of rings ---- */

/* Doorbells: a rank that found its rings idle sleeps in the kernel instead
 * of yielding. With more runnable threads than cores (ranks, their progress
 * threads, anything else), sched_yield hands the core to the others for a
 * whole time slice at every hand-over of a ring's chunk; a futex wake makes
 * the sleeper runnable at once (measured: tests/bench/torch-hooks, LOAD=2).
 * The futex is shared (no FUTEX_PRIVATE_FLAG): the segment is mapped by
 * every local rank. */

/* After moving a ring the owner of b reads or writes: bump seq, then wake
 * the owner if it announced that it sleeps. seq_cst on both sides: either
 * the sleeper sees the new seq (and does not sleep) or we see it sleeping. */
static void bell_ring(shm_bell_t *b)
{
    __atomic_add_fetch(&b->seq, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&b->sleepers, __ATOMIC_SEQ_CST))
        syscall(SYS_futex, &b->seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Announce a sleep on b; returns the seq to sleep on. The caller then
 * checks its rings once more and calls bell_wait whatever it found
 * (sleep = 0 when they moved): that ends the announcement. */
static uint32_t bell_announce(shm_bell_t *b)
{
    __atomic_add_fetch(&b->sleepers, 1, __ATOMIC_SEQ_CST);
    return __atomic_load_n(&b->seq, __ATOMIC_SEQ_CST);
}

/* Sleep until b's seq moves from seq, 2 ms at most (the caller's loop still
 * checks for dead peers, aborts and its timeout). */
static void bell_wait(shm_bell_t *b, uint32_t seq, int sleep)
{
    struct timespec ts = {0, 2000000};

    if (sleep && __atomic_load_n(&b->seq, __ATOMIC_SEQ_CST) == seq)
        syscall(SYS_futex, &b->seq, FUTEX_WAIT, seq, &ts, NULL, 0);
    __atomic_sub_fetch(&b->sleepers, 1, __ATOMIC_SEQ_CST);
}

/* n bytes moved on a ring shared with s's peer: its doorbell, if any moved */
static ssize_t moved(const side_t *s, size_t n)
{
    if (n)
        bell_ring(s->ch->bell);
    return (ssize_t)n;
}

static ssize_t shm_send(side_t *s, size_t n)
{
    return moved(s, ring_write(s->ch->tx, s->buf + s->done, n));
}

static ssize_t shm_recv(side_t *s, size_t n)
{
    return moved(s, ring_read(s->ch->rx, s->buf + s->done, n));
}

/* The ring s waits on could move now: data to read, room to write (a
 * reduction needs a whole element). */
static int shm_ready(const side_t *s)
{
    const shm_ring_t *r = s->sending ? s->ch->tx : s->ch->rx;
    uint64_t used = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE) -
                    __atomic_load_n(&r->head, __ATOMIC_ACQUIRE);

    if (s->sending)
        return used < RT_SHM_RING;
    return used >= (s->reducing && s->done < s->len ? s->esize : 1);
}

/* Reduce whole elements straight out of the ring. */
static ssize_t shm_recv_reduce(side_t *s, size_t left)
{
    shm_ring_t *r = s->ch->rx;
    uint64_t tail = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE), head = r->head;
    size_t avail = (size_t)(tail - head), off = (size_t)(head % RT_SHM_RING), n, first;

    n = left < avail ? left : avail;
    n -= n % s->esize;
    first = n < RT_SHM_RING - off ? n : RT_SHM_RING - off;
    combine(s, s->done, r->data + off, first);
    combine(s, s->done + first, r->data, n - first);
    __atomic_store_n(&r->head, head + n, __ATOMIC_RELEASE);
    return moved(s, n);
}

/* Messages are padded to 8 bytes, so every message starts 8-aligned in its
 * ring and elements never straddle the ring's end: the receiver reduces
 * straight out of the ring with aligned loads. */
static size_t shm_wire(size_t len)
{
    return (len + 7) & ~(size_t)7;
}

static ssize_t shm_pad(side_t *s, size_t n)
{
    static const unsigned char zeros[8];
    shm_ring_t *r = s->ch->rx;
    uint64_t tail, head;

    if (s->sending)
        return moved(s, ring_write(s->ch->tx, zeros, n));
    tail = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);
    head = r->head;
    n = n < (size_t)(tail - head) ? n : (size_t)(tail - head);
    __atomic_store_n(&r->head, head + n, __ATOMIC_RELEASE);
    return moved(s, n);
}

/* a rank of this node that is gone: no socket tells us, its pid does */
static int shm_dead(const chan_t *ch)
{
    return ch->pid > 0 && kill(ch->pid, 0) < 0 && errno == ESRCH;
}

static int shm_pollfd(const chan_t *ch)
{
    (void)ch;
    return -1;
}

/* ---- TCP ---- */

/* bytes moved, 0 when the socket would block, -1 when the peer is gone */
static ssize_t tcp_result(ssize_t n, int receiving)
{
    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    return n == 0 && receiving ? -1 : n;
}

static ssize_t tcp_send(side_t *s, size_t n)
{
    return tcp_result(send(s->ch->fd, s->buf + s->done, n, MSG_NOSIGNAL | MSG_DONTWAIT), 0);
}

static ssize_t tcp_recv(side_t *s, size_t n)
{
    return tcp_result(recv(s->ch->fd, s->buf + s->done, n, MSG_DONTWAIT), 1);
}

/* Receive into the bounce buffer, reduce the whole elements. */
static ssize_t tcp_recv_reduce(side_t *s, size_t left)
{
    size_t room = BOUNCE - s->have, whole;
    ssize_t n = tcp_result(recv(s->ch->fd, s->bounce + s->have,
                                left - s->have < room ? left - s->have : room, MSG_DONTWAIT), 1);

    if (n <= 0)
        return n;
    s->have += (size_t)n;
    whole = s->have - s->have % s->esize;
    combine(s, s->done, s->bounce, whole);
    memmove(s->bounce, s->bounce + whole, s->have - whole);
    s->have -= whole;
    return (ssize_t)whole;
}

static size_t tcp_wire(size_t len)
{
    return len;
}

static ssize_t tcp_pad(side_t *s, size_t n)
{
    (void)s;
    (void)n;
    return 0; /* never called: TCP messages are not padded */
}

static int tcp_dead(const chan_t *ch)
{
    (void)ch;
    return 0; /* the socket says so */
}

static int tcp_pollfd(const chan_t *ch)
{
    return ch->fd;
}

static void tcp_close(chan_t *ch)
{
    close(ch->fd);
    ch->fd = -1;
}

/* cache-sized pieces on shared memory: the peer reads them while they are
 * still in cache, and sending and receiving take turns */
const transport_t xfer_shm = {"shared memory", 32u << 10, shm_wire, shm_send, shm_recv,
                              shm_recv_reduce, shm_pad, shm_dead, shm_pollfd, NULL, 0};
const transport_t xfer_tcp = {"TCP", SIZE_MAX, tcp_wire, tcp_send, tcp_recv, tcp_recv_reduce,
                              tcp_pad, tcp_dead, tcp_pollfd, tcp_close, 1};

static size_t total(const side_t *s)
{
    return s->ch ? s->ch->tp->wire(s->len) : s->len;
}

/* One non-blocking step on one side: bytes moved, or -1 when the peer is gone. */
static ssize_t step(side_t *s)
{
    const transport_t *tp = s->ch->tp;
    size_t left;

    if (s->done == total(s))
        return 0;
    left = s->done < s->len ? s->len - s->done : 0;
    if (left > tp->chunk)
        left = tp->chunk;
    ssize_t n = s->done >= s->len ? tp->pad(s, total(s) - s->done)
                : s->reducing     ? tp->recv_reduce(s, left)
                : s->sending      ? tp->send(s, left)
                                  : tp->recv(s, left);
    if (n > 0)
        s->done += (size_t)n;
    return n;
}

#define BELL_SPIN_S 50e-6

/* Only rings pending and nothing moved for a while: sleep on the doorbell
 * until a peer moves one (bell_ring says why not sched_yield). The rings are
 * checked once more after the sleep is announced, so no bell is missed. */
static void bell_sleep(shm_bell_t *b, const side_t *s)
{
    uint32_t seq = bell_announce(b);
    int ready = 0;

    for (int i = 0; i < 2; i++)
        ready |= s[i].ch && s[i].done < total(&s[i]) && shm_ready(&s[i]);
    bell_wait(b, seq, !ready);
}

/* Nothing moved for idle_s: sleep on the sockets when only sockets are
 * pending; on the doorbell when only rings are, after polling them for
 * BELL_SPIN_S (a peer on another core answers sooner than a wake-up:
 * yielding meanwhile only when the ranks outnumber the cores, since a
 * yield to an unrelated busy thread costs a whole time slice); else yield
 * to the other local ranks. */
static void idle(drt_comm_t *c, const side_t *s, int spins, double idle_s)
{
    struct pollfd p[2];
    int n = 0, shm = 0;

    for (int i = 0; i < 2; i++) {
        if (!s[i].ch || s[i].done == total(&s[i]))
            continue;
        int fd = s[i].ch->tp->pollfd(s[i].ch);
        if (fd < 0)
            shm = 1;
        else
            p[n++] = (struct pollfd){.fd = fd, .events = s[i].sending ? POLLOUT : POLLIN};
    }
    if (!shm) {
        poll(p, (nfds_t)n, 10);
    } else if (!n && c->bell) {
        if (idle_s >= BELL_SPIN_S)
            bell_sleep(c->bell, s);
        else if (c->bell_yield)
            sched_yield();
    } else if (spins < 1000) {
        sched_yield();
    } else {
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
}

static int run(drt_comm_t *c, side_t *s, drt_error_t *err)
{
    double last = rt_now();
    int spins = 0;

    while (s[0].done < total(&s[0]) || s[1].done < total(&s[1])) {
        ssize_t moved = 0;
        for (int i = 0; i < 2; i++) {
            ssize_t n = s[i].ch ? step(&s[i]) : 0;
            if (n < 0 && notice_check(c, NOTICE_DIED_ONLY, err) < 0)
                return -1; /* someone else saw the root cause first */
            if (n < 0) {
                char where[64];
                rt_mark_lost(c, s[i].ch->peer);
                notice_send(c, s[i].ch->peer);
                return rt_fail(err, "rank %d (%s) %s during collective #%llu (rank %d died, "
                               "or its node?)", s[i].ch->peer,
                               rt_where(c, s[i].ch->peer, where, sizeof(where)),
                               s[i].sending ? "stopped receiving" : "closed its connection",
                               (unsigned long long)c->seq, s[i].ch->peer);
            }
            moved += n;
        }
        if (moved) {
            last = rt_now();
            spins = 0;
            continue;
        }
        for (int i = 0; spins % 64 == 0 && i < 2; i++) /* kill(): a syscall, not every spin */
            if (s[i].ch && s[i].done < total(&s[i]) && s[i].ch->tp->dead(s[i].ch)) {
                if (notice_check(c, NOTICE_DIED_ONLY, err) < 0)
                    return -1; /* it died because another rank did */
                rt_mark_lost(c, s[i].ch->peer);
                notice_send(c, s[i].ch->peer);
                return rt_fail(err, "rank %d (pid %d on this node) died during collective #%llu",
                               s[i].ch->peer, (int)s[i].ch->pid, (unsigned long long)c->seq);
            }
        if (spins % 64 == 0 && notice_check(c, NOTICE_DIED_ONLY, err) < 0) /* a syscall: not every spin */
            return -1;
        if (__atomic_load_n(&c->abort, __ATOMIC_ACQUIRE))
            return rt_fail(err, "collective #%llu abandoned: the other phase failed",
                           (unsigned long long)c->seq);
        if (rt_now() - last > c->timeout) {
            int who = s[1].done < total(&s[1]) ? s[1].ch->peer : s[0].ch->peer;
            char where[64];
            rt_mark_lost(c, who); /* a node gone dark looks like this */
            return rt_fail(err, "rank %d (%s) did not answer for %.0f s during collective "
                           "#%llu (DDPRT_TIMEOUT)", who, rt_where(c, who, where, sizeof(where)),
                           c->timeout, (unsigned long long)c->seq);
        }
        idle(c, s, spins++, rt_now() - last);
    }
    return 0;
}

int xfer(drt_comm_t *c, int to, const void *sbuf, size_t slen, int from, void *rbuf,
         size_t rlen, drt_error_t *err)
{
    side_t s[2] = {{.ch = to >= 0 ? &c->chan[to] : NULL, .buf = (unsigned char *)sbuf,
                    .len = to >= 0 ? slen : 0, .sending = 1},
                   {.ch = from >= 0 ? &c->chan[from] : NULL, .buf = rbuf,
                    .len = from >= 0 ? rlen : 0}};

    return run(c, s, err);
}

int xfer_reduce(drt_comm_t *c, int to, const void *sbuf, size_t slen, int from, void *rbuf,
                const void *base, size_t count, drt_dtype_t t, drt_op_t op, drt_error_t *err)
{
    size_t esize = drt_dtype_size(t);
    side_t s[2] = {{.ch = &c->chan[to], .buf = (unsigned char *)sbuf, .len = slen, .sending = 1},
                   {.ch = &c->chan[from], .buf = rbuf, .len = count * esize, .reducing = 1,
                    .t = t, .op = op, .esize = esize, .base = base}};

    if (s[1].ch->tp->remote) {
        if (!c->bounce && !(c->bounce = malloc(BOUNCE)))
            return rt_fail(err, "out of memory");
        s[1].bounce = c->bounce;
    }
    return run(c, s, err);
}
