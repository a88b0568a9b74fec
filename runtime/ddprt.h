/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libddprt: the runtime side of ddp-topo.
 *
 * The runtime knows neither SLURM nor the plugin, only the environment
 * contract documented in README.md ("Environment contract"): the variables
 * the plugin (or ddp-run) sets in each task. This first part
 * reads and validates that contract.
 */
#ifndef DDPRT_H
#define DDPRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char text[320];
} drt_error_t;

/* A launcher that picked the runtime's port (DDPRT_PORT, else MASTER_PORT)
 * may bind and listen on it itself and hand rank 0 the listening socket's
 * descriptor in this variable, so no other process can take the port
 * between the two (ddp-run does). */
#define DRT_ENV_LISTEN_FD "DDPRT_LISTEN_FD"

typedef struct {
    uint32_t rank, world_size;
    uint32_t local_rank, local_world_size;
    uint32_t node_rank, node_count; /* GROUP_RANK, GROUP_WORLD_SIZE */
    uint32_t restart_count;         /* TORCHELASTIC_RESTART_COUNT, 0 when unset */
    char master_addr[256];
    uint16_t master_port;
    /* DDPRT_PORT, else master_port: where libddprt's rank 0 listens. Added
     * in the tail padding, so sizeof(drt_env_t) and every other offset are
     * unchanged (env.c asserts it). */
    uint16_t runtime_port;
} drt_env_t;

/* Read the contract with `get` (getenv, or a lookup of the caller's) and
 * check it is consistent: every variable present and numeric, ranks within
 * their sizes, MASTER_PORT (and DDPRT_PORT when set) a valid port. Returns 0, or -1 with a message
 * naming the variable and what is wrong. */
int drt_env_load(drt_env_t *env, const char *(*get)(const char *name), drt_error_t *err);

typedef enum { DRT_FLOAT32, DRT_FLOAT64, DRT_BFLOAT16, DRT_FLOAT16, DRT_INT32, DRT_INT64 } drt_dtype_t;
typedef enum { DRT_SUM, DRT_AVG, DRT_MIN, DRT_MAX } drt_op_t;
typedef enum { DRT_ALGO_AUTO, DRT_ALGO_FLAT, DRT_ALGO_HIER } drt_algo_t;

typedef struct drt_comm drt_comm_t;
typedef struct drt_request drt_request_t;

/* Threads (docs/runtime.md, "Threads"; not checked by the library): one
 * thread at a time makes the calls below that take a drt_comm_t * (and
 * drt_buckets_* on its buckets), but for the queries (drt_rank ..
 * drt_node_of; also drt_lost_count, drt_lost_rank and drt_node_name, whose
 * list the progress thread and the GPU watchdog may grow), which any
 * thread may make at any time but during drt_shrink. drt_test and
 * drt_wait may run on any thread beside them, one call at a time per
 * request. drt_finalize only once every other call on the communicator has
 * returned and every request was waited for. The ranks must issue
 * collectives in the same order, whichever threads issue them. */

/* Bootstrap from the environment; returns 0 or -1 with err set (a rank
 * that never arrived, a timeout, a bad variable). Collective: every rank
 * of the world calls it. */
int drt_init(drt_comm_t **comm, drt_error_t *err);
void drt_finalize(drt_comm_t *comm);

/* world, node (ranks on this node) and rail (same local rank, one per node) */
int drt_rank(const drt_comm_t *c);
int drt_size(const drt_comm_t *c);
int drt_local_rank(const drt_comm_t *c);
int drt_local_size(const drt_comm_t *c);
int drt_node_rank(const drt_comm_t *c);
int drt_node_count(const drt_comm_t *c);
int drt_rail_rank(const drt_comm_t *c);
int drt_rail_size(const drt_comm_t *c);
/* the node (GROUP_RANK) world rank `rank` runs on, -1 for no such rank */
int drt_node_of(const drt_comm_t *c, int rank);

