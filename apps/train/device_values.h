// Scalars a training or evaluation loop computes on the device step after step (a loss, a count of
// correct predictions), kept there and read back in one copy when the host needs them: at a
// progress refresh, a log interval, a checkpoint or the end of an epoch. A step then makes no
// host round trip for its metrics (on the CPU the read is free and the trainer reads every step).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace stoke::train {

class DeviceValues {
 public:
  // Room for `capacity` pushes of one f32 value and `counts` i64 counts each, on `device`
  // (allocated once, here).
  DeviceValues(Device device, int64_t capacity, int64_t counts);

  // Appends a one-element floating tensor's value and `counts` one-element integer tensors, all on
  // the device, by device copies (no synchronization). Refused when full().
  void push(const Tensor& value, const std::vector<Tensor>& counts);
  int64_t size() const { return size_; }
  bool full() const { return size_ == capacity_; }

  struct Values {
    std::vector<double> value;                // per push, oldest first
    std::vector<std::vector<int64_t>> count;  // per push, its counts
  };
  // The values pushed since the last take (one read-back, an expected synchronization named by
  // `why`), and empties the buffer.
  Values take(const char* why);

 private:
  Tensor values_, counts_;  // f32 (capacity), i64 (capacity, counts)
  int64_t capacity_, columns_, size_ = 0;
};

}  // namespace stoke::train
