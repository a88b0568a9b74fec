/* SPDX-License-Identifier: Apache-2.0 */
/* Element-wise reductions and the 16-bit float conversions. bfloat16 and
 * float16 travel as 16 bits, as under NCCL and gloo (half the bytes of
 * float32 on the wire: what a bf16 gradient hook is for); each reduction
 * step widens both operands, combines them in float32 and rounds once. */
#include "../internal.h"

#include <string.h>

enum { HALF_BLOCK = 512 }; /* 16-bit floats widened this many at a time (2 KiB a block) */

size_t drt_dtype_size(drt_dtype_t t)
{
    static const size_t sizes[] = {[DRT_FLOAT32] = 4, [DRT_FLOAT64] = 8, [DRT_BFLOAT16] = 2,
                                   [DRT_FLOAT16] = 2, [DRT_INT32] = 4, [DRT_INT64] = 8};
    return (unsigned)t < sizeof(sizes) / sizeof(sizes[0]) ? sizes[t] : 0;
}

/* The loops are written for the vectoriser (restrict, one operation per
 * loop); reduce.c is compiled with -ftree-vectorize (Makefile.am), which
 * GCC's -O2 leaves out and which makes them several times faster. */
#define REDUCE_LOOP(dst, x, y)                                                      \
    do {                                                                            \
        switch (op) {                                                               \
        case DRT_MIN:                                                               \
            for (size_t i = 0; i < count; i++)                                      \
                dst[i] = y[i] < x[i] ? y[i] : x[i];                                 \
            break;                                                                  \
        case DRT_MAX:                                                               \
            for (size_t i = 0; i < count; i++)                                      \
                dst[i] = y[i] > x[i] ? y[i] : x[i];                                 \
            break;                                                                  \
        default: /* sum; avg divides at the end */                                  \
            for (size_t i = 0; i < count; i++)                                      \
                dst[i] = x[i] + y[i];                                               \
        }                                                                           \
    } while (0)

#define REDUCE_IN_PLACE(T)                                                          \
    do {                                                                            \
        T *restrict a = acc;                                                        \
        const T *restrict b = in;                                                   \
        REDUCE_LOOP(a, a, b);                                                       \
    } while (0)

static int is_half(drt_dtype_t t)
{
    return t == DRT_BFLOAT16 || t == DRT_FLOAT16;
}

/* out = x (op) y for 16-bit floats, a block at a time through float32 on
 * the stack (out may be x: each block is read before it is written). */
static void reduce_half(void *out, const void *x, const void *y, size_t count, drt_dtype_t t,
                        drt_op_t op)
{
    float a[HALF_BLOCK], b[HALF_BLOCK];

    for (size_t i = 0; i < count; i += HALF_BLOCK) {
        size_t k = count - i < HALF_BLOCK ? count - i : HALF_BLOCK;
        rt_to_f32(a, (const unsigned char *)x + 2 * i, k, t);
        rt_to_f32(b, (const unsigned char *)y + 2 * i, k, t);
        rt_reduce(a, b, k, DRT_FLOAT32, op);
        rt_from_f32((unsigned char *)out + 2 * i, a, k, t);
    }
}

/* acc[i] = acc[i] (op) in[i] */
void rt_reduce(void *acc, const void *in, size_t count, drt_dtype_t t, drt_op_t op)
{
    if (is_half(t)) {
        reduce_half(acc, acc, in, count, t, op);
        return;
    }
    switch (t) {
    case DRT_FLOAT64: REDUCE_IN_PLACE(double); break;
    case DRT_INT32: REDUCE_IN_PLACE(int32_t); break;
    case DRT_INT64: REDUCE_IN_PLACE(int64_t); break;
    default: REDUCE_IN_PLACE(float); break;
    }
}

#define REDUCE_OUT(T)                                                               \
    do {                                                                            \
        T *restrict o = out;                                                        \
        const T *restrict a = x, *restrict b = y;                                   \
        REDUCE_LOOP(o, a, b);                                                       \
    } while (0)

/* out[i] = x[i] (op) y[i], none overlapping: out of place, one pass instead
 * of a copy and a reduction. */
