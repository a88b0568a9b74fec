/* Internal interface between the SPANK dispatch file and the per-context
 * files of ddp_topo.so. Not installed; everything here is hidden by the
 * linker version script. */
#ifndef DDP_TOPO_PLUGIN_H
#define DDP_TOPO_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <slurm/spank.h>

#define DDP_ERRLEN 400

typedef enum { DDP_MODE_OFF, DDP_MODE_ENV, DDP_MODE_AUTO } ddp_mode_t;

/* What a user asked for with --ddp-topo[=MODE[,FLAG...]] or DDP_TOPO. */
typedef struct {
    bool given;
    ddp_mode_t mode;
    bool verbose;
} ddp_request_t;

/* The admin's plugstack.conf arguments. */
typedef struct {
    ddp_mode_t default_mode;
    uint16_t port_lo, port_hi;
} ddp_config_t;

/* config.c */
int ddp_request_parse(const char *value, ddp_request_t *req, char *err, size_t errlen);
int ddp_config_parse(int ac, char **av, ddp_config_t *cfg, char *err, size_t errlen);
const char *ddp_mode_name(ddp_mode_t mode);

/* ddp_topo.c: the option as registered, state shared by the contexts */
extern ddp_request_t ddp_request;     /* from the --ddp-topo option callback */
extern char ddp_request_error[DDP_ERRLEN]; /* a bad value seen remotely */

/* local.c: srun, sbatch, salloc */
int ddp_local_init(int ac, char **av);

/* remote.c: slurmstepd */
int ddp_remote_init(int ac, char **av);
int ddp_remote_user_init(spank_t sp);
int ddp_remote_task_init(spank_t sp);

#endif
