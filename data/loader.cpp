#include "data/loader.h"

#include <chrono>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/profiler.h"

namespace stoke::data {

namespace {

constexpr const char* kLoaderOp = "DataLoader";

std::shared_ptr<Sampler> default_sampler(const std::shared_ptr<const Dataset>& dataset,
                                         const LoaderOptions& options) {
  STOKE_CHECK(dataset != nullptr, kLoaderOp, "expected a dataset, got null");
  if (options.shuffle) return std::make_shared<RandomSampler>(dataset->size(), options.seed);
  return std::make_shared<SequentialSampler>(dataset->size());
}

// dataset->describe(index), or a note when describing fails too (an error message must not
// throw while it is being built).
std::string describe_safely(const Dataset& dataset, int64_t index) {
  try {
    return dataset.describe(index);
  } catch (const std::exception& e) {
    return stoke::detail::str_cat("<describe failed: ", e.what(), ">");
  }
}

// Bytes of a batch buffer: labels and indices (i64, so they come first and stay aligned), then
// the pixels.
size_t buffer_bytes(int64_t count, int64_t sample_bytes) {
  return static_cast<size_t>(count * (2 * static_cast<int64_t>(sizeof(int64_t)) + sample_bytes));
}

}  // namespace

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, LoaderOptions options)
    : DataLoader(dataset, default_sampler(dataset, options), std::move(options)) {}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<Sampler> sampler,
                       LoaderOptions options)
    : dataset_(std::move(dataset)),
      options_(std::move(options)),
      batches_(std::move(sampler),
               {.batch_size = options_.batch_size, .drop_last = options_.drop_last}) {
  STOKE_CHECK(dataset_ != nullptr, kLoaderOp, "expected a dataset, got null");
  STOKE_CHECK(options_.workers >= 0, kLoaderOp, "expected workers >= 0, got ", options_.workers);
  STOKE_CHECK(options_.prefetch >= 1, kLoaderOp, "expected prefetch >= 1, got ", options_.prefetch);
  epoch_ = batches_.epoch();
}

DataLoader::~DataLoader() {
  join_workers();
}

LoaderStats DataLoader::stats() const {
  LoaderStats s = stats_;
  s.pool_buffers = pool_buffers_.load();
  return s;
}

void DataLoader::reset_stats() {
  stats_ = {};
}

void DataLoader::set_epoch(int64_t epoch, int64_t start_batch) {
  join_workers();
  batches_.set_epoch(epoch);
  const int64_t nb = batches_.num_batches();
  STOKE_CHECK(start_batch >= 0 && start_batch <= nb, kLoaderOp, "start batch ", start_batch,
              " out of range: epoch ", epoch, " has ", nb, " batches");
  epoch_ = epoch;
  next_ = start_batch;
  stopped_ = false;
  failure_ = nullptr;
}

void DataLoader::resume_epoch(int64_t epoch, int64_t samples_done) {
  join_workers();
  batches_.set_epoch(epoch, samples_done);
  epoch_ = epoch;
  next_ = 0;
  stopped_ = false;
  failure_ = nullptr;
}

void DataLoader::stop() {
  join_workers();
  stopped_ = true;
}

void DataLoader::start_workers() {
  {
    std::lock_guard lock(mu_);
    stop_ = false;
  }
  started_ = next_;
  workers_ = std::vector<Worker>(static_cast<size_t>(options_.workers));
  running_ = true;
  for (int64_t w = 0; w < options_.workers; ++w)
    workers_[static_cast<size_t>(w)].thread = std::thread([this, w] { worker_loop(w); });
}

void DataLoader::join_workers() {
  if (!running_) return;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  worker_cv_.notify_all();
  for (auto& w : workers_)
    if (w.thread.joinable()) w.thread.join();
  // Batches built but never delivered go back to the pool.
  for (auto& w : workers_)
    for (auto& item : w.queue)
      if (item.buffer) free_.push_back(std::move(item.buffer));
  workers_.clear();
  running_ = false;
}

void DataLoader::worker_loop(int64_t w) {
  profiler::set_thread_name(::stoke::detail::str_cat("loader worker ", w));
  Scratch scratch;
  const int64_t nb = batches_.num_batches(), n_workers = options_.workers;
  Worker& me = workers_[static_cast<size_t>(w)];
  for (int64_t b = started_ + w; b < nb; b += n_workers) {
    {
      std::unique_lock lock(mu_);
      worker_cv_.wait(
          lock, [&] { return stop_ || static_cast<int64_t>(me.queue.size()) < options_.prefetch; });
      if (stop_) return;
    }
    Item item = [&] {
      const profiler::Range range("load batch", profiler::Category::data);
      return build(b, scratch);
    }();
    const bool failed = item.error != nullptr;
    {
      std::lock_guard lock(mu_);
      if (stop_) {
        if (item.buffer) free_.push_back(std::move(item.buffer));
        return;
      }
      me.queue.push_back(std::move(item));
    }
    consumer_cv_.notify_all();
    if (failed) return;  // the consumer stops the epoch when it reaches this batch
  }
}

std::shared_ptr<Storage> DataLoader::acquire_buffer(size_t nbytes) {
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i]->nbytes() >= nbytes) {
        std::shared_ptr<Storage> s = std::move(free_[i]);
        free_[i] = std::move(free_.back());
        free_.pop_back();
        return s;
      }
    }
    // None is large enough (images grew): drop one small buffer so the pool does not grow.
    if (!free_.empty()) free_.pop_back();
  }
  ++pool_buffers_;
  std::shared_ptr<Storage> s = options_.allocator
                                   ? options_.allocator(nbytes)
                                   : std::make_shared<Storage>(nbytes, Device::cpu());
  STOKE_CHECK(s != nullptr && s->nbytes() >= nbytes, kLoaderOp, "the batch allocator returned ",
              s ? s->nbytes() : 0, " bytes, expected at least ", nbytes);
  return s;
}

