/* SPDX-License-Identifier: Apache-2.0 */
/* ddp_topo.so: SPANK entry points. This file only dispatches, down to one
 * file per SPANK context (local.c for srun/sbatch/salloc, remote.c for
 * slurmstepd) after options.c has registered the options; nothing calls
 * back into it. The real work lives in libddptopo. */
#include "config.h"
#include "plugin.h"

SPANK_PLUGIN(ddp_topo, 1);

#if HAVE_DECL_ESPANK_JOB_FAILURE
/* SLURM 25.05 on: should init fail in slurmstepd (it fails only when SLURM
 * cannot register the options), that job fails; SLURM's default drains the
 * node, for every job after it. */
int slurm_spank_init_failure_mode = ESPANK_JOB_FAILURE;
#endif

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    spank_context_t ctx = spank_context();

    if (ctx != S_CTX_LOCAL && ctx != S_CTX_ALLOCATOR && ctx != S_CTX_REMOTE)
        return 0;
    if (ddp_options_register(sp) < 0)
        return -1;
    return ctx == S_CTX_REMOTE ? ddp_remote_init(ac, av) : ddp_local_init(ac, av);
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    spank_context_t ctx = spank_context();

    (void)sp;
    (void)ac;
    (void)av;
    return ctx == S_CTX_LOCAL || ctx == S_CTX_ALLOCATOR ? ddp_local_post_opt() : 0;
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    return spank_remote(sp) ? ddp_remote_user_init(sp) : 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    return spank_remote(sp) ? ddp_remote_task_init(sp) : 0;
}
