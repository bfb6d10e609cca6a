// Samplers: which dataset indices an epoch visits, and in what order. Sequential, random (a
// Philox-driven shuffle, so the order is a pure function of seed and epoch), distributed (each
// rank gets a disjoint shard of one shared permutation), and the batch sampler that cuts an
// epoch's order into batches. All are cheap value-like objects: the loader asks for an epoch's
// order once per epoch, never per sample.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace stoke::data {

// An epoch's order of dataset indices. set_epoch() selects the epoch; indices() returns its order.
class Sampler {
 public:
  virtual ~Sampler() = default;
  // Number of indices one epoch yields.
  virtual int64_t size() const = 0;
  // Selects the epoch whose order indices() returns (a no-op for order-free samplers).
  virtual void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  // The current epoch's indices, in visiting order.
  virtual std::vector<int64_t> indices() const = 0;
  // The rest of the current epoch when the first `start` positions of its order (the order every
  // rank shares, of size() x world size positions) were visited already, by an earlier run at any
  // batch size or world size: a run resumed mid-epoch. The default, for samplers whose order is the
  // whole epoch's (one process), is indices() without its first `start`; DistributedSampler
  // shards the rest over the ranks. 0 <= start <= the epoch's positions.
  virtual std::vector<int64_t> indices_from(int64_t start) const;

 protected:
  int64_t epoch_ = 0;
};

// 0, 1, ..., n - 1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices() const override;

 private:
  int64_t n_;
};

// A permutation of [0, n) per epoch: a Fisher-Yates shuffle whose step i draws from
// philox4x32(counter = (epoch, i), key = seed). The same (seed, epoch) gives the same order on
// every machine; it equals InMemoryBatcher's order for the same seed and epoch.
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices() const override;

 private:
  int64_t n_;
  uint64_t seed_;
};

// The permutation of [0, n) for (seed, epoch), as RandomSampler and InMemoryBatcher make it.
std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, int64_t epoch);

// DistributedSampler options: DistributedSampler s(n, {.rank = 1, .world_size = 4, .seed = 7}).
struct DistributedSamplerOptions {
  int64_t rank = 0;
  int64_t world_size = 1;
  bool shuffle = true;     // every rank shuffles the same permutation from (seed, epoch)
  uint64_t seed = 0;       // must be equal on all ranks
  bool drop_last = false;  // false: pad with the first indices to equal shards; true: drop the tail
};

// Rank r's shard of the epoch: the (shuffled or sequential) order of all n indices is padded by
// repeating its first indices (or truncated, with drop_last) to a multiple of world_size, and rank
// r takes positions r, r + world_size, ... (PyTorch's DistributedSampler). Shards are disjoint
// apart from the padding and together cover the dataset (without padding: all but the n mod
// world_size dropped indices); every rank has size() indices, so ranks step in lockstep.
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t n, DistributedSamplerOptions options);
  int64_t size() const override { return per_rank_; }
  std::vector<int64_t> indices() const override;
  // Rank r's shard of the rest of the epoch: the shared order without its first `start` positions
  // (0 <= start <= n), padded (or truncated) to a multiple of world_size as a whole epoch is, rank
  // r taking its positions r, r + world_size, ... So the job visits every sample it had not
  // visited once, whatever batch size and world size visited the first `start`.
  std::vector<int64_t> indices_from(int64_t start) const override;

 private:
  int64_t n_;
  DistributedSamplerOptions options_;
  int64_t per_rank_ = 0;
};

// BatchSampler options: BatchSampler b(sampler, {.batch_size = 128, .drop_last = true}).
struct BatchSamplerOptions {
  int64_t batch_size = 128;
  bool drop_last = false;  // drop the last batch when it is smaller than batch_size
};

// Cuts a sampler's epoch order into batches: batch i holds order[i * batch_size, ...).
class BatchSampler {
 public:
  BatchSampler(std::shared_ptr<Sampler> sampler, BatchSamplerOptions options);
  // Sets the sampler's epoch and fetches that epoch's order, without the first `start` positions
  // of the shared order (Sampler::indices_from) when start > 0.
  void set_epoch(int64_t epoch, int64_t start = 0);
  int64_t epoch() const { return sampler_->epoch(); }
  int64_t num_batches() const;
  int64_t batch_size() const { return options_.batch_size; }
  // The dataset indices of batch `i` of the current epoch (valid until the next set_epoch).
  std::span<const int64_t> batch(int64_t i) const;
  // The current epoch's full order.
  const std::vector<int64_t>& order() const { return order_; }
  const Sampler& sampler() const { return *sampler_; }

 private:
  std::shared_ptr<Sampler> sampler_;
  BatchSamplerOptions options_;
  std::vector<int64_t> order_;
};

}  // namespace stoke::data
