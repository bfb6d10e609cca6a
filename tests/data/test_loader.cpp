// DataLoader: sampler order, byte-identical batches for 0/1/2/4 workers, resume mid-epoch, pooled
// buffers, the allocator hook, errors at the failing batch's position, and clean early stops
// (run under ThreadSanitizer and AddressSanitizer: no race, no leaked thread, no deadlock).
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "data/loader.h"

using namespace stoke;
using namespace stoke::data;
using Catch::Contains;

namespace {

// Sample i: an h x w x c image whose bytes identify (i, position), label i % 10. Optionally
// throws for one index, or makes one sample a different size.
class ToyDataset : public Dataset {
 public:
  ToyDataset(int64_t n, int64_t h, int64_t w, int64_t c) : n_(n), h_(h), w_(w), c_(c) {}
  int64_t size() const override { return n_; }
  int64_t num_classes() const override { return 10; }
  std::string describe(int64_t index) const override {
    return "toy/img" + std::to_string(index) + ".png";
  }
  void get(int64_t index, Example& out) const override {
    STOKE_CHECK(index != fail_at, "ToyDataset::get", "corrupt image ", describe(index));
    const int64_t h = index == odd_size_at ? h_ + 1 : h_;
    out.height = h;
    out.width = w_;
    out.channels = c_;
    out.label = index % 10;
    out.pixels.resize(static_cast<size_t>(h * w_ * c_));
    for (size_t j = 0; j < out.pixels.size(); ++j)
      out.pixels[j] = static_cast<uint8_t>((index * 37 + static_cast<int64_t>(j) * 11) % 251);
    ++gets;
  }
  int64_t fail_at = -1;
  int64_t odd_size_at = -1;
  mutable std::atomic<int64_t> gets{0};

 private:
  int64_t n_, h_, w_, c_;
};

struct Snapshot {
  std::vector<uint8_t> images;
  std::vector<int64_t> labels, indices;
  int64_t index = 0;
  bool operator==(const Snapshot&) const = default;
};

Snapshot snap(const Batch& b) {
  return {b.images.to_vector<uint8_t>(), b.labels.to_vector<int64_t>(),
          b.indices.to_vector<int64_t>(), b.index};
}

std::vector<Snapshot> epoch(DataLoader& loader, int64_t e, int64_t start = 0) {
  loader.set_epoch(e, start);
  std::vector<Snapshot> out;
  while (auto b = loader.next()) out.push_back(snap(*b));
  return out;
}

std::shared_ptr<const Transform> augment() {
  return std::make_shared<Compose>(std::vector<std::shared_ptr<const Transform>>{
      std::make_shared<RandomCrop>(
          RandomCropOptions{.padding = 2, .padding_mode = PaddingMode::reflect}),
      std::make_shared<HorizontalFlip>(), std::make_shared<Cutout>(CutoutOptions{.size = 3})});
}

}  // namespace

TEST_CASE("loader: batches follow the sampler's order and hold the dataset's samples",
          "[data][loader]") {
  auto ds = std::make_shared<ToyDataset>(23, 4, 3, 2);
  DataLoader loader(ds, {.batch_size = 5, .seed = 3});
  REQUIRE(loader.num_batches() == 5);
  const auto batches = epoch(loader, 1);
  REQUIRE(batches.size() == 5);
  const auto order = shuffled_indices(23, 3, 1);
  Example ex;
  for (size_t b = 0; b < batches.size(); ++b) {
    const Snapshot& s = batches[b];
    CHECK(s.index == static_cast<int64_t>(b));
    const size_t count = b < 4 ? 5 : 3;
    REQUIRE(s.labels.size() == count);
    for (size_t k = 0; k < count; ++k) {
      const int64_t i = order[b * 5 + k];
      CHECK(s.indices[k] == i);
      CHECK(s.labels[k] == i % 10);
      ds->get(i, ex);
      CHECK(std::memcmp(s.images.data() + k * 24, ex.pixels.data(), 24) == 0);
    }
  }
  // Sequential, drop_last.
  DataLoader seq(ds, {.batch_size = 5, .shuffle = false, .drop_last = true});
  const auto s = epoch(seq, 0);
  REQUIRE(s.size() == 4);
  CHECK(s[3].indices == std::vector<int64_t>{15, 16, 17, 18, 19});
}

