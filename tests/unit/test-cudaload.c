/* SPDX-License-Identifier: Apache-2.0 */
/* runtime/gpu/cudaload.c, compiled in: DDPRT_CUDART_LIBRARY and
 * DDPRT_NCCL_LIBRARY naming a FIFO, a directory or a device are refused
 * at once, naming the variable and what the file is; a FIFO used to block
 * dlopen (and the first GPU call) for good. cudaload() loads once per
 * process, so each case runs in a child of its own, which the parent kills
 * (and fails) when it does not answer within WAIT seconds. */
#include "config.h"

#include "gpu/cudaload.h"
#include "tap.h"

#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define WAIT 30

/* cudaload() in a child with the variables set (NULL: unset); its message
 * into out, "loaded" when it loaded, "hung" when it did not return */
static void load_with(const char *cudart, const char *nccl, char *out, size_t len)
{
    struct pollfd p;
    int fds[2], status;
    ssize_t n;
    pid_t pid;

    snprintf(out, len, "cannot start a child");
    fflush(stdout); /* the child must not print the parent's buffered lines again */
    if (pipe(fds) < 0 || (pid = fork()) < 0)
        return;
    if (pid == 0) {
        drt_error_t err = {{0}};
        const cuda_api_t *a;
        close(fds[0]);
        cudart ? setenv("DDPRT_CUDART_LIBRARY", cudart, 1) : unsetenv("DDPRT_CUDART_LIBRARY");
        nccl ? setenv("DDPRT_NCCL_LIBRARY", nccl, 1) : unsetenv("DDPRT_NCCL_LIBRARY");
        a = cudaload(&err);
        n = write(fds[1], a ? "loaded" : err.text, a ? 6 : strlen(err.text));
        _exit(n > 0 ? 0 : 1);
    }
    close(fds[1]);
    p = (struct pollfd){.fd = fds[0], .events = POLLIN};
    if (poll(&p, 1, WAIT * 1000) <= 0) {
        snprintf(out, len, "hung");
        kill(pid, SIGKILL);
    } else {
        n = read(fds[0], out, len - 1);
        out[n > 0 ? n : 0] = 0;
    }
    close(fds[0]);
    waitpid(pid, &status, 0);
}

static void refused(const char *cudart, const char *nccl, const char *want, const char *what)
{
    char got[400];

    load_with(cudart, nccl, got, sizeof(got));
    is_str(got, want, "%s", what);
}

int main(void)
{
    char dir[] = "/tmp/test-cudaload.XXXXXX", fifo[64], want[400], standin[4096];
    const char *build = getenv("top_builddir");

#ifndef CUDALOAD_HEADERS
    printf("1..0 # SKIP built without the CUDA/NCCL headers: nothing is loaded\n");
    return 0;
#endif
    if (!mkdtemp(dir) || snprintf(fifo, sizeof(fifo), "%s/fifo", dir) < 0 || mkfifo(fifo, 0600) < 0)
        return 1;
    snprintf(want, sizeof(want), "ddprt: cannot load the CUDA runtime DDPRT_CUDART_LIBRARY=%s: a "
             "FIFO, not a regular file (name an existing libcudart.so file, or unset it)", fifo);
    refused(fifo, NULL, want, "DDPRT_CUDART_LIBRARY naming a FIFO: refused at once");
    snprintf(want, sizeof(want), "ddprt: cannot load the CUDA runtime DDPRT_CUDART_LIBRARY=%s: a "
             "directory, not a regular file (name an existing libcudart.so file, or unset it)", dir);
    refused(dir, NULL, want, "... a directory");
    refused("/dev/null", NULL, "ddprt: cannot load the CUDA runtime DDPRT_CUDART_LIBRARY=/dev/null: "
            "a device or socket, not a regular file (name an existing libcudart.so file, or unset it)",
            "... a device");
    snprintf(standin, sizeof(standin), "%s/tests/standin/.libs/libddpgpustandin.so",
             build ? build : ".");
    if (access(standin, R_OK) == 0) {
        setenv("DDP_GPU_STANDIN", "1", 1); /* the stand-in's consent: a test */
        snprintf(want, sizeof(want), "ddprt: cannot load NCCL DDPRT_NCCL_LIBRARY=%s: a FIFO, not a "
                 "regular file (name an existing libnccl.so.2 file, or unset it)", fifo);
        refused(standin, fifo, want, "DDPRT_NCCL_LIBRARY naming a FIFO (the CUDA runtime the stand-in): refused at once");
        refused(standin, standin, "loaded", "the stand-in for both: loaded (the check passes a library)");
    } else
        printf("ok %d # SKIP no CUDA/NCCL stand-in at %s: the NCCL variable needs one\n", ++tap_n,
               standin);
    unlink(fifo);
    rmdir(dir);
    return tap_done();
}
