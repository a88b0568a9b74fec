/* SPDX-License-Identifier: Apache-2.0 */
/* MASTER_PORT and DDPRT_PORT derivation, port ranges and
 * SLURM_STEP_RESV_PORTS. */
#include "ddptopo.h"
#include "tap.h"

/* Port n of a reserved list: the port, -1 (refused) or 0 (not that many). */
static void nth_is(const char *spec, unsigned n, long want, const char *what)
{
    uint16_t p = 0;
    dt_error_t err = {.code = DT_OK};
    int rc = dt_resv_ports_nth(spec, n, &p, &err);
    long got = rc < 0 ? -1 : rc > 0 ? 0 : p;

    ok(got == want && (rc >= 0 || strstr(err.text, "reserved ports")),
       "%s: '%s' port %u is %ld (want %ld) %s", what, spec, n, got, want, err.text);
}

typedef uint16_t (*derive_fn)(uint32_t job, uint32_t step, uint32_t restart, uint16_t lo,
                              uint16_t hi);

/* Steps 0-9 of consecutive jobs (concurrent jobs on one node) stay apart,
 * for jobs 1 to 5000 in the default range. */
static int jobs_apart(derive_fn port)
{
    int apart = 1;

    for (uint32_t job = 1; job < 5000; job++)
        for (uint32_t s = 0; s < 10; s++)
            for (uint32_t t = 0; t < 10; t++)
                apart &= port(job, s, 0, 61000, 65535) != port(job + 1, t, 0, 61000, 65535);
    return apart;
}

/* No step's DDPRT_PORT is a MASTER_PORT of its own job (same restart) for
 * jobs of up to span/2 steps, over several ranges (the default, odd spans,
 * two ports) and a sample of jobs and restarts. */
static int own_job_apart(uint16_t lo, uint16_t hi, uint32_t job, uint32_t restart)
{
    static unsigned char master[65536];
    uint32_t span = (uint32_t)hi - lo + 1, steps = span / 2 < 300 ? span / 2 : 300;
    int apart = 1;

    memset(master, 0, sizeof(master));
    for (uint32_t s = 0; s < steps; s++)
        master[dt_master_port(job, s, restart, lo, hi)] = 1;
    for (uint32_t s = 0; s < steps; s++) {
        uint16_t r = dt_runtime_port(job, s, restart, lo, hi);
        apart &= r >= lo && r <= hi && !master[r];
    }
    return apart;
}

/* consecutive jobs' first ten DDPRT_PORTs are none of the other's first
 * ten MASTER_PORTs */
static int jobs_cross_apart(void)
{
    int apart = 1;

    for (uint32_t job = 1; job < 5000; job++)
        for (uint32_t s = 0; s < 10; s++)
            for (uint32_t t = 0; t < 10; t++)
                apart &= dt_runtime_port(job, s, 0, 61000, 65535) !=
                             dt_master_port(job + 1, t, 0, 61000, 65535) &&
                         dt_master_port(job, s, 0, 61000, 65535) !=
                             dt_runtime_port(job + 1, t, 0, 61000, 65535);
    return apart;
}

/* No step's RAS port is a MASTER_PORT or DDPRT_PORT of its own job (same
 * restart) for jobs of up to span/4 steps, and it stays in the range. */
static int ras_apart(uint16_t lo, uint16_t hi, uint32_t job, uint32_t restart)
{
    static unsigned char taken[65536];
    uint32_t span = (uint32_t)hi - lo + 1, steps = span / 4 < 300 ? span / 4 : 300;
    int apart = 1;

    memset(taken, 0, sizeof(taken));
    for (uint32_t s = 0; s < (steps ? steps : 1); s++)
        taken[dt_master_port(job, s, restart, lo, hi)] =
            taken[dt_runtime_port(job, s, restart, lo, hi)] = 1;
    for (uint32_t s = 0; s < (steps ? steps : 1); s++) {
        uint16_t r = dt_ras_port(job, s, restart, lo, hi);
        apart &= r >= lo && r <= hi && !taken[r];
    }
    /* and never the same step's own, however many steps (a whole small span) */
    for (uint32_t s = 0; s < (span < 1100 ? span : 1100); s++) {
        uint16_t r = dt_ras_port(job, s, restart, lo, hi);
        apart &= r != dt_master_port(job, s, restart, lo, hi) &&
                 r != dt_runtime_port(job, s, restart, lo, hi);
    }
    return apart;
}