TEST_CASE("loader: the same seed gives byte-identical batches for 0, 1, 2 and 4 workers",
          "[data][loader]") {
  auto ds = std::make_shared<ToyDataset>(203, 8, 7, 3);
  std::vector<std::vector<Snapshot>> runs;
  for (const int64_t workers : {0, 1, 2, 4}) {
    for (const int64_t prefetch : {1, 3}) {
      DataLoader loader(ds, {.batch_size = 16,
                             .seed = 99,
                             .workers = workers,
                             .prefetch = prefetch,
                             .transform = augment()});
      std::vector<Snapshot> all = epoch(loader, 0);
      const auto e1 = epoch(loader, 1);
      all.insert(all.end(), e1.begin(), e1.end());
      runs.push_back(std::move(all));
    }
  }
  REQUIRE(runs[0].size() == 2 * 13);
  for (size_t r = 1; r < runs.size(); ++r) {
    INFO("run " << r);
    CHECK(runs[r] == runs[0]);
  }
  CHECK(runs[0][0].images != runs[0][13].images);  // epochs differ (shuffle and augmentation)
}

TEST_CASE("loader: set_epoch with a start batch resumes mid-epoch", "[data][loader]") {
  auto ds = std::make_shared<ToyDataset>(100, 4, 4, 1);
  for (const int64_t workers : {0, 3}) {
    DataLoader loader(ds, {.batch_size = 8, .seed = 1, .workers = workers, .transform = augment()});
    const auto full = epoch(loader, 2);
    const auto tail = epoch(loader, 2, 5);
    REQUIRE(tail.size() == full.size() - 5);
    for (size_t i = 0; i < tail.size(); ++i) CHECK(tail[i] == full[i + 5]);
    CHECK(epoch(loader, 2, loader.num_batches()).empty());
    CHECK_THROWS_WITH(loader.set_epoch(0, 99), Contains("start batch 99"));
  }
}

TEST_CASE("loader: buffers are pooled, and held batches are never overwritten", "[data][loader]") {
  auto ds = std::make_shared<ToyDataset>(400, 6, 6, 1);
  DataLoader loader(ds, {.batch_size = 4, .seed = 2, .workers = 2, .prefetch = 2});
  // Dropping each batch before the next: the pool stays at about workers * (prefetch + 1).
  epoch(loader, 0);
  CHECK(loader.stats().batches == 100);
  CHECK(loader.stats().pool_buffers <= 2 * (2 + 1) + 2);
  // Holding every batch: new buffers instead of overwriting.
  loader.set_epoch(1);
  std::vector<Batch> held;
  while (auto b = loader.next()) held.push_back(std::move(*b));
  DataLoader reference(ds, {.batch_size = 4, .seed = 2});
  const auto want = epoch(reference, 1);
  REQUIRE(held.size() == want.size());
  for (size_t i = 0; i < held.size(); ++i) CHECK(snap(held[i]) == want[i]);
  CHECK(loader.stats().wait_seconds >= 0);
}

TEST_CASE("loader: a custom allocator's buffers go back to it when a batch is dropped",
          "[data][loader]") {
  // Pinned memory comes from such an allocator: only it knows when an asynchronous upload from a
  // buffer has run, so the loader does not reuse those buffers itself.
  auto ds = std::make_shared<ToyDataset>(40, 6, 6, 1);
  std::atomic<int64_t> allocations{0}, live{0};
  DataLoader loader(
      ds, {.batch_size = 4, .seed = 2, .workers = 2, .prefetch = 2, .allocator = [&](size_t n) {
             ++allocations;
             ++live;
             auto* s = new Storage(n, Device::cpu());
             return std::shared_ptr<Storage>(s, [&live](Storage* p) {
               --live;
               delete p;
             });
           }});
  const auto got = epoch(loader, 0);
  CHECK(got.size() == 10);
  CHECK(allocations.load() == 10);
  CHECK(loader.stats().pool_buffers == 10);
  // Every delivered batch was dropped by epoch(): its buffer was released, not kept in a pool
  // (the last one at most is still held: the loader lets go of it at the next call).
  CHECK(live.load() <= 1);
  DataLoader reference(ds, {.batch_size = 4, .seed = 2});
  CHECK(got == epoch(reference, 0));
}

