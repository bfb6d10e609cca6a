// The threaded data loader: worker threads build whole uint8 batches (read, transform, copy into
// a pooled buffer) ahead of the consumer, which takes them in sampler order.
//
// - Batch b of an epoch (counting from the batch the epoch started at) is built by worker
//   b mod workers; each worker keeps at most `prefetch` finished batches in its own queue, so
//   memory stays bounded and a slow consumer stalls the workers instead of growing queues.
// - Randomness is per sample (SampleRng from (seed, epoch, sample index)), never per worker, so
//   the batches are byte-identical for 0, 1, 2, ... workers.
// - Batch memory comes from a pool: one buffer per batch holding labels, indices and pixels. A
//   delivered batch's buffer returns to the pool once the consumer has dropped every tensor that
//   refers to it; the check runs on the consumer thread at each next(). Holding on to batches is
//   safe (the pool grows instead of overwriting them). `allocator` lets the CUDA backend supply
//   pinned host memory, so the host-to-device copy can be asynchronous.
// - A failing sample stops the epoch: its exception reaches the consumer at that batch's position,
//   naming the batch, the sample index and dataset->describe(index); later batches are not
//   delivered. Destroying the loader, stop() or set_epoch() wake and join every worker.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/storage.h"
#include "core/tensor.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "data/transforms.h"

namespace stoke::data {

// Returns host memory of at least `nbytes` for one batch buffer. The default is the CPU
// allocator; the CUDA backend passes one that returns pinned (page-locked) storage.
using BatchAllocator = std::function<std::shared_ptr<Storage>(size_t nbytes)>;

// DataLoader options: DataLoader loader(ds, {.batch_size = 128, .seed = 1, .workers = 2}).
struct LoaderOptions {
  int64_t batch_size = 128;
  bool shuffle = true;     // RandomSampler(seed) when no sampler is given, else SequentialSampler
  bool drop_last = false;  // drop the last batch when it is smaller than batch_size
  uint64_t seed = 0;       // the shuffle's and the transforms' seed
  int64_t workers = 0;     // worker threads; 0 builds each batch in the caller, inside next()
  int64_t prefetch = 2;    // finished batches each worker may hold ahead of the consumer
  std::shared_ptr<const Transform> transform = nullptr;  // applied to every sample; null = none
  // Batch buffers; null = CPU memory pooled by the loader. A custom allocator (pinned memory) is
  // asked for every batch and gets each buffer back when the batch's tensors are dropped: it
  // caches blocks and knows when a queued asynchronous copy from one has run.
  BatchAllocator allocator = nullptr;
};

// One batch, uint8 until the consumer normalizes it (data/normalize.h).
struct Batch {
  Tensor images;      // u8 (B, H, W, C), contiguous
  Tensor labels;      // i64 (B)
  Tensor indices;     // i64 (B): the dataset index of each sample
  int64_t index = 0;  // position of this batch in its epoch
  int64_t epoch = 0;
  double wait_seconds = 0;  // time next() spent before returning it (the data wait)
};

// Counters since construction (or reset_stats()).
struct LoaderStats {
  int64_t batches = 0;           // batches delivered
  double wait_seconds = 0;       // total time the consumer spent inside next()
  double last_wait_seconds = 0;  // for the latest batch
  int64_t pool_buffers = 0;      // batch buffers allocated so far (with a custom allocator,
                                 // one per batch: the allocator caches them)
};

class DataLoader {
 public:
  // Shuffles with RandomSampler(dataset size, seed) or visits in order (options.shuffle).
  DataLoader(std::shared_ptr<const Dataset> dataset, LoaderOptions options);
  // Visits `sampler`'s order (e.g. a DistributedSampler); options.shuffle is ignored.
  DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<Sampler> sampler,
             LoaderOptions options);
  // Stops and joins the workers.
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Batches per epoch.
  int64_t num_batches() const { return batches_.num_batches(); }
  // Samples per epoch (the sampler's size).
  int64_t size() const { return batches_.sampler().size(); }
  const Dataset& dataset() const { return *dataset_; }
  int64_t epoch() const { return epoch_; }

  // Stops the current epoch, selects `epoch` (reshuffling deterministically) and positions the
  // loader at batch `start_batch` (a resumed run continues mid-epoch). Workers start at the next
  // call to next().
  void set_epoch(int64_t epoch, int64_t start_batch = 0);

  // Selects `epoch` with the first `samples_done` positions of its order (the order every rank
  // shares) trained on already, by a run at any batch size and world size (a resumed run): the
  // loader delivers its sampler's share of the rest (Sampler::indices_from) from batch 0, and
  // num_batches() counts those batches until the next set_epoch().
  void resume_epoch(int64_t epoch, int64_t samples_done);

  // The next batch of the epoch in sampler order, or nullopt after the last one. Rethrows a
  // worker's exception (a stoke::Error naming batch, sample index and source) at the position of
  // the failing batch, and again on every later call until set_epoch().
  std::optional<Batch> next();

  // Stops the workers early (idempotent); the epoch then ends (next() returns nullopt) until
  // set_epoch() is called again.
  void stop();

  LoaderStats stats() const;
  void reset_stats();

 private:
  struct Item {  // a finished batch (or its failure) in a worker's queue
    int64_t index = 0;
    std::shared_ptr<Storage> buffer;
    int64_t count = 0, height = 0, width = 0, channels = 0;
    std::exception_ptr error;
  };
  struct Worker {
    std::thread thread;
    std::deque<Item> queue;
  };
  // Scratch images of one builder (a worker thread, or the caller when workers == 0).
  struct Scratch {
    Example image, spare;
  };

  void start_workers();
  void join_workers();
  void worker_loop(int64_t w);
  // Builds batch `b` of the current epoch; errors are returned in Item::error, never thrown.
  Item build(int64_t b, Scratch& s);
  std::shared_ptr<Storage> acquire_buffer(size_t nbytes);
  void recycle_lent();
  Batch deliver(Item& item, double wait_seconds);

  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions options_;
  BatchSampler batches_;
  int64_t epoch_ = 0;
  int64_t next_ = 0;      // next batch to deliver
  int64_t started_ = 0;   // the batch the workers started from
  bool running_ = false;  // workers exist
  bool stopped_ = false;  // stop() ended the epoch early
  std::exception_ptr failure_;
  Scratch caller_scratch_;
  LoaderStats stats_;

  std::atomic<int64_t> pool_buffers_{0};
  std::mutex mu_;  // guards workers_[*].queue, free_, stop_
  std::condition_variable consumer_cv_, worker_cv_;
  bool stop_ = false;
  std::vector<Worker> workers_;
  std::vector<std::shared_ptr<Storage>> free_;  // buffers ready for reuse
  std::vector<std::shared_ptr<Storage>> lent_;  // delivered buffers (consumer thread only)
};

}  // namespace stoke::data
