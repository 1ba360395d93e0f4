#!/usr/bin/env bash
# A private Slurm cluster for tests: slurmctld + slurmd from Debian's packages, with their own
# config, state, spool, logs and ports under DIR, so they touch neither /etc/slurm nor another
# user's cluster.
#
#   scripts/slurm_local.sh start DIR [CPUS] [NODES]   writes DIR/slurm.conf, starts the daemons,
#                                                     waits (bounded) until every node is idle,
#                                                     prints `export SLURM_CONF=DIR/slurm.conf`
#   scripts/slurm_local.sh stop DIR                   stops what `start DIR` started
#
# NODES=1 (default): one node, this host (`hostname -s`), slurmd on 127.0.0.1.
# NODES>1: nodes node1..nodeN, each a slurmd in its own network namespace (address 10.79.x.<i+1>
# on a bridge; slurmctld listens on the bridge's 10.79.x.1) and its own UTS namespace (host name
# node<i>), so tasks on different nodes see different host names and reach each other over TCP
# the way separate machines would. The file system is shared, like a cluster's shared one.
# Every node claims CPUS CPUs (default 4), more than the machine may have
# (SlurmdParameters=config_overrides). Authentication is auth/none, which needs no munge daemon:
# fine for a private cluster on one machine, never for a real one.
# Must run as root (slurmd starts job steps as the submitting user). Exit codes: 0 ok, 77 this
# machine cannot run it (missing packages, not root, no network namespaces), 1 the daemons failed
# to start (their logs are printed).
set -euo pipefail

usage() { echo "usage: $0 start DIR [CPUS] [NODES] | stop DIR" >&2; exit 2; }
[ $# -ge 2 ] || usage
action=$1
dir=$(realpath -m "$2")
cpus=${3:-4}
nodes=${4:-1}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'
}

kill_pidfile() {  # kill_pidfile FILE: TERM, then KILL after 5 s
  local pidfile=$1 pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$pidfile"
}

stop() {
  local pidfile ns pid
  for pidfile in "$dir"/slurmd-*.pid "$dir/slurmctld.pid"; do kill_pidfile "$pidfile"; done
  # The namespaces and the bridge of a multi-node cluster (names recorded by start).
  if [ -f "$dir/netns" ]; then
    while read -r ns; do
      for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
      ip netns del "$ns" 2>/dev/null || true
    done < "$dir/netns"
    rm -f "$dir/netns"
  fi
  if [ -f "$dir/bridge" ]; then
    ip link del "$(cat "$dir/bridge")" 2>/dev/null || true
    rm -f "$dir/bridge"
  fi
}

print_logs() {
  local log
  for log in "$dir"/*.log; do
    [ -f "$log" ] && { echo "--- $log (last 30 lines)" >&2; tail -n 30 "$log" >&2; }
  done
}

fail_start() { echo "slurm_local: $*" >&2; print_logs; stop; exit 1; }

# Network namespaces slurm<id>n<i> on bridge slb<id>, 10.79.<x>.0/24. Sets ctld_addr, node_addrs.
make_namespaces() {
  command -v ip >/dev/null || { echo "slurm_local: ip (iproute2) is not installed" >&2; exit 77; }
  if ! command -v unshare >/dev/null || ! command -v nsenter >/dev/null; then
    echo "slurm_local: unshare/nsenter (util-linux) are not installed" >&2; exit 77
  fi
  local id net="" n i ns
  id=$(printf '%s' "$dir" | md5sum | cut -c1-6)
  for n in $(seq 0 250 | shuf -n 30); do
    if ! ip -4 addr show | grep -q "inet 10\.79\.$n\."; then net=10.79.$n; break; fi
  done
  [ -n "$net" ] || { echo "slurm_local: no free 10.79.x.0/24 subnet" >&2; exit 77; }
  : > "$dir/netns"
  echo "slb$id" > "$dir/bridge"
  ip link add "slb$id" type bridge 2>/dev/null || { echo "slurm_local: cannot create a bridge" >&2; stop; exit 77; }
  ip addr add "$net.1/24" dev "slb$id"
  ip link set "slb$id" up
  ctld_addr=$net.1
  node_addrs=()
  for i in $(seq 1 "$nodes"); do
    ns=slurm${id}n$i
    ip netns add "$ns" 2>/dev/null || { echo "slurm_local: cannot create network namespaces" >&2; stop; exit 77; }
    echo "$ns" >> "$dir/netns"
    ip link add "slv$id$i" type veth peer name "slp$id$i"
    ip link set "slp$id$i" netns "$ns"
    ip link set "slv$id$i" master "slb$id" up
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" ip addr add "$net.$((i + 1))/24" dev "slp$id$i"
    ip netns exec "$ns" ip link set "slp$id$i" up
    node_addrs+=("$net.$((i + 1))")
  done
}

start() {
  for tool in slurmctld slurmd sinfo srun sbatch; do
    command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || {
      echo "slurm_local: $tool is not installed (apt-get install slurmctld slurmd slurm-client)" >&2; exit 77; }
  done
  [ "$(id -u)" = 0 ] || { echo "slurm_local: slurmd must run as root" >&2; exit 77; }
  mkdir -p "$dir/state"
  local ctld_addr=127.0.0.1 node_names=() node_addrs=() i
  if [ "$nodes" = 1 ]; then
    node_names=("$(hostname -s)")
    node_addrs=(127.0.0.1)
  else
    make_namespaces
    for i in $(seq 1 "$nodes"); do node_names+=("node$i"); done
  fi
  local node_lines="" all_nodes
  for i in "${!node_names[@]}"; do
    node_lines+="NodeName=${node_names[i]} NodeAddr=${node_addrs[i]} CPUs=$cpus State=UNKNOWN"$'\n'
    mkdir -p "$dir/spool-${node_names[i]}"
  done
  all_nodes=$(IFS=,; echo "${node_names[*]}")
  cat > "$dir/slurm.conf" <<EOF
# Written by scripts/slurm_local.sh: a private test cluster.
ClusterName=hvdtest
SlurmctldHost=$(hostname -s)($ctld_addr)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
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
${node_lines}PartitionName=debug Nodes=$all_nodes Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
  export SLURM_CONF="$dir/slurm.conf"
  # -i: ignore saved state from an earlier run in the same DIR.
  slurmctld -i -f "$SLURM_CONF" || fail_start "slurmctld did not start"
  if [ "$nodes" = 1 ]; then
    slurmd -f "$SLURM_CONF" || fail_start "slurmd did not start"
  else
    # nsenter, not `ip netns exec`: the latter remounts /sys, and slurmd needs /sys/fs/cgroup.
    # shellcheck disable=SC2016  # $1 and $2 are the inner shell's arguments
    while read -r ns; do
      i=${ns##*n}
      nsenter --net="/run/netns/$ns" unshare --uts \
        sh -c 'hostname "$1" && exec slurmd -N "$1" -f "$2"' slurmd "node$i" "$SLURM_CONF" \
        || fail_start "slurmd node$i did not start"
    done < "$dir/netns"
  fi
  local states=""
  for _ in $(seq 150); do
    states=$(sinfo -h -N -o '%t' 2>/dev/null | sort -u | tr '\n' ' ' || true)
    [ "$states" = "idle " ] && [ "$(sinfo -h -N -o '%N' 2>/dev/null | wc -l)" = "$nodes" ] && break
    sleep 0.2
  done
  [ "$states" = "idle " ] || fail_start "nodes $all_nodes did not become idle in 30 s (states: ${states:-none})"
  echo "export SLURM_CONF=$SLURM_CONF"
}

case $action in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
