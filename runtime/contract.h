/* SPDX-License-Identifier: Apache-2.0 */
/* What the launchers (the SPANK plugin, ddp-run) and libddprt share, written
 * once: the environment contract's variable names, the job's secret, the
 * choice of the interface toward MASTER_ADDR, and which programs are
 * launchers. Compiled into ddp_topo.so, libddprt, ddp-run and the ddp-topo
 * command (its dry run); it knows neither SLURM nor hwloc. Not installed:
 * both libraries keep these functions local (their linker maps). */
#ifndef DDP_CONTRACT_H
#define DDP_CONTRACT_H

#include <net/if.h>
#include <stddef.h>
#include <stdint.h>

/* torchrun's variables, which the launchers set in every rank */
#define DRT_ENV_RANK "RANK"
#define DRT_ENV_WORLD_SIZE "WORLD_SIZE"
#define DRT_ENV_LOCAL_RANK "LOCAL_RANK"
#define DRT_ENV_LOCAL_WORLD_SIZE "LOCAL_WORLD_SIZE"
#define DRT_ENV_GROUP_RANK "GROUP_RANK"
#define DRT_ENV_NODE_RANK "NODE_RANK"
#define DRT_ENV_GROUP_WORLD_SIZE "GROUP_WORLD_SIZE"
#define DRT_ENV_ROLE_NAME "ROLE_NAME"
#define DRT_ENV_ROLE_RANK "ROLE_RANK"
#define DRT_ENV_ROLE_WORLD_SIZE "ROLE_WORLD_SIZE"
#define DRT_ENV_RESTART_COUNT "TORCHELASTIC_RESTART_COUNT"
#define DRT_ENV_MASTER_ADDR "MASTER_ADDR"
#define DRT_ENV_MASTER_PORT "MASTER_PORT"
/* The TCP port of libddprt's own rendezvous on MASTER_ADDR, apart from
 * MASTER_PORT, which torch's TCPStore (rank 0) listens on: two listeners
 * on one port race (issue 10). Unset: the runtime uses MASTER_PORT. */
#define DRT_ENV_PORT "DDPRT_PORT"
#define DRT_ENV_OMP_THREADS "OMP_NUM_THREADS"
/* the rest of what torch's elastic agent sets (local_elastic_agent.py) */
#define DRT_ENV_RUN_ID "TORCHELASTIC_RUN_ID"
#define DRT_ENV_MAX_RESTARTS "TORCHELASTIC_MAX_RESTARTS"
#define DRT_ENV_USE_AGENT_STORE "TORCHELASTIC_USE_AGENT_STORE"
#define DRT_ENV_NCCL_ASYNC "NCCL_ASYNC_ERROR_HANDLING"
#define DRT_ENV_TORCH_NCCL_ASYNC "TORCH_NCCL_ASYNC_ERROR_HANDLING"
/* the job's secret: DRT_SECRET_LEN random bytes as 2 * DRT_SECRET_LEN hex digits */
#define DRT_ENV_SECRET "DDPRT_SECRET"
#define DRT_SECRET_LEN 32
/* the interface toward MASTER_ADDR (contract_iface_choose) */
#define DRT_ENV_IFNAME "DDPRT_SOCKET_IFNAME"
#define DRT_ENV_GLOO_IFNAME "GLOO_SOCKET_IFNAME"
#define DRT_ENV_NCCL_IFNAME "NCCL_SOCKET_IFNAME"
/* NCCL's RAS listener, one per step (the plugin; NCCL 2.24+) */
#define DRT_ENV_NCCL_RAS_ADDR "NCCL_RAS_ADDR"
/* the plugin's binding under --ddp-topo=auto */
#define DRT_ENV_GPU "DDP_TOPO_GPU"       /* the rank's GPU as the node numbers it */
#define DRT_ENV_DEVICE "DDP_TOPO_DEVICE" /* its CUDA ordinal in CUDA_VISIBLE_DEVICES */
#define DRT_ENV_CPUS "DDP_TOPO_CPUS"
#define DRT_ENV_NIC "DDP_TOPO_NIC"
/* SLURM's name of the rank's node (the plugin, in every mode; ddp-run: its
 * emulated node's), which the runtime reports lost ranks by; unset: the
 * host name */
#define DRT_ENV_NODENAME "DDP_TOPO_NODENAME"
/* SLURM's copy of a job's --ddp-topo, in the job's environment (the plugin
 * registers the option as ddp-topo): set while the plugin's variables are
 * missing, the job asked but the plugin did not run (its plugstack line was
 * removed after the job was queued) */
#define DRT_ENV_SPANK_OPTION "SLURM_SPANK__SLURM_SPANK_OPTION_ddp_topo_ddp_topo"

/* One rank's place in the job, as torchrun's variables say it. */
typedef struct {
    uint32_t rank, world, local_rank, local_world, node, nodes, restart;
} contract_rank_t;

/* Sets one variable (overwriting); 0 or -1. */
typedef int (*contract_set_fn)(void *ctx, const char *name, const char *value);

/* torchrun's per-rank variables, RANK to TORCHELASTIC_RESTART_COUNT (one
 * step is one role, "default"); every one is tried, -1 if any failed. */
int contract_rank_env(const contract_rank_t *r, contract_set_fn set, void *ctx);

/* Reads a variable of the rank's environment: its value, or NULL. */
typedef const char *(*contract_get_fn)(void *ctx, const char *name);

