/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-train's files (--metrics, --dump-weights, --plot's input and -o,
 * --compare's dumps) often sit in a directory others can write: a shared
 * project space, /tmp. Each is opened once, O_NONBLOCK so a FIFO cannot
 * block the run, then checked on that descriptor (fstat), never by a second
 * look-up of its name that someone could swap. */
#ifndef DDP_TRAIN_FILES_H
#define DDP_TRAIN_FILES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* An output: a new file, or an existing regular one continued (append) or
 * emptied. A final symbolic link is refused, not followed (one planted
 * there would have us overwrite its target), and so is anything but a
 * regular file (a FIFO, a device, a directory). NULL with "why (what to
 * do)" in err, nothing created or emptied. */
FILE *train_output_open(const char *name, int append, char *err, size_t errlen);

/* An input: a regular file of at most max bytes (its size in *size unless
 * size is NULL), read through symbolic links. NULL with why in err. */
FILE *train_input_open(const char *name, uint64_t max, uint64_t *size, char *err, size_t errlen);

#endif
