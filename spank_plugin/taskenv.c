/* SPDX-License-Identifier: Apache-2.0 */
/* slurmstepd: the job's and the task's environment through SPANK, read and
 * written whole. Shared by remote.c and bind.c; calls into no other file of
 * the plugin, and keeps no state. */
#define _GNU_SOURCE /* vasprintf */
#include "plugin.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

spank_err_t ddp_getenv_alloc(spank_t sp, const char *name, char **value)
{
    for (int len = 4096; len <= DDP_GETENV_MAX; len *= 4) {
        char *buf = malloc((size_t)len);
        spank_err_t rc;

        if (!buf)
            return ESPANK_ERROR;
        rc = spank_getenv(sp, name, buf, len);
        if (rc == ESPANK_SUCCESS) {
            *value = buf;
            return rc;
        }
        free(buf);
        if (rc != ESPANK_NOSPACE)
            return rc;
    }
    return ESPANK_NOSPACE;
}

int ddp_setenvf(spank_t sp, const char *name, int overwrite, const char *fmt, ...)
{
    char *val = NULL;
    va_list ap;
    spank_err_t rc;
    int n;

    /* sized to the value: a long CUDA_VISIBLE_DEVICES is set whole, never cut */
    va_start(ap, fmt);
    n = vasprintf(&val, fmt, ap);
    va_end(ap);
    if (n < 0) {
        slurm_error("ddp-topo: cannot set %s in the task: out of memory", name);
        return -1;
    }
    rc = spank_setenv(sp, name, val, overwrite);
    free(val);
    if (rc == ESPANK_SUCCESS || (rc == ESPANK_ENV_EXISTS && !overwrite))
        return 0;
    slurm_error("ddp-topo: cannot set %s in the task: %s", name, spank_strerror(rc));
    return -1;
}
