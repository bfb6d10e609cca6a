// libFuzzer harness: data::PackedDataset (data/packed.h), the pack.index and shard reader.
// Input: byte 0 = options (bit 0: verify shard CRCs on open, bit 1: recompute the index's
// trailing CRC-32 so that mutated headers get past the checksum to the parser), then a
// little-endian u32 length and that many bytes of pack.index, a u32 length and shard-00000.bin,
// and the rest as shard-00001.bin. A pack that opens has every record read (get, pixels, label).
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "data/packed.h"
#include "fuzz/fuzz_util.h"

namespace {

bool take(const uint8_t*& p, size_t& n, std::vector<uint8_t>& out) {
  if (n < 4) return false;
  const size_t len = size_t(p[0]) | size_t(p[1]) << 8 | size_t(p[2]) << 16 | size_t(p[3]) << 24;
  p += 4;
  n -= 4;
  if (len > n) return false;
  out.assign(p, p + len);
  p += len;
  n -= len;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t flags = data[0];
  const uint8_t* p = data + 1;
  size_t n = size - 1;
  std::vector<uint8_t> index, shard0;
  if (!take(p, n, index) || !take(p, n, shard0)) return 0;
  if ((flags & 2) && index.size() >= 4) {
    const uLong crc = crc32(0L, index.data(), static_cast<uInt>(index.size() - 4));
    for (int i = 0; i < 4; ++i) index[index.size() - 4 + size_t(i)] = uint8_t(crc >> (8 * i));
  }
  const std::string& dir = stoke::fuzz::scratch_dir();
  stoke::fuzz::write_input("pack.index", index.data(), index.size());
  stoke::fuzz::write_input("shard-00000.bin", shard0.data(), shard0.size());
  stoke::fuzz::write_input("shard-00001.bin", p, n);
  if (stoke::data::packed_index_path(dir) != dir + "/pack.index" ||
      stoke::data::packed_shard_path(dir, 1) != dir + "/shard-00001.bin")
    std::abort();  // the harness's file names must be the reader's
  try {
    stoke::data::PackedDataset ds(dir, {.verify = (flags & 1) != 0});
    stoke::data::Example ex;
    const int64_t pixels = ds.height() * ds.width() * ds.channels();
    for (int64_t i = 0; i < ds.size() && i < 256; ++i) {
      ds.get(i, ex);
      if (static_cast<int64_t>(ex.pixels.size()) != pixels) std::abort();
      if (std::memcmp(ex.pixels.data(), ds.pixels(i), ex.pixels.size()) != 0) std::abort();
      if (ex.label != ds.label(i) || ex.label < 0 || ex.label >= ds.num_classes()) std::abort();
    }
  } catch (const stoke::Error&) {
  }
  return 0;
}