TEST_CASE("loader: a failing sample reaches the consumer at its batch, naming index and path",
          "[data][loader]") {
  auto ds = std::make_shared<ToyDataset>(64, 3, 3, 1);
  const auto order = shuffled_indices(64, 4, 0);
  ds->fail_at = order[5 * 4 + 2];  // batch 5, position 2
  for (const int64_t workers : {0, 1, 2, 4}) {
    INFO("workers " << workers);
    DataLoader loader(ds, {.batch_size = 4, .seed = 4, .workers = workers, .prefetch = 2});
    loader.set_epoch(0);
    for (int b = 0; b < 5; ++b) REQUIRE(loader.next().has_value());
    const std::string idx = std::to_string(ds->fail_at);
    CHECK_THROWS_WITH(loader.next(),
                      Contains("DataLoader") && Contains("batch 5") && Contains("sample " + idx) &&
                          Contains("toy/img" + idx + ".png") && Contains("corrupt image"));
    // Later batches are not delivered: the failure repeats until set_epoch.
    CHECK_THROWS_WITH(loader.next(), Contains("sample " + idx));
    ds->fail_at = -1;
    CHECK(epoch(loader, 0).size() == 16);
    ds->fail_at = order[5 * 4 + 2];
  }
  ds->fail_at = -1;
  ds->odd_size_at = order[3];
  DataLoader loader(ds, {.batch_size = 4, .seed = 4, .workers = 2});
  loader.set_epoch(0);
  CHECK_THROWS_WITH(loader.next(), Contains("expected every image of a batch to be 3x3x1") &&
                                       Contains("got 4x3x1") &&
                                       Contains("sample " + std::to_string(order[3])));
}

TEST_CASE("loader: stopping mid-epoch joins every worker", "[data][loader]") {
  auto ds = std::make_shared<ToyDataset>(1000, 16, 16, 3);
  for (const int64_t workers : {1, 2, 4}) {
    {
      DataLoader loader(ds, {.batch_size = 8, .workers = workers, .prefetch = 3});
      loader.set_epoch(0);
      for (int b = 0; b < 3; ++b) REQUIRE(loader.next().has_value());
    }  // destroyed with full queues and workers blocked on them
    DataLoader loader(ds, {.batch_size = 8, .workers = workers, .transform = augment()});
    loader.set_epoch(0);
    REQUIRE(loader.next().has_value());
    loader.stop();
    CHECK_FALSE(loader.next().has_value());
    // Workers only ran ahead by their queues, not through the whole epoch.
    const int64_t before = ds->gets.load();
    CHECK_FALSE(loader.next().has_value());
    CHECK(ds->gets.load() == before);
    // set_epoch restarts after a stop.
    CHECK(epoch(loader, 1).size() == 125);
  }
}

TEST_CASE("loader: a distributed sampler gives each rank its shard", "[data][loader]") {
  auto ds = std::make_shared<ToyDataset>(50, 2, 2, 1);
  std::vector<int64_t> seen;
  for (int64_t rank = 0; rank < 3; ++rank) {
    auto sampler = std::make_shared<DistributedSampler>(
        50, DistributedSamplerOptions{.rank = rank, .world_size = 3, .seed = 8});
    DataLoader loader(ds, sampler, {.batch_size = 4, .workers = 2});
    for (const auto& b : epoch(loader, 3))
      seen.insert(seen.end(), b.indices.begin(), b.indices.end());
  }
  CHECK(seen.size() == 51);  // 17 per rank, one padded
  std::sort(seen.begin(), seen.end());
  CHECK(std::unique(seen.begin(), seen.end()) - seen.begin() == 50);
  CHECK_THROWS_WITH(DataLoader(ds, {.prefetch = 0}), Contains("prefetch >= 1"));
  CHECK_THROWS_WITH(DataLoader(nullptr, LoaderOptions{}), Contains("expected a dataset"));
}
