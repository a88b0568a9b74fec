/* SPDX-License-Identifier: Apache-2.0 */
/* shrinkcheck: allreduces in a loop that survive lost ranks (drt_shrink).
 *
 * Each rank adds (its original rank + 1) into every element; after each
 * allreduce every rank checks the sum against the members it believes are
 * left, so survivors that disagreed on the membership fail (or hang, and
 * the test's timeout says so). SHRINK_DIE="R,R@K,..." (original ranks):
 * those ranks SIGKILL themselves at the start of iteration K (SHRINK_AT
 * where no @K is given; a whole node: list its ranks). On DRT_ELOST the survivors shrink, check
 * what drt_shrink says against what they know, and go on from the
 * iteration the least advanced survivor is at (one whose allreduce had
 * completed, because the dead rank's last bytes reached it, is one ahead:
 * it redoes that one).
 * Prints one line per shrink and one at the end; exit 0 only when every
 * check passed. Usage: shrinkcheck ITERATIONS COUNT */
#include "ddprt.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int dies(const char *list, int orig, int it, int at)
{
    char buf[256], *save = NULL;

    if (!list)
        return 0;
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *k = strchr(t, '@');
        if (atoi(t) == orig && (k ? atoi(k + 1) : at) == it)
            return 1;
    }
    return 0;
}

static double expected(const int *orig_of, int n)
{
    double sum = 0;

    for (int i = 0; i < n; i++)
        sum += orig_of[i] + 1;
    return sum;
}

/* what drt_shrink said, checked against the communicator and the old numbering */
static int check_shrink(drt_comm_t *c, const drt_shrink_info_t *in, int *orig_of, int me)
{
    int ok = in->new_size == drt_size(c) && in->old_size - in->nlost == in->new_size &&
             in->new_size > 0 && drt_rank(c) >= 0 && drt_rank(c) < in->new_size &&
             in->old_rank_of[drt_rank(c)] == in->old_rank && in->new_nodes == drt_node_count(c);
    int *next = malloc((size_t)in->new_size * sizeof(int));

    printf("rank %d (was %d, started as %d): shrink: world %d -> %d, nodes %d -> %d, lost",
           drt_rank(c), in->old_rank, me, in->old_size, in->new_size, in->old_nodes,
           in->new_nodes);
    for (int i = 0; i < in->nlost; i++)
        printf(" %d(started as %d, node %s)", in->lost_ranks[i], orig_of[in->lost_ranks[i]],
               in->lost_nodes[i]);
    printf(" in %.3f s\n", in->seconds);
    for (int i = 0; next && i < in->new_size; i++)
        next[i] = orig_of[in->old_rank_of[i]];
    for (int i = 0; next && i < in->new_size; i++)
        orig_of[i] = next[i];
    free(next);
    if (!ok || !next)
        printf("rank %d: FAIL: shrink info inconsistent (size %d, rank %d, nodes %d)\n",
               drt_rank(c), drt_size(c), drt_rank(c), drt_node_count(c));
    return ok && next ? 0 : -1;
}

static int step(drt_comm_t *c, float *buf, size_t count, const int *orig_of, int me,
                drt_error_t *err)
{
    double want = expected(orig_of, drt_size(c));
    int rc;

    for (size_t i = 0; i < count; i++)
        buf[i] = (float)(me + 1);
    if ((rc = drt_allreduce(c, buf, buf, count, DRT_FLOAT32, DRT_SUM, err)) < 0)
        return rc;
    for (size_t i = 0; i < count; i++)
        if (buf[i] != (float)want) {
            snprintf(err->text, sizeof(err->text), "element %zu is %g, want %g (size %d)", i,
                     (double)buf[i], want, drt_size(c));
            return -1;
        }
    return 0;
}

/* shrink, check, and agree on the iteration (a loss in between: again) */
static int recover(drt_comm_t *c, int *orig_of, int me, int *it, int *shrinks, drt_error_t *err)
{
    for (;; ++*shrinks) {
        drt_shrink_info_t in;
        int64_t v = *it;
        int rc;
        if (drt_shrink(c, &in, err) < 0) {
            printf("rank %d: FAIL: drt_shrink: %s\n", drt_rank(c), err->text);
            return -1;
        }
        if (check_shrink(c, &in, orig_of, me) < 0)
            return -1;
        rc = drt_allreduce(c, &v, &v, 1, DRT_INT64, DRT_MIN, err);
        if (rc == 0) {
            *it = (int)v;
            ++*shrinks;
            return 0;
        }
        if (rc != DRT_ELOST)
            return printf("rank %d: FAIL: after the shrink: %s\n", drt_rank(c), err->text), -1;
    }
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 10, at = getenv("SHRINK_AT") ? atoi(getenv("SHRINK_AT")) : 3;
    size_t count = argc > 2 ? (size_t)atol(argv[2]) : 1024;
    float *buf = malloc(count * sizeof(float));
    drt_comm_t *c;
    drt_error_t err;
    int *orig_of, me, shrinks = 0;

    if (!buf || drt_init(&c, &err) < 0) {
        fprintf(stderr, "shrinkcheck: %s\n", buf ? err.text : "out of memory");
        return 1;
    }
    me = drt_rank(c);
    orig_of = malloc((size_t)drt_size(c) * sizeof(int));
    for (int r = 0; orig_of && r < drt_size(c); r++)
        orig_of[r] = r;
    for (int it = 0; orig_of && it < iters;) {
        int rc;
        if (dies(getenv("SHRINK_DIE"), me, it, at))
            raise(SIGKILL);
        if ((rc = step(c, buf, count, orig_of, me, &err)) == 0) {
            it++;
            continue;
        }
        if (rc != DRT_ELOST || drt_lost_count(c) < 1) {
            printf("rank %d: FAIL in iteration %d: %s (rc %d, lost %d)\n", drt_rank(c), it,
                   err.text, rc, drt_lost_count(c));
            return 1;
        }
        if (recover(c, orig_of, me, &it, &shrinks, &err) < 0)
            return 1;
    }
    printf("rank %d (started as %d) done: size %d, nodes %d, %d shrink(s), %d iterations\n",
           drt_rank(c), me, drt_size(c), drt_node_count(c), shrinks, iters);
    drt_finalize(c);
    free(orig_of);
    free(buf);
    return 0;
}
