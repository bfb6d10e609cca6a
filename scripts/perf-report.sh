#!/usr/bin/env bash
# Reruns the CPU benchmarks that docs/performance.md reports and regenerates it from their JSON
# records (scripts/perf-tables.py), so the page always states one run: its date, CPU and commit.
#
#   bash scripts/perf-report.sh [BUILD_DIR]   # default: build; takes about 15 min on 2 cores
#
# Run it on an otherwise idle machine: the benchmarks compare stoke with PyTorch in the same run
# (the peers need Debian's python3-torch; without it the torch columns stay empty).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$repo/build}
out=$(mktemp -d /tmp/stoke-perf.XXXXXX)
trap 'rm -rf "$out"' EXIT

run() {  # run NAME COMMAND...: the command's output, headed by the command, into $out/NAME.json
  local name=$1
  shift
  echo "--- $*"
  { echo "# command: ${*/#$build\//build/}"; "$@"; } >"$out/$name.json"
  tail -n 1 "$out/$name.json" | cut -c1-200
}

run train "$build/bench/stoke-bench-train-cpu" --models lenet5,resnet8,resnet20,vgg11,mobilenetv2
run ops "$build/bench/stoke-bench-ops-cpu"
run loader "$build/bench/stoke-bench-loader"
python3 "$repo/scripts/perf-tables.py" --out "$repo/docs/performance.md" \
  "$out/train.json" "$out/ops.json" "$out/loader.json"
