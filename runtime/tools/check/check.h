/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-check: the preflight check every rank of a step runs (README.md,
 * "Preflight: ddp-topo check"). One rank's findings travel to rank 0 in its
 * MASTER_PORT probe and to every rank in libddprt's allgather as a
 * ck_rank_t, plain bytes that every receiver checks (ck_rank_parse). Every
 * connection of the check is libddprt's own (runtime/net/net.c, runtime/net/auth.c):
 * authenticated with the job's secret, each wait bounded. */
#ifndef DDP_CHECK_H
#define DDP_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ddprt.h"

#define CK_TEXT 200
/* "ddc2": a row of this layout; another ddp-check's rows are refused */
#define CK_ROW_MAGIC 0x64646332u

typedef struct {
    double timeout;   /* --timeout: one probe's bound; the rendezvous waits ck_meet_seconds */
    double seconds;   /* --seconds: how long each link streams */
    size_t bytes;     /* --bytes: one node group's allreduce */
} ck_opts_t;

/* What one rank found. Strings are NUL-terminated within their arrays. */
typedef struct {
    uint32_t magic;     /* CK_ROW_MAGIC */
    uint32_t rank, node, local, fail;
    uint32_t host_ip;   /* this node's name resolved here (network order), 0: none */
    uint32_t data_ip;   /* the runtime's address toward MASTER_ADDR (contract.h) */
    uint32_t link_port; /* where this rank takes its rail predecessor's stream */
    uint32_t group_port; /* local rank 0: its node group's rendezvous port */
    double link_pred;   /* GB/s the cost model gives the NIC */
    double node_gbps, node_pred, link_gbps; /* measured busbw, predicted, link; < 0: none */
    char host[64];
    char checked[2 * CK_TEXT]; /* "master ok, cpus 0-3, nic eth0 up 25 Gb/s, no GPU planned" */
    char problem[CK_TEXT];  /* the first failed check, "" when none */
} ck_rank_t;

/* rows.c: a rank's findings, and what the rows say about the nodes */
void ck_note(ck_rank_t *me, int failed, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A row as it came from rank `rank` (of `world`, on `nodes` nodes) into out,
 * its text made printable; -1 with why when it is not one (a short or
 * foreign row, a number out of range, text without its end). */
int ck_rank_parse(const void *wire, size_t len, uint32_t rank, uint32_t world, uint32_t nodes,
                  ck_rank_t *out, char *why, size_t whylen);
int ck_is_loopback(uint32_t ip);
/* 1 when the nodes are one machine (their names resolve to loopback
 * addresses, one per node); 1 when the nodes' own addresses can carry the
 * probes and streams (else the runtime's) */
int ck_one_machine(const ck_rank_t *all, int size);
int ck_host_addresses(const ck_rank_t *all, int size);

/* local.c: the node's own checks, each recorded in me (checked / problem) */
void ck_local(ck_rank_t *me, const drt_env_t *env);

/* The link phase: a connect within --timeout, --seconds of streaming, and
 * CK_LINK_SLACK for the count to come back; the world's collectives wait
 * longer than that (ck_meet_seconds), so no rank gives up on a slow peer. */
#define CK_LINK_SLACK 0.5
static inline double ck_link_seconds(const ck_opts_t *o)
{
    return o->timeout + o->seconds + CK_LINK_SLACK;
}
/* DDPRT_TIMEOUT: a rank late by a whole probe timeout is still met, and
 * the link phase always fits */
static inline double ck_meet_seconds(const ck_opts_t *o)
{
    double link = ck_link_seconds(o) + 1;
    return 2 * o->timeout > link ? 2 * o->timeout : link;
}

/* master.c: MASTER_PORT, tried from every node; rank 0 serves it, each
 * probe bringing its rank's row. `auth` is a bare communicator
 * (auth_comm_bare): the job's secret, before the world exists. */
typedef struct ck_master ck_master_t;
/* serves until ck_master_stop, `seconds` at most; NULL with why set */
ck_master_t *ck_master_serve(drt_comm_t *auth, uint16_t port, double seconds, char *why,
                             size_t len);
/* stops serving (NULL: nothing); where seen[r] is 1, rows[r] is rank r's
 * row as its probe brought it (either may be NULL) */
void ck_master_stop(ck_master_t *m, ck_rank_t *rows, unsigned char *seen);
void ck_master_probe(ck_rank_t *me, const drt_env_t *env, drt_comm_t *auth, double timeout);

/* measure.c: the node group's allreduce and the rail link, all in parallel */
/* local rank 0's node group listener, on loopback (where the group meets) */
int ck_group_listen(ck_rank_t *me);
/* local rank 0 hands *listen_fd to libddprt (then -1) */
int ck_node_group(drt_comm_t *world, ck_rank_t *all, const ck_opts_t *o, int *listen_fd,
                  drt_error_t *err);
/* every rank's link listener into *fd (-1, noted in the row, when it
 * cannot listen), on the address its predecessor streams to, and
 * all[].link_port filled in: a collective, 0 or -1 with err set */
int ck_link_listen(drt_comm_t *world, ck_rank_t *all, int *fd, drt_error_t *err);
void ck_link(drt_comm_t *world, ck_rank_t *all, const ck_opts_t *o, int listen_fd);

/* report.c: rank 0's table; 0 when every check passed */
int ck_report(FILE *out, const ck_rank_t *all, int n, const drt_env_t *env, double seconds);
/* rank 0 when the rendezvous failed: what the probes brought (rows[r]
 * where have[r], rank 0's own row among them), the ranks never seen named
 * when missing_known, the failed nodes named with their reasons */
void ck_report_partial(FILE *out, const ck_rank_t *rows, const unsigned char *have,
                       int missing_known, const drt_env_t *env, const char *why,
                       double seconds);

#endif
