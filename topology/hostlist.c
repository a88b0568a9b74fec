/* SPDX-License-Identifier: Apache-2.0 */
/* SLURM hostlist expansion and compression.
 *
 * Our own parser rather than libslurm's: the plugin must not link libslurm
 * (slurmstepd provides only the spank_* symbols), and the CLI must work on a
 * laptop without SLURM. The grammar is SLURM's: comma or space separated
 * expressions, each literal text with bracket groups of numbers and ranges;
 * several groups form a cartesian product, the leftmost group outermost. */
#include "ddptopo.h"
#include "internal.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char **v;
    size_t n, cap;
} strvec_t;

static int strvec_push(strvec_t *sv, const char *s, size_t len)
{
    if (sv->n == sv->cap) {
        size_t cap = sv->cap ? sv->cap * 2 : 16;
        char **v = realloc(sv->v, cap * sizeof(*v));
        if (!v)
            return -1;
        sv->v = v;
        sv->cap = cap;
    }
    if (!(sv->v[sv->n] = strndup(s, len)))
        return -1;
    sv->n++;
    return 0;
}

void dt_hostlist_free(char **hosts, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(hosts[i]);
    free(hosts);
}

/* One item of a bracket group: lo..hi printed with `width` digits. */
typedef struct {
    unsigned long lo, hi;
    int width;
} range_t;

typedef struct {
    const char *list; /* whole input, for messages */
    strvec_t out;
    dt_error_t *err;
} expander_t;

static int bad(expander_t *x, const char *at, const char *what)
{
    topo_seterr(x->err, "hostlist '%.200s': %s at character %zu", x->list, what,
           (size_t)(at - x->list) + 1);
    return -1;
}

static int parse_number(expander_t *x, const char **p, unsigned long *val, int *width)
{
    const char *s = *p;
    unsigned long v = 0;

    if (!isdigit((unsigned char)*s))
        return bad(x, s, "expected a number inside '[...]'");
    while (isdigit((unsigned char)*s)) {
        if (s - *p >= 9)
            return bad(x, *p, "number longer than 9 digits");
        v = v * 10 + (unsigned long)(*s - '0');
        s++;
    }
    *width = (int)(s - *p);
    *val = v;
    *p = s;
    return 0;
}

/* Parse "[a-b,c]" at *p (pointing at '['), filling ranges. */
static int parse_group(expander_t *x, const char **p, range_t **ranges, size_t *nranges)
{
    const char *s = *p + 1;
    size_t n = 0, cap = 0;
    range_t *r = NULL;

    for (;;) {
        range_t item;
        range_t *nr;

        if (parse_number(x, &s, &item.lo, &item.width) < 0)
            goto fail;
        item.hi = item.lo;
        if (*s == '-') {
            int w;
            s++;
            if (parse_number(x, &s, &item.hi, &w) < 0)
                goto fail;
            if (item.hi < item.lo) {
                bad(x, s, "range runs backwards");
                goto fail;
            }
            if (item.hi - item.lo + 1 > DT_HOSTLIST_MAX_RANGE) {
                topo_seterr(x->err, "hostlist '%.200s': range %lu-%lu has %lu hosts, more than "
                       "SLURM's limit of %u per range", x->list, item.lo, item.hi,
                       item.hi - item.lo + 1, DT_HOSTLIST_MAX_RANGE);
                goto fail;
            }
        }
        /* geometric growth: a compressed list of scattered hosts is one
         * group of a million items, and growing by one copies quadratically */
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            if (!(nr = realloc(r, cap * sizeof(*r)))) {
                topo_seterr(x->err, "hostlist: out of memory");
                goto fail;
            }
            r = nr;
        }
        r[n++] = item;
        if (*s == ',') {
            s++;
            continue;
        }
        if (*s == ']')
            break;
        bad(x, s, *s ? "expected ',', '-' or ']'" : "unclosed '['");
        goto fail;
    }
    *p = s + 1;
    *ranges = r;
    *nranges = n;
    return 0;
fail:
    free(r);
    return -1;
}

/* Expand expr[0..len) after `prefix` (already built) recursively. */
static int expand_rest(expander_t *x, char *buf, size_t used, size_t bufsz,
                       const char *s, const char *end)
{
    const char *lb = memchr(s, '[', (size_t)(end - s));
    size_t lit = (size_t)((lb ? lb : end) - s);

    if (used + lit + 1 > bufsz)
        return bad(x, s, "host name too long");
    memcpy(buf + used, s, lit);
    used += lit;
    if (!lb) {
        if (x->out.n >= DT_HOSTLIST_MAX_HOSTS) {
            topo_seterr(x->err, "hostlist '%.200s': expands to more than %u hosts", x->list,
                   DT_HOSTLIST_MAX_HOSTS);
            return -1;
        }
        if (strvec_push(&x->out, buf, used) < 0) {
            topo_seterr(x->err, "hostlist: out of memory");
            return -1;
        }
        return 0;
    }

    const char *after = lb;
    range_t *ranges;
    size_t nranges;
    int rc = 0;

    if (parse_group(x, &after, &ranges, &nranges) < 0)
        return -1;
    for (size_t i = 0; i < nranges && rc == 0; i++) {
        for (unsigned long v = ranges[i].lo; v <= ranges[i].hi && rc == 0; v++) {
            int w = snprintf(buf + used, bufsz - used, "%0*lu", ranges[i].width, v);
            if (w < 0 || (size_t)w >= bufsz - used)
                rc = bad(x, lb, "host name too long");
            else
                rc = expand_rest(x, buf, used + (size_t)w, bufsz, after, end);
        }
    }
    free(ranges);
    return rc;
}

