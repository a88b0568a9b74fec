/* ddp-run: start N ranks of a program on this machine with the environment
 * the SPANK plugin sets (torchrun's variables, MASTER_ADDR/PORT and a fresh
 * DDPRT_SECRET), optionally as M emulated nodes so the hierarchical path
 * runs on one host. Forwards signals; when a rank fails, stops the others
 * and exits with that rank's status. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define USAGE \
    "Usage: ddp-run -n N [--nodes M] [--master-addr ADDR] [--grace S] PROGRAM [ARGS...]\n" \
    "Run N ranks of PROGRAM here, as M emulated nodes (default 1; ranks are\n" \
    "spread block-wise), each with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,\n" \
    "GROUP_RANK/NODE_RANK, GROUP_WORLD_SIZE, ROLE_*, MASTER_ADDR, MASTER_PORT,\n" \
    "DDPRT_SECRET and DDP_RUN_NODE set. When a rank fails, the others get\n" \
    "SIGTERM, then SIGKILL after --grace seconds (default 5), and ddp-run exits\n" \
    "with the failed rank's status. SIGINT, SIGTERM and SIGHUP are forwarded.\n"

static pid_t *pids;
static int nranks;
static volatile sig_atomic_t forwarded;

static void forward(int sig)
{
    forwarded = sig;
    for (int r = 0; r < nranks; r++)
        if (pids[r] > 0)
            kill(pids[r], sig);
}

static int fail(const char *why, const char *todo)
{
    fprintf(stderr, "ddp-run: %s (%s)\n", why, todo);
    return 2;
}

static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static int make_secret(char *hex)
{
    unsigned char b[32];

    if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
        return -1;
    for (int i = 0; i < 32; i++)
        sprintf(hex + 2 * i, "%02x", b[i]);
    return 0;
}

static void setenv_num(const char *name, long v)
{
    char buf[32];

    snprintf(buf, sizeof(buf), "%ld", v);
    setenv(name, buf, 1);
}

/* Block layout: node k runs the ranks [first(k), first(k+1)). */
static int first_rank(int n, int m, int k)
{
    return k * (n / m) + (k < n % m ? k : n % m);
}

static pid_t spawn(int rank, int n, int m, char **argv)
{
    int node = 0;
    pid_t pid;

    while (node + 1 < m && first_rank(n, m, node + 1) <= rank)
        node++;
    if ((pid = fork()) != 0)
        return pid;
    setenv_num("RANK", rank);
    setenv_num("ROLE_RANK", rank);
    setenv_num("WORLD_SIZE", n);
    setenv_num("ROLE_WORLD_SIZE", n);
    setenv_num("LOCAL_RANK", rank - first_rank(n, m, node));
    setenv_num("LOCAL_WORLD_SIZE", first_rank(n, m, node + 1) - first_rank(n, m, node));
    setenv_num("GROUP_RANK", node);
    setenv_num("NODE_RANK", node);
    setenv_num("DDP_RUN_NODE", node);
    setenv_num("GROUP_WORLD_SIZE", m);
    setenv("ROLE_NAME", "default", 1);
    setenv("TORCHELASTIC_RESTART_COUNT", "0", 1);
    setenv("OMP_NUM_THREADS", "1", 0);
    execvp(argv[0], argv);
    fprintf(stderr, "ddp-run: cannot run '%s': %s (check the program path)\n", argv[0],
            strerror(errno));
    _exit(127);
}

static int status_code(int st)
{
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Wait for every rank; the first failure stops the rest. */
static int supervise(double grace)
{
    int left = nranks, result = 0, failed = -1;
    time_t stop_at = 0;

    while (left > 0) {
        int st;
        pid_t pid = waitpid(-1, &st, stop_at ? WNOHANG : 0);
        if (pid == 0) {
            if (time(NULL) >= stop_at)
                forward(SIGKILL);
            struct timespec ts = {0, 50000000};
            nanosleep(&ts, NULL);
            continue;
        }
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (int r = 0; r < nranks; r++) {
            if (pids[r] != pid)
                continue;
            pids[r] = 0;
            left--;
            if (status_code(st) != 0 && failed < 0) {
                failed = r;
                result = status_code(st);
                if (left > 0)
                    fprintf(stderr, "ddp-run: rank %d %s %d; stopping the other %d rank%s\n", r,
                            WIFEXITED(st) ? "exited with status" : "was killed by signal",
                            WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), left,
                            left == 1 ? "" : "s");
                forward(SIGTERM);
                stop_at = time(NULL) + (time_t)grace;
            }
        }
    }
    return result;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"nodes", 1, 0, 'N'}, {"master-addr", 1, 0, 'a'},
                                         {"grace", 1, 0, 'g'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int n = 0, m = 1, c, port;
    double grace = 5;
    const char *addr = "127.0.0.1";
    char secret[65];
    struct sigaction sa = {.sa_handler = forward};

    while ((c = getopt_long(argc, argv, "+n:N:h", opts, NULL)) != -1) {
        switch (c) {
        case 'n': n = atoi(optarg); break;
        case 'N': m = atoi(optarg); break;
        case 'a': addr = optarg; break;
        case 'g': grace = atof(optarg); break;
        case 'h': fputs(USAGE, stdout); return 0;
        default: return fail("unknown option", "see ddp-run --help");
        }
    }
    if (n < 1 || m < 1 || m > n || optind >= argc)
        return fail(optind >= argc ? "no program given" : "-n must be >= 1 and --nodes between 1 and -n",
                    "e.g. ddp-run -n 4 --nodes 2 ddp-allreduce-bench");
    if ((port = free_port()) < 0 || make_secret(secret) < 0)
        return fail("cannot pick a port or make a secret", "check the system");
    setenv("MASTER_ADDR", addr, 1);
    if (!getenv("MASTER_PORT"))
        setenv_num("MASTER_PORT", port);
    setenv("DDPRT_SECRET", secret, 1);
    nranks = n;
    if (!(pids = calloc((size_t)n, sizeof(pid_t))))
        return fail("out of memory", "use fewer ranks");
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    for (int r = 0; r < n; r++)
        if ((pids[r] = spawn(r, n, m, argv + optind)) < 0) {
            forward(SIGKILL);
            return fail("fork failed", "too many processes?");
        }
    return supervise(grace);
}
