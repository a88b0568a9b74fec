/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-run: start N ranks of a program on this machine with the environment
 * the SPANK plugin sets (torchrun's variables, MASTER_ADDR/PORT and a fresh
 * DDPRT_SECRET), optionally as M emulated nodes so the hierarchical path
 * runs on one host. Forwards signals; when a rank fails, stops the others
 * and exits with that rank's status, or with --no-kill lets them go on. */
#define _GNU_SOURCE
#include "config.h"
#include "contract.h"
#include "ddprt.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* More local processes than this is a typo, not a job. */
#define MAX_RANKS 65536
/* A day: anything longer is a typo too. */
#define MAX_GRACE 86400.0

#define USAGE \
    "Usage: ddp-run -n N [--nodes M] [--master-addr ADDR] [--grace S | -k] PROGRAM [ARGS...]\n" \
    "       ddp-run --nproc-per-node P [--nnodes M] [--standalone] [--master-port PORT] ...\n" \
    "       ddp-run --help | --version\n" \
    "Run N ranks of PROGRAM here, as M emulated nodes (default 1; ranks are\n" \
    "spread block-wise), each with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,\n" \
    "GROUP_RANK/NODE_RANK, GROUP_WORLD_SIZE, ROLE_*, TORCHELASTIC_*, MASTER_ADDR,\n" \
    "MASTER_PORT, DDPRT_PORT, DDPRT_SECRET, DDP_RUN_NODE=K and DDP_TOPO_NODENAME=nodeK\n" \
    "set (and, with several nodes, NCCL_HOSTID unless set, so NCCL sees separate\n" \
    "hosts). When a rank fails, the others get SIGTERM, then SIGKILL after --grace\n" \
    "seconds (default 5), and ddp-run exits with the failed rank's status. With -k\n" \
    "(--no-kill), as srun -k, the others go on and ddp-run waits for all: a rank\n" \
    "killed by a signal ddp-run did not forward is lost (as by a node failure), any\n" \
    "other non-zero end failed; it exits with the first failed rank's status, else 0\n" \
    "when a rank exited 0, else the first lost rank's. SIGINT, SIGTERM and SIGHUP\n" \
    "are forwarded; when ddp-run itself dies (even by SIGKILL) the ranks get\n" \
    "SIGKILL. Unless\n" \
    "DDPRT_PORT is set, ddp-run listens on a free port of --master-addr\n" \
    "(default 127.0.0.1) for libddprt's rendezvous and hands rank 0 the listening\n" \
    "socket (DDPRT_LISTEN_FD), so no other process can take it; unless\n" \
    "MASTER_PORT is set, it picks another free port for torch's TCPStore (a set one\n" \
    "that is already in use draws a warning). When rank 0 runs in another network\n" \
    "namespace, set MASTER_PORT and DDPRT_PORT.\n" \
    "torchrun's spellings (with - or _): --nproc-per-node P with --nnodes M is\n" \
    "-n P*M --nodes M; --standalone is the default; --master-addr ADDR;\n" \
    "--master-port PORT sets MASTER_PORT; its rendezvous and restart options are\n" \
    "refused by name. A PROGRAM that cannot run is said once (a .py or .sh with the\n" \
    "interpreter to put first); a launcher as PROGRAM (torchrun, python -m\n" \
    "torch.distributed.run, deepspeed, accelerate launch) draws a warning.\n"

static pid_t *pids;
static int nranks, nnodes;
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

/* Strict numbers: the whole argument, in range, or an error naming it. */
static int parse_int(const char *opt, const char *s, long min, long max, int *v)
{
    char *end;
    long x;

    errno = 0;
    x = strtol(s, &end, 10);
    if (!isdigit((unsigned char)s[0]) || *end || errno || x < min || x > max) {
        fprintf(stderr, "ddp-run: %s '%.40s': not a whole number from %ld to %ld (e.g. %s 4)\n",
                opt, s, min, max, opt);
        return -1;
    }
    *v = (int)x;
    return 0;
}

