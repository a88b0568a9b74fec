/* SPDX-License-Identifier: Apache-2.0 */
/* slurmstepd: what the task's program tells about the user's intent: a
 * mode word as the program means `--ddp-topo auto` was written with a
 * space. (A launcher as the program: contract_launcher_name, which ddp-run
 * and the dry run share.) */
#include "plugin.h"

#include <string.h>

/* "env" alone is left out: /usr/bin/env is a real program a user may run
 * on purpose under --ddp-topo=auto. */
const char *ddp_mode_as_program(int argc, char **argv)
{
    static const char *const words[] = {"auto", "off", "auto,", "env,", "off,"};

    if (argc < 1 || !argv || !argv[0])
        return NULL;
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        size_t n = strlen(words[i]);
        if (words[i][n - 1] == ',' ? !strncmp(argv[0], words[i], n) : !strcmp(argv[0], words[i]))
            return argv[0];
    }
    return NULL;
}
