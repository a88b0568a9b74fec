/* SPDX-License-Identifier: Apache-2.0 */
/* Whether a file only root can change: the rule for what the plugin reads
 * or runs as root for every job (topology files, the preflight checker),
 * and what `ddp-topo detect -o` and `check-config` hold a file to before
 * the plugin meets it. */
#include "ddptopo.h"
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* Why `st` may not be part of a trusted path, or NULL: only root may be
 * able to change the file or any directory above it (as sshd checks
 * authorized_keys), since a user who can would choose the binding, or plant
 * a FIFO or a hostile file, for every job on the node. A root-owned sticky
 * directory (/tmp) is the exception: others may add entries there but can
 * neither rename nor replace root's, and the next component is checked. */
static const char *untrusted(const struct stat *st)
{
    if (st->st_uid != 0)
        return "not owned by root";
    if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(S_ISDIR(st->st_mode) && (st->st_mode & S_ISVTX)))
        return "writable by users other than root";
    return NULL;
}

int dt_path_trusted(const char *what, const char *file, const char *real, const char *advice,
                    dt_error_t *err)
{
    char dir[PATH_MAX];
    struct stat st;
    const char *why;

    snprintf(dir, sizeof(dir), "%s", real);
    for (;;) {
        if (stat(dir[0] ? dir : "/", &st) < 0) {
            topo_seterr(err, "%s '%.300s': cannot check '%.300s': %s", what, file,
                        dir[0] ? dir : "/", strerror(errno));
            return -1;
        }
        if ((why = untrusted(&st))) {
            topo_seterr(err, "%s '%.300s' refused: %s '%.300s' is %s (admin: %s)", what, file,
                        S_ISDIR(st.st_mode) ? "directory" : "file", dir[0] ? dir : "/", why,
                        advice);
            return -1;
        }
        if (!dir[0])
            return 0;
        *strrchr(dir, '/') = '\0';
    }
}
