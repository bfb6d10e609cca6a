// libFuzzer harness: data::read_idx (data/idx.h), raw and gzip-compressed. The first byte picks
// the form: odd = the rest as it is (read_idx detects gzip by its magic, so mutated gzip streams
// are reached too), even = the rest gzip-compressed here first, so that mutations of the IDX
// header and data also reach the inflating path. Memory is capped at 64 MiB of tensor data.
#include <zlib.h>

#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "data/idx.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool raw = data[0] & 1;
  const uint8_t* body = data + 1;
  size_t n = size - 1;
  std::vector<uint8_t> gz;
  if (!raw) {
    z_stream z{};
    if (deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) std::abort();
    gz.resize(deflateBound(&z, static_cast<uLong>(n)) + 32);
    z.next_in = const_cast<Bytef*>(body);
    z.avail_in = static_cast<uInt>(n);
    z.next_out = gz.data();
    z.avail_out = static_cast<uInt>(gz.size());
    if (deflate(&z, Z_FINISH) != Z_STREAM_END) std::abort();
    gz.resize(z.total_out);
    deflateEnd(&z);
    body = gz.data();
    n = gz.size();
  }
  const std::string path =
      stoke::fuzz::write_input(raw ? "in-idx3-ubyte" : "in-idx3-ubyte.gz", body, n);
  try {
    stoke::Tensor t = stoke::data::read_idx(path, {.max_bytes = 64 << 20});
    if (t.numel() > 0 && t.data_ptr() == nullptr) std::abort();
  } catch (const stoke::Error&) {
  }
  return 0;
}
