/* SPDX-License-Identifier: Apache-2.0 */
/* ddp-train's side tools: dumping and comparing weights (compare.c) and
 * plotting the metrics (plot.c). */
#ifndef DDP_TRAIN_TOOLS_H
#define DDP_TRAIN_TOOLS_H

#include <stdint.h>
#include <stdio.h>

#include "model.h"

/* --dump-weights: append one record to f: u64 step, u64 n, then the n
 * float32 weights of all parameters in registration order (host byte
 * order). 0, or -1 with errno set when the write fails. */
int train_dump(FILE *f, uint64_t step, model_t *m);

/* --compare A B: walk the two dumps record by record; for each step the
 * relative error ||a - b||_2 / max(||b||_2, 1e-30) (in double). Prints a line
 * for each step above rtol and a summary "compare: N steps, max relative
 * error E (step S)" to out. Returns 0 when every step is within rtol, 1 when
 * one is not (or is NaN), 2 when the files do not match up (another step or
 * size at a record, one ends first, a truncated record, no records, or a
 * file cannot be read: a message naming the file and the record on stderr). */
int train_compare(const char *a, const char *b, double rtol, FILE *out);

/* --plot FILE.jsonl -o OUT.svg: read the --metrics lines (each an object
 * with at least "step", "step_ms", "compute_ms", "comm_ms" and
 * "exposed_ms", and "loss" in ddp-train's; lines without them are skipped
 * and counted on stderr) and draw loss per step (when any line has one)
 * and the times per step with gnuplot into svg. 0, or -1
 * with a message in err (no usable line, gnuplot missing or failing, a file
 * that cannot be read or written, a name with a quote or a newline). */
int train_plot(const char *jsonl, const char *svg, char *err, size_t errlen);

#endif
