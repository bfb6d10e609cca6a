#include "fixture.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#ifndef STOKE_FIXTURE_DIR
#error "STOKE_FIXTURE_DIR must be defined (path to tests/fixtures)"
#endif

namespace stoke::testing {
namespace {

std::vector<std::string> split_ws(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  std::string tok;
  while (in >> tok) out.push_back(tok);
  return out;
}

bool parse_int(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

bool parse_double(const std::string& s, double* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return false;
  // ERANGE on underflow (denormals) is acceptable; overflow is not.
  if (errno == ERANGE && std::isinf(v)) return false;
  *out = v;
  return true;
}

std::string strip_cr(std::string line) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

bool is_blank_or_comment(const std::string& line) {
  for (char c : line) {
    if (c == ' ' || c == '\t') continue;
    return c == '#';
  }
  return true;
}

}  // namespace

int64_t FixtureTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> FixtureTensor::as_f32() const {
  std::vector<float> out;
  out.reserve(values.size());
  for (double v : values) out.push_back(static_cast<float>(v));
  return out;
}

std::vector<int64_t> FixtureTensor::as_i64() const {
  std::vector<int64_t> out;
  out.reserve(values.size());
  for (double v : values) out.push_back(static_cast<int64_t>(v));
  return out;
}

const FixtureTensor& FixtureCase::tensor(const std::string& tname) const {
  for (const auto& t : tensors) {
    if (t.name == tname) return t;
  }
  throw std::runtime_error("fixture case '" + name + "': no tensor '" + tname + "'");
}

bool FixtureCase::has_tensor(const std::string& tname) const {
  for (const auto& t : tensors) {
    if (t.name == tname) return true;
  }
  return false;
}

bool FixtureCase::has_attr(const std::string& key) const {
  return attrs.count(key) != 0;
}

std::string FixtureCase::attr(const std::string& key) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) {
    throw std::runtime_error("fixture case '" + name + "': no attr '" + key + "'");
  }
  return it->second;
}

int64_t FixtureCase::attr_int(const std::string& key) const {
  const std::string v = attr(key);
  int64_t out = 0;
  if (!parse_int(v, &out)) {
    throw std::runtime_error("fixture case '" + name + "': attr '" + key + "' = '" + v +
                             "' is not an integer");
  }
  return out;
}

double FixtureCase::attr_double(const std::string& key) const {
  const std::string v = attr(key);
  double out = 0;
  if (!parse_double(v, &out)) {
    throw std::runtime_error("fixture case '" + name + "': attr '" + key + "' = '" + v +
                             "' is not a number");
  }
  return out;
}

std::vector<int64_t> FixtureCase::attr_ints(const std::string& key) const {
  const std::string v = attr(key);
  std::vector<int64_t> out;
  size_t start = 0;
  while (true) {
    size_t comma = v.find(',', start);
    std::string part =
        v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    int64_t x = 0;
    if (!parse_int(part, &x)) {
      throw std::runtime_error("fixture case '" + name + "': attr '" + key + "' = '" + v +
                               "' is not a comma-separated integer list");
    }
    out.push_back(x);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<FixtureCase> load_fixture(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open fixture file '" + path + "'");

  std::vector<FixtureCase> cases;
  FixtureCase current;
  bool in_case = false;
  size_t lineno = 0;
  std::string line;

  auto fail = [&](const std::string& msg) -> void {
    throw std::runtime_error(path + ":" + std::to_string(lineno) + ": " + msg);
  };

  while (std::getline(in, line)) {
    ++lineno;
    line = strip_cr(line);
    if (is_blank_or_comment(line)) continue;
    const std::vector<std::string> tok = split_ws(line);
    const std::string& kw = tok[0];

    if (kw == "case") {
      if (in_case) fail("'case' before 'end' of case '" + current.name + "'");
      if (tok.size() != 2) fail("expected 'case <name>'");
      current = FixtureCase{};
      current.name = tok[1];
      in_case = true;
    } else if (kw == "end") {
      if (!in_case) fail("'end' outside of a case");
      if (tok.size() != 1) fail("unexpected tokens after 'end'");
      cases.push_back(std::move(current));
      current = FixtureCase{};
      in_case = false;
    } else if (kw == "attr") {
      if (!in_case) fail("'attr' outside of a case");
      if (tok.size() != 3) fail("expected 'attr <key> <value>'");
      if (!current.attrs.emplace(tok[1], tok[2]).second) fail("duplicate attr '" + tok[1] + "'");
    } else if (kw == "tensor") {
      if (!in_case) fail("'tensor' outside of a case");
      if (tok.size() < 4) fail("expected 'tensor <name> <dtype> <ndim> <dims...>'");
      FixtureTensor t;
      t.name = tok[1];
      t.dtype = tok[2];
      if (t.dtype != "f32" && t.dtype != "i64") fail("unknown dtype '" + t.dtype + "'");
      if (current.has_tensor(t.name)) fail("duplicate tensor '" + t.name + "'");
      int64_t ndim = 0;
      if (!parse_int(tok[3], &ndim) || ndim < 0) fail("bad ndim '" + tok[3] + "'");
      if (tok.size() != static_cast<size_t>(4 + ndim)) {
        fail("tensor '" + t.name + "': ndim " + std::to_string(ndim) + " but " +
             std::to_string(tok.size() - 4) + " dims given");
      }
      int64_t numel = 1;
      for (int64_t i = 0; i < ndim; ++i) {
        int64_t d = 0;
        if (!parse_int(tok[4 + i], &d) || d < 0) fail("bad dim '" + tok[4 + i] + "'");
        t.shape.push_back(d);
        numel *= d;
      }
      // Values line.
      if (!std::getline(in, line)) {
        ++lineno;
        fail("tensor '" + t.name + "': missing values line");
      }
      ++lineno;
      line = strip_cr(line);
      std::istringstream vs(line);
      std::string v;
      t.values.reserve(static_cast<size_t>(numel));
      while (vs >> v) {
        if (t.dtype == "i64") {
          int64_t x = 0;
          if (!parse_int(v, &x)) fail("tensor '" + t.name + "': bad integer '" + v + "'");
          t.values.push_back(static_cast<double>(x));
        } else {
          double x = 0;
          if (!parse_double(v, &x)) fail("tensor '" + t.name + "': bad number '" + v + "'");
          t.values.push_back(x);
        }
      }
      if (static_cast<int64_t>(t.values.size()) != numel) {
        fail("tensor '" + t.name + "': " + std::to_string(t.values.size()) +
             " values, shape needs " + std::to_string(numel));
      }
      current.tensors.push_back(std::move(t));
    } else {
      fail("unknown directive '" + kw + "'");
    }
  }
  if (in_case) {
    throw std::runtime_error(path + ": unterminated case '" + current.name + "' at end of file");
  }
  return cases;
}

std::string fixture_path(const std::string& file) {
  return std::string(STOKE_FIXTURE_DIR) + "/" + file;
}

}  // namespace stoke::testing
