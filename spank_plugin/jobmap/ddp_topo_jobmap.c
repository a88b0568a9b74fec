/* SPDX-License-Identifier: Apache-2.0 */
/* ddp_topo_jobmap.so: dcgm-exporter's HPC job mapping, kept by slurmd's job
 * prolog and epilog (SPANK job_script context, as root, on each node of a
 * job), from what slurmd itself put in the prolog's environment
 * (SLURM_JOB_ID, SLURM_JOB_GPUS: the allocation; the user's environment
 * never reaches the prolog). A plugin of its own, not an argument of
 * ddp_topo.so: a plugin with a prolog makes slurmd run one for every job
 * (about 40 ms more per job-creating srun: tests/bench/jobmap-overhead), which clusters that
 * do not map should not pay. Nothing here fails the prolog or the epilog:
 * either would drain the node. */
#include "jobmap.h"

#include <slurm/spank.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddptopo.h"

SPANK_PLUGIN(ddp_topo_jobmap, 1);

#define ERRLEN 1200
#define FIX "fix the ddp_topo_jobmap.so line in plugstack.conf; see ddp_topo(8)"

/* dir=DIR for this node (%n node name, %h host name), NULL after logging
 * why not */
static const char *map_dir(int ac, char **av, char *buf, size_t len)
{
    const char *pattern = NULL, *node = getenv("SLURMD_NODENAME");
    char host[256] = "";
    dt_error_t derr;

    for (int i = 0; i < ac; i++) {
        const char *why = strncmp(av[i], "dir=", 4) ? "unknown (valid: dir=DIR)"
                          : pattern ? "dir= given twice" : NULL;
        if (why) {
            slurm_error("ddp-topo: ddp_topo_jobmap.so: plugstack.conf argument '%.80s': %s "
                        "(" FIX ")", av[i], why);
            return NULL;
        }
        pattern = av[i] + 4;
    }
    if (!pattern || pattern[0] != '/' || strstr(pattern, "/..")) {
        slurm_error("ddp-topo: ddp_topo_jobmap.so: %s (dir=DIR: the absolute path of "
                    "dcgm-exporter's --hpc-job-mapping-dir, without '..'; " FIX ")",
                    pattern ? "dir= is not an absolute path" : "no dir= argument");
        return NULL;
    }
    gethostname(host, sizeof(host) - 1);
    if (dt_topology_path(pattern, node ? node : host, host, buf, len, &derr) < 0) {
        slurm_error("ddp-topo: ddp_topo_jobmap.so: dir=%.200s: %s (" FIX ")", pattern, derr.text);
        return NULL;
    }
    return buf;
}

static const char *job_id(void)
{
    const char *job = getenv("SLURM_JOB_ID");

    return job ? job : "?";
}

int slurm_spank_job_prolog(spank_t sp, int ac, char **av)
{
    char dir[512], err[ERRLEN];
    const char *gpus = getenv("SLURM_JOB_GPUS");

    (void)sp;
    if (!gpus || !*gpus || !map_dir(ac, av, dir, sizeof(dir)))
        return 0; /* a job without GPUs here has nothing to map */
    if (jobmap_add(dir, getenv("SLURM_JOB_ID"), gpus, err, sizeof(err)) < 0)
        slurm_error("ddp-topo: job %s not mapped to its GPUs for dcgm-exporter: %s", job_id(),
                    err);
    return 0;
}

int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
    char dir[512], err[ERRLEN];

    (void)sp;
    if (!map_dir(ac, av, dir, sizeof(dir)))
        return 0;
    if (jobmap_drop(dir, getenv("SLURM_JOB_ID"), err, sizeof(err)) < 0)
        slurm_error("ddp-topo: job %s not dropped from dcgm-exporter's mapping: %s", job_id(),
                    err);
    return 0;
}
