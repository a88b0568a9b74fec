/* SPDX-License-Identifier: Apache-2.0 */
/* --ddp-topo=auto,check: in task_init, before the user's program, each task
 * runs the preflight check (ddp-check, README "Preflight: ddp-topo check")
 * with the environment the program will get. The task (the user's
 * credentials, its binding, its stdout and stderr) runs it, so its table and
 * messages land in the job's output. A failed check fails the task. */
#include "plugin.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Tasks of a step start seconds apart (prologs, slurmstepd fan-out): the
 * checker's probes wait CHECK_TIMEOUT_S, not its interactive 3 s, so a late
 * node is met rather than blamed. It bounds itself (the probe, twice that for
 * the rendezvous, the links); past CHECK_LIMIT_S it is stuck. */
#define CHECK_TIMEOUT_S "10"
#define CHECK_LIMIT_S 120

/* waitpid, but never past CHECK_LIMIT_S: then the checker is killed */
static int wait_bounded(pid_t pid, int *status)
{
    struct timespec tick = {0, 20000000};

    for (int waited = 0; waited < CHECK_LIMIT_S * 50; waited++) {
        pid_t got = waitpid(pid, status, WNOHANG);
        if (got == pid)
            return 0;
        if (got < 0 && errno != EINTR)
            return -1;
        nanosleep(&tick, NULL);
    }
    kill(pid, SIGKILL);
    /* a checker stuck in the kernel (a wedged driver) may not die: the task
     * goes on failing rather than wait for it */
    for (int waited = 0; waited < 5 * 50 && waitpid(pid, status, WNOHANG) == 0; waited++)
        nanosleep(&tick, NULL);
    return 1;
}

static int outcome(const char *checker, int status, char *err, size_t errlen)
{
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        snprintf(err, errlen, "the preflight check could not start %s (install ddp-check "
                 "there, or name it with check=PATH in plugstack.conf)", checker);
    else if (WIFEXITED(status))
        snprintf(err, errlen, "the preflight check failed (exit %d; its report is in the "
                 "step's output, rank 0 prints the table)", WEXITSTATUS(status));
    else
        snprintf(err, errlen, "the preflight check %s was killed by signal %d", checker,
                 WTERMSIG(status));
    return -1;
}

int ddp_check_task(spank_t sp, const char *checker, char *err, size_t errlen)
{
    char **env = NULL, *argv[] = {(char *)checker, "--timeout", CHECK_TIMEOUT_S, NULL};
    int status = 0, rc;
    pid_t pid;

    if (ddp_checker_usable(checker, err, errlen) < 0)
        return -1;
    if (spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS || !env) {
        snprintf(err, errlen, "cannot read the task's environment for the preflight check "
                 "(report this)");
        return -1;
    }
    fflush(NULL);
    if ((pid = fork()) < 0) {
        snprintf(err, errlen, "cannot start the preflight check: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        execve(checker, argv, env);
        _exit(127);
    }
    if ((rc = wait_bounded(pid, &status)) > 0) {
        snprintf(err, errlen, "the preflight check %s did not finish within %d s and was "
                 "killed", checker, CHECK_LIMIT_S);
        return -1;
    }
    if (rc < 0) {
        snprintf(err, errlen, "cannot wait for the preflight check %s: %s", checker,
                 strerror(errno));
        return -1;
    }
    return outcome(checker, status, err, errlen);
}
