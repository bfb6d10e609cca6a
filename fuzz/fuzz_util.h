// Shared by the libFuzzer harnesses: the parsers under test read files, so each input is written
// to a private scratch directory (one per process, under /dev/shm when it exists: no disk I/O per
// execution) and the real entry point is called on its path. stoke::Error is the expected outcome
// for bad input; anything else (a crash, a sanitizer report, another exception) is a finding.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace stoke::fuzz {

// A directory of this process's own, removed at exit.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    namespace fs = std::filesystem;
    const fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    const fs::path d = base / ("stoke-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(d);
    static const std::string keep = d.string();
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(keep, ec);
    });
    return d.string();
  }();
  return dir;
}

// Writes data[0, size) to scratch_dir()/name and returns the path.
inline std::string write_input(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  if (std::fclose(f) != 0) std::abort();
  return path;
}

}  // namespace stoke::fuzz
