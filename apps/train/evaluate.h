// Batches on the training device, and the evaluation on the test split.
#pragma once

#include <cstdint>

#include "data/loader.h"
#include "data/normalize.h"
#include "distributed.h"
#include "nn/module.h"

namespace stoke::train {

// A batch on the training device: images normalized to NCHW (f32, or the --amp dtype for training
// batches), labels as loaded.
struct DeviceBatch {
  Tensor images, labels;
};
// How a training batch is finished where it is consumed: its dtype and, with --augment (on the
// device), the crop and flip folded into the normalize pass (data::crop_flip_normalize), drawn
// per sample from (seed, epoch, dataset index) as the loader's transforms would.
struct BatchFinish {
  data::NormalizeOptions normalize;  // its mean and std (its dtype is the field below)
  DType dtype = DType::f32;
  bool augment = false;
  data::CropFlipOptions crop;
  uint64_t seed = 0;
  MemoryFormat memory_format = MemoryFormat::contiguous;  // the images' layout (--channels-last)
};
DeviceBatch to_device(const data::Batch& batch, Device device, const BatchFinish& finish = {});

// How many rows of `logits` have their largest value at the row's label: an i64 scalar on the
// logits' device (`labels`: integers on the same device), not read back.
Tensor correct_predictions(const Tensor& logits, const Tensor& labels);
// How many rows hold their label among the 5 largest logits, the same way.
Tensor top5_predictions(const Tensor& logits, const Tensor& labels);

struct EvalResult {
  double loss = 0, acc = 0;  // the mean cross-entropy and the accuracy in percent
  double acc5 = -1;          // top-5 accuracy in percent; -1 with 5 classes or fewer
};

// The whole test split, normalized as the training batches are (`normalize`), in eval mode under
// no-grad; `model` is back in training mode after. In a job each rank evaluates its shard and the
// sums are added over the ranks. The images go in `memory_format` (--channels-last).
EvalResult evaluate(nn::Module& model, data::DataLoader& test, Device device,
                    const Distributed& dist, const data::NormalizeOptions& normalize,
                    MemoryFormat memory_format = MemoryFormat::contiguous);

}  // namespace stoke::train
