#!/usr/bin/env bash
# Reduced reproduction of the GCC 12 defect behind the AVX-512 ASan crash (docs/design-notes.md,
# "AddressSanitizer's fake stack and 64-byte-aligned temporaries"): with -fsanitize=address, a
# function whose stack frame needs 64-byte alignment lays its variables out relative to the top of
# the frame. On the real stack GCC aligns that top to 64 bytes; in ASan's fake stack
# (ASAN_OPTIONS=detect_stack_use_after_return=1) the top is the fake frame's base plus the frame
# size, which is only a multiple of 32. An aligned 64-byte load (vmovdqa64) of an
# initializer_list's backing array then faults when the frame size is 32 mod 64.
#
# Runs on any x86-64 machine: it compiles the function for AVX-512 (-march=x86-64-v4, generic
# tuning, as GCC 12's -march=native gives on a CPU it does not know, e.g. Zen 4), reads the frame
# size and the load's offset from the assembly, and says whether the fake-stack address is
# misaligned. On a CPU with AVX-512 it also runs the program both ways.
# Usage: bash scripts/repro-gcc-asan-align.sh [compiler]   (default g++)
set -euo pipefail
cxx=${1:-g++}
dir=$(mktemp -d /tmp/stoke-asan-align.XXXXXX)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/repro.cpp" <<'CPP'
#include <cstdint>
#include <cstdio>
#include <vector>
struct Case { int64_t n, h, w, c; };  // 32 bytes: two of them are one zmm register
__attribute__((noinline)) int64_t use(const std::vector<Case>& v, const int64_t* x) {
  int64_t s = x[0];
  for (const Case& c : v) s += c.n * c.h + c.w * c.c;
  return s;
}
__attribute__((noinline)) int64_t f(bool quick) {
  int64_t extra[1] = {1};  // makes the ASan frame 480 bytes: 32 mod 64
  const std::vector<Case> cases =
      quick ? std::vector<Case>{{2, 5, 7, 3}, {1, 4, 9, 1}}
            : std::vector<Case>{{2, 5, 7, 3}, {1, 4, 9, 1}, {16, 32, 32, 3}, {3, 17, 19, 5}};
  return use(cases, extra);
}
int main(int argc, char**) { std::printf("sum %ld\n", static_cast<long>(f(argc == 1))); }
CPP
flags=(-O1 -march=x86-64-v4 -fno-tree-slp-vectorize -fsanitize=address)
"$cxx" "${flags[@]}" -S "$dir/repro.cpp" -o "$dir/repro.s"
echo "compiler: $("$cxx" --version | head -n 1); flags: ${flags[*]}"
# In f: 'leaq SIZE(%rXX), %rbx' sets the frame top from its base (real or fake stack); the first
# 'vmovdqa64 -OFF(%rbx), %zmm' is the aligned load of the initializer_list's array.
size=$(awk '/^_Z1fb:/{f=1} f && /leaq\t[0-9]+\(%r[0-9a-z]+\), %rbx/{sub(/^.*leaq\t/,""); sub(/\(.*/,""); print; exit}' "$dir/repro.s")
off=$(awk '/^_Z1fb:/{f=1} f && /vmovdqa64\t-[0-9]+\(%rbx\), %zmm/{sub(/^.*vmovdqa64\t-/,""); sub(/\(.*/,""); print; exit}' "$dir/repro.s")
if [[ -z "$size" || -z "$off" ]]; then
  echo "no 64-byte aligned load relative to the frame top: this compiler lays the frame out differently"
  exit 0
fi
mis=$(( (size - off) % 64 ))
echo "frame size $size bytes, aligned 64-byte load at top-$off: fake-stack address = base + $((size - off)), base 64-aligned -> address % 64 = $mis"
if [[ $mis != 0 ]]; then
  echo "defect present: with detect_stack_use_after_return=1 the vmovdqa64 faults (SIGSEGV)"
else
  echo "defect absent for this frame"
fi
if grep -qw avx512f /proc/cpuinfo; then
  "$cxx" "${flags[@]}" "$dir/repro.cpp" -o "$dir/repro"
  for uar in 0 1; do
    rc=0
    ASAN_OPTIONS=detect_stack_use_after_return=$uar "$dir/repro" >"$dir/out" 2>&1 || rc=$?
    echo "run, detect_stack_use_after_return=$uar: exit $rc ($(grep -m1 -oE 'sum [0-9]+|SEGV[^(]*' "$dir/out" || true))"
  done
else
  echo "(this CPU has no AVX-512: not run)"
fi
