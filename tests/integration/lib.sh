# SPDX-License-Identifier: Apache-2.0
# Shared by the integration tests: TAP output and a real local SLURM cluster.
# Source it, call `cluster_up [cluster args]`, then run srun/sbatch for real.

tap_n=0
tap_failed=0

ok() { # ok CONDITION-EXIT-STATUS DESCRIPTION
    local rc=$1; shift
    tap_n=$((tap_n + 1))
    if [ "$rc" = 0 ]; then echo "ok $tap_n - $*"
    else echo "not ok $tap_n - $*"; tap_failed=$((tap_failed + 1)); return 1; fi
}

is() { # is GOT WANT DESCRIPTION; returns 1 when they differ, to show more
    local got=$1 want=$2; shift 2
    [ "$got" = "$want" ]; ok $? "$*"
    [ "$got" = "$want" ] && return 0
    echo "#   got:  '$got'"
    echo "#   want: '$want'"
    return 1
}

contains() { # contains TEXT NEEDLE DESCRIPTION
    local text=$1 needle=$2; shift 2
    case $text in *"$needle"*) ok 0 "$*" ;;
    *) ok 1 "$*"; printf '%s\n' "#   no '$needle' in:" "$text" | sed 's/^/#   /' ;; esac
}

skip() { # skip WHY: a test that cannot run here, counted as passed
    tap_n=$((tap_n + 1))
    echo "ok $tap_n # SKIP $*"
}

is_rc() { # is_rc RC WANT OUTPUT DESCRIPTION: an exit status; the output when it differs
    local rc=$1 want=$2 out=$3; shift 3
    is "$rc" "$want" "$*"
    [ "$rc" = "$want" ] || printf '%s\n' "$out" | tail -n 40 | sed 's/^/#   /'
}

# Wait for an event, never a fixed time: poll COMMAND until it succeeds or
# SECS pass (generous: a loaded CI machine is slow). 1 on timeout; the
# caller's assertion prints what it saw.
wait_until() { # wait_until SECS COMMAND...
    local deadline=$((SECONDS + $1)); shift
    until "$@"; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}

done_testing() {
    echo "1..$tap_n"
    [ "$tap_failed" = 0 ]
}

# Without root or SLURM the cluster cannot start: CI must fail then; a
# developer's machine may skip, saying why.
cluster_unavailable() {
    if [ "${CI:-}" = true ]; then
        echo "Bail out! cannot start the test cluster: $*"
        exit 1
    fi
    echo "1..0 # SKIP cannot start the test cluster: $*"
    exit 0
}

cluster_up() {
    [ "$(id -u)" = 0 ] || cluster_unavailable "needs root"
    command -v slurmctld >/dev/null || cluster_unavailable "slurmctld is not installed"
    [ -r "$DDP_TOPO_PLUGIN" ] || cluster_unavailable "plugin $DDP_TOPO_PLUGIN not built"
    # one cluster at a time on this machine: its ports and node names are fixed
    exec 9>/tmp/ddp-topo-cluster.lock
    flock 9
    CLUSTER_DIR=$(mktemp -d /tmp/ddp-topo-test.XXXXXX)
    trap 'cluster_down' EXIT
    if ! "$top_srcdir/tests/cluster/cluster" up --dir "$CLUSTER_DIR" "$@" > "$CLUSTER_DIR.up" 2>&1; then
        sed 's/^/# /' "$CLUSTER_DIR.up"
        echo "Bail out! the test cluster did not come up"
        exit 1
    fi
    . "$CLUSTER_DIR/env"
    cd "$CLUSTER_DIR" || exit 1
}

cluster_down() {
    cd /
    "$top_srcdir/tests/cluster/cluster" down --dir "$CLUSTER_DIR" >/dev/null 2>&1
    rm -rf "$CLUSTER_DIR" "$CLUSTER_DIR.up"
}

# Rewrite the plugstack.conf line; srun and slurmstepd re-read it per launch.
# The nodes share this machine: a topology file of another machine gets
# topology_match=no (as `cluster up` adds it) unless the line sets it.
plugstack() {
    local line="$*"
    case " $line " in
    *" topology_match="*) ;;
    *" topology=/"*) line="$line topology_match=no" ;;
    esac
    echo "$line" > "$CLUSTER_DIR/etc/plugstack.conf"
}

