/* SPDX-License-Identifier: Apache-2.0 */
/* dcgm-exporter's HPC job mapping (ddp_topo_jobmap.so dir=DIR): a file per
 * GPU, named by its index on the node, lists one job id per line; the
 * exporter then labels that GPU's metrics with hpc_job. The job prolog
 * adds the job to the files of the GPUs SLURM gave it on this node, the
 * epilog (which runs also after scancel, a time limit or a failed node
 * check) drops it from every file, removing a file left empty.
 *
 * This runs as root in slurmd's prolog, so nothing in DIR is trusted: DIR
 * must be a real directory owned by root that no one else can write (else
 * a user could plant a symbolic link that root then writes through), every
 * file is opened relative to it without following links, a file is
 * replaced whole by rename, and a lock with a bounded wait orders the
 * prologs and epilogs of concurrent jobs. Errors are returned for the log;
 * the caller never fails the prolog over them (that would drain the node). */
#define _GNU_SOURCE /* O_CLOEXEC, renameat */
#include "jobmap.h"
#include "plugin.h" /* ddp_index_list_parse, shared with ddp_topo.so */

#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LOCK_NAME ".ddp-topo.lock" /* the exporter reads only names that are numbers */
#define LOCK_WAIT_MS 5000
#define FILE_MAX 65536              /* a GPU's list: thousands of job ids */

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* DIR itself: made when missing (its parent is the admin's), then checked */
static int open_dir(const char *dir, char *err, size_t errlen)
{
    struct stat st;
    int fd;

    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return fail(err, errlen, "dir=%s: cannot make it: %s", dir, strerror(errno));
    if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return fail(err, errlen, "dir=%s: %s (give a real directory, not a link)", dir,
                    strerror(errno));
    if (fstat(fd, &st) < 0 || st.st_uid != 0 || (st.st_mode & 022)) {
        close(fd);
        return fail(err, errlen, "dir=%s: not owned by root, or writable by others "
                    "(chown root %s; chmod 755 %s: the prolog writes there as root)", dir, dir,
                    dir);
    }
    return fd;
}

static int take_lock(int dfd, const char *dir, char *err, size_t errlen)
{
    int fd = openat(dfd, LOCK_NAME, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);

    if (fd < 0)
        return fail(err, errlen, "%s/%s: %s", dir, LOCK_NAME, strerror(errno));
    for (int ms = 0; flock(fd, LOCK_EX | LOCK_NB) < 0; ms += 10) {
        if (errno != EWOULDBLOCK || ms >= LOCK_WAIT_MS) {
            close(fd);
            return fail(err, errlen, "dir=%s: the lock stayed taken for %d ms (another "
                        "prolog or epilog is stuck there)", dir, LOCK_WAIT_MS);
        }
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    return fd; /* closing it releases the lock */
}

/* A GPU file's text, "" when it does not exist; -1 when it is not a
 * regular file (a link, a FIFO) or too long. */
static int read_list(int dfd, const char *name, char *buf, size_t len)
{
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    ssize_t n = 0, got;

    buf[0] = 0;
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size >= (off_t)len) {
        close(fd);
        return -1;
    }
    while ((got = read(fd, buf + n, len - 1 - (size_t)n)) > 0)
        n += got;
    close(fd);
    buf[n] = 0;
    return got < 0 ? -1 : 0;
}

/* The list without job (and without anything that is not a job id), plus
 * job when add. Returns the new text's length. */
static size_t edit_list(const char *old, const char *job, int add, char *out, size_t len)
{
    size_t n = 0, jl = strlen(job);
    const char *p = old;

    out[0] = 0;
    while (*p) {
        size_t l = strcspn(p, "\n");
        int keep = l > 0 && l < 32 && strspn(p, "0123456789_") == l &&
                   !(l == jl && !strncmp(p, job, jl));
        if (keep && n + l + 2 < len) {
            memcpy(out + n, p, l);
            n += l;
            out[n++] = '\n';
        }
        p += l + (p[l] == '\n');
    }
    if (add && n + jl + 2 < len) {
        memcpy(out + n, job, jl);
        n += jl;
        out[n++] = '\n';
    }
    out[n] = 0;
    return n;
}

/* name's list replaced whole: a temporary file the exporter skips, renamed */
static int write_list(int dfd, const char *name, const char *text, size_t n)
{
    char tmp[64];
    int fd, ok;

    if (!n)
        return unlinkat(dfd, name, 0) == 0 || errno == ENOENT ? 0 : -1;
    snprintf(tmp, sizeof(tmp), ".%s.tmp", name);
    unlinkat(dfd, tmp, 0);
    if ((fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644)) < 0)
        return -1;
    ok = write(fd, text, n) == (ssize_t)n;
    if (close(fd) < 0 || !ok || renameat(dfd, tmp, dfd, name) < 0) {
        unlinkat(dfd, tmp, 0);
        return -1;
    }
    return 0;
}

