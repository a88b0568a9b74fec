/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-allreduce-bench: each rank's input, the exact result it must get, and
 * the check of every element (bench.h). Both paths use it: the host's
 * buffers (bench.c) and the device's copied back (bench-gpu.c). Calls no
 * other file of the tool. */
#include "config.h"
#include "bench.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Input element i of rank r, and the exact expected result: small integers
 * that every type (bfloat16 included) holds exactly for up to 8 ranks. */
double input(int r, size_t i)
{
    return (double)((r + 1) * (int)(i % 7 + 1));
}

double expected(const opts_t *o, int n, size_t i)
{
    double k = (double)(i % 7 + 1);

    switch (o->op) {
    case DRT_MIN: return k;
    case DRT_MAX: return k * n;
    case DRT_AVG: return o->dtype == DRT_INT32 || o->dtype == DRT_INT64
                         ? (double)((long)(k * n * (n + 1) / 2) / n) : k * (n + 1) / 2.0;
    default: return k * n * (n + 1) / 2.0;
    }
}

void store(void *buf, size_t i, drt_dtype_t t, double v)
{
    switch (t) {
    case DRT_FLOAT64: ((double *)buf)[i] = v; break;
    case DRT_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case DRT_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case DRT_BFLOAT16: { float f = (float)v; uint32_t u; memcpy(&u, &f, 4); ((uint16_t *)buf)[i] = (uint16_t)(u >> 16); break; }
    case DRT_FLOAT16: { /* small integers: exact in half precision */
        int e = 0; double m = v;
        uint16_t h = 0;
        if (v != 0) {
            while (m >= 2) { m /= 2; e++; }
            h = (uint16_t)(((e + 15) << 10) | (uint16_t)((m - 1) * 1024));
        }
        ((uint16_t *)buf)[i] = h;
        break;
    }
    default: ((float *)buf)[i] = (float)v;
    }
}

static double load(const void *buf, size_t i, drt_dtype_t t)
{
    switch (t) {
    case DRT_FLOAT64: return ((const double *)buf)[i];
    case DRT_INT32: return ((const int32_t *)buf)[i];
    case DRT_INT64: return (double)((const int64_t *)buf)[i];
    case DRT_BFLOAT16: { uint32_t u = (uint32_t)((const uint16_t *)buf)[i] << 16; float f; memcpy(&f, &u, 4); return f; }
    case DRT_FLOAT16: {
        uint16_t h = ((const uint16_t *)buf)[i];
        int e = (h >> 10) & 0x1f;
        return e ? ldexp(1.0 + (h & 0x3ff) / 1024.0, e - 15) : ldexp((h & 0x3ff) / 1024.0, -14);
    }
    default: return ((const float *)buf)[i];
    }
}

long check(const opts_t *o, const void *recv, size_t count, int n, double rel)
{
    long wrong = 0;

    for (size_t i = 0; i < count; i++) {
        double want = expected(o, n, i);
        wrong += fabs(load(recv, i, o->dtype) - want) > 1e-9 + rel * fabs(want) * n;
    }
    return wrong;
}
