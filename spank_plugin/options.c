/* SPDX-License-Identifier: Apache-2.0 */
/* The --ddp-topo and --ddp-topo-bind options: registered by the dispatcher
 * (ddp_topo.c), filled by SLURM through their callbacks, read by both
 * contexts. This file owns their values and calls back into no other file
 * of the plugin. */
#include "plugin.h"

#include <stdio.h>
#include <stdlib.h>

static ddp_options_t options;

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
    snprintf(options.error, sizeof(options.error), "%s", err);
    return 0;
}

/* Runs in srun/sbatch/salloc (remote == 0) for the environment form first,
 * then the command line (last one wins), and twice in slurmstepd
 * (remote == 1), so it must be idempotent. */
static int request_cb(int val, const char *optarg, int remote)
{
    char err[DDP_ERRLEN];

    (void)val;
    if (ddp_request_parse(optarg, &options.request, err, sizeof(err)) == 0) {
        options.error[0] = '\0';
        return 0;
    }
    return reject(err, remote);
}

static int bind_cb(int val, const char *optarg, int remote)
{
    char err[DDP_ERRLEN];

    (void)val;
    if (ddp_bind_option_parse(optarg, &options.bind, err, sizeof(err)) == 0) {
        options.bind_given = true;
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

static struct spank_option request_option = {
    .name = "ddp-topo",
    .arginfo = "MODE[,verbose][,share][,check]",
    .usage = "Set up distributed training in each task: torchrun-compatible ranks, "
             "MASTER_ADDR/MASTER_PORT, OMP_NUM_THREADS; auto also binds GPU, CPUs and NIC. "
             "MODE: auto (default), env, off; flags: verbose (print each rank's settings), "
             "share (allow more ranks than GPUs), check (run ddp-topo check in every task "
             "before the program).",
    .has_arg = 2,
    .val = 0,
    .cb = request_cb,
};

/* Registered in every context that sees options; sbatch and salloc only
 * know options registered this way, not through a static table. */
int ddp_options_register(spank_t sp)
{
    if (spank_option_register(sp, &request_option) == ESPANK_SUCCESS &&
        spank_option_register(sp, &bind_option) == ESPANK_SUCCESS)
        return 0;
    slurm_error("ddp-topo: cannot register --ddp-topo (another plugin may own the name)");
    return -1;
}

const ddp_options_t *ddp_options(void)
{
    return &options;
}
