/* SPDX-License-Identifier: Apache-2.0 */
/* A job script's shell lines as the dry run reads them: which line runs
 * srun and where its program starts, and the patterns that undo what
 * ddp-topo is for (a launcher under srun, a fixed MASTER_PORT, a
 * MASTER_ADDR or ranks computed by hand), each with the line to write
 * instead. libddptopo's dt_script_load reads the options and hands over
 * the commands; this file reads them for the rest. It stays out of the
 * library: a launcher is known by runtime/contract.c's rules, and
 * libddptopo depends on nothing of the runtime. */
#define _GNU_SOURCE /* memmem */
#include "config.h"
#include "cli.h"
#include "contract.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define IN(name, names) listed(name, names, sizeof(names) / sizeof(names[0]))
#define MAX_WORDS 256

static int listed(const char *name, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(name, names[i]))
            return 1;
    return 0;
}

/* The length of the shell word at s, as the shell splits it: quotes group,
 * a backslash keeps the next character, $(...) and `...` stay whole. */
static size_t word_len(const char *s)
{
    char quote = 0;
    int depth = 0;
    size_t i = 0;

    for (; s[i] && (quote || depth || !strchr(" \t\r;&|", s[i])); i++) {
        if (s[i] == '\\' && quote != '\'' && s[i + 1])
            i++;
        else if (quote ? s[i] == quote : strchr("'\"`", s[i]) != NULL)
            quote = quote ? 0 : s[i];
        else if (quote != '\'' && s[i] == '$' && s[i + 1] == '(')
            depth++;
        else if (quote != '\'' && s[i] == ')' && depth)
            depth--;
    }
    return i;
}

typedef struct {
    const char *s;      /* into the line, not NUL-terminated */
    size_t len;
} word_t;

/* The words of one simple command (up to ; & | or a comment). */
static unsigned split(const char *line, word_t *w, unsigned max)
{
    unsigned n = 0;
    const char *s = line;

    for (;;) {
        s += strspn(s, " \t\r");
        if (!*s || *s == '#' || strchr(";&|", *s) || n == max)
            return n;
        w[n].s = s;
        w[n].len = word_len(s);
        s += w[n++].len;
    }
}

static int word_is(const word_t *w, const char *text)
{
    return w->len == strlen(text) && !strncmp(w->s, text, w->len);
}

/* The word without shell quotes, for matching (malloc'd) */
static char *unquote(const word_t *w)
{
    char *out = malloc(w->len + 1), *o = out;

    if (!out)
        return NULL;
    for (size_t i = 0; i < w->len; i++) {
        if (strchr("'\"", w->s[i]))
            continue;
        if (w->s[i] == '\\' && i + 1 < w->len)
            i++;
        *o++ = w->s[i];
    }
    *o = '\0';
    return out;
}

