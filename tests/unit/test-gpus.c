/* SPDX-License-Identifier: Apache-2.0 */
/* SLURM's two GPU numberings, with the values SLURM 22.05 gives a step and
 * its tasks (src/plugins/gres/common/gres_common.c common_gres_set_env,
 * src/common/gres.c _get_usable_gres): without task/cgroup, and with
 * ConstrainDevices=yes, where CUDA_VISIBLE_DEVICES counts from 0. */
#include "plugin.h"
#include "tap.h"

#include <string.h>

static int step[DDP_GPUS_MAX];
static unsigned nstep;

static void step_gpus(const char *list)
{
    ok(ddp_index_list_parse(list, step, DDP_GPUS_MAX, &nstep) == 0, "SLURM_STEP_GPUS=%s parses", list);
}

static void numbering(const char *cvd, int rc, ddp_gpu_numbering_t want, const char *why)
{
    ddp_gpu_numbering_t num = DDP_GPUS_LOCAL + 1;
    char text[256] = "";
    int got = ddp_gpus_numbering(step, nstep, cvd, &num, text, sizeof(text));

    ok(got == rc && (rc < 0 || num == want) && strstr(text, why),
       "step CUDA_VISIBLE_DEVICES=%s: rc %d numbering %s: %s", cvd ? cvd : "(unset)", got,
       num == DDP_GPUS_LOCAL ? "local" : "global", text);
}

/* the task's CUDA_VISIBLE_DEVICES list for node GPUs `gpus` */
static void task_list(ddp_gpu_numbering_t num, const int *gpus, unsigned n, const char *want)
{
    char got[256] = "";
    size_t o = 0;

    for (unsigned i = 0; i < n; i++)
        o += (size_t)snprintf(got + o, sizeof(got) - o, "%s%d", i ? "," : "",
                              ddp_gpus_task_index(step, nstep, num, gpus[i]));
    is_str(got, want, "node GPUs as the task numbers them");
}

static void bound(const char *cvd, ddp_gpu_numbering_t num, long per_task, int local, int rc,
                  const char *want)
{
    int out[DDP_GPUS_MAX];
    unsigned n = 99;
    char got[256] = "";
    size_t o = 0;
    int r = ddp_gpus_task_bound(step, nstep, num, cvd, per_task, local, out, &n);

    for (unsigned i = 0; r == 0 && i < n; i++)
        o += (size_t)snprintf(got + o, sizeof(got) - o, "%s%d", i ? "," : "", out[i]);
    ok(r == rc && (r != 0 || !strcmp(got, want)),
       "task %d CUDA_VISIBLE_DEVICES=%s (%s, gpus per task %ld): rc %d GPUs '%s' (want %d '%s')",
       local, cvd ? cvd : "(unset)", num == DDP_GPUS_LOCAL ? "local" : "global", per_task, r, got,
       rc, want);
}

int main(void)
{
    int two_three[] = {3, 2}, five[] = {5};

    /* srun --gpus-per-node=2 on a node whose GPUs 0 and 1 another job holds */
    step_gpus("2,3");
    numbering("2,3", 0, DDP_GPUS_GLOBAL, "holds the node's indexes");
    numbering("0,1", 0, DDP_GPUS_LOCAL, "ConstrainDevices");
    numbering(NULL, 0, DDP_GPUS_GLOBAL, "no CUDA_VISIBLE_DEVICES");
    numbering("5", -1, DDP_GPUS_GLOBAL, "neither");
    numbering("0,7", -1, DDP_GPUS_GLOBAL, "neither");
    numbering("MIG-4f2b1e1c-8f0e-5d6c-9a3d-2c1b0a9f8e7d", -1, DDP_GPUS_GLOBAL, "MIG");
    numbering("GPU-8a6c1d0e-1111-2222-3333-444455556666,GPU-1", -1, DDP_GPUS_GLOBAL, "UUIDs");
    task_list(DDP_GPUS_GLOBAL, two_three, 2, "3,2");
    task_list(DDP_GPUS_LOCAL, two_three, 2, "1,0");
    task_list(DDP_GPUS_LOCAL, five, 1, "-1");

    /* the step's GPUs are 0..n-1: both numberings agree */
    step_gpus("0-3");
    numbering("0,1,2,3", 0, DDP_GPUS_GLOBAL, "agree");

    /* scattered GPUs and an unsorted list */
    step_gpus("7,1,4");
    numbering("0,1,2", 0, DDP_GPUS_LOCAL, "counts");
    numbering("1,4,7", 0, DDP_GPUS_GLOBAL, "node's");
    {
        int g[] = {7, 1, 4};
        task_list(DDP_GPUS_LOCAL, g, 3, "2,0,1");
    }

    /* srun -n4 --gpus-per-task=1 on GPUs 1-4: without cgroups each task's
     * CUDA_VISIBLE_DEVICES is its node GPU; with ConstrainDevices it is 0 */
    step_gpus("1-4");
    bound("3", DDP_GPUS_GLOBAL, 1, 2, 0, "3");
    bound("0", DDP_GPUS_LOCAL, 1, 2, 0, "3");
    bound("0", DDP_GPUS_LOCAL, 1, 0, 0, "1");
    bound("0,1", DDP_GPUS_LOCAL, 2, 1, 0, "3,4");
    bound("0", DDP_GPUS_LOCAL, -1, 2, -1, "");       /* --gpu-bind=map_gpu: cannot tell */
    bound("0", DDP_GPUS_LOCAL, 1, 4, -1, "");        /* past the step's GPUs */
    bound("9", DDP_GPUS_GLOBAL, 1, 0, -1, "");       /* not the step's */
    bound("1,2,3,4", DDP_GPUS_GLOBAL, -1, 0, 1, ""); /* all of them: not bound */
    bound("0-3", DDP_GPUS_LOCAL, -1, 0, 1, "");
    bound(NULL, DDP_GPUS_GLOBAL, 1, 0, 1, "");
    bound("MIG-1", DDP_GPUS_GLOBAL, 1, 0, 1, "");

    /* GPUs 0-3: task 1 of --gpus-per-task=1 sees "1" without cgroups and
     * "0" with them; both are node GPU 1 */
    step_gpus("0-3");
    bound("1", DDP_GPUS_GLOBAL, 1, 1, 0, "1");
    bound("0", DDP_GPUS_GLOBAL, 1, 1, 0, "1");
    bound("0", DDP_GPUS_GLOBAL, 1, 0, 0, "0");
    bound("2", DDP_GPUS_GLOBAL, -1, 1, 0, "2"); /* --gpu-bind=map_gpu:2,... without cgroups */
    bound("0", DDP_GPUS_GLOBAL, -1, 1, -1, ""); /* the same with them: cannot tell */

    /* parsing: ranges, and what is refused */
    {
        int v[8];
        unsigned n;
        ok(ddp_index_list_parse("0,2-4", v, 8, &n) == 0 && n == 4 && v[3] == 4, "0,2-4");
        ok(ddp_index_list_parse("0-8", v, 8, &n) < 0, "more than the room refused");
        ok(ddp_index_list_parse("99999999999", v, 8, &n) < 0, "a wrapping index refused");
        ok(ddp_index_list_parse("3-1", v, 8, &n) < 0, "a backwards range refused");
        ok(ddp_index_list_parse("1,,2", v, 8, &n) < 0, "an empty item refused");
        ok(ddp_index_list_parse("1x", v, 8, &n) < 0, "trailing junk refused");
    }
    return tap_done();
}
