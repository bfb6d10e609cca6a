#!/usr/bin/env bash
# Runs the libFuzzer harnesses (fuzz/) for a while each: bash scripts/fuzz.sh [SECONDS] [HARNESS...]
# (default 60 s, every harness). It builds them with clang in build-fuzz/ (ASan + UBSan + libFuzzer
# coverage in the libraries they link), runs each on a scratch copy of its seed corpus, two at a
# time (a harness runs on one core), and prints every crash, leak, timeout or out-of-memory input
# in base64 so that it can be added to fuzz/corpus/<harness>/ as a reproducer. Not a CI stage: CI
# replays the corpora in every build's ctest instead (docs/design-notes.md, "Fuzzing in CI").
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${1:-60}
shift || true
harnesses=("$@")
[[ ${#harnesses[@]} == 0 ]] && harnesses=(safetensors idx packed image train_flags report)
build=${STOKE_FUZZ_BUILD:-$repo/build-fuzz}
tmp=$(mktemp -d /tmp/stoke-fuzz.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# -O1 -gline-tables-only: reports with lines. File by file: clang's unity batches took 391 s to
# build here against about 260 s.
cmake -S "$repo" -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DSTOKE_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
  -DSTOKE_CUDA=OFF -DSTOKE_TESTS=OFF -DSTOKE_BENCH=OFF -DSTOKE_MPI=OFF -DSTOKE_UNITY_BUILD=OFF
cmake --build "$build" -j2 --target stoke_fuzz

failed=0
run_pair() {
  local pids=() h i=0
  for h in "$@"; do
    mkdir -p "$tmp/fuzz-$h"
    cp -r "$repo/fuzz/corpus/$h" "$tmp/fuzz-$h/corpus"
    (cd "$tmp/fuzz-$h" && "$build/fuzz/fuzz_$h" corpus -max_total_time="$seconds" \
      -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 >log 2>&1) &
    pids+=($!)
  done
  for h in "$@"; do
    echo "--- fuzz_$h: ${seconds} s"
    if wait "${pids[$i]}"; then
      grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' "$tmp/fuzz-$h/log" || true
    else
      tail -n 150 "$tmp/fuzz-$h/log"
      echo "fuzz_$h: FAILED; reproducers (base64):"
      for f in "$tmp/fuzz-$h"/{crash,leak,timeout,oom}-*; do
        [[ -e $f ]] && echo "$(basename "$f"): $(base64 -w0 "$f")"
      done
      failed=1
    fi
    i=$((i + 1))
  done
}
for ((k = 0; k < ${#harnesses[@]}; k += 2)); do
  run_pair "${harnesses[@]:k:2}"
done
exit "$failed"
