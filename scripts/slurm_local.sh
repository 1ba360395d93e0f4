#!/usr/bin/env bash
# A private one-node Slurm cluster for tests: slurmctld + slurmd from Debian's packages, with
# their own config, state, spool, logs and ports under DIR, so they do not touch /etc/slurm or
# another user's cluster.
#
#   scripts/slurm_local.sh start DIR [CPUS]   writes DIR/slurm.conf, starts both daemons, waits
#                                             (bounded) until the node is idle; prints the line
#                                             `export SLURM_CONF=DIR/slurm.conf`
#   scripts/slurm_local.sh stop DIR           stops the daemons started in DIR (by their pid files)
#
# The node is this host (`hostname -s`) with CPUS CPUs (default 4; the node may claim more CPUs
# than the machine has: SlurmdParameters=config_overrides). Authentication is auth/none, which
# needs no munge daemon: fine for a private single-host cluster, never for a real one.
# Must run as root (slurmd starts job steps as the submitting user). Exit codes: 0 ok,
# 77 this machine cannot run Slurm (missing packages or not root), 1 the daemons failed to start
# (their logs are printed).
set -euo pipefail

usage() { echo "usage: $0 start DIR [CPUS] | stop DIR" >&2; exit 2; }
[ $# -ge 2 ] || usage
action=$1
dir=$(realpath -m "$2")
cpus=${3:-4}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

stop() {
  local pidfile pid
  for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid"; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
    fi
    rm -f "$pidfile"
  done
}

print_logs() {
  local log
  for log in "$dir/slurmctld.log" "$dir/slurmd.log"; do
    [ -f "$log" ] && { echo "--- $log (last 30 lines)" >&2; tail -n 30 "$log" >&2; }
  done
}

start() {
  for tool in slurmctld slurmd sinfo srun sbatch; do
    command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || {
      echo "slurm_local: $tool is not installed (apt-get install slurmctld slurmd slurm-client)" >&2; exit 77; }
  done
  [ "$(id -u)" = 0 ] || { echo "slurm_local: slurmd must run as root" >&2; exit 77; }
  local node ctld_port slurmd_port
  node=$(hostname -s)
  ctld_port=$(free_port)
  slurmd_port=$(free_port)
  mkdir -p "$dir/state" "$dir/spool"
  cat > "$dir/slurm.conf" <<EOF
# Written by scripts/slurm_local.sh: a private one-node test cluster.
ClusterName=hvdtest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
  export SLURM_CONF="$dir/slurm.conf"
  # -i: ignore saved state from an earlier run in the same DIR.
  if ! slurmctld -i -f "$SLURM_CONF" || ! slurmd -f "$SLURM_CONF"; then
    print_logs; stop; exit 1
  fi
  local state=""
  for _ in $(seq 150); do
    state=$(sinfo -h -N -n "$node" -o '%t' 2>/dev/null || true)
    [ "$state" = idle ] && break
    sleep 0.2
  done
  if [ "$state" != idle ]; then
    echo "slurm_local: node $node did not become idle in 30 s (state '${state:-unknown}')" >&2
    print_logs; stop; exit 1
  fi
  echo "export SLURM_CONF=$SLURM_CONF"
}

case $action in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
