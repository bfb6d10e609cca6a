// A fresh directory under the system temp dir for one test, removed with everything in it (made
// writable first, so tests of read-only files clean up too).
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <system_error>

namespace stoke::test {

struct TempDir {
  std::filesystem::path path;

  // <temp>/<prefix>_<pid>_<n>: unique across the tests of one process and across processes.
  explicit TempDir(const std::string& prefix) {
    static std::atomic<int> counter{0};
    path = std::filesystem::temp_directory_path() /
           (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path, ec);
  }
  // The path of `name` inside the directory.
  std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace stoke::test
