// stoke-bench-ops-cuda, section "optim": the multi-tensor kernels (cuda/kernels/optimizer.h) over
// ResNet-18's parameter list (CIFAR-10: 62 tensors, 11.2 M parameters, most of them in a few large
// convolutions and many tiny batch-norm vectors), f32, in GB/s of their minimal DRAM traffic:
//   sgd momentum   p, buf read+write, g read: 20 B/param      fused (one list) vs one launch
//   adamw          p, m, v read+write, g read: 28 B/param      per tensor (lists of one), the
//   unscale        g read+write: 8 B/param                     loop the fused pass replaced
//   sum of squares g read: 4 B/param
// "vs ref" is the percentage of the per-tensor loop's rate (above 100: the fused pass is faster);
// "%peak" of the device's bandwidth.
#include <string>
#include <vector>

#include "bench/ops_cuda.h"
#include "cuda/kernels/optimizer.h"
#include "nn/models/models.h"

namespace stoke::bench::ops_cuda {
namespace {

// The parameter sizes of CIFAR ResNet-18 (3-channel 32x32 inputs, 10 classes).
std::vector<int64_t> resnet18_sizes() {
  std::vector<int64_t> sizes;
  const auto model =
      nn::models::make_model("resnet18", {.in_channels = 3, .num_classes = 10, .input_size = 32});
  for (const Tensor& p : model->parameters()) sizes.push_back(p.numel());
  return sizes;
}

// One device buffer per tensor of `sizes` (so each tensor starts at an allocator boundary, as
// real parameters do), filled uniform.
struct List {
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<void*> ptrs;
  explicit List(const std::vector<int64_t>& sizes) {
    for (int64_t n : sizes) {
      buffers.push_back(std::make_unique<Buffer>(static_cast<size_t>(n) * 4));
      ptrs.push_back(buffers.back()->ptr);
    }
  }
  std::vector<const void*> cptrs() const { return {ptrs.begin(), ptrs.end()}; }
};

}  // namespace

void bench_optim(Bench& b) {
  const std::vector<int64_t> sizes = resnet18_sizes();
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  const std::string shape =
      std::to_string(sizes.size()) + " tensors, " + std::to_string(total / 1000) + " K params";
  List p(sizes), g(sizes), m(sizes), v(sizes);
  Buffer found(4, DType::f32, Fill::zero), inv(4, DType::f32, Fill::zero);
  Buffer partials(static_cast<size_t>(cuda::multi_tensor_chunks(sizes)) * 4), out(4);
  // inv_scale = 1 (a zero fill would make the unscale write zeros: same traffic, but keep values).
  const float one = 1.f;
  STOKE_CUDA_CHECK(cudaMemcpy(inv.ptr, &one, 4, cudaMemcpyHostToDevice));
  const cuda::SgdStepArgs sgd{.lr = 1e-3, .momentum = 0.9};
  const cuda::AdamStepArgs adam{
      .lr = 1e-3, .weight_decay = 1e-2, .decoupled = true, .step_size = 1e-3, .bias2_sqrt = 1};
  auto one_of = [](const std::vector<void*>& list, size_t i) {
    return std::vector<void*>{list[i]};
  };
  auto pair = [&](const std::string& op, double bytes_per_param, const auto& fused,
                  const auto& single) {
    const double traffic = bytes_per_param * static_cast<double>(total);
    const double loop_gbs = b.bytes("optim", op, shape, "per-tensor launches", traffic, 0, [&] {
      for (size_t i = 0; i < sizes.size(); ++i) single(i);
    });
    b.bytes("optim", op, shape, "multi-tensor (fused)", traffic, loop_gbs, fused);
  };
  pair(
      "sgd momentum f32", 20,
      [&] { cuda::fused_sgd(DType::f32, p.ptrs, g.cptrs(), m.ptrs, sizes, sgd, nullptr); },
      [&](size_t i) {
        cuda::fused_sgd(DType::f32, one_of(p.ptrs, i), {g.ptrs[i]}, one_of(m.ptrs, i), {sizes[i]},
                        sgd, nullptr);
      });
  pair(
      "adamw f32", 28,
      [&] {
        cuda::fused_adam(DType::f32, p.ptrs, g.cptrs(), m.ptrs, v.ptrs, {}, sizes, adam, nullptr);
      },
      [&](size_t i) {
        cuda::fused_adam(DType::f32, one_of(p.ptrs, i), {g.ptrs[i]}, one_of(m.ptrs, i),
                         one_of(v.ptrs, i), {}, {sizes[i]}, adam, nullptr);
      });
  pair(
      "unscale + inf check f32", 8,
      [&] {
        cuda::non_finite_check_and_unscale(DType::f32, g.ptrs, sizes, found.as<float>(),
                                           inv.as<float>(), nullptr);
      },
      [&](size_t i) {
        cuda::non_finite_check_and_unscale(DType::f32, one_of(g.ptrs, i), {sizes[i]},
                                           found.as<float>(), inv.as<float>(), nullptr);
      });
  pair(
      "sum of squares f32", 4,
      [&] {
        cuda::sum_of_squares(DType::f32, g.cptrs(), sizes, partials.as<float>(), out.as<float>(),
                             nullptr);
      },
      [&](size_t i) {
        cuda::sum_of_squares(DType::f32, {g.ptrs[i]}, {sizes[i]}, partials.as<float>(),
                             out.as<float>(), nullptr);
      });
}

}  // namespace stoke::bench::ops_cuda
