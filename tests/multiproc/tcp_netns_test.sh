#!/bin/bash
# TCP transport and rendezvous between two network namespaces joined by a veth pair:
#
#   ns A: veth 10.77.0.1/24   rank 0 + TcpStoreServer     ns B: veth 10.77.0.2/24   rank 1
#
# Checks: a client with a wrong secret is refused (and counted by the server); the two ranks
# exchange 64 MiB over the veth link with contents verified, and swap mailbox messages.
#
# Usage: tcp_netns_test.sh [path/to/tcp_pair]
# Exit: 0 pass, 1 fail, 77 skipped (not root, or network namespaces unusable here).
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PAIR=${1:-}
if [ -z "$PAIR" ]; then
  for b in "$ROOT"/build*/tests/multiproc/tcp_pair; do [ -x "$b" ] && PAIR=$b && break; done
fi

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; FAILED=1; }
FAILED=0

[ "$(id -u)" = 0 ] || skip "needs root"
[ -n "$PAIR" ] && [ -x "$PAIR" ] || skip "tcp_pair not built (pass its path)"
command -v ip >/dev/null || skip "iproute2 not installed"

ID=$$
NS_A=hvdtcp${ID}a
NS_B=hvdtcp${ID}b
VETH_A=vtcp${ID}a
VETH_B=vtcp${ID}b
TMP=$(mktemp -d /tmp/hvd-tcp-netns.XXXXXX)

cleanup() {
  for ns in $NS_A $NS_B; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  ip link del "$VETH_A" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

ip netns add "$NS_A" 2>/dev/null || skip "cannot create network namespaces (ip netns add failed)"
ip netns add "$NS_B" || skip "cannot create a second network namespace"
ip link add "$VETH_A" type veth peer name "$VETH_B" || skip "cannot create a veth pair"
ip link set "$VETH_A" netns "$NS_A" && ip link set "$VETH_B" netns "$NS_B" || skip "cannot move veth ends"
ip -n "$NS_A" addr add 10.77.0.1/24 dev "$VETH_A"
ip -n "$NS_B" addr add 10.77.0.2/24 dev "$VETH_B"
for ns in $NS_A $NS_B; do ip -n "$ns" link set lo up; done
ip -n "$NS_A" link set "$VETH_A" up
ip -n "$NS_B" link set "$VETH_B" up
# Probe the link: a refused (or accepted) TCP connection proves packets pass both ways.
PROBE=$(ip netns exec "$NS_B" timeout 5 bash -c 'exec 3<>/dev/tcp/10.77.0.1/9 && echo connected' 2>&1)
case "$PROBE" in
  *connected*|*refused*) ;;
  *) skip "veth link does not pass traffic: $PROBE" ;;
esac

PORT=$((20000 + RANDOM % 20000))
SECRET=netns-secret-$RANDOM$RANDOM
STORE=10.77.0.1:$PORT
HOSTS=ns-a,ns-b

ip netns exec "$NS_A" timeout 90 "$PAIR" --rank 0 --size 2 --serve --store "$STORE" --bind 10.77.0.1 \
  --secret "$SECRET" --hosts $HOSTS >"$TMP/a.out" 2>"$TMP/a.err" &
PID_A=$!

# A client with the wrong secret (it retries until the server is up, then must be refused).
if ! ip netns exec "$NS_B" timeout 30 "$PAIR" --expect-refused --store "$STORE" --secret wrong-secret \
  >"$TMP/rogue.out" 2>&1; then
  fail "wrong secret was not refused: $(cat "$TMP/rogue.out")"
fi

ip netns exec "$NS_B" timeout 90 "$PAIR" --rank 1 --size 2 --store "$STORE" --bind 10.77.0.2 \
  --secret "$SECRET" --hosts $HOSTS >"$TMP/b.out" 2>"$TMP/b.err"
RC_B=$?
wait $PID_A
RC_A=$?

cat "$TMP/a.out" "$TMP/b.out"
[ $RC_A = 0 ] || fail "rank 0 exited $RC_A: $(cat "$TMP/a.err")"
[ $RC_B = 0 ] || fail "rank 1 exited $RC_B: $(cat "$TMP/b.err")"
grep -q "^OK rank 0" "$TMP/a.out" || fail "rank 0 did not finish"
grep -q "^OK rank 1" "$TMP/b.out" || fail "rank 1 did not finish"
REFUSED=$(sed -n 's/^refused connections: //p' "$TMP/a.out")
[ "${REFUSED:-0}" -ge 1 ] || fail "server did not count the refused connection (got '${REFUSED:-}')"
grep -q "refused a connection from 10.77.0.2" "$TMP/a.err" || fail "server did not log the refused peer's address"

if [ $FAILED = 0 ]; then echo "PASS: tcp across network namespaces"; exit 0; fi
exit 1
