/* SPDX-License-Identifier: Apache-2.0 */
/* The SPANK job_script context: slurmd's job prolog and epilog, as root,
 * on each node of a job. With plugstack gpu_job_map=DIR they keep
 * dcgm-exporter's job mapping (jobmap.c) from what slurmd itself put in
 * the prolog's environment (SLURM_JOB_ID, SLURM_JOB_GPUS: the allocation,
 * never the user's environment, which the prolog does not get). Nothing
 * here fails the prolog or the epilog: either would drain the node. */
#include "plugin.h"

#include <stdlib.h>
#include <unistd.h>

#include "ddptopo.h"

/* the directory for this node (%n node name, %h host name), NULL when off */
static const char *map_dir(int ac, char **av, char *buf, size_t len)
{
    ddp_config_t cfg;
    char err[DDP_ERRLEN], host[256] = "";
    const char *node = getenv("SLURMD_NODENAME");
    dt_error_t derr;

    if (ddp_config_parse(ac, av, &cfg, err, sizeof(err)) < 0) {
        slurm_error("ddp-topo: %s (" DDP_FIX_PLUGSTACK ")", err);
        if (!cfg.job_map[0])
            return NULL; /* the other arguments' error: the map itself is valid */
    }
    if (!cfg.job_map[0])
        return NULL;
    gethostname(host, sizeof(host) - 1);
    if (dt_topology_path(cfg.job_map, node ? node : host, host, buf, len, &derr) < 0) {
        slurm_error("ddp-topo: gpu_job_map %s: %s (" DDP_FIX_PLUGSTACK ")", cfg.job_map,
                    derr.text);
        return NULL;
    }
    return buf;
}

int ddp_jobscript_prolog(int ac, char **av)
{
    char dir[512], err[DDP_ERRLEN];
    const char *gpus = getenv("SLURM_JOB_GPUS");

    if (!gpus || !*gpus || !map_dir(ac, av, dir, sizeof(dir)))
        return 0; /* a job without GPUs here has nothing to map */
    if (ddp_jobmap_add(dir, getenv("SLURM_JOB_ID"), gpus, err, sizeof(err)) < 0)
        slurm_error("ddp-topo: job %s not mapped to its GPUs for dcgm-exporter: %s",
                    getenv("SLURM_JOB_ID") ? getenv("SLURM_JOB_ID") : "?", err);
    return 0;
}

int ddp_jobscript_epilog(int ac, char **av)
{
    char dir[512], err[DDP_ERRLEN];

    if (!map_dir(ac, av, dir, sizeof(dir)))
        return 0;
    if (ddp_jobmap_drop(dir, getenv("SLURM_JOB_ID"), err, sizeof(err)) < 0)
        slurm_error("ddp-topo: job %s not dropped from dcgm-exporter's mapping: %s",
                    getenv("SLURM_JOB_ID") ? getenv("SLURM_JOB_ID") : "?", err);
    return 0;
}
