/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-train's outputs and inputs, opened safely (files.h says what each
 * promises; topology/file.c reads the topology the same way). */
#define _POSIX_C_SOURCE 200809L /* O_NOFOLLOW, O_CLOEXEC, fdopen */
#include "files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind(mode_t mode)
{
    return S_ISFIFO(mode) ? "a FIFO" : S_ISDIR(mode) ? "a directory"
           : S_ISCHR(mode) || S_ISBLK(mode) ? "a device" : S_ISSOCK(mode) ? "a socket"
           : "not a file";
}

/* closes fd (when open) and says why; always NULL */
static FILE *refuse(int fd, char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    int saved = errno;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    if (fd >= 0)
        close(fd);
    errno = saved;
    return NULL;
}

/* The descriptor, blocking again (a regular file never waits anyway) and
 * buffered; NULL when that fails. */
static FILE *as_stream(int fd, const char *mode)
{
    int flags = fcntl(fd, F_GETFL);

    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0)
        return NULL;
    return fdopen(fd, mode);
}

static FILE *open_failed(const char *name, char *err, size_t errlen)
{
    int e = errno;
    struct stat st;

    /* ELOOP also means too many links on the way: only a final one is named */
    if (e == ELOOP && lstat(name, &st) == 0 && S_ISLNK(st.st_mode))
        return refuse(-1, err, errlen, "a symbolic link, which is not followed: it could point at "
                      "someone else's file (remove the link, or give another path)");
    /* O_WRONLY | O_NONBLOCK on a FIFO nobody reads, or on a socket */
    if (e == ENXIO)
        return refuse(-1, err, errlen, "a FIFO or a socket, not a regular file (give a new or "
                      "an existing regular file)");
    if (e == EISDIR)
        return refuse(-1, err, errlen, "a directory (give a file name in it)");
    return refuse(-1, err, errlen, "%s (give a file you can write)", strerror(e));
}

FILE *train_output_open(const char *name, int append, char *err, size_t errlen)
{
    int fd = open(name, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY |
                  (append ? O_APPEND : 0), 0666);
    struct stat st;
    FILE *f;

    if (fd < 0)
        return open_failed(name, err, errlen);
    if (fstat(fd, &st) < 0)
        return refuse(fd, err, errlen, "%s (give a file you can write)", strerror(errno));
    if (!S_ISREG(st.st_mode))
        return refuse(fd, err, errlen, "%s, not a regular file (give a new or an existing "
                      "regular file)", kind(st.st_mode));
    /* emptied only now that it is known to be a regular file (O_TRUNC
     * would have emptied whatever was there) */
    if ((!append && ftruncate(fd, 0) < 0) || !(f = as_stream(fd, append ? "a" : "w")))
        return refuse(fd, err, errlen, "%s (give a file you can write)", strerror(errno));
    return f;
}

FILE *train_input_open(const char *name, uint64_t max, uint64_t *size, char *err, size_t errlen)
{
    int fd = open(name, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    struct stat st;
    FILE *f;

    if (fd < 0)
        return refuse(-1, err, errlen, "%s", strerror(errno));
    if (fstat(fd, &st) < 0)
        return refuse(fd, err, errlen, "%s", strerror(errno));
    if (!S_ISREG(st.st_mode))
        return refuse(fd, err, errlen, "%s, not a regular file", kind(st.st_mode));
    if ((uint64_t)st.st_size > max)
        return refuse(fd, err, errlen, "%llu bytes, over the limit of %llu",
                      (unsigned long long)st.st_size, (unsigned long long)max);
    if (!(f = as_stream(fd, "r")))
        return refuse(fd, err, errlen, "%s", strerror(errno));
    if (size)
        *size = (uint64_t)st.st_size;
    return f;
}
