/* SPDX-License-Identifier: Apache-2.0 */
/* The ddp-topo command's subcommands, shared between its source files. */
#ifndef DDP_TOPO_CLI_H
#define DDP_TOPO_CLI_H

#include <stdio.h>

#include "ddptopo.h"

/* fail.c: print "ddp-topo: WHAT: WHY (TODO)" and return -1 (exit status 1). */
int cli_fail(const char *what, const char *why, const char *todo);

/* the commands, each in a file of its own: cmd-report.c, cmd-detect.c,
 * check-config.c, cmd-trace.c */
int cmd_report(int argc, char **argv);
int cmd_trace(int argc, char **argv);
int cmd_detect(int argc, char **argv);
int cmd_check_config(int argc, char **argv);

/* lint.c: what in a job script's body undoes ddp-topo */
typedef struct {
    long line, last;     /* the command's first and last line (continued with \) */
    char what[64];       /* "a fixed MASTER_PORT" */
    char fix[700];       /* why it is wrong and what to write instead */
    char *convert;       /* the command to write instead (malloc'd), or NULL */
    size_t off, len;     /* the word to delete, from the command's start; len 0: none */
} cli_finding_t;
typedef struct {
    cli_finding_t *v;
    unsigned n;
    int oom;
    const char *base;            /* the command being read */
    size_t span_off, span_len;   /* its word the next finding is about */
} cli_lint_t;
/* The patterns of one command line of the script's body (lines line..last,
 * joined) that undo what ddp-topo sets up: a launcher as srun's program, a
 * MASTER_PORT or MASTER_ADDR of the script's own, ranks from SLURM's
 * variables. */
void cli_lint_line(cli_lint_t *l, const char *line, long lineno, long last);
/* The problems, each with its line as written (original: the whole
 * script), what is wrong and what to write; and the script converted:
 * launchers replaced, the flagged words deleted. */
void cli_lint_print(const cli_lint_t *l, const char *original, const char *path, FILE *f);
/* mode_after >= 0: add "#SBATCH --ddp-topo=auto" after that line (the
 * script never asks for ddp-topo) */
void cli_lint_convert(const cli_lint_t *l, const char *original, long mode_after, FILE *f);
void cli_lint_free(cli_lint_t *l);

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
