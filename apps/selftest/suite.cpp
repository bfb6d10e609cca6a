#include "apps/selftest/suite.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"

namespace stoke::selftest {

void Suite::compare(const std::string& op, const std::string& shape, const std::string& dtype,
                    const Tensor& got, const Tensor& ref, double tol) {
  Row row{op, shape, dtype, 0, 0, false, ""};
  if (!got.defined() || !ref.defined()) {
    row.note = got.defined() ? "no reference" : "no result";
    add(row);
    return;
  }
  if (got.shape() != ref.shape()) {
    row.note = detail::str_cat("shape ", got.shape(), " != reference ", ref.shape());
    add(row);
    return;
  }
  if (!is_floating(got.dtype()) && !is_floating(ref.dtype())) {
    // Integers and bools exactly (an i64 beyond 2^53 is not exact in f64).
    const std::vector<int64_t> g = got.to_vector<int64_t>();
    const std::vector<int64_t> r = ref.to_vector<int64_t>();
    row.pass = true;
    for (size_t i = 0; i < g.size(); ++i) {
      if (g[i] == r[i]) continue;
      // The difference in 64-bit arithmetic (exact; in f64 2^53 + 1 - 2^53 would be 0).
      const uint64_t ug = static_cast<uint64_t>(g[i]), ur = static_cast<uint64_t>(r[i]);
      const double d = static_cast<double>(g[i] > r[i] ? ug - ur : ur - ug);
      row.max_abs = std::max(row.max_abs, d);
      row.max_rel = std::max(row.max_rel, d / std::max(1.0, std::fabs(static_cast<double>(r[i]))));
      if (d > tol && row.pass) {
        row.pass = false;
        row.note = detail::str_cat("first mismatch at flat index ", i, ": got ", g[i],
                                   ", expected ", r[i]);
      }
    }
    add(row);
    return;
  }
  // to_vector brings either tensor to the CPU (after the device finished) and casts it to f64.
  const std::vector<double> g = got.to_vector<double>();
  const std::vector<double> r = ref.to_vector<double>();
  // Judged against the output's scale: a GEMM's small entries carry the absolute error of its
  // large ones.
  double scale = 1.0;
  for (double v : r)
    if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
  bool ok = true;
  size_t first_bad = g.size();
  for (size_t i = 0; i < g.size(); ++i) {
    bool bad = false;
    if (std::isnan(g[i]) || std::isnan(r[i]) || std::isinf(g[i]) || std::isinf(r[i])) {
      // Non-finite values must agree exactly (NaN with NaN, +inf with +inf).
      bad = !(std::isnan(g[i]) && std::isnan(r[i])) && g[i] != r[i];
    } else {
      const double d = std::fabs(g[i] - r[i]);
      bad = d > tol * scale;
      row.max_abs = std::max(row.max_abs, d);
      row.max_rel = std::max(row.max_rel, d / std::max(1e-6, std::fabs(r[i])));
    }
    if (bad && first_bad == g.size()) first_bad = i;
    ok = ok && !bad;
  }
  if (!ok)
    row.note = detail::str_cat("first mismatch at flat index ", first_bad, ": got ", g[first_bad],
                               ", expected ", r[first_bad], " (tolerance ", tol * scale, ")");
  row.pass = ok;
  add(row);
}

void Suite::expect(const std::string& op, const std::string& shape, const std::string& dtype,
                   bool ok, const std::string& note) {
  add(Row{op, shape, dtype, 0, 0, ok, ok ? "" : note});
}

void Suite::fail(const std::string& op, const std::string& why) {
  add(Row{op, "-", "-", 0, 0, false, why});
}

namespace {

// printf into a std::string of the size it needs (columns widen for long names, as printf's do).
template <class... A>
std::string format(const char* fmt, A... args) {
  std::string s(static_cast<size_t>(std::snprintf(nullptr, 0, fmt, args...)), '\0');
  std::snprintf(s.data(), s.size() + 1, fmt, args...);
  return s;
}

// The table's header and one row (print()'s format), without the newline.
std::string header_line() {
  return format("%-40s %-30s %-5s %11s %11s  %s", "op", "shape", "dtype", "max abs err",
                "max rel err", "result");
}

std::string format_row(const Row& r) {
  return format("%-40s %-30s %-5s %11.3e %11.3e  %s%s%s", r.op.c_str(), r.shape.c_str(),
                r.dtype.c_str(), r.max_abs, r.max_rel, r.pass ? "pass" : "FAIL",
                r.note.empty() ? "" : ": ", r.note.c_str());
}

}  // namespace

void Suite::stream_to(std::FILE* out, bool timed, bool failures_only) {
  stream_ = out;
  timed_ = timed;
  stream_failures_only_ = failures_only;
  if (!out) return;
  std::fprintf(out, "%s%s\n", timed ? "    secs " : "", header_line().c_str());
  std::fflush(out);
}

void Suite::add(Row row) {
  if (stream_) {
    double dt = 0;
    if (timed_) {
      const double now =
          std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
              .count();
      dt = last_ < 0 ? 0.0 : now - last_;
      last_ = now;
    }
    if (!stream_failures_only_ || !row.pass) {
      if (timed_) std::fprintf(stream_, "%7.3fs ", dt);
      std::fprintf(stream_, "%s\n", format_row(row).c_str());
      std::fflush(stream_);
    }
  }
  rows_.push_back(std::move(row));
  if (on_add_) on_add_(rows_.back());
}

int Suite::failures() const {
  return static_cast<int>(
      std::count_if(rows_.begin(), rows_.end(), [](const Row& r) { return !r.pass; }));
}

void Suite::print(std::FILE* out, bool failures_only) const {
  std::fprintf(out, "%s\n", header_line().c_str());
  for (const Row& r : rows_)
    if (!failures_only || !r.pass) std::fprintf(out, "%s\n", format_row(r).c_str());
}

std::string shape_str(const Shape& shape) {
  std::string s;
  for (int64_t x : shape) s.append(s.empty() ? "" : "x").append(std::to_string(x));
  return s.empty() ? "scalar" : s;
}

std::string dims(std::initializer_list<int64_t> sizes) {
  return shape_str(Shape(sizes));
}

double tolerance(DType dtype, bool tf32) {
  if (dtype == DType::f16) return 5e-3;
  if (dtype == DType::bf16) return 4e-2;
  return tf32 ? 5e-3 : 1e-4;
}

}  // namespace stoke::selftest
