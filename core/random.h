// Reproducible random numbers: a counter-based Philox4x32-10 generator. Element i of a fill is a
// pure function of (seed, offset, i), so the numbers are the same on every machine and for every
// thread count, and the CUDA backend can produce the same stream.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

namespace stoke {

// One Philox4x32-10 block: four 32-bit outputs for a 128-bit counter and a 64-bit key.
std::array<uint32_t, 4> philox4x32(uint64_t counter_lo, uint64_t counter_hi, uint64_t key);

// Uniform float in [0, 1) from 24 random bits, and a double from 53.
inline float uint32_to_unit_float(uint32_t x) {
  return static_cast<float>(x >> 8) * 0x1p-24f;
}
inline double uint64_to_unit_double(uint64_t x) {
  return static_cast<double>(x >> 11) * 0x1p-53;
}

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // Philox blocks consumed so far
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) { state_.seed = seed; }

  void manual_seed(uint64_t seed);
  GeneratorState state() const;
  void set_state(GeneratorState s);

  // Reserves `blocks` Philox blocks and returns (seed, first block): a fill of n values that uses
  // 4 values per block calls reserve((n + 3) / 4) and then computes block `first + i / 4`.
  GeneratorState reserve(uint64_t blocks);

 private:
  mutable std::mutex mutex_;
  GeneratorState state_;
};

// The process-wide default generator (seed 0 until manual_seed is called).
Generator& default_generator();
inline void manual_seed(uint64_t seed) {
  default_generator().manual_seed(seed);
}

}  // namespace stoke
