// Differentiable index and shape functions (see autograd/index.h).
#include "autograd/index.h"

#include "autograd/function.h"

namespace stoke {

using autograd::GradList;
using autograd::NeedList;

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  Tensor y = ops::cat(tensors, dim);
  if (autograd::any_requires_grad(tensors)) {
    const int64_t d = wrap_dim(dim, tensors[0].dim(), "cat");
    std::vector<int64_t> sizes;
    for (const Tensor& t : tensors) sizes.push_back(t.size(d));
    autograd::record("CatBackward", tensors, {y},
                     [d, sizes](const GradList& g, const NeedList& need) {
                       GradList out(sizes.size());
                       int64_t offset = 0;
                       for (size_t i = 0; i < sizes.size(); ++i) {
                         if (need[i]) out[i] = g[0].narrow(d, offset, sizes[i]);
                         offset += sizes[i];
                       }
                       return out;
                     });
  }
  return y;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  Tensor y = ops::stack(tensors, dim);
  if (autograd::any_requires_grad(tensors)) {
    const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
    autograd::record("StackBackward", tensors, {y},
                     [d, n = tensors.size()](const GradList& g, const NeedList& need) {
                       GradList out(n);
                       for (size_t i = 0; i < n; ++i)
                         if (need[i]) out[i] = g[0].select(d, static_cast<int64_t>(i));
                       return out;
                     });
  }
  return y;
}

namespace {

// index_select and gather: the forward kernel, and a scatter-add of the gradient at the same
// indices into zeros of x's shape.
template <Tensor (*Forward)(const Tensor&, int64_t, const Tensor&),
          Tensor (*Backward)(const Tensor&, int64_t, const Tensor&, const Shape&)>
Tensor indexed(const char* node, const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor y = Forward(x, dim, index);
  if (autograd::any_requires_grad({x}))
    autograd::record(
        node, {x}, {y},
        [dim, idx = index.detach(), shape = x.shape()](const GradList& g, const NeedList&) {
          return GradList{Backward(g[0], dim, idx, shape)};
        });
  return y;
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  return indexed<ops::index_select, ops::index_select_backward>("IndexSelectBackward", x, dim,
                                                                index);
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  Tensor y = ops::embedding(weight, indices);
  if (autograd::any_requires_grad({weight}))
    autograd::record(
        "EmbeddingBackward", {weight}, {y},
        [idx = indices.detach(), v = weight.size(0)](const GradList& g, const NeedList&) {
          return GradList{ops::embedding_backward(g[0], idx, v)};
        });
  return y;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  return indexed<ops::gather, ops::gather_backward>("GatherBackward", x, dim, index);
}

}  // namespace stoke