static void ras_ports(void)
{
    /* spans of 2 x odd (6, 10, 1002) put the slot on the step's own DDPRT_PORT */
    static const uint16_t ranges[][2] = {{61000, 65535}, {20000, 20002}, {1024, 65535},
                                         {30000, 30999}, {40000, 40006}, {20000, 20005},
                                         {40000, 40009}, {30000, 31001}};
    int apart = 1;

    for (size_t k = 0; k < sizeof(ranges) / sizeof(ranges[0]); k++)
        for (uint32_t job = 0; job < 3000; job += 7)
            for (uint32_t restart = 0; restart < 3; restart++)
                apart &= ras_apart(ranges[k][0], ranges[k][1], job, restart);
    ok(apart, "no step's RAS port is a MASTER_PORT or DDPRT_PORT of its own job (jobs of up to "
       "span/4 steps; a 3-port range: one each)");
    ok(dt_ras_port(7, 0, 0, 20000, 20001) == 0, "a two-port range leaves no RAS port (0)");
    ok(dt_ras_port(42, 3, 1, 61000, 65535) != dt_ras_port(42, 4, 1, 61000, 65535) &&
       dt_ras_port(42, 3, 1, 61000, 65535) != dt_ras_port(42, 3, 2, 61000, 65535),
       "steps and restarts move the RAS port");
    ok(dt_ras_port(UINT32_MAX, UINT32_MAX, UINT32_MAX, 1024, 65535) >= 1024,
       "extreme ids keep the RAS port in range");
}

static void runtime_ports(void)
{
    static const uint16_t ranges[][2] = {{61000, 65535}, {20000, 20002}, {20000, 20001},
                                         {1024, 65535}, {30000, 30999}};
    int apart = 1;

    for (size_t k = 0; k < sizeof(ranges) / sizeof(ranges[0]); k++)
        for (uint32_t job = 0; job < 3000; job += 7)
            for (uint32_t restart = 0; restart < 3; restart++)
                apart &= own_job_apart(ranges[k][0], ranges[k][1], job, restart);
    ok(apart, "no step's DDPRT_PORT is a MASTER_PORT of its own job (jobs of up to span/2 steps), "
       "and both stay in the range");
    ok(jobs_apart(dt_runtime_port), "consecutive jobs' first ten steps never share a DDPRT_PORT either");
    ok(jobs_cross_apart(), "... nor one's DDPRT_PORT the other's MASTER_PORT");
    ok(dt_master_port(1, 0, 0, 61000, 65535) == 61000 + (uint16_t)(((uint64_t)2654435769u * 4536) >> 32),
       "MASTER_PORT keeps the whole range (job 1, step 0 at its Fibonacci slot)");
    ok(dt_runtime_port(7, 0, 0, 20000, 20001) != dt_master_port(7, 0, 0, 20000, 20001),
       "a two-port range: one each");
    ok(dt_runtime_port(7, 0, 0, 29500, 29500) == 0, "a one-port range leaves no DDPRT_PORT (0)");
    ok(dt_runtime_port(UINT32_MAX, UINT32_MAX, UINT32_MAX, 1024, 65535) >= 1024,
       "extreme ids stay in range");
    ok(dt_runtime_port(42, 3, 1, 61000, 65535) != dt_runtime_port(42, 4, 1, 61000, 65535) &&
       dt_runtime_port(42, 3, 1, 61000, 65535) != dt_runtime_port(42, 3, 2, 61000, 65535),
       "steps and restarts move DDPRT_PORT as they move MASTER_PORT");
}

