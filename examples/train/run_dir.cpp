#include "run_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace stoke::train {
namespace {

namespace fs = std::filesystem;

const char* const kCheckpoints[] = {"last.safetensors", "best.safetensors"};

std::string errno_text(int e = errno) {
  return std::strerror(e);
}

// The lines of a regular file, or -1 when it is missing, not regular or empty.
int64_t nonempty_file_lines(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return -1;
  std::ifstream in(path);
  int64_t lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  return lines;
}

std::string lines_text(int64_t n) {
  return std::to_string(n) + (n == 1 ? " line" : " lines");
}

// The integer after `"key":` in a metrics record, if there is one.
std::optional<int64_t> field(const std::string& line, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  const size_t at = line.find(k);
  if (at == std::string::npos) return std::nullopt;
  char* end = nullptr;
  const char* begin = line.c_str() + at + k.size();
  const long long v = std::strtoll(begin, &end, 10);
  if (end == begin) return std::nullopt;
  return v;
}

}  // namespace

std::optional<std::string> earlier_results(const Flags& f) {
  if (f.resume || f.overwrite) return std::nullopt;
  const bool default_metrics =
      !f.checkpoint.empty() && f.metrics == (fs::path(f.checkpoint) / "metrics.jsonl").string();
  std::string found;
  if (!f.checkpoint.empty()) {
    for (const char* name : kCheckpoints) {
      std::error_code ec;
      if (fs::exists(fs::symlink_status(fs::path(f.checkpoint) / name, ec)))
        found += std::string(found.empty() ? "" : ", ") + name;
    }
  }
  const int64_t lines = f.metrics.empty() ? -1 : nonempty_file_lines(f.metrics);
  if (lines >= 0 && default_metrics)
    found += (found.empty() ? "" : ", ") + std::string("metrics.jsonl (") + lines_text(lines) + ")";
  std::string message;
  if (!found.empty())
    message = "--checkpoint " + f.checkpoint + " already holds an earlier run's results: " + found;
  if (lines >= 0 && !default_metrics)
    message += (message.empty() ? "" : "; ") + std::string("--metrics ") + f.metrics +
               " already exists and is not empty (" + lines_text(lines) + ")";
  if (message.empty()) return std::nullopt;
  return "stoke-train: " + message +
         ". Refusing to start a new run over it: pass --resume to continue that run" +
         (f.checkpoint.empty() ? " (with its --checkpoint DIR)" : "") +
         ", or --overwrite to start over (replaces them).";
}

void prepare_checkpoint_dir(const Flags& f) {
  if (f.checkpoint.empty()) return;
  const std::string& dir = f.checkpoint;
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (fs::exists(st)) {
    STOKE_CHECK(fs::is_directory(st), "stoke-train", "--checkpoint ", dir,
                ": exists and is not a directory");
  } else {
    fs::create_directories(dir, ec);
    STOKE_CHECK(!ec, "stoke-train", "--checkpoint ", dir,
                ": cannot create the directory: ", ec.message());
  }
  // Writable? Permission bits alone do not say (root, read-only mounts): create a file and remove
  // it, as a save will.
  const std::string probe =
      (fs::path(dir) / (".stoke-train-probe." + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  STOKE_CHECK(fd >= 0, "stoke-train", "--checkpoint ", dir,
              ": the directory is not writable (creating a file in it failed: ", errno_text(), ")");
  ::close(fd);
  STOKE_CHECK(::unlink(probe.c_str()) == 0, "stoke-train", "--checkpoint ", dir,
              ": the directory is not writable (removing ", probe, " failed: ", errno_text(), ")");
  if (f.overwrite) {
    for (const char* name : kCheckpoints) {
      const fs::path p = fs::path(dir) / name;
      fs::remove(p, ec);
      STOKE_CHECK(!ec, "stoke-train", "--overwrite: cannot remove ", p.string(), ": ",
                  ec.message());
    }
  }
  remove_stale_temp_files(dir);
}

std::vector<std::string> remove_stale_temp_files(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const size_t at = name.rfind(".safetensors.tmp.");
    if (at == std::string::npos) continue;
    const std::string digits = name.substr(at + std::strlen(".safetensors.tmp."));
    // Only names that nn::save_safetensors makes: the suffix is a process id.
    if (digits.empty() || digits.size() > 10 ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      continue;
    const long long pid = std::atoll(digits.c_str());
    if (pid <= 0 || pid > INT_MAX || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive (or EPERM)
    std::error_code rm;
    if (fs::remove(it->path(), rm)) {
      std::fprintf(stderr, "stoke-train: removed %s, left by process %lld (no longer running)\n",
                   it->path().c_str(), pid);
      removed.push_back(it->path().string());
    } else if (rm) {  // a cleanup that fails loses nothing: said, not fatal
      std::fprintf(stderr, "stoke-train: warning: cannot remove the stale %s: %s\n",
                   it->path().c_str(), rm.message().c_str());
    }
  }
  return removed;
}

void MetricsLog::open(std::string path, bool append) {
  close();
  path_ = std::move(path);
  const int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (append ? 0 : O_TRUNC);
  fd_ = ::open(path_.c_str(), flags, 0644);
  STOKE_CHECK(fd_ >= 0, "stoke-train", "cannot open the metrics file ", path_, ": ", errno_text());
}

MetricsLog::~MetricsLog() {
  if (fd_ >= 0) ::close(fd_);
}

int64_t MetricsLog::drop_records_after(int64_t epochs_done, int64_t global_step) {
  struct stat st {};
  // Only a regular file holds records (reading /dev/full or a FIFO would never end).
  if (fd_ < 0 || ::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  std::ifstream in(path_, std::ios::binary);
  STOKE_CHECK(in.is_open(), "stoke-train", "cannot read the metrics file ", path_, ": ",
              errno_text());
  int64_t keep = 0;  // bytes before the first record to drop
  int64_t dropped = 0;
  bool cutting = false;
  for (std::string line; std::getline(in, line);) {
    if (!cutting) {
      const bool complete = !in.eof();  // the last line of a killed write has no newline
      const auto step = field(line, "step");
      const auto epoch = field(line, "epoch");
      const bool is_epoch = line.find("\"type\":\"epoch\"") != std::string::npos;
      cutting =
          !complete || (is_epoch ? epoch && *epoch > epochs_done : step && *step > global_step);
    }
    if (cutting) {
      ++dropped;
    } else {
      keep += static_cast<int64_t>(line.size()) + 1;
    }
  }
  if (dropped > 0)
    STOKE_CHECK(::ftruncate(fd_, static_cast<off_t>(keep)) == 0, "stoke-train",
                "cannot cut the metrics file ", path_, " back to step ", global_step, ": ",
                errno_text());
  return dropped;
}

void MetricsLog::write(const std::string& record) {
  if (fd_ < 0) return;
  const std::string line = record + "\n";
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    STOKE_CHECK(n > 0, "stoke-train", "writing to the metrics file ", path_,
                " failed: ", n < 0 ? errno_text() : "nothing was written");
    done += static_cast<size_t>(n);
  }
}

void MetricsLog::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  STOKE_CHECK(::close(fd) == 0, "stoke-train", "closing the metrics file ", path_,
              " failed: ", errno_text());
}

}  // namespace stoke::train
