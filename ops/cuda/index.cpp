// Index ops on cuda tensors: cuda/kernels/index.h. The entry points (ops/index.cpp) have
// checked shapes; index ranges are checked on the device and reported at the next synchronization
// (check_index_range below, cuda/runtime/deferred_checks.h). one_hot is composed from comparisons.
#include "cuda/kernels/index.h"
#include "cuda/runtime/copy.h"
#include "cuda/runtime/deferred_checks.h"
#include "ops/creation.h"
#include "ops/cuda/backend.h"
#include "ops/elementwise.h"

namespace stoke::ops::cuda_glue {
namespace {

// (outer, inner) around dim of `shape`.
std::pair<int64_t, int64_t> outer_inner(const Shape& shape, int64_t dim) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
  for (int64_t d = dim + 1; d < static_cast<int64_t>(shape.size()); ++d) inner *= shape[d];
  return {outer, inner};
}

// The frame of the scatter-add backwards: a floating gradient (contiguous), the indices
// (contiguous) and the input gradient of `input_shape`, which launch(grad, idx, out) fills.
template <class Launch>
Tensor scatter_backward(const char* op, const Tensor& grad_in, const Tensor& index,
                        const Shape& input_shape, Launch launch) {
  check_float_dtype(op, grad_in);
  const Tensor grad = grad_in.detach().contiguous(), idx = index.contiguous();
  Tensor out = empty_on(input_shape, grad.dtype(), grad.device());
  if (out.numel() == 0) return out;
  launch(grad, idx, out);
  return out;
}

}  // namespace

void CudaBackend::check_index_range(const char* op, const Tensor& index_in, int64_t bound,
                                    std::function<std::string(int64_t)> describe) {
  const Tensor index = index_in.contiguous();
  if (index.numel() == 0) return;
  auto bad = std::make_shared<Tensor>(empty_on({1}, DType::i32, index.device()));
  cudaStream_t stream = launch_stream();
  cuda::check_indices(typed<int64_t>(index), index.numel(), bound, typed<int32_t>(*bad), stream);
  // No read-back here: the flag is read at this thread's next synchronization.
  cuda::defer_check(
      {.flag = bad->data_ptr(),
       .flag_is_i64 = false,
       .passed = cuda::kNoBadIndex,
       .stream = stream,
       .keep = bad,
       .describe = [op = std::string(op), describe = std::move(describe)](int64_t first) {
         return "stoke::" + op + ": " + describe(first);
       }});
}

Tensor CudaBackend::index_select(const Tensor& x_in, int64_t dim, const Tensor& index,
                                 const Shape& out_shape) {
  const Tensor x = x_in.detach().contiguous();
  Tensor out = empty_on(out_shape, x.dtype(), x.device());
  if (out.numel() == 0) return out;
  const auto [outer, inner] = outer_inner(x.shape(), dim);
  cuda::index_select(x.element_size(), x.data_ptr(), typed<int64_t>(index), out.data_ptr(), outer,
                     x.size(dim), index.numel(), inner, launch_stream());
  return out;
}

Tensor CudaBackend::index_select_backward(const Tensor& grad_in, int64_t dim, const Tensor& index,
                                          const Shape& input_shape) {
  return scatter_backward("index_select_backward", grad_in, index, input_shape,
                          [&](const Tensor& grad, const Tensor& idx, const Tensor& out) {
                            const auto [outer, inner] = outer_inner(input_shape, dim);
                            cuda::index_select_backward(
                                grad.dtype(), grad.data_ptr(), typed<int64_t>(idx), out.data_ptr(),
                                outer, input_shape[dim], idx.numel(), inner, launch_stream());
                          });
}

Tensor CudaBackend::gather(const Tensor& x_in, int64_t dim, const Tensor& index) {
  const Tensor x = x_in.detach().contiguous(), idx = index.contiguous();
  Tensor out = empty_on(idx.shape(), x.dtype(), x.device());
  if (out.numel() == 0) return out;
  const cuda::GatherShape g =
      cuda::make_gather_shape(x.shape().data(), idx.shape().data(), static_cast<int>(x.dim()), dim);
  cuda::gather(x.element_size(), x.data_ptr(), typed<int64_t>(idx), out.data_ptr(), g, idx.numel(),
               launch_stream());
  return out;
}

Tensor CudaBackend::gather_backward(const Tensor& grad_in, int64_t dim, const Tensor& index,
                                    const Shape& input_shape) {
  return scatter_backward(
      "gather_backward", grad_in, index, input_shape,
      [&](const Tensor& grad, const Tensor& idx, const Tensor& out) {
        const cuda::GatherShape g = cuda::make_gather_shape(
            input_shape.data(), idx.shape().data(), static_cast<int>(input_shape.size()), dim);
        cuda::gather_backward(grad.dtype(), grad.data_ptr(), typed<int64_t>(idx), out.data_ptr(), g,
                              idx.numel(), out.numel(), launch_stream());
      });
}

Tensor CudaBackend::one_hot(const Tensor& idx, int64_t num_classes) {
  // The indices compared with 0..C-1.
  const Tensor classes =
      arange(0, static_cast<double>(num_classes), 1, {.dtype = DType::i64, .device = idx.device()});
  return ops::eq(idx.unsqueeze(-1), classes).to(DType::i64);
}

}  // namespace stoke::ops::cuda_glue
