#!/usr/bin/env bash
# Smoke test of every benchmark: tiny sizes, 1-2 iterations, correctness only, no timing
# assertions. For CI; takes well under a minute on 2 cores. A piece whose prerequisite is missing
# (MPI peer not built, torch not installed, not root for netns) is skipped and says so.
#
#   bench/smoke.sh [BUILD_DIR]          (default: $HVD_BUILD_DIR or build)
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
BUILD="${1:-${HVD_BUILD_DIR:-build}}"
[[ "$BUILD" = /* ]] || BUILD="$ROOT/$BUILD"
B="$BUILD/bench"
RUN="${HOROVODRUN:-$BUILD/launcher/horovodrun}"
[[ -x "$RUN" ]] || RUN="$(command -v horovodrun || true)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
PASS=0
FAIL=0
SKIP=0
LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT

check() {  # name, command...   (each bounded by a timeout)
  local name="$1"
  shift
  timeout 60 "$@" >"$LOG" 2>&1
  local rc=$?
  if [[ $rc -eq 0 ]]; then
    PASS=$((PASS + 1))
    echo "ok    $name"
  else
    FAIL=$((FAIL + 1))
    echo "FAIL  $name (exit $rc)"
    tail -20 "$LOG" | sed 's/^/      /'
  fi
}
skip() {
  SKIP=$((SKIP + 1))
  echo "skip  $1"
}

check "memcpy_roof" "$B/memcpy_roof" -p 2 -t 0.05
check "memcpy_roof -x (cross-CPU reads)" "$B/memcpy_roof" -x -t 0.05

if [[ -x "$B/hvd_bench" && -n "$RUN" ]]; then
  for op in allreduce allgather broadcast alltoall reducescatter allreduce_batch allreduce_shared allreduce_average \
            allreduce_into_shared; do
    check "hvd_bench $op np2" "$RUN" -np 2 "$B/hvd_bench" --smoke -o "$op" -k 4 -r 1
  done
  check "hvd_bench allreduce bfloat16 np3" "$RUN" -np 3 "$B/hvd_bench" --smoke -d bfloat16
  check "hvd_bench allreduce_shared staged np3" env HOROVOD_SHARED_INPLACE=0 "$RUN" -np 3 "$B/hvd_bench" --smoke \
    -o allreduce_shared -e 1M
  check "hvd_bench allreduce_into_shared np3 (streamed sizes)" "$RUN" -np 3 "$B/hvd_bench" -o allreduce_into_shared \
    -b 16M -e 16M -n 3 -w 1
  check "coord_bench np2" "$RUN" -np 2 "$B/coord_bench" --smoke --tensors 16
  check "coord_bench np3, a late rank" "$RUN" -np 3 "$B/coord_bench" --smoke --tensors 16 --late-rank-us 200
else
  skip "hvd_bench/coord_bench (not built or no horovodrun)"
fi

if [[ -x "$B/mpi_bench" ]] && command -v mpirun >/dev/null; then
  check "mpi_bench allreduce np2" mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl self,vader \
    "$B/mpi_bench" --smoke
  check "mpi_bench allreduce_batch np2" mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl self,vader \
    "$B/mpi_bench" --smoke -o allreduce_batch -k 4
else
  skip "mpi_bench (MPI not found at build time)"
fi

if python3 -c "import torch" 2>/dev/null; then
  check "torch_gloo_bench allreduce np2" python3 "$HERE/peers/torch_gloo_bench.py" --np 2 --smoke -e 1K
  if [[ -x "$B/hvd_bench" && -n "$RUN" ]] && python3 -c "import horovod._core, horovod.torch" 2>/dev/null; then
    check "py_latency_bench np2" "$RUN" -np 2 python3 "$HERE/py_latency_bench.py" --smoke
    check "torch_e2e cnn" python3 "$HERE/torch_e2e.py" --smoke --models cnn --build-dir "$BUILD" \
      --horovodrun "$RUN"
    check "torch_phases cnn np2" "$RUN" -np 2 python3 "$HERE/torch_phases.py" --model cnn --warmup 1 --steps 2
  else
    skip "py_latency_bench/torch_e2e/torch_phases (horovod with its _core extension not importable)"
  fi
else
  skip "torch benchmarks (torch not installed)"
fi

if [[ -x "$B/hvd_bench" && -n "$RUN" ]]; then
  CMP_OUT="$(mktemp -d)"
  check "compare (parse + table)" python3 "$HERE/compare" --smoke --systems horovod,openmpi --ops allreduce \
    --build-dir "$BUILD" --horovodrun "$RUN" --out "$CMP_OUT"
  # Rebuilt from raw/ alone, with no build to find, the table must come out the same.
  cp "$CMP_OUT/allreduce_np2.md" "$CMP_OUT/first.md"
  check "compare --from-raw (same table, nothing run)" bash -c "python3 '$HERE/compare' --smoke --from-raw \
    --systems horovod,openmpi --ops allreduce --build-dir /nonexistent --out '$CMP_OUT' >/dev/null \
    && diff '$CMP_OUT/first.md' '$CMP_OUT/allreduce_np2.md'"
  rm -rf "$CMP_OUT"
fi

if [[ $(id -u) -eq 0 && -x "$B/hvd_bench" && -x "$B/rendezvous_server" ]] && command -v tc >/dev/null \
   && ip netns list >/dev/null 2>&1; then
  check "netns_shaped (4 namespaces)" "$HERE/netns_shaped.sh" --smoke --build "$BUILD"
else
  skip "netns_shaped (needs root, tc, hvd_bench and rendezvous_server)"
fi

echo "smoke: $PASS passed, $FAIL failed, $SKIP skipped"
[[ $FAIL -eq 0 ]]
