// Runs Catch2's session; tests' mains call it (Catch::Session is declared only where the
// implementation is compiled, tests/support/catch_impl.cpp).
#pragma once

namespace stoke::test {

// Parses the command line as Catch2 does and runs the registered tests; `reporter`, when set,
// replaces the reporter (the MPI tests' other ranks print compactly). Returns main's exit status.
int run_catch(int argc, char* argv[], const char* reporter = nullptr);

}  // namespace stoke::test
