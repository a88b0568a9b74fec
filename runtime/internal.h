/* SPDX-License-Identifier: Apache-2.0 */
/* libddprt internals: the communicator, its channels and the helpers the
 * source files share. Not installed; the library exports only ddprt.h's
 * functions (runtime/ddprt.map).
 *
 * Names: drt_ and DRT_ are the public API's (ddprt.h, and the launchers'
 * contract.h); nothing internal takes them, so the prefix alone says what a
 * user may call. A file's internal functions carry its module's prefix
 * (net_ in net.c, request_ in request.c, ...); the helpers every file shares
 * (util.c: errors, log lines, the clock, the lost ranks; reduce.c: the reductions) carry
 * rt_, and the constants defined here for all of them RT_. */
#ifndef DDPRT_INTERNAL_H
#define DDPRT_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "backend.h"
#include "contract.h" /* DRT_SECRET_LEN, the variables' names, the interface choice */
#include "ddprt.h"

#define RT_MAGIC 0x64647274u    /* "ddrt" */
/* bytes of one shared-memory ring: small enough that what one rank writes is
 * still in cache when its peer reads it (256 KiB measured best, 64 KiB-4 MiB) */
#define RT_SHM_RING (256u << 10)
#define RT_NAME 64 /* bytes of a node's name, its terminating NUL included */

/* A one-way shared-memory ring between two ranks of a node. */
typedef struct {
    _Alignas(64) volatile uint64_t head; /* bytes consumed */
    _Alignas(64) volatile uint64_t tail; /* bytes produced */
    _Alignas(64) unsigned char data[RT_SHM_RING];
} shm_ring_t;

/* A local rank's doorbell in the node's segment: a rank waiting on its
 * rings sleeps on seq (a futex), and a peer that moves one of them bumps
 * seq and wakes it if it sleeps. */
typedef struct {
    _Alignas(64) volatile uint32_t seq;
    volatile uint32_t sleepers;
} shm_bell_t;

/* How this rank reaches one peer: TCP to other nodes, rings within a node. */
typedef struct {
    int peer;
    const struct transport *tp; /* NULL: not connected */
    int fd;             /* TCP socket, -1 when none */
    shm_ring_t *tx, *rx;
    shm_bell_t *bell;   /* the peer's doorbell, same node only */
    pid_t pid;          /* the peer's process, same node only */
} chan_t;

typedef struct side side_t; /* xfer.c: one direction of a transfer in progress */
/* How bytes move on one channel: chosen when the channel is connected
 * (boot.c: TCP, shm.c: rings). Each call moves what it can without
 * blocking: bytes moved, 0 for none now, -1 when the peer is gone. */
typedef struct transport {
    const char *name;
    size_t chunk;                        /* at most this many bytes per step */
    size_t (*wire)(size_t len);          /* bytes a message of len occupies */
    ssize_t (*send)(side_t *s, size_t n);
    ssize_t (*recv)(side_t *s, size_t n);
    ssize_t (*recv_reduce)(side_t *s, size_t n); /* whole elements reduced */
    ssize_t (*pad)(side_t *s, size_t n); /* the bytes of wire() beyond len */
    int (*dead)(const chan_t *ch);       /* the peer is gone though nothing says so */
    int (*pollfd)(const chan_t *ch);     /* a descriptor to sleep on; -1: yield */
    void (*close)(chan_t *ch);           /* NULL: nothing to close */
    int remote;                          /* another node: reductions need a bounce buffer */
} transport_t;
extern const transport_t xfer_shm, xfer_tcp;

typedef struct shm shm_t;
struct gpu;

