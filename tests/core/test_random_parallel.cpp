#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>

#include "stoke/stoke.h"

using namespace stoke;

TEST_CASE("philox4x32-10 matches the Random123 known-answer vectors", "[core][random]") {
  CHECK(philox4x32(0, 0, 0) ==
        std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  const auto r = philox4x32(0xffffffffffffffffull, 0xffffffffffffffffull, 0xffffffffffffffffull);
  CHECK(r == std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
}

TEST_CASE("random: same seed, same numbers, for every thread count", "[core][random]") {
  const int saved = num_threads();
  std::vector<std::vector<float>> runs;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    Generator g(42);
    Tensor a = randn({1001}, {}, &g);
    Tensor b = rand({77}, {}, &g);
    std::vector<float> v = a.to_vector<float>();
    const auto w = b.to_vector<float>();
    v.insert(v.end(), w.begin(), w.end());
    runs.push_back(v);
  }
  set_num_threads(saved);
  CHECK(runs[0] == runs[1]);
  CHECK(runs[0] == runs[2]);
  Generator g1(1), g2(2);
  CHECK(randn({16}, {}, &g1).to_vector<float>() != randn({16}, {}, &g2).to_vector<float>());
}

TEST_CASE("random: distributions have the right moments", "[core][random]") {
  Generator g(7);
  const auto n = randn({100000}, {.dtype = DType::f64}, &g).to_vector<double>();
  const double mean = std::accumulate(n.begin(), n.end(), 0.0) / n.size();
  double var = 0;
  for (double x : n) var += (x - mean) * (x - mean);
  var /= n.size();
  CHECK(std::fabs(mean) < 0.01);
  CHECK(std::fabs(var - 1) < 0.02);
  const auto u = rand({100000}, {}, &g).to_vector<float>();
  CHECK(*std::min_element(u.begin(), u.end()) >= 0.0f);
  CHECK(*std::max_element(u.begin(), u.end()) < 1.0f);
  CHECK(std::fabs(std::accumulate(u.begin(), u.end(), 0.0) / u.size() - 0.5) < 0.01);
  const auto r = randint(3, 6, {1000}, {.dtype = DType::i64}, &g).to_vector<int64_t>();
  CHECK(*std::min_element(r.begin(), r.end()) == 3);
  CHECK(*std::max_element(r.begin(), r.end()) == 5);
}

TEST_CASE("random: generator state round-trips", "[core][random]") {
  Generator g(3);
  (void)rand({10}, {}, &g);
  const GeneratorState s = g.state();
  const auto a = rand({10}, {}, &g).to_vector<float>();
  g.set_state(s);
  CHECK(rand({10}, {}, &g).to_vector<float>() == a);  // exact: a rerun from the same state
}

TEST_CASE("parallel_for covers the range once, chunks are static, exceptions propagate",
          "[core][parallel]") {
  std::vector<std::atomic<int>> hits(10007);
  parallel_for(0, 10007, 10, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[i]++;
  });
  for (auto& h : hits) REQUIRE(h == 1);
  std::atomic<int> nested{0};
  parallel_for(0, 4, 1, [&](int64_t ob, int64_t oe) {
    CHECK(in_parallel_region());
    for (int64_t i = ob; i < oe; ++i)
      parallel_for(0, 100, 1, [&](int64_t b, int64_t e) { nested += static_cast<int>(e - b); });
  });
  CHECK(nested == 400);
  CHECK_THROWS_WITH(parallel_for(0, 100, 1,
                                 [](int64_t b, int64_t) {
                                   if (b == 0) throw Error("boom");
                                 }),
                    "boom");
  CHECK_FALSE(in_parallel_region());
  CHECK(parallel_chunk_count(0, 1) == 0);
  CHECK(parallel_chunk_count(5, 100) == 1);
}

TEST_CASE("parallel_for after resizing the pool runs each loop exactly once", "[core][parallel]") {
  // Regression: workers started by set_num_threads once replayed the previous loop.
  const int saved = num_threads();
  for (int round = 0; round < 200; ++round) {
    set_num_threads(1 + round % 3);
    std::atomic<int> count{0};
    parallel_for(0, 64, 1, [&](int64_t b, int64_t e) { count += static_cast<int>(e - b); });
    REQUIRE(count == 64);
  }
  set_num_threads(saved);
}
