/* SPDX-License-Identifier: Apache-2.0 */
/* MASTER_PORT, DDPRT_PORT and NCCL's RAS port: reserved by SLURM when it
 * can, derived otherwise. */
#include "ddptopo.h"
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

/* Restarts move the port by a stride no step count reaches in practice, so
 * step s after a requeue does not reuse the port of step s before it. */
#define RESTART_STRIDE 97u

static int parse_port(const char **p, unsigned long *v)
{
    char *end;

    if (!isdigit((unsigned char)**p))
        return -1;
    errno = 0;
    *v = strtoul(*p, &end, 10);
    if (errno || *v > 65535)
        return -1;
    *p = end;
    return 0;
}

int dt_port_range_parse(const char *spec, uint16_t *lo, uint16_t *hi, dt_error_t *err)
{
    const char *p = spec ? spec : "";
    unsigned long a, b;

    if (parse_port(&p, &a) < 0 || *p++ != '-' || parse_port(&p, &b) < 0 || *p ||
        a < 1024 || a > b) {
        topo_seterr(err, "port range '%.100s': expected LO-HI with 1024 <= LO <= HI <= 65535",
                    spec ? spec : "");
        return -1;
    }
    *lo = (uint16_t)a;
    *hi = (uint16_t)b;
    return 0;
}

int dt_resv_ports_first(const char *spec, uint16_t *port, dt_error_t *err)
{
    return dt_resv_ports_nth(spec, 0, port, err) < 0 ? -1 : 0;
}

/* A job's base slot in a span of ports: Fibonacci hashing puts consecutive
 * job ids about 0.618 of the span apart, far from each other's steps. A
 * restart moves it by RESTART_STRIDE. */
static uint64_t job_base(uint32_t job_id, uint32_t restart_count, uint64_t span)
{
    uint32_t h = job_id * 2654435769u;

    return (((uint64_t)h * span) >> 32) + (uint64_t)restart_count * RESTART_STRIDE;
}

uint16_t dt_master_port(uint32_t job_id, uint32_t step_id, uint32_t restart_count,
                        uint16_t lo, uint16_t hi)
{
    uint64_t span = (uint64_t)hi - lo + 1;

    return (uint16_t)(lo + (job_base(job_id, restart_count, span) + step_id) % span);
}

/* Mirrored: MASTER_PORT counts up from the job's base, DDPRT_PORT down from
 * the slot below it, so no step's DDPRT_PORT is any MASTER_PORT of its job
 * (of the same restart) until the job has run span/2 steps, and MASTER_PORT
 * keeps the whole range. */
uint16_t dt_runtime_port(uint32_t job_id, uint32_t step_id, uint32_t restart_count,
                         uint16_t lo, uint16_t hi)
{
    uint64_t span = (uint64_t)hi - lo + 1;

    if (span < 2)
        return 0; /* one port: MASTER_PORT has it */
    return (uint16_t)(lo + (job_base(job_id, restart_count, span) + span - 1 - step_id % span) %
                               span);
}

/* Half a span from MASTER_PORT, counting up: a step's NCCL RAS port is no
 * MASTER_PORT or DDPRT_PORT of its job (of the same restart) while the job
 * has run fewer than floor(span/4) steps. For some spans the slot meets the
 * step's own DDPRT_PORT (or MASTER_PORT): then the next free one is taken. */
uint16_t dt_ras_port(uint32_t job_id, uint32_t step_id, uint32_t restart_count, uint16_t lo,
                     uint16_t hi)
{
    uint64_t span = (uint64_t)hi - lo + 1, slot;
    uint16_t master = dt_master_port(job_id, step_id, restart_count, lo, hi),
             runtime = dt_runtime_port(job_id, step_id, restart_count, lo, hi), port;

    if (span < 3)
        return 0; /* MASTER_PORT and DDPRT_PORT have it */
    slot = job_base(job_id, restart_count, span) + span / 2 + step_id;
    do
        port = (uint16_t)(lo + slot++ % span);
    while (port == master || port == runtime);
    return port;
}

int dt_resv_ports_nth(const char *spec, unsigned n, uint16_t *port, dt_error_t *err)
{
    const char *p = spec ? spec : "";
    unsigned long a, b;

    for (;;) {
        if (parse_port(&p, &a) < 0 || a == 0)
            break;
        b = a;
        if (*p == '-' && (p++, parse_port(&p, &b) < 0 || b < a))
            break;
        if (n <= b - a) {
            *port = (uint16_t)(a + n);
            return 0;
        }
        n -= (unsigned)(b - a + 1);
        if (!*p)
            return 1;
        if (*p++ != ',')
            break;
    }
    topo_seterr(err, "reserved ports '%.100s': expected a list like 12000-12003 or "
                "12000,12004", spec ? spec : "");
    return -1;
}
