/* SPDX-License-Identifier: Apache-2.0 */
/* Writing the dry-run report: text for people, JSON for tools (schema in
 * README.md, "ddp-topo-report" version 1), Graphviz dot for pictures. */
#include "ddptopo.h"
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define LIST_MAX 16 /* ranks shown in one text line before eliding */

static const char *source_name(dt_source_t s)
{
    return s == DT_SOURCE_LIVE ? "live hwloc" : s == DT_SOURCE_HWLOC_XML ? "hwloc XML" : "NCCL XML";
}

static const char *source_id(dt_source_t s)
{
    return s == DT_SOURCE_LIVE ? "live" : s == DT_SOURCE_HWLOC_XML ? "hwloc-xml" : "nccl-xml";
}

/* "0-7" or "0,8,16" (elided past `max` items when max > 0). */
static void print_ranks(FILE *f, const uint32_t *v, size_t n, size_t max)
{
    size_t shown = 0;

    for (size_t i = 0; i < n; shown++) {
        size_t j = i;
        while (j + 1 < n && v[j + 1] == v[j] + 1)
            j++;
        if (max && shown == max) {
            fprintf(f, ",... (%zu ranks)", n);
            return;
        }
        fprintf(f, "%s%u", i ? "," : "", v[i]);
        if (j > i)
            fprintf(f, "-%u", v[j]);
        i = j + 1;
    }
}

static void visible_list(FILE *f, const dt_node_plan_t *plan)
{
    for (unsigned i = 0; i < plan->nvisible; i++)
        fprintf(f, "%s%d", i ? "," : "", plan->visible[i]);
}

/* The text table's model column: MODEL_W characters at most, a cut shown
 * by "..." and never inside a UTF-8 character. */
#define MODEL_W 28
static const char *model_cell(char cell[MODEL_W + 1], const char *model)
{
    size_t n = MODEL_W - 3;

    if (strlen(model) <= MODEL_W)
        return model;
    while (n && ((unsigned char)model[n] & 0xc0) == 0x80)
        n--;
    snprintf(cell, MODEL_W + 1, "%.*s...", (int)n, model);
    return cell;
}

static const char *nic_label(const dt_nic_t *n)
{
    return n->name[0] ? n->name : n->busid;
}

/* A PU set of any size as "0-3,8" (malloc'd; NULL on ENOMEM): fixed
 * buffers would cut long lists silently. */
static char *cpu_list(hwloc_const_bitmap_t set)
{
    char *s;

    return hwloc_bitmap_list_asprintf(&s, set) < 0 ? NULL : s;
}

/* ---- text ---------------------------------------------------------------------- */

static void text_kind(FILE *f, const kind_t *k)
{
    const dt_node_t *node = &k->node;

    fprintf(f, "\n%s: %u rank%s per node, topology %s (%s)\n", k->nodes, k->ntasks,
            k->ntasks == 1 ? "" : "s", k->path[0] ? k->path : "of this machine",
            source_name(node->source));
    if (k->plan.nvisible) {
        fprintf(f, "  CUDA_VISIBLE_DEVICES=");
        visible_list(f, &k->plan);
        fputc('\n', f);
    }
    fprintf(f, "  %-5s %-4s %-13s %-28s %-20s %-4s %-12s %s\n", "local", "GPU", "bus id", "model",
            "cpus", "NUMA", "NIC", "path to NIC");
    for (unsigned r = 0; r < k->plan.nranks; r++) {
        const dt_rank_plan_t *rp = &k->plan.ranks[r];
        const dt_gpu_t *g = rp->gpu >= 0 ? &node->gpus[rp->gpu] : NULL;
        char *cpus = cpu_list(rp->cpus), gpu[16], numa[16], model[MODEL_W + 1];
        snprintf(gpu, sizeof(gpu), "%d", g ? g->index : -1);
        snprintf(numa, sizeof(numa), "%u", rp->numa >= 0 ? node->numa[rp->numa].os_index : 0);
        fprintf(f, "  %-5u %-4s %-13s %-28s %-20s %-4s %-12s %s\n", r, g ? gpu : "-",
                g ? g->busid : "-", g ? model_cell(model, g->model) : "-",
                cpus ? cpus : "(out of memory)",
                rp->numa >= 0 ? numa : "-", rp->nic >= 0 ? nic_label(&node->nics[rp->nic]) : "-",
                rp->nic >= 0 ? dt_path_name(rp->nic_path) : "-");
        free(cpus);
    }
}

