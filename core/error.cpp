#include "core/error.h"

namespace stoke::detail {

void throw_error(const char* op, const std::string& message) {
  throw Error(std::string("stoke::") + op + ": " + message);
}

}  // namespace stoke::detail