static int parse_seconds(const char *opt, const char *s, double *v)
{
    char *end;
    double x;

    errno = 0;
    x = strtod(s, &end);
    if (!(isdigit((unsigned char)s[0]) || s[0] == '.') || *end || errno || !isfinite(x) ||
        x > MAX_GRACE) {
        fprintf(stderr, "ddp-run: %s '%.40s': not a number of seconds from 0 to %.0f (e.g. "
                "%s 5)\n", opt, s, MAX_GRACE, opt);
        return -1;
    }
    *v = x;
    return 0;
}

/* A socket bound to port *port of MASTER_ADDR (0: a free one the kernel
 * picks; *port is then set), listening when `listen` is set: rank 0's
 * rendezvous socket, which no other process can take
 * before rank 0 uses it. CLOEXEC: only rank 0 gets it, by clearing the flag
 * after fork. Returns the fd, or -1 with errno (EADDRNOTAVAIL: the address
 * is not one of this network namespace, so rank 0 will not run here). */
static int bind_free_port(const char *host, int listening, int *port)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int one = 1, fd;

    if (getaddrinfo(host, NULL, &hints, &ai) != 0) {
        errno = EADDRNOTAVAIL;
        return -1;
    }
    memcpy(&a, ai->ai_addr, sizeof(a));
    freeaddrinfo(ai);
    a.sin_port = htons((uint16_t)*port);
    if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || (listening && listen(fd, 1024) < 0) ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* The ports MASTER_PORT is drawn from: above the kernel's ephemeral range
 * (ip_local_port_range), else below it. A port inside it is one the kernel
 * may hand to any socket the ranks bind to port 0 or connect (the runtime's
 * listeners, gloo's) before rank 0's TCPStore binds it: seen once in
 * torch-telemetry.test as "Address already in use". 0 when no range is
 * left outside (every port is ephemeral). */
static int master_port_range(int *lo, int *hi)
{
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
    int elo = 32768, ehi = 60999; /* Linux's default, if the file cannot be read */

    if (f) {
        if (fscanf(f, "%d %d", &elo, &ehi) != 2 || elo < 1 || elo > ehi || ehi > 65535)
            elo = 32768, ehi = 60999;
        fclose(f);
    }
    if (ehi < 65535)
        *lo = ehi + 1, *hi = 65535;
    else if (elo > 1024)
        *lo = 1024, *hi = elo - 1;
    else
        return 0;
    return 1;
}

/* A free port for torch's TCPStore outside the ephemeral range (32 random
 * tries, as the plugin's port_range keeps out of it), else the kernel's
 * pick; bound only while it is picked. Returns the port, -1 with errno. */
static int pick_master_port(const char *host)
{
    int lo, hi, port = 0, fd;
    uint32_t r[32];

    if (master_port_range(&lo, &hi) && getrandom(r, sizeof(r), 0) == (ssize_t)sizeof(r))
        for (int i = 0; i < 32; i++) {
            port = lo + (int)(r[i] % (uint32_t)(hi - lo + 1));
            if ((fd = bind_free_port(host, 0, &port)) >= 0) {
                close(fd);
                return port;
            }
            if (errno != EADDRINUSE && errno != EACCES)
                return -1; /* the address itself: no other port would do */
        }
    port = 0;
    if ((fd = bind_free_port(host, 0, &port)) < 0)
        return -1;
    close(fd);
    return port;
}

static int set_one(void *ctx, const char *name, const char *value)
{
    (void)ctx;
    return setenv(name, value, 1);
}

static const char *get_one(void *ctx, const char *name)
{
    (void)ctx;
    return getenv(name);
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

/* The emulated node rank runs on (DDP_RUN_NODE) */
static int node_of(int rank, int n, int m)
{
    int node = 0;

    while (node + 1 < m && first_rank(n, m, node + 1) <= rank)
        node++;
    return node;
}

/* In a new rank: die with ddp-run, even when it is SIGKILLed and cannot
 * forward anything. The parent may already have died before prctl. */
static void die_with_parent(pid_t parent)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
        _exit(128 + SIGKILL);
}

/* In a new rank: rank 0 inherits the listening socket (listen_fd >= 0),
 * every other rank gets neither it nor a DDPRT_LISTEN_FD of ddp-run's own. */
static void pass_listener(int rank, int listen_fd)
{
    char buf[16];

    if (rank != 0 || listen_fd < 0) {
        unsetenv(DRT_ENV_LISTEN_FD);
        return;
    }
    if (fcntl(listen_fd, F_SETFD, 0) < 0) {
        fprintf(stderr, "ddp-run: cannot pass the listening socket to rank 0: %s\n", strerror(errno));
        _exit(127);
    }
    snprintf(buf, sizeof(buf), "%d", listen_fd);
    setenv(DRT_ENV_LISTEN_FD, buf, 1);
}

/* NCCL_HOSTID (unless set): this host's name and the emulated node's
 * number, so NCCL tells the nodes apart as it does real hosts */
static void host_id(int node)
{
    char host[256] = "localhost", id[300];

    gethostname(host, sizeof(host) - 1);
    snprintf(id, sizeof(id), "%s-ddp-run-node%d", host, node);
    setenv("NCCL_HOSTID", id, 0);
}

/* DDP_TOPO_NODENAME, the node name libddprt reports (drt_node_name: a lost
 * rank's node), as the plugin sets SLURM's: the emulated node's, "nodeK",
 * even when ddp-run runs inside a SLURM step whose plugin set its own */
static void node_name(int node)
{
    char name[32];

    snprintf(name, sizeof(name), "node%d", node);
    setenv(DRT_ENV_NODENAME, name, 1);
}

static pid_t spawn(int rank, int n, int m, char **argv, int listen_fd, const char *run_id)
{
    int node = node_of(rank, n, m);
    pid_t pid, parent = getpid();
    contract_rank_t r;

    if ((pid = fork()) != 0)
        return pid;
    die_with_parent(parent);
    pass_listener(rank, listen_fd);
    r = (contract_rank_t){(uint32_t)rank, (uint32_t)n, (uint32_t)(rank - first_rank(n, m, node)),
                          (uint32_t)(first_rank(n, m, node + 1) - first_rank(n, m, node)),
                          (uint32_t)node, (uint32_t)m, 0};
    contract_rank_env(&r, set_one, NULL);
    contract_elastic_env(run_id, get_one, set_one, NULL);
    setenv_num("DDP_RUN_NODE", node);
    node_name(node);
    if (m > 1) /* emulated nodes are hosts of their own to NCCL too */
        host_id(node);
    setenv(DRT_ENV_OMP_THREADS, "1", 0);
    execvp(argv[0], argv);
    fprintf(stderr, "ddp-run: cannot run '%s': %s (check the program path)\n", argv[0],
            strerror(errno));
    _exit(127);
}

static int status_code(int st)
{
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* How a rank ended, as the messages say it */
static void ended(int st, char *how, size_t len)
{
    if (WIFEXITED(st))
        snprintf(how, len, "exited with status %d", WEXITSTATUS(st));
    else
        snprintf(how, len, "was killed by signal %d", WTERMSIG(st));
}

/* The end of a rank under --no-kill: said once, and counted. A rank killed
 * by a signal ddp-run did not forward is lost (what a node failure looks
 * like from here); any other non-zero end is a failure. */
typedef struct {
    int failed_status, lost_status; /* the first of each, 0: none yet */
    int ok, failed, lost;
} no_kill_t;

static void no_kill_end(no_kill_t *k, int r, int st, int left)
{
    char how[64];
    int code = status_code(st), lost = WIFSIGNALED(st) && !forwarded;

    if (code == 0) {
        k->ok++;
        return;
    }
    ended(st, how, sizeof(how));
    fprintf(stderr, "ddp-run: rank %d (node %d) %s%s\n", r, node_of(r, nranks, nnodes), how,
            left > 0 ? "; --no-kill: the others go on" : "");
    if (lost) {
        k->lost++;
        k->lost_status = k->lost_status ? k->lost_status : code;
    } else {
        k->failed++;
        k->failed_status = k->failed_status ? k->failed_status : code;
    }
}

/* --no-kill's exit status: the first failure's, else 0 when a rank was
 * left, else (every rank lost) the first lost rank's */
static int no_kill_status(const no_kill_t *k)
{
    int result = k->failed_status ? k->failed_status : k->ok ? 0 : k->lost_status;

    if (k->failed || k->lost)
        fprintf(stderr, "ddp-run: --no-kill: %d of %d rank%s exited 0, %d lost (killed by a "
                "signal), %d failed; exit status %d\n", k->ok, nranks, nranks == 1 ? "" : "s",
                k->lost, k->failed, result);
    return result;
}

/* Wait for every rank; the first failure stops the rest, unless no_kill. */
static int supervise(double grace, int no_kill)
{
    int left = nranks, result = 0, failed = -1;
    time_t stop_at = 0;
    no_kill_t k = {0, 0, 0, 0, 0};

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
            if (no_kill) {
                no_kill_end(&k, r, st, left);
            } else if (status_code(st) != 0 && failed < 0) {
                char how[64];
                failed = r;
                result = status_code(st);
                ended(st, how, sizeof(how));
                if (left > 0)
                    fprintf(stderr, "ddp-run: rank %d %s; stopping the other %d rank%s\n", r, how,
                            left, left == 1 ? "" : "s");
                forward(SIGTERM);
                stop_at = time(NULL) + (time_t)grace;
            }
        }
    }
    return no_kill ? no_kill_status(&k) : result;
}

