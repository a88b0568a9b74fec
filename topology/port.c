/* MASTER_PORT: reserved by SLURM when it can, derived otherwise. */
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
    const char *p = spec ? spec : "";
    unsigned long v;

    if (parse_port(&p, &v) < 0 || v == 0 || (*p && *p != '-' && *p != ',')) {
        topo_seterr(err, "reserved ports '%.100s': expected a list like 12000-12003 or "
                    "12000,12004", spec ? spec : "");
        return -1;
    }
    *port = (uint16_t)v;
    return 0;
}

uint16_t dt_master_port(uint32_t job_id, uint32_t step_id, uint32_t restart_count,
                        uint16_t lo, uint16_t hi)
{
    uint64_t span = (uint64_t)hi - lo + 1;
    /* Fibonacci hashing: consecutive job ids land about 0.618 of the range
     * apart, far from each other's step ports. */
    uint32_t h = job_id * 2654435769u;
    uint64_t base = ((uint64_t)h * span) >> 32;
    uint64_t off = base + step_id + (uint64_t)restart_count * RESTART_STRIDE;

    return (uint16_t)(lo + off % span);
}
