/* SPDX-License-Identifier: Apache-2.0 */
/* hwloc's XML plugin points libxml2's generic error handler into itself and
 * leaves it there when hwloc unloads the plugin (at the last topology's
 * destroy); the next libxml2 error anywhere in the process then jumps into
 * unmapped memory. After our loads the handler must lie in a loaded object. */
#define _GNU_SOURCE
#include "ddptopo.h"
#include "tap.h"

#include <dlfcn.h>
#include <libxml/xmlerror.h>
#include <libxml/globals.h>
#include <stdlib.h>

static void load_then_check(const char *top, const char *fixture)
{
    char path[4096];
    dt_error_t err = {.code = DT_OK};
    dt_node_t node;
    Dl_info info = {0};
    int mapped;

    snprintf(path, sizeof(path), "%s/tests/fixtures/%s", top, fixture);
    ok(dt_node_load_file(&node, path, &err) == 0, "%s loads: %s", fixture, err.text);
    dt_node_free(&node);
    mapped = dladdr((void *)xmlGenericError, &info) != 0;
    ok(mapped,
       "after loading %s, libxml2's generic error handler (%p) is in a loaded object (%s), "
       "not in hwloc's unloaded XML plugin", fixture, (void *)xmlGenericError,
       info.dli_fname ? info.dli_fname : "none");
}

int main(void)
{
    const char *top = getenv("top_srcdir");

    top = top ? top : ".";
    load_then_check(top, "hwloc-llnl-quartz-nogpu-opa.xml");
    load_then_check(top, "nccl-azure-ndv4-topo.xml");
    load_then_check(top, "hwloc-nvidia-dgx2-v100-nvswitch.xml");
    printf("1..%d\n", tap_n);
    return tap_failed != 0;
}
