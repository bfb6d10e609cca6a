#include "data/sampler.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "core/error.h"
#include "core/random.h"

namespace stoke::data {

std::vector<int64_t> Sampler::indices_from(int64_t start) const {
  std::vector<int64_t> all = indices();
  STOKE_CHECK(start >= 0 && start <= static_cast<int64_t>(all.size()), "Sampler", "start position ",
              start, " out of range: the epoch has ", all.size(), " positions");
  all.erase(all.begin(), all.begin() + start);
  return all;
}

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  STOKE_CHECK(n >= 0, "SequentialSampler", "expected a dataset size >= 0, got ", n);
}

std::vector<int64_t> SequentialSampler::indices() const {
  std::vector<int64_t> out(static_cast<size_t>(n_));
  std::iota(out.begin(), out.end(), int64_t{0});
  return out;
}

std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  // Fisher-Yates from the back: step i swaps i with j uniform in [0, i]. j comes from 64 Philox
  // bits by multiply-shift (bias below n / 2^64): a pure function of (seed, epoch, i). Kept
  // identical to InMemoryBatcher::set_epoch so that switching to the loader keeps the order.
  for (int64_t i = n - 1; i > 0; --i) {
    const auto r = philox4x32(static_cast<uint64_t>(epoch), static_cast<uint64_t>(i), seed);
    const uint64_t bits = (uint64_t{r[1]} << 32) | r[0];
    const auto j = static_cast<int64_t>(
        (static_cast<unsigned __int128>(bits) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  STOKE_CHECK(n >= 0, "RandomSampler", "expected a dataset size >= 0, got ", n);
}

std::vector<int64_t> RandomSampler::indices() const {
  return shuffled_indices(n_, seed_, epoch_);
}

DistributedSampler::DistributedSampler(int64_t n, DistributedSamplerOptions options)
    : n_(n), options_(options) {
  constexpr const char* kOp = "DistributedSampler";
  STOKE_CHECK(n >= 0, kOp, "expected a dataset size >= 0, got ", n);
  STOKE_CHECK(options.world_size >= 1, kOp, "expected world_size >= 1, got ", options.world_size);
  STOKE_CHECK(options.rank >= 0 && options.rank < options.world_size, kOp,
              "expected rank in [0, world_size = ", options.world_size, "), got ", options.rank);
  const int64_t w = options.world_size;
  per_rank_ = options.drop_last ? n / w : (n + w - 1) / w;
}

namespace {

// The order every rank shares this epoch: shuffled from (seed, epoch), or 0, 1, ..., n - 1.
std::vector<int64_t> epoch_order(int64_t n, const DistributedSamplerOptions& o, int64_t epoch) {
  if (o.shuffle) return shuffled_indices(n, o.seed, epoch);
  std::vector<int64_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), int64_t{0});
  return all;
}

}  // namespace

std::vector<int64_t> DistributedSampler::indices() const {
  const std::vector<int64_t> all = epoch_order(n_, options_, epoch_);
  const int64_t w = options_.world_size;
  std::vector<int64_t> out(static_cast<size_t>(per_rank_));
  // Position p of the padded order is all[p mod n]: padding repeats the order's beginning (more
  // than once when world_size > n), truncation simply never reaches the tail.
  for (int64_t k = 0; k < per_rank_; ++k) {
    const int64_t p = options_.rank + k * w;
    out[static_cast<size_t>(k)] = all[static_cast<size_t>(p < n_ ? p : p % n_)];
  }
  return out;
}

std::vector<int64_t> DistributedSampler::indices_from(int64_t start) const {
  STOKE_CHECK(start >= 0 && start <= n_, "DistributedSampler", "start position ", start,
              " out of range: the epoch has ", n_, " samples");
  if (start == 0) return indices();
  const std::vector<int64_t> all = epoch_order(n_, options_, epoch_);
  const int64_t w = options_.world_size, rest = n_ - start;
  const int64_t per_rank = options_.drop_last ? rest / w : (rest + w - 1) / w;
  std::vector<int64_t> out(static_cast<size_t>(per_rank));
  // As indices() over the order's remaining `rest` positions: padding repeats their beginning.
  for (int64_t k = 0; k < per_rank; ++k) {
    const int64_t p = options_.rank + k * w;
    out[static_cast<size_t>(k)] = all[static_cast<size_t>(start + (p < rest ? p : p % rest))];
  }
  return out;
}

BatchSampler::BatchSampler(std::shared_ptr<Sampler> sampler, BatchSamplerOptions options)
    : sampler_(std::move(sampler)), options_(options) {
  STOKE_CHECK(sampler_ != nullptr, "BatchSampler", "expected a sampler, got null");
  STOKE_CHECK(options.batch_size > 0, "BatchSampler", "expected batch_size > 0, got ",
              options.batch_size);
  order_ = sampler_->indices();
}

void BatchSampler::set_epoch(int64_t epoch, int64_t start) {
  sampler_->set_epoch(epoch);
  order_ = start == 0 ? sampler_->indices() : sampler_->indices_from(start);
}

int64_t BatchSampler::num_batches() const {
  const auto n = static_cast<int64_t>(order_.size());
  const int64_t b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

std::span<const int64_t> BatchSampler::batch(int64_t i) const {
  const int64_t nb = num_batches();
  STOKE_CHECK(i >= 0 && i < nb, "BatchSampler", "batch index ", i, " out of range: ", nb,
              " batches (", order_.size(), " indices, batch_size ", options_.batch_size,
              options_.drop_last ? ", drop_last" : "", ")");
  const int64_t start = i * options_.batch_size;
  const int64_t count =
      std::min<int64_t>(options_.batch_size, static_cast<int64_t>(order_.size()) - start);
  return {order_.data() + start, static_cast<size_t>(count)};
}

}  // namespace stoke::data