static void text_nodes(FILE *f, const dt_report_t *r)
{
    size_t shown = r->nhosts > 2 * LIST_MAX ? LIST_MAX : r->nhosts;

    fprintf(f, "\nranks per node:\n");
    for (size_t i = 0; i < shown; i++) {
        fprintf(f, "  %s (node %zu): ranks ", r->hosts[i], i);
        print_ranks(f, r->node_ranks + r->first_rank[i], r->counts[i], LIST_MAX);
        fputc('\n', f);
    }
    if (shown < r->nhosts)
        fprintf(f, "  ... %zu more nodes\n", r->nhosts - shown);
}

static uint32_t *rail_ranks(const dt_report_t *r, uint32_t rail, size_t *n)
{
    uint32_t *v = malloc((r->nhosts + 1) * sizeof(uint32_t));

    *n = 0;
    for (size_t i = 0; v && i < r->nhosts; i++)
        if (rail < r->counts[i])
            v[(*n)++] = r->node_ranks[r->first_rank[i] + rail];
    return v;
}

static unsigned max_local(const dt_report_t *r)
{
    unsigned m = 0;

    for (size_t i = 0; i < r->nhosts; i++)
        m = r->counts[i] > m ? r->counts[i] : m;
    return m;
}

static void text_rails(FILE *f, const dt_report_t *r)
{
    fprintf(f, "\nrails (the same local rank on every node):\n");
    for (unsigned rail = 0; rail < max_local(r); rail++) {
        size_t n;
        uint32_t *v = rail_ranks(r, rail, &n);
        fprintf(f, "  rail %u: ranks ", rail);
        if (v)
            print_ranks(f, v, n, LIST_MAX);
        fputc('\n', f);
        free(v);
    }
}

static void text_cost(FILE *f, const dt_report_t *r)
{
    const dt_cost_t *c = &r->cost;

    fprintf(f, "\nallreduce of %.0f %s parameters (%.2f GB) per step, %u node%s x %u rank%s:\n",
            r->opts.model_params, r->opts.dtype, c->bytes / 1e9, c->nodes, c->nodes == 1 ? "" : "s",
            c->ranks_per_node, c->ranks_per_node == 1 ? "" : "s");
    fprintf(f, "  flat ring          %12.3f ms%s\n", c->flat_us / 1e3, c->hier_wins ? "" : "  <- chosen");
    fprintf(f, "  hierarchical rail  %12.3f ms%s\n", c->hier_us / 1e3, c->hier_wins ? "  <- chosen" : "");
    fprintf(f, "  intra-node: %.1f GB/s, %.1f us: %s\n", c->intra_gbps, c->intra_us, r->intra_why);
    fprintf(f, "  inter-node: %.1f GB/s per node, %.1f us: %s\n", c->inter_gbps, c->inter_us,
            r->inter_why);
}

