/* MASTER_PORT derivation, port ranges and SLURM_STEP_RESV_PORTS. */
#include "ddptopo.h"
#include "tap.h"

static void range_refused(const char *spec)
{
    uint16_t lo, hi;
    dt_error_t err = {{0}};

    ok(dt_port_range_parse(spec, &lo, &hi, &err) < 0 && strstr(err.text, "port range"),
       "refuse port range '%s': %s", spec, err.text);
}

int main(void)
{
    uint16_t lo, hi, p;
    dt_error_t err;
    int in_range = 1, steps_differ = 1, restarts_differ = 1, jobs_differ = 1;

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
        /* steps 0-9 of consecutive jobs (concurrent jobs on one node) stay apart */
        for (uint32_t s = 0; s < 10; s++)
            for (uint32_t t = 0; t < 10; t++)
                jobs_differ &= dt_master_port(job, s, 0, 61000, 65535) !=
                               dt_master_port(job + 1, t, 0, 61000, 65535);
    }
    ok(in_range, "derived ports stay in 61000-65535");
    ok(steps_differ, "consecutive steps get different ports");
    ok(restarts_differ, "a restart gets a different port");
    ok(jobs_differ, "consecutive jobs' first ten steps never share a port");
    ok(dt_master_port(42, 3, 1, 61000, 65535) == dt_master_port(42, 3, 1, 61000, 65535),
       "same inputs, same port (every node agrees)");
    ok(dt_master_port(7, 0, 0, 29500, 29500) == 29500, "a one-port range gives that port");
    ok(dt_master_port(UINT32_MAX, UINT32_MAX, UINT32_MAX, 1024, 65535) >= 1024,
       "extreme ids stay in range");
    return tap_done();
}
