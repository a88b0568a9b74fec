/* SPDX-License-Identifier: Apache-2.0 */
/* The public blocking collectives (ddprt.h): each first waits until the
 * queued non-blocking requests are done (request.c), so every rank sees the
 * same order of operations, then runs the host collective (coll.c). */
#include "../internal.h"

int drt_allreduce(drt_comm_t *c, const void *send, void *recv, size_t count, drt_dtype_t t,
                  drt_op_t op, drt_error_t *err)
{
    request_drain(c);
    return rt_status(c, coll_allreduce(c, send, recv, count, t, op, err));
}

int drt_broadcast(drt_comm_t *c, void *buf, size_t bytes, int root, drt_error_t *err)
{
    request_drain(c);
    return rt_status(c, coll_broadcast(c, buf, bytes, root, err));
}

int drt_allgather(drt_comm_t *c, const void *send, void *recv, size_t bytes, drt_error_t *err)
{
    request_drain(c);
    return rt_status(c, coll_allgather(c, send, recv, bytes, err));
}

int drt_reduce_scatter(drt_comm_t *c, const void *send, void *recv, size_t count,
                       drt_dtype_t t, drt_op_t op, drt_error_t *err)
{
    request_drain(c);
    return rt_status(c, coll_reduce_scatter(c, send, recv, count, t, op, err));
}

int drt_barrier(drt_comm_t *c, drt_error_t *err)
{
    request_drain(c);
    return rt_status(c, coll_barrier(c, err));
}
