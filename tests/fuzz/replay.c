/* SPDX-License-Identifier: Apache-2.0 */
/* main() for the fuzz targets outside a libFuzzer build: run each input file
 * named on the command line once, as `FUZZER FILE...` does. This is how
 * `make check` (GCC, ASan+UBSan, valgrind) replays the committed corpora. */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int replay(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *data = NULL;
    size_t size = 0, cap = 0, got;

    if (!f) {
        perror(path);
        return -1;
    }
    do {
        if (size == cap && !(data = realloc(data, cap = cap * 2 + 4096)))
            fuzz_fail("out of memory reading %s", path);
        size += got = fread(data + size, 1, cap - size, f);
    } while (got > 0);
    fclose(f);
    /* a copy of exactly `size` bytes, so ASan sees reads past the input */
    uint8_t *exact = malloc(size ? size : 1);
    if (!exact)
        fuzz_fail("out of memory reading %s", path);
    memcpy(exact, data, size);
    free(data);
    LLVMFuzzerTestOneInput(exact, size);
    free(exact);
    return 0;
}

int main(int argc, char **argv)
{
    int rc = 0;

    for (int i = 1; i < argc; i++)
        rc |= replay(argv[i]) < 0;
    return rc;
}
