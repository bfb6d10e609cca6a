#include "data/cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/parallel.h"

namespace stoke::data {
namespace {

constexpr const char* kEncoded = "EncodedCache";
constexpr const char* kDecoded = "DecodedCache";

// Reads exactly `size` bytes of `path` into dst; the file must still have that size.
void read_exact(const std::string& path, uint8_t* dst, int64_t size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO: no hang
  if (fd < 0) STOKE_FAIL(kEncoded, "'", path, "': cannot open file: ", std::strerror(errno));
  int64_t got = 0;
  int err = 0;
  while (got <= size) {
    // Asks for one byte more than expected to notice a file that grew.
    uint8_t extra = 0;
    uint8_t* at = got < size ? dst + got : &extra;
    const size_t want = got < size ? static_cast<size_t>(size - got) : 1;
    const ssize_t r = ::pread(fd, at, want, static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) err = errno;
    if (r <= 0) break;
    got += r;
  }
  ::close(fd);
  if (err) STOKE_FAIL(kEncoded, "'", path, "': read error: ", std::strerror(err));
  STOKE_CHECK(got == size, kEncoded, "'", path, "': file changed size while being cached (", size,
              " bytes when scanned, ", got > size ? "more" : "fewer", " when read)");
}

}  // namespace

int64_t default_cache_budget() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return int64_t{4} << 30;
  return static_cast<int64_t>(pages) * page / 2;
}

namespace {

// A cache's budget in bytes: budget_bytes, checked (>= 0) for `what`, or the default for 0.
int64_t budget_of(const char* what, int64_t budget_bytes) {
  STOKE_CHECK(budget_bytes >= 0, what, "expected budget_bytes >= 0, got ", budget_bytes);
  return budget_bytes ? budget_bytes : default_cache_budget();
}

}  // namespace

EncodedCache::EncodedCache(std::shared_ptr<const ImageFolderDataset> folder,
                           EncodedCacheOptions options)
    : folder_(std::move(folder)) {
  STOKE_CHECK(folder_ != nullptr, kEncoded, "expected an image folder, got a null pointer");
  const int64_t budget = budget_of(kEncoded, options.budget_bytes);
  const int64_t n = folder_->size();
  std::vector<int64_t> sizes(static_cast<size_t>(n));
  parallel_for(0, n, 256, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      struct stat st;
      if (::stat(folder_->path(i).c_str(), &st) != 0)
        STOKE_FAIL(kEncoded, "'", folder_->path(i), "': cannot stat: ", std::strerror(errno));
      sizes[static_cast<size_t>(i)] = static_cast<int64_t>(st.st_size);
    }
  });
  offsets_.assign(1, 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t next = offsets_.back() + sizes[static_cast<size_t>(i)];
    if (next > budget) {
      int64_t total = offsets_.back();
      for (int64_t j = i; j < n; ++j) total += sizes[static_cast<size_t>(j)];
      STOKE_CHECK(options.read_rest_from_disk, kEncoded, "the ", n, " files of '", folder_->root(),
                  "' take ", total, " bytes, more than the budget of ", budget,
                  " bytes (raise budget_bytes or set read_rest_from_disk)");
      break;
    }
    offsets_.push_back(next);
  }
  cached_ = static_cast<int64_t>(offsets_.size()) - 1;
  // Uninitialized on purpose: every byte is overwritten by the reads.
  bytes_.reset(new uint8_t[static_cast<size_t>(std::max<int64_t>(offsets_.back(), 1))]);
  parallel_for(0, cached_, 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      read_exact(folder_->path(i), bytes_.get() + offsets_[static_cast<size_t>(i)],
                 sizes[static_cast<size_t>(i)]);
  });
}

void EncodedCache::get(int64_t index, Example& out) const {
  if (index >= 0 && index < cached_) {
    const int64_t begin = offsets_[static_cast<size_t>(index)];
    folder_->decode(index, bytes_.get() + begin,
                    static_cast<size_t>(offsets_[static_cast<size_t>(index) + 1] - begin), out);
  } else {
    folder_->get(index, out);  // beyond the budget (or out of range: the folder reports it)
  }
}

DecodedCache::DecodedCache(std::shared_ptr<const Dataset> source, DecodedCacheOptions options)
    : source_(std::move(source)) {
  STOKE_CHECK(source_ != nullptr, kDecoded, "expected a dataset, got a null pointer");
  const int64_t budget = budget_of(kDecoded, options.budget_bytes);
  const int64_t n = source_->size();
  entries_.resize(static_cast<size_t>(n));
  if (n == 0) return;
  // The first sample's size guesses every sample's, so a dataset of one size is decoded into
  // arenas that never reallocate.
  Example first;
  source_->get(0, first);
  const int64_t guess = static_cast<int64_t>(first.pixels.size());
  constexpr int64_t kGrain = 64;
  arenas_.resize(static_cast<size_t>(parallel_chunk_count(n, kGrain)));
  std::atomic<int64_t> total{0};
  parallel_chunks(0, n, kGrain, [&](int64_t chunk, int64_t b, int64_t e) {
    std::vector<uint8_t>& arena = arenas_[static_cast<size_t>(chunk)];
    arena.reserve(static_cast<size_t>(std::min(guess * (e - b), budget)));
    Example ex;
    for (int64_t i = b; i < e; ++i) {
      source_->get(i, ex);
      const int64_t bytes = static_cast<int64_t>(ex.pixels.size());
      const int64_t now = total.fetch_add(bytes) + bytes;
      STOKE_CHECK(now <= budget, kDecoded, "decoded samples exceed the budget of ", budget,
                  " bytes (", now, " bytes at sample ", i, ", ", source_->describe(i), ", of ", n,
                  "); raise budget_bytes or use an EncodedCache");
      entries_[static_cast<size_t>(i)] = {.offset = static_cast<int64_t>(arena.size()),
                                          .chunk = static_cast<int32_t>(chunk),
                                          .height = static_cast<int32_t>(ex.height),
                                          .width = static_cast<int32_t>(ex.width),
                                          .channels = static_cast<int32_t>(ex.channels),
                                          .label = ex.label};
      arena.insert(arena.end(), ex.pixels.begin(), ex.pixels.end());
    }
    arena.shrink_to_fit();
  });
  total_bytes_ = total.load();
}

void DecodedCache::get(int64_t index, Example& out) const {
  STOKE_CHECK(index >= 0 && index < size(), kDecoded, "index ", index, " out of range [0, ", size(),
              ")");
  const Entry& en = entries_[static_cast<size_t>(index)];
  const size_t bytes = static_cast<size_t>(en.height) * static_cast<size_t>(en.width) *
                       static_cast<size_t>(en.channels);
  out.pixels.resize(bytes);
  std::memcpy(out.pixels.data(), arenas_[static_cast<size_t>(en.chunk)].data() + en.offset, bytes);
  out.height = en.height;
  out.width = en.width;
  out.channels = en.channels;
  out.label = en.label;
}

std::shared_ptr<Dataset> open_image_folder(const std::string& root, ImageFolderOptions options,
                                           CacheMode cache, int64_t budget_bytes) {
  auto folder = std::make_shared<ImageFolderDataset>(root, options);
  switch (cache) {
    case CacheMode::encoded:
      return std::make_shared<EncodedCache>(folder,
                                            EncodedCacheOptions{.budget_bytes = budget_bytes});
    case CacheMode::decoded:
      return std::make_shared<DecodedCache>(folder,
                                            DecodedCacheOptions{.budget_bytes = budget_bytes});
    case CacheMode::none:
      break;
  }
  return folder;
}

}  // namespace stoke::data
