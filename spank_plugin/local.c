/* srun, sbatch and salloc: validate what the admin configured, so that a bad
 * plugstack.conf is reported where a person reads it, before any allocation
 * (the --ddp-topo value itself is validated by the option callback), and
 * give the job its runtime secret. */
#include "plugin.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>

static ddp_config_t config;

int ddp_local_init(int ac, char **av)
{
    char err[DDP_ERRLEN];

    if (ddp_config_parse(ac, av, &config, err, sizeof(err)) == 0)
        return 0;
    slurm_error("ddp-topo: %s (fix the ddp_topo.so line in plugstack.conf; see the README)",
                err);
    return -1;
}

/* DDPRT_SECRET authenticates the runtime's connections. Made here, by the
 * user's own srun/sbatch/salloc, it travels in the job's environment to
 * every task of the job and to no other user's process (task environments
 * are readable by their owner and root only). An inherited one (srun inside
 * sbatch) is kept, so all steps of a job share it. */
int ddp_local_post_opt(void)
{
    unsigned char b[32];
    char hex[65], err[DDP_ERRLEN];
    ddp_mode_t mode = ddp_request.given ? ddp_request.mode : config.default_mode;
    const char *env = getenv("DDP_TOPO");
    ddp_request_t req;

    /* a bad DDP_TOPO is reported by slurmstepd, where it fails the tasks */
    if (!ddp_request.given && env && ddp_request_parse(env, &req, err, sizeof(err)) == 0)
        mode = req.mode;
    if (mode == DDP_MODE_OFF || getenv("DDPRT_SECRET"))
        return 0;
    if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
        slurm_error("ddp-topo: cannot make the job's DDPRT_SECRET: no randomness available");
        return -1;
    }
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", b[i]);
    return setenv("DDPRT_SECRET", hex, 1);
}
