/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA/NCCL stand-in's accounting (tests/standin/README.md): what a
 * test asks the library it loaded, through dlsym("ddp_standin_stats"). */
#ifndef DDP_STANDIN_H
#define DDP_STANDIN_H

struct ddp_standin_stats {
    int ndevices;
    int contexts[64]; /* per physical device, this process: 0 or 1 */
    long live_streams, live_events, live_comms, live_allocs, live_host_allocs, live_ops;
    long connect_waits; /* collectives that had to wait at the call for peers' first connection */
    long cross_comm_overlaps, violations, aborts;
};

/* 0 with *out filled; -1 when the stand-in refuses to run (no DDP_GPU_STANDIN=1) */
int ddp_standin_stats(struct ddp_standin_stats *out);

#endif