static void write_text(const dt_report_t *r, FILE *f)
{
    char bind[32];

    fprintf(f, "ddp-topo report: %zu node%s, %u rank%s, tasks per node %s\n", r->nhosts,
            r->nhosts == 1 ? "" : "s", r->layout.ntasks, r->layout.ntasks == 1 ? "" : "s",
            r->opts.tasks_per_node);
    fprintf(f, "MASTER_ADDR=%s\nMASTER_PORT=%s\nDDPRT_PORT=%s\nbinding: %s\n", r->master_addr,
            r->master_port, r->runtime_port, dt_bind_name(r->opts.bind, bind, sizeof(bind)));
    for (unsigned k = 0; k < r->nkinds; k++)
        text_kind(f, &r->kinds[k]);
    text_nodes(f, r);
    text_rails(f, r);
    if (r->have_cost)
        text_cost(f, r);
    fprintf(f, "\nwarnings:%s\n", r->nwarnings ? "" : " none");
    for (unsigned i = 0; i < r->nwarnings; i++)
        fprintf(f, "  - %s\n", r->warnings[i]);
}

/* ---- JSON ------------------------------------------------------------------------ */

void topo_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static void json_rank_plan(FILE *f, const dt_node_t *node, const dt_rank_plan_t *rp)
{
    char *cpus = cpu_list(rp->cpus);

    fprintf(f, "\"gpu\":");
    if (rp->gpu >= 0) {
        const dt_gpu_t *g = &node->gpus[rp->gpu];
        fprintf(f, "{\"index\":%d,\"device\":%d,\"busid\":", g->index, rp->device);
        topo_json_str(f, g->busid);
        fprintf(f, ",\"model\":");
        topo_json_str(f, g->model);
        /* the ids too, for admins: the model may be pci.ids's name */
        if (g->pci >= 0 && node->pci[g->pci].device)
            fprintf(f, ",\"vendor_id\":\"%04x\",\"device_id\":\"%04x\"",
                    node->pci[g->pci].vendor, node->pci[g->pci].device);
        fputc('}', f);
    } else {
        fprintf(f, "null");
    }
    fprintf(f, ",\"cpus\":");
    topo_json_str(f, cpus ? cpus : "(out of memory)");
    fprintf(f, ",\"cores\":%u,\"numa\":", rp->ncores);
    free(cpus);
    if (rp->numa >= 0)
        fprintf(f, "%u", node->numa[rp->numa].os_index);
    else
        fprintf(f, "null");
    fprintf(f, ",\"nic\":");
    if (rp->nic >= 0) {
        const dt_nic_t *n = &node->nics[rp->nic];
        fprintf(f, "{\"name\":");
        topo_json_str(f, n->name);
        fprintf(f, ",\"kind\":\"%s\",\"busid\":", dt_nic_kind_name(n->kind));
        topo_json_str(f, n->busid); /* from the file: escaped like every such string */
        fprintf(f, ",\"port\":%d,\"path\":\"%s\"}", n->port, dt_path_name(rp->nic_path));
    } else {
        fprintf(f, "null");
    }
}

static void json_warnings(FILE *f, char *const *w, unsigned n)
{
    fputc('[', f);
    for (unsigned i = 0; i < n; i++) {
        if (i)
            fputc(',', f);
        topo_json_str(f, w[i]);
    }
    fputc(']', f);
}

static void json_kind(FILE *f, const kind_t *k, unsigned id)
{
    fprintf(f, "{\"id\":%u,\"nodes\":", id);
    topo_json_str(f, k->nodes);
    fprintf(f, ",\"source\":");
    topo_json_str(f, k->path);
    fprintf(f, ",\"format\":\"%s\",\"ranks_per_node\":%u,\"cuda_visible_devices\":\"",
            source_id(k->node.source), k->ntasks);
    visible_list(f, &k->plan);
    fprintf(f, "\",\"nvlink_known\":%s,\"local_ranks\":[", k->node.nvlink ? "true" : "false");
    for (unsigned r = 0; r < k->plan.nranks; r++) {
        fprintf(f, "%s{\"local_rank\":%u,", r ? "," : "", r);
        json_rank_plan(f, &k->node, &k->plan.ranks[r]);
        fputc('}', f);
    }
    fprintf(f, "],\"warnings\":");
    json_warnings(f, k->plan.warnings, k->plan.nwarnings);
    fputc('}', f);
}

