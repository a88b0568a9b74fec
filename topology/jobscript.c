/* SPDX-License-Identifier: Apache-2.0 */
/* A job script's options as sbatch and srun read them (ddptopo.h says what
 * is read). Three copies of the script: the original, for printing lines as
 * written; _joined, its body commands joined across backslash-newlines and
 * each line NUL-terminated, for the commands' text; and _words, the same
 * cut into words in place, which the options point into. */
#include "ddptopo.h"
#include "internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IN(name, names) listed(name, names, sizeof(names) / sizeof(names[0]))

static int listed(const char *name, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(name, names[i]))
            return 1;
    return 0;
}

/* srun's options that take a separate value (srun(1) of SLURM 22.05: a
 * required one), this plugin's --ddp-topo-bind and the container options of
 * pyxis, the SPANK plugin most GPU clusters run. Any other option on an
 * srun line is a flag (--nice, --no-container-mount-home: optional values
 * need '='), and the next word that is no option is the program. */
int dt_srun_takes_value(const char *name)
{
    static const char *const names[] = {
        "A", "b", "B", "c", "C", "d", "D", "e", "F", "G", "i", "J", "L", "m", "M", "n", "N",
        "o", "p", "q", "r", "S", "t", "T", "w", "W", "x",
        "accel-bind", "account", "acctg-freq", "bb", "bbf", "bcast-exclude", "begin", "chdir",
        "cluster-constraint", "clusters", "comment", "constraint", "container", "core-spec",
        "cores-per-socket", "cpu-bind", "cpu-freq", "cpus-per-gpu", "cpus-per-task", "deadline",
        "delay-boot", "dependency", "distribution", "epilog", "error", "exclude", "export",
        "extra-node-info", "gid", "gpu-bind", "gpu-freq", "gpus", "gpus-per-node",
        "gpus-per-socket", "gpus-per-task", "gres", "gres-flags", "het-group", "hint", "input",
        "job-name", "jobid", "licenses", "mail-type", "mail-user", "mcs-label", "mem",
        "mem-bind", "mem-per-cpu", "mem-per-gpu", "mincpus", "mpi", "msg-timeout", "network",
        "nodefile", "nodelist", "nodes", "ntasks", "ntasks-per-core", "ntasks-per-gpu",
        "ntasks-per-node", "ntasks-per-socket", "open-mode", "output", "partition", "power",
        "prefer", "priority", "profile", "prolog", "qos", "relative", "reservation", "signal",
        "slurmd-debug", "sockets-per-node", "switches", "task-epilog", "task-prolog",
        "tasks-per-node", "thread-spec", "threads", "threads-per-core", "time", "time-min",
        "tmp", "uid", "wait", "wckey",
        "ddp-topo-bind",
        "container-image", "container-mounts", "container-workdir", "container-name",
        "container-save", "container-env"};

    return IN(name, names);
}

/* sbatch's options that take no separate value (sbatch(1) of SLURM 22.05:
 * none, or an optional one after '='), --ddp-topo among them; -W/--wait is
 * one here, not on srun. Any other option on an #SBATCH line takes the
 * next word that is no option. */
static int sbatch_flag(const char *name)
{
    static const char *const names[] = {
        "ddp-topo", "exclusive", "oversubscribe", "s", "share", "overcommit", "O", "contiguous",
        "get-user-env", "hold", "H", "ignore-pbs", "nice", "no-kill", "k", "no-requeue",
        "parsable", "propagate", "quiet", "Q", "reboot", "requeue", "spread-job", "test-only",
        "use-min-nodes", "verbose", "v", "wait", "W"};

    return IN(name, names);
}

/* The next word at *p, without its quotes (see ddptopo.h), written in place;
 * NULL at the end of the line or at a comment. */
