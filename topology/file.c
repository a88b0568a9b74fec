/* SPDX-License-Identifier: Apache-2.0 */
/* Reading input files that anyone may have planted: a topology file in a
 * directory users can write, a job script. One open, with O_NONBLOCK so a
 * FIFO cannot block us (slurmstepd waiting on a FIFO blocks the node), then
 * fstat on that descriptor (no second lookup by path a user could swap) to
 * insist on a regular file (/dev/zero is endless), and a size cap. */
#include "ddptopo.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int read_all(int fd, char *buf, size_t size, size_t *got)
{
    *got = 0;
    while (*got < size) {
        ssize_t n = read(fd, buf + *got, size - *got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        *got += (size_t)n;
    }
    return 0;
}

static int check_regular(int fd, const char *path, size_t max, size_t *size, dt_error_t *err)
{
    struct stat st;

    if (fstat(fd, &st) < 0) {
        topo_seterr_code(err, DT_E_FILE, "'%.300s': %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        topo_seterr_code(err, DT_E_FILE, "'%.300s' is not a regular file (a %s)", path,
                    S_ISFIFO(st.st_mode) ? "FIFO" : S_ISDIR(st.st_mode) ? "directory"
                    : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "device" : "socket");
        return -1;
    }
    if ((unsigned long long)st.st_size > max) {
        topo_seterr_code(err, DT_E_FILE, "'%.300s' is %lld bytes, over the limit of %zu bytes", path,
                    (long long)st.st_size, max);
        return -1;
    }
    *size = (size_t)st.st_size;
    return 0;
}

int dt_read_file(const char *path, size_t max, char **data, size_t *len, dt_error_t *err)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    size_t size = 0;
    char *buf = NULL;

    *data = NULL;
    *len = 0;
    if (fd < 0) {
        topo_seterr_code(err, DT_E_FILE, "'%.300s': %s", path, strerror(errno));
        return -1;
    }
    if (check_regular(fd, path, max, &size, err) < 0) {
        close(fd);
        return -1;
    }
    /* one byte more than fstat said: a file that grows while we read is
     * refused, never cut short */
    if (!(buf = malloc(size + 2)) || read_all(fd, buf, size + 1, len) < 0 || *len > size) {
        if (buf && *len > size)
            topo_seterr_code(err, DT_E_FILE, "'%.300s' grew while it was read (write it elsewhere, then "
                        "rename it into place)", path);
        else
            topo_seterr_code(err, DT_E_FILE, "'%.300s': %s", path, buf ? strerror(errno) : "out of memory");
        free(buf);
        close(fd);
        return -1;
    }
    close(fd);
    buf[*len] = '\0';
    *data = buf;
    return 0;
}

static int write_all(int fd, const char *buf, size_t len)
{
    while (len) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* A temporary beside the target (same filesystem), synced, then renamed
 * over it: readers see the old file or the new one. */
int topo_write_atomic(const char *path, const char *buf, size_t len, dt_error_t *err)
{
    char tmp[4096];
    int fd, saved;
    bool ok;

    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >= sizeof(tmp)) {
        topo_seterr(err, "cannot write '%.300s': the path is too long", path);
        return -1;
    }
    if ((fd = mkstemp(tmp)) < 0) {
        topo_seterr(err, "cannot write '%.300s': %s", path, strerror(errno));
        return -1;
    }
    ok = fchmod(fd, 0644) == 0 && write_all(fd, buf, len) == 0 && fsync(fd) == 0;
    saved = errno;
    if (close(fd) < 0 && ok) {
        ok = false;
        saved = errno;
    }
    if (ok && rename(tmp, path) < 0) {
        ok = false;
        saved = errno;
    }
    if (!ok) {
        unlink(tmp);
        topo_seterr(err, "cannot write '%.300s': %s", path, strerror(saved));
        return -1;
    }
    return 0;
}
