/* SPDX-License-Identifier: Apache-2.0 */
/* The collective seam: per-group backends and the algorithms over them.
 *
 * A backend runs one group's collectives (world, node or rail) on one kind
 * of memory: the CPU backend (cpu.c) rings over shared memory and TCP on
 * host buffers, the NCCL backend (nccl.c) calls NCCL on device buffers.
 * A set (coll_set_t) is the three groups one allreduce uses, plus what the
 * algorithms need of that memory kind: scratch buffers, fences and timers
 * for auto, and the lanes of the pipelined hier. The algorithms (algo.c:
 * flat, hier, pipelined hier; auto.c: auto) are written once over sets, so
 * a node group on NCCL with a rail group on TCP is one more set, not more
 * algorithm code. */
#ifndef DDPRT_BACKEND_H
#define DDPRT_BACKEND_H

#include <stddef.h>

#include "ddprt.h"

typedef struct drt_comm drt_comm_t;
typedef struct coll_set coll_set_t;
typedef struct group group_t;

/* A part of a buffer: bytes from its start, elements. */
typedef struct {
    size_t off;
    size_t count;
} span_t;

/* One reduction: buf gets the result, src is the input when out of place
 * (NULL: in place, the input is buf). count elements of esize bytes (on the
 * CPU path aligned; 16-bit floats stay 16 bits, each step rounding once).
 * op DRT_AVG: sum, then divide by avg_n, which a backend does once, on the
 * part of the result it owns (NCCL: a pre-multiplied sum of floats). */
typedef struct {
    unsigned char *buf;
    const unsigned char *src;
    size_t count, esize;
    drt_dtype_t t;
    drt_op_t op;
    int avg_n;
} coll_args_t;

/* What a backend does for one group. Positions are the group's ring order:
 * position i ends a reduce-scatter owning spans[i]. On an asynchronous
 * backend (NCCL) a call enqueues and returns; errors found later come back
 * from the set's sync or timer. */
typedef struct {
    const char *name; /* "cpu", "nccl": in messages */
    /* spans[i] for every position; x->count is unused */
    int (*reduce_scatter)(coll_set_t *s, const group_t *g, const coll_args_t *x,
                          const span_t *spans, drt_error_t *err);
    /* position i's spans[i] of buf to everyone */
    int (*allgather)(coll_set_t *s, const group_t *g, unsigned char *buf, const span_t *spans,
                     size_t esize, drt_error_t *err);
    /* x->count elements from byte offset off of buf (and src) */
    int (*allreduce)(coll_set_t *s, const group_t *g, const coll_args_t *x, size_t off,
                     drt_error_t *err);
    /* bytes of buf from group position root to all */
    int (*broadcast)(coll_set_t *s, const group_t *g, void *buf, size_t bytes, int root,
                     drt_error_t *err);
} group_ops_t;

/* Ranks that run collectives together, in ring order, and how. */
struct group {
    int n, me;   /* members, my position */
    int *ranks;
    const group_ops_t *ops;
    void *impl;  /* the backend's per-group state (an NCCL communicator) */
};

/* The pipelined hier's second lane: the rail phases of segment k run there
 * while lane 0 (the caller) runs node phases. CPU: a thread; NCCL: a second
 * stream ordered by events. */
#define PIPE_MAX_SEGMENTS 8
typedef struct {
    int (*open)(coll_set_t *s, drt_error_t *err);
    /* run fn(s, arg) on the side lane after all lane-0 work issued so far */
    int (*side)(coll_set_t *s, int (*fn)(coll_set_t *, void *, drt_error_t *), void *arg,
                drt_error_t *err);
    /* lane 0 continues only after the side lane's first k+1 calls */
    int (*join)(coll_set_t *s, int k, drt_error_t *err);
    /* everything issued is done; failed: lane 0 failed (err holds why).
     * -1 when either lane failed, with the first failure's error */
    int (*close)(coll_set_t *s, int failed, drt_error_t *err);
} lane_ops_t;

/* What the algorithms need of a set's memory kind. */
typedef struct {
    void *(*alloc)(coll_set_t *s, size_t bytes, drt_error_t *err);
    void (*release)(coll_set_t *s, void *p);
    int (*copy)(coll_set_t *s, void *dst, const void *src, size_t bytes, drt_error_t *err);
    /* every rank of the world here, and this rank's earlier work done */
    int (*fence)(coll_set_t *s, drt_error_t *err);
    /* time what is issued between start and stop (stop waits for it) */
    int (*timer_start)(coll_set_t *s, drt_error_t *err);
    int (*timer_stop)(coll_set_t *s, double *seconds, drt_error_t *err);
    const lane_ops_t *lanes;
} set_ops_t;

/* What DRT_ALGO_AUTO knows about one power-of-two message size (auto.c). */
#define AUTO_SAMPLES 8
typedef struct {
    int choice;                /* DRT_ALGO_FLAT or _HIER, -1 before the trial */
    unsigned calls;            /* since the choice, for re-checks */
    double t[2][AUTO_SAMPLES]; /* latest fenced run times, flat and hier */
    unsigned n[2];             /* runs recorded in t (the latest AUTO_SAMPLES kept) */
} auto_class_t;

struct coll_set {
    drt_comm_t *c;
    group_t *world, *node, *rail;
    const set_ops_t *ops;
    int uniform;      /* the same number of ranks on every node: hier possible */
    int nnodes;
    int equal_chunks; /* reduce-scatter/allgather need equal spans (NCCL) */
    size_t pipe_min;  /* bytes per pipeline segment at least; 0: never pipelined */
    auto_class_t sizes[64];
    drt_algo_t last;  /* what the last allreduce ran: auto's choice, flat where hier cannot */
    void *impl;       /* the set's own state (CPU: lane thread; NCCL: streams) */
};

/* algo.c: one allreduce of x with algorithm a (DRT_ALGO_FLAT or _HIER) */
int algo_run(coll_set_t *s, drt_algo_t a, const coll_args_t *x, drt_error_t *err);
/* count elements split as evenly as possible into n spans from base_off */
void algo_balanced(span_t *spans, int n, size_t base_off, size_t count, size_t esize);

/* auto.c: DRT_ALGO_AUTO (times both on s, agrees over the CPU world) */
int auto_allreduce(coll_set_t *s, const coll_args_t *x, drt_error_t *err);

#endif
