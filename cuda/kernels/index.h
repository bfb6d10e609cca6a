// CUDA index kernels: cat, index_select, embedding, gather and their backward (scatter-add with
// atomicAdd), plus an index bounds check. Index tensors are contiguous i64. The forward kernels
// copy raw elements of any dtype (by element size); backward kernels are f32, f16 and bf16
// (f16/bf16 accumulate with their native atomicAdd, so repeated indices round at each add).
//
// Kernels never read or write out of bounds: a forward kernel writes 0 for an out-of-range index
// and a backward kernel skips it. The glue runs check_indices first and reports a bad index the
// way ops:: does (op, position, value, size).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "cuda/compat.h"
#include "cuda/kernels/elementwise_util.h"

namespace stoke::cuda {

// Concatenates `count` contiguous inputs, input i of shape [outer, sizes[i], inner], into dst of
// shape [outer, sum(sizes), inner] (the cat dim is the middle one). One launch per input.
void cat(size_t elem_size, int count, const void* const* srcs, const int64_t* sizes, int64_t outer,
         int64_t inner, void* dst, cudaStream_t stream);

// out [outer, k, inner] = x [outer, n, inner] at index (k entries) along the middle dim.
void index_select(size_t elem_size, const void* x, const int64_t* index, void* out, int64_t outer,
                  int64_t n, int64_t k, int64_t inner, cudaStream_t stream);

// grad_in [outer, n, inner] = 0, then grad [outer, k, inner] scatter-added at index.
void index_select_backward(DType dtype, const void* grad, const int64_t* index, void* grad_in,
                           int64_t outer, int64_t n, int64_t k, int64_t inner, cudaStream_t stream);

// out [count, dim] = rows of weight [num_weights, dim] at indices (count entries, any shape).
void embedding(size_t elem_size, const void* weight, const int64_t* indices, void* out,
               int64_t count, int64_t num_weights, int64_t dim, cudaStream_t stream);

// grad_weight [num_weights, dim] = 0, then rows of grad [count, dim] added at indices.
void embedding_backward(DType dtype, const void* grad, const int64_t* indices, void* grad_weight,
                        int64_t count, int64_t num_weights, int64_t dim, cudaStream_t stream);

// The geometry of torch.gather on contiguous x and index of the same number of dims.
struct GatherShape {
  int32_t ndim = 0;
  int32_t dim = 0;
  int64_t index_size[kMaxDims] = {};
  int64_t x_stride[kMaxDims] = {};
  int64_t x_dim_size = 0;  // x.size(dim): the bound of every index value
};

// Checks dims (ndim <= kMaxDims, dim in range, index.size(d) <= x.size(d) for d != dim) and
// builds the geometry; errors name "cuda::gather".
GatherShape make_gather_shape(const int64_t* x_shape, const int64_t* index_shape, int ndim,
                              int64_t dim);

// out (index's shape) [..., j, ...] = x [..., index[..., j, ...], ...] along shape.dim.
void gather(size_t elem_size, const void* x, const int64_t* index, void* out,
            const GatherShape& shape, int64_t numel, cudaStream_t stream);

// grad_in (x's shape, x_numel elements) = 0, then grad (index's shape) scatter-added at index.
void gather_backward(DType dtype, const void* grad, const int64_t* index, void* grad_in,
                     const GatherShape& shape, int64_t numel, int64_t x_numel, cudaStream_t stream);

// Value of *first_bad when every index is in range.
constexpr int32_t kNoBadIndex = 0x7f7f7f7f;

// *first_bad (device) = the lowest position i < n with index[i] outside [0, bound), or
// kNoBadIndex. Positions are tracked up to 2^31 - 2 (index tensors beyond that report none).
void check_indices(const int64_t* index, int64_t n, int64_t bound, int32_t* first_bad,
                   cudaStream_t stream);

}  // namespace stoke::cuda
