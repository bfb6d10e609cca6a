// The channels_last memory format (Tensor::contiguous(MemoryFormat::channels_last)) on the CPU:
// the layout's strides and copies, and every op a CNN of the zoo runs accepting it.
#include <catch2/catch.hpp>

#include "support/channels_last_util.h"

using namespace stoke;
using namespace stoke::test;

TEST_CASE("channels_last: strides, the copy's values, size-1 dims, and what is refused",
          "[channels_last]") {
  Generator g(2);
  const Tensor x = randn({2, 3, 4, 5}, {}, &g);
  CHECK(x.is_contiguous(MemoryFormat::contiguous));
  CHECK_FALSE(x.is_contiguous(MemoryFormat::channels_last));
  CHECK(x.suggest_memory_format() == MemoryFormat::contiguous);
  const Tensor y = x.contiguous(MemoryFormat::channels_last);
  CHECK(y.strides() == Shape{60, 1, 15, 3});
  CHECK(y.shape() == x.shape());
  // Element (n, c, h, w) at n*60 + h*15 + w*3 + c of the buffer: an independent index loop.
  const std::vector<float> xv = x.to_vector<float>();
  const float* buf = y.data<float>();
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t w = 0; w < 5; ++w)
          CHECK(buf[n * 60 + h * 15 + w * 3 + c] ==
                xv[static_cast<size_t>(((n * 3 + c) * 4 + h) * 5 + w)]);
  CHECK(y.contiguous(MemoryFormat::channels_last).data_ptr() == y.data_ptr());  // no copy
  CHECK(y.contiguous().strides() == Shape{60, 20, 5, 1});
  CHECK(y.contiguous().to_vector<float>() == xv);
  // One channel, or 1x1 images: both layouts at once (size-1 dims do not count, as in torch).
  const Tensor one_channel = randn({2, 1, 4, 5}, {}, &g);
  CHECK(one_channel.is_contiguous(MemoryFormat::channels_last));
  CHECK(one_channel.suggest_memory_format() == MemoryFormat::contiguous);
  CHECK(randn({3, 8, 1, 1}, {}, &g).is_contiguous(MemoryFormat::channels_last));
  // The gradient comes back through the copy.
  Tensor leaf = x.clone();
  leaf.set_requires_grad(true);
  sum(mul(leaf.contiguous(MemoryFormat::channels_last), 3.0)).backward();
  CHECK(leaf.grad().to_vector<float>() == std::vector<float>(120, 3.0f));
  CHECK_FALSE(randn({2, 3, 4}, {}, &g).is_contiguous(MemoryFormat::channels_last));
  CHECK_THROWS_WITH(randn({2, 3, 4}, {}, &g).contiguous(MemoryFormat::channels_last),
                    Catch::Contains("channels_last needs a 4-d") && Catch::Contains("[2, 3, 4]"));
}

TEST_CASE("channels_last: every op of the zoo's CNNs accepts NHWC input and equals NCHW",
          "[channels_last]") {
  check_channels_last_equals_nchw(Device::cpu());
}
