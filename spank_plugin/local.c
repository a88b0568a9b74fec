/* SPDX-License-Identifier: Apache-2.0 */
/* The SPANK local and allocator contexts, srun, sbatch and salloc: report a
 * bad plugstack.conf where a person reads it, before any allocation (the
 * --ddp-topo value itself is validated by its option callback, options.c),
 * and give the job its runtime secret. */
#include "plugin.h"

#include <stdlib.h>

#include "contract.h"

/* This file's state: the admin's plugstack.conf arguments, from init for
 * init_post_opt (one srun, sbatch or salloc process runs both). */
static struct {
    ddp_config_t config;
    char error[DDP_ERRLEN]; /* why they are bad, "" when they are not */
} local;

/* Never fails: on a `required` line a failing init stops every srun, sbatch
 * and salloc, also those of jobs that never asked for ddp-topo. A bad
 * argument is printed by every command instead, and fails the jobs that do
 * ask (ddp_local_post_opt). */
int ddp_local_init(int ac, char **av)
{
    if (ddp_config_parse(ac, av, &local.config, local.error, sizeof(local.error)) < 0)
        slurm_error("ddp-topo: %s (" DDP_FIX_PLUGSTACK ")", local.error);
    return 0;
}

/* The mode this job asked for: the option, else DDP_TOPO, else default=. A
 * bad DDP_TOPO counts as asking (slurmstepd fails the tasks with it). */
static ddp_mode_t requested_mode(void)
{
    const char *env = getenv("DDP_TOPO");
    char err[DDP_ERRLEN];
    ddp_request_t req;

    if (ddp_options()->request.given)
        return ddp_options()->request.mode;
    if (!env)
        return local.config.default_mode;
    return ddp_request_parse(env, &req, err, sizeof(err)) == 0 ? req.mode : DDP_MODE_AUTO;
}

/* A job that asks for ddp-topo under a broken plugstack.conf fails here,
 * with the admin's error, before anything is allocated.
 *
 * DDPRT_SECRET authenticates the runtime's connections. Made here, by the
 * user's own srun/sbatch/salloc, it travels in the job's environment to
 * every task of the job and to no other user's process (task environments
 * are readable by their owner and root only). An inherited one (srun inside
 * sbatch) is kept, so all steps of a job share it. */
int ddp_local_post_opt(void)
{
    char hex[2 * DRT_SECRET_LEN + 1], warning[DDP_ERRLEN];

    /* disable: the job runs as without the plugin (slurmstepd says so) */
    if (local.config.disabled || requested_mode() == DDP_MODE_OFF)
        return 0;
    if (local.error[0]) {
        slurm_error("ddp-topo: this job asks for ddp-topo, which cannot run: %s (ask your admin "
                    "to fix the ddp_topo.so line in plugstack.conf)", local.error);
        return -1;
    }
    if (ddp_port_range_warning(&local.config, DDP_EPHEMERAL_PATH, warning, sizeof(warning)))
        slurm_info("ddp-topo: warning: %s", warning);
    if (getenv(DRT_ENV_SECRET))
        return 0;
    if (contract_secret_make(hex, sizeof(hex)) < 0) {
        slurm_error("ddp-topo: cannot make the job's " DRT_ENV_SECRET ": no randomness available");
        return -1;
    }
    return setenv(DRT_ENV_SECRET, hex, 1);
}