typedef struct {
    int n, m;
    double grace;
    int no_kill;            /* -k: a failed rank does not stop the others */
    const char *addr;
    int per_node, nnodes;   /* torchrun's --nproc-per-node and --nnodes, 0: not given */
} args_t;

/* torchrun's options that mean nothing here: ddp-run runs every rank on
 * this machine, with no rendezvous backend and no restarts. */
static int torchrun_only(const char *name)
{
    static const char *const names[] = {"rdzv-backend", "rdzv_backend", "rdzv-endpoint",
                                        "rdzv_endpoint", "rdzv-id", "rdzv_id", "rdzv-conf",
                                        "rdzv_conf", "node-rank", "node_rank", "max-restarts",
                                        "max_restarts", "monitor-interval", "monitor_interval",
                                        "start-method", "start_method", "role", "run-path",
                                        "run_path", "log-dir", "log_dir", "redirects", "tee",
                                        "local-addr", "local_addr"};

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcmp(name, names[i]))
            return 1;
    return 0;
}

/* The option getopt_long refused, by its name as written */
static int unknown_option(char **argv)
{
    const char *opt = argv[optind - 1], *name = opt + strspn(opt, "-");
    char word[64];

    snprintf(word, sizeof(word), "%.*s", (int)strcspn(name, "="), name);
    if (torchrun_only(word))
        fprintf(stderr, "ddp-run: torchrun's --%s has no meaning here: ddp-run starts every "
                "rank on this machine itself (drop it; see ddp-run --help)\n", word);
    else
        fail("unknown option", "see ddp-run --help; torchrun's --nproc-per-node, --nnodes, "
             "--standalone, --master-addr and --master-port are understood");
    return -1;
}

