/* SPDX-License-Identifier: Apache-2.0 */
/* The #SBATCH reader of `ddp-topo report --sbatch FILE`. It is static in
 * topology/cli-report.c, so the seam is cmd_report itself with
 * `report --sbatch FILE --help`: the script is read and every option in it
 * applied (that is done first, so the command line can override it), then
 * --help stops before the report is built. */
#include "cli/cli.h"
#include "fuzz.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

/* ddp-topo.c's, which comes with main(): report failures silently, but
 * insist that they say something. */
int cli_fail(const char *what, const char *why, const char *todo)
{
    if (!what[0] || !why[0] || !todo[0])
        fuzz_fail("an empty error message");
    return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    char arg0[] = "report", arg1[] = "--sbatch", arg3[] = "--help";
    char path[64];
    char *argv[] = {arg0, arg1, path, arg3, NULL};

    if (!quiet++ && !freopen("/dev/null", "w", stdout)) /* --help's usage text */
        fuzz_fail("cannot redirect stdout");
    snprintf(path, sizeof(path), "%s", fuzz_file(data, size));
    optind = 0; /* glibc: start getopt afresh for each input */
    cmd_report(4, argv);
    return 0;
}
