// Samplers: sequential and random orders, the distributed shards (disjoint, covering, equal
// sizes) for world sizes 1-8, and the batch sampler's cuts.
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <vector>

#include "core/tensor.h"
#include "data/batcher.h"
#include "data/sampler.h"

using namespace stoke;
using namespace stoke::data;
using Catch::Contains;

namespace {

std::vector<int64_t> iota_vec(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

TEST_CASE("sampler: sequential visits 0..n-1 every epoch", "[data][sampler]") {
  SequentialSampler s(5);
  CHECK(s.size() == 5);
  CHECK(s.indices() == iota_vec(5));
  s.set_epoch(3);
  CHECK(s.indices() == iota_vec(5));
  CHECK(SequentialSampler(0).indices().empty());
  CHECK_THROWS_WITH(SequentialSampler(-1), Contains("SequentialSampler") && Contains("-1"));
}

TEST_CASE("sampler: random is a seeded permutation that set_epoch reshuffles", "[data][sampler]") {
  const int64_t n = 257;
  RandomSampler a(n, 11), b(n, 11), c(n, 12);
  const auto e0 = a.indices();
  CHECK(sorted(e0) == iota_vec(n));
  CHECK(e0 != iota_vec(n));
  CHECK(b.indices() == e0);  // same seed, same epoch
  CHECK(c.indices() != e0);  // another seed
  a.set_epoch(1);
  const auto e1 = a.indices();
  CHECK(sorted(e1) == iota_vec(n));
  CHECK(e1 != e0);
  a.set_epoch(0);
  CHECK(a.indices() == e0);  // deterministic per epoch, not a running state
  // The same order as InMemoryBatcher, so training keeps its sample order on the loader.
  Tensor images = empty({n, 2, 2}, {.dtype = DType::u8});
  Tensor labels = empty({n}, {.dtype = DType::i64});
  std::fill_n(images.data<uint8_t>(), images.numel(), uint8_t{0});
  std::fill_n(labels.data<int64_t>(), n, int64_t{0});
  InMemoryBatcher batcher(images, labels, {.batch_size = 8, .seed = 11});
  batcher.set_epoch(1);
  CHECK(batcher.order() == e1);
}

TEST_CASE("sampler: distributed shards are disjoint and cover the dataset, world 1-8",
          "[data][sampler]") {
  for (const int64_t n : {1, 2, 7, 13, 100, 101, 1001}) {
    for (int64_t world = 1; world <= 8; ++world) {
      for (const bool drop_last : {false, true}) {
        for (const bool shuffle : {false, true}) {
          INFO("n " << n << " world " << world << " drop_last " << drop_last << " shuffle "
                    << shuffle);
          std::vector<std::vector<int64_t>> shards;
          for (int64_t r = 0; r < world; ++r) {
            DistributedSampler s(n, {.rank = r,
                                     .world_size = world,
                                     .shuffle = shuffle,
                                     .seed = 5,
                                     .drop_last = drop_last});
            s.set_epoch(2);
            shards.push_back(s.indices());
            REQUIRE(static_cast<int64_t>(shards.back().size()) == s.size());
          }
          // Equal sizes: ceil(n / world) padded, floor(n / world) dropped.
          const int64_t per = drop_last ? n / world : (n + world - 1) / world;
          std::map<int64_t, int64_t> count;
          for (const auto& sh : shards) {
            REQUIRE(static_cast<int64_t>(sh.size()) == per);
            for (int64_t i : sh) {
              REQUIRE(i >= 0);
              REQUIRE(i < n);
              ++count[i];
            }
          }
          if (drop_last) {
            // Disjoint, and together all but the n mod world dropped indices.
            CHECK(static_cast<int64_t>(count.size()) == per * world);
            for (const auto& [i, k] : count) CHECK(k == 1);
          } else {
            // Covering; only the world * per - n padded positions repeat an index.
            CHECK(static_cast<int64_t>(count.size()) == n);
            int64_t repeats = 0;
            for (const auto& [i, k] : count) repeats += k - 1;
            CHECK(repeats == per * world - n);
          }
        }
      }
    }
  }
}

TEST_CASE("sampler: distributed set_epoch reshuffles the same way on every rank",
          "[data][sampler]") {
  const int64_t n = 50, world = 3;
  auto shard = [&](int64_t rank, int64_t epoch) {
    DistributedSampler s(n, {.rank = rank, .world_size = world, .seed = 9});
    s.set_epoch(epoch);
    return s.indices();
  };
  // Rank r takes positions r, r + world, ... of the shared permutation.
  const auto perm = shuffled_indices(n, 9, 4);
  const auto r1 = shard(1, 4);
  for (size_t k = 0; k < r1.size(); ++k) {
    const size_t p = 1 + k * world;
    CHECK(r1[k] == perm[p % static_cast<size_t>(n)]);
  }
  CHECK(shard(1, 4) == r1);
  CHECK(shard(1, 5) != r1);
  CHECK_THROWS_WITH(DistributedSampler(10, {.rank = 3, .world_size = 3}),
                    Contains("DistributedSampler") && Contains("rank") && Contains("3"));
  CHECK_THROWS_WITH(DistributedSampler(10, {.rank = 0, .world_size = 0}), Contains("world_size"));
}

TEST_CASE("sampler: batch sampler cuts the order, with and without drop_last", "[data][sampler]") {
  auto seq = std::make_shared<SequentialSampler>(10);
  BatchSampler keep(seq, {.batch_size = 4});
  REQUIRE(keep.num_batches() == 3);
  CHECK(std::vector<int64_t>(keep.batch(0).begin(), keep.batch(0).end()) ==
        std::vector<int64_t>{0, 1, 2, 3});
  CHECK(std::vector<int64_t>(keep.batch(2).begin(), keep.batch(2).end()) ==
        std::vector<int64_t>{8, 9});
  BatchSampler drop(seq, {.batch_size = 4, .drop_last = true});
  CHECK(drop.num_batches() == 2);
  CHECK_THROWS_WITH(drop.batch(2),
                    Contains("BatchSampler") && Contains("batch index 2") && Contains("2 batches"));
  CHECK_THROWS_WITH(BatchSampler(seq, {.batch_size = 0}), Contains("batch_size > 0"));

  auto rnd = std::make_shared<RandomSampler>(10, 3);
  BatchSampler b(rnd, {.batch_size = 3});
  b.set_epoch(7);
  CHECK(b.epoch() == 7);
  CHECK(b.order() == shuffled_indices(10, 3, 7));
  CHECK(b.batch(1)[0] == b.order()[3]);
}

TEST_CASE("sampler: an epoch resumed at another world size and batch visits each sample once",
          "[data][sampler]") {
  // A job of `w1` ranks at batch `b1` trains `batches` batches per rank (all ranks in step, as a
  // checkpoint sees them), then one of `w2` ranks at batch `b2` takes the epoch over from the
  // samples the first visited (batches x b1 x w1 of the order). Together they must visit every
  // index of the epoch once, apart from the padding that makes the second job's shards equal
  // (fewer than w2 repeats, as in any epoch: none when the rest divides by w2).
  const int64_t n = 1000;
  struct Case {
    int64_t w1, b1, batches, w2, b2;
  };
  for (const Case c : {Case{2, 16, 5, 1, 16}, Case{2, 16, 5, 3, 16}, Case{3, 16, 4, 2, 16},
                       Case{1, 64, 3, 4, 7}, Case{4, 8, 1, 3, 50}, Case{2, 16, 31, 3, 16}}) {
    INFO("w " << c.w1 << " x b " << c.b1 << " for " << c.batches << " batches, then w " << c.w2
              << " x b " << c.b2);
    std::map<int64_t, int64_t> count;
    for (int64_t r = 0; r < c.w1; ++r) {
      auto s = std::make_shared<DistributedSampler>(
          n, DistributedSamplerOptions{.rank = r, .world_size = c.w1, .seed = 4});
      BatchSampler batches(s, {.batch_size = c.b1});
      batches.set_epoch(3);
      for (int64_t b = 0; b < c.batches; ++b)
        for (int64_t i : batches.batch(b)) ++count[i];
    }
    const int64_t done = c.batches * c.b1 * c.w1;
    REQUIRE(done <= n);
    const int64_t rest = n - done;
    int64_t visited = 0;
    for (int64_t r = 0; r < c.w2; ++r) {
      auto s = std::make_shared<DistributedSampler>(
          n, DistributedSamplerOptions{.rank = r, .world_size = c.w2, .seed = 4});
      BatchSampler batches(s, {.batch_size = c.b2});
      batches.set_epoch(3, done);
      for (int64_t b = 0; b < batches.num_batches(); ++b)
        for (int64_t i : batches.batch(b)) {
          ++count[i];
          ++visited;
        }
    }
    CHECK(static_cast<int64_t>(count.size()) == n);
    const int64_t padding = (c.w2 - rest % c.w2) % c.w2;
    CHECK(visited == rest + padding);
    int64_t repeats = 0;
    for (const auto& [i, k] : count) repeats += k - 1;
    CHECK(repeats == padding);
    // In one process (RandomSampler) the rest is the order's tail.
    RandomSampler one(n, 4);
    one.set_epoch(3);
    const std::vector<int64_t> all = one.indices();
    CHECK(one.indices_from(done) == std::vector<int64_t>(all.begin() + done, all.end()));
  }
  DistributedSampler s(10, {.rank = 0, .world_size = 2});
  CHECK(s.indices_from(10).empty());
  CHECK_THROWS_WITH(s.indices_from(11), Contains("start position 11 out of range"));
}
