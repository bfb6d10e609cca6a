#include "evaluate.h"

#include <algorithm>
#include <vector>

#include "stoke/stoke.h"

namespace stoke::train {
namespace {

// Fashion-MNIST statistics of the training images (pixel / 255).
constexpr float kMean = 0.2860f, kStd = 0.3530f;

// uint8 batches become (x / 255 - mean) / std, f32 NCHW, at the consumer.
const data::NormalizeOptions kNormalize = {.mean = {kMean}, .std = {kStd}};

}  // namespace

// The u8 images cross the bus as bytes (non-blocking) and are normalized there; labels likewise.
DeviceBatch to_device(const data::Batch& batch, Device device) {
  if (device.is_cpu()) return {data::normalize(batch.images, kNormalize), batch.labels};
  return {data::normalize(batch.images.to(device, /*non_blocking=*/true), kNormalize),
          batch.labels.to(device, /*non_blocking=*/true)};
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
                    const Distributed& dist) {
  NoGradGuard no_grad;
  model.eval();
  double loss_sum = 0;
  int64_t correct = 0, correct5 = 0;
  bool top5 = false;
  test.set_epoch(0);
  while (auto batch = test.next()) {
    const DeviceBatch b = to_device(*batch, device);
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