static void resv_nth(void)
{
    nth_is("12000-12003", 1, 12001, "the second of a reserved range");
    nth_is("12005,12009", 1, 12009, "the second of a reserved list");
    nth_is("12000-12000,12005-12006", 2, 12006, "ranges and lists mixed");
    nth_is("12005", 1, 0, "one reserved port: no second");
    nth_is("12000-12001", 2, 0, "past the end: none");
    nth_is("12000-12003", 0, 12000, "n = 0 is the first");
    nth_is("12003-12000", 1, -1, "a backward range is refused");
    nth_is("12000,x", 1, -1, "a bad second entry is refused");
    nth_is("12000;12001", 1, -1, "a bad separator is refused");
    nth_is("0,12001", 1, -1, "port 0 is refused");
    nth_is("", 0, -1, "an empty list is refused");
}

static void range_refused(const char *spec)
{
    uint16_t lo, hi;
    dt_error_t err = {.code = DT_OK};

    ok(dt_port_range_parse(spec, &lo, &hi, &err) < 0 && strstr(err.text, "port range"),
       "refuse port range '%s': %s", spec, err.text);
}

int main(void)
{
    uint16_t lo, hi, p;
    dt_error_t err;
    int in_range = 1, steps_differ = 1, restarts_differ = 1;

    ok(dt_port_range_parse("20000-20099", &lo, &hi, &err) == 0 && lo == 20000 && hi == 20099,
       "parse 20000-20099");
    ok(dt_port_range_parse("5000-5000", &lo, &hi, &err) == 0 && lo == hi, "a one-port range");
    range_refused("");
    range_refused("20000");
    range_refused("20000-");
    range_refused("30000-20000");
    range_refused("80-90");
    range_refused("60000-70000");
    range_refused("1000a-2000");
    range_refused("2000-3000x");

    ok(dt_resv_ports_first("12000-12003", &p, &err) == 0 && p == 12000, "resv range");
    ok(dt_resv_ports_first("12005,12009", &p, &err) == 0 && p == 12005, "resv list");
    ok(dt_resv_ports_first("12005", &p, &err) == 0 && p == 12005, "resv single");
    ok(dt_resv_ports_first("x", &p, &err) < 0 && strstr(err.text, "reserved ports"),
       "refuse resv 'x'");
    ok(dt_resv_ports_first("70000", &p, &err) < 0, "refuse resv 70000");

    for (uint32_t job = 1; job < 5000; job++) {
        for (uint32_t step = 0; step < 20; step++) {
            uint16_t a = dt_master_port(job, step, 0, 61000, 65535);
            uint16_t b = dt_master_port(job, step + 1, 0, 61000, 65535);
            uint16_t c = dt_master_port(job, step, 1, 61000, 65535);
            in_range &= a >= 61000;
            steps_differ &= a != b;
            restarts_differ &= a != c;
        }
    }
    ok(in_range, "derived ports stay in 61000-65535");
    ok(steps_differ, "consecutive steps get different ports");
    ok(restarts_differ, "a restart gets a different port");
    ok(jobs_apart(dt_master_port), "consecutive jobs' first ten steps never share a port");
    ok(dt_master_port(42, 3, 1, 61000, 65535) == dt_master_port(42, 3, 1, 61000, 65535),
       "same inputs, same port (every node agrees)");
    ok(dt_master_port(7, 0, 0, 29500, 29500) == 29500, "a one-port range gives that port");
    ok(dt_master_port(UINT32_MAX, UINT32_MAX, UINT32_MAX, 1024, 65535) >= 1024,
       "extreme ids stay in range");
    runtime_ports();
    ras_ports();
    resv_nth();
    return tap_done();
}
