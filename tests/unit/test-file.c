/* SPDX-License-Identifier: Apache-2.0 */
/* dt_read_file: whole regular files only, never blocking, never cut. */
#include "ddptopo.h"
#include "tap.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static void refused(const char *path, size_t max, const char *why)
{
    dt_error_t err = {.code = DT_OK};
    char *data = (char *)"untouched";
    size_t len = 99;

    ok(dt_read_file(path, max, &data, &len, &err) < 0 && !data && len == 0 &&
       strstr(err.text, why), "'%s' refused: %s", path, err.text);
}

int main(void)
{
    char dir[] = "/tmp/ddp-test-file.XXXXXX", path[64], fifo[64];
    dt_error_t err = {.code = DT_OK};
    char *data;
    size_t len;
    FILE *f;

    if (!mkdtemp(dir))
        return 1;
    snprintf(path, sizeof(path), "%s/f", dir);
    snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
    if (!(f = fopen(path, "w")))
        return 1;
    fputs("<topology>\nline two\n", f);
    fclose(f);
    ok(dt_read_file(path, 64, &data, &len, &err) == 0 && len == 20 && !strcmp(data, "<topology>\nline two\n"),
       "a regular file is read whole and NUL-terminated");
    free(data);
    refused(path, 19, "is 20 bytes, over the limit of 19 bytes");
    ok(dt_read_file(path, 20, &data, &len, &err) == 0 && len == 20, "a file of exactly the limit is read");
    free(data);
    ok(mkfifo(fifo, 0600) == 0, "mkfifo");
    refused(fifo, 64, "is not a regular file (a FIFO)"); /* would block without O_NONBLOCK */
    refused("/dev/zero", 64, "is not a regular file (a device)");
    refused(dir, 64, "is not a regular file (a directory)");
    snprintf(path, sizeof(path), "%s/missing", dir);
    refused(path, 64, "No such file or directory");
    unlink(fifo);
    snprintf(path, sizeof(path), "%s/f", dir);
    unlink(path);
    rmdir(dir);
    printf("1..%d\n", tap_n);
    return tap_failed != 0;
}