/* Choose the allreduce algorithm (the default comes from DDPRT_ALGO). */
void drt_set_algo(drt_comm_t *c, drt_algo_t algo);
drt_algo_t drt_get_algo(const drt_comm_t *c);
/* what the last allreduce on host buffers ran: flat or hier (auto's
 * choice, flat where hier cannot run); flat before any */
drt_algo_t drt_last_algo(const drt_comm_t *c);
const char *drt_algo_name(drt_algo_t algo);
/* 0 on success; "flat", "hier" or "auto"; -1 when unknown */
int drt_algo_parse(const char *name, drt_algo_t *algo);
/* DRT_ALGO_AUTO's decisions on host buffers, to carry over a restart: per
 * message size class the algorithm chosen and the calls since. Call with
 * no collective in flight. drt_auto_state writes them as text (at most
 * DRT_AUTO_STATE_MAX bytes) into buf of *len bytes and sets *len to the
 * bytes written; -1 when buf is too small (*len then says how much).
 * drt_auto_restore is collective: every rank passes the same bytes (it
 * checks, so all apply or all refuse); 0 applied, 1 written by another
 * layout (ranks, nodes: nothing applied, auto decides afresh), -1 malformed
 * or not the same on every rank (err says which). drt_auto_pin(c, 1)
 * keeps every decision once made: no re-check runs or switches later, so
 * a run replays from the decisions alone (a re-check measures afresh,
 * which a restarted run cannot repeat). */
#define DRT_AUTO_STATE_MAX 4096
int drt_auto_state(const drt_comm_t *c, void *buf, size_t *len, drt_error_t *err);
int drt_auto_restore(drt_comm_t *c, const void *buf, size_t len, drt_error_t *err);
void drt_auto_pin(drt_comm_t *c, int on);
int drt_dtype_parse(const char *name, drt_dtype_t *t);
/* bytes per element; 0 for a value that is not a drt_dtype_t */
size_t drt_dtype_size(drt_dtype_t t);

/* Collectives on host buffers of any alignment. send == recv is in place.
 * Every rank ends with the same bytes. 16-bit floats travel as 16 bits; each
 * reduction step adds in float32 and rounds once; integer averages round
 * toward zero. */
int drt_allreduce(drt_comm_t *c, const void *send, void *recv, size_t count, drt_dtype_t t,
                  drt_op_t op, drt_error_t *err);
int drt_broadcast(drt_comm_t *c, void *buf, size_t bytes, int root, drt_error_t *err);
int drt_barrier(drt_comm_t *c, drt_error_t *err);
/* recv holds size * bytes: rank r's block at r * bytes */
int drt_allgather(drt_comm_t *c, const void *send, void *recv, size_t bytes, drt_error_t *err);
/* send holds size * count elements; rank r receives the reduced block r */
int drt_reduce_scatter(drt_comm_t *c, const void *send, void *recv, size_t count,
                       drt_dtype_t t, drt_op_t op, drt_error_t *err);

/* Non-blocking allreduce, run by a progress thread in the order issued;
 * buffers must stay untouched until drt_wait returns or drt_test says done.
 * A blocking collective first waits for all outstanding requests. */
int drt_iallreduce(drt_comm_t *c, const void *send, void *recv, size_t count, drt_dtype_t t,
                   drt_op_t op, drt_request_t **req, drt_error_t *err);
int drt_test(drt_request_t *req, int *done, drt_error_t *err);
int drt_wait(drt_request_t *req, drt_error_t *err); /* frees req */

