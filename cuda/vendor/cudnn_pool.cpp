#include "cuda/vendor/cudnn_pool.h"

#include <sstream>

#include "cuda/runtime/device.h"
#include "cuda/vendor/check.h"
#include "cuda/vendor/cudnn_handle.h"

namespace stoke::cuda {
namespace {

cudnnPoolingMode_t cudnn_mode(PoolMode m) {
  switch (m) {
    case PoolMode::max:
      return CUDNN_POOLING_MAX_DETERMINISTIC;  // the backward routes to one maximum, like ours
    case PoolMode::avg_include_pad:
      return CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
    case PoolMode::avg_exclude_pad:
      return CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  }
  return CUDNN_POOLING_MAX;
}

struct PoolDescriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnPoolingDescriptor_t pool = nullptr;
  explicit PoolDescriptors(const PoolGeometry& g) {
    STOKE_CHECK(g.kernel[0] >= 1 && g.kernel[1] >= 1 && g.stride[0] >= 1 && g.stride[1] >= 1 &&
                    g.padding[0] >= 0 && g.padding[1] >= 0 && g.out_h() >= 1 && g.out_w() >= 1,
                "cuda::pool2d", "invalid pooling geometry ", g.str());
    const cudnnDataType_t t = cudnn_data_type(g.dtype, "cuda::pool2d");
    auto i = [](int64_t v) { return static_cast<int>(v); };
    STOKE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    STOKE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    STOKE_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&pool));
    STOKE_CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, t, i(g.n), i(g.c), i(g.h), i(g.w)));
    STOKE_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, t, i(g.n), i(g.c),
                                                 i(g.out_h()), i(g.out_w())));
    STOKE_CUDNN_CHECK(cudnnSetPooling2dDescriptor(pool, cudnn_mode(g.mode), CUDNN_PROPAGATE_NAN,
                                                  i(g.kernel[0]), i(g.kernel[1]), i(g.padding[0]),
                                                  i(g.padding[1]), i(g.stride[0]), i(g.stride[1])));
  }
  PoolDescriptors(const PoolDescriptors&) = delete;
  PoolDescriptors& operator=(const PoolDescriptors&) = delete;
  ~PoolDescriptors() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyPoolingDescriptor(pool);
  }
};

}  // namespace

int64_t PoolGeometry::out_h() const {
  return (h + 2 * padding[0] - kernel[0]) / stride[0] + 1;
}

int64_t PoolGeometry::out_w() const {
  return (w + 2 * padding[1] - kernel[1]) / stride[1] + 1;
}

std::string PoolGeometry::str() const {
  static constexpr const char* kModes[] = {"max", "avg", "avg-exclude-pad"};
  std::ostringstream os;
  os << kModes[static_cast<int>(mode)] << " n=" << n << " c=" << c << " h=" << h << " w=" << w
     << " k=" << kernel[0] << "x" << kernel[1] << " stride=" << stride[0] << "x" << stride[1]
     << " pad=" << padding[0] << "x" << padding[1] << " " << dtype_name(dtype);
  return os.str();
}

void pool2d_forward(const PoolGeometry& g, const void* x, void* y, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::cudnn_pool2d_forward");
  PoolDescriptors d(g);
  const float one = 1.0f, zero = 0.0f;
  STOKE_CUDNN_CHECK(cudnnPoolingForward(cudnn_handle(current_device(), stream), d.pool, &one, d.x,
                                        x, &zero, d.y, y));
}

void pool2d_backward(const PoolGeometry& g, const void* y, const void* dy, const void* x, void* dx,
                     cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::cudnn_pool2d_backward");
  PoolDescriptors d(g);
  const float one = 1.0f, zero = 0.0f;
  STOKE_CUDNN_CHECK(cudnnPoolingBackward(cudnn_handle(current_device(), stream), d.pool, &one, d.y,
                                         y, d.y, dy, d.x, x, &zero, d.x, dx));
}

}  // namespace stoke::cuda
