/* SPDX-License-Identifier: Apache-2.0 */
/* SLURM's two GPU numberings. SLURM_STEP_GPUS and SLURM_JOB_GPUS always
 * hold the node's indexes; with task/cgroup and ConstrainDevices=yes the
 * tasks see only the step's GPUs, renumbered from 0 in index order, and
 * SLURM writes CUDA_VISIBLE_DEVICES in that local numbering (SLURM 22.05
 * src/common/gres.c gres_use_local_device_index, common_gres_set_env). No
 * spank_* call here: the unit test runs this without slurmstepd. */
#include "plugin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ddp_index_list_parse(const char *s, int *out, unsigned max, unsigned *n)
{
    *n = 0;
    while (*s) {
        char *end;
        long lo = strtol(s, &end, 10), hi = lo;
        if (end == s || lo < 0 || lo > DDP_GPU_INDEX_MAX)
            return -1;
        if (*end == '-') {
            const char *h = end + 1;
            hi = strtol(h, &end, 10);
            if (end == h || hi < lo || hi > DDP_GPU_INDEX_MAX)
                return -1;
        }
        for (long v = lo; v <= hi; v++) {
            if (*n == max)
                return -1;
            out[(*n)++] = (int)v;
        }
        if (*end && *end != ',')
            return -1;
        s = *end ? end + 1 : end;
    }
    return 0;
}

/* g's place among the step's GPUs in index order: its local number */
static int local_number(const int *step, unsigned n, int g)
{
    int below = 0, found = 0;

    for (unsigned i = 0; i < n; i++) {
        below += step[i] < g;
        found |= step[i] == g;
    }
    return found ? below : -1;
}

/* the step GPU whose local number is k, -1 for none */
static int global_of_local(const int *step, unsigned n, int k)
{
    for (unsigned i = 0; i < n; i++)
        if (local_number(step, n, step[i]) == k)
            return step[i];
    return -1;
}

static int is_identity(const int *v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (local_number(v, n, v[i]) != v[i])
            return 0;
    return 1;
}

int ddp_gpus_numbering(const int *step, unsigned n, const char *cvd, ddp_gpu_numbering_t *num,
                       char *why, size_t whylen)
{
    int seen[DDP_GPUS_MAX];
    unsigned ns;

    *num = DDP_GPUS_GLOBAL;
    if (!cvd || !*cvd) {
        snprintf(why, whylen, "SLURM set no CUDA_VISIBLE_DEVICES");
        return 0;
    }
    if (ddp_index_list_parse(cvd, seen, DDP_GPUS_MAX, &ns) < 0) {
        snprintf(why, whylen, "SLURM's CUDA_VISIBLE_DEVICES=%.100s does not list GPU indexes "
                 "(MIG instances or GPU UUIDs)", cvd);
        return -1;
    }
    if (ns == n && is_identity(step, n)) {
        snprintf(why, whylen, "the step's GPUs are 0-%u: both numberings agree", n - 1);
        return 0;
    }
    for (unsigned i = 0; i < ns; i++)
        if (local_number(step, n, seen[i]) < 0)
            goto local;
    snprintf(why, whylen, "SLURM's CUDA_VISIBLE_DEVICES=%.100s holds the node's indexes", cvd);
    return 0;
local:
    for (unsigned i = 0; i < ns; i++)
        if (seen[i] >= (int)n) {
            snprintf(why, whylen, "SLURM's CUDA_VISIBLE_DEVICES=%.100s is neither the step's "
                     "GPUs nor numbered from 0 within them", cvd);
            return -1;
        }
    *num = DDP_GPUS_LOCAL;
    snprintf(why, whylen, "SLURM's CUDA_VISIBLE_DEVICES=%.100s counts the step's GPUs from 0 "
             "(task/cgroup with ConstrainDevices=yes)", cvd);
    return 0;
}

int ddp_gpus_task_index(const int *step, unsigned n, ddp_gpu_numbering_t num, int g)
{
    if (local_number(step, n, g) < 0)
        return -1;
    return num == DDP_GPUS_LOCAL ? local_number(step, n, g) : g;
}

/* The per-task rule of --gpus-per-task without --gpu-bind (SLURM 22.05
 * gres.c _filter_gres_per_task): local task L gets the step's GPUs
 * L*k .. L*k+k-1 in index order, whichever numbering the task sees. */
static int per_task_rule(const int *step, unsigned n, long k, int local_id, int *out)
{
    if (k < 1 || local_id < 0 || ((long)local_id + 1) * k > (long)n)
        return -1;
    for (long i = 0; i < k; i++)
        out[i] = global_of_local(step, n, (int)(local_id * k + i));
    return 0;
}

static int counts_from_zero(const int *v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (v[i] != (int)i)
            return 0;
    return 1;
}

/* A task SLURM bound to part of the step's GPUs (--gpus-per-task,
 * --gpu-bind): which node GPUs. In the local numbering SLURM 22.05 numbers
 * such a task's own GPUs from 0 (its task-level SLURM_STEP_GPUS then names
 * the step's first GPUs, whichever it got), so only --gpus-per-task's rule
 * says which. When the step's GPUs are 0..n-1 the step cannot tell the
 * numberings apart, but a list other than 0..k-1 is the node's. */
int ddp_gpus_task_bound(const int *step, unsigned n, ddp_gpu_numbering_t num, const char *task_cvd,
                        long per_task, int local_id, int *out, unsigned *nout)
{
    int seen[DDP_GPUS_MAX];
    unsigned nc;

    *nout = 0;
    if (!task_cvd || !*task_cvd || ddp_index_list_parse(task_cvd, seen, DDP_GPUS_MAX, &nc) < 0 ||
        nc >= n)
        return 1;
    if (num == DDP_GPUS_GLOBAL && !(is_identity(step, n) && counts_from_zero(seen, nc))) {
        for (unsigned i = 0; i < nc; i++)
            if (local_number(step, n, seen[i]) < 0)
                return -1;
        memcpy(out, seen, nc * sizeof(int));
        *nout = nc;
        return 0;
    }
    /* 0..k-1: the local numbering, or the node's first GPUs */
    if (per_task != (long)nc || per_task_rule(step, n, per_task, local_id, out) < 0)
        return -1;
    *nout = nc;
    return 0;
}
