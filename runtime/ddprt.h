/*
 * libddprt: the runtime side of ddp-topo.
 *
 * The runtime knows neither SLURM nor the plugin, only the environment
 * contract documented in README.md ("Environment contract"): the variables
 * the plugin (or ddp-run, or torchrun) sets in each task. This first part
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

typedef struct {
    uint32_t rank, world_size;
    uint32_t local_rank, local_world_size;
    uint32_t node_rank, node_count; /* GROUP_RANK, GROUP_WORLD_SIZE */
    uint32_t restart_count;         /* TORCHELASTIC_RESTART_COUNT, 0 when unset */
    char master_addr[256];
    uint16_t master_port;
} drt_env_t;

/* Read the contract with `get` (getenv, or a lookup of the caller's) and
 * check it is consistent: every variable present and numeric, ranks within
 * their sizes, MASTER_PORT a valid port. Returns 0, or -1 with a message
 * naming the variable and what is wrong. */
int drt_env_load(drt_env_t *env, const char *(*get)(const char *name), drt_error_t *err);

#ifdef __cplusplus
}
#endif
#endif
