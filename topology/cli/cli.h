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

/* plugstack.c: the ddp_topo.so lines of a plugstack.conf and its includes */
typedef struct {
    char file[512];
    unsigned lineno;
    char *text;          /* "required /path/ddp_topo.so ARGS", comment removed */
} cli_plug_line_t;
typedef struct {
    char path[512];      /* the plugstack.conf read (PlugStackConfig when not given) */
    cli_plug_line_t *lines;
    unsigned n;
} cli_plug_lines_t;
/* path NULL: the deployed one (slurm.conf's PlugStackConfig) */
int cli_plugstack_read(const char *path, cli_plug_lines_t *out, dt_error_t *err);
void cli_plugstack_free(cli_plug_lines_t *lines);

#endif
