/* SPDX-License-Identifier: Apache-2.0 */
/* dt_plan_node's error for more ranks than GPUs: DT_PLAN_NEEDS_SHARE and the
 * fact, with no caller's flag (the plugin adds --ddp-topo=auto,share, the
 * report its --share); any other failure returns -1. And the split of
 * allocated cores (dt_plan_request_t.cpus, as the plugin passes SLURM's)
 * between GPU-locality groups: disjoint while there are cores for every
 * rank, shared with a warning only when there are not. The dry-run
 * report's cores: --exclusive gives every core, whatever -c; the cores
 * line qualifies an NCCL file's CPUs. */
#include "ddptopo.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

static int plan(const dt_node_t *node, unsigned nranks, int share, const int *gpus,
                unsigned ngpus, dt_error_t *err)
{
    dt_plan_request_t req = {.nranks = nranks, .gpus = gpus, .ngpus = ngpus, .share_gpus = share};
    dt_node_plan_t p;
    int rc = dt_plan_node(node, &req, &p, err);

    if (rc == 0)
        dt_node_plan_free(&p);
    return rc;
}

static int load(dt_node_t *node, const char *fixture)
{
    const char *top = getenv("top_srcdir");
    char path[4096];
    dt_error_t err = {.code = DT_OK};

    snprintf(path, sizeof(path), "%s/tests/fixtures/%s", top ? top : ".", fixture);
    if (dt_node_load_file(node, path, &err) < 0) {
        printf("Bail out! %s: %s\n", path, err.text);
        return -1;
    }
    return 0;
}

/* Plan nranks over the PUs in `list`; each rank's CPUs into `desc`. */
static int plan_cpus(const dt_node_t *node, unsigned nranks, const int *gpus, unsigned ngpus,
                     const char *list, dt_node_plan_t *p, char *desc, size_t len)
{
    hwloc_bitmap_t cpus = hwloc_bitmap_alloc();
    dt_plan_request_t req = {.nranks = nranks, .gpus = gpus, .ngpus = ngpus, .cpus = cpus};
    dt_error_t err = {.code = DT_OK};
    size_t used = 0;
    int rc = cpus ? hwloc_bitmap_list_sscanf(cpus, list) : -1;

    if (rc == 0 && (rc = dt_plan_node(node, &req, p, &err)) < 0)
        printf("# plan over %s: %s\n", list, err.text);
    for (unsigned r = 0; rc == 0 && r < nranks; r++) {
        char *s = NULL;
        hwloc_bitmap_list_asprintf(&s, p->ranks[r].cpus);
        used += (size_t)snprintf(desc + used, used < len ? len - used : 0, " %u:%s", r, s ? s : "?");
        free(s);
    }
    hwloc_bitmap_free(cpus);
    return rc;
}

/* Whether every rank has `each` CPUs and no rank shares one. */
static int disjoint(const dt_node_plan_t *p, int each)
{
    hwloc_bitmap_t seen = hwloc_bitmap_alloc();
    int good = seen != NULL;

    for (unsigned r = 0; good && r < p->nranks; r++) {
        good = hwloc_bitmap_weight(p->ranks[r].cpus) == each &&
               !hwloc_bitmap_intersects(seen, p->ranks[r].cpus);
        hwloc_bitmap_or(seen, seen, p->ranks[r].cpus);
    }
    hwloc_bitmap_free(seen);
    return good;
}

static int warned(const dt_node_plan_t *p, const char *text)
{
    for (unsigned i = 0; i < p->nwarnings; i++)
        if (strstr(p->warnings[i], text))
            return 1;
    return 0;
}

/* p4d (NCCL XML: each CPU a core): socket 0 is CPUs 0-23,48-71 and holds
 * GPUs 0-3; GPUs 4-7 sit on socket 1. lassen: package 0 is PUs 8-87 (SMT4)
 * with GPUs 0-1, package 1 has GPUs 2-3. */
static void core_split(void)
{
    static const int far_gpus[] = {0, 2};
    const char *over = "cores oversubscribed";
    dt_node_t p4d, lassen;
    dt_node_plan_t p;
    char desc[1024];

    if (load(&p4d, "nccl-aws-p4d-24xl-topo.xml") < 0 || load(&lassen, "hwloc-llnl-lassen-power9-4xv100-4xcx5.xml") < 0)
        exit(1);
    /* ddp-topo report --ntasks-per-node 8 -c 6: SLURM gives socket 0's 48 CPUs */
    if (plan_cpus(&p4d, 8, NULL, 0, "0-23,48-71", &p, desc, sizeof(desc)) == 0) {
        ok(disjoint(&p, 6), "p4d, 8 ranks over socket 0's 48 CPUs: 8 disjoint sets of 6:%s", desc);
        ok(!warned(&p, over), "... and no oversubscription warning (%u warnings)", p.nwarnings);
        dt_node_plan_free(&p);
    }
    if (plan_cpus(&p4d, 8, NULL, 0, "0-7", &p, desc, sizeof(desc)) == 0) {
        ok(disjoint(&p, 1), "p4d, 8 ranks over 8 CPUs of socket 0: one each, disjoint:%s", desc);
        ok(!warned(&p, over), "... and no oversubscription warning (%u warnings)", p.nwarnings);
        dt_node_plan_free(&p);
    }
    if (plan_cpus(&p4d, 8, NULL, 0, "0-3", &p, desc, sizeof(desc)) == 0) {
        unsigned empty = 0;
        for (unsigned r = 0; r < p.nranks; r++)
            empty += hwloc_bitmap_iszero(p.ranks[r].cpus);
        ok(empty == 0 && !disjoint(&p, 1), "p4d, 8 ranks over 4 CPUs: every rank has CPUs, "
           "some shared:%s", desc);
        ok(warned(&p, over), "... and the oversubscription warning (%u warnings)", p.nwarnings);
        dt_node_plan_free(&p);
    }
    /* GPUs 0 and 2, one per package; 4 cores (16 PUs), all on package 0 */
    if (plan_cpus(&lassen, 2, far_gpus, 2, "8-23", &p, desc, sizeof(desc)) == 0) {
        ok(disjoint(&p, 8), "lassen, GPUs 0 and 2 over 4 cores of package 0: 2 cores each, "
           "disjoint:%s", desc);
        ok(hwloc_bitmap_isincluded(p.ranks[0].cpus, lassen.numa[0].cpuset),
           "... rank 0 (GPU 0) keeps its own NUMA's cores:%s", desc);
        dt_node_plan_free(&p);
    }
    dt_node_free(&p4d);
    dt_node_free(&lassen);
}

