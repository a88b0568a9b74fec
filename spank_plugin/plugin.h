/* SPDX-License-Identifier: Apache-2.0 */
/* Internal interface of ddp_topo.so, hidden by the linker version script
 * (ddp_topo.map); not installed. Calls go one way only: the dispatcher
 * (ddp_topo.c) calls options.c and one file per SPANK context (local.c,
 * remote.c); remote.c calls bind.c; both call the helpers (taskenv.c,
 * check.c, launcher.c, config.c, gpus.c), which call no file above them;
 * version.c is a constructor only (SLURM release check at dlopen).
 * Each file that keeps state keeps it in one static struct of its own. */
#ifndef DDP_TOPO_PLUGIN_H
#define DDP_TOPO_PLUGIN_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <slurm/spank.h>

#define DDP_ERRLEN 1200 /* a dt_error_t (1024) and the plugin's words around it */

typedef enum { DDP_MODE_OFF, DDP_MODE_ENV, DDP_MODE_AUTO } ddp_mode_t;

/* What a user asked for with --ddp-topo[=MODE[,FLAG...]] or DDP_TOPO. */
typedef struct {
    bool given;
    ddp_mode_t mode;
    bool verbose;
    bool share;            /* more ranks than GPUs is allowed */
    bool check;            /* run ddp-check in each task before the program */
} ddp_request_t;

/* the installed checker (Makefile.am: $(bindir)/ddp-check) */
#ifndef DDP_CHECK_PATH
#define DDP_CHECK_PATH "/usr/bin/ddp-check"
#endif

/* The admin's plugstack.conf arguments. */
typedef struct {
    ddp_mode_t default_mode;
    uint16_t port_lo, port_hi;
    char topology[512];    /* "live" or a path pattern with %n / %h */
    bool topology_match;   /* a topology file must describe the node it is used on */
    unsigned bind;         /* DT_BIND_* when the user does not choose */
    char checker[512];     /* check=PATH: ddp-check for --ddp-topo=...,check */
    bool disabled;         /* disable: --ddp-topo is accepted and sets nothing */
} ddp_config_t;

/* what every plugstack.conf error tells the admin (nodes have the man page) */
#define DDP_FIX_PLUGSTACK "fix the ddp_topo.so line in plugstack.conf; see ddp_topo(8)"

/* What bind.c needs to plan a node. */
typedef struct {
    const char *topology;  /* "live" or a pattern */
    bool topology_match;   /* refuse a file that describes another machine */
    const char *node_name;
    const char *master_addr;
    unsigned nnodes;       /* in the step */
    unsigned local_count;
    unsigned bind;
    bool share;
} ddp_bind_request_t;

/* config.c */
int ddp_request_parse(const char *value, ddp_request_t *req, char *err, size_t errlen);
/* Fills cfg with every valid argument even when one is bad (-1, err set). */
int ddp_config_parse(int ac, char **av, ddp_config_t *cfg, char *err, size_t errlen);
#define DDP_EPHEMERAL_PATH "/proc/sys/net/ipv4/ip_local_port_range"
int ddp_port_range_warning(const ddp_config_t *cfg, const char *path, char *msg, size_t len);
const char *ddp_mode_name(ddp_mode_t mode);
/* check=PATH exists, is executable and only root can change it: 0, or -1
 * with err saying why (shared by the plugin and check-config) */
int ddp_checker_usable(const char *checker, char *err, size_t errlen);
/* topology=PATTERN for one node: the expanded path, its real path (no
 * symlinks) and whether only root can change it */
typedef enum {
    DDP_TOPO_FILE_OK, DDP_TOPO_FILE_PATTERN, DDP_TOPO_FILE_MISSING, DDP_TOPO_FILE_UNTRUSTED
} ddp_topo_file_t;
ddp_topo_file_t ddp_topology_locate(const char *pattern, const char *node_name, char *path,
                                    size_t pathlen, char real[PATH_MAX], char *err,
                                    size_t errlen);

int ddp_bind_option_parse(const char *value, unsigned *bind, char *err, size_t errlen);

/* options.c: --ddp-topo and --ddp-topo-bind, as SLURM passed them */
typedef struct {
    ddp_request_t request;    /* --ddp-topo */
    char error[DDP_ERRLEN];   /* a bad value seen in slurmstepd, "" when none */
    bool bind_given;          /* --ddp-topo-bind was used */
    unsigned bind;            /* its DT_BIND_* */
} ddp_options_t;
/* -1 when another plugin owns an option's name (logged) */
int ddp_options_register(spank_t sp);
const ddp_options_t *ddp_options(void);