static void json_u32_list(FILE *f, const uint32_t *v, size_t n)
{
    fputc('[', f);
    for (size_t i = 0; i < n; i++)
        fprintf(f, i ? ",%u" : "%u", v[i]);
    fputc(']', f);
}

/* "name":PORT, or "name":null and "name_note":"how it will be chosen" */
/* "63966 (step 0, ...)": the number, and the words as its note. */
static void json_port(FILE *f, const char *name, const char *text)
{
    size_t digits = strspn(text, "0123456789");
    const char *note = text + digits + (digits && text[digits] == ' ');

    fprintf(f, ",\"%s\":%.*s", name, digits ? (int)digits : 4, digits ? text : "null");
    if (*note) {
        fprintf(f, ",\"%s_note\":", name);
        topo_json_str(f, note);
    }
}

static void json_job(FILE *f, const dt_report_t *r)
{
    char bind[32], cores[400];

    fprintf(f, "{\"schema\":\"ddp-topo-report\",\"version\":1,\"job\":{\"nodes\":%zu,\"ranks\":%u,"
            "\"tasks_per_node\":", r->nhosts, r->layout.ntasks);
    topo_json_str(f, r->opts.tasks_per_node);
    fprintf(f, ",\"master_addr\":");
    topo_json_str(f, r->master_addr);
    json_port(f, "master_port", r->master_port);
    json_port(f, "runtime_port", r->runtime_port);
    fprintf(f, ",\"bind\":\"%s\",\"cores\":", dt_bind_name(r->opts.bind, bind, sizeof(bind)));
    dt_report_cores(r, cores, sizeof(cores)); /* the assumption, as the text report says it */
    topo_json_str(f, cores + strlen("cores: "));
    fprintf(f, "},");
}

static void json_cost(FILE *f, const dt_report_t *r)
{
    const dt_cost_t *c = &r->cost;

    fprintf(f, ",\"allreduce\":{\"parameters\":%.0f,\"dtype\":\"%s\",\"bytes\":%.0f,"
            "\"flat_us\":%.3f,\"hierarchical_us\":%.3f,\"choice\":\"%s\",\"intra_gbps\":%.3f,"
            "\"intra_us\":%.3f,\"inter_gbps\":%.3f,\"inter_us\":%.3f,\"intra_source\":",
            r->opts.model_params, r->opts.dtype, c->bytes, c->flat_us, c->hier_us,
            c->hier_wins ? "hierarchical" : "flat", c->intra_gbps, c->intra_us, c->inter_gbps,
            c->inter_us);
    topo_json_str(f, r->intra_why);
    fprintf(f, ",\"inter_source\":");
    topo_json_str(f, r->inter_why);
    fputc('}', f);
}

static void write_json(const dt_report_t *r, FILE *f)
{
    json_job(f, r);
    fprintf(f, "\"topologies\":[");
    for (unsigned k = 0; k < r->nkinds; k++) {
        if (k)
            fputc(',', f);
        json_kind(f, &r->kinds[k], k);
    }
    fprintf(f, "],\"nodes\":[");
    for (size_t i = 0; i < r->nhosts; i++) {
        fprintf(f, "%s{\"name\":", i ? "," : "");
        topo_json_str(f, r->hosts[i]);
        fprintf(f, ",\"node_rank\":%zu,\"topology\":%u,\"ranks\":", i, r->kind_of[i]);
        json_u32_list(f, r->node_ranks + r->first_rank[i], r->counts[i]);
        fputc('}', f);
    }
    fprintf(f, "],\"rails\":[");
    for (unsigned rail = 0; rail < max_local(r); rail++) {
        size_t n;
        uint32_t *v = rail_ranks(r, rail, &n);
        if (rail)
            fputc(',', f);
        json_u32_list(f, v, v ? n : 0);
        free(v);
    }
    fputc(']', f);
    if (r->have_cost)
        json_cost(f, r);
    fprintf(f, ",\"warnings\":");
    json_warnings(f, r->warnings, r->nwarnings);
    fprintf(f, "}\n");
}