struct drt_comm {
    drt_env_t env;
    int rank, size;
    int *node_of, *local_of;  /* per rank */
    int uniform;              /* every node runs the same number of ranks */
    int nnodes;
    group_t world, node, rail;
    chan_t *chan;             /* per rank; chan[rank].peer < 0 when unused */
    uint32_t *ep_ip, *ep_port; /* per rank: where it takes connections (TCP) and notices (UDP) */
    char (*names)[RT_NAME];   /* per rank: its node's name (drt_node_name) */
    int listen_fd;            /* this rank's listener at ep_port: peers, drt_shrink; -1 none */
    int notice_fd;            /* UDP socket for abort notices, -1 when none */
    uint32_t epoch;           /* drt_shrink calls so far: notices and hellos carry it */
    unsigned char *lost;      /* per rank: known gone (a broken channel, a notice, silence) */
    int *lost_list, nlost;    /* those ranks, in the order they were found */
    struct shrink_info *shrunk; /* shrink.c: what the last drt_shrink's info points into */
    int pmix;                 /* bootstrapped through PMIx */
    int abort;                /* a pipelined collective failed: stop the other thread */
    shm_t *shm;
    shm_bell_t *bell;         /* this rank's doorbell in the node's segment; NULL alone */
    int bell_yield;           /* the node's ranks outnumber this process's CPUs */
    double timeout;           /* seconds */
    uint64_t seq;             /* collectives issued, for error messages */
    drt_algo_t algo;
    int auto_pinned;          /* drt_auto_pin: auto keeps its decisions (no re-checks) */
    int verbose;
    unsigned char secret[DRT_SECRET_LEN];
    unsigned char *bounce;    /* TCP receive-and-reduce staging */
    coll_set_t cpu;           /* host buffers: world, node, rail on the CPU backend */
    struct trace *trace;      /* trace.c: the flight recorder; NULL without DDPRT_TRACE_DIR */
    struct metrics *metrics;  /* metrics.c: Prometheus files; NULL without DDPRT_METRICS_DIR */
    struct gpu *gpu;          /* gpu.c: device, NCCL communicators; NULL before use */
    void *gpu_child;          /* gpucomm.c: the world's ncclCommShrink result, for the
                               * next attach (drt_shrink); NULL otherwise */
    /* progress thread for non-blocking collectives */
    pthread_t thread;
    int thread_started, stopping;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    drt_request_t *queue_head, *queue_tail;
};

