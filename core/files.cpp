#include "core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace stoke {
namespace {

// What a non-regular file is, for the error messages.
const char* kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISCHR(mode)) return "a character device";
  return "a special file";
}

std::optional<std::string> unusable(mode_t mode) {
  if (S_ISREG(mode) || S_ISCHR(mode)) return std::nullopt;
  return std::string("is ") + kind_of(mode) + ", not a regular file";
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::optional<std::string> unusable_output_path(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;  // missing: open() will say more
  return unusable(st.st_mode);
}

void check_output_path(const std::string& path, const std::string& op, const std::string& what) {
  if (const auto why = unusable_output_path(path))
    STOKE_FAIL(op.c_str(), what, " ", path, ": ", *why);
}

int open_output_file(const std::string& path, int flags, const std::string& op,
                     const std::string& what) {
  check_output_path(path, op, what);
  // O_NONBLOCK: a FIFO created since the check would block a writer's open() until a reader came
  // (with the flag it fails at once with ENXIO, or opens and is refused by the check below).
  Fd f{::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | flags, 0644)};
  if (f.fd < 0 && errno == ENXIO)
    STOKE_FAIL(op.c_str(), what, " ", path, ": is a FIFO (named pipe), not a regular file");
  STOKE_CHECK(f.fd >= 0, op.c_str(), what, " ", path,
              ": cannot open for writing: ", std::strerror(errno));
  struct stat st {};
  STOKE_CHECK(::fstat(f.fd, &st) == 0, op.c_str(), what, " ", path,
              ": cannot stat: ", std::strerror(errno));
  if (const auto why = unusable(st.st_mode)) STOKE_FAIL(op.c_str(), what, " ", path, ": ", *why);
  const int fl = ::fcntl(f.fd, F_GETFL);
  STOKE_CHECK(fl >= 0 && ::fcntl(f.fd, F_SETFL, fl & ~O_NONBLOCK) == 0, op.c_str(), what, " ", path,
              ": fcntl failed: ", std::strerror(errno));
  const int fd = f.fd;
  f.fd = -1;
  return fd;
}

std::string read_regular_file(const std::string& path, const std::string& op,
                              const std::string& what) {
  // O_NONBLOCK: opening a FIFO for reading would block until a writer came.
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  STOKE_CHECK(f.fd >= 0, op.c_str(), what, " ", path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  STOKE_CHECK(::fstat(f.fd, &st) == 0, op.c_str(), what, " ", path,
              ": cannot stat: ", std::strerror(errno));
  STOKE_CHECK(S_ISREG(st.st_mode), op.c_str(), what, " ", path, ": is ", kind_of(st.st_mode),
              ", not a regular file");
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  for (;;) {
    if (got == out.size()) out.resize(out.size() + 4096);  // grown since fstat: read on
    const ssize_t r = ::read(f.fd, out.data() + got, out.size() - got);
    if (r < 0 && errno == EINTR) continue;
    STOKE_CHECK(r >= 0, op.c_str(), what, " ", path, ": read failed: ", std::strerror(errno));
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

}  // namespace stoke