/* The elastic agent's other variables, as torchrun 1.13 sets them, each
 * only where the rank's environment lacks it (a user's value wins):
 * TORCHELASTIC_RUN_ID=run_id, TORCHELASTIC_MAX_RESTARTS=0 (no launcher
 * restarts workers; a SLURM requeue restarts the job and counts in
 * TORCHELASTIC_RESTART_COUNT), TORCHELASTIC_USE_AGENT_STORE=False (no agent
 * store: rank 0's TCPStore on MASTER_PORT), and NCCL_ASYNC_ERROR_HANDLING
 * with its newer name TORCH_NCCL_ASYNC_ERROR_HANDLING, both 1 unless one is
 * set, whose value the other then takes (newer torch reads the new name
 * first: a user's 0 under either name stays 0). `set` overwrites; -1 if
 * any failed. */
int contract_elastic_env(const char *run_id, contract_get_fn get, contract_set_fn set, void *ctx);

/* A fresh job secret in hex (2 * DRT_SECRET_LEN digits and a NUL), from
 * getrandom(2); -1 when the kernel has no randomness to give. */
int contract_secret_make(char *hex, size_t len);

/* ---- the interface toward MASTER_ADDR ------------------------------------------
 * One precedence for the plugin (which exports it as NCCL_SOCKET_IFNAME and
 * GLOO_SOCKET_IFNAME) and the runtime (whose data connections take it):
 *   1. the interface a person named: DDPRT_SOCKET_IFNAME, else
 *      GLOO_SOCKET_IFNAME (Gloo's comma list: its first entry); one this
 *      node lacks is an error;
 *   2. else the interface of the address that routes to MASTER_ADDR, unless
 *      that is loopback in a job on several nodes (MASTER_ADDR resolved to
 *      127.0.1.1 on its own node, as Debian's /etc/hosts makes it);
 *   3. then no interface is chosen: the plugin leaves the variables unset
 *      (NCCL and Gloo pick), the runtime must still publish an address and
 *      takes the first interface that is up and not loopback. */
typedef enum {
    CONTRACT_IF_NAMED,    /* 1 */
    CONTRACT_IF_ROUTE,    /* 2 */
    CONTRACT_IF_FALLBACK, /* 3: the first up, non-loopback interface */
    CONTRACT_IF_LOOPBACK  /* 3 on a node with no other interface: the route, unreachable */
} contract_if_how_t;

typedef struct {
    contract_if_how_t how;
    char name[IF_NAMESIZE]; /* "" when no interface holds ip */
    uint32_t ip;            /* IPv4, network order */
    const char *var;        /* the variable that named it (CONTRACT_IF_NAMED) */
} contract_iface_t;

struct ifaddrs;

/* The interface a person named, copied into buf (at most len bytes), or
 * NULL; *var is the variable it came from. ddprt and gloo are the values of
 * DDPRT_SOCKET_IFNAME and GLOO_SOCKET_IFNAME, NULL when unset. */
const char *contract_iface_named(const char *ddprt, const char *gloo, const char **var,
                                 char *buf, size_t len);
/* The local address that routes to master (a name or IPv4 address), in
 * network order; loopback when it does not resolve or route. */
uint32_t contract_route_ip(const char *master);
/* The precedence above over an interface list (getifaddrs): -1 when the
 * named interface has no IPv4 address there. */
int contract_iface_pick(const struct ifaddrs *ifs, const char *named, uint32_t route,
                        unsigned nnodes, contract_iface_t *out);
/* All of it on this machine: named from the two variables' values, the
 * route to master, getifaddrs. -1 with a message in err naming the
 * variable and the interface. */
int contract_iface_choose(const char *master, unsigned nnodes, const char *ddprt,
                          const char *gloo, contract_iface_t *out, char *err, size_t errlen);

/* "torchrun", "deepspeed", "accelerate launch", "python -m
 * torch.distributed.run" (or .launch) when argv (argc words) starts a
 * launcher that forks workers of its own, else NULL */
const char *contract_launcher_name(int argc, char **argv);

/* The flight recorder's dumps (libddprt writes, `ddp-topo trace` reads):
 * DIR/ddprt-trace.RANK, in DIR = DDPRT_TRACE_DIR, lines of
 *   ddprt-trace 1
 *   rank R size N epoch E run RUN_ID pid P time SECONDS
 *   reason TEXT
 *   node R NAME              (one per rank of the world)
 *   c SEQ OP COUNT DTYPE ALGO STATE START END   (oldest first; END 0: in it)
 * STATE is one of the three below; times are wall-clock seconds. */
/* Prometheus metrics (libddprt): DIR/ddprt-JOB.STEP-RANK.prom, rewritten at
 * most once per INTERVAL seconds (docs/runtime.md lists the metrics). */
#define DRT_ENV_METRICS_DIR "DDPRT_METRICS_DIR"
#define DRT_ENV_METRICS_INTERVAL "DDPRT_METRICS_INTERVAL"

#define DRT_ENV_TRACE_DIR "DDPRT_TRACE_DIR"
#define DRT_TRACE_MAGIC "ddprt-trace 1"
#define DRT_TRACE_FILE "ddprt-trace."
#define DRT_TRACE_ENTERED "entered"
#define DRT_TRACE_DONE "done"
#define DRT_TRACE_FAILED "failed"

#endif
