/* SPDX-License-Identifier: Apache-2.0 */
/* Port inputs: line 1 the admin's port_range ("61000-65535"), line 2
 * SLURM_STEP_RESV_PORTS ("12000-12003,12010"). A derived MASTER_PORT must
 * stay inside the range it was derived from. */
#include "ddptopo.h"
#include "fuzz.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int n;
    char **line = fuzz_lines(data, size, &n);
    uint16_t lo, hi, port;
    dt_error_t err = {.code = DT_OK};

    if (dt_port_range_parse(line[0], &lo, &hi, &err) == 0) {
        /* job, step and restart from the input, so all of them vary */
        uint32_t id[3] = {0, 0, 0};
        memcpy(id, data, size < sizeof(id) ? size : sizeof(id));
        port = dt_master_port(id[0], id[1], id[2], lo, hi);
        if (lo < 1024 || lo > hi || port < lo || port > hi)
            fuzz_fail("range '%.100s' is %u-%u, MASTER_PORT %u", line[0], lo, hi, port);
    } else if (!err.text[0]) {
        fuzz_fail("port range '%.100s' refused without a message", line[0]);
    }
    err.text[0] = '\0';
    if (n > 1 && dt_resv_ports_first(line[1], &port, &err) == 0 && port == 0)
        fuzz_fail("reserved ports '%.100s' give port 0", line[1]);
    fuzz_lines_free(line);
    return 0;
}
