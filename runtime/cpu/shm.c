/* SPDX-License-Identifier: Apache-2.0 */
/* One POSIX shared-memory segment per node: a ring for every ordered pair
 * of its ranks, so ranks of one node never talk over loopback TCP. The
 * segment is unlinked as soon as every local rank has mapped it, so nothing
 * is left in /dev/shm when a job dies. */
#define _GNU_SOURCE /* sched_getaffinity */
#include "../internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    volatile uint32_t ready;
    volatile uint32_t attached;
} shm_header_t;

struct shm {
    void *base;
    size_t size;
};

#define HEADER 4096

/* the header, a doorbell per local rank, then the rings */
static size_t segment_size(int n)
{
    return HEADER + (size_t)n * sizeof(shm_bell_t) + (size_t)n * (size_t)n * sizeof(shm_ring_t);
}

/* Keyed by the secret and the step (MASTER_PORT, restarts, drt_shrink's
 * epoch): a name seen in /dev/shm says nothing about the next step's, so no
 * other user can create that one first. */
static void segment_name(const drt_comm_t *c, char *buf, size_t len)
{
    uint32_t step[4] = {c->env.master_port, c->env.restart_count, (uint32_t)c->node_of[c->rank],
                        c->epoch};
    unsigned char mac[AUTH_MAC];

    auth_mac(c, "ddprt shm", step, sizeof(step), NULL, 0, mac);
    snprintf(buf, len, "/ddprt-%02x%02x%02x%02x%02x%02x%02x%02x-%d", mac[0], mac[1], mac[2],
             mac[3], mac[4], mac[5], mac[6], mac[7], c->node_of[c->rank]);
}

static void pause_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* Local rank 0 creates; the others wait for it. */
static int open_segment(const drt_comm_t *c, const char *name, size_t size, drt_error_t *err)
{
    double deadline = rt_now() + c->timeout;
    struct stat st;
    int fd;

    if (c->node.me == 0) {
        shm_unlink(name);
        fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0 || ftruncate(fd, (off_t)size) < 0)
            return rt_fail(err, "cannot create shared memory %s (%zu MiB): %s (is /dev/shm "
                           "big enough?)", name, size >> 20, strerror(errno));
        return fd;
    }
    for (;;) {
        fd = shm_open(name, O_RDWR | O_NOFOLLOW, 0600);
        /* only the segment our local rank 0 made: ours, private, its size */
        if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size == size &&
            st.st_uid == geteuid() && !(st.st_mode & 077))
            return fd;
        if (fd >= 0)
            close(fd);
        if (rt_now() > deadline)
            return rt_fail(err, "local rank 0 (rank %d) did not create shared memory %s within "
                           "%.0f s", c->node.ranks[0], name, c->timeout);
        pause_ms(1);
    }
}

static int wait_attached(const drt_comm_t *c, shm_header_t *h, drt_error_t *err)
{
    double deadline = rt_now() + c->timeout;

    while (__atomic_load_n(&h->attached, __ATOMIC_ACQUIRE) < (uint32_t)c->node.n) {
        if (rt_now() > deadline)
            return rt_fail(err, "only %u of %d local ranks attached to shared memory within "
                           "%.0f s", h->attached, c->node.n, c->timeout);
        pause_ms(1);
    }
    return 0;
}

/* More local ranks than CPUs this process may run on: a rank waiting on its
 * rings yields while it polls, since the peer it waits for may need this
 * very core (4 ranks on 2 cores: 8-byte allreduces took 150-360 us when
 * they polled or slept at once, 25-30 us yielding). */
static int outnumbered(int local_ranks)
{
    cpu_set_t set;

    return sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) < local_ranks;
}

int shm_attach(drt_comm_t *c, drt_error_t *err)
{
    int n = c->node.n, fd;
    char name[64];
    size_t size = segment_size(n);
    shm_header_t *h;
    shm_bell_t *bells;
    unsigned char *rings;

    if (n < 2)
        return 0;
    segment_name(c, name, sizeof(name));
    if ((fd = open_segment(c, name, size, err)) < 0 || !(c->shm = calloc(1, sizeof(shm_t))))
        return -1;
    c->shm->size = size;
    c->shm->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (c->shm->base == MAP_FAILED) {
        c->shm->base = NULL;
        return rt_fail(err, "cannot map shared memory %s: %s", name, strerror(errno));
    }
    h = c->shm->base;
    bells = (shm_bell_t *)((unsigned char *)c->shm->base + HEADER);
    rings = (unsigned char *)(bells + n);
    c->bell = &bells[c->node.me];
    c->bell_yield = outnumbered(n);
    __atomic_add_fetch(&h->attached, 1, __ATOMIC_ACQ_REL);
    if (c->node.me == 0) {
        int rc = wait_attached(c, h, err);
        shm_unlink(name);
        if (rc < 0)
            return -1;
    }
    /* ring [i][j] carries local rank i -> local rank j */
    for (int j = 0; j < n; j++) {
        chan_t *ch = &c->chan[c->node.ranks[j]];
        if (j == c->node.me)
            continue;
        ch->tx = (shm_ring_t *)(rings + ((size_t)c->node.me * n + j) * sizeof(shm_ring_t));
        ch->rx = (shm_ring_t *)(rings + ((size_t)j * n + c->node.me) * sizeof(shm_ring_t));
        ch->bell = &bells[j];
        ch->tp = &xfer_shm;
    }
    return 0;
}

void shm_detach(drt_comm_t *c)
{
    if (c->shm && c->shm->base)
        munmap(c->shm->base, c->shm->size);
    free(c->shm);
    c->shm = NULL;
    c->bell = NULL;
}
