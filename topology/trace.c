/* SPDX-License-Identifier: Apache-2.0 */
/* `ddp-topo trace DIR`: the flight recorder's dumps of one run (libddprt,
 * DDPRT_TRACE_DIR; the format: runtime/contract.h) side by side, and the
 * verdict a person needs after a hang or a fault: the first collective not
 * finished everywhere, who entered it, who never did, who left no dump,
 * and the first where the ranks issued different collectives. */
#include "internal.h"
#include "../runtime/contract.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANKS 65536
#define MAX_DUMP (32u << 20) /* 1024 entries and a name per rank fit many times over */

typedef struct {
    uint64_t seq, count;
    char op[16], dtype[12], algo[8], state[8];
} entry_t;

typedef struct {
    int present;
    char reason[512];
    entry_t *e;
    size_t n;
} dump_t;

struct dt_trace {
    char dir[1024], run[64], first[1100]; /* first: the file the others must agree with */
    int size;
    unsigned epoch;
    char (*names)[64];
    dump_t *d;
    int ndumps;
};

/* what the verdict is made of */
typedef struct {
    uint64_t done_all;   /* highest collective every dump shows done; 0: none */
    const entry_t *next; /* the first after it on some rank, NULL: none */
    uint64_t mismatch;   /* the first collective the ranks issued differently; 0: none */
} verdict_t;

static int bad(dt_error_t *err, const char *path, int line, const char *why)
{
    topo_seterr(err, "%s, line %d: %s (give the files libddprt wrote, unchanged)", path, line, why);
    return -1;
}

static int parse_header(dt_trace_t *t, const char *path, char *l2, int *rank, dt_error_t *err)
{
    int size;
    unsigned epoch;
    char run[64];

    if (sscanf(l2, "rank %d size %d epoch %u run %63s ", rank, &size, &epoch, run) != 4 ||
        size < 1 || size > MAX_RANKS || *rank < 0 || *rank >= size)
        return bad(err, path, 2, "not 'rank R size N epoch E run ID ...'");
    if (!t->names) {
        t->size = size;
        t->epoch = epoch;
        snprintf(t->run, sizeof(t->run), "%s", run);
        snprintf(t->first, sizeof(t->first), "%s", path);
        t->names = calloc((size_t)size, sizeof(*t->names));
        t->d = calloc((size_t)size, sizeof(*t->d));
        if (!t->names || !t->d)
            return topo_seterr(err, "out of memory for %d ranks", size), -1;
        return 0;
    }
    if (size != t->size || epoch != t->epoch || strcmp(run, t->run)) {
        topo_seterr(err, "%s and %s are dumps of different runs (run %s, %d ranks, epoch %u vs "
                    "run %s, %d ranks, epoch %u) (give each run its own DDPRT_TRACE_DIR)",
                    t->first, path, t->run, t->size, t->epoch, run, size, epoch);
        return -1;
    }
    return 0;
}

static int parse_entry(dump_t *d, const char *line, const char *path, int lineno, dt_error_t *err)
{
    entry_t e;
    entry_t *v;

    if (sscanf(line, "c %" SCNu64 " %15s %" SCNu64 " %11s %7s %7s", &e.seq, e.op, &e.count,
               e.dtype, e.algo, e.state) != 6 || !e.seq)
        return bad(err, path, lineno, "not 'c SEQ OP COUNT DTYPE ALGO STATE START END'");
    if (strcmp(e.state, DRT_TRACE_ENTERED) && strcmp(e.state, DRT_TRACE_DONE) &&
        strcmp(e.state, DRT_TRACE_FAILED))
        return bad(err, path, lineno, "unknown state");
    if (d->n && e.seq <= d->e[d->n - 1].seq)
        return bad(err, path, lineno, "collectives out of order");
    if (!(v = realloc(d->e, (d->n + 1) * sizeof(*v))))
        return topo_seterr(err, "out of memory"), -1;
    d->e = v;
    d->e[d->n++] = e;
    return 0;
}

