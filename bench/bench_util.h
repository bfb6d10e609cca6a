// Helpers shared by stoke's benchmarks: timing (median of N repetitions after a warm-up), a plain
// text table, and a one-line JSON record, so that every benchmark prints the same way (a table for
// people, then one JSON line for scripts; see docs/design.md, "Benchmarks").
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace stoke::bench {

// The items of a comma-separated flag value, empty ones included ("a,,b": "a", "", "b"), so that
// the caller's check of each name also refuses a stray comma.
inline std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> items;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    items.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  return items;
}

// The first of `items` that is not in `known`, or nullptr: a list flag's check (--models).
inline const std::string* first_unknown(const std::vector<std::string>& items,
                                        const std::vector<std::string>& known) {
  for (const std::string& item : items)
    if (std::find(known.begin(), known.end(), item) == known.end()) return &item;
  return nullptr;
}

// "a, b, c": the known names an error message lists.
inline std::string join_commas(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

// `text` as a base-10 integer, all of it ("12x" and "" are not; std::stoll took "12x" as 12 and
// threw on "x"): false when it is not one.
inline bool parse_int(const std::string& text, int64_t& out) {
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE) return false;
  out = n;
  return true;
}

// Wall-clock milliseconds since an arbitrary origin (monotonic).
inline double now_ms() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::milli>(clock::now().time_since_epoch()).count();
}

// Median of a non-empty list of samples (the mean of the two middle ones for an even count, as
// Python's statistics.median, so both sides of a comparison summarize the same way).
inline double median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The first measurement of a process warms up for at least this long (when it warms up at all):
// right after start the machine is cold (clock ramp, the BLAS threads' start-up spin), which made
// a process's first case read up to 10x slower than the same case run later.
inline constexpr double kFirstWarmupMs = 2000.0;
// A measurement right after the other side of a comparison ran (the torch peer's case) warms up
// for at least this long: right after the peer's busy threads go idle this process ran up to 2x
// slower, for longer than 0.5 s at times (ResNet-8's stride-2 forwards 0.80 against 0.60 ms).
// The peer does the same after stoke's side (bench/ops_cpu_torch.py).
inline constexpr double kHandoffWarmupMs = 1000.0;
// The least warm-up time of the next measurement that warms up at all; median_ms resets it to 0.
// One variable for all: median_ms is a template per callable.
inline double min_warmup_ms = kFirstWarmupMs;

// Runs before() then fn() `warmup` times untimed (and for min_warmup_ms at least, when warmup >
// 0), then `reps` times timing only fn(); returns the median time of fn in milliseconds. `before`
// resets state outside the timed region (clearing gradients, for instance).
template <class Fn, class Before>
double median_ms(Fn&& fn, int reps, int warmup, Before&& before) {
  const double start = now_ms();
  const double at_least_ms = warmup > 0 ? min_warmup_ms : 0.0;
  for (int i = 0; i < warmup || now_ms() - start < at_least_ms; ++i) {
    before();
    fn();
  }
  if (warmup > 0) min_warmup_ms = 0.0;
  std::vector<double> times;
  times.reserve(static_cast<size_t>(std::max(reps, 0)));
  for (int i = 0; i < reps; ++i) {
    before();
    double t0 = now_ms();
    fn();
    times.push_back(now_ms() - t0);
  }
  return median(std::move(times));
}

// median_ms without a reset step.
template <class Fn>
double median_ms(Fn&& fn, int reps, int warmup) {
  return median_ms(std::forward<Fn>(fn), reps, warmup, [] {});
}

// A number with `digits` decimals, or "-" when it is NaN (not measured).
inline std::string fmt(double v, int digits = 3) {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// A text table: columns are left-aligned for text and right-aligned for numbers, sized to fit.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}

  // Adds a row; it must have as many cells as the header.
  void add(std::vector<std::string> row) {
    row.resize(header_.size());
    rows_.push_back(std::move(row));
  }

  void print(std::ostream& os) const {
    std::vector<size_t> width(header_.size());
    for (size_t c = 0; c < header_.size(); ++c) {
      width[c] = header_[c].size();
      for (const auto& r : rows_) width[c] = std::max(width[c], r[c].size());
    }
    auto line = [&](const std::vector<std::string>& cells) {
      std::string s;
      for (size_t c = 0; c < cells.size(); ++c) {
        std::string pad(width[c] - cells[c].size(), ' ');
        // The first two columns (names) read best left-aligned, numbers right-aligned.
        s += c < 2 ? cells[c] + pad : pad + cells[c];
        if (c + 1 < cells.size()) s += "  ";
      }
      while (!s.empty() && s.back() == ' ') s.pop_back();
      os << s << '\n';
    };
    line(header_);
    std::vector<std::string> rule;
    for (size_t w : width) rule.emplace_back(w, '-');
    line(rule);
    for (const auto& r : rows_) line(r);
    os.flush();
  }

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// A JSON string literal (quotes included) with the characters JSON requires escaped.
inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// Builds one JSON object in insertion order: {"op": "conv2d", "fwd_ms": 1.25, "torch": null}.
// NaN numbers are written as null (JSON has no NaN).
class JsonObject {
 public:
  JsonObject& add(const std::string& key, const std::string& value) {
    return raw(key, json_string(value));
  }
  JsonObject& add(const std::string& key, const char* value) {
    return raw(key, json_string(value));
  }
  JsonObject& add(const std::string& key, double value) {
    if (std::isnan(value) || std::isinf(value)) return raw(key, "null");
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6g", value);
    return raw(key, buf);
  }
  JsonObject& add(const std::string& key, int value) { return raw(key, std::to_string(value)); }
  JsonObject& add(const std::string& key, bool value) { return raw(key, value ? "true" : "false"); }
  // `json` is inserted as is (an array or an object built elsewhere).
  JsonObject& raw(const std::string& key, const std::string& json) {
    body_ += body_.empty() ? "" : ", ";
    body_ += json_string(key) + ": " + json;
    return *this;
  }
  std::string str() const { return "{" + body_ + "}"; }

 private:
  std::string body_;
};

// A JSON array of already-serialized values.
inline std::string json_array(const std::vector<std::string>& items) {
  std::string s = "[";
  for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + items[i];
  return s + "]";
}

// Reads the number after "key": in a flat JSON line (NaN when absent or null). Enough for the
// one-line records the peer scripts print; not a general JSON parser.
inline double json_number(const std::string& line, const std::string& key) {
  std::string pat = json_string(key) + ":";
  size_t p = line.find(pat);
  if (p == std::string::npos) return std::nan("");
  const char* s = line.c_str() + p + pat.size();
  char* end = nullptr;
  double v = std::strtod(s, &end);
  return end == s ? std::nan("") : v;
}

// Reads the string after "key": in a flat JSON line ("" when absent; escapes are not decoded).
inline std::string json_text(const std::string& line, const std::string& key) {
  std::string pat = json_string(key) + ":";
  size_t p = line.find(pat);
  if (p == std::string::npos) return "";
  size_t q = line.find('"', p + pat.size());
  if (q == std::string::npos) return "";
  size_t e = line.find('"', q + 1);
  return e == std::string::npos ? "" : line.substr(q + 1, e - q - 1);
}

}  // namespace stoke::bench
