/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the fuzz targets; see fuzz.h. */
#include "fuzz.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *must(void *p)
{
    if (!p)
        fuzz_fail("out of memory");
    return p;
}

char *fuzz_cstring(const uint8_t *data, size_t size)
{
    char *s = must(malloc(size + 1));

    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

static char scratch[4096];

static void scratch_remove(void)
{
    unlink(scratch);
}

const char *fuzz_file(const uint8_t *data, size_t size)
{
    FILE *f;

    if (!scratch[0]) {
        const char *dir = getenv("TMPDIR");
        int fd;
        /* `run` points TMPDIR into the build dir: a run that ends in a
         * crash skips atexit and would leave the file behind in /tmp */
        if ((size_t)snprintf(scratch, sizeof(scratch), "%s/ddp-fuzz.XXXXXX",
                             dir && *dir ? dir : "/tmp") >= sizeof(scratch) ||
            (fd = mkstemp(scratch)) < 0)
            fuzz_fail("mkstemp %s failed", scratch);
        close(fd);
        atexit(scratch_remove);
    }
    if (!(f = fopen(scratch, "wb")) || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        fuzz_fail("cannot write %s", scratch);
    return scratch;
}

char **fuzz_lines(const uint8_t *data, size_t size, int *count)
{
    char *copy = fuzz_cstring(data, size);
    size_t n = 1;
    char **v;

    for (const char *p = copy; *p; p++)
        n += *p == '\n';
    v = must(calloc(n + 2, sizeof(*v)));
    /* v[0] owns the copy; the lines start at v[1] */
    v[0] = copy;
    *count = 0;
    for (char *line = copy, *nl;; line = nl + 1) {
        v[1 + (*count)++] = line;
        if (!(nl = strchr(line, '\n')))
            break;
        *nl = '\0';
    }
    return v + 1;
}

void fuzz_lines_free(char **lines)
{
    free(lines[-1]);
    free(lines - 1);
}

void fuzz_fail(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fputs("fuzz: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}
