#include "evaluate.h"

#include <algorithm>
#include <vector>

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

int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  const auto pred = argmax(logits, 1).to(Device::cpu()).to_vector<int64_t>();
  const auto want = labels.to_vector<int64_t>();
  int64_t correct = 0;
  for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == want[i];
  return correct;
}

// Labels among the logits' 5 largest (stoke::topk on the device, the indices read back).
int64_t count_top5(const Tensor& logits, const Tensor& labels) {
  const auto top = topk(logits, 5, {.dim = 1}).indices.to(Device::cpu()).to_vector<int64_t>();
  const auto want = labels.to_vector<int64_t>();
  int64_t correct = 0;
  for (size_t i = 0; i < want.size(); ++i)
    correct += std::count(top.begin() + static_cast<std::ptrdiff_t>(5 * i),
                          top.begin() + static_cast<std::ptrdiff_t>(5 * i + 5), want[i]);
  return correct;
}

EvalResult evaluate(nn::Module& model, data::DataLoader& test, Device device,
                    const Distributed& dist, const data::NormalizeOptions& normalize) {
  NoGradGuard no_grad;
  model.eval();
  double loss_sum = 0;
  int64_t correct = 0, correct5 = 0;
  bool top5 = false;
  test.set_epoch(0);
  BatchFinish finish;  // f32, no augmentation
  finish.normalize = normalize;
  while (auto batch = test.next()) {
    const DeviceBatch b = to_device(*batch, device, finish);
    const Tensor logits = model(b.images);
    // Under no-grad stoke's cross_entropy records nothing: the same kernel as ops::cross_entropy.
    loss_sum += cross_entropy(logits, b.labels, {.reduction = Reduction::sum}).item();
    correct += count_correct(logits, batch->labels);
    top5 = logits.size(1) > 5;
    if (top5) correct5 += count_top5(logits, batch->labels);
  }
  model.train();
  std::vector<double> sums{loss_sum, static_cast<double>(correct), static_cast<double>(test.size()),
                           static_cast<double>(correct5)};
  dist.sum(sums);
  const double n = std::max(sums[2], 1.0);
  return {sums[0] / n, 100.0 * sums[1] / n, top5 ? 100.0 * sums[3] / n : -1.0};
}

}  // namespace stoke::train
