#!/bin/bash
# Multi-host horovodrun over real ssh, on one machine: two network namespaces stand in for two
# hosts, each running Debian's sshd on its own address; the launcher runs in the root namespace,
# which holds the bridge address of the same subnet.
#
#   root ns: bridge hvb<id> 10.78.<n>.1/24
#   ns A:    10.78.<n>.2  sshd     ns B: 10.78.<n>.3  sshd
#
# Checks: rank/local/cross env per worker and the namespace each runs in, output prefixes,
# a mixed local+remote job, failure of a remote worker (exit 1, messages, the other remote
# worker terminated), SIGTERM and SIGKILL to horovodrun (no remote worker survives), an
# unreachable host (fails within --start-timeout naming it), ssh refused, and — when the
# engine is built — a real allreduce across the namespaces.
#
# Usage: launcher_ssh_netns.sh [path/to/horovodrun]     (or $HOROVODRUN, or $BUILD_DIR/launcher/horovodrun)
# Exit: 0 pass, 1 fail, 77 skipped (not root, no netns/sshd). Whole script bounded by the
# caller's timeout; every horovodrun run is bounded by `timeout` as well.
set -u

HVDRUN=${1:-${HOROVODRUN:-}}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
if [ -z "$HVDRUN" ] && [ -n "${BUILD_DIR:-}" ]; then
  HVDRUN=$(cd "$ROOT" && realpath -m "$BUILD_DIR/launcher/horovodrun")
fi
if [ ! -x "$HVDRUN" ]; then
  for b in "$ROOT"/build*/launcher/horovodrun; do [ -x "$b" ] && HVDRUN=$b && break; done
fi

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; FAILED=$((FAILED + 1)); }
FAILED=0
begin() { MARKED=$FAILED; }
report() { [ $FAILED = $MARKED ] && echo "ok $*" || echo "not ok $*"; }

[ "$(id -u)" = 0 ] || skip "needs root"
[ -x "$HVDRUN" ] || skip "horovodrun not built (pass its path or set HOROVODRUN)"
HVDRUN=$(cd "$(dirname "$HVDRUN")" && pwd)/$(basename "$HVDRUN")
for tool in ip ssh ssh-keygen timeout pgrep; do command -v $tool >/dev/null || skip "$tool not installed"; done
[ -x /usr/sbin/sshd ] || skip "/usr/sbin/sshd not installed"

ID=$$
TMP=$(mktemp -d /tmp/hvd-netns.XXXXXX)
BR=hvb$ID
NS_A=hvd${ID}a
NS_B=hvd${ID}b
SSHD_PIDS=()

