// IDX files (the MNIST family's format: LeCun et al., "THE MNIST DATABASE"): a 4-byte magic
// (0, 0, element type code, number of dims), one big-endian uint32 per dim, then the elements in
// row-major order, multi-byte types big-endian. Files may be gzip-compressed, as distributed.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace stoke::data {

// Reads an IDX file, raw or gzip-compressed (detected by its 1f 8b magic), into a CPU tensor of
// the file's dims. Element types: u8 (0x08) -> u8, i8 (0x09) / i16 (0x0B) / i32 (0x0C) -> i32,
// f32 (0x0D) -> f32, f64 (0x0E) -> f64. Throws stoke::Error naming the path and what was wrong:
// missing or unreadable file, bad magic, unknown type code, 0 or more than 8 dims, fewer data
// bytes than the header declares (truncated) or more (trailing bytes), corrupt or truncated gzip.
// The data may not need more than `max_bytes` of memory (0: the memory available now, from
// /proc/meminfo's MemAvailable), so that a small gzip bomb (2.9 MB expanding to 2.9 GB) is an error
// naming the sizes rather than an allocation that exhausts the machine.
//
// With `max_items` > 0 only the first max_items entries of the first dim are read (the tensor's
// first dim is the smaller of the two): a gzip stream is inflated only as far as they need, so
// memory and time follow what the caller asked for, not what the header declares (a 2.8 MB .gz
// of 2.9 GB took 2.9 GB of RSS for 100 images). The rest of a gzip stream is then not read or
// checked; a raw file's size is still checked against its header.
//
// A header that declares more data than the file can hold fails before anything is inflated or
// allocated: a raw file's size is exact, and a gzip stream of N bytes holds at most 1032 N
// (deflate's best ratio).
struct IdxReadOptions {
  uint64_t max_bytes = 0;
  int64_t max_items = 0;
};
Tensor read_idx(const std::string& path, IdxReadOptions options = {});

// The dims an IDX file's header declares (raw or gzip), reading only the header.
Shape read_idx_shape(const std::string& path);

// An image classification dataset held in memory.
struct IdxDataset {
  Tensor images;  // u8 (N, H, W)
  Tensor labels;  // i64 (N)
};

// Loads MNIST-style files from `dir`: {train,t10k}-images-idx3-ubyte and
// {train,t10k}-labels-idx1-ubyte, each raw or with a .gz suffix (the raw file wins when both
// exist). Checks that images are u8 (N, H, W), labels 1-D with N entries in [0, 255]. With
// `limit` > 0, only the first `limit` images and labels are read (read_idx's max_items).
IdxDataset load_mnist(const std::string& dir, bool train, int64_t limit = 0);

}  // namespace stoke::data