/* errors: format into err, return -1 */
int rt_fail(drt_error_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* a line on stderr: rt_log with DDPRT_VERBOSE only, rt_warn always */
void rt_log(const drt_comm_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rt_warn(const drt_comm_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
double rt_now(void);
/* "node 1 at 10.0.0.2": where a rank runs (GROUP_RANK, its data address) */
const char *rt_where(const drt_comm_t *c, int rank, char *buf, size_t len);
/* rank is gone (seen by a broken channel, a notice or its silence): remembered for
 * drt_lost_count and turns the public calls' -1 into DRT_ELOST */
void rt_mark_lost(drt_comm_t *c, int rank);
/* a public call's result: DRT_ELOST for a failure once a rank is known gone */
int rt_status(const drt_comm_t *c, int rc);

/* net.c: TCP */
int net_listen(int port, int *out_port, drt_error_t *err); /* on every address */
int net_listen_on(uint32_t ip, int port, int *out_port, drt_error_t *err); /* ip: network order */
/* why a connect failed, for callers that word their own errors (err has the details) */
/* nobody answered in time; the source address cannot be bound; the host name does not resolve */
enum { NET_EANSWER = -1, NET_ELOCAL = -2, NET_ERESOLVE = -5 };
int net_connect(const char *host, int port, double deadline, drt_error_t *err);
/* from the local address src (network order; 0: the kernel's choice) */
int net_connect_from(const char *host, int port, uint32_t src, double deadline,
                     drt_error_t *err);
int net_send_all(int fd, const void *buf, size_t len, double deadline);
int net_recv_all(int fd, void *buf, size_t len, double deadline);
void net_tune(int fd);
/* one connection attempt to ip:port (network order), closed at once: 1 when
 * something listens there, 0 when refused, unreachable or past deadline */
int net_probe(uint32_t ip, uint32_t port, double deadline);

/* What a rank says about itself when it connects (after the handshake). */
typedef struct {
    /* port: where it listens; in an AUTH_SHRINK hello the caller's epoch instead */
    uint32_t size, rank, node, local, port, pid;
    uint32_t ip; /* where this rank takes data connections; 0: its source address */
    char name[RT_NAME]; /* its node's name (boot.c), NUL-terminated; may be empty */
} hello_t;

/* auth.c: mutual HMAC challenge-response on every connection (libsodium) */
#define AUTH_NONCE 32
#define AUTH_MAC 32
enum { AUTH_BOOT = 1, AUTH_DATA = 2 }; /* to rank 0's MASTER_PORT, between peers */
/* ddp-check's own connections: its MASTER_PORT probe, its rail streams */
enum { AUTH_PROBE = 3, AUTH_LINK = 4 };
/* a survivor to the lowest surviving rank in drt_shrink */
enum { AUTH_SHRINK = 5 };
/* auth_connect_from's failures beyond net_connect_from's (NET_E*) */
enum { AUTH_EIMPOSTOR = -3, AUTH_EHANDSHAKE = -4 };
typedef struct {
    unsigned char nc[AUTH_NONCE], ns[AUTH_NONCE]; /* the client's and the server's nonces */
    uint32_t kind;
} auth_session_t;
/* take an authenticated connection (it owns fd): 1 when it has all it wants */
typedef int (*auth_take_fn)(void *ctx, int fd, const auth_session_t *s, const hello_t *h);
int auth_ready(void);
void auth_random(void *buf, size_t len);
void auth_mac(const drt_comm_t *c, const char *label, const void *a, size_t alen,
              const void *b, size_t blen, unsigned char out[AUTH_MAC]);
int auth_check(const drt_comm_t *c, const char *label, const void *a, size_t alen,
               const void *b, size_t blen, const unsigned char mac[AUTH_MAC]);
int auth_connect(drt_comm_t *c, const char *host, int port, uint32_t kind,
                 const hello_t *payload, double deadline, auth_session_t *s, drt_error_t *err);
/* the same from the local address src (0: any); both return the socket, or NET_EANSWER,
 * NET_ELOCAL, NET_ERESOLVE, AUTH_EIMPOSTOR (a process without the secret holds the port),
 * AUTH_EHANDSHAKE (it closed or stalled mid-handshake), with err set */
int auth_connect_from(drt_comm_t *c, uint32_t src, const char *host, int port, uint32_t kind,
                      const hello_t *payload, double deadline, auth_session_t *s,
                      drt_error_t *err);
int auth_serve(drt_comm_t *c, int lfd, uint32_t kind, double deadline, auth_take_fn take,
               void *ctx, drt_error_t *err);
/* the same, also ending (0) once wake_fd is readable (-1: never) */
int auth_serve_wake(drt_comm_t *c, int lfd, uint32_t kind, double deadline, int wake_fd,
                    auth_take_fn take, void *ctx, drt_error_t *err);
/* A communicator holding only what the two sides above read (the job's
 * secret from DDPRT_SECRET, rank, size, timeout, DDPRT_VERBOSE), for a
 * tool's connections before drt_init (ddp-check's MASTER_PORT probe); NULL
 * with err set. auth_comm_free wipes the secret. */
drt_comm_t *auth_comm_bare(const drt_env_t *env, double timeout, drt_error_t *err);
void auth_comm_free(drt_comm_t *c);

/* boot.c: who is where, and the connections */
int boot_exchange(drt_comm_t *c, drt_error_t *err);
/* the world, node and rail groups from node_of and local_of */
void boot_groups(drt_comm_t *c);
/* the TCP channels the groups' rings need, on listen_fd and ep_ip/ep_port */
int boot_connect(drt_comm_t *c, drt_error_t *err);

/* shrink.c: drt_shrink's state, freed by drt_finalize */
void shrink_free(drt_comm_t *c);

/* pmix.c: the endpoint table through PMIx put/commit/fence/get */
int pmix_wanted(void);
int pmix_exchange(drt_comm_t *c, const void *mine, void *table, size_t size, drt_error_t *err);
void pmix_finalize(drt_comm_t *c);

/* notice.c: when a rank sees a peer die it tells every rank at once, so
 * all fail naming the rank that died, not the neighbour that gave up */
void notice_open(drt_comm_t *c, int port);
/* rank `dead` died; could not make its NCCL communicators; saw an NCCL error */
enum { NOTICE_DIED, NOTICE_GPU_INIT, NOTICE_GPU_ERROR };
#define NOTICE_DIED_ONLY (1u << NOTICE_DIED)
void notice_send(drt_comm_t *c, int dead); /* NOTICE_DIED in collective c->seq */
/* seq given: a thread other than the caller's (the GPU watchdog) must not read c->seq */
void notice_send_kind(drt_comm_t *c, int dead, int kind, uint64_t seq);
int notice_check(drt_comm_t *c, unsigned kinds, drt_error_t *err);

/* shm.c */
int shm_attach(drt_comm_t *c, drt_error_t *err);
void shm_detach(drt_comm_t *c);

/* xfer.c: move bytes to one peer while receiving from another */
int xfer(drt_comm_t *c, int to, const void *sbuf, size_t slen, int from, void *rbuf,
         size_t rlen, drt_error_t *err);
/* the same, but what arrives is reduced into rbuf (count elements of t)
 * instead of overwriting it: no extra pass through a scratch buffer. With
 * base, rbuf = base (op) incoming (out of place) rather than rbuf (op)= it. */
int xfer_reduce(drt_comm_t *c, int to, const void *sbuf, size_t slen, int from, void *rbuf,
                const void *base, size_t count, drt_dtype_t t, drt_op_t op, drt_error_t *err);

/* reduce.c */
size_t drt_dtype_size(drt_dtype_t t);
void rt_reduce(void *acc, const void *in, size_t count, drt_dtype_t t, drt_op_t op);
void rt_reduce_to(void *out, const void *x, const void *y, size_t count, drt_dtype_t t,
                  drt_op_t op);
void rt_scale_avg(void *buf, size_t count, drt_dtype_t t, int n);
void rt_to_f32(float *out, const void *in, size_t count, drt_dtype_t t);
void rt_from_f32(void *out, const float *in, size_t count, drt_dtype_t t);

/* cpu.c: the CPU backend (rings over shared memory and TCP, host memory) */
int cpu_set_init(drt_comm_t *c); /* c->cpu, once the groups are known; -1: no memory */
void cpu_set_free(drt_comm_t *c);
int cpu_fence(drt_comm_t *c, drt_error_t *err); /* a barrier outside the count */
/* the world's maximum of n doubles, elementwise: how ranks agree */
int cpu_agree_max(drt_comm_t *c, double *v, size_t n, drt_error_t *err);

/* coll.c: the collectives on host buffers; the public drt_* wrappers
 * (blocking.c) first wait for outstanding non-blocking requests */
int coll_allreduce(drt_comm_t *c, const void *send, void *recv, size_t count, drt_dtype_t t,
                   drt_op_t op, drt_error_t *err);
int coll_broadcast(drt_comm_t *c, void *buf, size_t bytes, int root, drt_error_t *err);
int coll_allgather(drt_comm_t *c, const void *send, void *recv, size_t bytes, drt_error_t *err);
int coll_reduce_scatter(drt_comm_t *c, const void *send, void *recv, size_t count,
                        drt_dtype_t t, drt_op_t op, drt_error_t *err);
int coll_barrier(drt_comm_t *c, drt_error_t *err);

/* trace.c: the flight recorder. trace_enter counts the collective (c->seq)
 * and records it; trace_leave records its end and returns rc, dumping the
 * ring when it failed; trace_dump writes DIR/ddprt-trace.RANK. A dump is
 * also written when the process gets DRT_TRACE_SIGNAL: SIGURG, ignored by
 * default (sent to a process without the recorder it does nothing) and
 * used by neither SLURM nor NCCL, unlike SIGUSR1/2 (--signal, preemption)
 * and SIGTERM. */
#define DRT_TRACE_SIGNAL SIGURG
#define DRT_TRACE_SIGNAL_NAME "URG"
typedef enum { TRACE_ALLREDUCE, TRACE_BROADCAST, TRACE_ALLGATHER, TRACE_REDUCE_SCATTER,
               TRACE_BARRIER } trace_op_t;
#define TRACE_BYTES 6 /* the dtype of broadcast, allgather and barrier: counts are bytes */
int trace_open(drt_comm_t *c, drt_error_t *err);
void trace_close(drt_comm_t *c);
void trace_enter(drt_comm_t *c, trace_op_t op, size_t count, int dtype);
int trace_leave(drt_comm_t *c, int rc, const drt_error_t *err);
void trace_dump(drt_comm_t *c, const char *reason);

/* metrics.c: the Prometheus textfile (DDPRT_METRICS_DIR). enter and leave
 * frame each collective (coll.c, with c->metrics set), step each bucketed
 * step (bucket.c), shrink a recovery that dropped lost ranks (shrink.c);
 * each may rewrite the file, at most once per DDPRT_METRICS_INTERVAL. */
int metrics_open(drt_comm_t *c, drt_error_t *err);
void metrics_close(drt_comm_t *c); /* removes the file */
void metrics_enter(drt_comm_t *c, trace_op_t op, size_t count, int dtype);
void metrics_leave(drt_comm_t *c, int rc);
void metrics_step(drt_comm_t *c, const drt_step_stats_t *st);
void metrics_shrink(drt_comm_t *c, int lost);

/* request.c: the non-blocking requests and their progress thread */
void request_stop(drt_comm_t *c); /* ends the thread (drt_finalize) */
/* until every queued non-blocking request is done: before anything else
 * uses the CPU groups (blocking collectives, the GPU path's fences) */
void request_drain(drt_comm_t *c);
/* drt_wait of a host (not GPU) request, and how long the progress thread spent on it */
int request_wait_timed(drt_request_t *r, double *busy, drt_error_t *err);

/* gpu.c: the GPU path's state, freed by drt_finalize (after aborting
 * outstanding NCCL work) */
void gpu_finalize(drt_comm_t *c);
/* drt_shrink's GPU half: gpu_pause stops the watchdog (the agreement uses
 * the sockets it looks at); gpu_shrink, once the members m[0..n) (old
 * ranks, ascending) are agreed, ends the communicators: the world's
 * shrunk in place where NCCL can (ncclCommShrink), the rest aborted, all
 * made again at the next GPU call */
void gpu_pause(drt_comm_t *c);
void gpu_shrink(drt_comm_t *c, const uint32_t *m, int n);
/* drt_gpu_iallreduce's requests: request.c wraps them, gpu.c polls them */
struct gpu_req;
drt_request_t *request_gpu(drt_comm_t *c, struct gpu_req *g);
int gpu_req_test(struct gpu_req *g, int *done, drt_error_t *err);
int gpu_req_wait(struct gpu_req *g, drt_error_t *err); /* frees g */
/* device memory for the gradient buckets (bucket.c), on the communicators'
 * device (alloc attaches first: collective); copies and zeroing are
 * ordered on stream. Without CUDA each says why and returns -1. */
int gpu_buf_alloc(drt_comm_t *c, size_t bytes, void **p, drt_error_t *err);
void gpu_buf_free(drt_comm_t *c, void *p);
int gpu_buf_copy(drt_comm_t *c, void *dst, const void *src, size_t bytes, void *stream,
                 drt_error_t *err);
int gpu_buf_zero(drt_comm_t *c, void *p, size_t bytes, void *stream, drt_error_t *err);
/* what the last GPU allreduce ran (auto's choice), flat before any */
drt_algo_t gpu_last_algo(const drt_comm_t *c);

#endif
