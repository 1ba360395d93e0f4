#!/bin/bash
# MPI across hosts, on one machine: the two network-namespace "hosts" with sshd of
# launcher_ssh_netns.sh (which sets them up and runs this script inside, through NETNS_SHELL).
# Open MPI's `mpirun -H A:2,B:2` and MPICH's `mpiexec -hosts A:2,B:2` start 4 ranks over ssh;
# each rank runs tests/python/mpi_scripts/hosts_worker.py (allreduce, allgather) and reports its
# placement and namespace. Both with the default data plane (shm within a host, tcp across) and
# with HOROVOD_CPU_OPERATIONS=mpi (MPI's own collectives, checked by the engine's MPI counter).
# The namespaces share one kernel and hostname, so each rank is given its namespace's name as
# HOROVOD_HOSTNAME (on real hosts the hostnames differ by themselves).
#
# Usage: mpi_ssh_netns.sh [path/to/horovodrun]   (as launcher_ssh_netns.sh; needs root, netns,
#        sshd, an MPI and horovod.torch importable from this checkout)
# Exit: 0 pass, 1 fail, 77 skipped. Every mpirun is bounded by `timeout`.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)

if [ -z "${HOST_A:-}" ]; then
  NETNS_SHELL="$HERE/mpi_ssh_netns.sh" exec "$HERE/launcher_ssh_netns.sh" "$@"
fi

skip() { echo "SKIP: $*"; exit 77; }
FAILED=0
fail() { echo "FAIL: $*"; FAILED=$((FAILED + 1)); }
# The installed horovod, else this checkout's (with its built extension copied in).
PROBE='import torch, horovod.torch; from horovod import _core; assert _core.mpi_built()'
if ! python3 -c "$PROBE" 2>/dev/null; then
  export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
  python3 -c "$PROBE" 2>/dev/null || skip "horovod.torch with an MPI plugin is not importable"
fi
WORKER="$ROOT/tests/python/mpi_scripts/hosts_worker.py"
PY=$(command -v python3)

# ssh with the test's key, for the MPI launchers (they take an agent command, not ssh options).
cat > "$TMP/bin/ssh_id" <<EOS
#!/bin/sh
exec ssh -i $TMP/id "\$@"
EOS
chmod +x "$TMP/bin/ssh_id"
# Each rank: its namespace's name as its host name, then the worker. Open MPI's shared-memory
# segments are named after the host name, which the namespaces share (with /dev/shm): each
# namespace-host gets its own directory for them, as real hosts have their own /dev/shm.
# Open MPI's shared-memory segments, one directory per namespace "host" (the namespaces share
# /dev/shm, and Open MPI names its segments by hostname). On tmpfs: a segment backed by a disk file
# makes writeback stall whole rank processes for seconds on a busy machine, long enough for the
# liveness watch to name a rank as lost.
SHM=$(mktemp -d /dev/shm/ompi-netns.XXXXXX)
trap 'rm -rf "$SHM"' EXIT
cat > "$TMP/rank.sh" <<EOS
#!/bin/sh
ns=\$(ip netns identify)
mkdir -p $SHM/\$ns
OMPI_MCA_btl_vader_backing_directory=$SHM/\$ns HOROVOD_HOSTNAME=\$ns exec $PY $WORKER
EOS
chmod +x "$TMP/rank.sh"

