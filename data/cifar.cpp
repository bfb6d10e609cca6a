#include "data/cifar.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "core/parallel.h"
#include "data/image_decode.h"

namespace stoke::data {
namespace {

constexpr const char* kCifarOp = "CifarDataset";
namespace fs = std::filesystem;

std::vector<std::string> batch_files(const std::string& input, const CifarOptions& o) {
  if (!fs::is_directory(input)) {
    STOKE_CHECK(fs::exists(input), kCifarOp, "'", input,
                "' does not exist (expected a directory of ",
                o.variant == CifarVariant::cifar10 ? "CIFAR-10" : "CIFAR-100",
                " batch files or one .bin file)");
    return {input};
  }
  std::vector<std::string> names;
  if (o.variant == CifarVariant::cifar10) {
    if (o.train) {
      for (int i = 1; i <= 5; ++i)
        names.push_back(stoke::detail::str_cat("data_batch_", i, ".bin"));
    } else {
      names.push_back("test_batch.bin");
    }
  } else {
    names.push_back(o.train ? "train.bin" : "test.bin");
  }
  std::vector<std::string> paths;
  for (const auto& name : names) {
    const fs::path p = fs::path(input) / name;
    STOKE_CHECK(fs::exists(p), kCifarOp, "'", p.string(), "' does not exist (",
                o.train ? "train" : "test", " split of ",
                o.variant == CifarVariant::cifar10 ? "CIFAR-10" : "CIFAR-100", ")");
    paths.push_back(p.string());
  }
  return paths;
}

// Non-empty lines of a names file next to the batches, or {} when it is absent. Read as the
// batches are (read_file_bytes): a FIFO in its place is refused at once (an ifstream blocked on it
// until a writer came, and stoke-pack hung without a word).
std::vector<std::string> read_names(const fs::path& path) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return out;
  std::vector<uint8_t> bytes;
  read_file_bytes(path.string(), bytes);
  std::istringstream f(std::string(bytes.begin(), bytes.end()));
  std::string line;
  while (std::getline(f, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

}  // namespace

CifarDataset::CifarDataset(const std::string& input, CifarOptions options) {
  const bool c10 = options.variant == CifarVariant::cifar10;
  const int64_t label_bytes = c10 ? 1 : 2;
  const int64_t record = label_bytes + kImageBytes;
  // CIFAR-100 records are (coarse, fine): the fine label is the second byte.
  const int64_t label_at = c10 ? 0 : (options.coarse_labels ? 0 : 1);
  num_classes_ = c10 ? 10 : (options.coarse_labels ? 20 : 100);
  STOKE_CHECK(!(c10 && options.coarse_labels), kCifarOp,
              "coarse_labels is a CIFAR-100 option; CIFAR-10 has one label per record");

  std::vector<uint8_t> bytes;
  for (const auto& path : batch_files(input, options)) {
    read_file_bytes(path, bytes);
    const int64_t len = static_cast<int64_t>(bytes.size());
    STOKE_CHECK(len > 0 && len % record == 0, kCifarOp, "'", path, "': file length ", len,
                " bytes is not a positive multiple of the ", record, "-byte record (", label_bytes,
                " label byte", label_bytes > 1 ? "s" : "", " + ", kImageBytes, " pixel bytes)");
    const int64_t count = len / record;
    files_.push_back({path, n_});
    pixels_.resize(static_cast<size_t>((n_ + count) * kImageBytes));
    labels_.resize(static_cast<size_t>(n_ + count));
    for (int64_t r = 0; r < count; ++r) {
      const uint8_t label = bytes[static_cast<size_t>(r * record + label_at)];
      STOKE_CHECK(label < num_classes_, kCifarOp, "'", path, "': record ", r, " has label ",
                  int(label), ", expected < ", num_classes_);
      labels_[static_cast<size_t>(n_ + r)] = label;
    }
    // CHW planes -> HWC, the layout every stoke dataset serves.
    uint8_t* dst = pixels_.data() + n_ * kImageBytes;
    const uint8_t* src = bytes.data();
    constexpr int64_t kPlane = kHeight * kWidth;
    parallel_for(0, count, 256, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const uint8_t* s = src + r * record + label_bytes;
        uint8_t* d = dst + r * kImageBytes;
        for (int64_t p = 0; p < kPlane; ++p) {
          d[3 * p] = s[p];
          d[3 * p + 1] = s[kPlane + p];
          d[3 * p + 2] = s[2 * kPlane + p];
        }
      }
    });
    n_ += count;
  }

  const fs::path dir = fs::is_directory(input) ? fs::path(input) : fs::path(input).parent_path();
  class_names_ = read_names(
      dir / (c10 ? "batches.meta.txt"
                 : (options.coarse_labels ? "coarse_label_names.txt" : "fine_label_names.txt")));
  if (static_cast<int64_t>(class_names_.size()) != num_classes_) class_names_.clear();
}

void CifarDataset::get(int64_t index, Example& out) const {
  STOKE_CHECK(index >= 0 && index < n_, kCifarOp, "::get: index ", index, " out of range [0, ", n_,
              ")");
  out.pixels.resize(kImageBytes);
  std::memcpy(out.pixels.data(), pixels_.data() + index * kImageBytes, kImageBytes);
  out.height = kHeight;
  out.width = kWidth;
  out.channels = kChannels;
  out.label = labels_[static_cast<size_t>(index)];
}

std::string CifarDataset::describe(int64_t index) const {
  auto it = std::upper_bound(files_.begin(), files_.end(), index,
                             [](int64_t i, const File& f) { return i < f.first; });
  if (it == files_.begin() || index < 0 || index >= n_)
    return stoke::detail::str_cat("CIFAR record ", index, " (out of range)");
  --it;
  return stoke::detail::str_cat(it->path, ", record ", index - it->first);
}

}  // namespace stoke::data
