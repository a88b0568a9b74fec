/* SPDX-License-Identifier: Apache-2.0 */
/* The checkpoint loader (runtime/train/ckpt.c) on the input as the one file of a
 * checkpoint directory, named for the step its header holds (step 1 when
 * it is too short to hold one), so a whole image loads: drt_ckpt_open,
 * drt_ckpt_load, drt_ckpt_section over every section (an absent name walks
 * them all), drt_ckpt_close. A loaded image must be of its name's step; a
 * skipped one must say so on stderr. */
#include "ddprt.h"
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[4096], file[4200];

static void dir_remove(void)
{
    char lock[4200];

    snprintf(lock, sizeof(lock), "%s/.ddprt-lock", dir);
    unlink(file);
    unlink(lock);
    rmdir(dir);
}

/* the scratch directory (in TMPDIR: `run` points it into the build dir) */
static void dir_make(void)
{
    const char *tmp = getenv("TMPDIR");

    if ((size_t)snprintf(dir, sizeof(dir), "%s/ddp-fuzz-ckpt.XXXXXX", tmp && *tmp ? tmp : "/tmp") >=
            sizeof(dir) || !mkdtemp(dir))
        fuzz_fail("mkdtemp %s failed", dir);
    atexit(dir_remove);
}

static uint64_t header_step(const uint8_t *data, size_t size)
{
    uint64_t step = 0;

    if (size < 20)
        return 1;
    for (int i = 7; i >= 0; i--)
        step = step << 8 | data[12 + i];
    return step;
}

static void put_file(const uint8_t *data, size_t size, uint64_t step)
{
    FILE *f;

    if (file[0])
        unlink(file);
    snprintf(file, sizeof(file), "%s/ckpt-%012llu.ddprt", dir, (unsigned long long)step);
    if (!(f = fopen(file, "wb")) || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        fuzz_fail("cannot write %s", file);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t want = header_step(data, size), step = 0;
    char *warn = NULL;
    size_t wlen = 0, len = 0;
    FILE *saved = stderr, *capture;
    drt_error_t err = {{0}};
    drt_ckpt_t *ck;
    int rc;

    if (!dir[0])
        dir_make();
    put_file(data, size, want);
    if (drt_ckpt_open(dir, NULL, 0, &ck, &err) < 0)
        fuzz_fail("drt_ckpt_open %s: %s", dir, err.text);
    /* the warnings, for the check below; fd 2 stays, for the sanitizers */
    if (!(capture = open_memstream(&warn, &wlen)))
        fuzz_fail("open_memstream failed");
    stderr = capture;
    rc = drt_ckpt_load(ck, &step, &err);
    stderr = saved;
    fclose(capture);
    if (rc == 1 && step != want)
        fuzz_fail("loaded step %llu from the file named for %llu", (unsigned long long)step,
                  (unsigned long long)want);
    if (rc == 1) { /* each walks the sections up to its name: an absent one, all */
        drt_ckpt_section(ck, "meta", &len);
        drt_ckpt_section(ck, "\x01 a name ddp-train never writes", &len);
    }
    if (rc == 0 && !strstr(warn, "skipped: "))
        fuzz_fail("the file was not loaded, and nothing said why");
    if (rc < 0 && !err.text[0])
        fuzz_fail("drt_ckpt_load failed without a message");
    free(warn);
    drt_ckpt_close(ck);
    return 0;
}