static int parse_dump(dt_trace_t *t, const char *path, char *text, dt_error_t *err)
{
    char *save = NULL, *line = strtok_r(text, "\n", &save), *l2 = strtok_r(NULL, "\n", &save);
    char *l3 = strtok_r(NULL, "\n", &save);
    int rank, lineno = 3, r;
    dump_t *d;

    if (!line || strcmp(line, DRT_TRACE_MAGIC))
        return bad(err, path, 1, "not '" DRT_TRACE_MAGIC "'");
    if (!l2 || parse_header(t, path, l2, &rank, err) < 0)
        return l2 ? -1 : bad(err, path, 2, "missing");
    if (!l3 || strncmp(l3, "reason ", 7))
        return bad(err, path, 3, "not 'reason TEXT'");
    d = &t->d[rank];
    if (d->present)
        return topo_seterr(err, "%s: a second dump of rank %d", path, rank), -1;
    d->present = 1;
    t->ndumps++;
    snprintf(d->reason, sizeof(d->reason), "%s", l3 + 7);
    while ((line = strtok_r(NULL, "\n", &save))) {
        char name[64];
        lineno++;
        if (sscanf(line, "node %d %63s", &r, name) == 2 && r >= 0 && r < t->size)
            snprintf(t->names[r], sizeof(t->names[r]), "%s", name);
        else if (parse_entry(d, line, path, lineno, err) < 0)
            return -1;
    }
    return 0;
}

static int load_one(dt_trace_t *t, const char *name, dt_error_t *err)
{
    char path[1100], *text;
    size_t len;
    int rc;

    snprintf(path, sizeof(path), "%s/%s", t->dir, name);
    if (dt_read_file(path, MAX_DUMP, &text, &len, err) < 0)
        return -1;
    if (memchr(text, 0, len)) {
        free(text);
        return bad(err, path, 0, "holds a NUL byte");
    }
    rc = parse_dump(t, path, text, err);
    free(text);
    return rc;
}

int dt_trace_load(const char *dir, dt_trace_t **out, dt_error_t *err)
{
    dt_trace_t *t = calloc(1, sizeof(*t));
    struct dirent *de;
    DIR *dh;
    int rc = 0;

    *out = NULL;
    if (!t)
        return topo_seterr(err, "out of memory"), -1;
    snprintf(t->dir, sizeof(t->dir), "%s", dir);
    if (!(dh = opendir(dir))) {
        topo_seterr(err, "%s: %s (give the run's DDPRT_TRACE_DIR)", dir, strerror(errno));
        free(t);
        return -1;
    }
    while (rc == 0 && (de = readdir(dh)))
        if (!strncmp(de->d_name, DRT_TRACE_FILE, strlen(DRT_TRACE_FILE)))
            rc = load_one(t, de->d_name, err);
    closedir(dh);
    if (rc == 0 && !t->ndumps) {
        topo_seterr(err, "%s holds no " DRT_TRACE_FILE "RANK file (the run wrote none: was "
                    DRT_ENV_TRACE_DIR " set in every rank, and did a collective fail or SIGURG "
                    "arrive?)", dir);
        rc = -1;
    }
    if (rc < 0) {
        dt_trace_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

void dt_trace_free(dt_trace_t *t)
{
    if (!t)
        return;
    for (int r = 0; t->d && r < t->size; r++)
        free(t->d[r].e);
    free(t->d);
    free(t->names);
    free(t);
}

static const entry_t *find(const dump_t *d, uint64_t seq)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->e[i].seq == seq)
            return &d->e[i];
    return NULL;
}

static uint64_t last_done(const dump_t *d)
{
    for (size_t i = d->n; i > 0; i--)
        if (!strcmp(d->e[i - 1].state, DRT_TRACE_DONE))
            return d->e[i - 1].seq;
    return 0;
}

static int same_call(const entry_t *a, const entry_t *b)
{
    return !strcmp(a->op, b->op) && a->count == b->count && !strcmp(a->dtype, b->dtype);
}

/* the first sequence number both rings hold but issued differently, 0:
 * none (both are in ascending order: one merge, not a search per entry) */
