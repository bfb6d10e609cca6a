// The dataset interface every format implements (IDX, CIFAR binary, image folders, the in-RAM
// cache, packed shards): random access to uint8 HWC images and integer labels. Samplers pick
// indices, worker threads call get() concurrently, transforms run on the uint8 pixels, and the
// batch stays uint8 until the consumer normalizes it (docs/design.md, "Data").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stoke::data {

// One decoded sample: a uint8 image in HWC order (row-major, channels interleaved) and its label.
// `pixels` is reused across calls to keep allocation out of the worker loop.
struct Example {
  std::vector<uint8_t> pixels;  // height * width * channels bytes
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 0;
  int64_t label = 0;
};

class Dataset {
 public:
  virtual ~Dataset() = default;

  // Number of samples.
  virtual int64_t size() const = 0;

  // Decodes sample `index` into `out`, reusing out.pixels' capacity. Must be safe to call from
  // several threads at once. Throws stoke::Error naming the index, where the sample came from
  // (describe()) and what was wrong; never returns a partial or made-up sample.
  virtual void get(int64_t index, Example& out) const = 0;

  // Number of classes (labels are in [0, num_classes)).
  virtual int64_t num_classes() const = 0;

  // Class names in label order when the format has them (image folders: directory names);
  // otherwise empty.
  virtual std::vector<std::string> class_names() const { return {}; }

  // Where sample `index` comes from, for error messages: "path/to/img.png", or
  // "train-images-idx3-ubyte.gz, image 17".
  virtual std::string describe(int64_t index) const = 0;
};

}  // namespace stoke::data
