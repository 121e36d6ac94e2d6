#!/usr/bin/env bash
# A real single-machine Slurm cluster (Debian's slurm-wlm: slurmctld + one slurmd per node name, all
# on this host) for CI and for trying `driver run --run local-slurm` on a laptop. Idempotent; run as root.
# $VERIGYM_SLURM_NODES node names (default 3: vg1 vg2 vg3), so multi-node jobs (srun per node, Ray
# workers, a fleet node) run for real; each node offers this machine's CPUs and memory.
# Prints the line to export (client commands find the cluster through SLURM_CONF).
#   eval "$(bash scripts/ci_slurm.sh)"     # -> export SLURM_CONF=/tmp/verigym-slurm/slurm.conf
#   bash scripts/ci_slurm.sh --stop         # stop the daemons this script started
#
# No munge and no cgroups, so it runs in a plain container: AuthType=auth/none, CredType=cred/none,
# ProctrackType=proctrack/linuxproc, TaskPlugin=task/none. That is fine for one trusted machine and
# wrong for a shared cluster. State, spool, logs and pid files live in $VERIGYM_SLURM_DIR.
set -euo pipefail

DIR=${VERIGYM_SLURM_DIR:-/tmp/verigym-slurm}
CONF=$DIR/slurm.conf
CTL_PORT=${VERIGYM_SLURMCTLD_PORT:-16817}
SLURMD_PORT=${VERIGYM_SLURMD_PORT:-16820}   # node i listens on SLURMD_PORT + i
NODES=${VERIGYM_SLURM_NODES:-3}

stop_daemon() {  # only the daemons whose pid files this script wrote; waits until each has exited
  local pidfile=$1 pid
  if [[ -f $pidfile ]] && pid=$(cat "$pidfile") && kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    # a daemon still exiting would delete the pid file of its successor: wait for it
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$pidfile"
}

stop_all() {
  local f
  for f in "$DIR"/slurmd*.pid; do [[ -e $f ]] && stop_daemon "$f"; done
  stop_daemon "$DIR/slurmctld.pid"
}

if [[ "${1:-}" == "--stop" ]]; then
  stop_all
  exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null; then
  if [ "$(id -u)" != 0 ]; then
    echo "slurm-wlm is not installed (as root: apt-get install slurm-wlm)" >&2
    exit 2
  fi
  echo "ci_slurm: installing slurm-wlm" >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm >/dev/null
fi

export SLURM_CONF=$CONF
# up: the controller answers and all NODES nodes are usable
up() {
  local i
  for i in $(seq "$NODES"); do  # slurmctld may still list a dead slurmd as idle for minutes
    [[ -f $DIR/slurmd-vg$i.pid ]] && kill -0 "$(cat "$DIR/slurmd-vg$i.pid")" 2>/dev/null || return 1
  done
  scontrol ping 2>/dev/null | grep -q "UP" || return 1
  [[ $(sinfo -h -N -o "%N %T" 2>/dev/null | grep -cE " (idle|mixed|allocated)") == "$NODES" ]]
}

if [[ -f $CONF ]] && up; then
  echo "export SLURM_CONF=$CONF"
  exit 0
fi

mkdir -p "$DIR/state" "$DIR/log"
# slurmd -C describes this host (CPUs, sockets, memory) in slurm.conf's own syntax.
NODE_LINE=$(slurmd -C | head -1)
HOST=$(sed -E 's/^NodeName=([^ ]+).*/\1/' <<<"$NODE_LINE")
HARDWARE=$(sed -E 's/^NodeName=[^ ]+ //' <<<"$NODE_LINE")
cat >"$CONF" <<CONF
# written by verigym scripts/ci_slurm.sh: one-host cluster for tests (no munge, no cgroups)
ClusterName=verigym
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTL_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
# finished jobs stay visible to 'scontrol show job' for 10 minutes (the attached mode reads the exit code there)
MinJobAge=600
KillWait=30
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool-%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
CONF
for i in $(seq "$NODES"); do
  echo "NodeName=vg$i NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$((SLURMD_PORT + i)) $HARDWARE State=UNKNOWN" >>"$CONF"
done
echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >>"$CONF"

stop_all
# -c: start clean (no jobs from an earlier run of this script); the daemons detach and write pid files.
slurmctld -c -f "$CONF"
for i in $(seq "$NODES"); do
  mkdir -p "$DIR/spool-vg$i"
  slurmd -N "vg$i" -f "$CONF"
done
for _ in $(seq 150); do
  up && break
  sleep 0.2
done
if ! up; then
  echo "slurm did not come up; logs in $DIR/log" >&2
  tail -20 "$DIR"/log/*.log >&2 || true
  exit 1
fi
echo "export SLURM_CONF=$CONF"
