#!/usr/bin/env bash
# Every measurement behind bench/results/, in one command. Takes ~30-40 minutes on 2 cores; run
# it on an otherwise idle machine (it prints the load average before each part; figures taken
# under load are not worth committing).
#
#   bench/run_all.sh [BUILD_DIR] [REPS]      (defaults: $HVD_BUILD_DIR or build; 3)
#
# The 2-rank collectives take max(REPS, 5) repetitions: on the development VM some runs of a
# 2-rank collective (ours and Open MPI's alike) fall 2-4x while the host places the two vCPUs
# apart, and a median of 3 taken while that flips is bimodal (bench/results/session19.md).
#
# Writes bench/results/*.md, *.png and *.txt; raw outputs in bench/results/raw/ (not committed).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
BUILD="${1:-${HVD_BUILD_DIR:-build}}"
REPS="${2:-3}"
COLL_REPS=$((REPS > 5 ? REPS : 5))
[[ "$BUILD" = /* ]] || BUILD="$ROOT/$BUILD"
OUT="$ROOT/bench/results"
RUN="${HOROVODRUN:-$BUILD/launcher/horovodrun}"
mkdir -p "$OUT/raw"

part() { echo "== $* (load average: $(cut -d' ' -f1-3 /proc/loadavg))" >&2; }

part "memcpy roof"
"$BUILD/bench/memcpy_roof" -p 1,2,4 | tee "$OUT/memcpy_roof.txt"

part "collectives, 2 ranks"
"$HERE/compare" --np 2 --ops allreduce,allgather,broadcast --reps "$COLL_REPS" --build-dir "$BUILD" \
  --horovodrun "$RUN" --out "$OUT"

part "gradient path: allreduce in place over shared buffers (hvd::allocateShared), 2 ranks"
"$HERE/compare" --np 2 --ops allreduce_shared -b 64K -e 256M --reps "$REPS" \
  --systems horovod,horovod-staged,openmpi-tuned --build-dir "$BUILD" --horovodrun "$RUN" --out "$OUT"

part "gradient path, large gradients: allreduce from ordinary memory into shared buffers, 2 ranks"
"$HERE/compare" --np 2 --ops allreduce_into_shared -b 4M -e 256M --reps "$REPS" \
  --systems horovod,horovod-staged,openmpi-tuned --build-dir "$BUILD" --horovodrun "$RUN" --out "$OUT"

part "8-byte allreduce latency and 100 x 1 KiB async step (C++ vs MPI)"
"$HERE/compare" --np 2 --ops allreduce -b 8 -e 8 --reps "$REPS" --systems horovod,openmpi,openmpi-tuned,torch-gloo \
  --build-dir "$BUILD" --horovodrun "$RUN" --out "$OUT" --name latency8B_np2
"$HERE/compare" --np 2 --ops allreduce_batch -b 1K -e 1K -k 100 --reps "$REPS" \
  --build-dir "$BUILD" --horovodrun "$RUN" --out "$OUT" --name batch100x1KiB_np2

part "coordination overhead"
for np in 2 4; do
  {
    for args in "" "--tensor-bytes 16"; do
      echo "\$ horovodrun -np $np build/bench/coord_bench $args   # load average: $(cut -d' ' -f1-3 /proc/loadavg)"
      # shellcheck disable=SC2086  # $args is a list of words
      "$RUN" -np "$np" "$BUILD/bench/coord_bench" $args
    done
  } | tee "$OUT/coord_np$np.txt"
done

part "Python small-message latency"
{ echo "\$ horovodrun -np 2 python3 bench/py_latency_bench.py"; "$RUN" -np 2 python3 "$HERE/py_latency_bench.py"; } \
  | tee "$OUT/py_latency_np2.txt"

part "end to end"
# nocomm (the same loop without gradient exchange) is the roof no system can pass; nocomm-align
# (ranks aligned before each step, as any synchronous training is) is the roof of synchronous
# training. DDP runs as users start it and with the malloc tunable horovodrun gives its workers
# (ddp-gloo-hugepages).
python3 "$HERE/torch_e2e.py" --np 2 --models cnn,mlp --reps "$REPS" \
  --systems horovod,nocomm,nocomm-align,ddp-gloo,ddp-gloo-hugepages \
  --build-dir "$BUILD" --horovodrun "$RUN" --out "$OUT/torch_e2e_np2.md"

part "4 shaped hosts"
{ echo "\$ bench/netns_shaped.sh"; "$HERE/netns_shaped.sh" --build "$BUILD"; } | tee "$OUT/netns_shaped.txt"
part "done"
