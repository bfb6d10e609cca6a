#include "cuda/vendor/cudnn_batch_norm.h"

#include "cuda/runtime/device.h"
#include "cuda/vendor/check.h"
#include "cuda/vendor/cudnn_handle.h"

namespace stoke::cuda {
namespace {

// The data descriptor (N, C, H, W) and the derived per-channel one (1, C, 1, 1, f32).
struct BnDescriptors {
  cudnnTensorDescriptor_t x = nullptr, param = nullptr;
  explicit BnDescriptors(const BatchNormGeometry& g) {
    STOKE_CHECK(g.n >= 1 && g.c >= 1 && g.h >= 1 && g.w >= 1, "cuda::batch_norm",
                "expected a non-empty input, got n=", g.n, " c=", g.c, " h=", g.h, " w=", g.w);
    STOKE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    STOKE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&param));
    STOKE_CUDNN_CHECK(cudnnSetTensor4dDescriptor(
        x, CUDNN_TENSOR_NCHW, cudnn_data_type(g.dtype, "cuda::batch_norm"), static_cast<int>(g.n),
        static_cast<int>(g.c), static_cast<int>(g.h), static_cast<int>(g.w)));
    STOKE_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(param, x, CUDNN_BATCHNORM_SPATIAL));
  }
  BnDescriptors(const BnDescriptors&) = delete;
  BnDescriptors& operator=(const BnDescriptors&) = delete;
  ~BnDescriptors() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(param);
  }
};

void check_eps(double eps) {
  STOKE_CHECK(eps >= CUDNN_BN_MIN_EPSILON, "cuda::batch_norm",
              "expected eps >= ", CUDNN_BN_MIN_EPSILON, " (cuDNN's minimum), got ", eps);
}

}  // namespace

void batch_norm_forward_training(const BatchNormGeometry& g, const void* x, void* y,
                                 const float* weight, const float* bias, float* running_mean,
                                 float* running_var, double momentum, double eps, float* save_mean,
                                 float* save_invstd, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::cudnn_batch_norm_forward_training");
  check_eps(eps);
  STOKE_CHECK((running_mean == nullptr) == (running_var == nullptr), "cuda::batch_norm",
              "expected both running statistics or neither");
  BnDescriptors d(g);
  const float one = 1.0f, zero = 0.0f;
  // cuDNN's exponentialAverageFactor is PyTorch's momentum (running = (1 - f)·running + f·batch),
  // and it too updates the running variance with the unbiased batch variance.
  STOKE_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      cudnn_handle(current_device(), stream), CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x, x, d.x, y,
      d.param, weight, bias, running_mean ? momentum : 0.0, running_mean, running_var, eps,
      save_mean, save_invstd));
}

void batch_norm_forward_inference(const BatchNormGeometry& g, const void* x, void* y,
                                  const float* weight, const float* bias, const float* running_mean,
                                  const float* running_var, double eps, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::cudnn_batch_norm_forward_inference");
  check_eps(eps);
  BnDescriptors d(g);
  const float one = 1.0f, zero = 0.0f;
  STOKE_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
      cudnn_handle(current_device(), stream), CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x, x, d.x, y,
      d.param, weight, bias, running_mean, running_var, eps));
}

void batch_norm_backward(const BatchNormGeometry& g, const void* x, const void* dy, void* dx,
                         const float* weight, float* grad_weight, float* grad_bias,
                         const float* save_mean, const float* save_invstd, double eps,
                         cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::cudnn_batch_norm_backward");
  check_eps(eps);
  BnDescriptors d(g);
  const float one = 1.0f, zero = 0.0f;
  STOKE_CUDNN_CHECK(cudnnBatchNormalizationBackward(
      cudnn_handle(current_device(), stream), CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero,
      d.x, x, d.x, dy, d.x, dx, d.param, weight, grad_weight, grad_bias, eps, save_mean,
      save_invstd));
}

}  // namespace stoke::cuda