static char *next_word(char **p)
{
    char *s = *p + strspn(*p, " \t\r"), *word = s, *out = s;
    char quote = 0; /* the open quote, or 0 */
    int depth = 0;  /* of $( */

    if (!*s || *s == '#')
        return NULL;
    for (; *s && (quote || depth || !strchr(" \t\r", *s)); s++) {
        char c = *s;
        if (c == '\\' && quote != '\'' && s[1])
            c = *++s;
        else if (quote ? c == quote : strchr("'\"`", c) != NULL) {
            quote = quote ? 0 : c;
            if (c != '`')
                continue;
        } else if (quote != '\'' && c == '$' && s[1] == '(')
            depth++;
        else if (quote != '\'' && c == ')' && depth)
            depth--;
        *out++ = c;
    }
    *p = *s ? s + 1 : s;
    *out = '\0';
    return word;
}

static int add_opt(dt_script_t *sc, unsigned *cap, const dt_script_opt_t *opt)
{
    if (!opt->name[0])
        return 0; /* "--" or "--=x" on an #SBATCH line: no option at all */
    if (sc->nopts == *cap) {
        dt_script_opt_t *v = realloc(sc->opts, (*cap = *cap ? *cap * 2 : 16) * sizeof(*v));
        if (!v)
            return -1;
        sc->opts = v;
    }
    sc->opts[sc->nopts++] = *opt;
    return 0;
}

/* One option word (tok, "-" and more) split into name and value: --opt=value,
 * -N2 (the name moved left over the dash, to end it in place), or a value
 * in the next word (*next, then advanced) when the option takes one. */
static void split_option(dt_script_opt_t *o, char *tok, char **next, char **line)
{
    char *name = tok + (tok[1] == '-' ? 2 : 1), *eq;

    o->name = name;
    o->value = NULL;
    if ((eq = strchr(name, '='))) { /* our buffer: C23's strchr keeps o->name's const */
        *eq = '\0';
        o->value = eq + 1;
    } else if (tok[1] != '-' && o->name[1]) { /* -N2 */
        tok[0] = tok[1];
        tok[1] = '\0';
        o->name = tok;
        o->value = tok + 2;
    } else if (*next && (*next)[0] != '-' &&
               (o->src == DT_SCRIPT_SRUN ? dt_srun_takes_value(o->name) : !sbatch_flag(o->name))) {
        o->value = *next;
        *next = next_word(line);
    }
}

/* The options of an #SBATCH line, or of an srun line up to its program
 * (the first word that is no option; "--" ends srun's options). A lone
 * "-" is no option: skipped on an #SBATCH line, srun's program. */
static int read_options(dt_script_t *sc, unsigned *cap, char *line, dt_script_src_t src,
                        long lineno)
{
    char *tok = next_word(&line);

    while (tok) {
        dt_script_opt_t o = {.src = src, .line = lineno};
        char *next = next_word(&line);
        int option = tok[0] == '-' && tok[1];
        if (src == DT_SCRIPT_SRUN && (!option || !strcmp(tok, "--")))
            break;
        if (option) {
            split_option(&o, tok, &next, &line);
            if (add_opt(sc, cap, &o) < 0)
                return -1;
        }
        tok = next;
    }
    return 0;
}

/* The options of an srun command line: after leading spaces, `exec` and
 * VAR=value assignments, the word srun. NULL for any other line. */
static char *srun_options(char *line)
{
    char *s = line;

    for (;;) {
        size_t n;
        s += strspn(s, " \t");
        n = strcspn(s, " \t\r");
        if (n == 4 && !strncmp(s, "srun", 4))
            return s + 4;
        if ((n == 4 && !strncmp(s, "exec", 4)) ||
            (n > 0 && memchr(s, '=', n) && (isalpha((unsigned char)s[0]) || s[0] == '_')))
            s += n;
        else
            return NULL;
    }
}

/* The end of the shell command on `line` (its first line ends at `end`):
 * a line ending in a backslash (before \n or \r\n) goes on in the next,
 * joined here with blanks of the same length; *lineno counts the lines
 * joined. A backslash on the last line joins nothing: no line follows. */
static char *command_end(char *line, char *end, char *limit, long *lineno)
{
    while (end + 1 < limit) {
        char *cr = end > line && end[-1] == '\r' ? end - 1 : end;
        if (cr == line || cr[-1] != '\\')
            break;
        memset(cr - 1, ' ', (size_t)(end - cr) + 2);
        ++*lineno;
        line = end + 1;
        if (!(end = memchr(line, '\n', (size_t)(limit - line))))
            end = limit;
    }
    return end;
}

