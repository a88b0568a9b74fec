/* SPDX-License-Identifier: Apache-2.0 */
/* Checkpoints: named sections for one step, written by a background thread
 * so that training goes on while the disk works, and written so that a crash
 * at any moment leaves the newest complete checkpoint loadable. The file
 * DIR/ckpt-<step, 12 digits>.ddprt, little-endian fixed-width integers:
 *
 *   "DDPRTCK\0"  u32 version (1)  u64 step  u32 section count
 *   per section: u32 name length, name, u64 data length, data
 *   BLAKE2b-256 (libsodium's crypto_generichash) of everything before it
 *
 * A write goes to a temporary DIR/.ckpt-<step>.XXXXXX (O_EXCL, 0600; a name
 * neither load nor keep ever matches), then fsync, rename, fsync of DIR.
 * drt_ckpt_save only copies the sections into the file image (a buffer kept
 * from save to save, so a large one is not faulted in anew every time); the
 * thread hashes and writes it.
 *
 * The checksum tells a whole file from a torn one, not who wrote it: what
 * keeps another user's weights out is that drt_ckpt_open refuses a path
 * another user could change, and load a file another user owns or can
 * write. A run holds DIR/.ddprt-lock (flock) while open, so two runs never
 * share a directory: each would remove the other's files. */
#define _GNU_SOURCE /* mkostemp */
#include "../internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define CK_MAGIC "DDPRTCK"           /* with its NUL: 8 bytes */
#define CK_VERSION 1u
#define CK_HEAD 24                   /* magic, version, step, section count */
#define CK_SUM crypto_generichash_BYTES /* 32 */
#define CK_NAME_MAX 63
#define CK_FILE_MAX ((uint64_t)64 << 30) /* larger is surely not ours: not read */
#define CK_KEEP 3
#define CK_PATH 4096
#define CK_LOCK ".ddprt-lock"        /* a name neither load, keep nor the temporaries match */
#define CK_LINKS 40                  /* symbolic links in one path, as the kernel allows */

struct drt_ckpt {
    char *dir, *local;
    int lock, local_lock;   /* the directories' lock files, -1: not locked */
    int keep;
    pthread_t thread;
    int busy;               /* a write thread started and not yet joined */
    unsigned char *image;   /* the file being written, kept for the next save */
    size_t len, cap;        /* its length, and the buffer's */
    int rc, reported;       /* the last write's result; reported: its error was returned */
    drt_error_t err;
    drt_ckpt_stats_t stats;
    unsigned char *loaded;  /* the image drt_ckpt_load verified */
};

static void put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int n)
{
    uint64_t v = 0;

    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void file_name(char *buf, const char *dir, uint64_t step)
{
    snprintf(buf, CK_PATH, "%s/ckpt-%012llu.ddprt", dir, (unsigned long long)step);
}

/* 1 and *step for exactly the names we write, so that nothing else in the
 * directory is ever loaded or removed */
static int name_step(const char *name, uint64_t *step)
{
    char canon[48];
    size_t d;

    if (strncmp(name, "ckpt-", 5))
        return 0;
    d = strspn(name + 5, "0123456789");
    if (d < 12 || d > 20 || strcmp(name + 5 + d, ".ddprt"))
        return 0;
    *step = strtoull(name + 5, NULL, 10);
    snprintf(canon, sizeof(canon), "ckpt-%012llu.ddprt", (unsigned long long)*step);
    return !strcmp(canon, name);
}

static int by_step_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? 1 : x > y ? -1 : 0;
}

/* the steps of DIR's checkpoint names, newest first; -1 with errno */
static int list_steps(const char *dir, uint64_t **steps, size_t *n)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    size_t cap = 0;

    *steps = NULL;
    *n = 0;
    if (!d)
        return -1;
    while ((e = readdir(d))) {
        uint64_t s;
        if (!name_step(e->d_name, &s))
            continue;
        if (*n == cap) {
            uint64_t *grown = realloc(*steps, (cap = cap * 2 + 16) * sizeof(**steps));
            if (!grown) {
                closedir(d);
                free(*steps);
                *steps = NULL;
                errno = ENOMEM;
                return -1;
            }
            *steps = grown;
        }
        (*steps)[(*n)++] = s;
    }
    closedir(d);
    if (*n > 1) /* qsort of NULL, even of 0 elements, is undefined */
        qsort(*steps, *n, sizeof(**steps), by_step_desc);
    return 0;
}

