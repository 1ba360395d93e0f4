#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang and runs each on a copy of its committed
# corpus. Exit 0: no target crashed; 1: a crash (its input is under <build>/crashes/<target>/,
# reproduce with <build>/tests/fuzz/fuzz_<target> <input>); 77: clang with libFuzzer is missing.
#
#   scripts/fuzz.sh [--seconds N] [--targets a,b] [--build DIR] [--report FILE] [--update-corpus]
#     --seconds N       time per target (default 20)
#     --targets a,b     only these targets (default: every tests/fuzz/targets/*.cc)
#     --build DIR       build directory (default build-fuzz)
#     --report FILE     append one markdown table row per target (executions, coverage, crashes)
#     --update-corpus   merge what the run found into tests/fuzz/corpus/<target> (minimised)
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=20
targets=""
build=build-fuzz
report=""
update=0
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --targets) targets=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --report) report=$2; shift 2 ;;
    --update-corpus) update=1; shift ;;
    *) sed -n '2,13p' "$0" >&2; exit 2 ;;
  esac
done

# clang must compile and link a libFuzzer program (clang's compiler-rt: libclang-rt-*-dev).
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' >"$probe/p.cc"
if ! command -v clang++ >/dev/null || ! clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cc" -o "$probe/p" 2>"$probe/err"; then
  echo "fuzz: skipped: clang++ cannot build libFuzzer targets ($(head -c 300 "$probe/err" 2>/dev/null || echo 'clang++ not found'))"
  exit 77
fi

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DHOROVOD_BUILD_FUZZERS=ON -DHOROVOD_BUILD_TESTS=OFF \
  -DHOROVOD_BUILD_BENCH=OFF -DHOROVOD_BUILD_EXAMPLES=OFF -DHOROVOD_WITH_MPI=OFF -DHOROVOD_SANITIZE=address,undefined \
  -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS='-O1 -g1' "${launcher[@]}" >/dev/null || exit 1
ninja -C "$build" -j"$(nproc)" fuzzers >/dev/null || { echo "fuzz: build failed"; exit 1; }

if [ -z "$targets" ]; then
  targets=$(ls tests/fuzz/targets/*.cc | xargs -n1 basename | sed 's/\.cc$//' | tr '\n' ',')
fi
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0
failed=()
for t in ${targets//,/ }; do
  bin="$build/tests/fuzz/fuzz_$t"
  work="$build/corpus/$t"
  crashes="$build/crashes/$t"
  rm -rf "$work" "$crashes" && mkdir -p "$work" "$crashes"
  cp tests/fuzz/corpus/"$t"/* "$work"/ 2>/dev/null
  log="$build/fuzz_$t.log"
  # Inputs up to 4 KiB (frames and files of that size reach every branch of these decoders);
  # a run over 10 s or 2 GiB is a finding too.
  "$bin" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$crashes/" "$work" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -ao 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  ft=$(grep -ao 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  ncrash=$(find "$crashes" -type f | wc -l)
  echo "fuzz: $t: ${execs:-0} executions in ${seconds} s, coverage ${cov:-?} edges / ${ft:-?} features, $ncrash crash(es), exit $rc"
  if [ "$rc" != 0 ] || [ "$ncrash" != 0 ]; then
    failed+=("$t")
    grep -a -m1 -A12 -E 'ERROR: |runtime error|fuzz invariant' "$log" | sed 's/^/    /'
  fi
  if [ -n "$report" ]; then
    echo "| $t | $seconds | ${execs:-0} | ${cov:-?} | ${ft:-?} | $ncrash |" >>"$report"
  fi
  if [ $update = 1 ]; then
    merged="$build/merged/$t"
    rm -rf "$merged" && mkdir -p "$merged" tests/fuzz/corpus/"$t"
    "$bin" -merge=1 -max_len=4096 "$merged" tests/fuzz/corpus/"$t" "$work" >/dev/null 2>&1
    rm -f tests/fuzz/corpus/"$t"/* && cp "$merged"/* tests/fuzz/corpus/"$t"/
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: FAILED targets: ${failed[*]}"
  exit 1
fi
echo "fuzz: every target ran clean"
