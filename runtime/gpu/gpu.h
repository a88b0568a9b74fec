/* SPDX-License-Identifier: Apache-2.0 */
/* The GPU path's state, shared by its files, each one job, calls going one
 * way (down this list):
 *   gpu.c      the public drt_gpu_* calls and the buckets' device memory
 *   gpucomm.c  the communicators: ids, init, readiness, warm-up, the set
 *   gpudev.c   which CUDA device, and this rank's events on it
 *   nccl.c     the NCCL backend of the collective seam (backend.h)
 *   gpuwatch.c the failure state, the teardown, the watchdog, the work
 *              list and the requests: it calls none of the files above
 * Only compiled with the CUDA and NCCL headers (cudaload.h). */
#ifndef DDPRT_GPU_H
#define DDPRT_GPU_H

#include "cudaload.h"
#include "../internal.h"

#ifdef CUDALOAD_HEADERS
enum { GPU_WORLD, GPU_NODE, GPU_RAIL, GPU_GROUPS };

/* one NCCL communicator: a group's impl */
typedef struct {
    ncclComm_t comm;  /* NULL once aborted or destroyed */
    const char *name; /* "world", "node", "rail" */
} nccl_group_t;

/* GPU work not yet known to be done: the watchdog's list */
typedef struct {
    cudaEvent_t done;
    uint64_t seq;
    double issued;
} gpu_work_t;

struct gpu {
    drt_comm_t *c;
    const cuda_api_t *api;
    int device;
    drt_algo_t algo;
    nccl_group_t ng[GPU_GROUPS];
    group_t groups[GPU_GROUPS];
    coll_set_t set;             /* the groups over NCCL; impl is this struct */
    /* the current call (one at a time: the caller's thread issues) */
    cudaStream_t stream;        /* the caller's stream: lane 0 */
    cudaStream_t cur;           /* where group ops enqueue: stream, or side */
    cudaStream_t side;          /* lane 1 of the pipelined hier, and the warm-up's */
    float *warm;                /* the warm-up's one float (gpucomm.c) */
    cudaEvent_t fork, t0, t1;   /* side waits on fork; timers */
    cudaEvent_t *lane_done;     /* per side call: join(k) waits on [k] */
    int nlane_done, lane_calls, lane_failed;
    /* DDPRT_GPU_RAIL=host: the rail phase through pinned host memory */
    unsigned char *stage;       /* pinned, stage_cap bytes */
    size_t stage_cap;
    cudaEvent_t stage_ev;
    /* issue: held around every NCCL call on a communicator and while the
     * watchdog takes them away to abort, so no call sees a freed comm */
    pthread_mutex_t issue;
    /* mu: the failure and the work list (watchdog and caller) */
    pthread_mutex_t mu;
    int failed;
    drt_error_t failure;
    int algo_set;               /* drt_gpu_set_algo called: DDPRT_GPU_ALGO ignored */
    int rail_host;              /* DDPRT_GPU_RAIL=host: staged_rail_ops */
    gpu_work_t *work;
    size_t nwork, capwork;
    uint64_t last_seq;          /* the newest tracked collective's number (mu) */
    pthread_t dog;
    int dog_started, dog_stop;
    struct teardown *td;        /* the abort or destroy under way, or NULL */
    int td_stuck;               /* it never returned: leave the device alone */
    int pipelined;              /* NCCL_LAUNCH_ORDER_IMPLICIT in effect */
    int can_shrink;             /* ncclCommShrink there and not turned off */
    double lost_at;             /* a rank lost, communicators kept for drt_shrink (mu) */
};

/* how long a loss keeps the communicators for drt_shrink (gpuwatch.c) */
#define SHRINK_GRACE 2.0

/* nccl.c: the backend */
extern const group_ops_t nccl_group_ops;
/* the rail phase on the CPU backend through host memory (DDPRT_GPU_RAIL=host) */
extern const group_ops_t staged_rail_ops;
void nccl_stage_free(struct gpu *g);
extern const set_ops_t nccl_set_ops;
/* after an NCCL call returned rc on ng (issue held, released here): wait
 * out ncclInProgress under the deadline; -1 naming what failed */
int nccl_settle(struct gpu *g, nccl_group_t *ng, ncclResult_t rc, const char *what,
                drt_error_t *err);
/* take issue for a call on ng: -1 (not taken) when the path already failed */
int nccl_begin(struct gpu *g, const nccl_group_t *ng, drt_error_t *err);
/* poll ev under DDPRT_TIMEOUT (never a blocking CUDA wait) */
int gpu_wait_event(struct gpu *g, cudaEvent_t ev, const char *what, drt_error_t *err);
void nccl_lanes_free(struct gpu *g);

/* gpudev.c: the device for this rank (the argument, DDP_TOPO_DEVICE,
 * DDP_TOPO_GPU, LOCAL_RANK), made current on this thread and left so (a
 * rank uses one GPU: restoring the caller's would make a context there),
 * and the set's events on it */
int gpu_local_setup(struct gpu *g, int device, drt_error_t *err);

/* gpucomm.c: the world, node and rail communicators, ready and warmed up,
 * on every rank or on none (mine: this rank's gpu_local_setup result, so
 * a rank that failed there still takes part); the set over them */
int gpu_comms_attach(struct gpu *g, int mine, drt_error_t *err);
/* drt_shrink's: the communicators taken away and ended, the world's shrunk
 * in place (without the old ranks excl[0..nexcl)) where g->can_shrink, the
 * new one left in c->gpu_child for the next attach; the rest aborted */
void gpu_comms_shrink(struct gpu *g, int *excl, int nexcl);
/* the shrunk world communicator nobody adopted: aborted */
void gpu_child_drop(drt_comm_t *c);

/* gpuwatch.c */
/* record the failure (the first wins) and start aborting every
 * communicator on a thread of its own (never waited for here); -1 with
 * the first failure in err */
int gpu_fail(struct gpu *g, drt_error_t *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* the failure so far into err: -1, else 0 */
int gpu_failed(struct gpu *g, drt_error_t *err);
/* a short sleep that grows with spins: polls give the CPU back */
void gpu_idle(unsigned spins);
/* end the communicators: destroy (after a clean drain) or abort, and wait
 * for that (and any abort under way) up to DDPRT_TIMEOUT + 1 s; 0 when it
 * returned, -1 when it is left behind (g->td_stuck: the device's streams
 * may never drain, so nothing may wait on them) */
int gpu_teardown_wait(struct gpu *g, int destroy);
/* drt_shrink's teardown: node and rail aborted, the world shrunk without
 * the old ranks excl[0..nexcl) with NCCL_SHRINK_ABORT, then aborted, all on
 * the teardown's thread, waited for as above; the new world communicator
 * (its init in progress), or NULL with why */
ncclComm_t gpu_teardown_shrink(struct gpu *g, int *excl, int nexcl, char *why, size_t len);
int gpu_watch_start(struct gpu *g, drt_error_t *err);
void gpu_watch_stop(struct gpu *g);
/* the watchdog's: an event after collective seq's work on s */
int gpu_track(struct gpu *g, cudaStream_t s, drt_error_t *err);
/* 1 once the tracked work is done (polled under DDPRT_TIMEOUT), else 0 */
int gpu_work_drained(struct gpu *g);
void gpu_work_free(struct gpu *g);
/* a request's event recorded on stream, for drt_gpu_iallreduce */
struct gpu_req *gpu_req_new(struct gpu *g, cudaStream_t stream, drt_error_t *err);
void gpu_req_free(struct gpu_req *q);
#endif

#endif
