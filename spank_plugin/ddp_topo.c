/* SPDX-License-Identifier: Apache-2.0 */
/* ddp_topo.so: SPANK entry points. This file only dispatches: each SPANK
 * context has its own file (local.c for srun/sbatch/salloc, remote.c for
 * slurmstepd), and the real work lives in libddptopo. */
#include "plugin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

SPANK_PLUGIN(ddp_topo, 1);

ddp_request_t ddp_request;
char ddp_request_error[DDP_ERRLEN];
bool ddp_bind_given;
unsigned ddp_bind_value;

/* srun, sbatch and salloc exit with this on a bad option (SLURM 22.05 to 24.11) */
#define EXIT_BAD_OPTION 255

/* A bad option value fails srun/sbatch/salloc at once. SLURM follows a
 * failed callback with a line of its own ("Invalid --ddp-topo argument:
 * X") and exits; exiting as it would, after ours, leaves the one line that
 * says what to write instead. slurmstepd only logs a failing option
 * callback, so there the error is kept and the tasks fail with it in
 * task_init. */
static int reject(const char *err, int remote)
{
    if (!remote) {
        slurm_error("ddp-topo: %s", err);
        exit(EXIT_BAD_OPTION);
    }
    snprintf(ddp_request_error, sizeof(ddp_request_error), "%s", err);
    return 0;
}

/* Runs in srun/sbatch/salloc (remote == 0) for the environment form first,
 * then the command line (last one wins), and twice in slurmstepd
 * (remote == 1), so it must be idempotent. */
static int option_cb(int val, const char *optarg, int remote)
{
    char err[DDP_ERRLEN];

    (void)val;
    if (ddp_request_parse(optarg, &ddp_request, err, sizeof(err)) == 0) {
        ddp_request_error[0] = '\0';
        return 0;
    }
    return reject(err, remote);
}

static int bind_cb(int val, const char *optarg, int remote)
{
    char err[DDP_ERRLEN];

    (void)val;
    if (ddp_bind_option_parse(optarg, &ddp_bind_value, err, sizeof(err)) == 0) {
        ddp_bind_given = true;
        return 0;
    }
    return reject(err, remote);
}

static struct spank_option bind_option = {
    .name = "ddp-topo-bind",
    .arginfo = "LIST",
    .usage = "With --ddp-topo=auto: what to bind, none or a comma list of gpu, cpu, mem, nic "
             "(default from the admin, usually gpu,cpu).",
    .has_arg = 1,
    .val = 0,
    .cb = bind_cb,
};

static struct spank_option ddp_option = {
    .name = "ddp-topo",
    .arginfo = "MODE[,verbose][,share][,check]",
    .usage = "Set up distributed training in each task: torchrun-compatible ranks, "
             "MASTER_ADDR/MASTER_PORT, OMP_NUM_THREADS; auto also binds GPU, CPUs and NIC. "
             "MODE: auto (default), env, off; flags: verbose (print each rank's settings), "
             "share (allow more ranks than GPUs), check (run ddp-topo check in every task "
             "before the program).",
    .has_arg = 2,
    .val = 0,
    .cb = option_cb,
};

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    spank_context_t ctx = spank_context();

    if (ctx != S_CTX_LOCAL && ctx != S_CTX_ALLOCATOR && ctx != S_CTX_REMOTE)
        return 0;
    /* Registered in every context that sees options; sbatch and salloc
     * only know options registered this way, not through a static table. */
    if (spank_option_register(sp, &ddp_option) != ESPANK_SUCCESS ||
        spank_option_register(sp, &bind_option) != ESPANK_SUCCESS) {
        slurm_error("ddp-topo: cannot register --ddp-topo (another plugin may own the name)");
        return -1;
    }
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