# SLURM 22.05's progress lines (info level: -Q silences them). srun and
# salloc print them on stderr only when a job or step has to wait, e.g. for
# the CPUs of a job still completing on a loaded machine, so a comparison of
# output holding them fails at random ("has been revoked" follows the
# relinquishing line now and then). Exactly these; errors and warnings stay.
SLURM_PROGRESS='^(srun|salloc): (job [0-9]+ queued and waiting for resources|job [0-9]+ has been allocated resources|Job [0-9]+ step creation (temporarily|still) disabled, retrying \(.*\)|Step created for (job [0-9]+|StepId=[0-9.]+)|Pending job allocation [0-9]+|Granted job allocation [0-9]+|Waiting for resource configuration|Nodes [^ ]+ are ready for job|Relinquishing job allocation [0-9]+|Job allocation [0-9]+ has been revoked\.)$'

# drop_progress COMMAND...: run it with SLURM's progress lines taken out of
# its stderr; its exit status. A pipeline, not >(...): it returns only once
# the filter has written everything, also when run in the background.
drop_progress() {
    { "$@" 2>&1 >&3 3>&- | sed -E "/$SLURM_PROGRESS/d" >&2 3>&-; return "${PIPESTATUS[0]}"; } 3>&1
}

# golden_models: stdin, a report, with its text table's GPU model column as
# this build can show it. Golden reports name GPUs by libpci from the pinned
# pci.ids excerpt tests/golden/pci.ids (DDP_TOPO_PCI_IDS); a build without
# libpci shows PCI ids there, so that column is left out of the comparison.
golden_models() {
    if grep -q '^#define HAVE_LIBPCI 1' "$top_builddir/config.h"; then
        cat
    else
        awk '/^  [0-9]+ /{ $0 = substr($0, 1, 27) "(model: built without libpci)" substr($0, 56) } 1'
    fi
}

# Submit a batch job and wait for it; 0 when it COMPLETED.
run_batch() {
    local id
    id=$(sbatch --parsable "$@") || return 1
    "$top_srcdir/tests/cluster/cluster" wait "$id" --dir "$CLUSTER_DIR" 2>&1 | sed 's/^/# /'
    return "${PIPESTATUS[0]}"
}

# node_pids NODE: every process of an emulated node (its slurmd, slurmstepd
# and tasks): its slurmd's UTS namespace, never ours. SIGKILL them all for a
# node that dies.
node_pids() {
    local ns p
    ns=$(readlink "/proc/$(cat "$CLUSTER_DIR/run/slurmd-$1.pid")/ns/uts") || return 1
    [ -n "$ns" ] && [ "$ns" != "$(readlink /proc/self/ns/uts)" ] || return 1
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/ns/uts" 2>/dev/null)" = "$ns" ] && echo "${p#/proc/}"
    done
}

job_state() { # job_state ID: PENDING, RUNNING, COMPLETED, ... or nothing once purged
    scontrol show job -o "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'
}

idle_nodes() {
    sinfo -h -N -o '%T' | grep -c '^idle$'
}

# idle_after N: the idle node count once N nodes are idle, or after 60 s
# (a node stays COMPLETING for a moment after its job; a drained one stays)
idle_after() {
    local deadline=$((SECONDS + 60))
    until [ "$(idle_nodes)" = "$1" ] || [ "$SECONDS" -ge "$deadline" ]; do sleep 0.2; done
    idle_nodes
}

# The variables a task reports, one line per task, sorted by SLURM_PROCID.
ENV_LINE='echo "$SLURM_PROCID $SLURM_NODEID $SLURM_LOCALID | ${RANK-unset} ${NODE_RANK-unset} ${GROUP_RANK-unset} ${LOCAL_RANK-unset} ${LOCAL_WORLD_SIZE-unset} ${WORLD_SIZE-unset} ${GROUP_WORLD_SIZE-unset} ${ROLE_RANK-unset} ${ROLE_WORLD_SIZE-unset} | ${MASTER_ADDR-unset} ${MASTER_PORT-unset} ${OMP_NUM_THREADS-unset} ${TORCHELASTIC_RESTART_COUNT-unset} | $(hostname) $SLURM_JOB_ID $SLURM_STEP_ID"'
