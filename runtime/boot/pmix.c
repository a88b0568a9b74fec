/* SPDX-License-Identifier: Apache-2.0 */
/* Bootstrap through PMIx when the step was started with `srun --mpi=pmix`:
 * each rank puts its endpoint, one fence exchanges them all. Built only
 * with PMIx (configure's HAVE_PMIX); DDPRT_BOOTSTRAP=tcp forces the TCP
 * rendezvous even then. */
#include "config.h"
#include "../internal.h"

#include <stdlib.h>
#include <string.h>

#ifdef HAVE_PMIX
#include <pmix.h>

#define KEY "ddprt.endpoint"

int pmix_wanted(void)
{
    const char *b = getenv("DDPRT_BOOTSTRAP");

    return getenv("PMIX_RANK") && getenv("PMIX_NAMESPACE") && !(b && !strcmp(b, "tcp"));
}

static int fence(const drt_comm_t *c, drt_error_t *err)
{
    pmix_info_t info[2];
    bool collect = true;
    int timeout = (int)c->timeout, rc;

    PMIx_Info_load(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIx_Info_load(&info[1], PMIX_TIMEOUT, &timeout, PMIX_INT);
    rc = PMIx_Fence(NULL, 0, info, 2);
    if (rc != PMIX_SUCCESS)
        return rt_fail(err, "bootstrap: PMIx fence failed: %s (a rank missing or dead? "
                       "DDPRT_TIMEOUT=%.0f s)", PMIx_Error_string(rc), c->timeout);
    return 0;
}

int pmix_exchange(drt_comm_t *c, const void *mine, void *table, size_t size, drt_error_t *err)
{
    pmix_proc_t me, p;
    pmix_value_t v, *got;
    pmix_byte_object_t bo = {.bytes = (char *)mine, .size = size};
    int rc = PMIx_Init(&me, NULL, 0);

    if (rc != PMIX_SUCCESS)
        return rt_fail(err, "bootstrap: PMIx_Init failed: %s", PMIx_Error_string(rc));
    c->pmix = 1;
    if ((int)me.rank != c->rank)
        return rt_fail(err, "bootstrap: PMIx rank %u is not RANK=%d (launcher variables disagree)",
                       me.rank, c->rank);
    PMIx_Value_load(&v, &bo, PMIX_BYTE_OBJECT);
    rc = PMIx_Put(PMIX_GLOBAL, KEY, &v);
    PMIX_VALUE_DESTRUCT(&v);
    if (rc != PMIX_SUCCESS || PMIx_Commit() != PMIX_SUCCESS)
        return rt_fail(err, "bootstrap: PMIx_Put failed: %s", PMIx_Error_string(rc));
    if (fence(c, err) < 0)
        return -1;
    for (int r = 0; r < c->size; r++) {
        PMIX_PROC_LOAD(&p, me.nspace, (pmix_rank_t)r);
        if (PMIx_Get(&p, KEY, NULL, 0, &got) != PMIX_SUCCESS || got->type != PMIX_BYTE_OBJECT ||
            got->data.bo.size != size)
            return rt_fail(err, "bootstrap: no endpoint of rank %d in PMIx", r);
        memcpy((char *)table + (size_t)r * size, got->data.bo.bytes, size);
        PMIX_VALUE_RELEASE(got);
    }
    return 0;
}

void pmix_finalize(drt_comm_t *c)
{
    if (c->pmix)
        PMIx_Finalize(NULL, 0);
}

#else

int pmix_wanted(void)
{
    return 0;
}

int pmix_exchange(drt_comm_t *c, const void *mine, void *table, size_t size, drt_error_t *err)
{
    (void)c;
    (void)mine;
    (void)table;
    (void)size;
    return rt_fail(err, "bootstrap: built without PMIx");
}

void pmix_finalize(drt_comm_t *c)
{
    (void)c;
}

#endif
