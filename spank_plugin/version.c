/* SPDX-License-Identifier: Apache-2.0 */
/* Built against one SLURM release, loaded into another: SLURM refuses the
 * plugin after dlopen (plugin_version, SPANK_PLUGIN's SLURM_VERSION_NUMBER),
 * with a line that names neither release nor the cure. A constructor runs
 * at dlopen, before that check, so it can say both in the loading
 * program's own log (slurmd's, or srun's stderr). It calls nothing of the
 * plugin's and changes nothing: SLURM's refusal is what keeps the plugin
 * out of the way (with an `optional` line, jobs then run without it). */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "config.h"

#include <dlfcn.h>
#include <stdio.h>

#include "plugin.h"

typedef long (*ddp_api_version_fn)(void);
typedef void (*ddp_log_fn)(const char *fmt, ...);

/* slurm_api_version() is libslurm's API number (one per release: 38 for
 * 22.05, 42 for 24.11), not the release's: configure records ours. */
__attribute__((constructor)) static void ddp_version_check(void)
{
    /* both are libslurm's public API; absent outside a SLURM program */
    ddp_api_version_fn api = (ddp_api_version_fn)dlsym(RTLD_DEFAULT, "slurm_api_version");
    ddp_log_fn log_error = (ddp_log_fn)dlsym(RTLD_DEFAULT, "slurm_error");
    long running;

    if (!api || DDP_SLURM_API == 0)
        return;
    running = api() >> 16;
    if (running == DDP_SLURM_API)
        return;
    const char *fmt = "ddp-topo: ddp_topo.so was built for SLURM %d.%02d (libslurm API %d), and this "
                      "SLURM's libslurm is API %ld, another release: SLURM will not load the plugin "
                      "(rebuild and reinstall it against this SLURM's headers on every node; with an "
                      "optional plugstack line jobs run without it meanwhile)";
    int maj = SLURM_VERSION_MAJOR(SLURM_VERSION_NUMBER), min = SLURM_VERSION_MINOR(SLURM_VERSION_NUMBER);
    if (log_error) {
        log_error(fmt, maj, min, DDP_SLURM_API, running);
    } else {
        fprintf(stderr, fmt, maj, min, DDP_SLURM_API, running);
        fputc('\n', stderr);
    }
}
