// The channels_last memory format on emulated cuda tensors: every op a CNN of the zoo runs accepts
// NHWC input, keeps it, and equals its NCHW run; a model trains in it as in NCHW
// (tests/support/channels_last_util.h).
#include <catch2/catch.hpp>

#include "ops_cuda_util.h"
#include "support/channels_last_util.h"

using namespace stoke;
using namespace stoke::test;

TEST_CASE("cuda: channels_last: every op of the zoo's CNNs accepts NHWC input and equals NCHW",
          "[channels_last]") {
  check_channels_last_equals_nchw(kCuda);
}

TEST_CASE(
    "cuda: channels_last: ResNet-8 keeps NHWC through every layer and trains as in NCHW bit for "
    "bit, in f32 and under f16 autocast",
    "[channels_last]") {
  check_model_channels_last("resnet8", 3, 8, kCuda, 2);
  check_model_channels_last("resnet8", 3, 8, kCuda, 2, DType::f16);  // under autocast
}