check_ranks() {  # check_ranks <label> <data plane: default|mpi>
  local label=$1 plane=$2 line r ns lr cr count
  for r in 0 1 2 3; do
    ns=$([ $r -lt 2 ] && echo $NS_A || echo $NS_B)
    lr=$((r % 2))/2
    cr=$((r / 2))/2
    line=$(grep -a "^RANK $r " "$TMP/mpi_out" | head -1)
    case "$line" in
      "RANK $r size=4 local=$lr cross=$cr ns=$ns mpi_collectives="*) ;;
      *) fail "$label: rank $r reported '$line' (want local=$lr cross=$cr ns=$ns)"; continue ;;
    esac
    count=${line##*mpi_collectives=}
    if [ $plane = mpi ]; then
      [ "$count" -ge 3 ] || fail "$label: rank $r ran $count collectives through MPI (want >= 3)"
    else
      [ "$count" = 0 ] || fail "$label: rank $r ran $count collectives through MPI on the default data plane"
    fi
  done
  if [ $plane = default ]; then
    # Horovod's own channel: shared memory within each namespace-host, tcp between them.
    [ "$(grep -ac 'transport shm+tcp' "$TMP/mpi_out")" = 4 ] || fail "$label: not 4 ranks on shm+tcp"
  else
    [ "$(grep -ac 'MPI data plane (HOROVOD_CPU_OPERATIONS=mpi)' "$TMP/mpi_out")" = 4 ] ||
      fail "$label: not 4 ranks logging the MPI data plane"
  fi
}

# What this checks is placement and the data planes across hosts, not failure detection (the
# liveness watch has tests of its own: Liveness.*, test_paused_rank.py). Four ranks, two sshd,
# mpirun's daemons and debug logging share the machine's two vCPUs here, and a stall of the VM
# has made the default 1.5 s liveness timeout name a healthy rank lost (2 runs in ~30): 5 s.
export HOROVOD_LIVENESS_TIMEOUT_SECONDS=5

ran=0
if command -v mpirun.openmpi >/dev/null; then
  for plane in default mpi; do
    ops=gloo
    [ $plane = mpi ] && ops=mpi
    before=$FAILED
    timeout -k 5 120 env HOROVOD_CPU_OPERATIONS=$ops HOROVOD_LOG_LEVEL=debug \
      mpirun.openmpi --allow-run-as-root --oversubscribe -np 4 -H $HOST_A:2,$HOST_B:2 \
      --mca plm_rsh_agent "$TMP/bin/ssh_id" --mca oob_tcp_if_include $NET.0/24 --mca btl_tcp_if_include $NET.0/24 \
      -x PYTHONPATH -x PATH -x HOROVOD_CPU_OPERATIONS -x HOROVOD_LOG_LEVEL -x HOROVOD_LIVENESS_TIMEOUT_SECONDS \
      "$TMP/rank.sh" > "$TMP/mpi_out" 2>&1
    rc=$?
    if [ $rc != 0 ]; then fail "Open MPI, $plane data plane: exit $rc"; tail -n 40 "$TMP/mpi_out"; continue; fi
    check_ranks "Open MPI, $plane data plane" $plane
    [ $FAILED = $before ] && echo "ok - Open MPI mpirun -H A:2,B:2, $plane data plane"
  done
  ran=1
fi
if command -v mpiexec.mpich >/dev/null; then
  for plane in default mpi; do
    ops=gloo
    [ $plane = mpi ] && ops=mpi
    before=$FAILED
    # -localhost: the address the ranks' proxies reach mpiexec at (the bridge's, not the
    # machine's host name, which the namespaces cannot reach).
    timeout -k 5 120 env HOROVOD_CPU_OPERATIONS=$ops HOROVOD_LOG_LEVEL=debug \
      mpiexec.mpich -np 4 -hosts $HOST_A:2,$HOST_B:2 -launcher ssh -launcher-exec "$TMP/bin/ssh_id" \
      -localhost $NET.1 "$TMP/rank.sh" > "$TMP/mpi_out" 2>&1
    rc=$?
    if [ $rc != 0 ]; then fail "MPICH, $plane data plane: exit $rc"; tail -n 40 "$TMP/mpi_out"; continue; fi
    check_ranks "MPICH, $plane data plane" $plane
    [ $FAILED = $before ] && echo "ok - MPICH mpiexec -hosts A:2,B:2, $plane data plane"
  done
  ran=1
fi
[ $ran = 1 ] || skip "neither mpirun.openmpi nor mpiexec.mpich installed"
if [ $FAILED != 0 ]; then
  exit 1
fi
echo "PASS"
