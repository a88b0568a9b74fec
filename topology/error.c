/* SPDX-License-Identifier: Apache-2.0 */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void topo_seterr(dt_error_t *err, const char *fmt, ...)
{
    va_list ap;

    if (!err)
        return;
    err->code = DT_E_INPUT;
    va_start(ap, fmt);
    vsnprintf(err->text, sizeof(err->text), fmt, ap);
    va_end(ap);
}

void topo_seterr_code(dt_error_t *err, dt_code_t code, const char *fmt, ...)
{
    va_list ap;

    if (!err)
        return;
    err->code = code;
    va_start(ap, fmt);
    vsnprintf(err->text, sizeof(err->text), fmt, ap);
    va_end(ap);
}

/* Warnings name node lists of any length: measured, never cut. */
void topo_strv_addf(char ***v, unsigned *n, const char *fmt, ...)
{
    char **nv, *text;
    va_list ap;
    int len;

    va_start(ap, fmt);
    len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (len < 0 || !(text = malloc((size_t)len + 1)))
        return; /* out of memory: a warning is lost, nothing else */
    va_start(ap, fmt);
    vsnprintf(text, (size_t)len + 1, fmt, ap);
    va_end(ap);
    if (!(nv = realloc(*v, (*n + 1) * sizeof(char *)))) {
        free(text);
        return;
    }
    *v = nv;
    nv[(*n)++] = text;
}

void topo_copy_elided(char *dst, size_t size, const char *src)
{
    if ((size_t)snprintf(dst, size, "%s", src) >= size && size > 4)
        memcpy(dst + size - 4, "...", 4);
}

void topo_strv_free(char **v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        free(v[i]);
    free(v);
}