static int add_cmd(dt_script_t *sc, unsigned *cap, const dt_script_cmd_t *cmd)
{
    if (sc->ncmds == *cap) {
        dt_script_cmd_t *v = realloc(sc->cmds, (*cap = *cap ? *cap * 2 : 64) * sizeof(*v));
        if (!v)
            return -1;
        sc->cmds = v;
    }
    sc->cmds[sc->ncmds++] = *cmd;
    return 0;
}

typedef struct {
    unsigned opt_cap, cmd_cap;
    int body;             /* past the first command: no more #SBATCH lines */
} reader_t;

/* One line (a command: its lines joined) of _joined, s its first non-blank,
 * first..last its line numbers; copied into _words to be cut there. */
static int read_line(dt_script_t *sc, reader_t *r, char *s, long first, long last)
{
    char *w = sc->_words + (s - sc->_joined), *srun;

    memcpy(w, s, strlen(s) + 1);
    if (!r->body) {
        if (!strncmp(s, "#SBATCH", 7) || (first == 1 && !strncmp(s, "#!", 2)))
            sc->last_directive = first;
        return strncmp(s, "#SBATCH", 7) ? 0 : read_options(sc, &r->opt_cap, w + 7,
                                                           DT_SCRIPT_SBATCH, first);
    }
    if (!*s || *s == '#')
        return 0;
    if (add_cmd(sc, &r->cmd_cap, &(dt_script_cmd_t){.line = first, .last = last, .text = s}) < 0)
        return -1;
    if (!(srun = srun_options(w)) || sc->nsrun++)
        return 0;
    sc->srun_line = first;
    return read_options(sc, &r->opt_cap, srun, DT_SCRIPT_SRUN, first);
}

static int read_lines(dt_script_t *sc)
{
    char *limit = sc->_joined + sc->len, *end;
    reader_t r = {0};
    long lineno = 0;

    for (char *line = sc->_joined; line < limit; line = end + 1) {
        char *s = line + strspn(line, " \t");
        long first = ++lineno;
        if (!(end = memchr(line, '\n', (size_t)(limit - line))))
            end = limit;
        r.body |= s != end && *s != '#' && *s != '\r' && *s;
        if (r.body && *s != '#')
            end = command_end(line, end, limit, &lineno);
        *end = '\0';
        if (read_line(sc, &r, s, first, lineno) < 0)
            return -1;
    }
    return 0;
}

static char *copy(const char *buf, size_t len)
{
    char *c = malloc(len + 1);

    if (c) {
        if (len) /* buf may be NULL then, which memcpy must never see */
            memcpy(c, buf, len);
        c[len] = '\0';
    }
    return c;
}

int dt_script_parse(dt_script_t *sc, const char *buf, size_t len, dt_error_t *err)
{
    memset(sc, 0, sizeof(*sc));
    sc->len = len;
    if (!(sc->original = copy(buf, len)) || !(sc->_joined = copy(buf, len)) ||
        !(sc->_words = malloc(len + 1)) || read_lines(sc) < 0) {
        topo_seterr_code(err, DT_E_NOMEM, "job script: out of memory reading %zu bytes", len);
        return -1;
    }
    return 0;
}

int dt_script_load(dt_script_t *sc, const char *path, dt_error_t *err)
{
    char *buf, why[sizeof(err->text)];
    size_t len;
    int rc;

    memset(sc, 0, sizeof(*sc));
    if (dt_read_file(path, DT_INPUT_MAX, &buf, &len, err) < 0) {
        snprintf(why, sizeof(why), "%s", err ? err->text : "");
        topo_seterr_code(err, DT_E_FILE, "job script %s", why);
        return -1;
    }
    rc = dt_script_parse(sc, buf, len, err);
    free(buf);
    return rc;
}

void dt_script_free(dt_script_t *sc)
{
    free(sc->original);
    free(sc->_joined);
    free(sc->_words);
    free(sc->opts);
    free(sc->cmds);
    memset(sc, 0, sizeof(*sc));
}
