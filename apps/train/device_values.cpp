#include "device_values.h"

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/sync_debug.h"
#include "stoke/stoke.h"

namespace stoke::train {

DeviceValues::DeviceValues(Device device, int64_t capacity, int64_t counts)
    : values_(zeros({capacity}, {.device = device})),
      counts_(zeros({capacity, counts}, {.dtype = DType::i64, .device = device})),
      capacity_(capacity),
      columns_(counts) {
  STOKE_CHECK(capacity > 0 && counts >= 0, "DeviceValues",
              "expected a capacity > 0 and counts >= 0, got ", capacity, " and ", counts);
}

void DeviceValues::push(const Tensor& value, const std::vector<Tensor>& counts) {
  STOKE_CHECK(!full(), "DeviceValues::push", "all ", capacity_,
              " slots hold values not yet taken: take() them first");
  STOKE_CHECK(static_cast<int64_t>(counts.size()) == columns_, "DeviceValues::push", "expected ",
              columns_, " counts, got ", counts.size());
  STOKE_CHECK(value.numel() == 1, "DeviceValues::push", "expected a one-element value, got shape ",
              value.shape());
  NoGradGuard no_grad;
  Tensor v = value.detach().reshape({1});
  if (v.dtype() != DType::f32) v = v.to(DType::f32);
  values_.narrow(0, size_, 1).copy_(v);
  for (int64_t j = 0; j < columns_; ++j) {
    const Tensor& c = counts[static_cast<size_t>(j)];
    STOKE_CHECK(c.numel() == 1, "DeviceValues::push", "expected one-element counts, got shape ",
                c.shape());
    Tensor cv = c.detach().reshape({1, 1});
    if (cv.dtype() != DType::i64) cv = cv.to(DType::i64);
    counts_.narrow(0, size_, 1).narrow(1, j, 1).copy_(cv);
  }
  ++size_;
}

DeviceValues::Values DeviceValues::take(const char* why) {
  Values out;
  if (size_ == 0) return out;
  const ExpectedSync expected(why);
  const std::vector<float> v = values_.narrow(0, 0, size_).to_vector<float>();
  const std::vector<int64_t> c =
      columns_ > 0 ? counts_.narrow(0, 0, size_).to_vector<int64_t>() : std::vector<int64_t>{};
  out.value.assign(v.begin(), v.end());
  out.count.resize(static_cast<size_t>(size_));
  for (int64_t i = 0; i < size_; ++i)
    out.count[static_cast<size_t>(i)].assign(c.begin() + i * columns_,
                                             c.begin() + (i + 1) * columns_);
  size_ = 0;
  return out;
}

}  // namespace stoke::train
