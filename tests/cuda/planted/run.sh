#!/usr/bin/env bash
# The emulator's planted-bug check: builds each program in tests/cuda/planted/ with g++ directly
# against cuda/emu/*.cpp (and core/error.cpp) under its sanitizer, runs it, and passes only if the
# sanitizer reports the planted bug at the program's line that carries the PLANTED comment. A
# program that runs clean, or a report elsewhere, fails the check. The race runs in the emulator's
# OS-thread mode (STOKE_EMU_THREADS=os), the only one where a block's threads are threads for
# ThreadSanitizer; the out-of-bounds read runs in both modes (AddressSanitizer follows the fiber
# mode's stack switches).
#
#   bash tests/cuda/planted/run.sh [WORK_DIR]     (CXX, CUDA_INCLUDE_DIR override the defaults)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
cxx=${CXX:-g++}
cuda_include=${CUDA_INCLUDE_DIR:-/usr/local/cuda/include}
work=${1:-}
if [[ -z $work ]]; then
  work=$(mktemp -d /tmp/stoke-planted.XXXXXX)
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"

# The emulator less its NCCL (which the planted programs do not call: a third of the compile time).
emu_sources=()
for f in "$repo"/cuda/emu/*.cpp; do
  [[ $(basename "$f") == nccl* ]] || emu_sources+=("$f")
done
emu_sources+=("$repo/core/error.cpp")
failures=0

# plant NAME SANITIZER REPORT MODE...: the program NAME.cpp under -fsanitize=SANITIZER, run in each
# emulator execution MODE (STOKE_EMU_THREADS), must print REPORT and name NAME.cpp:LINE, LINE
# being the one whose comment starts with "// PLANTED:".
plant() {
  local name=$1 sanitizer=$2 report=$3
  shift 3
  local src=$here/$name.cpp exe=$work/$name
  local line mode
  line=$(grep -n '// PLANTED:' "$src" | head -1 | cut -d: -f1)
  "$cxx" -std=c++20 -g -O1 -fno-omit-frame-pointer -fsanitize="$sanitizer" -pthread \
    -DSTOKE_CUDA_EMU=1 -I"$repo" -I"$cuda_include" "$src" "${emu_sources[@]}" -o "$exe"
  for mode in "$@"; do
    local log=$work/$name.$mode.log rc=0
    echo "planted: $name ($sanitizer, $mode): expecting '$report' at $name.cpp:$line"
    # The sanitizers' own halt/exit codes make the run fail; the report is what is checked.
    STOKE_EMU_THREADS=$mode TSAN_OPTIONS="halt_on_error=0 exitcode=66 ${TSAN_OPTIONS:-}" \
      ASAN_OPTIONS="detect_leaks=0 ${ASAN_OPTIONS:-}" "$exe" >"$log" 2>&1 || rc=$?
    if [[ $rc != 0 ]] && grep -q -- "$report" "$log" && grep -q -- "$name.cpp:$line" "$log"; then
      echo "planted: $name ($mode): caught (exit $rc)"
    else
      echo "planted: $name ($mode): NOT caught (exit $rc); the program's output:" >&2
      sed -n '1,80p' "$log" >&2
      failures=$((failures + 1))
    fi
  done
}

plant missing_syncthreads thread "WARNING: ThreadSanitizer: data race" os
plant out_of_bounds address "ERROR: AddressSanitizer: use-after-poison" os fibers

if [[ $failures != 0 ]]; then
  echo "planted: $failures planted bug(s) not caught" >&2
  exit 1
fi
echo "planted: all planted bugs caught"
