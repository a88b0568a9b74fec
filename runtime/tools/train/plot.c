/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-train --plot: the --metrics JSON lines drawn with gnuplot (tools.h
 * says what it promises). The lines are ddp-train's own, or ddp_topo.torch's
 * telemetry (the same keys but the loss, which the hooks never see), so a
 * tiny tolerant scanner does: it looks for the six keys and their numbers,
 * nothing else. */
#define _POSIX_C_SOURCE 200809L /* getline, mkstemp, popen */
#include "tools.h"
#include "files.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const keys[] = {"step", "loss", "step_ms", "compute_ms", "comm_ms",
                                   "exposed_ms"};
#define NKEYS (sizeof(keys) / sizeof(keys[0]))
#define LOSS 1 /* the one key a line may lack: gnuplot reads NaN as no point */
#define NEEDED "step, step_ms, compute_ms, comm_ms and exposed_ms"

/* a --metrics line is about 330 bytes: 1 GiB is some 3 million steps, and
 * a line getline reads is bounded by it */
#define PLOT_INPUT_MAX (1ull << 30)

/* The number after "key": in line; false when the key is missing or its
 * value is not a finite number. */
static bool json_number(const char *line, const char *key, double *v)
{
    size_t klen = strlen(key);

    for (const char *q = strchr(line, '"'); q; q = strchr(q + 1, '"')) {
        const char *p = q + 1 + klen;
        char *end;

        if (strncmp(q + 1, key, klen) != 0 || *p != '"')
            continue;
        for (p++; isspace((unsigned char)*p); p++)
            ;
        if (*p != ':')
            continue; /* a string value that happens to read "key" */
        *v = strtod(p + 1, &end);
        return end != p + 1 && isfinite(*v);
    }
    return false;
}

/* Copies the usable lines of jsonl into dat as six columns; counts lines
 * read, kept, and kept with a loss. -1 with a message when jsonl cannot be
 * read. */
static int convert(const char *jsonl, FILE *dat, size_t *lines, size_t *kept, size_t *losses,
                   char *err, size_t errlen)
{
    char why[200];
    FILE *in = train_input_open(jsonl, PLOT_INPUT_MAX, NULL, why, sizeof(why));
    char *line = NULL;
    size_t cap = 0;

    if (!in) {
        snprintf(err, errlen, "cannot read %s: %s (give the file that --metrics wrote)", jsonl,
                 why);
        return -1;
    }
    *lines = *kept = *losses = 0;
    while (getline(&line, &cap, in) >= 0) {
        double v[NKEYS];
        size_t k = 0;

        if (strspn(line, " \t\r\n") == strlen(line))
            continue; /* a blank line is no data, nor a skipped one */
        ++*lines;
        for (k = 0; k < NKEYS; k++) {
            if (json_number(line, keys[k], &v[k]))
                continue;
            if (k != LOSS)
                break;
            v[k] = NAN;
        }
        if (k < NKEYS)
            continue;
        ++*kept;
        *losses += !isnan(v[LOSS]);
        for (k = 0; k < NKEYS; k++)
            fprintf(dat, "%.9g%c", v[k], k + 1 < NKEYS ? ' ' : '\n');
    }
    free(line);
    fclose(in);
    return 0;
}

/* A file name inside a gnuplot single-quoted string: gnuplot has no escape
 * for ' there, and a name starting with | or < would be run as a command
 * (and ~ expanded), so names with quotes or newlines are refused and
 * relative ones get a "./" in front (gp_prefix). */
static int gp_name_ok(const char *name, char *err, size_t errlen)
{
    if (strpbrk(name, "'\"\n\r")) {
        snprintf(err, errlen, "file name '%s': has a quote or a newline, which gnuplot cannot "
                 "be given safely (rename it)", name);
        return -1;
    }
    return 0;
}

static const char *gp_prefix(const char *name)
{
    return name[0] == '/' ? "" : "./";
}

/* Whether an executable `prog` is in $PATH. */
static bool in_path(const char *prog)
{
    const char *path = getenv("PATH");
    char dir[4096];

    while (path && *path) {
        size_t len = strcspn(path, ":");

        snprintf(dir, sizeof(dir), "%.*s/%s", (int)(len ? len : 1), len ? path : ".", prog);
        if (access(dir, X_OK) == 0)
            return true;
        path += len + (path[len] == ':');
    }
    return false;
}

