// Catch2's implementation (the single header's non-inline half), compiled once per build into
// stoke_catch and linked by every test executable. It took 87 s to compile under ASan + UBSan at
// -O1, and it used to be compiled once per main.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "support/catch_session.h"

namespace stoke::test {

int run_catch(int argc, char* argv[], const char* reporter) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv)) return rc;
  if (reporter) session.configData().reporterName = reporter;
  return session.run();
}

}  // namespace stoke::test
