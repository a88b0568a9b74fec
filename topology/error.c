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
    va_start(ap, fmt);
    vsnprintf(err->text, sizeof(err->text), fmt, ap);
    va_end(ap);
}

void topo_strv_addf(char ***v, unsigned *n, const char *fmt, ...)
{
    char buf[512], **nv;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (!(nv = realloc(*v, (*n + 1) * sizeof(char *))))
        return; /* out of memory: a warning is lost, nothing else */
    *v = nv;
    if ((nv[*n] = strdup(buf)))
        (*n)++;
}

void topo_strv_free(char **v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        free(v[i]);
    free(v);
}
