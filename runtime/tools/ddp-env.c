/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-env: print and check this task's ddp-topo environment, one line per
 * task; exits non-zero, naming the variable, when the contract is broken. */
#include "config.h"
#include "ddprt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *env_get(const char *name)
{
    return getenv(name);
}

int main(int argc, char **argv)
{
    drt_env_t env;
    drt_error_t err;
    char host[256] = "?";
    const char *omp = getenv("OMP_NUM_THREADS");

    if (argc == 2 && !strcmp(argv[1], "--version")) {
        puts("ddp-env (ddp-topo) " PACKAGE_VERSION);
        return 0;
    }
    if (argc > 1) {
        fputs("Usage: ddp-env [--help | --version]\nPrint this task's RANK, LOCAL_RANK, node and MASTER_ADDR:PORT "
              "as the runtime reads them; exit 1 if they are missing or inconsistent.\n",
              strcmp(argv[1], "--help") ? stderr : stdout);
        return strcmp(argv[1], "--help") ? 2 : 0;
    }
    if (drt_env_load(&env, env_get, &err) < 0) {
        fprintf(stderr, "ddp-env: bad launch environment: %s\n", err.text);
        return 1;
    }
    gethostname(host, sizeof(host) - 1);
    printf("rank %u/%u host %s node %u/%u local %u/%u master %s:%u restart %u omp %s\n",
           env.rank, env.world_size, host, env.node_rank, env.node_count, env.local_rank,
           env.local_world_size, env.master_addr, env.master_port, env.restart_count,
           omp ? omp : "unset");
    return 0;
}
