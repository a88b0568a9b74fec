/* SPDX-License-Identifier: Apache-2.0 */
/* Hostlists (SLURM_STEP_NODELIST, --nodelist, #SBATCH -w): expansion must
 * not crash or blow up, a refusal must say why, and compression must round
 * trip: expand(compress(expand(x))) is expand(x), host for host. */
#include "ddptopo.h"
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

static void round_trip(const char *list, char **hosts, size_t n)
{
    char *packed = dt_hostlist_compress(hosts, n);
    char **again;
    size_t n2;
    dt_error_t err;

    if (!packed)
        fuzz_fail("compressing %zu hosts failed", n);
    if (dt_hostlist_expand(packed, &again, &n2, &err) < 0)
        fuzz_fail("'%.200s' compresses to '%.200s', which does not expand: %s", list, packed,
                  err.text);
    if (n2 != n)
        fuzz_fail("'%.200s' has %zu hosts, its compression '%.200s' %zu", list, n, packed, n2);
    for (size_t i = 0; i < n; i++)
        if (strcmp(hosts[i], again[i]))
            fuzz_fail("'%.200s': host %zu is '%s', after '%.200s' it is '%s'", list, i,
                      hosts[i], packed, again[i]);
    dt_hostlist_free(again, n2);
    free(packed);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *list = fuzz_cstring(data, size);
    char **hosts;
    size_t n;
    dt_error_t err = {.code = DT_OK};

    if (dt_hostlist_expand(list, &hosts, &n, &err) == 0) {
        round_trip(list, hosts, n);
        dt_hostlist_free(hosts, n);
    } else if (!err.text[0]) {
        fuzz_fail("'%.200s' refused without a message", list);
    }
    free(list);
    return 0;
}
