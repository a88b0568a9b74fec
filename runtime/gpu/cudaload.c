/* SPDX-License-Identifier: Apache-2.0 */
/* dlopen of the CUDA runtime and NCCL (cudaload.h says which files, and
 * why the library never links them). Self-contained, so tools and tests can
 * compile it in: it uses nothing of libddprt's internals. */
#include "config.h"

#include "cudaload.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

/* rt_fail's twin: tools compile this file in, and the library does not
 * export its internal helpers. err is never NULL: cudaload() keeps the
 * message for later calls. */
static int fail(drt_error_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(drt_error_t *err, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err->text, sizeof(err->text), fmt, ap);
    va_end(ap);
    return -1;
}

#ifndef CUDALOAD_HEADERS
const cuda_api_t *cudaload(drt_error_t *err)
{
    if (err)
        fail(err, "ddprt: built without CUDA/NCCL headers (configure --with-cuda=DIR "
             "--with-nccl=DIR)");
    return NULL;
}
#else
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* dlopen's message; it is NULL when the library was found but not loaded */
static const char *dl_why(void)
{
    const char *why = dlerror();

    return why ? why : "not loaded";
}

/* Why the file a variable names cannot be a library, or NULL. dlopen of a
 * FIFO (even with RTLD_NOLOAD, which opens a path to compare it with what
 * is loaded) blocks in open() for good, past any DDPRT_TIMEOUT, so a path
 * is looked at first, without blocking. A file that does not open is left
 * to dlopen, whose message says why; a name without a slash is the
 * loader's to search. */
static const char *not_a_file(const char *path)
{
    struct stat st;
    int fd, rc;

    if (!strchr(path, '/') || (fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)) < 0)
        return NULL;
    rc = fstat(fd, &st);
    close(fd);
    if (rc < 0 || S_ISREG(st.st_mode))
        return NULL;
    return S_ISFIFO(st.st_mode)  ? "a FIFO, not a regular file"
           : S_ISDIR(st.st_mode) ? "a directory, not a regular file"
                                 : "a device or socket, not a regular file";
}

/* The first of names already in the process, else the first that loads.
 * Asking with RTLD_NOLOAD first keeps PyTorch's copy when it loaded one
 * under a later name than ours. */
static void *open_first(const char *const *names, int n, char *file, size_t len, int *reused,
                        const char **why)
{
    void *h;

    for (int i = 0; i < n; i++)
        if ((h = dlopen(names[i], RTLD_NOW | RTLD_NOLOAD))) {
            snprintf(file, len, "%s", names[i]);
            *reused = 1;
            return h;
        }
    *why = "not found";
    for (int i = 0; i < n; i++) {
        if ((h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL))) {
            snprintf(file, len, "%s", names[i]);
            return h;
        }
        if (i == 0) /* the name the user most likely lacks: its message */
            *why = dl_why();
    }
    return NULL;
}

static int open_cudart(cuda_api_t *a, drt_error_t *err)
{
    static const char *const names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
                                        "libcudart.so"};
    const char *env = getenv("DDPRT_CUDART_LIBRARY"), *why = "";
    int reused = 0;

    if (env && *env) {
        if ((why = not_a_file(env)))
            return fail(err, "ddprt: cannot load the CUDA runtime DDPRT_CUDART_LIBRARY=%s: %s "
                        "(name an existing libcudart.so file, or unset it)", env, why);
        a->cudart_reused = dlopen(env, RTLD_NOW | RTLD_NOLOAD) != NULL;
        if (!(a->cudart = dlopen(env, RTLD_NOW | RTLD_LOCAL)))
            return fail(err, "ddprt: cannot load the CUDA runtime DDPRT_CUDART_LIBRARY=%s: %s "
                        "(name an existing libcudart.so file, or unset it)", env, dl_why());
        snprintf(a->cudart_file, sizeof(a->cudart_file), "%s", env);
        return 0;
    }
    if (!(a->cudart = open_first(names, 4, a->cudart_file, sizeof(a->cudart_file), &reused, &why)))
        return fail(err, "ddprt: cannot load the CUDA runtime (tried libcudart.so.13, .12, "
                    ".11.0, libcudart.so): %s (install it, add its directory to "
                    "LD_LIBRARY_PATH, or set DDPRT_CUDART_LIBRARY to the file)", why);
    return 0;
}

