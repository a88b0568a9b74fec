/* SPDX-License-Identifier: Apache-2.0 */
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
#include <stdio.h>

#include <hwloc.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What kind of failure an error is, for callers to branch on (the text is
 * for people). */
typedef enum {
    DT_OK = 0,
    DT_E_INPUT,         /* a value or a file's content is invalid */
    DT_E_FILE,          /* a file cannot be read: missing, unreadable, not regular, too big */
    DT_E_FORMAT,        /* a file is no topology this library reads */
    DT_E_GPU_MISSING,   /* an allocated GPU is not in the topology */
    DT_E_CORES_MISSING, /* no allocated core is in the topology */
    DT_E_NEEDS_SHARE,   /* more ranks than GPUs, and sharing not allowed */
    DT_E_CPUS,          /* the tasks need more CPUs than the node has */
    DT_E_NOMEM
} dt_code_t;

typedef struct {
    char text[1024];
    dt_code_t code;     /* DT_E_INPUT unless a function says otherwise */
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

/* Port n (0 the first) of SLURM_STEP_RESV_PORTS: 0 with *port set, 1 when
 * the list holds n ports or fewer, -1 when it is not a port list. */
int dt_resv_ports_nth(const char *spec, unsigned n, uint16_t *port, dt_error_t *err);

/* The MASTER_PORT every node of a step derives on its own: a function of job
 * id, step id and restart count only, so all nodes agree without talking.
 * Consecutive steps and consecutive restarts of one job get different ports;
 * job ids are spread by Fibonacci hashing so nearby jobs land far apart. */
uint16_t dt_master_port(uint32_t job_id, uint32_t step_id, uint32_t restart_count,
                        uint16_t lo, uint16_t hi);
/* The DDPRT_PORT (libddprt's rendezvous), derived the same way but counting
 * down from the job's base where MASTER_PORT counts up: never a MASTER_PORT
 * of the same job and restart while the job has at most (HI-LO+1)/2 steps.
 * 0 when LO == HI (no port left for it). */
uint16_t dt_runtime_port(uint32_t job_id, uint32_t step_id, uint32_t restart_count,
                         uint16_t lo, uint16_t hi);
/* The port of NCCL's RAS listener (NCCL_RAS_ADDR, NCCL 2.24+, on every node
 * of the step), half the range away from MASTER_PORT: never the step's own
 * MASTER_PORT or DDPRT_PORT, and no other step's of the same job and restart
 * while the job has at most floor((HI-LO+1)/4) steps. 0 when the range holds
 * fewer than 3 ports. */
uint16_t dt_ras_port(uint32_t job_id, uint32_t step_id, uint32_t restart_count, uint16_t lo,
                     uint16_t hi);

/* ---- Input files ------------------------------------------------------------ */

/* Largest input file accepted: topology XML, job scripts. */
#define DT_INPUT_MAX (64u << 20)

/* Read a whole regular file of at most `max` bytes into *data (malloc'd,
 * NUL-terminated, *len bytes). Never blocks: a FIFO, a device or a
 * directory is refused, as is a file over `max`. */
int dt_read_file(const char *path, size_t max, char **data, size_t *len, dt_error_t *err);
/* Whether only root can change `real` (a path without symlinks; `file` as
 * the user named it, for the message): the file and every directory above
 * it owned by root and writable by no one else, a sticky directory (/tmp)
 * excepted. 0, or -1 with err naming `what`, the component and `advice`. */
int dt_path_trusted(const char *what, const char *file, const char *real, const char *advice,
                    dt_error_t *err);

/* ---- Node model --------------------------------------------------------
 * One structure for the three sources: live hwloc discovery, an hwloc XML
 * export (v1 or v2) and an NCCL topology XML (NCCL_TOPO_FILE format).
 * Indexes between arrays (pci parent, numa, package) are -1 when unknown. */

typedef enum {
    DT_SOURCE_LIVE,      /* hwloc discovery of this machine */
    DT_SOURCE_HWLOC_XML, /* lstopo --of xml */
    DT_SOURCE_NCCL_XML   /* NCCL_TOPO_FILE / NCCL_TOPO_DUMP_FILE */
} dt_source_t;

/* How close two devices are, closest first (NCCL's PIX/PXB, PHB, ..., SYS). */
typedef enum {
    DT_PATH_SWITCH,     /* below one PCIe switch */
    DT_PATH_HOSTBRIDGE, /* below one host bridge */
    DT_PATH_NUMA,       /* attached to one NUMA node */
    DT_PATH_PACKAGE,    /* attached to one CPU package */
    DT_PATH_SYSTEM      /* across packages */
} dt_path_t;

typedef struct {
    char busid[24];    /* "0000:10:1c.0"; host bridges "host:0000:00" */
    int parent;        /* nearest PCI ancestor, -1 at the top */
    unsigned vendor, device, class_id; /* class_id is base<<8|subclass */
    int bridge;        /* 1 switch/downstream port, 2 host bridge, 0 device */
    int numa, package; /* where the device's CPU locality lies */
} dt_pci_t;

typedef struct {
    int index;         /* CUDA/NVML index: PCI bus order among NVIDIA GPUs */
    int pci;           /* into dt_node_t.pci, -1 if unknown */
    int nvidia;        /* 0: another vendor's GPU, reported, never bound */
    char busid[24];
    char model[96];
} dt_gpu_t;

typedef enum {
    DT_NIC_INFINIBAND, DT_NIC_ROCE, DT_NIC_EFA, DT_NIC_OMNIPATH, DT_NIC_ETHERNET
} dt_nic_kind_t;

typedef enum { DT_PORT_UNKNOWN, DT_PORT_UP, DT_PORT_DOWN } dt_port_state_t;

/* Real nodes have at most tens of GPUs and NICs; a file with more than this
 * is refused (planning costs grow with the square of the count). */
#define DT_NODE_MAX_GPUS 1024
#define DT_NODE_MAX_NICS 1024

typedef struct {
    char name[64];     /* mlx5_0, hfi1_0, rdmap197s0, eth0; "" when the source has none */
    char netdev[32];   /* its IP interface (ib0, eth0) when known */
    char busid[24];
    dt_nic_kind_t kind;
    int pci;
    int port;          /* HCA port for NCCL_IB_HCA */
    dt_port_state_t state;
    double gbps;       /* link rate, 0 when unknown */
} dt_nic_t;

typedef struct {
    unsigned os_index;
    int package;
    hwloc_bitmap_t cpuset; /* empty for CPU-less (e.g. GPU memory) nodes */
} dt_numa_t;

typedef struct {
    dt_source_t source;
    char path[512];          /* file it came from, "" when live */
    char hostname[64];       /* where an hwloc export was made, "" when unknown */
    unsigned npackages;
    hwloc_bitmap_t *packages; /* cpusets */
    unsigned nnuma;
    dt_numa_t *numa;
    unsigned ncores;
    hwloc_bitmap_t *cores;   /* PU sets of each core, in core order */
    unsigned npci;
    dt_pci_t *pci;
    unsigned ngpus;
    dt_gpu_t *gpus;          /* sorted by index; NVIDIA GPUs first */
    unsigned nnics;
    dt_nic_t *nics;
    /* NVLink GB/s between GPUs (ngpus x ngpus), through NVSwitches included;
     * NULL when the source says nothing about NVLink. */
    double *nvlink;
    int nvswitch;            /* GPUs are joined by NVSwitches */
} dt_node_t;

/* Load a topology file, hwloc XML (v1/v2) or NCCL XML, told apart by its
 * root element. Read with dt_read_file; a document type declaration with
 * an internal subset (entities) is refused, as is any in NCCL XML. */
int dt_node_load_file(dt_node_t *node, const char *path, dt_error_t *err);
/* Discover this machine with hwloc, I/O devices included; NVML, when its
 * library can be dlopen'ed, adds GPU names and NVLink. */
int dt_node_load_live(dt_node_t *node, dt_error_t *err);
/* Write the live topology as hwloc XML (for the plugin's per-node cache). */
int dt_node_export_live(const char *path, dt_error_t *err);
/* Whether a node loaded from a file describes this machine, by what sysfs
 * gives cheaply: online CPUs, core and NUMA counts, NIC names, GPU PCI
 * addresses. 0 when they agree, 1 with err naming every difference. */
int dt_node_check_host(const dt_node_t *node, dt_error_t *err);
void dt_node_free(dt_node_t *node);

unsigned dt_node_nvidia_gpus(const dt_node_t *node);
/* Path class between two PCI devices (indexes into node->pci). */
dt_path_t dt_node_pci_path(const dt_node_t *node, int a, int b);
const char *dt_path_name(dt_path_t path);
const char *dt_nic_kind_name(dt_nic_kind_t kind);
double dt_node_nvlink(const dt_node_t *node, unsigned gpu_a, unsigned gpu_b);

/* ---- The --ddp-topo request --------------------------------------------------- */

typedef enum { DT_MODE_OFF, DT_MODE_ENV, DT_MODE_AUTO } dt_mode_t;

typedef struct {
    dt_mode_t mode;
    int verbose;  /* print each rank's settings */
    int share;    /* more ranks than GPUs is allowed */
    int check;    /* run the preflight check in each task */
} dt_request_t;

/* --ddp-topo's value, MODE[,FLAG...] in any order (NULL or "": auto), as
 * the plugin reads it; err says what is wrong and lists the valid words. */
int dt_request_parse(const char *value, dt_request_t *req, dt_error_t *err);
/* "off", "env" or "auto"; dt_mode_lookup: 0 when s[0..len) is one */
const char *dt_mode_name(dt_mode_t mode);
int dt_mode_lookup(const char *s, size_t len, dt_mode_t *mode);

/* ---- Binding plan of one node ---------------------------------------------- */

enum { DT_BIND_GPU = 1, DT_BIND_CPU = 2, DT_BIND_MEM = 4, DT_BIND_NIC = 8 };

/* "none" or a comma list of gpu, cpu, mem, nic. */
int dt_bind_parse(const char *spec, unsigned *bind, dt_error_t *err);
/* Writes "gpu,cpu" etc. into buf. */
const char *dt_bind_name(unsigned bind, char *buf, size_t len);

typedef struct {
    unsigned nranks;        /* ranks on this node */
    const int *gpus;        /* GPU indexes allocated (SLURM_STEP_GPUS), NULL: all */
    unsigned ngpus;
    hwloc_const_bitmap_t cpus; /* PUs allocated, NULL: all */
    int share_gpus;         /* allow more ranks than GPUs */
} dt_plan_request_t;

typedef struct {
    int gpu;                /* into node->gpus, -1 for none */
    int device;             /* this GPU's ordinal in the plan's visible list */
    hwloc_bitmap_t cpus;    /* PUs given to the rank */
    unsigned ncores;
    int numa;               /* memory node: into node->numa, -1 unknown */
    int nic;                /* into node->nics, -1 for none */
    dt_path_t nic_path;     /* from the rank's GPU (or cores) to its NIC */
} dt_rank_plan_t;

typedef struct {
    unsigned nranks;
    dt_rank_plan_t *ranks;
    unsigned nvisible;
    int *visible;           /* GPU indexes for CUDA_VISIBLE_DEVICES, in order */
    unsigned nwarnings;
    char **warnings;
} dt_node_plan_t;

/* dt_plan_node's return for more ranks than GPUs without share_gpus: its
 * text states the fact only, and each caller adds how its users allow
 * sharing (the plugin's --ddp-topo=auto,share, the report's --share). */
#define DT_PLAN_NEEDS_SHARE (-2)

/* Which GPU, cores, memory node and NIC each local rank of a node gets:
 * 0, -1 on error, or DT_PLAN_NEEDS_SHARE. */
int dt_plan_node(const dt_node_t *node, const dt_plan_request_t *req, dt_node_plan_t *plan,
                 dt_error_t *err);
void dt_node_plan_free(dt_node_plan_t *plan);

/* Expand a per-node topology path: %n is the SLURM node name, %h the
 * host name, %% a percent sign. */
int dt_topology_path(const char *pattern, const char *node, const char *host, char *buf,
                     size_t len, dt_error_t *err);

/* ---- Allreduce cost model (alpha-beta; formulas in README.md) ---------------- */

typedef struct {
    double bytes;            /* message: model parameters x dtype size */
    unsigned nodes, ranks_per_node;
    int uniform;             /* same ranks on every node */
    double intra_gbps, intra_us;  /* one intra-node ring link: GB/s, latency */
    double inter_gbps, inter_us;  /* one node's injection (all its NICs), per-message latency */
    double flat_us, hier_us; /* predicted times */
    int hier_wins;
} dt_cost_t;

/* Fill flat_us, hier_us and hier_wins from the other fields. */
void dt_cost_allreduce(dt_cost_t *c);

/* ---- Job scripts ------------------------------------------------------------ */

/* A batch script's options as sbatch and srun read them: the #SBATCH lines
 * up to the first command (sbatch ignores later ones), then the options of
 * the first srun command line of the body, up to its program. Words split
 * as the shell splits them: quotes ('...', "...") group and are removed, a
 * backslash keeps the next character, a word starting with '#' begins a
 * comment, `...` and $(...) stay whole, as written. Body lines ending in a
 * backslash go on in the next; #SBATCH lines never do. Lines of any length;
 * a NUL byte ends its line's text (the next line is read). Pure parsing:
 * what an option means is the caller's. */
typedef enum { DT_SCRIPT_SBATCH, DT_SCRIPT_SRUN } dt_script_src_t;

typedef struct {
    dt_script_src_t src;
    long line;                /* the #SBATCH line, or the srun command's first line */
    const char *name;         /* without its dashes: "nodes", "N"; never empty */
    const char *value;        /* "--nodes=2", "--nodes 2", "-N 2", "-N2"; NULL: none */
} dt_script_opt_t;

typedef struct {
    long line, last;          /* its first and last line (continued with \) */
    const char *text;         /* from its first non-blank, its lines joined: each
                               * backslash-newline a blank, so offsets into it are
                               * offsets into the original line */
} dt_script_cmd_t;

typedef struct {
    char *original;           /* the script as given, NUL-terminated (len bytes) */
    size_t len;
    dt_script_opt_t *opts;    /* in the script's order: #SBATCH ones, then srun's */
    unsigned nopts;
    dt_script_cmd_t *cmds;    /* the body's commands: lines that are neither blank
                               * nor comments, from the first command on */
    unsigned ncmds;
    long last_directive;      /* the last #SBATCH line before the body (or a first
                               * line's #!), 0: none */
    long srun_line;           /* the body's first srun command line, 0: none */
    unsigned nsrun;           /* srun command lines in the body */
    char *_joined, *_words;   /* internal: the storage behind cmds and opts */
} dt_script_t;

/* Read a script held in memory (len bytes, NULs allowed) or in a file (by
 * dt_read_file, at most DT_INPUT_MAX bytes); errors name "job script".
 * Free with dt_script_free, also after an error. */
int dt_script_parse(dt_script_t *script, const char *buf, size_t len, dt_error_t *err);
int dt_script_load(dt_script_t *script, const char *path, dt_error_t *err);
void dt_script_free(dt_script_t *script);
/* Whether srun's option NAME (no dashes) takes the next word as its value:
 * srun(1) of SLURM 22.05, this plugin's and pyxis's options. */
int dt_srun_takes_value(const char *name);

/* ---- The dry-run report --------------------------------------------------- */

typedef struct {
    const char *nodelist;       /* SLURM hostlist */
    const char *tasks_per_node; /* SLURM syntax: "8", "3(x2),2" */
    dt_dist_t dist;
    const char *topology;       /* NULL or "live", a file, or a pattern with %n/%h */
    const int *gpus;            /* allocated GPU indexes on every node, NULL: all */
    unsigned ngpus;
    unsigned bind;              /* DT_BIND_* */
    int share_gpus;
    unsigned cpus_per_task;     /* 0: the ranks split all of a node's cores; else each
                                 * node's cores are those SLURM allocates for
                                 * tasks x cpus_per_task CPUs (dt_report_cores) */
    unsigned exclusive;         /* #SBATCH --exclusive: SLURM gives the job every
                                 * core of each node, whatever cpus_per_task */
    double model_params;        /* 0: no allreduce prediction */
    unsigned dtype_bytes;
    const char *dtype;
    double intra_gbps, intra_us, inter_gbps, inter_us; /* admin overrides, 0: derive */
    uint16_t port_lo, port_hi;
    long job_id, step_id, restart_count; /* -1: unknown before submission */
    const char *resv_ports;
} dt_report_opts_t;

typedef enum { DT_FORMAT_TEXT, DT_FORMAT_JSON, DT_FORMAT_DOT } dt_format_t;

typedef struct dt_report dt_report_t;

int dt_report_build(const dt_report_opts_t *opts, dt_report_t **report, dt_error_t *err);
int dt_report_write(const dt_report_t *report, dt_format_t format, FILE *out);
void dt_report_free(dt_report_t *report);

/* ---- the flight recorder's dumps (`ddp-topo trace`) ----------------------------
 * Load every DIR/ddprt-trace.RANK that libddprt wrote (DDPRT_TRACE_DIR) for
 * one run: dumps of different runs, world sizes or epochs are refused, as
 * are malformed ones (naming file and line). Write the verdict: the last
 * collective done on every rank that dumped, the first unfinished and where
 * each rank was (entered, failed, left, never entered, no dump), the first
 * collective the ranks issued differently, each rank's reason. */
typedef struct dt_trace dt_trace_t;
int dt_trace_load(const char *dir, dt_trace_t **trace, dt_error_t *err);
int dt_trace_write(const dt_trace_t *trace, dt_format_t format, FILE *out); /* TEXT or JSON */
void dt_trace_free(dt_trace_t *trace);
/* One line on the cores the report's plans split: the cores SLURM allocates
 * for --cpus-per-task (an assumption: SLURM 22.05's default on an idle
 * node), or all of each node's. */
void dt_report_cores(const dt_report_t *report, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