static uint64_t first_difference(const dump_t *a, const dump_t *b)
{
    size_t i = 0, j = 0;

    while (i < a->n && j < b->n) {
        if (a->e[i].seq < b->e[j].seq)
            i++;
        else if (a->e[i].seq > b->e[j].seq)
            j++;
        else if (!same_call(&a->e[i], &b->e[j]))
            return a->e[i].seq;
        else
            i++, j++;
    }
    return 0;
}

static void judge(const dt_trace_t *t, verdict_t *v)
{
    const dump_t *ref = NULL;
    uint64_t lo = UINT64_MAX, m;

    memset(v, 0, sizeof(*v));
    for (int r = 0; r < t->size; r++)
        if (t->d[r].present && last_done(&t->d[r]) < lo)
            lo = last_done(&t->d[r]);
    v->done_all = lo;
    for (int r = 0; r < t->size && !v->next; r++)
        if (t->d[r].present)
            v->next = find(&t->d[r], lo + 1);
    /* against the lowest rank that dumped: the first difference with any
     * rank is the first with it, or it and that rank both differ there */
    for (int r = 0; r < t->size; r++) {
        if (!t->d[r].present)
            continue;
        if (!ref)
            ref = &t->d[r];
        else if ((m = first_difference(ref, &t->d[r])) && (!v->mismatch || m < v->mismatch))
            v->mismatch = m;
    }
}

/* where rank r is with respect to the first unfinished collective */
typedef enum { AT_ENTERED, AT_FAILED, AT_LEFT, AT_BEHIND, AT_NO_DUMP, AT_N } at_t;
static const char *const at_names[] = {"entered_never_left", "failed", "left", "never_entered",
                                       "no_dump"};

static at_t where(const dt_trace_t *t, int r, uint64_t seq)
{
    const entry_t *e;

    if (!t->d[r].present)
        return AT_NO_DUMP;
    if (!(e = find(&t->d[r], seq)))
        return AT_BEHIND;
    return !strcmp(e->state, DRT_TRACE_DONE) ? AT_LEFT
           : !strcmp(e->state, DRT_TRACE_FAILED) ? AT_FAILED : AT_ENTERED;
}

static void call_text(const entry_t *e, char *buf, size_t len)
{
    snprintf(buf, len, "#%" PRIu64 " %s %" PRIu64 " %s%s%s%s", e->seq, e->op, e->count,
             e->dtype, strcmp(e->algo, "-") ? " (" : "", strcmp(e->algo, "-") ? e->algo : "",
             strcmp(e->algo, "-") ? ")" : "");
}

/* "ranks 0,1,3 (node0, node1)" of those at `at`; "" for none */
static void ranks_text(const dt_trace_t *t, const verdict_t *v, at_t at, char *buf, size_t len)
{
    size_t o = 0;
    int n = 0;

    buf[0] = 0;
    for (int r = 0; r < t->size && o + 80 < len; r++)
        if (v->next && where(t, r, v->next->seq) == at)
            o += (size_t)snprintf(buf + o, len - o, "%s%d (%s)", n++ ? ", " : "", r,
                                  t->names[r][0] ? t->names[r] : "?");
}

static void verdict_text(const dt_trace_t *t, const verdict_t *v, char *buf, size_t len)
{
    char call[160], who[2048];

    if (v->mismatch) {
        snprintf(buf, len, "the ranks issued different collectives at #%" PRIu64 " (their code "
                 "took different paths, or a size differs): see the mismatch above", v->mismatch);
        return;
    }
    if (!v->next) {
        snprintf(buf, len, "every rank that dumped finished its collectives: nothing was pending");
        return;
    }
    call_text(v->next, call, sizeof(call));
    if (ranks_text(t, v, AT_BEHIND, who, sizeof(who)), who[0])
        snprintf(buf, len, "rank %s never entered %s: it is behind the others, outside the "
                 "collectives (its own code, data loading, a stall), and they waited for it",
                 who, call);
    else if (ranks_text(t, v, AT_NO_DUMP, who, sizeof(who)), who[0])
        snprintf(buf, len, "rank %s left no dump (stopped, killed, or without "
                 DRT_ENV_TRACE_DIR "): the others were in %s, waiting for it", who, call);
    else
        snprintf(buf, len, "every rank entered %s and it did not finish: see each rank's "
                 "reason", call);
}