void rt_reduce_to(void *out, const void *x, const void *y, size_t count, drt_dtype_t t,
                  drt_op_t op)
{
    if (is_half(t)) {
        reduce_half(out, x, y, count, t, op);
        return;
    }
    switch (t) {
    case DRT_FLOAT64: REDUCE_OUT(double); break;
    case DRT_INT32: REDUCE_OUT(int32_t); break;
    case DRT_INT64: REDUCE_OUT(int64_t); break;
    default: REDUCE_OUT(float); break;
    }
}

void rt_scale_avg(void *buf, size_t count, drt_dtype_t t, int n)
{
    float a[HALF_BLOCK];

    if (is_half(t)) {
        for (size_t i = 0; i < count; i += HALF_BLOCK) {
            size_t k = count - i < HALF_BLOCK ? count - i : HALF_BLOCK;
            rt_to_f32(a, (unsigned char *)buf + 2 * i, k, t);
            rt_scale_avg(a, k, DRT_FLOAT32, n);
            rt_from_f32((unsigned char *)buf + 2 * i, a, k, t);
        }
        return;
    }
    switch (t) {
    case DRT_FLOAT64:
        for (size_t i = 0; i < count; i++)
            ((double *)buf)[i] /= n;
        break;
    case DRT_INT32:
        for (size_t i = 0; i < count; i++)
            ((int32_t *)buf)[i] /= n;
        break;
    case DRT_INT64:
        for (size_t i = 0; i < count; i++)
            ((int64_t *)buf)[i] /= n;
        break;
    default:
        for (size_t i = 0; i < count; i++)
            ((float *)buf)[i] /= (float)n;
    }
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static uint16_t to_bf16(float f)
{
    uint32_t u = f32_bits(f);

    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN stays NaN */
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static float from_f16(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;

    if (e == 0 && m == 0)
        return bits_f32(s);
    if (e == 0) { /* subnormal: normalise */
        e = 127 - 15 + 1;
        while (!(m & 0x400)) {
            m <<= 1;
            e--;
        }
        return bits_f32(s | (e << 23) | ((m & 0x3ff) << 13));
    }
    if (e == 31)
        return bits_f32(s | 0x7f800000u | (m << 13));
    return bits_f32(s | ((e + 127 - 15) << 23) | (m << 13));
}

static uint16_t round_shift(uint32_t m, unsigned shift)
{
    uint32_t v = m >> shift, rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);

    return (uint16_t)(v + (rem > mid || (rem == mid && (v & 1))));
}

static uint16_t to_f16(float f)
{
    uint32_t u = f32_bits(f), s = (u >> 16) & 0x8000, m = u & 0x7fffff;
    int e = (int)((u >> 23) & 0xff) - 127 + 15;

    if (((u >> 23) & 0xff) == 0xff)
        return (uint16_t)(s | 0x7c00 | (m ? 0x200 : 0));
    if (e >= 31)
        return (uint16_t)(s | 0x7c00); /* overflow: infinity */
    if (e <= 0) {
        if (e < -10)
            return (uint16_t)s;
        return (uint16_t)(s | round_shift(m | 0x800000, (unsigned)(14 - e)));
    }
    /* a carry out of the mantissa correctly bumps the exponent */
    return (uint16_t)(s | (((uint32_t)e << 10) + round_shift(m, 13)));
}

/* User buffers may have any alignment: 16-bit values move through memcpy. */
void rt_to_f32(float *out, const void *in, size_t count, drt_dtype_t t)
{
    const unsigned char *p = in;

    for (size_t i = 0; i < count; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, sizeof(h));
        out[i] = t == DRT_BFLOAT16 ? bits_f32((uint32_t)h << 16) : from_f16(h);
    }
}

void rt_from_f32(void *out, const float *in, size_t count, drt_dtype_t t)
{
    unsigned char *p = out;

    for (size_t i = 0; i < count; i++) {
        uint16_t h = t == DRT_BFLOAT16 ? to_bf16(in[i]) : to_f16(in[i]);
        memcpy(p + 2 * i, &h, sizeof(h));
    }
}