/* The report for one node of `fixture`, its text into `text` and its cores
 * line into `cores`. */
static int report(const char *fixture, const char *tasks, unsigned cpt, unsigned exclusive,
                  char *text, size_t tlen, char *cores, size_t clen)
{
    const char *top = getenv("top_srcdir");
    char path[4096];
    dt_report_opts_t o = {.nodelist = "n1", .tasks_per_node = tasks, .topology = path,
                          .bind = DT_BIND_GPU | DT_BIND_CPU, .cpus_per_task = cpt,
                          .exclusive = exclusive, .dtype = "bf16", .dtype_bytes = 2,
                          .port_lo = DT_PORT_RANGE_DEFAULT_LO, .port_hi = DT_PORT_RANGE_DEFAULT_HI,
                          .job_id = -1, .step_id = -1, .restart_count = -1};
    dt_error_t err = {.code = DT_OK};
    dt_report_t *r;
    FILE *f = tmpfile();
    size_t n = 0;

    snprintf(path, sizeof(path), "%s/tests/fixtures/%s", top ? top : ".", fixture);
    if (!f || dt_report_build(&o, &r, &err) < 0) {
        printf("# report on %s: %s\n", fixture, err.text);
        if (f)
            fclose(f);
        return -1;
    }
    dt_report_cores(r, cores, clen);
    dt_report_write(r, DT_FORMAT_TEXT, f);
    dt_report_free(r);
    rewind(f);
    n = fread(text, 1, tlen - 1, f);
    text[n] = 0;
    fclose(f);
    return 0;
}

static void report_cores(void)
{
    static char text[16384];
    char cores[400];
    const char *hyper = "the file lists CPUs, not cores";

    /* p4d's whole-node plan gives rank 7 CPUs 84-95 (tests/golden), -c 6 alone 66-71 */
    if (report("nccl-aws-p4d-24xl-topo.xml", "8", 6, 1, text, sizeof(text), cores,
               sizeof(cores)) == 0) {
        /* an NCCL file has no threads: split CPUs may be one core's two */
        is_str(cores, "cores: all 96 cores of each node (--exclusive); the file lists CPUs, not "
               "cores: with hyperthreads two ranks may get the two threads of one core",
               "--exclusive -c 6: the cores line says every core, and what an NCCL file lacks");
        const char *r7 = strstr(text, "\n  7 ");
        ok(r7 && strstr(r7, "84-95"), "... and the plan splits them all (rank 7: 84-95): %.80s",
           r7 ? r7 + 1 : text);
    }
    if (report("nccl-aws-p4d-24xl-topo.xml", "8", 6, 0, text, sizeof(text), cores,
               sizeof(cores)) == 0)
        ok(strstr(cores, hyper) != NULL, "NCCL file, -c 6: the cores line qualifies its CPUs: %s",
           cores);
    if (report("hwloc-llnl-lassen-power9-4xv100-4xcx5.xml", "4", 8, 0, text, sizeof(text), cores,
               sizeof(cores)) == 0)
        ok(strstr(cores, "8 of 40 cores") && !strstr(cores, hyper),
           "hwloc file (cores known), -c 8: 8 of 40 cores, unqualified: %s", cores);
}

int main(void)
{
    const char *top = getenv("top_srcdir");
    static const int missing[] = {9};
    char path[4096];
    dt_error_t err = {.code = DT_OK};
    dt_node_t node;
    int rc;

    snprintf(path, sizeof(path), "%s/tests/fixtures/nccl-aws-p4d-24xl-topo.xml", top ? top : ".");
    if (dt_node_load_file(&node, path, &err) < 0) {
        printf("Bail out! %s: %s\n", path, err.text);
        return 1;
    }
    rc = plan(&node, 9, 0, NULL, 0, &err);
    ok(rc == DT_PLAN_NEEDS_SHARE, "9 ranks on 8 GPUs without sharing: DT_PLAN_NEEDS_SHARE (%d: %s)",
       rc, err.text);
    ok(!strcmp(err.text, "9 ranks but 8 GPUs on this node: one rank per GPU, or allow sharing"),
       "... its text is the fact, no caller's flag: '%s'", err.text);
    ok(plan(&node, 9, 1, NULL, 0, &err) == 0, "... and plans with sharing allowed: %s", err.text);
    rc = plan(&node, 1, 0, missing, 1, &err);
    ok(rc == -1, "another failure (a GPU the node lacks) returns -1 (%d: %s)", rc, err.text);
    dt_node_free(&node);
    core_split();
    report_cores();
    printf("1..%d\n", tap_n);
    return tap_failed != 0;
}