/* local.c: srun, sbatch, salloc */
int ddp_local_init(int ac, char **av);
int ddp_local_post_opt(void);

/* remote.c: slurmstepd */
int ddp_remote_init(int ac, char **av);
int ddp_remote_user_init(spank_t sp);
int ddp_remote_task_init(spank_t sp);

/* taskenv.c: the job's and task's environment in slurmstepd */
/* The longest variable read from the job (SLURM_STEP_NODELIST, DDP_TOPO,
 * ...); one environment string cannot exceed 128 KiB on Linux anyway. */
#define DDP_GETENV_MAX (1 << 20)
/* spank_getenv into a buffer that grows until the value fits: *value is
 * malloc'd on ESPANK_SUCCESS; ESPANK_NOSPACE means longer than
 * DDP_GETENV_MAX bytes. */
spank_err_t ddp_getenv_alloc(spank_t sp, const char *name, char **value);
/* spank_setenv with a format; overwrite 0 keeps a user's value. Logs and
 * returns -1 on failure. */
int ddp_setenvf(spank_t sp, const char *name, int overwrite, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* check.c: --ddp-topo=...,check in task_init: run the checker with the
 * task's environment, bounded; -1 with err saying why the task must fail */
int ddp_check_task(spank_t sp, const char *checker, char *err, size_t errlen);

/* bind.c: mode auto in slurmstepd (called by remote.c) */
int ddp_bind_user_init(spank_t sp, const ddp_bind_request_t *req, char *err, size_t errlen);
int ddp_bind_task_init(spank_t sp, int local, char *err, size_t errlen);
void ddp_bind_describe(int local, char *buf, size_t len);
/* the admin's part of the last ddp_bind_user_init failure, NULL: the user's */
const char *ddp_bind_admin_fix(void);
/* the last ddp_bind_user_init failure was more ranks than GPUs */
bool ddp_bind_needs_share(void);
unsigned ddp_bind_warnings(const char ***warnings);
/* the node's GPU numbering and why (verbose), NULL without SLURM's GPUs */
const char *ddp_bind_gpu_note(char *buf, size_t len);
/* why GPU binding was skipped on this node, NULL when it was not */
const char *ddp_bind_gpu_skipped(void);

/* launcher.c: the task's program (S_JOB_ARGV), pure */
/* argv[0] when it is a --ddp-topo value (auto, off, auto,...): the option
 * was written with a space; else NULL */
const char *ddp_mode_as_program(int argc, char **argv);

/* gpus.c: SLURM's GPU numberings, pure (unit-tested without SLURM) */
#define DDP_GPUS_MAX 1024          /* GPUs per node, as the topology's cap */
#define DDP_GPU_INDEX_MAX 1048575
typedef enum { DDP_GPUS_GLOBAL, DDP_GPUS_LOCAL } ddp_gpu_numbering_t;
/* "0,1,4-5" into indexes; -1 on anything else or more than max */
int ddp_index_list_parse(const char *s, int *out, unsigned max, unsigned *n);
/* The numbering of the step's tasks, from SLURM's step-level
 * CUDA_VISIBLE_DEVICES against SLURM_STEP_GPUS (step, n); why says how it
 * was told. -1 when cvd lists no indexes (MIG, UUIDs) or fits neither. */
int ddp_gpus_numbering(const int *step, unsigned n, const char *cvd, ddp_gpu_numbering_t *num,
                       char *why, size_t whylen);
/* Node GPU g as the task numbers it, -1 when g is not the step's. */
int ddp_gpus_task_index(const int *step, unsigned n, ddp_gpu_numbering_t num, int g);
/* 0 and the node GPUs (out, at most DDP_GPUS_MAX) when SLURM bound the task
 * to part of the step's GPUs, from its task-level CUDA_VISIBLE_DEVICES;
 * 1 when it did not; -1 when bound but which GPUs cannot be told. per_task:
 * k of SLURMD_TRES_BIND's gpu:per_task:k, -1 for none or another binding;
 * local_id: the task's local id. */
int ddp_gpus_task_bound(const int *step, unsigned n, ddp_gpu_numbering_t num, const char *task_cvd,
                        long per_task, int local_id, int *out, unsigned *nout);

#endif
