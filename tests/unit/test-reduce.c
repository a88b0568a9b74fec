/* SPDX-License-Identifier: Apache-2.0 */
/* The reductions of 16-bit floats (runtime/cpu/reduce.c): they travel as
 * 16 bits, and each step widens both operands, combines them in float32 and
 * rounds once to nearest even. Checked against a rounding written here
 * another way (the nearest of the two neighbouring 16-bit values), over
 * counts that end inside a block and buffers at odd addresses. */
#include "internal.h"
#include "tap.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static float widen_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;

    memcpy(&f, &u, sizeof(f));
    return f;
}

/* The bfloat16 nearest to f (ties to the even one), f finite. */
static uint16_t nearest_bf16(float f)
{
    uint32_t u;

    memcpy(&u, &f, sizeof(u));
    uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    double dl = fabs((double)f - widen_bf16(lo)), dh = fabs((double)f - widen_bf16(hi));
    return dl < dh || (dl == dh && !(lo & 1)) ? lo : hi;
}

static uint16_t get16(const unsigned char *p, size_t i)
{
    uint16_t h;

    memcpy(&h, p + 2 * i, sizeof(h));
    return h;
}

static void put16(unsigned char *p, size_t i, uint16_t h)
{
    memcpy(p + 2 * i, &h, sizeof(h));
}

/* count bfloat16 sums, out of place and in place, at an odd address: how
 * many differ from the reference */
static size_t bf16_sum_errors(size_t count)
{
    unsigned char *mem = malloc(3 * (2 * count + 1)), *x = mem + 1, *y = x + 2 * count + 1,
                  *out = y + 2 * count + 1;
    size_t bad = 0;

    srand(7);
    for (size_t i = 0; i < count; i++) {
        put16(x, i, nearest_bf16((float)(rand() - RAND_MAX / 2) / 1e5f));
        put16(y, i, nearest_bf16((float)(rand() - RAND_MAX / 2) / 3e4f));
    }
    rt_reduce_to(out, x, y, count, DRT_BFLOAT16, DRT_SUM);
    for (size_t i = 0; i < count; i++)
        bad += get16(out, i) != nearest_bf16(widen_bf16(get16(x, i)) + widen_bf16(get16(y, i)));
    rt_reduce(x, y, count, DRT_BFLOAT16, DRT_SUM);
    bad += memcmp(x, out, 2 * count) != 0;
    free(mem);
    return bad;
}

int main(void)
{
    uint16_t a[3], b[3], nan = 0x7fc0, inf = 0x7f80;

    size_t bad = bf16_sum_errors(1);

    ok(bad == 0, "bfloat16 sum of 1 element, odd address: rounded to nearest even (%zu wrong)", bad);
    bad = bf16_sum_errors(1500);
    ok(bad == 0, "... of 1500 (blocks of 512, the last partial): %zu of 1501 checks wrong", bad);
    /* float16: 1.5 + 0.25 = 1.75 exactly; 2048 + 1 rounds to even (2048) */
    a[0] = 0x3e00, b[0] = 0x3400, a[1] = 0x6800, b[1] = 0x3c00, a[2] = 0x3c00, b[2] = 0x4000;
    rt_reduce(a, b, 3, DRT_FLOAT16, DRT_SUM);
    ok(a[0] == 0x3f00 && a[1] == 0x6800 && a[2] == 0x4200,
       "float16 sums 1.5+0.25, 2048+1, 1+2: %04x %04x %04x (want 3f00 6800 4200)", a[0], a[1], a[2]);
    a[0] = nan, b[0] = 0x3f80, a[1] = inf, b[1] = 0x3f80, a[2] = 0x4040, b[2] = 0xbf80;
    rt_reduce(a, b, 3, DRT_BFLOAT16, DRT_SUM);
    ok((a[0] & 0x7fff) > 0x7f80 && a[1] == inf && a[2] == 0x4000,
       "bfloat16 NaN+1 stays NaN, inf+1 inf, 3-1 = 2: %04x %04x %04x", a[0], a[1], a[2]);
    a[0] = 0x4040, b[0] = 0x3f80, a[1] = 0xbf80, b[1] = 0x4000;
    rt_reduce(a, b, 2, DRT_BFLOAT16, DRT_MAX);
    ok(a[0] == 0x4040 && a[1] == 0x4000, "bfloat16 max(3, 1), max(-1, 2): %04x %04x", a[0], a[1]);
    a[0] = 0x4040, a[1] = 0x3f80;
    rt_scale_avg(a, 2, DRT_BFLOAT16, 2);
    ok(a[0] == 0x3fc0 && a[1] == 0x3f00, "bfloat16 average of 2: 3/2, 1/2: %04x %04x", a[0], a[1]);
    printf("1..%d\n", tap_n);
    return tap_failed != 0;
}
