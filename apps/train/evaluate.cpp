#include "evaluate.h"

#include <algorithm>
#include <vector>

#include "device_values.h"

#include "stoke/stoke.h"
#if STOKE_HAS_CUDA || STOKE_CUDA_EMU
#include "cuda/runtime/pinned.h"
#endif

namespace stoke::train {
namespace {

// An i32 (n, 3) host tensor for crops: pinned memory when bound for a GPU.
Tensor host_crops(int64_t n, Device device) {
#if STOKE_HAS_CUDA || STOKE_CUDA_EMU
  if (device.is_cuda())
    return Tensor::from_storage(cuda::pinned_storage(static_cast<size_t>(n) * 3 * sizeof(int32_t)),
                                {n, 3}, {3, 1}, 0, DType::i32);
#endif
  (void)device;
  return empty({n, 3}, {.dtype = DType::i32});
}

}  // namespace

// The u8 images cross the bus as bytes (non-blocking) and are normalized there; labels likewise.
// With augmentation the crops are drawn here on the host (12 bytes a sample, in pinned memory
// for a GPU so that they upload asynchronously too) and applied in the normalize pass.
DeviceBatch to_device(const data::Batch& batch, Device device, const BatchFinish& finish) {
  data::NormalizeOptions norm = finish.normalize;
  norm.dtype = finish.dtype;
  norm.memory_format = finish.memory_format;  // written in that layout by the fused pass
  const Tensor images =
      device.is_cpu() ? batch.images : batch.images.to(device, /*non_blocking=*/true);
  const Tensor labels =
      device.is_cpu() ? batch.labels : batch.labels.to(device, /*non_blocking=*/true);
  if (!finish.augment) return {data::normalize(images, norm), labels};
  const int64_t n = batch.images.size(0);
  Tensor crops = host_crops(n, device);
  data::draw_crops_into(crops, batch.indices, batch.images.size(1), batch.images.size(2),
                        finish.crop, finish.seed, batch.epoch);
  return {data::crop_flip_normalize(images, crops, norm, finish.crop.height, finish.crop.width),
          labels};
}

namespace {

// Labels as i64, what argmax and topk's indices compare with.
Tensor i64_labels(const Tensor& labels) {
  return labels.dtype() == DType::i64 ? labels : labels.to(DType::i64);
}

}  // namespace

Tensor correct_predictions(const Tensor& logits, const Tensor& labels) {
  NoGradGuard no_grad;
  return sum(eq(argmax(logits.detach(), 1), i64_labels(labels)));
}

// A row of topk's indices holds distinct classes, so the label matches at most one of them.
Tensor top5_predictions(const Tensor& logits, const Tensor& labels) {
  NoGradGuard no_grad;
  const Tensor top = topk(logits.detach(), 5, {.dim = 1}).indices;
  return sum(eq(top, i64_labels(labels).reshape({labels.numel(), 1}).expand(top.shape())));
}

EvalResult evaluate(nn::Module& model, data::DataLoader& test, Device device,
                    const Distributed& dist, const data::NormalizeOptions& normalize,
                    MemoryFormat memory_format) {
  NoGradGuard no_grad;
  model.eval();
  double loss_sum = 0;
  int64_t correct = 0, correct5 = 0;
  bool top5 = false;
  test.set_epoch(0);
  BatchFinish finish;  // f32, no augmentation
  finish.normalize = normalize;
  finish.memory_format = memory_format;
  // Each batch's loss sum and counts stay on the device, read back 64 batches at a time.
  DeviceValues batch_sums(device, 64, 2);
  const Tensor no_top5 = zeros({1}, {.dtype = DType::i64, .device = device});  // 5 classes or fewer
  const auto settle = [&] {
    const DeviceValues::Values v = batch_sums.take("the evaluation's sums");
    for (size_t i = 0; i < v.value.size(); ++i) {
      loss_sum += v.value[i];
      correct += v.count[i][0];
      correct5 += v.count[i][1];
    }
  };
  while (auto batch = test.next()) {
    const DeviceBatch b = to_device(*batch, device, finish);
    const Tensor logits = model(b.images);
    top5 = logits.size(1) > 5;
    // Under no-grad stoke's cross_entropy records nothing: the same kernel as ops::cross_entropy.
    batch_sums.push(cross_entropy(logits, b.labels, {.reduction = Reduction::sum}),
                    {correct_predictions(logits, b.labels),
                     top5 ? top5_predictions(logits, b.labels) : no_top5});
    if (batch_sums.full()) settle();
  }
  settle();
  model.train();
  std::vector<double> sums{loss_sum, static_cast<double>(correct), static_cast<double>(test.size()),
                           static_cast<double>(correct5)};
  dist.sum(sums);
  const double n = std::max(sums[2], 1.0);
  return {sums[0] / n, 100.0 * sums[1] / n, top5 ? 100.0 * sums[3] / n : -1.0};
}

}  // namespace stoke::train