static int update(int dfd, const char *dir, const char *name, const char *job, int add,
                  char *err, size_t errlen)
{
    char old[FILE_MAX], text[FILE_MAX + 64];

    if (read_list(dfd, name, old, sizeof(old)) < 0)
        return fail(err, errlen, "%s/%s: not a regular file of at most %d bytes "
                    "(remove it)", dir, name, FILE_MAX - 1);
    if (write_list(dfd, name, text, edit_list(old, job, add, text, sizeof(text))) < 0)
        return fail(err, errlen, "%s/%s: cannot write it: %s", dir, name,
                    strerror(errno));
    return 0;
}

static int valid_job(const char *job)
{
    return job && *job && strlen(job) < 32 && strspn(job, "0123456789_") == strlen(job);
}

int jobmap_add(const char *dir, const char *job, const char *gpus, char *err, size_t errlen)
{
    int idx[DDP_GPUS_MAX];
    unsigned n;
    char name[16];
    int dfd, lock, rc = 0;

    if (!valid_job(job))
        return fail(err, errlen, "the prolog's SLURM_JOB_ID '%.40s' is not a job id",
                    job ? job : "");
    if (ddp_index_list_parse(gpus, idx, DDP_GPUS_MAX, &n) < 0)
        return fail(err, errlen, "cannot parse SLURM_JOB_GPUS '%.100s' (GPU "
                    "indices expected)", gpus);
    if ((dfd = open_dir(dir, err, errlen)) < 0)
        return -1;
    if ((lock = take_lock(dfd, dir, err, errlen)) >= 0) {
        for (unsigned i = 0; i < n && rc == 0; i++) {
            snprintf(name, sizeof(name), "%d", idx[i]);
            rc = update(dfd, dir, name, job, 1, err, errlen);
        }
        close(lock);
    }
    close(dfd);
    return lock < 0 ? -1 : rc;
}

int jobmap_drop(const char *dir, const char *job, char *err, size_t errlen)
{
    struct dirent *e;
    DIR *d;
    int dfd, lock, rc = 0;

    if (!valid_job(job))
        return fail(err, errlen, "the epilog's SLURM_JOB_ID '%.40s' is not a job id",
                    job ? job : "");
    if ((dfd = open_dir(dir, err, errlen)) < 0)
        return -1;
    if ((lock = take_lock(dfd, dir, err, errlen)) < 0 || !(d = fdopendir(dup(dfd)))) {
        if (lock >= 0)
            close(lock);
        close(dfd);
        return lock < 0 ? -1 : fail(err, errlen, "dir=%s: %s", dir, strerror(errno));
    }
    /* every GPU's file: the job's GPUs are not needed to undo it */
    while ((e = readdir(d)))
        if (e->d_name[0] && strspn(e->d_name, "0123456789") == strlen(e->d_name) &&
            strlen(e->d_name) < 8)
            rc |= update(dfd, dir, e->d_name, job, 0, err, errlen);
    closedir(d);
    close(lock);
    close(dfd);
    return rc;
}