/* ---- Elastic: shrink in place ----------------------------------------------
 * A call above (or drt_buckets_*, drt_gpu_*) that fails because a rank of
 * the world is gone (it exited or was killed, or its node went down)
 * returns DRT_ELOST instead of -1; drt_lost_count then says how many ranks
 * this rank knows are gone. With a launcher that keeps the survivors
 * running (srun --no-kill, ddp-run --no-kill), each survivor may then call
 * drt_shrink: collective over the survivors, it agrees on who is left
 * (every survivor gets the same set, however many died and whenever each
 * saw it; bounded by DDPRT_TIMEOUT), renumbers them 0..M-1 in their old
 * order, rebuilds the world, node and rail groups (nodes without survivors
 * drop out; a node that lost some ranks keeps the rest) and the shared
 * memory and TCP connections, with the job's secret: nobody else can join.
 * The communicator stays the same pointer; the NCCL communicators are
 * aborted and made again over the survivors at the next GPU call.
 * Outstanding requests and buckets' steps are abandoned (free or restart
 * them). Returns 0 with info filled, or -1 with err (this rank was left
 * out, or too few survived to agree in time). */
#define DRT_ELOST (-2)

typedef struct {
    int old_size, new_size;   /* world sizes before and after */
    int old_rank;             /* this rank's number before */
    int old_nodes, new_nodes; /* node counts before and after */
    int nlost;                /* ranks lost */
    const int *lost_ranks;    /* their old numbers, ascending */
    const char *const *lost_nodes; /* the name of the node each ran on */
    const int *old_rank_of;   /* [new_size]: each new rank's old number */
    double seconds;           /* drt_shrink's own time */
} drt_shrink_info_t;

/* ranks this rank knows are gone since drt_init or the last drt_shrink */
int drt_lost_count(const drt_comm_t *c);
/* the i-th of them (0 <= i < drt_lost_count), -1 otherwise */
int drt_lost_rank(const drt_comm_t *c, int i);
/* the name of the node rank runs (or ran) on: DDP_TOPO_NODENAME (the plugin
 * sets SLURM's node name there, ddp-run its emulated node's), else the host
 * name; NULL for no such rank */
const char *drt_node_name(const drt_comm_t *c, int rank);
/* info's arrays belong to the communicator, valid until the next drt_shrink */
int drt_shrink(drt_comm_t *c, drt_shrink_info_t *info, drt_error_t *err);

/* ---- GPU buffers (NCCL) ---------------------------------------------------
 * libddprt loads the CUDA runtime (libcudart.so) and NCCL (libnccl.so.2, or
 * the file DDPRT_NCCL_LIBRARY names) with dlopen at the first call below, so
 * one build serves CPU-only machines, NCCL from a Python wheel, and a process
 * where PyTorch already loaded its NCCL. Without a device, without the
 * libraries, or in a build without CUDA/NCCL headers, every call returns -1
 * and says which. Streams are cudaStream_t passed as void * (NULL: the
 * legacy default stream). */

/* Select the CUDA device and create the NCCL world, node and rail
 * communicators (collective over the world; later calls reuse them).
 * device < 0: the plugin's binding: DDP_TOPO_DEVICE, else DDP_TOPO_GPU,
 * else device LOCAL_RANK of those CUDA_VISIBLE_DEVICES shows. Implied by the
 * first GPU collective. This and every drt_gpu_* call leave that device
 * current on the calling thread (a rank uses one GPU). */
int drt_gpu_attach(drt_comm_t *c, int device, drt_error_t *err);
/* the device in use, -1 before drt_gpu_attach */
int drt_gpu_device(const drt_comm_t *c);
/* the algorithm for GPU buffers (default DDPRT_GPU_ALGO, else flat) */
void drt_gpu_set_algo(drt_comm_t *c, drt_algo_t algo);

/* Allreduce of device buffers, enqueued on stream: it returns once the work
 * is issued, and the result is ready when the stream gets there. A failure
 * found later (a peer died, NCCL reported an error, DDPRT_TIMEOUT passed)
 * aborts the job's communicators and fails the next call, or drt_gpu_sync. */
int drt_gpu_allreduce(drt_comm_t *c, const void *send, void *recv, size_t count, drt_dtype_t t,
                      drt_op_t op, void *stream, drt_error_t *err);
/* The same as a request: drt_test/drt_wait poll a CUDA event recorded after
 * the work, under DDPRT_TIMEOUT, never a blocking CUDA call. */
