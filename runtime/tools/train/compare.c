/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-train --dump-weights and --compare (tools.h says what each promises).
 * The equivalence tests compare N ranks against one process step by step;
 * a dump is a record per step: u64 step, u64 n, n float32. */
#include "tools.h"
#include "files.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int train_dump(FILE *f, uint64_t step, model_t *m)
{
    uint64_t head[2] = {step, model_size(m)};
    param_t *p;
    int np = model_params(m, &p);

    if (fwrite(head, sizeof(head), 1, f) != 1)
        return -1;
    for (int i = 0; i < np; i++)
        if (fwrite(p[i].w, sizeof(float), p[i].n, f) != p[i].n)
            return -1;
    return 0;
}

/* One dump file being read, a record at a time. */
typedef struct {
    const char *name;
    FILE *f;
    uint64_t size; /* bytes in the file */
    uint64_t pos;  /* where the current record starts */
    uint64_t step, n;
    float *v; /* the record's n weights */
} dump_t;

/* no size limit: a dump is read a record at a time */
static int dump_open(dump_t *d, const char *name)
{
    char err[200];

    memset(d, 0, sizeof(*d));
    d->name = name;
    d->f = train_input_open(name, UINT64_MAX, &d->size, err, sizeof(err));
    if (!d->f) {
        fprintf(stderr, "ddp-train: compare: %s: %s (give a file that --dump-weights wrote)\n",
                name, err);
        return -1;
    }
    return 0;
}

static void dump_close(dump_t *d)
{
    if (d->f)
        fclose(d->f);
    free(d->v);
}

static int truncated(const dump_t *d, size_t rec, const char *what)
{
    fprintf(stderr, "ddp-train: compare: %s: record %zu at byte %llu: %s (the run that wrote "
            "it stopped mid-write, or this is not a --dump-weights file)\n", d->name, rec,
            (unsigned long long)d->pos, what);
    return -1;
}

/* Record `rec`: 1 read, 0 the file ended before it, -1 broken (said why).
 * The size check comes before the allocation, so a damaged header cannot
 * ask for gigabytes. */
static int dump_read(dump_t *d, size_t rec)
{
    uint64_t head[2];
    size_t got = fread(head, 1, sizeof(head), d->f);

    if (got == 0 && feof(d->f))
        return 0;
    if (got != sizeof(head))
        return truncated(d, rec, "the header is cut short");
    d->step = head[0];
    d->n = head[1];
    if (d->n > (d->size - d->pos - sizeof(head)) / sizeof(float))
        return truncated(d, rec, "fewer weights follow than its header says");
    free(d->v);
    d->v = malloc(d->n ? d->n * sizeof(float) : 1);
    if (!d->v) {
        fprintf(stderr, "ddp-train: compare: %s: record %zu: out of memory for %llu weights\n",
                d->name, rec, (unsigned long long)d->n);
        return -1;
    }
    if (fread(d->v, sizeof(float), d->n, d->f) != d->n)
        return truncated(d, rec, "a read failed");
    d->pos += sizeof(head) + d->n * sizeof(float);
    return 1;
}

/* ||a - b|| / max(||b||, tiny), summed in double */
static double rel_error(const float *a, const float *b, uint64_t n)
{
    double diff = 0, norm = 0;

    for (uint64_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];

        diff += d * d;
        norm += (double)b[i] * b[i];
    }
    return sqrt(diff) / fmax(sqrt(norm), 1e-30);
}

/* Why records `rec` of a and b cannot be compared (ra, rb: dump_read's
 * answers); 0 when they can. */
static int mismatch(const dump_t *a, const dump_t *b, int ra, int rb, size_t rec)
{
    const dump_t *longer = ra ? a : b, *shorter = ra ? b : a;

    if (ra < 0 || rb < 0)
        return -1;
    if (ra != rb) {
        fprintf(stderr, "ddp-train: compare: %s ends after %zu records, but %s goes on with "
                "step %llu (compare dumps of runs with the same steps)\n", shorter->name, rec,
                longer->name, (unsigned long long)longer->step);
        return -1;
    }
    if (a->step != b->step || a->n != b->n) {
        fprintf(stderr, "ddp-train: compare: record %zu is step %llu of %llu weights in %s but "
                "step %llu of %llu weights in %s (compare dumps of the same model and steps)\n",
                rec, (unsigned long long)a->step, (unsigned long long)a->n, a->name,
                (unsigned long long)b->step, (unsigned long long)b->n, b->name);
        return -1;
    }
    return 0;
}

/* Walks both files; 0 all within rtol, 1 not, 2 they do not match up. */
static int compare_dumps(dump_t *a, dump_t *b, double rtol, FILE *out)
{
    double max = 0;
    uint64_t max_step = 0;
    int fail = 0;
    size_t rec;

    for (rec = 0;; rec++) {
        int ra = dump_read(a, rec), rb = dump_read(b, rec);
        double e;

        if (mismatch(a, b, ra, rb, rec) < 0)
            return 2;
        if (ra == 0)
            break;
        e = rel_error(a->v, b->v, a->n);
        if (!(e <= rtol)) { /* NaN fails too */
            fprintf(out, "step %llu: relative error %.3g above %g\n",
                    (unsigned long long)a->step, e, rtol);
            fail = 1;
        }
        if (rec == 0 || e > max || (isnan(e) && !isnan(max))) {
            max = e;
            max_step = a->step;
        }
    }
    if (rec == 0) {
        fprintf(stderr, "ddp-train: compare: %s and %s hold no records (write them with "
                "--dump-weights)\n", a->name, b->name);
        return 2;
    }
    fprintf(out, "compare: %zu steps, max relative error %.3g (step %llu)\n", rec, max,
            (unsigned long long)max_step);
    return fail;
}

int train_compare(const char *a, const char *b, double rtol, FILE *out)
{
    dump_t da = {0}, db = {0};
    int rc = 2;

    if (dump_open(&da, a) == 0 && dump_open(&db, b) == 0)
        rc = compare_dumps(&da, &db, rtol, out);
    dump_close(&da);
    dump_close(&db);
    return rc;
}
