// Checkpoints in the safetensors format, the files PyTorch users read with
// `safetensors.torch.load_file` and write with `save_file`: an 8-byte little-endian header length
// N, N bytes of JSON describing each tensor (dtype, shape, byte offsets into the data section) plus
// optional string metadata under "__metadata__", then the raw little-endian tensor data.
//
// Files are laid out as the reference serializer (safetensors/src/tensor.rs, `prepare`) lays them
// out: tensors sorted by descending dtype alignment, then by name, so that every tensor's data is
// aligned to its element size; compact JSON with "__metadata__" first, padded with spaces to a
// multiple of 8 bytes. The bytes match the reference serializer's (tests/fixtures/
// make_safetensors_fixture.py re-implements it), except that metadata keys are written sorted where
// the reference writes them in hash order.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/named_tensors.h"

namespace stoke::nn {

// What a safetensors file holds: its tensors, in the order their data lies in the file, and its
// "__metadata__" string map (empty when the file has none).
struct SafetensorsFile {
  NamedTensors tensors;
  std::map<std::string, std::string> metadata;
};

// Writes `tensors` (CPU tensors of any dtype and strides; names unique, not "__metadata__") and
// `metadata` to `path` atomically: the file is written to `path + ".tmp.<pid>"`, flushed and
// fsynced, renamed over `path`, and the directory is fsynced, so a crash leaves either the old file
// or the new one. Throws stoke::Error naming the path (and strerror for I/O failures); on failure
// the temporary file is removed and `path` is untouched. The metadata also gets "stoke.crc32", a
// CRC-32 per tensor (name, dtype, shape and data) and of the other metadata (the key itself is
// reserved); PyTorch's loader ignores it.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// How load_safetensors treats a file without "stoke.crc32".
struct SafetensorsLoadOptions {
  // Refuse it: for readers of files only stoke writes (stoke-train's last.safetensors), where a
  // missing key means the file was edited (a renamed key turned the check off) or is not stoke's.
  bool require_checksum = false;
};

// Reads a safetensors file into fresh, contiguous CPU tensors (ordered by data offset). The file is
// treated as untrusted: every length, offset, shape and type is validated before use, and any
// problem is a stoke::Error naming the path and what is wrong (never a crash or an out-of-bounds
// read). As the reference library requires, the tensors' data_offsets must cover the data section
// exactly: in offset order each tensor begins where the previous one ended, the first at 0, the
// last at the end of the file (no gap, no overlap, no trailing bytes). BOOL bytes other than 0 are
// read as true. When the file has "stoke.crc32" (every file stoke writes), each tensor and the
// metadata must match it, or the error names what does not; the key is then left out of the
// returned metadata.
SafetensorsFile load_safetensors(const std::string& path,
                                 const SafetensorsLoadOptions& options = {});

}  // namespace stoke::nn
