/* srun, sbatch and salloc: validate what the admin configured, so that a bad
 * plugstack.conf is reported where a person reads it, before any allocation.
 * (The --ddp-topo value itself is validated by the option callback.) */
#include "plugin.h"

int ddp_local_init(int ac, char **av)
{
    ddp_config_t cfg;
    char err[DDP_ERRLEN];

    if (ddp_config_parse(ac, av, &cfg, err, sizeof(err)) == 0)
        return 0;
    slurm_error("ddp-topo: %s (fix the ddp_topo.so line in plugstack.conf; see the README)",
                err);
    return -1;
}
