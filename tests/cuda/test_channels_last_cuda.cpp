// The channels_last memory format on emulated cuda tensors: every op a CNN of the zoo runs accepts
// NHWC input and equals its NCHW run (tests/support/channels_last_util.h).
#include <catch2/catch.hpp>

#include "ops_cuda_util.h"
#include "support/channels_last_util.h"

using namespace stoke;
using namespace stoke::test;

TEST_CASE("cuda: channels_last: every op of the zoo's CNNs accepts NHWC input and equals NCHW",
          "[channels_last]") {
  check_channels_last_equals_nchw(kCuda);
}
