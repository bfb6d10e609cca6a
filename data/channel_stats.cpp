#include "data/channel_stats.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/parallel.h"

namespace stoke::data {
namespace {

// Sums over one chunk of images: per channel, the pixels and their squares, and the pixel count
// per channel. Exact in 64 bits up to 2^64 / 255^2 = 2.8e14 pixels per channel.
struct ChannelSums {
  std::vector<uint64_t> sum, sum_sq;
  uint64_t pixels = 0;
  int64_t channels = -1;  // of this chunk's first image; -1: no image read
  int64_t first_index = -1;
};

}  // namespace

ChannelStats channel_stats(const Dataset& dataset, const ChannelStatsOptions& options,
                           const std::string& what) {
  const int64_t n = dataset.size();
  STOKE_CHECK(n > 0, "channel_stats", what, " has no images");
  STOKE_CHECK(options.max_images >= 0, "channel_stats", "max_images must be >= 0, got ",
              options.max_images);
  const int64_t m = options.max_images > 0 && options.max_images < n ? options.max_images : n;
  // Image j of the m read: index j * n / m (evenly spaced; all of them when m == n).
  const auto index_of = [&](int64_t j) {
    return static_cast<int64_t>(static_cast<unsigned __int128>(j) * static_cast<uint64_t>(n) /
                                static_cast<uint64_t>(m));
  };
  constexpr int64_t kGrain = 64;
  std::vector<ChannelSums> chunks(static_cast<size_t>(parallel_chunk_count(m, kGrain)));
  parallel_chunks(0, m, kGrain, [&](int64_t chunk, int64_t b, int64_t e) {
    ChannelSums& s = chunks[static_cast<size_t>(chunk)];
    Example ex;
    for (int64_t j = b; j < e; ++j) {
      const int64_t index = index_of(j);
      dataset.get(index, ex);
      if (s.channels < 0) {
        STOKE_CHECK(ex.channels > 0, "channel_stats", what, ": ", dataset.describe(index), " has ",
                    ex.channels, " channels");
        s.channels = ex.channels;
        s.first_index = index;
        s.sum.assign(static_cast<size_t>(ex.channels), 0);
        s.sum_sq.assign(static_cast<size_t>(ex.channels), 0);
      }
      STOKE_CHECK(ex.channels == s.channels, "channel_stats", what, ": ", dataset.describe(index),
                  " has ", ex.channels, " channels, but ", dataset.describe(s.first_index), " has ",
                  s.channels);
      const size_t c = static_cast<size_t>(ex.channels);
      const size_t count = ex.pixels.size() / c;
      const uint8_t* p = ex.pixels.data();
      for (size_t ch = 0; ch < c; ++ch) {
        uint64_t sum = 0, sum_sq = 0;
        for (size_t i = 0; i < count; ++i) {
          const uint64_t x = p[i * c + ch];
          sum += x;
          sum_sq += x * x;
        }
        s.sum[ch] += sum;
        s.sum_sq[ch] += sum_sq;
      }
      s.pixels += count;
    }
  });

  const ChannelSums& first = chunks.front();
  const size_t c = static_cast<size_t>(first.channels);
  std::vector<unsigned __int128> sum(c, 0), sum_sq(c, 0);
  unsigned __int128 pixels = 0;
  for (const ChannelSums& s : chunks) {
    STOKE_CHECK(s.channels == first.channels, "channel_stats", what, ": ",
                dataset.describe(s.first_index), " has ", s.channels, " channels, but ",
                dataset.describe(first.first_index), " has ", first.channels);
    for (size_t ch = 0; ch < c; ++ch) {
      sum[ch] += s.sum[ch];
      sum_sq[ch] += s.sum_sq[ch];
    }
    pixels += s.pixels;
  }
  STOKE_CHECK(pixels > 0, "channel_stats", what, ": its images have no pixels");

  ChannelStats out;
  out.images = m;
  for (size_t ch = 0; ch < c; ++ch) {
    // N^2 var = N sum(x^2) - sum(x)^2 in integers: exact (N sum(x^2) <= N^2 255^2 < 2^128 for
    // N < 2^56 pixels), so no cancellation however large the mean is against the spread.
    const unsigned __int128 num = pixels * sum_sq[ch] - sum[ch] * sum[ch];
    const double n_px = static_cast<double>(pixels);
    const double mean = static_cast<double>(sum[ch]) / n_px / 255.0;
    const double std = std::sqrt(static_cast<double>(num)) / n_px / 255.0;
    out.mean.push_back(static_cast<float>(mean));
    out.std.push_back(static_cast<float>(std));
  }
  return out;
}

std::vector<float> parse_channels(const std::string& text, bool positive, const char* op,
                                  const std::string& what) {
  std::vector<float> out;
  const char* p = text.data();
  const char* const end = text.data() + text.size();
  while (true) {
    float x = 0;
    const auto [next, ec] = std::from_chars(p, end, x);
    const bool ok = ec == std::errc() && std::isfinite(x) && (!positive || x > 0) &&
                    (next == end || *next == ',') && out.size() < 16;
    STOKE_CHECK(ok, op, what, " is '", text, "', expected 1 to 16 ",
                positive ? "positive" : "finite", " numbers separated by commas");
    out.push_back(x);
    if (next == end) break;
    p = next + 1;
  }
  return out;
}

std::string channels_text(const std::vector<float>& values) {
  std::string s;
  for (float x : values) {
    char buf[32];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
    STOKE_CHECK(ec == std::errc(), "channels_text", "cannot format ", x);
    if (!s.empty()) s += ',';
    s.append(buf, end);
  }
  return s;
}

std::optional<ChannelFigures> read_normalization(const std::map<std::string, std::string>& metadata,
                                                 const char* op, const std::string& where) {
  const auto mean = metadata.find("normalize_mean"), std = metadata.find("normalize_std");
  if (mean == metadata.end() && std == metadata.end()) return std::nullopt;
  STOKE_CHECK(mean != metadata.end() && std != metadata.end(), op, where,
              ": metadata has only one of normalize_mean and normalize_std");
  ChannelFigures f{parse_channels(mean->second, false, op, where + ": metadata 'normalize_mean'"),
                   parse_channels(std->second, true, op, where + ": metadata 'normalize_std'")};
  STOKE_CHECK(f.mean.size() == f.std.size() || f.mean.size() == 1 || f.std.size() == 1, op, where,
              ": metadata has ", f.mean.size(), " normalize_mean values and ", f.std.size(),
              " normalize_std values");
  return f;
}

std::string format_channels(const std::vector<float>& values) {
  std::string s = "(";
  char buf[32];
  for (size_t i = 0; i < values.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.4f", i ? ", " : "", static_cast<double>(values[i]));
    s += buf;
  }
  return s + ")";
}

}  // namespace stoke::data
