/* Helpers shared by libddptopo's source files; not part of the public API
 * (the library exports only dt_* symbols). */
#ifndef DDPTOPO_INTERNAL_H
#define DDPTOPO_INTERNAL_H

#include "ddptopo.h"

void topo_seterr(dt_error_t *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