DataLoader::Item DataLoader::build(int64_t b, Scratch& s) {
  Item item;
  item.index = b;
  const std::span<const int64_t> idx = batches_.batch(b);
  const auto count = static_cast<int64_t>(idx.size());
  item.count = count;
  int64_t k = 0;
  try {
    int64_t sample_bytes = 0;
    int64_t* labels = nullptr;
    int64_t* indices = nullptr;
    uint8_t* pixels = nullptr;
    for (; k < count; ++k) {
      const int64_t i = idx[static_cast<size_t>(k)];
      dataset_->get(i, s.image);
      if (options_.transform) {
        SampleRng rng(options_.seed, epoch_, i);
        options_.transform->apply(s.image, s.spare, rng);
      }
      const Example& ex = s.image;
      if (k == 0) {
        // The first sample fixes the batch's image shape and so the buffer size.
        item.height = ex.height;
        item.width = ex.width;
        item.channels = ex.channels;
        sample_bytes = ex.height * ex.width * ex.channels;
        item.buffer = acquire_buffer(buffer_bytes(count, sample_bytes));
        labels = static_cast<int64_t*>(item.buffer->data());
        indices = labels + count;
        pixels = reinterpret_cast<uint8_t*>(indices + count);
      }
      STOKE_CHECK(
          ex.height == item.height && ex.width == item.width && ex.channels == item.channels,
          kLoaderOp, "expected every image of a batch to be ", item.height, "x", item.width, "x",
          item.channels, " (as its first sample) after the transforms, got ", ex.height, "x",
          ex.width, "x", ex.channels, "; add a Resize or crop transform to make them equal");
      STOKE_CHECK(static_cast<int64_t>(ex.pixels.size()) == sample_bytes, kLoaderOp, "expected ",
                  sample_bytes, " pixel bytes, got ", ex.pixels.size());
      std::memcpy(pixels + k * sample_bytes, ex.pixels.data(), static_cast<size_t>(sample_bytes));
      labels[k] = ex.label;
      indices[k] = i;
    }
  } catch (const std::exception& e) {
    const int64_t i = idx[static_cast<size_t>(k)];
    item.error = std::make_exception_ptr(Error(
        stoke::detail::str_cat("stoke::DataLoader: epoch ", epoch_, ", batch ", b, ", sample ", i,
                               " (", describe_safely(*dataset_, i), "): ", e.what())));
  } catch (...) {
    item.error = std::current_exception();
  }
  return item;
}

void DataLoader::recycle_lent() {
  // A buffer is free again when only the pool refers to it: every tensor of the batch was
  // dropped. Checked here, on the consumer thread that dropped them. A buffer from a custom
  // allocator (pinned memory) goes back to that allocator instead: an asynchronous upload from
  // it may still be queued on a stream after its tensors are gone, and only the allocator knows
  // (record_stream) when the block may be written again.
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < lent_.size();) {
    if (lent_[i].use_count() == 1) {
      if (!options_.allocator) free_.push_back(std::move(lent_[i]));
      lent_[i] = std::move(lent_.back());
      lent_.pop_back();
    } else {
      ++i;
    }
  }
}

Batch DataLoader::deliver(Item& item, double wait_seconds) {
  Batch batch;
  batch.index = item.index;
  batch.epoch = epoch_;
  batch.wait_seconds = wait_seconds;
  const int64_t n = item.count;
  batch.labels = Tensor::from_storage(item.buffer, {n}, {1}, 0, DType::i64);
  batch.indices = Tensor::from_storage(item.buffer, {n}, {1}, n, DType::i64);
  const int64_t h = item.height, w = item.width, c = item.channels;
  batch.images = Tensor::from_storage(item.buffer, {n, h, w, c}, {h * w * c, w * c, c, 1},
                                      2 * n * static_cast<int64_t>(sizeof(int64_t)), DType::u8);
  lent_.push_back(std::move(item.buffer));
  ++stats_.batches;
  stats_.wait_seconds += wait_seconds;
  stats_.last_wait_seconds = wait_seconds;
  return batch;
}

std::optional<Batch> DataLoader::next() {
  if (failure_) std::rethrow_exception(failure_);
  const int64_t nb = batches_.num_batches();
  if (stopped_ || next_ >= nb) {
    join_workers();
    return std::nullopt;
  }
  const auto t0 = std::chrono::steady_clock::now();
  recycle_lent();
  Item item;
  if (options_.workers == 0) {
    item = build(next_, caller_scratch_);
  } else {
    if (!running_) start_workers();
    Worker& w = workers_[static_cast<size_t>((next_ - started_) % options_.workers)];
    {
      std::unique_lock lock(mu_);
      consumer_cv_.wait(lock, [&] { return !w.queue.empty(); });
      item = std::move(w.queue.front());
      w.queue.pop_front();
    }
    worker_cv_.notify_all();
  }
  if (item.error) {
    failure_ = item.error;
    if (item.buffer) {
      std::lock_guard lock(mu_);
      free_.push_back(std::move(item.buffer));
    }
    join_workers();
    std::rethrow_exception(failure_);
  }
  const double wait = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++next_;
  Batch batch = deliver(item, wait);
  if (next_ == nb) join_workers();  // every worker has finished its share
  return batch;
}

}  // namespace stoke::data