/* ---- writing ------------------------------------------------------------------ */

static const char *write_hint(int e)
{
    if (e == ENOSPC || e == EDQUOT || e == EFBIG)
        return "free space there, or keep fewer checkpoints";
    if (e == EACCES || e == EPERM || e == EROFS)
        return "check the directory's permissions";
    return "check the directory and its file system";
}

static int write_fail(drt_error_t *err, uint64_t step, const char *dir, int e)
{
    return rt_fail(err, "checkpoint step %llu to %s: %s (%s)", (unsigned long long)step,
                   dir, strerror(e), write_hint(e));
}

static int write_all(int fd, const unsigned char *p, size_t len)
{
    while (len) {
        ssize_t w = write(fd, p, len > (1u << 30) ? (1u << 30) : len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? -1 : (errno = EIO, -1);
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* the rename is durable only once the directory itself is on disk */
static int sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc;

    if (fd < 0)
        return -1;
    rc = fsync(fd);
    close(fd);
    return rc;
}

/* Remove DIR's checkpoints beyond the newest keep up to `step`, the one
 * just written; later steps (another run's, a stray file) are not counted,
 * so they can never push out the checkpoint just written. A failure only
 * costs space. */
static void prune(const char *dir, int keep, uint64_t step)
{
    uint64_t *steps;
    size_t n, first = 0;
    char path[CK_PATH];

    if (list_steps(dir, &steps, &n) < 0)
        return;
    while (first < n && steps[first] > step)
        first++;
    for (size_t i = first + (size_t)keep; i < n; i++) {
        file_name(path, dir, steps[i]);
        if (unlink(path) < 0 && errno != ENOENT)
            fprintf(stderr, "ddprt: old checkpoint %s not removed: %s (remove it by hand)\n",
                    path, strerror(errno));
    }
    free(steps);
}

/* one level: temporary file, fsync, rename, fsync of the directory, keep */
static int write_level(const char *dir, uint64_t step, const unsigned char *image, size_t len,
                       int keep, drt_error_t *err)
{
    char tmp[CK_PATH], path[CK_PATH];
    int fd, e;

    snprintf(tmp, sizeof(tmp), "%s/.ckpt-%012llu.XXXXXX", dir, (unsigned long long)step);
    file_name(path, dir, step);
    if ((fd = mkostemp(tmp, O_CLOEXEC)) < 0)
        return write_fail(err, step, dir, errno);
    if (write_all(fd, image, len) < 0 || fsync(fd) < 0) {
        e = errno;
        close(fd);
        unlink(tmp);
        return write_fail(err, step, dir, e);
    }
    if (close(fd) < 0 || rename(tmp, path) < 0) {
        e = errno;
        unlink(tmp);
        return write_fail(err, step, dir, e);
    }
    if (sync_dir(dir) < 0)
        return write_fail(err, step, dir, errno);
    prune(dir, keep, step);
    return 0;
}

/* the background write: the local level first, then DIR from the same image,
 * so that a crash between the two leaves DIR's previous checkpoint whole */
static void *writer(void *arg)
{
    drt_ckpt_t *ck = arg;
    uint64_t step = ck->stats.step;
    double t0 = rt_now();
    drt_error_t local_err;

    crypto_generichash(ck->image + ck->len - CK_SUM, CK_SUM, ck->image, ck->len - CK_SUM, NULL, 0);
    /* a local level that fails (its disk full) must not cost DIR its
     * checkpoint: DIR is what a restart on any node reads */
    if (ck->local && write_level(ck->local, step, ck->image, ck->len, ck->keep, &local_err) < 0)
        fprintf(stderr, "ddprt: %s (local level only: DIR %s is written all the same)\n",
                local_err.text, ck->dir);
    ck->stats.local_s = ck->local ? rt_now() - t0 : 0;
    ck->rc = write_level(ck->dir, step, ck->image, ck->len, ck->keep, &ck->err);
    ck->stats.write_s = rt_now() - t0;
    return NULL;
}

/* wait for the write in flight, if any */
static void join(drt_ckpt_t *ck)
{
    if (!ck->busy)
        return;
    pthread_join(ck->thread, NULL);
    ck->busy = 0;
}

static int check_sections(const drt_ckpt_section_t *sections, int n, size_t *len,
                          drt_error_t *err)
{
    *len = CK_HEAD + CK_SUM;
    if (n < 0 || (n > 0 && !sections))
        return rt_fail(err, "checkpoint: %d sections (give 0 or more)", n);
    for (int i = 0; i < n; i++) {
        size_t nl = sections[i].name ? strlen(sections[i].name) : SIZE_MAX;
        if (nl > CK_NAME_MAX || (sections[i].len && !sections[i].data))
            return rt_fail(err, "checkpoint section %d: %s (a name of 0-%d bytes and "
                           "data for its length)", i, nl > CK_NAME_MAX ? "bad name" : "no data",
                           CK_NAME_MAX);
        if (sections[i].len > SIZE_MAX - *len - 12 - nl)
            return rt_fail(err, "checkpoint section %s: too large", sections[i].name);
        *len += 12 + nl + sections[i].len;
    }
    return 0;
}

/* the file image into ck's buffer, all but the checksum (the thread's) */
static int serialize(drt_ckpt_t *ck, uint64_t step, const drt_ckpt_section_t *sections, int n,
                     size_t len)
{
    unsigned char *image = ck->image, *p;

    if (len > ck->cap) {
        free(ck->image);
        if (!(ck->image = image = malloc(len)))
            return ck->cap = 0, -1;
        ck->cap = len;
    }
    ck->len = len;
    p = image + CK_HEAD;
    memcpy(image, CK_MAGIC, 8);
    put_le(image + 8, CK_VERSION, 4);
    put_le(image + 12, step, 8);
    put_le(image + 20, (uint64_t)n, 4);
    for (int i = 0; i < n; i++) {
        size_t nl = strlen(sections[i].name);
        put_le(p, nl, 4);
        memcpy(p + 4, sections[i].name, nl);
        put_le(p + 4 + nl, sections[i].len, 8);
        if (sections[i].len)
            memcpy(p + 12 + nl, sections[i].data, sections[i].len);
        p += 12 + nl + sections[i].len;
    }
    return 0;
}

int drt_ckpt_save(drt_ckpt_t *ck, uint64_t step, const drt_ckpt_section_t *sections, int n,
                  drt_error_t *err)
{
    double t0 = rt_now();
    size_t len;
    int prev;

    if (check_sections(sections, n, &len, err) < 0)
        return -1;
    join(ck);
    /* the previous write's error, returned once: this save still goes ahead,
     * since a later write may well succeed (space freed, a transient error) */
    prev = ck->rc < 0 && !ck->reported ? -1 : 0;
    if (prev < 0 && err)
        *err = ck->err;
    ck->reported = 1;
    if (serialize(ck, step, sections, n, len) < 0)
        return rt_fail(err, "checkpoint step %llu: out of memory for %zu bytes",
                       (unsigned long long)step, len);
    ck->rc = 0;
    ck->reported = 0;
    memset(&ck->stats, 0, sizeof(ck->stats));
    ck->stats.step = step;
    ck->stats.bytes = len;
    if (pthread_create(&ck->thread, NULL, writer, ck) != 0) {
        ck->rc = rt_fail(&ck->err, "checkpoint step %llu: cannot start the writer "
                         "thread (too many threads or too little memory)",
                         (unsigned long long)step);
        return drt_ckpt_wait(ck, NULL, err);
    }
    ck->busy = 1;
    ck->stats.stall_s = rt_now() - t0;
    return prev;
}

int drt_ckpt_wait(drt_ckpt_t *ck, drt_ckpt_stats_t *stats, drt_error_t *err)
{
    join(ck);
    if (stats)
        *stats = ck->stats;
    if (ck->rc == 0)
        return 0;
    ck->reported = 1;
    if (err)
        *err = ck->err;
    return -1;
}

/* ---- opening and loading --------------------------------------------------------- */

static int dir_fail(drt_error_t *err, const char *dir, const char *why)
{
    return rt_fail(err, "checkpoint directory %s: %s (give a writable directory)", dir,
                   why);
}

/* mkdir -p, then check it is a directory this process can write */
static int make_dir(const char *dir, drt_error_t *err)
{
    char path[CK_PATH];
    struct stat st;
    size_t len = strlen(dir);

    if (!len || len > CK_PATH - 48)
        return rt_fail(err, "checkpoint directory '%s': %s (choose another)", dir,
                       len ? "path too long" : "empty path");
    memcpy(path, dir, len + 1);
    for (char *p = path + 1; ; p++)
        if (*p == '/' || !*p) {
            char c = *p;
            *p = 0;
            if (mkdir(path, 0755) < 0 && errno != EEXIST)
                return rt_fail(err, "checkpoint directory %s: cannot create %s: %s "
                               "(check the permissions, or choose another)", dir, path,
                               strerror(errno));
            if (!(*p = c))
                break;
        }
    if (stat(dir, &st) < 0 || (S_ISDIR(st.st_mode) && access(dir, W_OK | X_OK) < 0))
        return dir_fail(err, dir, strerror(errno));
    return S_ISDIR(st.st_mode) ? 0 : dir_fail(err, dir, "not a directory");
}

/* ---- whose directory: only this run's user and root may change it ---------------- */

enum { TRUSTED, OTHER_OWNER, OTHER_WRITER };

/* As sshd's StrictModes and the plugin's topology files: a user who owns,
 * or can write, a directory on the path (or owns a symbolic link on it) can
 * put their weights where the run loads them and delete the run's
 * checkpoints. A sticky directory above (/tmp) is the exception: others may
 * add entries there but not rename or remove ours. `own` (the checkpoint
 * directory and the files in it) must be writable by nobody else at all. */
static int trust_of(const struct stat *st, int own)
{
    if (st->st_uid != geteuid() && st->st_uid != 0)
        return OTHER_OWNER;
    if (S_ISLNK(st->st_mode)) /* a link's own mode means nothing */
        return TRUSTED;
    if ((st->st_mode & (S_IWGRP | S_IWOTH)) &&
        (own || !S_ISDIR(st->st_mode) || !(st->st_mode & S_ISVTX)))
        return OTHER_WRITER;
    return TRUSTED;
}

static const char *user_name(uid_t uid, char *buf, size_t len)
{
    struct passwd pw, *found = NULL;
    char tmp[1024];

    if (getpwuid_r(uid, &pw, tmp, sizeof(tmp), &found) == 0 && found)
        snprintf(buf, len, "%s", pw.pw_name);
    else
        snprintf(buf, len, "uid %u", (unsigned)uid);
    return buf;
}

/* the refusal of `dir` because of `path` (st, trust_of's `why`) */
static int refuse(drt_error_t *err, const char *dir, const char *path, const struct stat *st,
                  int why)
{
    char owner[64], me[64];
    const char *kind = S_ISLNK(st->st_mode) ? "symbolic link"
                       : S_ISDIR(st->st_mode) ? "directory" : "file";
    const char *fix = S_ISLNK(st->st_mode) ? "give the path it points to, or a link of your own"
                      : S_ISDIR(st->st_mode) ? "give a directory of your own"
                                             : "remove it, or chown it if it is yours";

    if (why == OTHER_OWNER)
        return rt_fail(err, "checkpoint directory %s refused: %s %s is owned by %s, not by "
                       "this run's user (%s) or root (%s)", dir, kind, path[0] ? path : "/",
                       user_name(st->st_uid, owner, sizeof(owner)),
                       user_name(geteuid(), me, sizeof(me)), fix);
    return rt_fail(err, "checkpoint directory %s refused: %s %s is writable by other users "
                   "(mode %04o) (chmod go-w %s)", dir, kind, path[0] ? path : "/",
                   (unsigned)(st->st_mode & 07777), path[0] ? path : "/");
}

typedef struct {
    const char *dir;        /* as given, for messages */
    char path[CK_PATH];     /* resolved so far ("" is /): no link, no "." or ".." */
    int links;
} walk_t;

static int walk(walk_t *w, const char *rel, drt_error_t *err);

/* w->path, a symbolic link: its target, resolved from the link's directory */
static int follow(walk_t *w, size_t parent_len, drt_error_t *err)
{
    char *target = malloc(CK_PATH);
    ssize_t n = target ? readlink(w->path, target, CK_PATH - 1) : -1;
    int rc;

    if (n < 0 || ++w->links > CK_LINKS) {
        free(target);
        return rt_fail(err, "checkpoint directory %s: cannot follow %s: %s (give the path "
                       "it points to)", w->dir, w->path, n < 0 ? strerror(errno)
                                                             : "too many symbolic links");
    }
    target[n] = 0;
    w->path[target[0] == '/' ? 0 : parent_len] = 0;
    rc = walk(w, target, err);
    free(target);
    return rc;
}

/* Resolve `rel` below w->path as the kernel does, checking each directory
 * and symbolic link it passes, those of a link's target too. */
static int walk(walk_t *w, const char *rel, drt_error_t *err)
{
    for (const char *p = rel; *p; p += strspn(p, "/")) {
        size_t n = strcspn(p, "/"), len = strlen(w->path);
        struct stat st;
        int why;

        if (n == 2 && p[0] == '.' && p[1] == '.')
            *(strrchr(w->path, '/') ? strrchr(w->path, '/') : w->path) = 0;
        if (n <= 2 && !strncmp(p, "..", n)) { /* "." or ".." */
            p += n;
            continue;
        }
        if (len + 1 + n >= CK_PATH)
            return dir_fail(err, w->dir, "path too long");
        w->path[len] = '/';
        memcpy(w->path + len + 1, p, n);
        w->path[len + 1 + n] = 0;
        p += n;
        if (lstat(w->path, &st) < 0)
            return rt_fail(err, "checkpoint directory %s: cannot check %s: %s (give an "
                           "existing directory)", w->dir, w->path, strerror(errno));
        if ((why = trust_of(&st, 0)) != TRUSTED)
            return refuse(err, w->dir, w->path, &st, why);
        if (S_ISLNK(st.st_mode) && follow(w, len, err) < 0)
            return -1;
    }
    return 0;
}

/* Every directory and symbolic link from / to dir, and dir itself (make_dir
 * made it, so all exist). */
static int check_path(const char *dir, drt_error_t *err)
{
    walk_t w = {.dir = dir};
    char cwd[CK_PATH];
    struct stat st;
    int why;

    if (lstat("/", &st) < 0)
        return dir_fail(err, dir, strerror(errno));
    if ((why = trust_of(&st, 0)) != TRUSTED)
        return refuse(err, dir, "", &st, why);
    if (dir[0] != '/' && !getcwd(cwd, sizeof(cwd)))
        return rt_fail(err, "checkpoint directory %s: cannot tell the current directory: %s "
                       "(give an absolute path)", dir, strerror(errno));
    if ((dir[0] != '/' && walk(&w, cwd, err) < 0) || walk(&w, dir, err) < 0)
        return -1;
    if (stat(w.path[0] ? w.path : "/", &st) < 0)
        return dir_fail(err, dir, strerror(errno));
    if ((why = trust_of(&st, 1)) != TRUSTED)
        return refuse(err, dir, w.path, &st, why);
    return 0;
}

/* ---- one run per directory: the lock -------------------------------------------- */

/* who holds a lock, written into its file for the next run's message */
static void holder(char *buf, size_t len)
{
    char host[256] = "";
    const char *job = getenv("SLURM_JOB_ID");

    gethostname(host, sizeof(host) - 1);
    snprintf(buf, len, "pid %ld on %s%s%s", (long)getpid(), host, job ? ", SLURM job " : "",
             job ? job : "");
}

/* the holder's name into its lock file, 0 when written */
static int say_holder(int fd)
{
    char who[320];
    size_t n;

    holder(who, sizeof(who));
    n = strlen(who);
    return pwrite(fd, who, n, 0) == (ssize_t)n && ftruncate(fd, (off_t)n) == 0 ? 0 : -1;
}

/* what the holder wrote, printable characters only */
static void holder_of(int fd, char *buf, size_t len)
{
    ssize_t n = pread(fd, buf, len - 1, 0);
    size_t k = 0;

    while (n > 0 && k < (size_t)n && buf[k] >= ' ' && buf[k] <= '~')
        k++;
    buf[k] = 0;
    if (!k)
        snprintf(buf, len, "it has not said who it is yet");
}

static int lock_fail(drt_error_t *err, const char *dir, int fd, const char *path, int e)
{
    if (fd >= 0)
        close(fd);
    return rt_fail(err, "checkpoint directory %s: cannot lock %s: %s (%s)", dir, path,
                   strerror(e), e == ELOOP ? "remove that symbolic link" : write_hint(e));
}

/* Hold dir's lock file while open: *fd, or -1 on a file system without
 * locks (said on stderr; the run goes on as before locks). */
static int lock_dir(const char *dir, int *out, drt_error_t *err)
{
    char path[CK_PATH], who[320];
    struct stat st;
    int fd, why;

    *out = -1;
    snprintf(path, sizeof(path), "%s/" CK_LOCK, dir);
    if ((fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600)) < 0)
        return lock_fail(err, dir, fd, path, errno);
    if (fstat(fd, &st) < 0)
        return lock_fail(err, dir, fd, path, errno);
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return rt_fail(err, "checkpoint directory %s: its lock file %s is not a regular file "
                       "(remove it)", dir, path);
    }
    if ((why = trust_of(&st, 1)) != TRUSTED) {
        close(fd);
        return refuse(err, dir, path, &st, why);
    }
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        say_holder(fd); /* best effort: the lock works without the name */
        *out = fd;
        return 0;
    }
    if (errno == EWOULDBLOCK) {
        holder_of(fd, who, sizeof(who));
        close(fd);
        return rt_fail(err, "checkpoint directory %s: in use by another run (%s) (wait for it "
                       "to end, or give this run a directory of its own)", dir, who);
    }
    if (errno != ENOLCK && errno != ENOSYS && errno != EOPNOTSUPP)
        return lock_fail(err, dir, fd, path, errno);
    fprintf(stderr, "ddprt: checkpoint directory %s: not locked: %s (no other run may use it "
            "meanwhile; mount it with locks, e.g. Lustre's -o flock)\n", dir, strerror(errno));
    close(fd);
    return 0;
}

