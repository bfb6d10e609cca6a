// Per-channel mean and standard deviation of a dataset's pixels (x / 255): the statistics that
// data::normalize takes. torchvision's users compute them once per dataset and paste them in
// (Fashion-MNIST 0.2860 / 0.3530; CIFAR-10 (0.4914, 0.4822, 0.4465) / (0.2470, 0.2435, 0.2616));
// stoke-train computes them from the training split it is given (docs/guide.md, "Normalization").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace stoke::data {

// channel_stats options: {.max_images = 10000}.
struct ChannelStatsOptions {
  int64_t max_images = 0;  // 0: every image; else at most this many, evenly spaced over the set
};

struct ChannelStats {
  std::vector<float> mean;  // one per channel, of x / 255
  std::vector<float> std;   // population standard deviation, likewise; 0 for a constant channel
  int64_t images = 0;       // how many images the figures come from
};

// Reads the images (in parallel over the thread pool; get() is thread-safe) and sums each
// channel's pixels and squared pixels as exact integers, so the result is the same at every
// thread count and sample order. Throws stoke::Error naming `what` when the dataset is empty, or
// when an image's channel count differs from the first's (naming both images). A channel with
// one value in every pixel has std 0: what to divide it by is the caller's choice (stoke-train
// uses 1, as scikit-learn's StandardScaler does).
ChannelStats channel_stats(const Dataset& dataset, const ChannelStatsOptions& options = {},
                           const std::string& what = "dataset");

// "0.4914,0.4822,0.4465" as {0.4914f, 0.4822f, 0.4465f}: 1 to 16 comma-separated numbers, each
// finite (and > 0 with `positive`) and read exactly (std::from_chars). Otherwise throws
// stoke::Error "<op>: <what> is '<text>', expected ...".
std::vector<float> parse_channels(const std::string& text, bool positive, const char* op,
                                  const std::string& what);
// The text parse_channels reads back bit for bit: each value's shortest exact form, comma-separated
// (checkpoint metadata).
std::string channels_text(const std::vector<float>& values);

// A weights file's "normalize_mean" and "normalize_std" metadata (channels_text lists; stoke-train
// writes them into its checkpoints), or nothing when it has neither. Throws stoke::Error
// "<op>: <where>: metadata ..." when only one is there, a list does not parse (parse_channels;
// the std's positive), or the two differ in length with neither of length 1.
struct ChannelFigures {
  std::vector<float> mean, std;
};
std::optional<ChannelFigures> read_normalization(const std::map<std::string, std::string>& metadata,
                                                 const char* op, const std::string& where);

// "(0.2860, 0.3530)"-style text of a per-channel list, 4 decimals: for log lines.
std::string format_channels(const std::vector<float>& values);

}  // namespace stoke::data
