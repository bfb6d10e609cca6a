// libFuzzer harness: nn::load_safetensors (nn/checkpoint/safetensors.h) on arbitrary bytes.
// A file that loads is saved and loaded again: the round trip must give the same tensors
// (std::abort otherwise, which libFuzzer reports as a crash).
#include <cstring>
#include <map>
#include <string>

#include "core/error.h"
#include "core/tensor.h"
#include "fuzz/fuzz_util.h"
#include "nn/checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = stoke::fuzz::write_input("in.safetensors", data, size);
  stoke::nn::SafetensorsFile file;
  try {
    file = stoke::nn::load_safetensors(path);
  } catch (const stoke::Error&) {
    return 0;
  }
  // What loaded must save (stoke's own writer, with its CRC) and load back identically.
  const std::string again = stoke::fuzz::scratch_dir() + "/again.safetensors";
  try {
    stoke::nn::save_safetensors(again, file.tensors, file.metadata);
  } catch (const stoke::Error&) {
    return 0;  // e.g. a name the writer reserves; the reader's safety is what is fuzzed
  }
  const stoke::nn::SafetensorsFile back = stoke::nn::load_safetensors(again);
  // The writer orders tensors its own way (by dtype alignment, then name): compare by name.
  if (back.tensors.size() != file.tensors.size() || back.metadata != file.metadata) std::abort();
  std::map<std::string, const stoke::Tensor*> saved;
  for (const auto& [name, t] : back.tensors) saved[name] = &t;
  for (const auto& [name, t] : file.tensors) {
    const auto it = saved.find(name);
    if (it == saved.end()) std::abort();
    const stoke::Tensor& t2 = *it->second;
    if (t.shape() != t2.shape() || t.dtype() != t2.dtype()) std::abort();
    const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
    if (bytes && std::memcmp(t.data_ptr(), t2.data_ptr(), bytes) != 0) std::abort();
  }
  return 0;
}
