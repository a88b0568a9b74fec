/* SPDX-License-Identifier: Apache-2.0 */
/* The commands' one way to fail, in a file of its own: every command calls
 * it, and it calls no command back. */
#include "cli.h"

int cli_fail(const char *what, const char *why, const char *todo)
{
    fprintf(stderr, "ddp-topo: %s: %s (%s)\n", what, why, todo);
    return -1;
}
