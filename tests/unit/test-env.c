/* SPDX-License-Identifier: Apache-2.0 */
/* The runtime's reading of the launch environment contract. */
#include "ddprt.h"
#include "tap.h"

/* A fake environment: name=value pairs the test edits. */
static const char *vars[][2] = {
    {"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
    {"GROUP_RANK", "1"}, {"GROUP_WORLD_SIZE", "2"}, {"MASTER_ADDR", "n1"},
    {"MASTER_PORT", "61234"}, {"TORCHELASTIC_RESTART_COUNT", "2"}, {"DDPRT_PORT", NULL},
    {"SLURM_SPANK__SLURM_SPANK_OPTION_ddp_topo_ddp_topo", NULL}};
#define NVARS (sizeof(vars) / sizeof(vars[0]))

static const char *lookup(const char *name)
{
    for (size_t i = 0; i < NVARS; i++)
        if (!strcmp(vars[i][0], name))
            return vars[i][1];
    return NULL;
}

static void set(const char *name, const char *value)
{
    for (size_t i = 0; i < NVARS; i++)
        if (!strcmp(vars[i][0], name))
            vars[i][1] = value;
}

static void refused(const char *name, const char *value, const char *why)
{
    const char *old = lookup(name);
    drt_env_t env;
    drt_error_t err = {{0}};

    set(name, value);
    ok(drt_env_load(&env, lookup, &err) < 0 && strstr(err.text, why),
       "%s=%s refused: %s", name, value ? value : "(unset)", err.text);
    set(name, old);
}

int main(void)
{
    drt_env_t env;
    drt_error_t err;

    ok(drt_env_load(&env, lookup, &err) == 0 && env.rank == 3 && env.world_size == 4 &&
       env.local_rank == 1 && env.local_world_size == 2 && env.node_rank == 1 &&
       env.node_count == 2 && env.master_port == 61234 && !strcmp(env.master_addr, "n1") &&
       env.restart_count == 2, "a consistent environment loads");
    set("TORCHELASTIC_RESTART_COUNT", NULL);
    ok(drt_env_load(&env, lookup, &err) == 0 && env.restart_count == 0,
       "restart count is optional");
    refused("RANK", NULL, "RANK is not set (launch with srun --ddp-topo or ddp-run)");
    /* a job queued with --ddp-topo whose plugin was taken away before it ran */
    set("SLURM_SPANK__SLURM_SPANK_OPTION_ddp_topo_ddp_topo", "auto");
    refused("RANK", NULL, "RANK is not set, though this job asked for --ddp-topo=auto: the "
            "ddp-topo plugin did not run for it (its plugstack.conf line was removed after the "
            "job was queued? ask your admin, or resubmit)");
    set("SLURM_SPANK__SLURM_SPANK_OPTION_ddp_topo_ddp_topo", NULL);
    refused("RANK", "4", "not below WORLD_SIZE");
    refused("RANK", "-1", "not a non-negative integer");
    refused("RANK", "1x", "not a non-negative integer");
    refused("LOCAL_RANK", "2", "LOCAL_RANK=2 is not below");
    refused("GROUP_RANK", "2", "GROUP_RANK=2 is not below");
    refused("LOCAL_WORLD_SIZE", "5", "exceeds WORLD_SIZE");
    refused("MASTER_PORT", "0", "not a TCP port");
    refused("MASTER_PORT", "65536", "not a TCP port");
    ok(env.runtime_port == 61234, "without DDPRT_PORT the runtime uses MASTER_PORT (%u)",
       env.runtime_port);
    set("DDPRT_PORT", "64001");
    ok(drt_env_load(&env, lookup, &err) == 0 && env.runtime_port == 64001 &&
       env.master_port == 61234, "DDPRT_PORT is the runtime's port, MASTER_PORT stays torch's");
    refused("DDPRT_PORT", "0", "DDPRT_PORT=0 is not a TCP port");
    refused("DDPRT_PORT", "65536", "DDPRT_PORT=65536 is not a TCP port");
    refused("DDPRT_PORT", "6x", "DDPRT_PORT='6x' is not a non-negative integer");
    set("DDPRT_PORT", "");
    ok(drt_env_load(&env, lookup, &err) == 0 && env.runtime_port == 61234,
       "an empty DDPRT_PORT counts as unset");
    ok(sizeof(drt_env_t) == 288, "drt_env_t keeps its size (%zu): the ABI holds", sizeof(drt_env_t));
    refused("MASTER_ADDR", NULL, "MASTER_ADDR is not set");
    refused("MASTER_ADDR", "", "MASTER_ADDR is not set");
    return tap_done();
}