int drt_gpu_iallreduce(drt_comm_t *c, const void *send, void *recv, size_t count,
                       drt_dtype_t t, drt_op_t op, void *stream, drt_request_t **req,
                       drt_error_t *err);
/* wait (bounded by DDPRT_TIMEOUT) until stream has done all work issued on
 * it; -1 with the first error the GPU path found */
int drt_gpu_sync(drt_comm_t *c, void *stream, drt_error_t *err);

/* ---- Gradient buckets: allreduce overlapped with backward -------------------
 * The caller registers its gradients in model order (drt_buckets_add); at
 * the first step they are packed, from the last registered, into buckets:
 * first_cap bytes for bucket 0 (the gradients backward produces first),
 * cap bytes for the others (one gradient larger than a cap is a bucket of
 * its own). All gradients of a bucket share one dtype; a change of dtype
 * starts a new bucket. A step is drt_buckets_begin, drt_buckets_ready for
 * each gradient as backward produces it, drt_buckets_finish. A bucket's
 * allreduce (op, on the non-blocking path) starts the moment its last
 * gradient is ready, and buckets always start in index order on every rank
 * (a bucket full before an earlier one waits for it), so the ranks' calls
 * match. finish starts what is left, waits for all, and writes the results
 * back. A gradient not marked ready in a step (an unused parameter)
 * contributes zeros, and still receives the other ranks' values; marking one
 * twice in a step is an error. Host buffers, or device buffers after
 * drt_buckets_gpu. */
typedef struct drt_buckets drt_buckets_t;

/* What one step cost, the same on every rank except the rank's own times. */
typedef struct {
    double step_s;      /* begin to finish's return */
    double compute_s;   /* begin to the last gradient ready (or finish) */
    double comm_s;      /* the buckets' allreduces, end to end, in sum (waits for peers included) */
    double exposed_s;   /* finish's wait: the communication backward did not hide */
    double skew_s;      /* the largest, over buckets, of the last rank's lag behind the first */
    int slowest_rank;   /* the rank last to its buckets on average; -1 on one rank */
    double slowest_lag_s; /* its mean lag behind the first rank to arrive */
    int stop;           /* some rank has seen a preemption signal (drt_preempt_watch) */
    size_t bytes;       /* bytes allreduced */
    int buckets;
    drt_algo_t algo;    /* what the last bucket ran: auto's choice, flat where hier cannot run */
} drt_step_stats_t;

/* cap, first_cap: bytes, 0 for the defaults (DDPRT_BUCKET_MB, else 25 MiB;
 * DDPRT_FIRST_BUCKET_MB, else 1 MiB), SIZE_MAX for one bucket. op: DRT_AVG
 * for gradients (applied once). */
int drt_buckets_create(drt_comm_t *c, size_t cap, size_t first_cap, drt_op_t op,
                       drt_buckets_t **b, drt_error_t *err);
/* Device buffers (NCCL): the buckets are allocated on the GPU of
 * drt_gpu_attach (which this calls: collective), gradients are device
 * pointers, and every copy, zeroing and allreduce is enqueued on stream, so
 * mark a gradient ready after enqueuing the work that computes it on that
 * stream (NULL: the legacy stream of drt_gpu_device, which must be the
 * current device; not cudaStreamPerThread). finish returns once the
 * allreduces are done and the copies back are enqueued; drt_buckets_free
 * waits for the stream. The times in the stats are the host's: when ready
 * was called and when the waits ended, not when the GPU got there. Before
 * the first begin. */
int drt_buckets_gpu(drt_buckets_t *b, void *stream, drt_error_t *err);
/* Register a gradient of count elements; returns its index, or -1. grad:
 * the caller's buffer (copied into the bucket when ready, results copied
 * back by finish), or NULL for storage inside the bucket (drt_buckets_grad:
 * no copies). Only before the first begin. */