/* ---- dot ---------------------------------------------------------------------------- */

/* Text inside a DOT quoted string: a quote or backslash from a path, a
 * host or a model name would end the string or start an escape (Graphviz
 * then rejects the file), control characters become spaces. */
static void dot_str(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fputc('\\', f);
        fputc(ch < 0x20 ? ' ' : ch, f);
    }
}

/* Bridges on the way to a GPU or NIC; other PCI devices stay out of the picture. */
static void mark_paths(const dt_node_t *node, char *keep)
{
    for (unsigned i = 0; i < node->ngpus; i++)
        for (int p = node->gpus[i].pci; p >= 0; p = node->pci[p].parent)
            keep[p] = 1;
    for (unsigned i = 0; i < node->nnics; i++)
        for (int p = node->nics[i].pci; p >= 0; p = node->pci[p].parent)
            keep[p] = 1;
}

static void dot_cpus(FILE *f, const dt_node_t *node)
{
    for (unsigned p = 0; p < node->npackages; p++) {
        fprintf(f, "    subgraph cluster_pkg%u { label=\"package %u\";\n", p, p);
        for (unsigned i = 0; i < node->nnuma; i++) {
            char *cpus;
            if (node->numa[i].package != (int)p)
                continue;
            cpus = cpu_list(node->numa[i].cpuset);
            fprintf(f, "      numa%u [shape=component label=\"NUMA %u\\ncpus %s\"];\n", i,
                    node->numa[i].os_index, cpus ? cpus : "(out of memory)");
            free(cpus);
        }
        fprintf(f, "    }\n");
    }
}

/* "\nlocal rank 0, local rank 4": every rank on that GPU. */
static void dot_rank_label(FILE *f, const kind_t *k, int gpu)
{
    int first = 1;

    for (unsigned r = 0; r < k->plan.nranks; r++)
        if (k->plan.ranks[r].gpu == gpu) {
            fprintf(f, "%slocal rank %u", first ? "\\n" : ", ", r);
            first = 0;
        }
}

static void dot_devices(FILE *f, const kind_t *k, const char *keep)
{
    const dt_node_t *node = &k->node;

    for (unsigned i = 0; i < node->npci; i++) {
        const dt_pci_t *p = &node->pci[i];
        if (!keep[i] || !p->bridge)
            continue;
        fprintf(f, "    pci%u [shape=ellipse label=\"%s\\n", i,
                p->bridge == 2 ? "host bridge" : "PCIe switch");
        dot_str(f, p->busid);
        fprintf(f, "\"];\n");
        if (p->parent >= 0)
            fprintf(f, "    pci%d -- pci%u;\n", p->parent, i);
        else if (p->numa >= 0)
            fprintf(f, "    numa%d -- pci%u;\n", p->numa, i);
    }
    for (unsigned i = 0; i < node->ngpus; i++) {
        const dt_gpu_t *g = &node->gpus[i];
        fprintf(f, "    gpu%u [shape=box style=filled fillcolor=%s label=\"GPU %d\\n", i,
                g->nvidia ? "palegreen" : "lightgrey", g->index);
        dot_str(f, g->model);
        dot_rank_label(f, k, (int)i);
        fprintf(f, "\"];\n");
        if (g->pci >= 0 && node->pci[g->pci].parent >= 0)
            fprintf(f, "    pci%d -- gpu%u;\n", node->pci[g->pci].parent, i);
        else if (g->pci >= 0 && node->pci[g->pci].numa >= 0)
            fprintf(f, "    numa%d -- gpu%u;\n", node->pci[g->pci].numa, i);
    }
    for (unsigned i = 0; i < node->nnics; i++) {
        const dt_nic_t *n = &node->nics[i];
        fprintf(f, "    nic%u [shape=box style=filled fillcolor=lightblue label=\"", i);
        dot_str(f, nic_label(n));
        fprintf(f, "\\n%s\"];\n", dt_nic_kind_name(n->kind));
        if (n->pci >= 0 && node->pci[n->pci].parent >= 0)
            fprintf(f, "    pci%d -- nic%u;\n", node->pci[n->pci].parent, i);
        else if (n->pci >= 0 && node->pci[n->pci].numa >= 0)
            fprintf(f, "    numa%d -- nic%u;\n", node->pci[n->pci].numa, i);
    }
}

