/* SPDX-License-Identifier: Apache-2.0 */
/* The task's program as SLURM passes it (S_JOB_ARGV): launchers that start
 * their own workers, and --ddp-topo values that a space made the program. */
#include "contract.h"
#include "plugin.h"
#include "tap.h"

#include <string.h>

#define ARGC(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *str(const char *s)
{
    return s ? s : "(none)";
}

static void launcher(int argc, char **argv, const char *want)
{
    is_str(str(contract_launcher_name(argc, argv)), str(want), "launcher of '%s' (%d words)",
           argv[0], argc);
}

static void word(const char *program, const char *want)
{
    char *argv[] = {(char *)program, (char *)"train.py"};

    is_str(str(ddp_mode_as_program(2, argv)), str(want), "program '%s' as a mode word", program);
}

int main(void)
{
    char *torchrun[] = {"/usr/local/bin/torchrun", "--nproc_per_node=2", "train.py"};
    char *pyrun[] = {"python3", "-u", "-m", "torch.distributed.run", "train.py"};
    char *pyjoined[] = {"/opt/venv/bin/python3.11", "-mtorch.distributed.launch", "train.py"};
    char *pyW[] = {"python", "-W", "-m", "train.py"}; /* -W takes "-m" as its argument */
    char *pyscript[] = {"python3", "train.py", "-m", "torch.distributed.run"};
    char *pyc[] = {"python3", "-c", "import x", "-m", "torch.distributed.run"};
    char *pyother[] = {"python3", "-m", "mypkg.train"};
    char *pyconfig[] = {"python3-config", "-m", "torch.distributed.run"};
    char *accel[] = {"accelerate", "launch", "train.py"};
    char *accelenv[] = {"accelerate", "env"};
    char *ds[] = {"deepspeed", "train.py"};
    char *plain[] = {"./train"};

    launcher(ARGC(torchrun), torchrun, "torchrun");
    launcher(ARGC(pyrun), pyrun, "python -m torch.distributed.run");
    launcher(ARGC(pyjoined), pyjoined, "python -m torch.distributed.launch");
    launcher(ARGC(pyW), pyW, NULL);
    launcher(ARGC(pyscript), pyscript, NULL);
    launcher(ARGC(pyc), pyc, NULL);
    launcher(ARGC(pyother), pyother, NULL);
    launcher(ARGC(pyconfig), pyconfig, NULL);
    launcher(ARGC(accel), accel, "accelerate launch");
    launcher(ARGC(accelenv), accelenv, NULL);
    launcher(ARGC(ds), ds, "deepspeed");
    launcher(ARGC(plain), plain, NULL);
    ok(contract_launcher_name(0, NULL) == NULL, "no program: no launcher");

    word("auto", "auto");
    word("off", "off");
    word("auto,verbose", "auto,verbose");
    word("env,share", "env,share");
    word("env", NULL); /* /usr/bin/env is a real program */
    word("autotrain", NULL);
    word("./auto", NULL);
    ok(ddp_mode_as_program(0, NULL) == NULL, "no program: no mode word");
    return tap_done();
}
