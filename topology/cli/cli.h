/* SPDX-License-Identifier: Apache-2.0 */
/* The ddp-topo command's subcommands, shared between its source files. */
#ifndef DDP_TOPO_CLI_H
#define DDP_TOPO_CLI_H

#include <stdio.h>

#include "ddptopo.h"

/* Print "ddp-topo: WHAT: WHY (TODO)" and return -1 (exit status 1). */
int cli_fail(const char *what, const char *why, const char *todo);

int cmd_report(int argc, char **argv);
int cmd_detect(int argc, char **argv);
int cmd_check_config(int argc, char **argv);

#endif
