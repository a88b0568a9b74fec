/* SPDX-License-Identifier: Apache-2.0 */
/* Minimal TAP producer for the unit tests (read by automake's tap-driver). */
#ifndef DDP_TAP_H
#define DDP_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int tap_n, tap_failed;

#define ok(cond, ...) tap_ok(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
#define is_str(got, want, ...) \
    tap_is_str((got), (want), __FILE__, __LINE__, __VA_ARGS__)

__attribute__((unused)) static void tap_vok(int pass, const char *file, int line, const char *fmt, va_list ap)
{
    printf("%sok %d - ", pass ? "" : "not ", ++tap_n);
    vprintf(fmt, ap);
    printf("\n");
    if (!pass) {
        printf("#   failed at %s:%d\n", file, line);
        tap_failed++;
    }
}

__attribute__((format(printf, 4, 5), unused))
static int tap_ok(int pass, const char *file, int line, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    tap_vok(pass, file, line, fmt, ap);
    va_end(ap);
    return pass;
}

__attribute__((format(printf, 5, 6), unused))
static int tap_is_str(const char *got, const char *want, const char *file, int line,
                      const char *fmt, ...)
{
    va_list ap;
    int pass = got && want && strcmp(got, want) == 0;

    va_start(ap, fmt);
    tap_vok(pass, file, line, fmt, ap);
    va_end(ap);
    if (!pass)
        printf("#   got '%s', want '%s'\n", got ? got : "(null)", want ? want : "(null)");
    return pass;
}

__attribute__((unused)) static int tap_done(void)
{
    printf("1..%d\n", tap_n);
    return tap_failed ? 1 : 0;
}

#endif