static void write_json(const dt_trace_t *t, const verdict_t *v, FILE *f)
{
    char buf[4096];

    fputs("{\"dir\": ", f);
    topo_json_str(f, t->dir);
    fprintf(f, ", \"ranks\": %d, \"run\": ", t->size);
    topo_json_str(f, t->run);
    fprintf(f, ", \"dumps\": %d, \"last_done_everywhere\": %" PRIu64 ", \"first_unfinished\": ",
            t->ndumps, v->done_all);
    if (v->next) {
        fprintf(f, "{\"seq\": %" PRIu64 ", \"op\": ", v->next->seq);
        topo_json_str(f, v->next->op);
        fprintf(f, ", \"count\": %" PRIu64 ", \"dtype\": ", v->next->count);
        topo_json_str(f, v->next->dtype);
        fputs("}", f);
    } else {
        fputs("null", f);
    }
    fprintf(f, ", \"mismatch\": %" PRIu64 ", \"ranks_at\": [", v->mismatch);
    for (int r = 0; r < t->size; r++) {
        fprintf(f, "%s{\"rank\": %d, \"node\": ", r ? ", " : "", r);
        topo_json_str(f, t->names[r]);
        fputs(", \"at\": ", f);
        topo_json_str(f, v->next ? at_names[where(t, r, v->next->seq)] : t->d[r].present ? "left"
                                                                                  : "no_dump");
        fputs(", \"reason\": ", f);
        topo_json_str(f, t->d[r].reason);
        fputs("}", f);
    }
    verdict_text(t, v, buf, sizeof(buf));
    fputs("], \"verdict\": ", f);
    topo_json_str(f, buf);
    fputs("}\n", f);
}

static void write_mismatch(const dt_trace_t *t, uint64_t seq, FILE *f)
{
    char call[160];

    fprintf(f, "mismatch at #%" PRIu64 ":\n", seq);
    for (int r = 0; r < t->size; r++) {
        const entry_t *e = t->d[r].present ? find(&t->d[r], seq) : NULL;
        if (e) {
            call_text(e, call, sizeof(call));
            fprintf(f, "  rank %d (%s): %s\n", r, t->names[r], call);
        }
    }
}

static void write_text(const dt_trace_t *t, const verdict_t *v, FILE *f)
{
    static const char *const heads[] = {"entered it, never left", "failed in it", "left it",
                                        "never entered it", "left no dump"};
    char call[160], who[2048];
    const entry_t *last = NULL;

    fprintf(f, "trace of %s: %d ranks (run %s), %d dumped\n", t->dir, t->size, t->run, t->ndumps);
    for (int r = 0; r < t->size && !last; r++)
        last = t->d[r].present && v->done_all ? find(&t->d[r], v->done_all) : NULL;
    if (last)
        call_text(last, call, sizeof(call));
    fprintf(f, "last collective done on every rank that dumped: %s\n", last ? call : "none");
    if (v->next) {
        call_text(v->next, call, sizeof(call));
        fprintf(f, "first unfinished: %s\n", call);
        for (int a = 0; a < AT_N; a++)
            if (ranks_text(t, v, (at_t)a, who, sizeof(who)), who[0])
                fprintf(f, "  %s: rank %s\n", heads[a], who);
    }
    if (v->mismatch)
        write_mismatch(t, v->mismatch, f);
    for (int r = 0; r < t->size; r++)
        if (t->d[r].present)
            fprintf(f, "rank %d (%s) dumped: %s\n", r, t->names[r], t->d[r].reason);
    verdict_text(t, v, who, sizeof(who));
    fprintf(f, "verdict: %s\n", who);
}

int dt_trace_write(const dt_trace_t *t, dt_format_t format, FILE *out)
{
    verdict_t v;

    judge(t, &v);
    if (format == DT_FORMAT_JSON)
        write_json(t, &v, out);
    else
        write_text(t, &v, out);
    return ferror(out) ? -1 : 0;
}