/* The two panels: loss, and the times, per step. */
static int run_gnuplot(const char *dat, const char *svg, bool loss, char *err, size_t errlen)
{
    FILE *gp = popen("gnuplot", "w");
    struct stat st;
    int status;

    if (!gp) {
        snprintf(err, errlen, "cannot run gnuplot: %s", strerror(errno));
        return -1;
    }
    fprintf(gp, "set terminal svg size 900,700 dynamic noenhanced background '#ffffff'\n"
            "set output '%s%s'\n"
            "set multiplot layout %d,1\n"
            "set lmargin at screen 0.1\nset rmargin at screen 0.78\n" /* aligned steps */
            "set grid\nset xlabel 'step'\nset key outside right\n"
            "%s%s%s%s"
            "set ylabel 'ms per step'\n"
            "plot '%s%s' using 1:3 with lines title 'step', '' using 1:4 with lines title "
            "'compute', '' using 1:5 with lines title 'communication', '' using 1:6 with lines "
            "title 'exposed'\n"
            "unset multiplot\n",
            gp_prefix(svg), svg, loss ? 2 : 1,
            loss ? "set ylabel 'loss'\nplot '" : "", loss ? gp_prefix(dat) : "", loss ? dat : "",
            loss ? "' using 1:2 with lines title 'loss'\n" : "", gp_prefix(dat), dat);
    status = pclose(gp);
    /* gnuplot exits 0 after some failures (an output it could not open), so
     * an empty svg counts as one too */
    if (status != 0 || stat(svg, &st) < 0 || st.st_size == 0) {
        snprintf(err, errlen, "gnuplot failed (status %d, its messages are above) drawing %s",
                 status, svg);
        return -1;
    }
    return 0;
}

/* The data file in $TMPDIR (or /tmp): its name in path, open in *dat. */
static int make_dat(char *path, size_t len, FILE **dat, char *err, size_t errlen)
{
    const char *tmp = getenv("TMPDIR");
    int fd;

    snprintf(path, len, "%s/ddp-train-plot-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (gp_name_ok(path, err, errlen) < 0)
        return -1;
    fd = mkstemp(path);
    *dat = fd < 0 ? NULL : fdopen(fd, "w");
    if (!*dat) {
        snprintf(err, errlen, "cannot create %s: %s (set TMPDIR to a writable directory)", path,
                 strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return 0;
}

/* Whether svg can be written, before gnuplot tries (its messages are less
 * clear). A device, a FIFO, a symbolic link are refused: gnuplot would
 * hang on a FIFO, write through a link, and a failure would remove the
 * file (run as root, -o /dev/null would delete /dev/null). */
static int writable(const char *svg, char *err, size_t errlen)
{
    char why[200];
    FILE *f = train_output_open(svg, 0, why, sizeof(why));

    if (!f) {
        snprintf(err, errlen, "-o %s: %s", svg, why);
        return -1;
    }
    fclose(f);
    return 0;
}

/* The usable lines of jsonl into the data file at path (*loss: some have
 * a loss); -1 with a message when there is none or the file cannot be read
 * or written. */
static int write_dat(const char *jsonl, const char *path, FILE *dat, bool *loss, char *err,
                     size_t errlen)
{
    size_t lines, kept, losses;
    int rc = convert(jsonl, dat, &lines, &kept, &losses, err, errlen);

    if (fclose(dat) != 0 && rc == 0) {
        snprintf(err, errlen, "cannot write %s: %s (free space in TMPDIR)", path, strerror(errno));
        return -1;
    }
    if (rc == 0 && kept == 0) {
        snprintf(err, errlen, "%s: none of its %zu lines has " NEEDED " (give the file that "
                 "ddp-train --metrics or ddp_topo.torch's telemetry wrote)", jsonl, lines);
        return -1;
    }
    if (rc == 0 && kept < lines)
        fprintf(stderr, "ddp-train: plot: skipped %zu of %zu lines of %s that lack one of "
                NEEDED "\n", lines - kept, lines, jsonl);
    *loss = losses > 0;
    return rc;
}

int train_plot(const char *jsonl, const char *svg, char *err, size_t errlen)
{
    char path[4200];
    FILE *dat;
    bool loss = false;
    int rc;

    if (gp_name_ok(svg, err, errlen) < 0)
        return -1;
    if (!in_path("gnuplot")) {
        snprintf(err, errlen, "gnuplot is not installed (apt install gnuplot-nox)");
        return -1;
    }
    if (make_dat(path, sizeof(path), &dat, err, errlen) < 0)
        return -1;
    rc = write_dat(jsonl, path, dat, &loss, err, errlen);
    if (rc == 0)
        rc = writable(svg, err, errlen);
    if (rc == 0 && run_gnuplot(path, svg, loss, err, errlen) < 0) {
        unlink(svg); /* no half-drawn picture left behind */
        rc = -1;
    }
    unlink(path);
    return rc;
}