static void add(cli_lint_t *l, long line, const char *what, char *convert, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void add(cli_lint_t *l, long line, const char *what, char *convert, const char *fmt, ...)
{
    size_t off = l->span_len ? l->span_off : 0, len = l->span_len;

    cli_finding_t *v = realloc(l->v, (l->n + 1) * sizeof(*v));
    va_list ap;

    if (!v) {
        free(convert);
        l->oom = 1;
        return;
    }
    l->v = v;
    v += l->n++;
    v->line = line;
    snprintf(v->what, sizeof(v->what), "%s", what);
    va_start(ap, fmt);
    vsnprintf(v->fix, sizeof(v->fix), fmt, ap);
    va_end(ap);
    v->convert = convert;
    v->off = off;
    v->len = len;
    l->span_len = 0;
}

/* ---- variables the plugin sets ---------------------------------------------- */

static const char *const rank_vars[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                        "NODE_RANK", "GROUP_RANK"};

static const char *what_var(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s computed from SLURM's variables", name);
    return buf;
}

/* NAME=VALUE words before the command (or after export): the ones that
 * replace what ddp-topo sets, by name. */
static void assignment(cli_lint_t *l, long lineno, const word_t *w)
{
    const char *eq = memchr(w->s, '=', w->len);
    char name[32], what[64];
    size_t n = eq ? (size_t)(eq - w->s) : 0;

    if (!eq || n == 0 || n >= sizeof(name))
        return;
    memcpy(name, w->s, n);
    name[n] = '\0';
    l->span_off = (size_t)(w->s - l->base);
    l->span_len = w->len;
    if (!strcmp(name, "MASTER_PORT"))
        add(l, lineno, "a fixed MASTER_PORT", NULL,
            "every job that runs this script meets on the same port, and ddp-topo keeps a "
            "MASTER_PORT you set (it never overwrites yours): delete it, ddp-topo derives a "
            "port per job and step");
    else if (!strcmp(name, "MASTER_ADDR"))
        add(l, lineno, "MASTER_ADDR set by hand", NULL,
            "ddp-topo keeps it and sets MASTER_ADDR to the step's first node in every task "
            "($(hostname) is the batch shell's node, which need not be rank 0's): delete it");
    else if (IN(name, rank_vars) && memmem(eq, w->len - n, "SLURM_", 6))
        add(l, lineno, what_var(what, sizeof(what), name), NULL,
            "ddp-topo sets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and NODE_RANK in "
            "every task (in the batch shell $SLURM_PROCID is 0 for all of them): delete it");
    l->span_len = 0;
}

/* ---- a launcher as srun's program ------------------------------------------------ */

/* torchrun's options that take no value (torch 1.13 to 2.x run.py) */
static int launcher_flag(const char *name)
{
    static const char *const flags[] = {"standalone", "no-python", "no_python", "run-path",
                                        "run_path", "module", "m", "use_env", "use-env"};

    return IN(name, flags);
}

typedef struct {
    long nproc;          /* --nproc-per-node N, 0 when not given or not a number */
    int module;          /* -m: the program is a module */
    int no_python;
    unsigned script;     /* index of the training script's word */
} torchrun_t;

static void torchrun_options(const word_t *w, unsigned n, unsigned i, torchrun_t *t)
{
    for (; i < n && w[i].s[0] == '-'; i++) {
        char *opt = unquote(&w[i]), *name, *val;
        if (!opt)
            return;
        name = opt + strspn(opt, "-");
        if ((val = strchr(name, '=')))
            *val++ = '\0';
        else if (!launcher_flag(name) && i + 1 < n)
            val = NULL, i++; /* the value is the next word */
        if (!strcmp(name, "module") || !strcmp(name, "m"))
            t->module = 1;
        if (!strcmp(name, "no-python") || !strcmp(name, "no_python"))
            t->no_python = 1;
        if (!strcmp(name, "nproc-per-node") || !strcmp(name, "nproc_per_node")) {
            char *v = val ? val : unquote(&w[i]), *end;
            long k = v ? strtol(v, &end, 10) : 0;
            t->nproc = v && end != v && !*end && k > 0 && k < 4096 ? k : 0;
            if (!val)
                free(v);
        }
        free(opt);
    }
    t->script = i;
}

/* srun's task counts, which counted launchers: the converted line gives
 * the launcher's per-node count instead. *skip: the words it spans. */
static int task_count_option(const word_t *w, unsigned n, unsigned i, unsigned *skip)
{
    static const char *const names[] = {"n", "ntasks", "ntasks-per-node", "tasks-per-node"};
    char *opt = unquote(&w[i]), *name, *eq;
    int hit;

    if (!opt)
        return 0;
    name = opt + (opt[1] == '-' ? 2 : 1);
    if ((eq = strchr(name, '=')))
        *eq = '\0';
    hit = opt[0] == '-' && (IN(name, names) || (opt[1] != '-' && name[0] == 'n' && name[1] &&
                                                isdigit((unsigned char)name[1])));
    *skip = hit && !eq && !(opt[1] != '-' && name[1]) && i + 1 < n ? 2 : 1;
    free(opt);
    return hit;
}

/* The line with the launcher and its options replaced by the interpreter
 * (malloc'd): srun's own options as written, its task counts replaced by
 * the launcher's per-node count when it had one. */
static char *convert_launcher(const char *line, const word_t *w, unsigned n, unsigned srun,
                              unsigned prog, unsigned nwords)
{
    torchrun_t t = {0};
    size_t size = strlen(line) + 64, o;
    char *out = malloc(size);

    if (!out)
        return NULL;
    torchrun_options(w, n, prog + nwords, &t);
    if (t.script >= n) {
        free(out);
        return NULL; /* no script: nothing to run instead */
    }
    o = (size_t)snprintf(out, size, "%.*s", (int)(w[srun].s + w[srun].len - line), line);
    if (t.nproc)
        o += (size_t)snprintf(out + o, size - o, " --ntasks-per-node=%ld", t.nproc);
    for (unsigned i = srun + 1, skip; i < prog; i += skip) {
        skip = 1;
        if (t.nproc && task_count_option(w, prog, i, &skip))
            continue;
        o += (size_t)snprintf(out + o, size - o, " %.*s", (int)w[i].len, w[i].s);
    }
    snprintf(out + o, size - o, " %s%s", t.no_python ? "" : t.module ? "python3 -m " : "python3 ",
             w[t.script].s);
    return out;
}

/* How many of the program's words are the launcher itself: python's
 * options run up to the module's name (python -u -m torch.distributed.run). */
static unsigned launcher_words(const char *name, char **argv, int argc)
{
    if (!name || strncmp(name, "python", 6))
        return name && strchr(name, ' ') ? 2 : 1;
    for (int i = 1; i < argc; i++)
        if (strstr(argv[i], "torch.distributed."))
            return (unsigned)i + 1;
    return (unsigned)argc;
}

/* The program's words (unquoted, for contract_launcher_name) */
static int program_argv(const word_t *w, unsigned n, unsigned prog, char **argv, int max)
{
    int argc = 0;

    for (unsigned i = prog; i < n && argc < max; i++)
        if (!(argv[argc++] = unquote(&w[i])))
            return -1;
    return argc;
}

static void free_argv(char **argv, int argc)
{
    for (int i = 0; i < argc; i++)
        free(argv[i]);
}

/* The first word after srun's options: the program, n when none. */
static unsigned srun_program(const word_t *w, unsigned n, unsigned srun)
{
    unsigned i = srun + 1;

    while (i < n && w[i].s[0] == '-' && !word_is(&w[i], "--")) {
        char *opt = unquote(&w[i]);
        const char *name = opt ? opt + (opt[1] == '-' ? 2 : 1) : "";
        int takes = opt && !strchr(name, '=') && (opt[1] == '-' ? dt_srun_takes_value(name)
                                                 : (!name[1] && dt_srun_takes_value(name)));
        free(opt);
        i += takes ? 2 : 1;
    }
    return i < n && word_is(&w[i], "--") ? i + 1 : i;
}

static void launcher_line(cli_lint_t *l, long lineno, const char *line, const word_t *w,
                          unsigned n, unsigned srun)
{
    unsigned prog = srun_program(w, n, srun);
    char *argv[8];
    int argc = program_argv(w, n, prog, argv, 8);
    const char *name = argc > 0 ? contract_launcher_name(argc, argv) : NULL;
    unsigned words = launcher_words(name, argv, argc);
    int convertible = name && (!strcmp(name, "torchrun") || !strncmp(name, "python -m", 9));

    if (name)
        add(l, lineno, "a launcher under srun", convertible ? convert_launcher(line, w, n, srun,
                                                                               prog, words) : NULL,
            "srun starts one %s per task, and each forks workers of its own: N x N processes "
            "for the node's GPUs, all sharing one rank's GPU, cores and ports; run the "
            "training script itself as srun's program, one task per GPU%s", name,
            convertible ? "" : " (convert this line by hand: --ntasks-per-node=GPUs per node, "
                               "then python and the script)");
    free_argv(argv, argc > 0 ? argc : 0);
}

/* One simple command: its leading assignments (export, exec skipped),
 * then, if it is srun, its program. */
static void command(cli_lint_t *l, long lineno, const char *line, const word_t *w, unsigned n)
{
    unsigned i = 0;

    while (i < n && (word_is(&w[i], "export") || word_is(&w[i], "exec") ||
                     memchr(w[i].s, '=', w[i].len))) {
        if (memchr(w[i].s, '=', w[i].len))
            assignment(l, lineno, &w[i]);
        i++;
    }
    if (i < n && word_is(&w[i], "srun"))
        launcher_line(l, lineno, line, w, n, i);
}

void cli_lint_line(cli_lint_t *l, const char *line, long lineno, long last)
{
    word_t w[MAX_WORDS];
    const char *s = line;

    l->base = line;
    /* each command of a list: a=1; b=2 && srun ... */
    while (*s && *s != '#') {
        unsigned n = split(s, w, MAX_WORDS);
        const char *end = n ? w[n - 1].s + w[n - 1].len : s;
        unsigned before = l->n;
        command(l, lineno, line, w, n);
        for (unsigned i = before; i < l->n; i++)
            l->v[i].last = last;
        end += strspn(end, " \t\r");
        if (!*end || *end == '#' || !strchr(";&|", *end) || n == MAX_WORDS)
            return;
        s = end + strspn(end, ";&|");
    }
}

/* ---- what the report prints ------------------------------------------------------ */

/* Line n (1-based) of text: its start, *len its length without the newline */
static const char *nth_line(const char *text, long n, size_t *len)
{
    const char *s = text;

    for (long i = 1; i < n && s; i++)
        if ((s = strchr(s, '\n')))
            s++;
    if (!s || !*s)
        return NULL;
    *len = strcspn(s, "\n");
    if (*len && s[*len - 1] == '\r')
        --*len;
    return s;
}

void cli_lint_print(const cli_lint_t *l, const char *original, const char *path, FILE *f)
{
    size_t len;
    const char *text;

    fprintf(f, "\njob script: %u problem%s undoing what ddp-topo sets up\n", l->n,
            l->n == 1 ? "" : "s");
    for (unsigned i = 0; i < l->n; i++) {
        const cli_finding_t *v = &l->v[i];
        if (!(text = nth_line(original, v->line, &len)))
            len = 0, text = "";
        fprintf(f, "  line %ld: %s: %.*s%s\n    %s\n", v->line, v->what, (int)(len > 120 ? 120 : len),
                text, len > 120 || v->last > v->line ? " ..." : "", v->fix);
        if (v->convert)
            fprintf(f, "    write instead: %s\n", v->convert);
    }
    fprintf(f, "the whole script, changed: ddp-topo report --convert --sbatch %s\n", path);
}

/* Whether a word is left of a cut variable: `export` or the bare name of a
 * variable ddp-topo sets (export RANK after RANK=... was cut). */
static int leftover(const word_t *w)
{
    static const char *const names[] = {"export", "MASTER_ADDR", "MASTER_PORT", "RANK",
                                        "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                        "NODE_RANK", "GROUP_RANK"};
    char name[24];

    if (w->len >= sizeof(name))
        return 0;
    memcpy(name, w->s, w->len);
    name[w->len] = '\0';
    return IN(name, names);
}

/* Whether anything but leftovers remains in a command list */
static int keeps_something(const char *cmd)
{
    word_t w[MAX_WORDS];

    while (*cmd) {
        unsigned n = split(cmd, w, MAX_WORDS);
        for (unsigned k = 0; k < n; k++)
            if (!leftover(&w[k]))
                return 1;
        cmd = n ? w[n - 1].s + w[n - 1].len : cmd;
        cmd += strspn(cmd, " \t\r");
        if (*cmd && !strchr(";&|", *cmd))
            return 1; /* a comment, or a word past split's limit */
        cmd += strspn(cmd, ";&|");
    }
    return 0;
}

/* A command list whose cut commands left separators: "; b" is "b", and
 * "a; ; b" (a syntax error) is "a; b". In place. */
static const char *skip_empty(char *cmd)
{
    char *s = cmd + strspn(cmd, " \t;"), *semi;

    while ((semi = strchr(s, ';'))) {
        char *next = semi + 1 + strspn(semi + 1, " \t");
        if (*next == ';')
            memmove(semi + 1, next + 1, strlen(next + 1) + 1);
        else
            s = semi + 1;
    }
    return cmd + strspn(cmd, " \t;");
}

/* The command at lines first..last with the flagged words cut out; a
 * command left with nothing but `export` is commented out instead. */
static void print_cut(const cli_lint_t *l, const char *cmd, size_t cmdlen, long first, FILE *f)
{
    char *out = malloc(cmdlen + 1);
    size_t o = 0, i = 0;

    if (!out)
        return;
    while (i < cmdlen) {
        const cli_finding_t *cut = NULL;
        for (unsigned k = 0; k < l->n && !cut; k++)
            if (l->v[k].line == first && l->v[k].len && l->v[k].off == i)
                cut = &l->v[k];
        if (cut)
            i += cut->len + strspn(cmd + i + cut->len, " \t");
        else
            out[o++] = cmd[i++];
    }
    while (o && strchr(" \t\r;", out[o - 1]))
        o--;
    out[o] = '\0';
    if (keeps_something(out))
        fprintf(f, "%s\n", skip_empty(out));
    else
        fprintf(f, "# ddp-topo: deleted (ddp-topo sets it): %.*s\n", (int)cmdlen, cmd);
    free(out);
}

void cli_lint_convert(const cli_lint_t *l, const char *original, long mode_after, FILE *f)
{
    size_t len;
    const char *text;

    for (long n = 1; (text = nth_line(original, n, &len)); n++) {
        if (n == mode_after + 1 && mode_after >= 0)
            fputs("#SBATCH --ddp-topo=auto\n", f);
        const cli_finding_t *launcher = NULL, *cut = NULL;
        long last = n;
        for (unsigned k = 0; k < l->n; k++) {
            if (l->v[k].line != n)
                continue;
            last = l->v[k].last;
            if (l->v[k].convert)
                launcher = &l->v[k];
            else if (l->v[k].len)
                cut = &l->v[k];
        }
        if (launcher) {
            fprintf(f, "%s\n", launcher->convert);
        } else if (cut) {
            const char *end = nth_line(original, last, &len);
            print_cut(l, text, (size_t)(end + len - text), n, f);
        } else {
            fprintf(f, "%.*s\n", (int)len, text);
            continue;
        }
        n = last;
    }
}

void cli_lint_free(cli_lint_t *l)
{
    for (unsigned i = 0; i < l->n; i++)
        free(l->v[i].convert);
    free(l->v);
    memset(l, 0, sizeof(*l));
}
