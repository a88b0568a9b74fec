/* SPDX-License-Identifier: Apache-2.0 */
/* The deployed plugstack.conf, read as SPANK reads it, for check-config:
 * slurm.conf's PlugStackConfig (default: plugstack.conf beside slurm.conf,
 * which is $SLURM_CONF or /etc/slurm/slurm.conf), '#' comments, and
 * `include GLOB` lines, relative to the including file's directory. */
#include "config.h"
#include "cli.h"

#include <glob.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CONF_MAX (4u << 20)   /* bytes of one config file */
#define INCLUDE_DEPTH 8       /* a file including itself stops here */

static void set_err(dt_error_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(dt_error_t *err, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err->text, sizeof(err->text), fmt, ap);
    va_end(ap);
}

/* PlugStackConfig= of slurm.conf, or the default beside it */
static void plugstack_path(char *path, size_t len)
{
    const char *conf = getenv("SLURM_CONF") ? getenv("SLURM_CONF") : "/etc/slurm/slurm.conf";
    char *data = NULL, *save = NULL;
    size_t n;
    const char *slash = strrchr(conf, '/');
    dt_error_t err;

    snprintf(path, len, "%.*s/plugstack.conf", slash ? (int)(slash - conf) : 1,
             slash ? conf : ".");
    if (dt_read_file(conf, CONF_MAX, &data, &n, &err) < 0)
        return; /* no slurm.conf here: the default path, named if it is missing */
    for (char *l = strtok_r(data, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        l += strspn(l, " \t");
        if (!strncasecmp(l, "PlugStackConfig=", 16)) {
            char *v = l + 16;
            v[strcspn(v, " \t#")] = '\0';
            snprintf(path, len, "%s", v);
        }
    }
    free(data);
}

static int read_conf(const char *file, int depth, cli_plug_lines_t *out, dt_error_t *err);

static int include(const char *file, const char *pattern, int depth, cli_plug_lines_t *out,
                   dt_error_t *err)
{
    char full[1024];
    const char *slash = strrchr(file, '/');
    glob_t g;
    int rc = 0;

    if (pattern[0] == '/' || !slash)
        snprintf(full, sizeof(full), "%s", pattern);
    else
        snprintf(full, sizeof(full), "%.*s/%s", (int)(slash - file), file, pattern);
    if (glob(full, 0, NULL, &g) != 0)
        return 0; /* SPANK skips a pattern that matches nothing */
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++)
        rc = read_conf(g.gl_pathv[i], depth + 1, out, err);
    globfree(&g);
    return rc;
}

static int add_line(cli_plug_lines_t *out, const char *file, unsigned lineno, const char *text)
{
    cli_plug_line_t *l = realloc(out->lines, (out->n + 1) * sizeof(*l));

    if (!l)
        return -1;
    out->lines = l;
    l += out->n;
    snprintf(l->file, sizeof(l->file), "%s", file);
    l->lineno = lineno;
    if (!(l->text = strdup(text)))
        return -1;
    out->n++;
    return 0;
}

/* One line: an include, a ddp_topo.so line (kept), or anything else. */
static int conf_line(const char *file, unsigned lineno, char *l, int depth,
                     cli_plug_lines_t *out, dt_error_t *err)
{
    char *word, *rest, *base;
    size_t plugin_len;

    l[strcspn(l, "#")] = '\0';
    l += strspn(l, " \t");
    if (!*l)
        return 0;
    word = l;
    rest = l + strcspn(l, " \t");
    if (!strncmp(word, "include", 7) && word + 7 == rest) {
        rest += strspn(rest, " \t");
        rest[strcspn(rest, " \t")] = '\0';
        return include(file, rest, depth, out, err);
    }
    rest += strspn(rest, " \t");
    plugin_len = strcspn(rest, " \t");
    for (base = rest + plugin_len; base > rest && base[-1] != '/'; base--)
        ;
    if ((size_t)(rest + plugin_len - base) != 11 || strncmp(base, "ddp_topo.so", 11))
        return 0;
    if (add_line(out, file, lineno, l) < 0) {
        set_err(err, "out of memory");
        return -1;
    }
    return 0;
}

static int read_conf(const char *file, int depth, cli_plug_lines_t *out, dt_error_t *err)
{
    char *data, *l, *next;
    size_t n;
    unsigned lineno = 0;
    int rc = 0;

    if (depth > INCLUDE_DEPTH) {
        set_err(err, "'%.300s': includes nested more than %d deep (an include loop?)",
                        file, INCLUDE_DEPTH);
        return -1;
    }
    if (dt_read_file(file, CONF_MAX, &data, &n, err) < 0)
        return -1;
    /* every line, blank ones too (a NUL inside a line ends that line only) */
    for (l = data; rc == 0 && l < data + n; l = next) {
        next = memchr(l, '\n', (size_t)(data + n - l));
        next = next ? (*next = '\0', next + 1) : data + n;
        rc = conf_line(file, ++lineno, l, depth, out, err);
    }
    free(data);
    return rc;
}

int cli_plugstack_read(const char *path, cli_plug_lines_t *out, dt_error_t *err)
{
    memset(out, 0, sizeof(*out));
    if (path)
        snprintf(out->path, sizeof(out->path), "%s", path);
    else
        plugstack_path(out->path, sizeof(out->path));
    if (read_conf(out->path, 0, out, err) < 0) {
        cli_plugstack_free(out);
        return -1;
    }
    return 0;
}

void cli_plugstack_free(cli_plug_lines_t *lines)
{
    for (unsigned i = 0; i < lines->n; i++)
        free(lines->lines[i].text);
    free(lines->lines);
    lines->lines = NULL;
    lines->n = 0;
}
