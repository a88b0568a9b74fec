/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-check: the preflight check every rank of a step runs (README.md,
 * "Preflight: ddp-topo check"). One rank's findings travel to every rank in
 * a ck_rank_t (libddprt's allgather), so the struct is plain bytes. */
#ifndef DDP_CHECK_H
#define DDP_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "ddprt.h"

#define CK_TEXT 200
#define CK_MAGIC 0x6464636bu /* "ddck": a probe's hello on MASTER_PORT */

typedef struct {
    double timeout;   /* --timeout: one probe's bound; the rendezvous waits ck_meet_seconds */
    double seconds;   /* --seconds: how long each link streams */
    size_t bytes;     /* --bytes: one node group's allreduce */
} ck_opts_t;

/* What one rank found. Strings are NUL-terminated within their arrays. */
typedef struct {
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

/* local.c: the node's own checks, each recorded in me (checked / problem) */
void ck_note(ck_rank_t *me, int failed, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void ck_local(ck_rank_t *me, const drt_env_t *env);
/* connect to ip:port from src (0: the kernel's choice) within timeout s;
 * the socket, or -1 with why set */
int ck_connect(uint32_t src, uint32_t ip, uint16_t port, double timeout, char *why, size_t len);
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
/* a listening TCP socket on any address, port 0: the kernel's choice */
int ck_listen(uint16_t port, uint16_t *got, char *why, size_t len);
double ck_now(void);
int ck_is_loopback(uint32_t ip);
/* 1 when the nodes are one machine (their names resolve to loopback
 * addresses, one per node); 1 when the nodes' own addresses can carry the
 * probes and streams (else the runtime's) */
int ck_one_machine(const ck_rank_t *all, int size);
int ck_host_addresses(const ck_rank_t *all, int size);

/* master.c: MASTER_PORT, tried from every node; rank 0 serves it */
typedef struct ck_master ck_master_t;
ck_master_t *ck_master_serve(uint16_t port, uint32_t world, char *why, size_t len);
/* stops serving; seen[r] is 1 for each rank whose probe arrived */
void ck_master_stop(ck_master_t *m, unsigned char *seen);
void ck_master_probe(ck_rank_t *me, const drt_env_t *env, double timeout);

/* measure.c: the node group's allreduce and the rail link, all in parallel */
/* local rank 0 hands *listen_fd to libddprt (then -1) */
int ck_node_group(drt_comm_t *world, ck_rank_t *all, const ck_opts_t *o, int *listen_fd,
                  drt_error_t *err);
void ck_link(drt_comm_t *world, ck_rank_t *all, const ck_opts_t *o, int listen_fd);

/* report.c: rank 0's table; 0 when every check passed */
int ck_report(const ck_rank_t *all, int n, const drt_env_t *env, double seconds);
/* rank 0 when the rendezvous failed: what it knows, the missing ranks named */
void ck_report_partial(const ck_rank_t *me, const drt_env_t *env, const unsigned char *seen,
                       const char *why, double seconds);

#endif
