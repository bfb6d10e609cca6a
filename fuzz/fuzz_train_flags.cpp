// libFuzzer harness: stoke-train's flag parser (apps/train/flags.cpp, compiled in from the
// program's own source). The input is split at NUL bytes into argv[1...]; --help / -h print the
// usage and exit(0) by design, so inputs holding them are skipped.
#include <string>
#include <vector>

#include "core/error.h"
#include "apps/train/flags.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = {"stoke-train"};
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur += static_cast<char>(data[i]);
    }
  }
  if (!cur.empty() || size == 0) args.push_back(cur);
  if (args.size() > 64) return 0;
  std::vector<char*> argv;
  for (std::string& a : args) {
    if (a == "--help" || a == "-h") return 0;
    argv.push_back(a.data());
  }
  argv.push_back(nullptr);
  try {
    const stoke::train::Flags f =
        stoke::train::parse_flags(static_cast<int>(args.size()), argv.data());
    if (f.epochs <= 0 || f.batch <= 0 || f.accum <= 0 || !(f.lr > 0)) std::abort();
  } catch (const stoke::Error&) {
  }
  return 0;
}
