// The table stoke-gpu-selftest fills: one row per case (op, shape, dtype, max abs error, max rel
// error, pass/fail), the comparison every check uses, and the printing. Device-independent: the
// checks that fill it run on the real CUDA backend (apps/gpu_selftest.cpp) and on cuda/emu
// (tests/cuda/test_selftest_ops.cpp).
#pragma once

#include <cstdio>
#include <exception>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace stoke::selftest {

struct Row {
  std::string op, shape, dtype;
  double max_abs = 0, max_rel = 0;
  bool pass = false;
  std::string note;
};

class Suite {
 public:
  // Adds a row comparing `got` (any device, any dtype) with `ref` (same shape): pass when the
  // shapes agree, every |got - ref| <= tol * max(1, max |ref|), and NaNs (and infinities, by sign)
  // agree. Values are compared in f64; two integer (or bool) tensors compare as i64, exactly with
  // tol = 0 (an integer tol is an absolute bound there).
  void compare(const std::string& op, const std::string& shape, const std::string& dtype,
               const Tensor& got, const Tensor& ref, double tol);
  // Adds a row that passes when `ok` (a dtype, an error message, a mask bit for bit, ...); `note`
  // is printed beside a failure.
  void expect(const std::string& op, const std::string& shape, const std::string& dtype, bool ok,
              const std::string& note);
  // Adds a failed row for a check that could not run (an exception, a missing device).
  void fail(const std::string& op, const std::string& why);
  // Runs one check; an exception becomes a failed row named `name`, so one failing call does not
  // hide the rest of the table.
  template <class F>
  void run(const char* name, F&& check) {
    try {
      check(*this);
    } catch (const std::exception& e) {
      fail(name, e.what());
    }
  }

  // Adds a row as it is (one that a section's child process reported, apps/selftest/isolate.h).
  void add(Row row);

  // Prints the table's header now and then each row as it is added, flushed, so that a crash
  // later loses none of them: `timed` puts the seconds since the previous row in front (slow
  // checks show), `failures_only` skips the rows that pass.
  void stream_to(std::FILE* out, bool timed = false, bool failures_only = false);
  void trace_to(std::FILE* out) { stream_to(out, /*timed=*/true); }
  // Calls `f` with each row after it is added (a child sends its rows to the parent this way).
  void on_add(std::function<void(const Row&)> f) { on_add_ = std::move(f); }

  const std::vector<Row>& rows() const { return rows_; }
  int failures() const;
  // The table, a header line first; only the failed rows when `failures_only`.
  void print(std::FILE* out, bool failures_only = false) const;

 private:
  std::vector<Row> rows_;
  std::FILE* stream_ = nullptr;
  bool timed_ = false, stream_failures_only_ = false;
  double last_ = -1;
  std::function<void(const Row&)> on_add_;
};

// "2x3x4" for a list of sizes; shape_str(Shape) likewise.
std::string dims(std::initializer_list<int64_t> sizes);
std::string shape_str(const Shape& shape);

// Error bound relative to the output's scale for a result of `dtype` computed from the same
// (rounded) inputs as an f32 CPU reference: f32 accumulation-order noise, TF32's 10-bit inputs,
// f16's 11-bit and bf16's 8-bit outputs.
double tolerance(DType dtype, bool tf32 = false);

}  // namespace stoke::selftest