static void dot_links(FILE *f, const kind_t *k)
{
    const dt_node_t *node = &k->node;

    for (unsigned a = 0; a < node->ngpus; a++)
        for (unsigned b = a + 1; b < node->ngpus; b++)
            if (dt_node_nvlink(node, a, b) > 0)
                fprintf(f, "    gpu%u -- gpu%u [color=darkgreen penwidth=2 label=\"%.0f GB/s\"];\n",
                        a, b, dt_node_nvlink(node, a, b));
    for (unsigned r = 0; r < k->plan.nranks; r++)
        if (k->plan.ranks[r].gpu >= 0 && k->plan.ranks[r].nic >= 0)
            fprintf(f, "    gpu%d -- nic%d [style=dashed color=blue];\n", k->plan.ranks[r].gpu,
                    k->plan.ranks[r].nic);
}

static void dot_rails(FILE *f, const dt_report_t *r)
{
    static const char *const colors[] = {"red", "blue", "darkgreen", "orange", "purple",
                                         "brown", "magenta", "cyan"};
    size_t nodes = r->nhosts < 8 ? r->nhosts : 8;

    fprintf(f, "  subgraph cluster_rails { label=\"rails (first %zu nodes)\";\n", nodes);
    for (size_t i = 0; i < nodes; i++) {
        fprintf(f, "    subgraph cluster_n%zu { label=\"", i);
        dot_str(f, r->hosts[i]);
        fprintf(f, "\";\n");
        for (uint32_t l = 0; l < r->counts[i]; l++)
            fprintf(f, "      r%u [shape=box label=\"rank %u\"];\n",
                    r->node_ranks[r->first_rank[i] + l], r->node_ranks[r->first_rank[i] + l]);
        fprintf(f, "    }\n");
    }
    for (size_t i = 0; i + 1 < nodes; i++)
        for (uint32_t l = 0; l < r->counts[i] && l < r->counts[i + 1]; l++)
            fprintf(f, "    r%u -- r%u [color=%s];\n", r->node_ranks[r->first_rank[i] + l],
                    r->node_ranks[r->first_rank[i + 1] + l], colors[l % 8]);
    fprintf(f, "  }\n");
}

static void write_dot(const dt_report_t *r, FILE *f)
{
    const kind_t *k = &r->kinds[r->kind_of[0]];
    char *keep = calloc(k->node.npci + 1, 1);

    if (!keep)
        return;
    mark_paths(&k->node, keep);
    fprintf(f, "graph ddp_topo {\n  compound=true; fontsize=11; node [fontsize=10];\n");
    fprintf(f, "  subgraph cluster_node { label=\"");
    dot_str(f, k->nodes);
    fprintf(f, " (");
    dot_str(f, k->path[0] ? k->path : "this machine");
    fprintf(f, ")\";\n");
    dot_cpus(f, &k->node);
    dot_devices(f, k, keep);
    dot_links(f, k);
    fprintf(f, "  }\n");
    dot_rails(f, r);
    fprintf(f, "}\n");
    free(keep);
}

int dt_report_write(const dt_report_t *r, dt_format_t format, FILE *out)
{
    if (format == DT_FORMAT_JSON)
        write_json(r, out);
    else if (format == DT_FORMAT_DOT)
        write_dot(r, out);
    else
        write_text(r, out);
    return ferror(out) ? -1 : 0;
}
