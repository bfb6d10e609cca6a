// channels_last through ops (ops/memory_format.h).
#include "ops/memory_format.h"

namespace stoke::ops {

MemoryFormat elementwise_format(std::initializer_list<const Tensor*> operands, const Shape& out) {
  if (out.size() != 4) return MemoryFormat::contiguous;
  for (const Tensor* t : operands) {
    if (!t || !t->defined() || t->shape() != out) continue;
    // An operand laid out in neither format (an expanded gradient of sum's, all strides 0; a
    // strided view) says nothing: the next one decides, as torch's stride-sorted iteration does.
    if (t->suggest_memory_format() == MemoryFormat::channels_last)
      return MemoryFormat::channels_last;
    if (t->is_contiguous()) return MemoryFormat::contiguous;
  }
  return MemoryFormat::contiguous;
}

Tensor nhwc_view(const Tensor& t) {
  Tensor v = t.detach();
  while (v.dim() < 4) v = v.unsqueeze(0);
  return v.permute({0, 2, 3, 1});
}

Tensor nchw_view(const Tensor& t) {
  return t.permute({0, 3, 1, 2});
}

MemoryFormat kernel_format(const Tensor& t) {
  return t.dim() == 4 && t.suggest_memory_format() == MemoryFormat::channels_last
             ? MemoryFormat::channels_last
             : MemoryFormat::contiguous;
}

Tensor empty_in_format(const Shape& shape, TensorOptions options, MemoryFormat format) {
  if (format != MemoryFormat::channels_last) return empty(shape, options);
  return nchw_view(empty({shape[0], shape[2], shape[3], shape[1]}, options));
}

Tensor in_format(const Tensor& t, MemoryFormat format) {
  if (!t.defined() || t.dim() != 4 || format == MemoryFormat::contiguous) return t;
  return t.contiguous(format);  // itself when already laid out so (ops' outputs record no graph)
}

}  // namespace stoke::ops
