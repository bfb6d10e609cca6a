// CUDA dtype conversion and strided copy (contiguous(), copy_, to(dtype) of cuda tensors) between
// f32, f64, f16, bf16, i32, i64, u8 and bool, with core's conversion rules (core/tensor.cpp's
// copy_strided): f16/bf16 go through f32 and are rounded to nearest even (core/half.h), a value
// becomes bool as value != 0, bool is 0 or 1, float to integer truncates.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "cuda/compat.h"
#include "cuda/kernels/elementwise_util.h"

namespace stoke::cuda {

// Offsets of (dst, src) over the copied shape, for cast_strided().
using CastOffsets = StridedOffsets<2>;

// Builds the offsets of a strided copy of `shape` (ndim dims) from src_strides to dst_strides
// (src_strides may hold 0 on broadcast dims: copy_ broadcasts its source).
CastOffsets make_cast_offsets(const int64_t* shape, int ndim, const int64_t* dst_strides,
                              const int64_t* src_strides);

// dst[i] = convert(src[i]) for n contiguous elements. 4-element vector accesses when both
// pointers are aligned for them.
void cast(DType src_dtype, const void* src, DType dst_dtype, void* dst, int64_t n,
          cudaStream_t stream);

// The same over any strides: dst[offsets.dst(i)] = convert(src[offsets.src(i)]) for numel
// elements. Contiguous offsets take cast()'s path.
void cast_strided(DType src_dtype, const void* src, DType dst_dtype, void* dst,
                  const CastOffsets& offsets, int64_t numel, cudaStream_t stream);

// Offsets of the filled tensor, for fill().
using FillOffsets = StridedOffsets<1>;

FillOffsets make_fill_offsets(const int64_t* shape, int ndim, const int64_t* strides);

// dst[offsets(i)] = convert(value) for numel elements: fill_/zeros/ones of cuda tensors as one
// launch (the value travels as a kernel argument, no host-to-device copy). The conversion is
// cast()'s from f64, so a fill equals a cast of the f64 value.
void fill(DType dtype, void* dst, const FillOffsets& offsets, int64_t numel, double value,
          cudaStream_t stream);

}  // namespace stoke::cuda