/* A writer killed mid-write (SLURM's SIGKILL after KillWait) leaves its
 * temporary file, as large as a checkpoint. Under the lock they are all
 * such leftovers: a live writer holds the lock. */
static void remove_temps(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[CK_PATH];

    while (d && (e = readdir(d))) {
        const char *n = e->d_name;
        size_t len = strlen(n), digits;
        if (strncmp(n, ".ckpt-", 6)) /* first: "." is shorter than the prefix */
            continue;
        digits = strspn(n + 6, "0123456789");
        if (digits < 12 || len != 6 + digits + 7 || n[6 + digits] != '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, n);
        unlink(path);
    }
    if (d)
        closedir(d);
}

/* one directory: made, its path checked, locked, a dead writer's leftovers removed */
static int open_dir(const char *dir, int *lock, drt_error_t *err)
{
    if (make_dir(dir, err) < 0 || check_path(dir, err) < 0 || lock_dir(dir, lock, err) < 0)
        return -1;
    if (*lock >= 0)
        remove_temps(dir);
    return 0;
}

/* the local level in DIR itself would only write every checkpoint twice
 * (and find DIR locked: by this very run); a local directory not made yet
 * is not DIR */
static int same_dir(const char *dir, const char *local, drt_error_t *err)
{
    struct stat a, b;

    if (stat(dir, &a) == 0 && stat(local, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return rt_fail(err, "checkpoint: the local directory %s is the checkpoint directory %s "
                       "(give a node-local directory, or none)", local, dir);
    return 0;
}

int drt_ckpt_open(const char *dir, const char *local_dir, int keep, drt_ckpt_t **out,
                  drt_error_t *err)
{
    drt_ckpt_t *ck;

    *out = NULL;
    if (!dir || keep < 0)
        return rt_fail(err, "checkpoint: %s (give a directory and keep >= 1)",
                       dir ? "keep below 0" : "no directory");
    if (sodium_init() < 0)
        return rt_fail(err, "checkpoint: libsodium failed to initialize");
    if (!(ck = calloc(1, sizeof(*ck))))
        return rt_fail(err, "checkpoint: out of memory");
    ck->lock = ck->local_lock = -1;
    if (open_dir(dir, &ck->lock, err) < 0 ||
        (local_dir && (same_dir(dir, local_dir, err) < 0 ||
                       open_dir(local_dir, &ck->local_lock, err) < 0))) {
        drt_ckpt_close(ck);
        return -1;
    }
    if (!(ck->dir = strdup(dir)) || (local_dir && !(ck->local = strdup(local_dir)))) {
        drt_ckpt_close(ck);
        return rt_fail(err, "checkpoint: out of memory");
    }
    ck->keep = keep ? keep : CK_KEEP;
    ck->reported = 1;
    *out = ck;
    return 0;
}

/* why the image is not a checkpoint we can use; NULL when it is */
static const char *check_image(const unsigned char *img, size_t len, char *why, size_t wlen)
{
    unsigned char sum[CK_SUM];
    size_t off = CK_HEAD;
    uint64_t n;

    if (len >= 8 && memcmp(img, CK_MAGIC, 8))
        return "not a checkpoint (bad magic)";
    if (len < CK_HEAD + CK_SUM)
        return "truncated";
    if (get_le(img + 8, 4) != CK_VERSION) {
        snprintf(why, wlen, "version %llu not %u", (unsigned long long)get_le(img + 8, 4),
                 CK_VERSION);
        return why;
    }
    n = get_le(img + 20, 4);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t nl = off + 4 <= len - CK_SUM ? get_le(img + off, 4) : UINT64_MAX, dl;
        if (nl > CK_NAME_MAX || off + 12 + nl > len - CK_SUM)
            return "truncated";
        dl = get_le(img + off + 4 + nl, 8);
        if (dl > len - CK_SUM - off - 12 - nl)
            return "truncated";
        off += 12 + nl + dl;
    }
    if (off != len - CK_SUM)
        return "trailing bytes after the last section";
    crypto_generichash(sum, CK_SUM, img, off, NULL, 0);
    return memcmp(sum, img + off, CK_SUM) ? "checksum mismatch" : NULL;
}

/* read one candidate: 0 with the image, 1 skipped (why), 2 another user's
 * (*st says whose; not read) */
static int read_one(const char *path, unsigned char **img, size_t *len, struct stat *st,
                    char *why, size_t wlen)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    size_t got = 0;
    unsigned char head[8];

    *img = NULL;
    if (fd < 0) {
        snprintf(why, wlen, "%s", errno == ELOOP ? "a symbolic link" : strerror(errno));
        return 1;
    }
    if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode) || (uint64_t)st->st_size > CK_FILE_MAX) {
        snprintf(why, wlen, "%s", fstat(fd, st) < 0 ? strerror(errno)
                                  : !S_ISREG(st->st_mode) ? "not a regular file" : "too large");
        close(fd);
        return 1;
    }
    if (trust_of(st, 1) != TRUSTED) {
        close(fd);
        return 2;
    }
    *len = (size_t)st->st_size;
    /* the magic first: a huge file that is no checkpoint is not read */
    if (*len >= 8 && (pread(fd, head, 8, 0) != 8 || memcmp(head, CK_MAGIC, 8))) {
        snprintf(why, wlen, "not a checkpoint (bad magic)");
        close(fd);
        return 1;
    }
    if (!(*img = malloc(*len ? *len : 1))) {
        snprintf(why, wlen, "%zu bytes, more than this process can allocate", *len);
        close(fd);
        return 1;
    }
    while (got < *len) {
        ssize_t r = read(fd, *img + got, *len - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    *len = got; /* a file that shrank while read is checked as what was read */
    return 0;
}

/* why a whole image named for `step` is not that step's, or NULL: the
 * name says which is newest, so it must be the header's */
static const char *check_name(const unsigned char *img, uint64_t step, char *why, size_t wlen)
{
    uint64_t held = get_le(img + 12, 8);

    if (held == step)
        return NULL;
    snprintf(why, wlen, "named for step %llu, it holds step %llu (renamed?)",
             (unsigned long long)step, (unsigned long long)held);
    return why;
}

/* 1: the image of path (named for step) is now loaded; 0: skipped with a
 * warning; -1: refused, another user's file (err) */
static int try_load(drt_ckpt_t *ck, const char *path, uint64_t step, drt_error_t *err)
{
    unsigned char *img;
    size_t len = 0;
    struct stat st;
    char buf[160];
    const char *why = buf;
    int rc = read_one(path, &img, &len, &st, buf, sizeof(buf));

    if (rc == 2)
        return refuse(err, ck->dir, path, &st, trust_of(&st, 1));
    if (rc == 0 && !(why = check_image(img, len, buf, sizeof(buf))) &&
        !(why = check_name(img, step, buf, sizeof(buf)))) {
        free(ck->loaded);
        ck->loaded = img;
        return 1;
    }
    free(img);
    fprintf(stderr, "ddprt: checkpoint %s skipped: %s (it is left in place; an older one is "
            "tried)\n", path, why);
    return 0;
}

int drt_ckpt_load(drt_ckpt_t *ck, uint64_t *step, drt_error_t *err)
{
    uint64_t *steps;
    size_t n;
    char path[CK_PATH];
    int rc = 0;

    if (list_steps(ck->dir, &steps, &n) < 0)
        return errno == ENOENT ? 0
                               : rt_fail(err, "checkpoint directory %s: %s (give a "
                                         "readable directory)", ck->dir, strerror(errno));
    for (size_t i = 0; i < n && rc == 0; i++) {
        file_name(path, ck->dir, steps[i]);
        rc = try_load(ck, path, steps[i], err);
    }
    free(steps);
    if (rc == 1)
        *step = get_le(ck->loaded + 12, 8);
    return rc;
}

const void *drt_ckpt_section(const drt_ckpt_t *ck, const char *name, size_t *len)
{
    const unsigned char *p;
    uint64_t n;

    if (!ck || !ck->loaded)
        return NULL;
    n = get_le(ck->loaded + 20, 4);
    p = ck->loaded + CK_HEAD;
    for (uint64_t i = 0; i < n; i++) {
        size_t nl = (size_t)get_le(p, 4), dl = (size_t)get_le(p + 4 + nl, 8);
        if (nl == strlen(name) && !memcmp(p + 4, name, nl)) {
            if (len)
                *len = dl;
            return p + 12 + nl;
        }
        p += 12 + nl + dl;
    }
    return NULL;
}

void drt_ckpt_close(drt_ckpt_t *ck)
{
    if (!ck)
        return;
    join(ck);
    if (ck->rc < 0 && !ck->reported)
        fprintf(stderr, "%s\n", ck->err.text);
    /* only now: the lock covers the write just joined */
    if (ck->lock >= 0)
        close(ck->lock);
    if (ck->local_lock >= 0)
        close(ck->local_lock);
    free(ck->image);
    free(ck->loaded);
    free(ck->dir);
    free(ck->local);
    free(ck);
}
