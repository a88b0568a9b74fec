/* SPDX-License-Identifier: Apache-2.0 */
/* drt_auto_state, drt_auto_restore and drt_auto_pin on every rank of a
 * ddp-run world (train-auto.test): the text's form, a buffer too small,
 * a round trip, decisions applied, bytes that differ between ranks
 * refused by all, another layout's ignored, malformed texts refused, and
 * re-checks with and without the pin (DDPRT_VERBOSE=1 logs them: the test
 * counts). Prints "autocheck: N failures" and exits non-zero on any. */
#include <stdio.h>
#include <string.h>

#include "ddprt.h"

static int failures, rank;

#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            failures++;                                                                      \
            fprintf(stderr, "autocheck: rank %d: line %d: ", rank, __LINE__);                \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fputc('\n', stderr);                                                             \
        }                                                                                    \
    } while (0)

#define COUNT 1024 /* 4096 bytes: the size class "4096" */

static char header[100];

static void calls(drt_comm_t *c, int n)
{
    static float v[COUNT];
    drt_error_t e;

    for (int i = 0; i < n; i++)
        CHECK(drt_allreduce(c, v, v, COUNT, DRT_FLOAT32, DRT_SUM, &e) == 0, "allreduce: %s", e.text);
}

/* the state as a string ("" when it fails) */
static const char *state(drt_comm_t *c)
{
    static char buf[DRT_AUTO_STATE_MAX + 1];
    size_t len = DRT_AUTO_STATE_MAX;
    drt_error_t e;

    if (drt_auto_state(c, buf, &len, &e) < 0) {
        CHECK(0, "drt_auto_state: %s", e.text);
        len = 0;
    }
    buf[len] = 0;
    return buf;
}

/* restore header + body; the return value, err's text in why */
static int restore(drt_comm_t *c, const char *body, char *why, size_t wlen)
{
    char text[DRT_AUTO_STATE_MAX];
    drt_error_t e = {0};
    int rc;

    snprintf(text, sizeof(text), "%s%s", header, body);
    rc = drt_auto_restore(c, text, strlen(text), &e);
    snprintf(why, wlen, "%s", rc < 0 ? e.text : "");
    return rc;
}

static void form(drt_comm_t *c, int measures)
{
    char small[8], want[200], why[sizeof(drt_error_t)];
    size_t len = sizeof(small);
    drt_error_t e;

    calls(c, 4); /* the trial, then 3 calls of the choice */
    snprintf(want, sizeof(want), "%s4096 ", header);
    CHECK(!strncmp(state(c), want, measures ? strlen(want) : strlen(header)) &&
          strlen(state(c)) == (measures ? strlen(header) + 12 : strlen(header)),
          "the state after 4 calls: '%s' (want '%s' then flat|hier 3)", state(c), measures ? want : header);
    CHECK(drt_auto_state(c, small, &len, &e) == -1 && len == strlen(state(c)) &&
          strstr(e.text, "DRT_AUTO_STATE_MAX"), "an 8-byte buffer: len %zu, '%s'", len, e.text);
    snprintf(want, sizeof(want), "%s", state(c));
    CHECK(restore(c, want + strlen(header), why, sizeof(why)) == 0 && !strcmp(state(c), want),
          "a round trip: '%s' (%s)", state(c), why);
}

static void applied(drt_comm_t *c)
{
    char why[sizeof(drt_error_t)], want[200];

    snprintf(want, sizeof(want), "%s16 hier 2\n4096 flat 7\n", header);
    CHECK(restore(c, "16 hier 2\n4096 flat 7\n", why, sizeof(why)) == 0 && !strcmp(state(c), want),
          "decisions applied: '%s' (%s)", state(c), why);
    CHECK(drt_size(c) < 2 ||
          (restore(c, rank == 1 ? "4096 hier 7\n" : "4096 flat 7\n", why, sizeof(why)) == -1 &&
           strstr(why, "the ranks were given different decisions") && !strcmp(state(c), want)),
          "bytes that differ on rank 1: '%s', state '%s'", why, state(c));
    {
        drt_error_t e;
        const char *other = "ddprt-auto 1 ranks 999 nodes 2 local 2\n4096 hier 1\n";
        CHECK(drt_auto_restore(c, other, strlen(other), &e) == 1 && !strcmp(state(c), want),
              "another layout's: not 1, or the state changed: '%s'", state(c));
    }
}

static void malformed(drt_comm_t *c)
{
    static const char *bad[] = {"4096 hier\n", "4096 auto 1\n", "4096 hier 1", "4095 hier 1\n",
                                "4096 flat 1\n4096 flat 2\n", "4096 hier -1\n", " 4096 hier 1\n",
                                "4096 hier 01\n", "0 hier 1\n"};
    char why[sizeof(drt_error_t)];
    drt_error_t e;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK(restore(c, bad[i], why, sizeof(why)) == -1 && strstr(why, "auto state: "),
              "'%s' was not refused (%s)", bad[i], why);
    CHECK(drt_auto_restore(c, "ddprt-auto 2 x\n", 15, &e) == -1 && strstr(e.text, "version 2"),
          "version 2: '%s'", e.text);
    CHECK(drt_auto_restore(c, "hello\n", 6, &e) == -1 && strstr(e.text, "no 'ddprt-auto' header"),
          "no header: '%s'", e.text);
    CHECK(drt_auto_restore(c, header, strlen(header) + 1, &e) == -1 && strstr(e.text, "NUL"),
          "a NUL byte: '%s'", e.text);
}

/* calls 250..259: re-checks at 256 and 257 unless pinned */
static void rechecks(drt_comm_t *c, int pin)
{
    char why[sizeof(drt_error_t)];

    drt_auto_pin(c, pin);
    CHECK(restore(c, "4096 hier 250\n", why, sizeof(why)) == 0, "restore: %s", why);
    if (rank == 0)
        fprintf(stderr, "autocheck: calls 251-260, %s\n", pin ? "pinned" : "not pinned");
    calls(c, 10);
}

int main(void)
{
    drt_comm_t *c;
    drt_error_t e;
    int measures;

    if (drt_init(&c, &e) < 0) {
        fprintf(stderr, "autocheck: %s\n", e.text);
        return 1;
    }
    rank = drt_rank(c);
    measures = drt_node_count(c) > 1 && drt_local_size(c) > 1;
    snprintf(header, sizeof(header), "ddprt-auto 1 ranks %d nodes %d local %d\n", drt_size(c),
             drt_node_count(c), drt_local_size(c));
    drt_set_algo(c, DRT_ALGO_AUTO);
    form(c, measures);
    applied(c);
    malformed(c);
    rechecks(c, 0);
    rechecks(c, 1);
    printf("autocheck: rank %d: %d failures\n", rank, failures);
    drt_finalize(c);
    return failures != 0;
}
