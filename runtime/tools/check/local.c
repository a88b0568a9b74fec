/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-check: what one rank checks on its own node: its planned GPU, cores
 * and NIC (the plugin's DDP_TOPO_* variables) exist and are usable. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_* */
#include "config.h"
#include "check.h"

#include <dirent.h>
#include <errno.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "contract.h"

/* the cost model's figure for a TCP link of unknown rate: 10 Gb/s (README,
 * "The cost model") */
#define CK_TCP_GBPS (10.0 / 8)

/* A small file's first line, without its newline; -1 when unreadable. */
static int read_line(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "re");
    int ok = f && fgets(buf, (int)len, f);

    if (f)
        fclose(f);
    if (!ok)
        return -1;
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    if (!d)
        return -1;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* DDP_TOPO_GPU numbers GPUs as the node does, so the driver must list
 * that many; DDP_TOPO_DEVICE must lie inside CUDA_VISIBLE_DEVICES. */
static void check_gpu(ck_rank_t *me)
{
    const char *g = getenv("DDP_TOPO_GPU"), *dev = getenv("DDP_TOPO_DEVICE");
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    char *end;
    long k;
    int have;

    if (!g || !*g) {
        ck_note(me, 0, "no GPU planned");
        return;
    }
    k = strtol(g, &end, 10);
    if (*end || k < 0) {
        ck_note(me, 1, "GPU: DDP_TOPO_GPU='%.20s' is not a GPU index", g);
        return;
    }
    have = count_entries("/proc/driver/nvidia/gpus");
    if (have <= k) {
        ck_note(me, 1, "GPU %ld planned (DDP_TOPO_GPU) but %s", k, have < 0
                ? "this node has no NVIDIA driver (/proc/driver/nvidia/gpus is missing)"
                : "the driver lists fewer GPUs (/proc/driver/nvidia/gpus)");
        return;
    }
    if (dev && cvd) {
        long d = strtol(dev, &end, 10), listed = 1;
        for (const char *p = cvd; *p; p++)
            listed += *p == ',';
        if (*end || d < 0 || d >= listed) {
            ck_note(me, 1, "GPU: DDP_TOPO_DEVICE=%.20s is not a device of "
                    "CUDA_VISIBLE_DEVICES=%.60s", dev, cvd);
            return;
        }
    }
    ck_note(me, 0, "GPU %ld present", k);
}

/* "0-3,8" into set; -1 on anything else */
static int cpus_parse(const char *s, cpu_set_t *set)
{
    CPU_ZERO(set);
    while (*s) {
        char *end;
        long lo = strtol(s, &end, 10), hi = lo;
        if (end == s || lo < 0 || lo >= CPU_SETSIZE)
            return -1;
        if (*end == '-' && ((hi = strtol(end + 1, &end, 10)) < lo || hi >= CPU_SETSIZE))
            return -1;
        for (long c = lo; c <= hi; c++)
            CPU_SET((int)c, set);
        if (*end && *end != ',')
            return -1;
        s = *end ? end + 1 : end;
    }
    return 0;
}

static void cpus_format(const cpu_set_t *set, char *buf, size_t len)
{
    size_t o = 0;

    buf[0] = '\0';
    for (int c = 0; c < CPU_SETSIZE && o + 24 < len; c++) {
        int hi = c;
        if (!CPU_ISSET(c, set))
            continue;
        while (hi + 1 < CPU_SETSIZE && CPU_ISSET(hi + 1, set))
            hi++;
        o += (size_t)snprintf(buf + o, len - o, hi > c ? "%s%d-%d" : "%s%d", o ? "," : "", c, hi);
        c = hi;
    }
}

/* The planned cores must be ones this task may run on. */
static void check_cpus(ck_rank_t *me)
{
    const char *s = getenv("DDP_TOPO_CPUS");
    cpu_set_t plan, allowed, both;
    char text[64];

    if (!s || !*s) {
        ck_note(me, 0, "no cores planned");
        return;
    }
    if (cpus_parse(s, &plan) < 0) {
        ck_note(me, 1, "cores: DDP_TOPO_CPUS='%.40s' is not a CPU list", s);
        return;
    }
    if (sched_getaffinity(0, sizeof(allowed), &allowed) < 0) {
        ck_note(me, 1, "cores: cannot read this task's affinity: %s", strerror(errno));
        return;
    }
    CPU_AND(&both, &plan, &allowed);
    if (!CPU_EQUAL(&both, &plan)) {
        cpus_format(&allowed, text, sizeof(text));
        ck_note(me, 1, "cores %.40s planned (DDP_TOPO_CPUS) but the task may run on %s only",
                s, text);
        return;
    }
    ck_note(me, 0, "cores %.40s", s);
}

/* An InfiniBand device: some port ACTIVE; its rate is the prediction. */
static int check_ib(ck_rank_t *me, const char *nic)
{
    char path[PATH_MAX], state[64] = "", rate[64];
    int ports = 0;

    for (int p = 1; p <= 8; p++) {
        snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%d/state", nic, p);
        if (read_line(path, state, sizeof(state)) < 0)
            break;
        ports++;
        if (strstr(state, "ACTIVE")) {
            snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%d/rate", nic, p);
            if (read_line(path, rate, sizeof(rate)) == 0 && atof(rate) > 0)
                me->link_pred = atof(rate) / 8;
            ck_note(me, 0, "NIC %s port %d ACTIVE", nic, p);
            return 0;
        }
    }
    if (!ports)
        return -1;
    ck_note(me, 1, "NIC %s: no port is ACTIVE (the last one read: %s)", nic, state);
    return 0;
}

/* A network interface: operstate up (loopback and some virtual devices say
 * "unknown": then the carrier decides); sysfs speed in Mb/s when known. */
static void check_netdev(ck_rank_t *me, const char *nic, const char *var)
{
    char path[PATH_MAX], state[32], carrier[8] = "0", speed[32];

    snprintf(path, sizeof(path), "/sys/class/net/%s/operstate", nic);
    if (read_line(path, state, sizeof(state)) < 0) {
        ck_note(me, 1, "NIC %s (%s) does not exist on this node", nic, var);
        return;
    }
    snprintf(path, sizeof(path), "/sys/class/net/%s/carrier", nic);
    read_line(path, carrier, sizeof(carrier));
    if (strcmp(state, "up") && !(!strcmp(state, "unknown") && !strcmp(carrier, "1"))) {
        ck_note(me, 1, "NIC %s (%s) is %s, not up", nic, var, state);
        return;
    }
    snprintf(path, sizeof(path), "/sys/class/net/%s/speed", nic);
    if (read_line(path, speed, sizeof(speed)) == 0 && atol(speed) > 0) {
        me->link_pred = (double)atol(speed) / 8000;
        ck_note(me, 0, "NIC %s up %ld Mb/s", nic, atol(speed));
    } else {
        ck_note(me, 0, "NIC %s up", nic);
    }
}

/* The plan's NIC, else the interface the runtime takes toward MASTER_ADDR. */
static void check_nic(ck_rank_t *me, const drt_env_t *env)
{
    const char *planned = getenv("DDP_TOPO_NIC");
    contract_iface_t ifc;
    char why[256];

    me->link_pred = CK_TCP_GBPS;
    if (contract_iface_choose(env->master_addr, env->node_count, getenv(DRT_ENV_IFNAME),
                              getenv(DRT_ENV_GLOO_IFNAME), &ifc, why, sizeof(why)) < 0) {
        ck_note(me, 1, "network: %s", why);
        return;
    }
    me->data_ip = ifc.ip;
    if (planned && *planned) {
        if (check_ib(me, planned) < 0)
            check_netdev(me, planned, "DDP_TOPO_NIC");
    } else if (ifc.name[0]) {
        check_netdev(me, ifc.name, "the runtime's interface");
    }
}

/* This node's name as it resolves here: the source address its probes and
 * streams use, so a path that fails can be told apart per node. */
static void host_address(ck_rank_t *me)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;

    if (gethostname(me->host, sizeof(me->host) - 1) < 0)
        snprintf(me->host, sizeof(me->host), "?");
    if (getaddrinfo(me->host, NULL, &hints, &ai) == 0) {
        me->host_ip = ((const struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr;
        freeaddrinfo(ai);
    }
}

void ck_local(ck_rank_t *me, const drt_env_t *env)
{
    me->magic = CK_ROW_MAGIC;
    me->rank = env->rank;
    me->node = env->node_rank;
    me->local = env->local_rank;
    me->node_gbps = me->node_pred = me->link_gbps = -1;
    host_address(me);
    check_cpus(me);
    check_gpu(me);
    check_nic(me, env);
}