/* torchrun's --nproc-per-node P --nnodes M: P x M ranks on M emulated nodes */
static int torchrun_counts(args_t *a)
{
    int m = a->nnodes ? a->nnodes : a->m, n;

    if (!a->per_node)
        return a->nnodes && !a->n ? (fprintf(stderr, "ddp-run: --nnodes %d without "
                                              "--nproc-per-node or -n (e.g. --nnodes %d "
                                              "--nproc-per-node 4)\n", a->nnodes, a->nnodes), -1)
                                  : (a->nnodes ? (a->m = a->nnodes, 0) : 0);
    n = a->per_node * m;
    if (a->n && a->n != n) {
        fprintf(stderr, "ddp-run: -n %d but --nproc-per-node %d x %d node%s is %d ranks (give "
                "one of them)\n", a->n, a->per_node, m, m == 1 ? "" : "s", n);
        return -1;
    }
    a->n = n;
    a->m = m;
    return 0;
}

/* Returns 0 to run, 1 after --help/--version, -1 on a bad argument. */
static int parse_args(int argc, char **argv, args_t *a)
{
    static const struct option opts[] = {{"nodes", 1, 0, 'N'}, {"master-addr", 1, 0, 'a'},
                                         {"master_addr", 1, 0, 'a'}, {"master-port", 1, 0, 'p'},
                                         {"master_port", 1, 0, 'p'},
                                         {"nproc-per-node", 1, 0, 'P'},
                                         {"nproc_per_node", 1, 0, 'P'}, {"nnodes", 1, 0, 'M'},
                                         {"standalone", 0, 0, 'S'}, {"grace", 1, 0, 'g'},
                                         {"no-kill", 0, 0, 'k'},
                                         {"help", 0, 0, 'h'}, {"version", 0, 0, 'V'},
                                         {0, 0, 0, 0}};
    int c, rc = 0, port;

    *a = (args_t){0, 1, 5, 0, "127.0.0.1", 0, 0};
    opterr = 0; /* unknown_option says it, naming torchrun's where it is one */
    while (rc == 0 && (c = getopt_long(argc, argv, "+n:N:hk", opts, NULL)) != -1) {
        switch (c) {
        case 'n': rc = parse_int("-n", optarg, 1, MAX_RANKS, &a->n); break;
        case 'N': rc = parse_int("--nodes", optarg, 1, MAX_RANKS, &a->m); break;
        case 'P': rc = parse_int("--nproc-per-node", optarg, 1, MAX_RANKS, &a->per_node); break;
        case 'M': rc = parse_int("--nnodes (a count here, no MIN:MAX range)", optarg, 1,
                                 MAX_RANKS, &a->nnodes); break;
        case 'a': a->addr = optarg; break;
        case 'p':
            if ((rc = parse_int("--master-port", optarg, 1, 65535, &port)) == 0)
                setenv(DRT_ENV_MASTER_PORT, optarg, 1);
            break;
        case 'S': break; /* ddp-run is always standalone */
        case 'g': rc = parse_seconds("--grace", optarg, &a->grace); break;
        case 'k': a->no_kill = 1; break;
        case 'h': fputs(USAGE, stdout); return 1;
        case 'V': puts("ddp-run (ddp-topo) " PACKAGE_VERSION); return 1;
        default: return unknown_option(argv);
        }
    }
    if (rc == 0)
        rc = torchrun_counts(a);
    if (rc == 0 && (a->n < 1 || a->m > a->n || optind >= argc)) {
        fprintf(stderr, "ddp-run: %s (e.g. ddp-run -n 4 --nodes 2 ddp-allreduce-bench)\n",
                optind >= argc ? "no program given" : a->n < 1 ? "-n N is required"
                : "--nodes exceeds -n: every emulated node needs a rank");
        return -1;
    }
    return rc;
}