static int open_nccl(cuda_api_t *a, drt_error_t *err)
{
    static const char *const names[] = {"libnccl.so.2"};
    const char *env = getenv("DDPRT_NCCL_LIBRARY"), *why = "";

    if (env && *env) {
        if ((why = not_a_file(env)))
            return fail(err, "ddprt: cannot load NCCL DDPRT_NCCL_LIBRARY=%s: %s (name an "
                        "existing libnccl.so.2 file, or unset it)", env, why);
        /* one file for both (a test's stand-in): it was just loaded as cudart */
        a->nccl_reused = !strcmp(env, a->cudart_file) ? a->cudart_reused
                                                      : dlopen(env, RTLD_NOW | RTLD_NOLOAD) != NULL;
        if (!(a->nccl = dlopen(env, RTLD_NOW | RTLD_LOCAL)))
            return fail(err, "ddprt: cannot load NCCL DDPRT_NCCL_LIBRARY=%s: %s (name an "
                        "existing libnccl.so.2 file, or unset it)", env, dl_why());
        snprintf(a->nccl_file, sizeof(a->nccl_file), "%s", env);
        return 0;
    }
    if (!(a->nccl = open_first(names, 1, a->nccl_file, sizeof(a->nccl_file), &a->nccl_reused,
                               &why)))
        return fail(err, "ddprt: cannot load NCCL (libnccl.so.2): %s (install it, add its "
                    "directory to LD_LIBRARY_PATH, or set DDPRT_NCCL_LIBRARY to the file, e.g. "
                    "the nvidia-nccl wheel's lib/libnccl.so.2)", why);
    return 0;
}

#define CUDALOAD_SYM(lib, file, f) \
    if (!(*(void **)&a->f = dlsym(a->lib, #f))) \
        return fail(err, "ddprt: %s has no function " #f " (not the library it should be, " \
                    "or too old: set DDPRT_CUDART_LIBRARY or DDPRT_NCCL_LIBRARY to the " \
                    "right file)", a->file);
#define CUDALOAD_CUDART_SYM(f) CUDALOAD_SYM(cudart, cudart_file, f)
#define CUDALOAD_NCCL_SYM(f) CUDALOAD_SYM(nccl, nccl_file, f)

static int load(cuda_api_t *a, drt_error_t *err)
{
    if (open_cudart(a, err) < 0)
        return -1;
    CUDALOAD_CUDART(CUDALOAD_CUDART_SYM)
    if (open_nccl(a, err) < 0)
        return -1;
    CUDALOAD_NCCL(CUDALOAD_NCCL_SYM)
    if (a->ncclGetVersion(&a->nccl_version) != ncclSuccess)
        return fail(err, "ddprt: %s: ncclGetVersion failed", a->nccl_file);
    /* non-blocking communicators with a config: NCCL 2.14 */
    if (a->nccl_version < 21400)
        return fail(err, "ddprt: %s is NCCL %d, older than 2.14 (non-blocking "
                    "communicators); set DDPRT_NCCL_LIBRARY to a newer libnccl.so.2",
                    a->nccl_file, a->nccl_version);
#ifdef CUDALOAD_SHRINK
    /* optional: shrink in place needs 2.27's; without it, re-create */
    if (a->nccl_version >= 22700)
        *(void **)&a->ncclCommShrink = dlsym(a->nccl, "ncclCommShrink");
#endif
    return 0;
}

const cuda_api_t *cudaload(drt_error_t *err)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static cuda_api_t api;
    static int state; /* 0: not tried, 1: loaded, -1: failed (msg says why) */
    static drt_error_t msg;

    pthread_mutex_lock(&lock);
    if (state == 0)
        state = load(&api, &msg) < 0 ? -1 : 1;
    pthread_mutex_unlock(&lock);
    if (state > 0)
        return &api;
    if (err)
        *err = msg;
    return NULL;
}
#endif
