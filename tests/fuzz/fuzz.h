/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by the fuzz targets (tests/fuzz/README.md). Each target defines
 * LLVMFuzzerTestOneInput; libFuzzer provides main() in a clang
 * --enable-fuzz build, replay.c does in every other build. */
#ifndef DDP_FUZZ_H
#define DDP_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input as a NUL-terminated string (malloc'd; stops at an embedded NUL,
 * as the C string interfaces under test would). Aborts on ENOMEM. */
char *fuzz_cstring(const uint8_t *data, size_t size);

/* Write the input to this process's scratch file and return its path, for
 * parsers that only read files. The file is removed at exit. */
const char *fuzz_file(const uint8_t *data, size_t size);

/* Split a copy of the input at newlines into a NULL-terminated vector, for
 * argv-style interfaces; free with fuzz_lines_free. */
char **fuzz_lines(const uint8_t *data, size_t size, int *count);
void fuzz_lines_free(char **lines);

/* Stop with a message: an invariant broke (the input is the reproducer). */
void fuzz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