/* Whether execvp would find and run `prog`: said once here instead of by
 * every rank. A script is often meant for an interpreter. */
static int check_program(const char *prog, int n)
{
    const char *dot = strrchr(prog, '.'), *path = getenv("PATH");
    char full[4096];
    int found = 0, why = ENOENT;

    if (strchr(prog, '/')) {
        found = access(prog, X_OK) == 0;
        why = errno;
    } else {
        for (const char *p = path ? path : "/usr/bin:/bin"; !found && *p;) {
            size_t len = strcspn(p, ":");
            snprintf(full, sizeof(full), "%.*s/%s", (int)(len ? len : 1), len ? p : ".", prog);
            found = access(full, X_OK) == 0;
            if (!found && errno != ENOENT)
                why = errno;
            p += len + (p[len] == ':');
        }
    }
    if (found)
        return 0;
    if (dot && (!strcmp(dot, ".py") || !strcmp(dot, ".sh")))
        fprintf(stderr, "ddp-run: cannot run '%s': %s (start a script through its interpreter: "
                "ddp-run -n %d %s %s)\n", prog, strerror(why), n,
                !strcmp(dot, ".py") ? "python3" : "bash", prog);
    else
        fprintf(stderr, "ddp-run: cannot run '%s': %s (check the program path%s)\n", prog,
                strerror(why), strchr(prog, '/') ? "" : ", or give it as ./PROGRAM");
    return -1;
}

/* A launcher as the program forks workers of its own in every rank: said
 * once, as the plugin says it under srun. */
static void warn_launcher(int argc, char **argv, int n)
{
    const char *name = contract_launcher_name(argc, argv);

    if (name)
        fprintf(stderr, "ddp-run: warning: %s is a launcher: each of the %d rank%s starts "
                "workers of its own (ranks x workers processes sharing one rank's variables "
                "and ports); run the training script itself, e.g. ddp-run -n %d python3 "
                "train.py\n", name, n, n == 1 ? "" : "s", n);
}

/* A MASTER_PORT of the user's that another process already listens on:
 * rank 0's TCPStore fails, or its ranks join the other job's store. */