int drt_buckets_add(drt_buckets_t *b, void *grad, size_t count, drt_dtype_t t, drt_error_t *err);
/* the gradient's storage: the caller's buffer, or the bucket's (valid after
 * the first drt_buckets_begin, which packs the buckets) */
void *drt_buckets_grad(drt_buckets_t *b, int index);
int drt_buckets_count(const drt_buckets_t *b); /* buckets, after the first begin */
int drt_buckets_begin(drt_buckets_t *b, drt_error_t *err);
int drt_buckets_ready(drt_buckets_t *b, int index, drt_error_t *err);
/* collective: every rank's gradients reduced, stats filled (may be NULL) */
int drt_buckets_finish(drt_buckets_t *b, drt_step_stats_t *stats, drt_error_t *err);
void drt_buckets_free(drt_buckets_t *b); /* before drt_finalize */

/* ---- Preemption --------------------------------------------------------------
 * SLURM signals each task at different moments (--signal=USR1@T, scancel
 * --signal, preemption's SIGTERM). drt_preempt_watch catches SIGUSR1 and
 * SIGTERM (the first only sets a flag); every drt_buckets_finish then
 * tells all ranks whether any rank has seen one (stats->stop), so all stop
 * after the same step. A second SIGTERM ends the process (SIGTERM's default
 * action), so an operator or `timeout` can still stop a stuck rank.
 * drt_preempt_signal: the signal seen here, 0 none. */
int drt_preempt_watch(drt_error_t *err);
int drt_preempt_signal(void);

/* ---- Checkpoints ---------------------------------------------------------------
 * A checkpoint is a set of named sections (byte strings) for one step,
 * written to DIR/ckpt-<step>.ddprt with a format version and a BLAKE2b
 * checksum: into a temporary file, fsync, rename, fsync of DIR, so a crash
 * leaves the previous checkpoint whole. drt_ckpt_save copies the sections
 * and returns; a thread writes them. With a local directory (node-local
 * storage), the thread writes there first, then copies to DIR. The last
 * `keep` checkpoints in DIR (and in the local directory) stay, older ones
 * are removed. Not collective: in data-parallel training rank 0 saves. */
typedef struct drt_ckpt drt_ckpt_t;
typedef struct {
    const char *name; /* up to 63 bytes */
    const void *data;
    size_t len;
} drt_ckpt_section_t;
typedef struct {
    uint64_t step;     /* of the checkpoint this describes */
    size_t bytes;      /* the file's size */
    double stall_s;    /* what drt_ckpt_save cost its caller (the copy, a wait for the previous write) */
    double write_s;    /* the background write to DIR (both levels with a local directory) */
    double local_s;    /* of which the local level, 0 without */
} drt_ckpt_stats_t;

int drt_ckpt_open(const char *dir, const char *local_dir, int keep, drt_ckpt_t **ck,
                  drt_error_t *err);
/* waits for the previous save first; -1 also when that write failed (its
 * error; the checkpoint before it stays the newest) */
int drt_ckpt_save(drt_ckpt_t *ck, uint64_t step, const drt_ckpt_section_t *sections, int n,
                  drt_error_t *err);
/* Wait for the last save's write; stats (may be NULL) describe it. -1 with
 * its error. */
int drt_ckpt_wait(drt_ckpt_t *ck, drt_ckpt_stats_t *stats, drt_error_t *err);
/* Load the newest valid checkpoint of DIR: 1 and *step when one was found,
 * 0 when DIR has none, -1 on an error. A file that is truncated, corrupt,
 * of another version or not a regular file is skipped with a warning on
 * stderr naming it. */
int drt_ckpt_load(drt_ckpt_t *ck, uint64_t *step, drt_error_t *err);
/* a section of the loaded checkpoint, NULL when it has none by that name */
const void *drt_ckpt_section(const drt_ckpt_t *ck, const char *name, size_t *len);
/* waits for an outstanding write (its error is reported on stderr) */
void drt_ckpt_close(drt_ckpt_t *ck);

#ifdef __cplusplus
}
#endif
#endif
