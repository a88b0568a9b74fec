/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-topo trace DIR: the verdict on a run's flight recorder dumps. */
#include "cli.h"

#include <getopt.h>
#include <string.h>

#define USAGE_TRACE \
    "Usage: ddp-topo trace [--format text|json] DIR\n" \
    "Read the flight recorder's dumps of one run (DIR/ddprt-trace.RANK, written by\n" \
    "libddprt when DDPRT_TRACE_DIR=DIR is set and a collective fails or the rank gets\n" \
    "SIGURG) and say: the last collective done on every rank that dumped, the first\n" \
    "unfinished one and where each rank was (entered it and never left, failed in\n" \
    "it, never entered it, left no dump), the first collective the ranks issued\n" \
    "differently, and each rank's reason; then a one-line verdict. See ddp-topo(1).\n"

int cmd_trace(int argc, char **argv)
{
    static const struct option opts[] = {{"format", required_argument, NULL, 'f'},
                                         {"help", no_argument, NULL, 'h'}, {0}};
    dt_format_t fmt = DT_FORMAT_TEXT;
    dt_trace_t *t;
    dt_error_t err;
    int c, rc;

    while ((c = getopt_long(argc, argv, "f:h", opts, NULL)) != -1) {
        switch (c) {
        case 'f':
            if (!strcmp(optarg, "json"))
                fmt = DT_FORMAT_JSON;
            else if (strcmp(optarg, "text"))
                return cli_fail("trace", "--format is text or json", "e.g. --format json");
            break;
        case 'h': return fputs(USAGE_TRACE, stdout), 0;
        default: return cli_fail("trace", "unknown option", "see 'ddp-topo trace --help'");
        }
    }
    if (optind + 1 != argc)
        return cli_fail("trace", "one directory expected", "ddp-topo trace DDPRT_TRACE_DIR");
    if (dt_trace_load(argv[optind], &t, &err) < 0)
        return cli_fail("trace", err.text, "see 'ddp-topo trace --help'");
    rc = dt_trace_write(t, fmt, stdout);
    dt_trace_free(t);
    return rc < 0 ? cli_fail("trace", "cannot write the verdict", "check standard output") : 0;
}