cleanup() {
  for p in "${SSHD_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for ns in $NS_A $NS_B; do
    # Anything still running inside a namespace is a test leftover: stop it first.
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  ip link del "$BR" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# A /24 under 10.78.0.0/16 that no interface of this machine uses yet.
NET=
for n in 0 $(seq 1 250 | shuf -n 20); do
  if ! ip -4 addr show | grep -q "inet 10\.78\.$n\."; then NET=10.78.$n; break; fi
done
[ -n "$NET" ] || skip "no free 10.78.x.0/24 subnet"

ip netns add $NS_A 2>/dev/null || skip "cannot create network namespaces"
ip netns add $NS_B || skip "cannot create network namespaces"
ip link add $BR type bridge || skip "cannot create a bridge"
ip addr add $NET.1/24 dev $BR
ip link set $BR up
i=2
for ns in $NS_A $NS_B; do
  ip link add hv$ID$i type veth peer name hp$ID$i || skip "cannot create veth pairs"
  ip link set hp$ID$i netns $ns
  ip link set hv$ID$i master $BR up
  ip netns exec $ns ip link set lo up
  ip netns exec $ns ip addr add $NET.$i/24 dev hp$ID$i
  ip netns exec $ns ip link set hp$ID$i up
  i=$((i + 1))
done
HOST_A=$NET.2
HOST_B=$NET.3

# Keys and sshd, one per namespace.
ssh-keygen -q -t ed25519 -N '' -f "$TMP/hostkey" || skip "ssh-keygen failed"
ssh-keygen -q -t ed25519 -N '' -f "$TMP/id"
cp "$TMP/id.pub" "$TMP/authorized_keys"
mkdir -p /run/sshd
chmod 700 "$TMP"
for host in $HOST_A $HOST_B; do
  ns=$([ $host = $HOST_A ] && echo $NS_A || echo $NS_B)
  cat > "$TMP/sshd_$host.conf" <<EOF
ListenAddress $host
Port 22
HostKey $TMP/hostkey
PidFile $TMP/sshd_$host.pid
AuthorizedKeysFile $TMP/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
LogLevel ERROR
EOF
  ip netns exec $ns /usr/sbin/sshd -D -f "$TMP/sshd_$host.conf" -h "$TMP/hostkey" -E "$TMP/sshd_$host.log" &
  SSHD_PIDS+=($!)
done

# The launcher calls `ssh` from PATH; this wrapper only adds a private config (throwaway
# known_hosts) so the test leaves ~/.ssh alone.
mkdir -p "$TMP/bin"
cat > "$TMP/ssh_config" <<EOF
Host *
  UserKnownHostsFile $TMP/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking no
  LogLevel ERROR
EOF
cat > "$TMP/bin/ssh" <<EOF
#!/bin/sh
exec /usr/bin/ssh -F $TMP/ssh_config "\$@"
EOF
chmod +x "$TMP/bin/ssh"
export PATH="$TMP/bin:$PATH"
export HOME="$TMP"  # the launcher's ssh-check cache goes here

for host in $HOST_A $HOST_B; do
  ok=0
  for _ in $(seq 1 50); do
    if ssh -o BatchMode=yes -o ConnectTimeout=2 -i "$TMP/id" $host true 2>"$TMP/ssh_probe.err"; then ok=1; break; fi
    sleep 0.2
  done
  [ $ok = 1 ] || { cat "$TMP"/sshd_*.log "$TMP/ssh_probe.err"; skip "sshd in the namespace for $host did not come up"; }
done
echo "namespaces up: $HOST_A ($NS_A), $HOST_B ($NS_B); launcher side $NET.1"
if [ -n "${NETNS_SHELL:-}" ]; then
  # Run a command with the setup in place (HOST_A, HOST_B, NS_A, NS_B, TMP, NET, BR, ROOT exported;
  # `ssh` on PATH reaches both hosts with -i $TMP/id): a debugging aid, and how
  # mpi_ssh_netns.sh reuses this setup.
  export HOST_A HOST_B NS_A NS_B TMP NET BR ROOT HVDRUN
  bash -c "$NETNS_SHELL"
  exit $?
fi

run() {  # run <timeout> <horovodrun args...>; sets OUT, ERR, RC
  timeout -k 5 "$1" "$HVDRUN" "${@:2}" > "$TMP/out" 2> "$TMP/err"
  RC=$?
  OUT=$(cat "$TMP/out")
  ERR=$(cat "$TMP/err")
}
expect_line() {  # expect_line <text> <description>
  grep -qxF -- "$1" "$TMP/out" || fail "$2: missing line '$1'"
}
no_workers_left() {  # no_workers_left <marker> <seconds>
  for _ in $(seq 1 $(($2 * 10))); do
    pgrep -f "$1" >/dev/null || return 0
    sleep 0.1
  done
  fail "processes matching '$1' still running after $2 s: $(pgrep -af "$1" | head -5)"
  pkill -9 -f "$1"
  return 1
}

begin
# 1. Four ranks on two "hosts": topology env, namespace, cwd, prefixes.
cd "$TMP"
run 60 -np 4 -H $HOST_A:2,$HOST_B:2 -i "$TMP/id" sh -c \
  'echo R=$HOROVOD_RANK L=$HOROVOD_LOCAL_RANK C=$HOROVOD_CROSS_RANK S=$HOROVOD_SIZE LS=$HOROVOD_LOCAL_SIZE CS=$HOROVOD_CROSS_SIZE H=$HOROVOD_HOSTNAME A=$HOROVOD_GLOO_RENDEZVOUS_ADDR K=${#HOROVOD_SECRET_KEY} NS=$(ip netns identify) D=$(pwd); echo to-stderr >&2'
[ $RC = 0 ] || fail "4-rank ssh job exited $RC: $ERR"
expect_line "[0]<stdout>:R=0 L=0 C=0 S=4 LS=2 CS=2 H=$HOST_A A=$NET.1 K=64 NS=$NS_A D=$TMP" "rank 0"
expect_line "[1]<stdout>:R=1 L=1 C=0 S=4 LS=2 CS=2 H=$HOST_A A=$NET.1 K=64 NS=$NS_A D=$TMP" "rank 1"
expect_line "[2]<stdout>:R=2 L=0 C=1 S=4 LS=2 CS=2 H=$HOST_B A=$NET.1 K=64 NS=$NS_B D=$TMP" "rank 2"
expect_line "[3]<stdout>:R=3 L=1 C=1 S=4 LS=2 CS=2 H=$HOST_B A=$NET.1 K=64 NS=$NS_B D=$TMP" "rank 3"
for r in 0 1 2 3; do
  grep -qxF "[$r]<stderr>:to-stderr" "$TMP/err" || fail "rank $r stderr not forwarded with prefix"
done
report "1 - 4 ranks over ssh: env, namespaces, prefixes"

begin
# 2. Mixed: rank 0 local (root namespace), rank 1 remote; both get the routable address.
run 60 -np 2 -H localhost:1,$HOST_B:1 -i "$TMP/id" sh -c \
  'echo R=$HOROVOD_RANK A=$HOROVOD_GLOO_RENDEZVOUS_ADDR I=$HOROVOD_GLOO_IFACE NS=$(ip netns identify)'
[ $RC = 0 ] || fail "mixed job exited $RC: $ERR"
expect_line "[0]<stdout>:R=0 A=$NET.1 I=$BR NS=" "mixed rank 0"
expect_line "[1]<stdout>:R=1 A=$NET.1 I=hp${ID}3 NS=$NS_B" "mixed rank 1 (its own interface)"
report "2 - local + remote job"

begin
# 3. A remote worker fails: exit 1, Horovod's messages, the other remote worker is terminated.
# Markers are unique sleep durations, so they show in the sleeping process's own command line.
MARK="sleep 300.1$ID"
start=$(date +%s)
run 60 -np 2 -H $HOST_A:1,$HOST_B:1 -i "$TMP/id" sh -c \
  "if [ \$HOROVOD_RANK = 1 ]; then sleep 0.5; exit 3; fi; $MARK; true"
[ $RC = 1 ] || fail "failing remote job: exit $RC, want 1"
grep -qF "Process 1 exit with status code 3." "$TMP/out" || fail "missing 'Process 1 exit with status code 3.' in: $OUT"
grep -qF "Terminating remaining workers after failure of Process 1." "$TMP/out" || fail "missing termination message"
grep -qF "$HOST_B" "$TMP/out" || fail "failure report does not name host $HOST_B"
[ $(( $(date +%s) - start )) -le 10 ] || fail "failing job took more than 10 s"
no_workers_left "$MARK" 8
report "3 - remote failure terminates the job"

# Remote processes of a test: those in the two namespaces whose command line has the marker.
ns_count() {
  local n=0 p
  for p in $(ip netns pids $NS_A) $(ip netns pids $NS_B); do
    tr '\0' ' ' 2>/dev/null < /proc/$p/cmdline | grep -qF -- "$1" && n=$((n + 1))
  done
  echo $n
}
wait_remote_started() {  # wait_remote_started <marker>: both remote sleeps running
  for _ in $(seq 1 150); do
    [ "$(ns_count "$1")" -ge 2 ] && return 0
    sleep 0.1
  done
  fail "remote workers '$1' did not start"
  return 1
}

begin
# 4. SIGTERM to horovodrun: remote workers die, horovodrun exits 143.
MARK="sleep 300.2$ID"
timeout -k 5 60 "$HVDRUN" -np 2 -H $HOST_A:1,$HOST_B:1 -i "$TMP/id" sh -c "$MARK; true" >/dev/null 2>&1 &
HP=$!
wait_remote_started "$MARK"
kill -TERM $HP
wait $HP
RC=$?
[ $RC = 143 ] || fail "horovodrun after SIGTERM exited $RC, want 143"
no_workers_left "$MARK" 8
report "4 - SIGTERM reaches remote workers"

begin
# 5. SIGKILL to horovodrun: the ssh clients die, the remote wrappers see EOF and kill.
MARK="sleep 300.3$ID"
"$HVDRUN" -np 2 -H $HOST_A:1,$HOST_B:1 -i "$TMP/id" sh -c "$MARK; true" >/dev/null 2>&1 &
HP=$!
wait_remote_started "$MARK"
{ kill -KILL $HP; wait $HP; } 2>/dev/null
no_workers_left "$MARK" 10
report "5 - SIGKILL of horovodrun leaves no remote worker"

begin
# 6. Unreachable host: fails within --start-timeout, naming the host.
start=$(date +%s)
run 30 -np 2 -H $HOST_A:1,$NET.99:1 -i "$TMP/id" --start-timeout 3 --disable-cache true
elapsed=$(( $(date +%s) - start ))
[ $RC = 1 ] || fail "unreachable host: exit $RC, want 1"
grep -qF "Timed out waiting for" "$TMP/err" && grep -qF "$NET.99" "$TMP/err" || fail "unreachable host message: $ERR"
[ $elapsed -le 8 ] || fail "unreachable host took $elapsed s with --start-timeout 3"
report "6 - unreachable host fails within the start timeout"

begin
# 7. ssh refused (nothing listens on that port): per-host report and exit 1.
run 30 -np 1 -H $HOST_A:1 -i "$TMP/id" -p 2299 --disable-cache true
[ $RC = 1 ] || fail "refused ssh: exit $RC, want 1"
grep -qF "could not connect to some hosts via ssh: $HOST_A" "$TMP/err" || fail "refused ssh message: $ERR"
report "7 - refused ssh is reported per host"

begin
# 8. A real allreduce across the namespaces, when the engine and a test program exist.
# horovodrun_allreduce_check (tests/multiproc/launcher_allreduce.cc) is built next to horovodrun.
ALLREDUCE=$(dirname "$HVDRUN")/horovodrun_allreduce_check
if [ -x "$ALLREDUCE" ]; then
  run 120 -np 4 -H $HOST_A:2,$HOST_B:2 -i "$TMP/id" "$ALLREDUCE"
  [ $RC = 0 ] || fail "allreduce across namespaces ($ALLREDUCE) exited $RC: $OUT $ERR"
  for r in 0 1 2 3; do
    grep -q "^\[$r\]<stdout>:allreduce ok rank=$r size=4 .*sum=10 " "$TMP/out" || fail "rank $r allreduce: $OUT"
  done
  report "8 - allreduce across namespaces ($ALLREDUCE)"

  begin
  # 9. The same with two ranks in the root namespace (local fork) and two behind ssh.
  run 120 -np 4 -H localhost:2,$HOST_B:2 -i "$TMP/id" "$ALLREDUCE"
  [ $RC = 0 ] || fail "local+remote allreduce exited $RC: $OUT $ERR"
  [ "$(grep -c 'allreduce ok .* size=4 .*sum=10 ' "$TMP/out")" = 4 ] || fail "local+remote allreduce: $OUT"
  report "9 - allreduce with local and remote ranks"

  begin
  # 10. A rank that dies after init: the job fails fast with its rank named.
  start=$(date +%s)
  run 120 -np 4 -H $HOST_A:2,$HOST_B:2 -i "$TMP/id" "$ALLREDUCE" --fail-rank 3
  [ $RC = 1 ] || fail "failing allreduce job: exit $RC, want 1"
  # Survivors notice the lost peer and may exit before rank 3's own exit travels back over ssh,
  # so the first failure reported can be any rank.
  grep -qF "[3]<stderr>:rank 3 failing on purpose" "$TMP/err" || fail "rank 3 stderr missing: $ERR"
  grep -q "^Process [0-3] exit with status code [13]\.$" "$TMP/out" || fail "failing allreduce: $OUT"
  [ $(( $(date +%s) - start )) -le 20 ] || fail "failing allreduce job took too long"
  report "10 - a rank failing mid-job stops the job"
elif PYTHONPATH="$ROOT/python:${PYTHONPATH:-}" python3 -c "import horovod.torch as hvd; hvd.init" 2>/dev/null; then
  PYTHONPATH="$ROOT/python:${PYTHONPATH:-}" run 180 -np 4 -H $HOST_A:2,$HOST_B:2 -i "$TMP/id" python3 -c \
    'import torch, horovod.torch as hvd; hvd.init(); t = hvd.allreduce(torch.ones(4) * (hvd.rank() + 1), op=hvd.Sum); print("sum", t.tolist())'
  [ $RC = 0 ] || fail "torch allreduce across namespaces exited $RC: $ERR"
  [ "$(grep -c 'sum \[10.0, 10.0, 10.0, 10.0\]' "$TMP/out")" = 4 ] || fail "allreduce results: $OUT"
  report "8 - torch allreduce across namespaces"
else
  echo "ok 8 # SKIP no engine test program built yet"
fi

begin
# 11. horovod.run() across the namespaces: function shipped over, results back in rank order.
cat > "$TMP/driver.py" <<EOF
import subprocess
from horovod.runner import run
def where():
    import os
    ns = subprocess.run(['ip', 'netns', 'identify'], capture_output=True, text=True).stdout.strip()
    return int(os.environ['HOROVOD_RANK']), ns
print(run(where, num_proc=2, hosts='$HOST_A:1,$HOST_B:1', ssh_identity_file='$TMP/id'))
EOF
if python3 -c "import cloudpickle" 2>/dev/null; then
  OUT=$(HOROVOD_RUN_BINARY="$HVDRUN" PYTHONPATH="$ROOT/python" timeout -k 5 120 python3 "$TMP/driver.py" 2>"$TMP/err")
  RC=$?
  [ $RC = 0 ] || fail "horovod.run across namespaces exited $RC: $(cat "$TMP/err")"
  [ "$OUT" = "[(0, '$NS_A'), (1, '$NS_B')]" ] || fail "horovod.run results: $OUT"
  report "11 - horovod.run() across namespaces"
else
  echo "ok 11 # SKIP cloudpickle not installed"
fi

begin
# 12. An elastic job over ssh: a worker on host B is killed; the job goes on with host A's.
if python3 -c "import torch, horovod.torch" 2>/dev/null; then
  printf '%s\n%s\n' "$HOST_A:1" "$HOST_B:1" > "$TMP/elastic_hosts"
  ELASTIC_LOG="$TMP/elastic.jsonl" ELASTIC_HOSTS="$TMP/elastic_hosts" ELASTIC_EPOCHS=5 \
    ELASTIC_SCHEDULE='[{"epoch": 1, "rank": 1, "do": "kill"}]' HOROVOD_ELASTIC_DISCOVERY_INTERVAL=0.2 \
    run 180 -np 2 --min-np 1 --host-discovery-script "cat $TMP/elastic_hosts" -i "$TMP/id" \
    python3 -W ignore "$ROOT/tests/launcher/elastic/train.py"
  [ $RC = 0 ] || fail "elastic job over ssh exited $RC: $ERR"
  grep -qF "blacklisting host $HOST_B" "$TMP/err" || fail "elastic over ssh: $HOST_B not blacklisted: $ERR"
  last=$(tail -n 1 "$TMP/elastic.jsonl" 2>/dev/null)
  case "$last" in
    *'"epoch": 4'*'"size": 1'*'"round": 1'*"\"host\": \"$HOST_A\""*) ;;
    *) fail "elastic over ssh: last epoch record: $last" ;;
  esac
  report "12 - elastic job over ssh survives a killed remote worker"
else
  echo "ok 12 # SKIP torch or horovod.torch not importable"
fi

if [ $FAILED != 0 ]; then
  echo "--- sshd logs"; cat "$TMP"/sshd_*.log 2>/dev/null
  exit 1
fi
echo "PASS"
