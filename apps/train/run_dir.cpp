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
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"

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

// Whether `a` and `b` name one file: the same path once symbolic links and ".." are resolved, or
// the same inode (a hard link) when both exist.
bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code ec1, ec2;
  const fs::path ca = fs::weakly_canonical(a, ec1), cb = fs::weakly_canonical(b, ec2);
  if (!ec1 && !ec2 && ca == cb) return true;
  if (fs::absolute(a, ec1).lexically_normal() == fs::absolute(b, ec2).lexically_normal())
    return true;
  std::error_code ec;
  return fs::exists(a, ec) && fs::exists(b, ec) && fs::equivalent(a, b, ec);
}

bool is_default_metrics(const Flags& f) {
  return !f.checkpoint.empty() && f.metrics == (fs::path(f.checkpoint) / "metrics.jsonl").string();
}

}  // namespace

std::string metrics_origin(const Flags& f) {
  return is_default_metrics(f) ? "--checkpoint " + f.checkpoint + ": its metrics file"
                               : std::string("--metrics");
}

void prepare_profile_output(const Flags& f) {
  if (f.profile.empty()) return;
  const int fd = open_output_file(f.profile, O_TRUNC, "stoke-train", "--profile");
  ::close(fd);
}

void check_run_outputs(const Flags& f) {
  struct Output {
    std::string what, path;
  };
  std::vector<Output> outputs;
  if (!f.metrics.empty()) outputs.push_back({metrics_origin(f), f.metrics});
  if (!f.profile.empty()) outputs.push_back({"--profile", f.profile});
  if (!f.checkpoint.empty())
    for (const char* name : kCheckpoints)
      outputs.push_back({"--checkpoint " + f.checkpoint + ": its " + name,
                         (fs::path(f.checkpoint) / name).string()});
  for (const Output& o : outputs) check_output_path(o.path, "stoke-train", o.what);
  for (size_t i = 0; i < outputs.size(); ++i)
    for (size_t j = i + 1; j < outputs.size(); ++j)
      STOKE_CHECK(!same_file(outputs[i].path, outputs[j].path), "stoke-train", outputs[j].what, " ",
                  outputs[j].path, " is the file of ", outputs[i].what, " (", outputs[i].path,
                  "): each would overwrite the other (every checkpoint save "
                  "replaces the file, every record is appended to it); give it a file of its own");
}

std::optional<std::string> resume_refusal(const Flags& f) {
  if (!f.resume || f.checkpoint.empty()) return std::nullopt;
  const fs::path last = fs::path(f.checkpoint) / "last.safetensors";
  std::error_code ec;
  const fs::file_status link = fs::symlink_status(last, ec);
  if (fs::is_symlink(link) && !fs::exists(fs::status(last, ec))) {
    const fs::path target = fs::read_symlink(last, ec);
    return "stoke-train: --resume: " + last.string() + " is a dangling symbolic link (to " +
           target.string() +
           "): there is no state to resume from. Restore the file it points to, or pass "
           "--overwrite instead of --resume to start over (replaces the directory's results).";
  }
  if (fs::exists(link)) return std::nullopt;  // resumed from (and checked as it loads)
  std::string found;
  if (fs::exists(fs::symlink_status(fs::path(f.checkpoint) / "best.safetensors", ec)))
    found = "best.safetensors";
  const int64_t lines = f.metrics.empty() ? -1 : nonempty_file_lines(f.metrics);
  if (lines >= 0) found += (found.empty() ? "" : ", ") + f.metrics + " (" + lines_text(lines) + ")";
  if (found.empty()) return std::nullopt;
  return "stoke-train: --resume: there is no " + last.string() +
         " to resume from, but there are results of an earlier run: " + found +
         ". Refusing to start from scratch over them (a new run would replace the best model and "
         "the records, which it cannot reproduce): restore last.safetensors to resume, or pass "
         "--overwrite instead of --resume to start over.";
}

std::optional<std::string> earlier_results(const Flags& f) {
  if (f.resume || f.overwrite) return std::nullopt;
  const bool default_metrics = is_default_metrics(f);
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

void MetricsLog::open(std::string path, bool append, const std::string& what) {
  close();
  path_ = std::move(path);
  fd_ = open_output_file(path_, O_APPEND | (append ? 0 : O_TRUNC), "stoke-train", what);
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
  int64_t dropped = 0, line_no = 0;
  bool cutting = false;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (!cutting) {
      // The last line of a killed write has no newline: it is dropped whatever it holds.
      if (in.eof()) {
        cutting = true;
      } else {
        const auto fail = [&](const std::string& why) {
          STOKE_FAIL("stoke-train", "--resume: the metrics file ", path_, ", line ", line_no, ", ",
                     why,
                     ": it is not a record stoke-train writes, so where the interrupted run "
                     "stopped cannot be told. Remove or repair that line, or start over with "
                     "--overwrite");
        };
        nlohmann::json r;
        try {
          r = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception& e) {
          fail(std::string("is not JSON (") + e.what() + ")");
        }
        if (!r.is_object()) fail(std::string("is a JSON ") + r.type_name() + ", not an object");
        const auto type = r.find("type");
        if (type == r.end() || !type->is_string()) fail("has no string \"type\"");
        for (const char* key : {"step", "epoch"}) {
          const auto v = r.find(key);
          if (v != r.end() && !v->is_number_integer())
            fail(std::string("has a \"") + key + "\" that is not an integer (" + v->dump() + ")");
        }
        const auto value = [&](const char* key) -> std::optional<int64_t> {
          const auto v = r.find(key);
          if (v == r.end()) return std::nullopt;
          return v->get<int64_t>();
        };
        const auto step = value("step");
        const auto epoch = value("epoch");
        cutting = *type == "epoch" ? epoch && *epoch > epochs_done : step && *step > global_step;
      }
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
