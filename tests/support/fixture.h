// Loader for the text fixtures produced by tests/fixtures/make_fixtures.py.
//
// Format (one file per op family):
//   # comment
//   case <case_name>
//   attr <key> <value>
//   tensor <name> <dtype> <ndim> <d0> <d1> ...
//   <all values on ONE line, space separated, row-major>
//   end
//
// This header depends only on the standard library.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace stoke::testing {

struct FixtureTensor {
  std::string name;
  std::string dtype;  // "f32" or "i64"
  std::vector<int64_t> shape;
  std::vector<double> values;  // row-major; i64 values are stored exactly (|v| < 2^53)

  int64_t numel() const;
  std::vector<float> as_f32() const;
  std::vector<int64_t> as_i64() const;
};

struct FixtureCase {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::vector<FixtureTensor> tensors;

  // Throws std::runtime_error naming the case and tensor if missing.
  const FixtureTensor& tensor(const std::string& name) const;
  bool has_tensor(const std::string& name) const;

  bool has_attr(const std::string& key) const;
  // All attr accessors throw std::runtime_error naming the case and key when the key is missing
  // or the value does not parse.
  int64_t attr_int(const std::string& key) const;
  double attr_double(const std::string& key) const;
  std::string attr(const std::string& key) const;
  std::vector<int64_t> attr_ints(const std::string& key) const;  // "2,1" -> {2,1}
};

// Parses a fixture file. Throws std::runtime_error with the path and line number on malformed
// input (unknown directive, bad number, value count != product(shape), unterminated case, ...).
std::vector<FixtureCase> load_fixture(const std::string& path);

// STOKE_FIXTURE_DIR "/" file.
std::string fixture_path(const std::string& file);

}  // namespace stoke::testing
