// Dropout on cuda tensors: cuda/kernels/dropout.h draws the keep mask with the same Philox
// counters as the CPU kernel (ops/cpu/dropout.cpp), so one generator state gives one mask on
// both devices; the entry point reserves the counters before dispatching.
#include "cuda/kernels/dropout.h"
#include "ops/cuda/backend.h"
#include "ops/dropout.h"

namespace stoke::ops::cuda_glue {

DropoutResult CudaBackend::dropout_with_mask(const Tensor& input, double p, GeneratorState state) {
  const char* op = "dropout";
  check_float_dtype(op, input);
  const Tensor x = input.contiguous();
  DropoutResult r{empty_on(x.shape(), x.dtype(), x.device()),
                  empty_on(x.shape(), DType::u8, x.device())};
  if (x.numel() == 0) return r;
  cuda::dropout_forward(x.dtype(), x.data_ptr(), r.output.data_ptr(), typed<uint8_t>(r.mask),
                        x.numel(), p, state.seed, state.offset, launch_stream());
  return r;
}

Tensor CudaBackend::dropout_backward(const Tensor& grad_output, const Tensor& mask, double p) {
  const char* op = "dropout_backward";
  check_float_dtype(op, grad_output);
  const Tensor g = grad_output.contiguous(), m = mask.contiguous();
  Tensor dx = empty_on(g.shape(), g.dtype(), g.device());
  if (g.numel() == 0) return dx;
  cuda::dropout_backward(g.dtype(), g.data_ptr(), typed<uint8_t>(m), dx.data_ptr(), g.numel(), p,
                         launch_stream());
  return dx;
}

}  // namespace stoke::ops::cuda_glue
