// softmax and log_softmax on cuda tensors: cuda/kernels/softmax.h (f32, f16, bf16).
#include "cuda/kernels/softmax.h"
#include "ops/check.h"
#include "ops/cuda/backend.h"

namespace stoke::ops::cuda_glue {

Tensor CudaBackend::softmax(const Tensor& x_in, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  check_float_dtype(name, x_in);
  const Tensor x = x_in.detach().contiguous();
  Tensor y = empty_on(x.shape(), x.dtype(), x.device());
  if (x.numel() == 0) return y;
  const Split s = split_at(x, wrap_dim(dim, std::max<int64_t>(x.dim(), 1), name));
  cuda::softmax_forward(x.dtype(), x.data_ptr(), y.data_ptr(), s.outer, s.n, s.inner, log,
                        launch_stream());
  return y;
}

Tensor CudaBackend::softmax_backward(const Tensor& grad_in, const Tensor& output_in, int64_t dim,
                                     bool log) {
  const char* name = log ? "log_softmax_backward" : "softmax_backward";
  check_float_dtype(name, grad_in);  // dtypes and shapes: ops/softmax.cpp
  const Tensor g = grad_in.detach().contiguous(), y = output_in.detach().contiguous();
  Tensor dx = empty_on(y.shape(), y.dtype(), y.device());
  if (y.numel() == 0) return dx;
  const Split s = split_at(y, wrap_dim(dim, std::max<int64_t>(y.dim(), 1), name));
  cuda::softmax_backward(y.dtype(), g.data_ptr(), y.data_ptr(), dx.data_ptr(), s.outer, s.n,
                         s.inner, log, launch_stream());
  return dx;
}

}  // namespace stoke::ops::cuda_glue
