/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-topo check-config: a plugstack.conf line's arguments, checked before
 * it is deployed with the plugin's own parser (spank_plugin/config.c), so
 * that the answer is the one every node will give. */
#include "config.h"
#include "cli.h"

#include <stdlib.h>
#include <string.h>

#define USAGE_CHECK_CONFIG \
    "Usage: ddp-topo check-config 'ARGS'\n" \
    "Check the arguments of a ddp_topo.so line in plugstack.conf (ARGS as written\n" \
    "there, after the plugin's path) with the plugin's own parser: print the\n" \
    "settings every job gets, or the error the plugin would log (exit 1).\n"

#ifdef DDP_CHECK_CONFIG
#include "plugin.h"

static void print_config(const ddp_config_t *c)
{
    char bind[64], warning[DDP_ERRLEN];

    printf("default: %s\n", ddp_mode_name(c->default_mode));
    printf("port_range: %u-%u\n", c->port_lo, c->port_hi);
    if (ddp_port_range_warning(c, DDP_EPHEMERAL_PATH, warning, sizeof(warning)))
        printf("  warning: %s\n", warning);
    printf("topology: %s\n", c->topology);
    printf("bind: %s\n", dt_bind_name(c->bind, bind, sizeof(bind)));
    printf("check: %s\n", c->checker);
    printf("disable: %s\n", c->disabled ? "yes (--ddp-topo is accepted and sets nothing)" : "no");
}

/* Split as SLURM splits a plugstack.conf line: on blanks. */
static int check_words(char *line)
{
    size_t max = strlen(line) / 2 + 1, n = 0;
    char **av = malloc(max * sizeof(*av)), *save = NULL, err[DDP_ERRLEN];
    ddp_config_t cfg;
    int rc;

    if (!av)
        return cli_fail("check-config", "out of memory", "retry");
    for (char *w = strtok_r(line, " \t\n", &save); w; w = strtok_r(NULL, " \t\n", &save))
        av[n++] = w;
    rc = ddp_config_parse((int)n, av, &cfg, err, sizeof(err));
    free(av);
    if (rc < 0) {
        fprintf(stderr, "ddp-topo: %s (" DDP_FIX_PLUGSTACK ")\n", err);
        return -1;
    }
    print_config(&cfg);
    return 0;
}

int cmd_check_config(int argc, char **argv)
{
    size_t len = 1;
    char *line;
    int rc;

    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(USAGE_CHECK_CONFIG, stdout);
        return 0;
    }
    /* every argument is part of the line: 'a b' and a b say the same */
    for (int i = 1; i < argc; i++)
        len += strlen(argv[i]) + 1;
    line = calloc(len, 1);
    if (!line)
        return cli_fail("check-config", "out of memory", "retry");
    for (int i = 1; i < argc; i++)
        strcat(strcat(line, argv[i]), " ");
    rc = check_words(line);
    free(line);
    return rc;
}
#else
int cmd_check_config(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_fail("check-config", "this ddp-topo was built without the SPANK plugin",
                    "run the ddp-topo of a build with SLURM's headers: configure without "
                    "--disable-plugin");
}
#endif
