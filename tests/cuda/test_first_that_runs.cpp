// cuda/vendor/first_that_runs.h: the fallback through ranked choices that cudnn_conv.cpp uses for
// its algorithms (the cuDNN side itself runs only on a GPU, in stoke-gpu-selftest).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "cuda/vendor/first_that_runs.h"

using stoke::cuda::first_that_runs;

TEST_CASE("cuda vendor: first_that_runs takes the first choice that runs, in rank order",
          "[cuda][runtime]") {
  std::vector<size_t> tried;
  const std::vector<std::string> outcome = {"CUDNN_STATUS_NOT_SUPPORTED", "", ""};
  const size_t used = first_that_runs(
      outcome.size(),
      [&](size_t i) {
        tried.push_back(i);
        return outcome[i];
      },
      "cuda::conv2d", "a forward convolution");
  CHECK(used == 1);
  CHECK(tried == std::vector<size_t>{0, 1});  // stops at the first that ran

  tried.clear();
  CHECK(first_that_runs(
            3,
            [&](size_t i) {
              tried.push_back(i);
              return std::string();
            },
            "op", "x") == 0);
  CHECK(tried.size() == 1);
}

TEST_CASE("cuda vendor: first_that_runs names every reason when no choice runs",
          "[cuda][runtime]") {
  const std::vector<std::string> outcome = {"algo 1: CUDNN_STATUS_NOT_SUPPORTED",
                                            "algo 0: its workspace: out of memory"};
  CHECK_THROWS_WITH(
      first_that_runs(
          outcome.size(), [&](size_t i) { return outcome[i]; }, "cuda::conv2d",
          "the cuDNN forward convolution of n=1"),
      Catch::Equals("stoke::cuda::conv2d: no choice ran for the cuDNN forward convolution of n=1 "
                    "(2 tried: choice 0: algo 1: CUDNN_STATUS_NOT_SUPPORTED; choice 1: algo 0: "
                    "its workspace: out of memory)"));
  CHECK_THROWS_WITH(first_that_runs(
                        0, [](size_t) { return std::string("never called"); }, "op", "nothing"),
                    Catch::Equals("stoke::op: no choice ran for nothing (0 tried)"));
}
