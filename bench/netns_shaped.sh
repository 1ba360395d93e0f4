#!/usr/bin/env bash
# Four "hosts" on one machine: network namespaces joined by veth links to a bridge (in a fifth
# namespace), every link shaped to RATE in both directions with tc tbf. Measures single-stream
# TCP goodput between two hosts, then runs hvd_bench's allreduce with one rank per host
# (started by hand, with a standalone rendezvous server in host 0), and prints the allreduce
# busbw as a fraction of that goodput. Needs root (ip netns, tc). Cleans up on exit.
#
#   bench/netns_shaped.sh [--build DIR] [--rate 1gbit] [--size 256M] [--iters 20] [--smoke]
#                         [--goodput-only]
#
# Target (docs/performance.md): 256 MiB allreduce busbw >= 0.92 x goodput.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
BUILD="${HVD_BUILD_DIR:-build}"
RATE=1gbit
SIZE=256M
ITERS=20
WARMUP=2
SMOKE=0
GOODPUT_SECONDS=4
HOSTS=4
GOODPUT_ONLY=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    --size) SIZE="$2"; shift 2 ;;
    --iters) ITERS="$2"; shift 2 ;;
    --smoke) SMOKE=1; shift ;;
    --goodput-only) GOODPUT_ONLY=1; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[[ "$BUILD" = /* ]] || BUILD="$ROOT/$BUILD"
BENCH="$BUILD/bench/hvd_bench"
RDV="$BUILD/bench/rendezvous_server"
for exe in "$BENCH" "$RDV"; do
  [[ $GOODPUT_ONLY -eq 1 ]] || [[ -x "$exe" ]] || { echo "netns_shaped: $exe not built" >&2; exit 2; }
done
[[ $(id -u) -eq 0 ]] || { echo "netns_shaped: needs root (ip netns, tc)" >&2; exit 2; }

TAG="hvdb$$"
BR="${TAG}br"
SUBNET=10.77.$(( $$ % 200 + 20 ))   # addresses exist only inside these namespaces
WORK="$(mktemp -d)"
PIDS=()

cleanup() {
  local rc=$?
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  for k in $(seq 0 $((HOSTS - 1))); do ip netns del "${TAG}h$k" 2>/dev/null || true; done
  ip netns del "$BR" 2>/dev/null || true
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT INT TERM

# Token bucket: 1 Gbit/s needs a burst of at least rate / HZ; 256 KB keeps TSO segments whole.
shape() {  # namespace device
  ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$RATE" burst 256kb latency 20ms
}

ip netns add "$BR"
ip -n "$BR" link add br0 type bridge
ip -n "$BR" link set br0 up
ip -n "$BR" link set lo up
for k in $(seq 0 $((HOSTS - 1))); do
  ns="${TAG}h$k"
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n "$BR" link add "vb$k" type veth peer name eth0 netns "$ns"
  ip -n "$BR" link set "vb$k" master br0 up
  ip -n "$ns" addr add "$SUBNET.$((k + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  shape "$ns" eth0       # host -> bridge
  shape "$BR" "vb$k"     # bridge -> host
done
echo "# netns_shaped: $HOSTS hosts ${TAG}h0..$((HOSTS - 1)) on $SUBNET.0/24, every link tbf $RATE both ways"

# ---- single-stream TCP goodput, host 1 -> host 0 ------------------------------------------------
[[ $SMOKE -eq 1 ]] && GOODPUT_SECONDS=0.5
ip netns exec "${TAG}h0" python3 "$HERE/tcp_goodput.py" server --bind "$SUBNET.1" --port 5201 \
  >"$WORK/goodput.txt" &
PIDS+=($!)
ip netns exec "${TAG}h1" python3 "$HERE/tcp_goodput.py" client --host "$SUBNET.1" --port 5201 \
  --seconds "$GOODPUT_SECONDS"
wait "${PIDS[-1]}"
GOODPUT=$(awk '/^goodput_Bps/ {print $2}' "$WORK/goodput.txt")
echo "# tcp goodput (1 stream, h1 -> h0): $(awk -v g="$GOODPUT" 'BEGIN {printf "%.1f MB/s = %.3f Gbit/s", g/1e6, g*8/1e9}')"

[[ $GOODPUT_ONLY -eq 0 ]] || exit 0

# ---- allreduce, one rank per host ---------------------------------------------------------------
SECRET=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
export HOROVOD_SECRET_KEY="$SECRET"
ip netns exec "${TAG}h0" "$RDV" --bind "$SUBNET.1" --seconds 900 </dev/null >"$WORK/rdv.txt" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do grep -q '^port ' "$WORK/rdv.txt" 2>/dev/null && break; sleep 0.05; done
PORT=$(awk '/^port / {print $2}' "$WORK/rdv.txt")
[[ -n "$PORT" ]] || { echo "rendezvous server did not start:"; cat "$WORK/rdv.txt"; exit 1; }

if [[ $SMOKE -eq 1 ]]; then
  ARGS=(-o allreduce --smoke)
else
  ARGS=(-o allreduce -b "$SIZE" -e "$SIZE" -n "$ITERS" -w "$WARMUP")
fi
RANK_PIDS=()
for k in $(seq 0 $((HOSTS - 1))); do
  ip netns exec "${TAG}h$k" env HOROVOD_RANK=$k HOROVOD_SIZE=$HOSTS HOROVOD_LOCAL_RANK=0 \
    HOROVOD_LOCAL_SIZE=1 HOROVOD_CROSS_RANK=$k HOROVOD_CROSS_SIZE=$HOSTS HOROVOD_HOSTNAME="h$k" \
    HOROVOD_GLOO_RENDEZVOUS_ADDR="$SUBNET.1" HOROVOD_GLOO_RENDEZVOUS_PORT="$PORT" HOROVOD_GLOO_IFACE=eth0 \
    timeout 600 "$BENCH" "${ARGS[@]}" >"$WORK/rank$k.txt" 2>&1 &
  RANK_PIDS+=($!)
  PIDS+=($!)
done
FAILED=0
for k in $(seq 0 $((HOSTS - 1))); do
  wait "${RANK_PIDS[$k]}" || { FAILED=1; echo "rank $k failed:"; tail -20 "$WORK/rank$k.txt"; }
done
cat "$WORK/rank0.txt"
[[ $FAILED -eq 0 ]] || exit 1

BUSBW=$(awk '!/^#/ && NF == 11 {b = $9} END {print b}' "$WORK/rank0.txt")
awk -v b="$BUSBW" -v g="$GOODPUT" -v smoke=$SMOKE 'BEGIN {
  frac = b * 1e9 / g
  printf "# allreduce busbw %.1f MB/s = %.3f x tcp goodput (target >= 0.92)%s\n", b * 1e3, frac,
         smoke ? " [smoke: not a measurement]" : ""
}'
