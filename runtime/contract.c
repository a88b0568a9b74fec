/* SPDX-License-Identifier: Apache-2.0 */
/* The launchers' and the runtime's common ground (contract.h). */
#include "contract.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

static int set_u32(contract_set_fn set, void *ctx, const char *name, uint32_t v)
{
    char buf[16];

    snprintf(buf, sizeof(buf), "%u", v);
    return set(ctx, name, buf);
}

int contract_rank_env(const contract_rank_t *r, contract_set_fn set, void *ctx)
{
    /* | not ||: every variable is tried, so a launcher logs each failure */
    return set_u32(set, ctx, DRT_ENV_RANK, r->rank) |
           set_u32(set, ctx, DRT_ENV_WORLD_SIZE, r->world) |
           set_u32(set, ctx, DRT_ENV_LOCAL_RANK, r->local_rank) |
           set_u32(set, ctx, DRT_ENV_LOCAL_WORLD_SIZE, r->local_world) |
           set_u32(set, ctx, DRT_ENV_GROUP_RANK, r->node) |
           set_u32(set, ctx, DRT_ENV_NODE_RANK, r->node) |
           set_u32(set, ctx, DRT_ENV_GROUP_WORLD_SIZE, r->nodes) |
           set(ctx, DRT_ENV_ROLE_NAME, "default") |
           set_u32(set, ctx, DRT_ENV_ROLE_RANK, r->rank) |
           set_u32(set, ctx, DRT_ENV_ROLE_WORLD_SIZE, r->world) |
           set_u32(set, ctx, DRT_ENV_RESTART_COUNT, r->restart);
}

/* Sets name to value unless the rank's environment has it already. */
static int set_default(contract_get_fn get, contract_set_fn set, void *ctx, const char *name,
                       const char *value)
{
    return get(ctx, name) ? 0 : set(ctx, name, value);
}

int contract_elastic_env(const char *run_id, contract_get_fn get, contract_set_fn set, void *ctx)
{
    const char *async = get(ctx, DRT_ENV_TORCH_NCCL_ASYNC);
    char *copy;
    int rc;

    if (!async)
        async = get(ctx, DRT_ENV_NCCL_ASYNC);
    /* a copy: setting one variable may move the other's storage (setenv) */
    if (!(copy = strdup(async ? async : "1")))
        return -1;
    rc = set_default(get, set, ctx, DRT_ENV_RUN_ID, run_id) |
         set_default(get, set, ctx, DRT_ENV_MAX_RESTARTS, "0") |
         set_default(get, set, ctx, DRT_ENV_USE_AGENT_STORE, "False") |
         set_default(get, set, ctx, DRT_ENV_NCCL_ASYNC, copy) |
         set_default(get, set, ctx, DRT_ENV_TORCH_NCCL_ASYNC, copy);
    free(copy);
    return rc;
}

int contract_secret_make(char *hex, size_t len)
{
    unsigned char b[DRT_SECRET_LEN];

    /* getrandom, not libsodium: the plugin and ddp-run do not link it */
    if (len < 2 * sizeof(b) + 1 || getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
        return -1;
    for (size_t i = 0; i < sizeof(b); i++)
        snprintf(hex + 2 * i, 3, "%02x", b[i]);
    return 0;
}

const char *contract_iface_named(const char *ddprt, const char *gloo, const char **var,
                                 char *buf, size_t len)
{
    const char *v = ddprt;

    *var = DRT_ENV_IFNAME;
    if (!v || !*v) {
        v = gloo;
        *var = DRT_ENV_GLOO_IFNAME;
    }
    if (!v || !*v)
        return NULL;
    snprintf(buf, len, "%.*s", (int)strcspn(v, ","), v);
    return buf;
}

uint32_t contract_route_ip(const char *master)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *ai;
    struct sockaddr_in local = {0};
    socklen_t len = sizeof(local);
    int fd;

    if (getaddrinfo(master, "9", &hints, &ai) != 0)
        return htonl(INADDR_LOOPBACK);
    /* a UDP connect sends nothing: it only asks the kernel for the route */
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
        getsockname(fd, (struct sockaddr *)&local, &len);
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return local.sin_addr.s_addr ? local.sin_addr.s_addr : htonl(INADDR_LOOPBACK);
}

