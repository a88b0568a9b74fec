/*
 * libddptopo: SLURM hostlists, task layout and rendezvous ports for ddp-topo.
 *
 * This library knows nothing about SLURM's daemons or SPANK: it works on the
 * strings SLURM hands to jobs (SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE,
 * SLURM_DISTRIBUTION, SLURM_STEP_RESV_PORTS), so the plugin, the `ddp-topo`
 * command and tests all compute the same answers from the same inputs.
 *
 * Conventions: functions that can fail return 0 on success and -1 on error,
 * filling the caller's dt_error_t with a message that names the input and
 * what is wrong. Nothing here prints, exits or keeps global state.
 */
#ifndef DDPTOPO_H
#define DDPTOPO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char text[320];
} dt_error_t;

/* SLURM refuses a bracket range of more than 64K hosts; so do we. */
#define DT_HOSTLIST_MAX_RANGE 65536u
/* Upper bound on a whole expanded list, so a hostile list cannot eat memory. */
#define DT_HOSTLIST_MAX_HOSTS (1u << 20)

/* Expand a SLURM hostlist ("gpu[001-004,010],login1", "rack[1-2]-n[01-02]")
 * into *hosts (n entries, in SLURM's order). Free with dt_hostlist_free. */
int dt_hostlist_expand(const char *list, char ***hosts, size_t *n, dt_error_t *err);
void dt_hostlist_free(char **hosts, size_t n);

/* Compress host names into a hostlist, keeping their order (as
 * `scontrol show hostlist`). Returns a malloc'd string or NULL on ENOMEM. */
char *dt_hostlist_compress(char *const *hosts, size_t n);

/* Parse SLURM's tasks-per-node syntax ("3(x2),2", "4", "2,1") into one count
 * per node. *counts is malloc'd. */
int dt_tasks_per_node_parse(const char *spec, uint32_t **counts, uint32_t *nnodes,
                            dt_error_t *err);

typedef enum { DT_DIST_BLOCK, DT_DIST_CYCLIC, DT_DIST_PLANE } dt_dist_kind_t;

typedef struct {
    dt_dist_kind_t kind;
    uint32_t plane_size; /* DT_DIST_PLANE only */
} dt_dist_t;

/* Parse a distribution as srun's -m or SLURM_DISTRIBUTION spell it: "block",
 * "cyclic", "plane=4", optionally followed by ":socket-level" parts, which do
 * not change the node assignment. "arbitrary" is refused (its layout comes
 * from a host file, not from counts). NULL or "" means block. */
int dt_dist_parse(const char *spec, dt_dist_t *dist, dt_error_t *err);

/* Where each global rank of a step runs, as SLURM lays tasks out. */
typedef struct {
    uint32_t nnodes;
    uint32_t ntasks;
    uint32_t *tasks_per_node; /* [nnodes] */
    uint32_t *node_of;        /* [ntasks]: node index of rank r */
    uint32_t *local_of;       /* [ntasks]: local rank of rank r on its node */
} dt_layout_t;

int dt_layout_build(dt_layout_t *layout, const uint32_t *tasks_per_node, uint32_t nnodes,
                    dt_dist_t dist, dt_error_t *err);
void dt_layout_free(dt_layout_t *layout);

/* Default MASTER_PORT range: above Linux's default ephemeral range
 * (32768-60999), so a port we derive is not one the kernel hands out to
 * outgoing connections. */
#define DT_PORT_RANGE_DEFAULT_LO 61000
#define DT_PORT_RANGE_DEFAULT_HI 65535

/* "LO-HI" with 1024 <= LO <= HI <= 65535. */
int dt_port_range_parse(const char *spec, uint16_t *lo, uint16_t *hi, dt_error_t *err);

/* First port of SLURM_STEP_RESV_PORTS ("12000-12003", "12000,12004"). */
int dt_resv_ports_first(const char *spec, uint16_t *port, dt_error_t *err);

/* The MASTER_PORT every node of a step derives on its own: a function of job
 * id, step id and restart count only, so all nodes agree without talking.
 * Consecutive steps and consecutive restarts of one job get different ports;
 * job ids are spread by Fibonacci hashing so nearby jobs land far apart. */
uint16_t dt_master_port(uint32_t job_id, uint32_t step_id, uint32_t restart_count,
                        uint16_t lo, uint16_t hi);

#ifdef __cplusplus
}
#endif
#endif
