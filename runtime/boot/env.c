/* SPDX-License-Identifier: Apache-2.0 */
/* The environment contract between the launcher (SPANK plugin, ddp-run,
 * torchrun) and the runtime. */
#include "../internal.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int get_u32(const char *(*get)(const char *), const char *name, int required,
                   uint32_t *v, drt_error_t *err)
{
    const char *s = get(name);
    char *end;
    unsigned long x;

    if (!s || !*s) {
        const char *asked = get(DRT_ENV_SPANK_OPTION);
        *v = 0;
        if (required && asked && *asked)
            return rt_fail(err, "%s is not set, though this job asked for --ddp-topo=%.40s: "
                           "the ddp-topo plugin did not run for it (its plugstack.conf line "
                           "was removed after the job was queued? ask your admin, or "
                           "resubmit)", name, asked);
        return required ? rt_fail(err, "%s is not set (launch with srun --ddp-topo or "
                                "ddp-run)", name) : 0;
    }
    errno = 0;
    x = strtoul(s, &end, 10);
    if (!isdigit((unsigned char)*s) || *end || errno || x > UINT32_MAX)
        return rt_fail(err, "%s='%.40s' is not a non-negative integer", name, s);
    *v = (uint32_t)x;
    return 0;
}

static int check_below(const char *a, uint32_t av, const char *b, uint32_t bv, drt_error_t *err)
{
    if (av < bv)
        return 0;
    return rt_fail(err, "%s=%u is not below %s=%u (the launcher's variables disagree)", a, av, b, bv);
}

/* runtime_port fills what was tail padding: programs built against the
 * header without it pass a struct of the same size. */
_Static_assert(sizeof(drt_env_t) == 288 && offsetof(drt_env_t, runtime_port) == 286,
               "drt_env_t's size or layout changed: that breaks libddprt's ABI");

static int check_port(const char *name, uint32_t port, drt_error_t *err)
{
    if (port == 0 || port > 65535)
        return rt_fail(err, "%s=%u is not a TCP port (1-65535)", name, port);
    return 0;
}

int drt_env_load(drt_env_t *env, const char *(*get)(const char *name), drt_error_t *err)
{
    drt_env_t e = {0};
    const char *addr = get(DRT_ENV_MASTER_ADDR);
    uint32_t port, runtime_port;

    if (get_u32(get, DRT_ENV_RANK, 1, &e.rank, err) ||
        get_u32(get, DRT_ENV_WORLD_SIZE, 1, &e.world_size, err) ||
        get_u32(get, DRT_ENV_LOCAL_RANK, 1, &e.local_rank, err) ||
        get_u32(get, DRT_ENV_LOCAL_WORLD_SIZE, 1, &e.local_world_size, err) ||
        get_u32(get, DRT_ENV_GROUP_RANK, 1, &e.node_rank, err) ||
        get_u32(get, DRT_ENV_GROUP_WORLD_SIZE, 1, &e.node_count, err) ||
        get_u32(get, DRT_ENV_RESTART_COUNT, 0, &e.restart_count, err) ||
        get_u32(get, DRT_ENV_MASTER_PORT, 1, &port, err) ||
        get_u32(get, DRT_ENV_PORT, 0, &runtime_port, err))
        return -1;
    if (check_below(DRT_ENV_RANK, e.rank, DRT_ENV_WORLD_SIZE, e.world_size, err) ||
        check_below(DRT_ENV_LOCAL_RANK, e.local_rank, DRT_ENV_LOCAL_WORLD_SIZE,
                    e.local_world_size, err) ||
        check_below(DRT_ENV_GROUP_RANK, e.node_rank, DRT_ENV_GROUP_WORLD_SIZE, e.node_count, err))
        return -1;
    if (e.local_world_size > e.world_size || e.node_count > e.world_size)
        return rt_fail(err, "LOCAL_WORLD_SIZE=%u or GROUP_WORLD_SIZE=%u exceeds WORLD_SIZE=%u",
                    e.local_world_size, e.node_count, e.world_size);
    if (check_port(DRT_ENV_MASTER_PORT, port, err) ||
        (get(DRT_ENV_PORT) && *get(DRT_ENV_PORT) && check_port(DRT_ENV_PORT, runtime_port, err)))
        return -1;
    if (!addr || !*addr || strlen(addr) >= sizeof(e.master_addr))
        return rt_fail(err, "MASTER_ADDR is %s", addr && *addr ? "longer than 255 characters"
                                                            : "not set");
    e.master_port = (uint16_t)port;
    e.runtime_port = (uint16_t)(runtime_port ? runtime_port : port);
    memcpy(e.master_addr, addr, strlen(addr) + 1);
    *env = e;
    return 0;
}
