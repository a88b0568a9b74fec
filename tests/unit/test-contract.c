/* SPDX-License-Identifier: Apache-2.0 */
/* What the plugin, ddp-run and the runtime share (runtime/contract.c): the
 * interface precedence over interface lists shaped as getifaddrs returns
 * them, then on this machine; the per-rank variables; the secret. */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdlib.h>

#include "contract.h"
#include "tap.h"

#define MAXIF 8

typedef struct {
    struct ifaddrs ifa[MAXIF];
    struct sockaddr_in sin[MAXIF];
    int n;
} iflist_t;

/* Appends one IPv4 address of interface name, as getifaddrs lists it. */
static void add(iflist_t *l, const char *name, const char *ip, unsigned flags)
{
    int i = l->n++;

    l->sin[i] = (struct sockaddr_in){.sin_family = AF_INET};
    inet_pton(AF_INET, ip, &l->sin[i].sin_addr);
    l->ifa[i] = (struct ifaddrs){.ifa_name = (char *)name, .ifa_flags = flags,
                                 .ifa_addr = (struct sockaddr *)&l->sin[i]};
    if (i > 0)
        l->ifa[i - 1].ifa_next = &l->ifa[i];
}

static uint32_t ip(const char *text)
{
    struct in_addr a;

    inet_pton(AF_INET, text, &a);
    return a.s_addr;
}

static const char *text(uint32_t a, char *buf)
{
    return inet_ntop(AF_INET, &a, buf, INET_ADDRSTRLEN);
}

/* One case of the precedence: the interfaces, what was named, the route
 * to MASTER_ADDR, the job's node count, and what must come out. */
typedef struct {
    int bare; /* the node has loopback only */
    const char *named, *route;
    unsigned nnodes;
    const char *want; /* "how name address", or "error" */
    const char *why;
} pick_case_t;

static void picks(const iflist_t *l, const pick_case_t *k)
{
    static const char *how[] = {"named", "route", "fallback", "loopback"};
    contract_iface_t out;
    char got[128], a[INET_ADDRSTRLEN];

    if (contract_iface_pick(l->ifa, k->named, ip(k->route), k->nnodes, &out) < 0)
        snprintf(got, sizeof(got), "error");
    else
        snprintf(got, sizeof(got), "%s %s %s", how[out.how], out.name[0] ? out.name : "-",
                 text(out.ip, a));
    is_str(got, k->want, "%s", k->why);
}

static void precedence(void)
{
    char buf[256];
    const char *var;

    is_str(contract_iface_named("ib0", "eth0", &var, buf, sizeof(buf)), "ib0",
           "DDPRT_SOCKET_IFNAME wins over GLOO_SOCKET_IFNAME");
    is_str(var, "DDPRT_SOCKET_IFNAME", "... and is named as the source");
    is_str(contract_iface_named("", "eth1,eth0", &var, buf, sizeof(buf)), "eth1",
           "an empty DDPRT_SOCKET_IFNAME is unset; Gloo's list counts by its first entry");
    is_str(var, "GLOO_SOCKET_IFNAME", "... named as the source");
    ok(!contract_iface_named(NULL, "", &var, buf, sizeof(buf)), "neither set: no named interface");
}

