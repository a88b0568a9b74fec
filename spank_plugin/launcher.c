/* SPDX-License-Identifier: Apache-2.0 */
/* slurmstepd: what the task's program tells about the user's intent. A
 * launcher (torchrun and kin) under srun starts its own workers, which then
 * share one task's ranks, plan and ports; a mode word as the program means
 * `--ddp-topo auto` was written with a space. */
#include "plugin.h"

#include <string.h>

/* argv[0] without its directory */
static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');

    return slash ? slash + 1 : path;
}

/* python, python3, python3.11: the interpreter, not python-config */
static bool is_python(const char *name)
{
    if (strncmp(name, "python", 6))
        return false;
    return name[6 + strspn(name + 6, "0123456789.")] == '\0';
}

static bool is_torch_launch_module(const char *module)
{
    return !strcmp(module, "torch.distributed.run") || !strcmp(module, "torch.distributed.launch");
}

/* The module python runs with -m, NULL when it runs a script or -c: the
 * interpreter's options come first; -W and -X take the next argument. */
static const char *python_module(int argc, char **argv)
{
    for (int i = 1; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "-m"))
            return i + 1 < argc ? argv[i + 1] : NULL;
        if (!strncmp(argv[i], "-m", 2))
            return argv[i] + 2;
        if (!strcmp(argv[i], "-c") || !strcmp(argv[i], "-") || !strcmp(argv[i], "--"))
            return NULL;
        if (!strcmp(argv[i], "-W") || !strcmp(argv[i], "-X"))
            i++;
    }
    return NULL;
}

const char *ddp_launcher_name(int argc, char **argv)
{
    const char *name, *module;

    if (argc < 1 || !argv || !argv[0])
        return NULL;
    name = base_name(argv[0]);
    if (!strcmp(name, "torchrun"))
        return "torchrun";
    if (!strcmp(name, "deepspeed"))
        return "deepspeed";
    if (!strcmp(name, "accelerate") && argc > 1 && !strcmp(argv[1], "launch"))
        return "accelerate launch";
    if (is_python(name) && (module = python_module(argc, argv)) && is_torch_launch_module(module))
        return !strcmp(module, "torch.distributed.run") ? "python -m torch.distributed.run"
                                                        : "python -m torch.distributed.launch";
    return NULL;
}

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
