/* SPDX-License-Identifier: Apache-2.0 */
/* The plugin's outside inputs, through spank_plugin/config.c (compiled here
 * without SLURM, as tests/unit/test-config does): line 1 as a --ddp-topo
 * value or DDP_TOPO, and as a --ddp-topo-bind value; all lines as
 * plugstack.conf arguments. A refusal must say why. */
#include "fuzz.h"
#include "plugin.h"

#include <string.h>

static void refused(const char *what, const char *input, const char *err)
{
    if (!err[0] || !memchr(err, '\0', DDP_ERRLEN))
        fuzz_fail("%s '%.200s' refused without a message", what, input);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int n;
    char **line = fuzz_lines(data, size, &n);
    char err[DDP_ERRLEN] = "";
    ddp_request_t req;
    ddp_config_t cfg;
    unsigned bind;

    if (ddp_request_parse(line[0], &req, err, sizeof(err)) < 0)
        refused("--ddp-topo", line[0], err);
    else if (req.mode != DDP_MODE_OFF && req.mode != DDP_MODE_ENV && req.mode != DDP_MODE_AUTO)
        fuzz_fail("--ddp-topo '%.200s' gives mode %d", line[0], (int)req.mode);
    err[0] = '\0';
    if (ddp_bind_option_parse(line[0], &bind, err, sizeof(err)) < 0)
        refused("--ddp-topo-bind", line[0], err);
    err[0] = '\0';
    if (ddp_config_parse(n, line, &cfg, err, sizeof(err)) < 0)
        refused("plugstack argument", line[0], err);
    else if (cfg.port_lo > cfg.port_hi || !memchr(cfg.topology, '\0', sizeof(cfg.topology)))
        fuzz_fail("plugstack arguments '%.200s'... give ports %u-%u", line[0], cfg.port_lo,
                  cfg.port_hi);
    fuzz_lines_free(line);
    return 0;
}
