#include "internal.h"

#include <stdarg.h>
#include <stdio.h>

void topo_seterr(dt_error_t *err, const char *fmt, ...)
{
    va_list ap;

    if (!err)
        return;
    va_start(ap, fmt);
    vsnprintf(err->text, sizeof(err->text), fmt, ap);
    va_end(ap);
}
