/* SPDX-License-Identifier: Apache-2.0 */
/* Internal interface of ddp_topo_jobmap.so (hidden by the same linker
 * version script as ddp_topo.so). ddp_topo_jobmap.c, the SPANK entry
 * points, calls jobmap.c; jobmap.c calls only the shared parsers
 * (libspankparse). */
#ifndef DDP_TOPO_JOBMAP_H
#define DDP_TOPO_JOBMAP_H

#include <stddef.h>

/* dcgm-exporter's job mapping in dir, as root: add job to the files of
 * gpus (SLURM_JOB_GPUS), or drop it from every file; -1 with err set */
int jobmap_add(const char *dir, const char *job, const char *gpus, char *err, size_t errlen);
int jobmap_drop(const char *dir, const char *job, char *err, size_t errlen);

#endif
