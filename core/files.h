// Files that stoke names by path, checked before use. A FIFO where a file is expected blocks
// open(2) until another process opens its other end: stoke would hang without a word. So every
// file stoke reads or writes by name goes through these: a FIFO, a directory, a socket or a block
// device is refused at once with an error naming the path and what it is.
//
// Inputs must be regular files. Outputs must be regular files, not exist yet, or be character
// devices (/dev/null discards, /dev/full fails every write with ENOSPC: writes to them never
// block, and tests use them).
#pragma once

#include <optional>
#include <string>

namespace stoke {

// Why `path` is no place for a file stoke writes ("is a FIFO (named pipe)", "is a directory"),
// following symbolic links; nothing when it does not exist, is a regular file or a character
// device.
std::optional<std::string> unusable_output_path(const std::string& path);

// Throws stoke::Error "<op>: <what> <path>: is a FIFO (named pipe), not a regular file" when
// unusable_output_path says why. `what` names where the path came from ("--metrics").
void check_output_path(const std::string& path, const std::string& op, const std::string& what);

// open(2) with O_WRONLY | O_CREAT | O_CLOEXEC | `flags` (O_APPEND, O_TRUNC, O_EXCL) and mode 0644,
// which never blocks: the file is opened with O_NONBLOCK, checked as check_output_path does, and
// switched back to blocking writes. Returns the descriptor; throws naming `what`, the path and the
// OS error.
int open_output_file(const std::string& path, int flags, const std::string& op,
                     const std::string& what);

// The whole of the regular file at `path`; anything else (a FIFO, a directory) is refused at once.
// Throws stoke::Error naming `what`, the path and the OS error.
std::string read_regular_file(const std::string& path, const std::string& op,
                              const std::string& what);

}  // namespace stoke