static uint32_t ipv4_of(const struct ifaddrs *i)
{
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
        return 0;
    return ((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
}

static void take(contract_iface_t *out, contract_if_how_t how, const char *name, uint32_t ip)
{
    out->how = how;
    snprintf(out->name, sizeof(out->name), "%s", name ? name : "");
    out->ip = ip;
}

/* An address of interface `name`: prefer, if it holds it, else its first. */
static int pick_named(const struct ifaddrs *ifs, const char *name, uint32_t prefer,
                      contract_iface_t *out)
{
    uint32_t found = 0;

    for (const struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        uint32_t a = ipv4_of(i);
        if (a && !strcmp(i->ifa_name, name) && (!found || a == prefer))
            found = a;
    }
    take(out, CONTRACT_IF_NAMED, name, found);
    return found ? 0 : -1;
}

static const struct ifaddrs *holding(const struct ifaddrs *ifs, uint32_t ip)
{
    for (const struct ifaddrs *i = ifs; i; i = i->ifa_next)
        if (ipv4_of(i) == ip)
            return i;
    return NULL;
}

static const struct ifaddrs *first_up(const struct ifaddrs *ifs)
{
    for (const struct ifaddrs *i = ifs; i; i = i->ifa_next)
        if (ipv4_of(i) && (i->ifa_flags & IFF_UP) && !(i->ifa_flags & IFF_LOOPBACK))
            return i;
    return NULL;
}

int contract_iface_pick(const struct ifaddrs *ifs, const char *named, uint32_t route,
                        unsigned nnodes, contract_iface_t *out)
{
    const struct ifaddrs *on = holding(ifs, route), *other;

    out->var = NULL;
    if (named)
        return pick_named(ifs, named, route, out);
    if (nnodes <= 1 || (ntohl(route) >> 24) != 127)
        take(out, CONTRACT_IF_ROUTE, on ? on->ifa_name : NULL, route);
    else if ((other = first_up(ifs)))
        take(out, CONTRACT_IF_FALLBACK, other->ifa_name, ipv4_of(other));
    else
        take(out, CONTRACT_IF_LOOPBACK, on ? on->ifa_name : NULL, route);
    return 0;
}

int contract_iface_choose(const char *master, unsigned nnodes, const char *ddprt,
                          const char *gloo, contract_iface_t *out, char *err, size_t errlen)
{
    char buf[256]; /* whole, so an error names what was set, not a cut name */
    const char *var, *named = contract_iface_named(ddprt, gloo, &var, buf, sizeof(buf));
    struct ifaddrs *ifs = NULL;
    int rc;

    if (getifaddrs(&ifs) < 0)
        ifs = NULL; /* as a node without interfaces: a named one is missing */
    rc = contract_iface_pick(ifs, named, contract_route_ip(master), nnodes, out);
    if (ifs)
        freeifaddrs(ifs);
    if (named)
        out->var = var;
    if (rc < 0)
        snprintf(err, errlen, "%s=%s: this node has no interface %s with an IPv4 address (name "
                 "one that has, see `ip -4 addr`, or unset %s)", var, named, named, var);
    return rc;
}

/* ---- launchers: torchrun and kin start workers of their own, so under srun
 * or ddp-run they share one rank's plan and ports (the plugin warns at run
 * time, ddp-run at start, the dry run from the job script) */

/* argv[0] without its directory */
static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');

    return slash ? slash + 1 : path;
}

/* python, python3, python3.11: the interpreter, not python-config */
static int is_python(const char *name)
{
    if (strncmp(name, "python", 6))
        return 0;
    return name[6 + strspn(name + 6, "0123456789.")] == '\0';
}

static int is_torch_launch_module(const char *module)
{
    return !strcmp(module, "torch.distributed.run") || !strcmp(module, "torch.distributed.launch");
}

/* The module python runs with -m, NULL when it runs a script or -c: the
 * interpreter's options come first; -W and -X take the next argument. */
static const char *python_module(int argc, char **argv)
{
    for (int i = 1; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "-m"))
            return i + 1 < argc ? argv[i + 1] : NULL;
        if (!strncmp(argv[i], "-m", 2))
            return argv[i] + 2;
        if (!strcmp(argv[i], "-c") || !strcmp(argv[i], "-") || !strcmp(argv[i], "--"))
            return NULL;
        if (!strcmp(argv[i], "-W") || !strcmp(argv[i], "-X"))
            i++;
    }
    return NULL;
}

const char *contract_launcher_name(int argc, char **argv)
{
    const char *name, *module;

    if (argc < 1 || !argv || !argv[0])
        return NULL;
    name = base_name(argv[0]);
    if (!strcmp(name, "torchrun"))
        return "torchrun";
    if (!strcmp(name, "deepspeed"))
        return "deepspeed";
    if (!strcmp(name, "accelerate") && argc > 1 && !strcmp(argv[1], "launch"))
        return "accelerate launch";
    if (is_python(name) && (module = python_module(argc, argv)) && is_torch_launch_module(module))
        return !strcmp(module, "torch.distributed.run") ? "python -m torch.distributed.run"
                                                        : "python -m torch.distributed.launch";
    return NULL;
}