static void pick(void)
{
    iflist_t node = {0}, bare = {0};

    add(&node, "lo", "127.0.0.1", IFF_UP | IFF_LOOPBACK);
    add(&node, "down0", "10.2.0.5", 0);
    add(&node, "eth0", "10.0.0.5", IFF_UP);
    add(&node, "ib0", "10.1.0.5", IFF_UP);
    add(&node, "ib0", "10.1.1.5", IFF_UP);
    add(&bare, "lo", "127.0.0.1", IFF_UP | IFF_LOOPBACK);

    static const pick_case_t cases[] = {
        {0, "ib0", "10.0.0.5", 2, "named ib0 10.1.0.5",
         "a named interface wins over the route (its first address)"},
        {0, "ib0", "10.1.1.5", 2, "named ib0 10.1.1.5",
         "... its address that routes to MASTER_ADDR when it has that one"},
        {0, "down0", "10.0.0.5", 2, "named down0 10.2.0.5",
         "... even when it is down (a person chose it)"},
        {0, "nosuch0", "10.0.0.5", 1, "error", "a named interface the node lacks is an error"},
        {0, NULL, "10.0.0.5", 4, "route eth0 10.0.0.5",
         "unnamed: the interface that routes to MASTER_ADDR"},
        {0, NULL, "127.0.0.1", 1, "route lo 127.0.0.1", "loopback is right for a job on one node"},
        {0, NULL, "127.0.0.1", 2, "fallback eth0 10.0.0.5",
         "loopback on several nodes: the first interface up and not loopback (down0 skipped)"},
        {0, NULL, "127.0.1.1", 2, "fallback eth0 10.0.0.5",
         "... also for a loopback address no interface lists"},
        {0, NULL, "10.9.0.1", 1, "route - 10.9.0.1",
         "a route address no interface lists is still the route"},
        {1, NULL, "127.0.0.1", 3, "loopback lo 127.0.0.1",
         "a node with loopback only has nothing better to offer"},
        {1, "lo", "127.0.0.1", 3, "named lo 127.0.0.1",
         "a named loopback interface is taken on several nodes too"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        picks(cases[i].bare ? &bare : &node, &cases[i]);
}

static void here(void)
{
    contract_iface_t out;
    char err[512] = "", a[INET_ADDRSTRLEN];

    ok(contract_route_ip("127.0.0.1") == htonl(INADDR_LOOPBACK), "127.0.0.1 routes from 127.0.0.1");
    int rc = contract_iface_choose("127.0.0.1", 2, "lo", NULL, &out, err, sizeof(err));

    /* (each call before its ok(): the message's arguments read its result) */
    ok(rc == 0 && out.how == CONTRACT_IF_NAMED && !strcmp(out.name, "lo") && out.var &&
       !strcmp(out.var, "DDPRT_SOCKET_IFNAME"),
       "this machine: DDPRT_SOCKET_IFNAME=lo gives lo (%s %s)", out.name, text(out.ip, a));
    rc = contract_iface_choose("127.0.0.1", 1, NULL, NULL, &out, err, sizeof(err));
    ok(rc == 0 && out.how == CONTRACT_IF_ROUTE && !strcmp(out.name, "lo"),
       "this machine, one node, MASTER_ADDR 127.0.0.1: lo (%s)", out.name);
    ok(contract_iface_choose("127.0.0.1", 2, NULL, "nosuch0,lo", &out, err, sizeof(err)) < 0,
       "GLOO_SOCKET_IFNAME=nosuch0,lo: refused");
    is_str(err, "GLOO_SOCKET_IFNAME=nosuch0: this node has no interface nosuch0 with an IPv4 "
           "address (name one that has, see `ip -4 addr`, or unset GLOO_SOCKET_IFNAME)",
           "... naming the variable and the interface");
}

typedef struct {
    char line[512];
    int fail_on; /* the call that fails, -1: none */
    int calls;
} sink_t;

static int collect(void *ctx, const char *name, const char *value)
{
    sink_t *s = ctx;
    size_t o = strlen(s->line);

    snprintf(s->line + o, sizeof(s->line) - o, "%s%s=%s", o ? " " : "", name, value);
    return s->calls++ == s->fail_on ? -1 : 0;
}

static void rank_env(void)
{
    contract_rank_t r = {.rank = 5, .world = 8, .local_rank = 1, .local_world = 4, .node = 1,
                         .nodes = 2, .restart = 3};
    sink_t s = {.fail_on = -1};
    int rc;

    ok(contract_rank_env(&r, collect, &s) == 0, "the per-rank variables are set");
    is_str(s.line, "RANK=5 WORLD_SIZE=8 LOCAL_RANK=1 LOCAL_WORLD_SIZE=4 GROUP_RANK=1 NODE_RANK=1 "
           "GROUP_WORLD_SIZE=2 ROLE_NAME=default ROLE_RANK=5 ROLE_WORLD_SIZE=8 "
           "TORCHELASTIC_RESTART_COUNT=3", "... torchrun's names and values");
    s = (sink_t){.fail_on = 0};
    rc = contract_rank_env(&r, collect, &s);
    ok(rc < 0 && s.calls == 11,
       "a failing variable fails the call, after all 11 were tried (%d)", s.calls);
}

/* A rank's environment for contract_elastic_env: what the user set, then
 * what the call set (collect records it). */
typedef struct {
    sink_t sink;
    const char *user[4][2];
} envs_t;

static const char *lookup(void *ctx, const char *name)
{
    envs_t *e = ctx;
    const char *at;

    for (int i = 0; i < 4 && e->user[i][0]; i++)
        if (!strcmp(e->user[i][0], name))
            return e->user[i][1];
    /* set by the call itself: "NAME=" at a word's start */
    for (at = e->sink.line; (at = strstr(at, name)); at++)
        if ((at == e->sink.line || at[-1] == ' ') && at[strlen(name)] == '=')
            return "set";
    return NULL;
}

static int collect_env(void *ctx, const char *name, const char *value)
{
    return collect(&((envs_t *)ctx)->sink, name, value);
}

static void elastic_env(void)
{
    envs_t e = {.sink = {.fail_on = -1}};

    ok(contract_elastic_env("4242", lookup, collect_env, &e) == 0, "the elastic agent's variables are set");
    is_str(e.sink.line, "TORCHELASTIC_RUN_ID=4242 TORCHELASTIC_MAX_RESTARTS=0 "
           "TORCHELASTIC_USE_AGENT_STORE=False NCCL_ASYNC_ERROR_HANDLING=1 "
           "TORCH_NCCL_ASYNC_ERROR_HANDLING=1", "... as torchrun 1.13 sets them (local_elastic_agent.py)");
    e = (envs_t){.sink = {.fail_on = -1},
                 .user = {{"TORCHELASTIC_RUN_ID", "mine"}, {"NCCL_ASYNC_ERROR_HANDLING", "0"}}};
    contract_elastic_env("4242", lookup, collect_env, &e);
    is_str(e.sink.line, "TORCHELASTIC_MAX_RESTARTS=0 TORCHELASTIC_USE_AGENT_STORE=False "
           "TORCH_NCCL_ASYNC_ERROR_HANDLING=0", "a user's values win; the new NCCL name takes the old one's 0");
    e = (envs_t){.sink = {.fail_on = -1},
                 .user = {{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}, {"TORCHELASTIC_MAX_RESTARTS", "2"},
                          {"TORCHELASTIC_USE_AGENT_STORE", "True"}}};
    contract_elastic_env("4242", lookup, collect_env, &e);
    is_str(e.sink.line, "TORCHELASTIC_RUN_ID=4242 NCCL_ASYNC_ERROR_HANDLING=3",
           "... and the old NCCL name takes the new one's value");
    e = (envs_t){.sink = {.fail_on = 1}};
    ok(contract_elastic_env("4242", lookup, collect_env, &e) < 0 && e.sink.calls == 5,
       "a failing variable fails the call, after all 5 were tried (%d)", e.sink.calls);
}

static void secret(void)
{
    char a[2 * DRT_SECRET_LEN + 1], b[sizeof(a)], small[2 * DRT_SECRET_LEN];

    ok(contract_secret_make(a, sizeof(a)) == 0 && strlen(a) == 64 &&
       strspn(a, "0123456789abcdef") == 64, "a secret is 64 hex digits (%s)", a);
    ok(contract_secret_make(b, sizeof(b)) == 0 && strcmp(a, b), "... and a fresh one each time");
    ok(contract_secret_make(small, sizeof(small)) < 0, "a buffer without room for the NUL is refused");
}

int main(void)
{
    precedence();
    pick();
    here();
    rank_env();
    elastic_env();
    secret();
    return tap_done();
}