static int expand_expr(expander_t *x, const char *s, const char *end)
{
    char buf[256];

    for (const char *c = s; c < end; c++) {
        if (*c == ']')
            return bad(x, c, "']' without '['");
        if (*c == '[') {
            const char *close = memchr(c, ']', (size_t)(end - c));
            const char *nested = close ? memchr(c + 1, '[', (size_t)(close - c - 1)) : NULL;
            if (!close)
                return bad(x, c, "unclosed '['");
            if (nested)
                return bad(x, nested, "nested '['");
            c = close;
        }
    }
    return expand_rest(x, buf, 0, sizeof(buf), s, end);
}

static bool is_sep(char c)
{
    return c == ',' || isspace((unsigned char)c);
}

int dt_hostlist_expand(const char *list, char ***hosts, size_t *n, dt_error_t *err)
{
    expander_t x = {.list = list ? list : "", .err = err};
    const char *s = x.list;

    while (*s) {
        const char *start;
        int depth = 0;

        while (is_sep(*s))
            s++;
        if (!*s)
            break;
        start = s;
        for (; *s && (depth || !is_sep(*s)); s++) {
            if (*s == '[')
                depth = 1;
            else if (*s == ']')
                depth = 0;
        }
        if (expand_expr(&x, start, s) < 0) {
            dt_hostlist_free(x.out.v, x.out.n);
            return -1;
        }
    }
    if (x.out.n == 0) {
        topo_seterr(err, "hostlist '%.200s': names no host", x.list);
        free(x.out.v);
        return -1;
    }
    *hosts = x.out.v;
    *n = x.out.n;
    return 0;
}

/* A host name split as prefix + trailing number. */
typedef struct {
    size_t plen;       /* prefix length */
    const char *digits; /* NULL when the name does not end in digits */
    unsigned long num;
} hostname_t;

static hostname_t split_host(const char *h)
{
    hostname_t hn = {.plen = strlen(h)};
    size_t i = hn.plen;

    while (i > 0 && isdigit((unsigned char)h[i - 1]) && hn.plen - i < 9)
        i--;
    if (i < hn.plen) {
        hn.digits = h + i;
        hn.num = strtoul(hn.digits, NULL, 10);
        hn.plen = i;
    }
    return hn;
}

/* Does `num` printed with the width of `lo` give exactly `digits`? */
static bool same_width(const char *lo_digits, unsigned long num, const char *digits)
{
    char buf[16];

    snprintf(buf, sizeof(buf), "%0*lu", (int)strlen(lo_digits), num);
    return strcmp(buf, digits) == 0;
}

typedef struct {
    char *s;
    size_t len, cap;
    bool oom;
} strbuf_t;

static void sb_add(strbuf_t *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *ns = realloc(b->s, cap);
        if (!ns) {
            b->oom = true;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

/* Append the bracket group for hosts[i..j), all with the same prefix. */
static void sb_add_group(strbuf_t *b, char *const *hosts, size_t i, size_t j)
{
    bool bracket = j - i > 1;

    if (bracket)
        sb_add(b, "[", 1);
    for (size_t k = i; k < j;) {
        hostname_t lo = split_host(hosts[k]);
        size_t m = k + 1;

        while (m < j) {
            hostname_t nx = split_host(hosts[m]);
            if (nx.num != split_host(hosts[m - 1]).num + 1 || !same_width(lo.digits, nx.num, nx.digits))
                break;
            m++;
        }
        if (k > i)
            sb_add(b, ",", 1);
        sb_add(b, lo.digits, strlen(lo.digits));
        if (m - k > 1) {
            const char *hi = split_host(hosts[m - 1]).digits;
            sb_add(b, "-", 1);
            sb_add(b, hi, strlen(hi));
        }
        k = m;
    }
    if (bracket)
        sb_add(b, "]", 1);
}

char *dt_hostlist_compress(char *const *hosts, size_t n)
{
    strbuf_t b = {0};

    sb_add(&b, "", 0);
    for (size_t i = 0; i < n;) {
        hostname_t first = split_host(hosts[i]);
        size_t j = i + 1;

        if (first.digits) {
            while (j < n) {
                hostname_t nx = split_host(hosts[j]);
                if (!nx.digits || nx.plen != first.plen ||
                    strncmp(hosts[j], hosts[i], first.plen) != 0)
                    break;
                j++;
            }
        }
        if (i > 0)
            sb_add(&b, ",", 1);
        sb_add(&b, hosts[i], first.plen);
        if (first.digits)
            sb_add_group(&b, hosts, i, j);
        i = j;
    }
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
