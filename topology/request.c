/* SPDX-License-Identifier: Apache-2.0 */
/* The --ddp-topo value's grammar, written once for the plugin (which
 * refuses a bad value at submission) and the dry run (which must refuse
 * it the same way, with the same words). */
#include "ddptopo.h"
#include "internal.h"

#include <string.h>

#define VALID_VALUES "a mode (auto, env, off) and flags (verbose, share, check), comma-separated, " \
                     "e.g. --ddp-topo=auto,verbose"

static const char *const mode_names[] = {
    [DT_MODE_OFF] = "off", [DT_MODE_ENV] = "env", [DT_MODE_AUTO] = "auto"};

const char *dt_mode_name(dt_mode_t mode)
{
    return mode_names[mode];
}

int dt_mode_lookup(const char *s, size_t len, dt_mode_t *mode)
{
    for (size_t i = 0; i < sizeof(mode_names) / sizeof(mode_names[0]); i++) {
        if (strlen(mode_names[i]) == len && !strncmp(s, mode_names[i], len)) {
            *mode = (dt_mode_t)i;
            return 0;
        }
    }
    return -1;
}

static int flag(const char *s, size_t len, dt_request_t *r)
{
    if (len == 7 && !strncmp(s, "verbose", 7))
        r->verbose = 1;
    else if (len == 5 && !strncmp(s, "share", 5))
        r->share = 1;
    else if (len == 5 && !strncmp(s, "check", 5))
        r->check = 1;
    else
        return -1;
    return 0;
}

int dt_request_parse(const char *value, dt_request_t *req, dt_error_t *err)
{
    dt_request_t r = {.mode = DT_MODE_AUTO};
    int have_mode = 0;
    const char *s = value ? value : "";

    /* A bare --ddp-topo means auto (SLURM may pass NULL or ""). */
    if (!*s)
        goto done;
    do {
        size_t len = strcspn(s, ",");
        dt_mode_t m;

        if (flag(s, len, &r) == 0) {
        } else if (!have_mode && dt_mode_lookup(s, len, &m) == 0) {
            r.mode = m;
            have_mode = 1;
        } else {
            const char *why = len == 0 ? "empty item"
                            : dt_mode_lookup(s, len, &m) == 0 ? "a second mode" : "unknown item";
            topo_seterr(err, "invalid --ddp-topo value '%.80s': %s '%.*s' (expected %s)", value,
                        why, (int)(len > 40 ? 40 : len), s, VALID_VALUES);
            return -1;
        }
        s += len;
    } while (*s++ == ',');
done:
    *req = r;
    return 0;
}
