// The test executables' main: Catch2's default one (its implementation is in catch_impl.cpp).
#include "support/catch_session.h"

int main(int argc, char* argv[]) {
  return stoke::test::run_catch(argc, argv);
}
