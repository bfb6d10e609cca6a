// How ops keep the channels_last memory format, as torch does: an op whose output is laid out like
// its input (the elementwise maps, conv2d, batch and group norm, pooling, dropout, and their
// gradients with respect to that input) returns channels_last (NHWC strides) when its input
// suggests it (Tensor::suggest_memory_format). See docs/design.md, "channels_last".
#pragma once

#include <initializer_list>

#include "core/tensor.h"

namespace stoke::ops {

// The layout of an elementwise op's output of shape `out`: that of the first operand with that
// whole 4-d shape which is laid out in one of the two (channels_last as suggest_memory_format
// says, or contiguous); contiguous when none is. torch's TensorIterator also follows its operands
// in order. Operands may be null (absent).
MemoryFormat elementwise_format(std::initializer_list<const Tensor*> operands, const Shape& out);

// An elementwise op on channels_last operands runs on their (N, H, W, C) views: a dense
// channels_last tensor is contiguous there, and a broadcast operand ((C, 1, 1), (N, C, 1, 1), a
// scalar) broadcasts the same way, so the backend's contiguous kernels run unchanged and each
// element gets the same operations as in the NCHW run.
// t detached, padded to 4 dims with leading 1s, permuted to (N, H, W, C).
Tensor nhwc_view(const Tensor& t);
// The inverse for a 4-d (N, H, W, C) result: (N, C, H, W) with NHWC strides.
Tensor nchw_view(const Tensor& t);

// The layout a kernel with an NHWC variant of its own (batch norm, pooling, normalize) runs `t`
// in: channels_last for a 4-d t that suggests it (its NHWC storage, no copy), else contiguous.
MemoryFormat kernel_format(const Tensor& t);

// An uninitialized tensor of `shape` laid out in `format` (channels_last: a 4-d shape, NHWC
// memory seen as (N, C, H, W)).
Tensor empty_in_format(const Shape& shape, TensorOptions options, MemoryFormat format);

// `t` in `format`: t itself when it is already laid out so, else a copy. For the ops whose kernels
// compute NCHW (a 4-d t only; anything else comes back as it is).
Tensor in_format(const Tensor& t, MemoryFormat format);

}  // namespace stoke::ops
