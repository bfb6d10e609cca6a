// Errors: every failure is a stoke::Error whose message starts with the op that failed and says
// what was expected and what was given ("stoke::conv2d: expected input with 4 dims (N, C, H, W),
// got shape [3, 4]").
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace stoke {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void throw_error(const char* op, const std::string& message);
}  // namespace detail

}  // namespace stoke

// STOKE_CHECK(cond, "conv2d", "expected ... got ", shape): throws stoke::Error("stoke::conv2d:
// ...").
#define STOKE_CHECK(cond, op, ...)                                             \
  do {                                                                         \
    if (!(cond)) [[unlikely]]                                                  \
      ::stoke::detail::throw_error(op, ::stoke::detail::str_cat(__VA_ARGS__)); \
  } while (0)

#define STOKE_FAIL(op, ...) ::stoke::detail::throw_error(op, ::stoke::detail::str_cat(__VA_ARGS__))