static void warn_master_port(const char *host)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    const char *port = getenv(DRT_ENV_MASTER_PORT);
    int one = 1, fd, busy;

    if (getaddrinfo(host, port, &hints, &ai) != 0)
        return;
    if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0) {
        freeaddrinfo(ai);
        return;
    }
    /* as TCPStore binds: a port in TIME_WAIT is usable, a listener is not */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    busy = bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno == EADDRINUSE;
    close(fd);
    freeaddrinfo(ai);
    if (busy)
        fprintf(stderr, "ddp-run: warning: MASTER_PORT=%s (from the environment) is already in "
                "use on %s: another job's store? torch's TCPStore in rank 0 will fail, or the "
                "ranks join that job (unset MASTER_PORT and ddp-run picks a free port)\n", port,
                host);
}

/* DDPRT_PORT, unless the user set one: a port this process listens on for
 * rank 0's runtime. MASTER_PORT, unless the user set one: another free
 * port, bound only while it is picked, as torchrun --standalone does, so
 * torch's TCPStore can bind it (its bind races other processes that bind
 * that very port, as under torchrun; the runtime's never does). */
static int pick_ports(const char *host, int *listen_fd)
{
    const char *user = getenv(DRT_ENV_PORT);
    int port = 0;

    *listen_fd = -1;
    unsetenv(DRT_ENV_LISTEN_FD); /* a launcher's above us is not ours to pass on */
    if (!user || !*user) { /* empty is unset, as for the runtime (env.c) */
        if ((*listen_fd = bind_free_port(host, 1, &port)) < 0)
            return -1;
        setenv_num(DRT_ENV_PORT, port);
    }
    if (getenv(DRT_ENV_MASTER_PORT)) {
        warn_master_port(host);
        return 0;
    }
    /* while the runtime's socket is bound, its port cannot be picked */
    if ((port = pick_master_port(host)) < 0)
        return -1;
    setenv_num(DRT_ENV_MASTER_PORT, port);
    return 0;
}

static int port_error(const char *addr)
{
    if (errno == EADDRNOTAVAIL)
        fprintf(stderr, "ddp-run: cannot listen on --master-addr %s: not an address of this "
                "machine's network namespace (does rank 0 run elsewhere, through a wrapper into "
                "another namespace? set MASTER_PORT and DDPRT_PORT to ports free there)\n", addr);
    else
        fprintf(stderr, "ddp-run: cannot listen on a free TCP port: %s (check `ulimit -n`, or "
                "set MASTER_PORT and DDPRT_PORT)\n", strerror(errno));
    return 2;
}

int main(int argc, char **argv)
{
    args_t a;
    int rc = parse_args(argc, argv, &a), listen_fd;
    char secret[2 * DRT_SECRET_LEN + 1], run_id[32];
    struct sigaction sa = {.sa_handler = forward};

    if (rc != 0)
        return rc < 0 ? 2 : 0;
    if (check_program(argv[optind], a.n) < 0)
        return 127; /* as the shell, and as each rank would have */
    warn_launcher(argc - optind, argv + optind, a.n);
    if (pick_ports(a.addr, &listen_fd) < 0)
        return port_error(a.addr);
    /* torchrun --standalone's run id is a fresh uuid: ours is this process */
    snprintf(run_id, sizeof(run_id), "ddp-run-%ld", (long)getpid());
    if (contract_secret_make(secret, sizeof(secret)) < 0)
        return fail("cannot make the job's secret", "no randomness available");
    setenv(DRT_ENV_MASTER_ADDR, a.addr, 1);
    setenv(DRT_ENV_SECRET, secret, 1);
    nranks = a.n;
    nnodes = a.m;
    if (!(pids = calloc((size_t)a.n, sizeof(pid_t))))
        return fail("out of memory", "use fewer ranks");
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    for (int r = 0; r < a.n; r++) {
        if ((pids[r] = spawn(r, a.n, a.m, argv + optind, listen_fd, run_id)) < 0) {
            forward(SIGKILL);
            return fail("fork failed", "too many processes?");
        }
        if (r == 0 && listen_fd >= 0)
            close(listen_fd); /* rank 0 has it; the port stays bound */
    }
    return supervise(a.grace, a.no_kill);
}
