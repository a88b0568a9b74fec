/* SPDX-License-Identifier: Apache-2.0 */
/* Hostlist expansion and compression against SLURM's own behaviour. */
#include <stdlib.h>

#include "ddptopo.h"
#include "tap.h"

/* Expand `list` and join the hosts with spaces. */
static char *expand_joined(const char *list, dt_error_t *err)
{
    char **hosts;
    size_t n, len = 1;
    char *out;

    if (dt_hostlist_expand(list, &hosts, &n, err) < 0)
        return NULL;
    for (size_t i = 0; i < n; i++)
        len += strlen(hosts[i]) + 1;
    out = calloc(1, len);
    for (size_t i = 0; i < n; i++) {
        if (i)
            strcat(out, " ");
        strcat(out, hosts[i]);
    }
    dt_hostlist_free(hosts, n);
    return out;
}

static void expands(const char *list, const char *want)
{
    dt_error_t err = {.code = DT_OK};
    char *got = expand_joined(list, &err);

    is_str(got, want, "expand '%s'%s%s", list, got ? "" : ": ", got ? "" : err.text);
    free(got);
}

static void refuses(const char *list, const char *why)
{
    dt_error_t err = {.code = DT_OK};
    char *got = expand_joined(list, &err);

    ok(!got && strstr(err.text, why) && strstr(err.text, "hostlist"),
       "refuse '%.40s': %s", list, err.text);
    free(got);
}

static void compresses(const char *names, const char *want)
{
    char *copy = strdup(names), *hosts[64], *save = NULL;
    size_t n = 0;

    for (char *t = strtok_r(copy, " ", &save); t && n < 64; t = strtok_r(NULL, " ", &save))
        hosts[n++] = t;
    char *got = dt_hostlist_compress(hosts, n);
    is_str(got, want, "compress '%s'", names);
    /* and the result expands back to the same names */
    if (got)
        expands(got, names);
    free(got);
    free(copy);
}

int main(void)
{
    expands("n1", "n1");
    expands("gpu[001-004,010],login1", "gpu001 gpu002 gpu003 gpu004 gpu010 login1");
    expands("rack[1-2]-n[01-02]", "rack1-n01 rack1-n02 rack2-n01 rack2-n02");
    expands("alpha,beta,gamma", "alpha beta gamma");
    expands("linux[1,2]", "linux1 linux2");
    expands("node-a[8-11]", "node-a8 node-a9 node-a10 node-a11");
    expands("n[08-11]", "n08 n09 n10 n11");
    expands("n[1-2]ib", "n1ib n2ib");
    expands("  a1 b[2-3],,c ", "a1 b2 b3 c");
    expands("x[0-0]", "x0");

    refuses("gpu[1-", "unclosed '['");
    refuses("gpu[1-4", "unclosed '['");
    refuses("gpu1-4]", "']' without '['");
    refuses("gpu[[1-2]]", "nested '['");
    refuses("gpu[4-1]", "backwards");
    refuses("gpu[a-b]", "expected a number");
    refuses("gpu[1-2;3]", "expected ','");
    refuses("gpu[]", "expected a number");
    refuses("n[0-65536]", "more than SLURM's limit");
    refuses("", "names no host");
    refuses(" , ", "names no host");
    refuses("n[1234567890]", "longer than 9 digits");
    {
        dt_error_t err;
        char **hosts;
        size_t n;
        ok(dt_hostlist_expand("n[0-65535]", &hosts, &n, &err) == 0 && n == 65536 &&
           !strcmp(hosts[65535], "n65535"), "a range of exactly 64K hosts is allowed");
        dt_hostlist_free(hosts, n);
        ok(dt_hostlist_expand("a[0-65535]-b[0-65535]", &hosts, &n, &err) < 0 &&
           strstr(err.text, "more than"), "a product over the total limit is refused: %s",
           err.text);
    }

    compresses("n1 n2 n3", "n[1-3]");
    compresses("gpu001 gpu002 gpu003 gpu004 gpu010 login1", "gpu[001-004,010],login1");
    compresses("n3 n1 n2", "n[3,1-2]");
    compresses("alpha beta", "alpha,beta");
    compresses("n9 n10 n11", "n[9-11]");
    compresses("n08 n09 n10", "n[08-10]");
    compresses("n1 m1 n2", "n1,m1,n2");
    compresses("rack1-n01 rack1-n02 rack2-n01", "rack1-n[01-02],rack2-n01");
    compresses("n7", "n7");
    return tap_done();
}
