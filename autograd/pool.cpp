#include "autograd/pool.h"

#include "autograd/function.h"

namespace stoke {

using autograd::GradList;
using autograd::NeedList;

Tensor max_pool2d(const Tensor& input, const Pool2dOptions& options) {
  if (!autograd::any_requires_grad({input})) return ops::max_pool2d(input, options);
  // Only the indices are needed for backward: the input itself is not kept alive.
  auto [output, indices] = ops::max_pool2d_with_indices(input, options);
  autograd::record("MaxPool2dBackward", {input}, {output},
                   [indices = indices, shape = input.shape(), options](
                       const GradList& g, const NeedList&) -> GradList {
                     return {ops::max_pool2d_backward(g[0], indices, shape, options)};
                   });
  return output;
}

Tensor avg_pool2d(const Tensor& input, const Pool2dOptions& options) {
  Tensor output = ops::avg_pool2d(input, options);
  if (autograd::any_requires_grad({input}))
    autograd::record(
        "AvgPool2dBackward", {input}, {output},
        [options, shape = input.shape()](const GradList& g, const NeedList&) -> GradList {
          return {ops::avg_pool2d_backward(g[0], shape, options)};
        });
  return output;
}

Tensor adaptive_avg_pool2d(const Tensor& input, std::array<int64_t, 2> output_size) {
  Tensor output = ops::adaptive_avg_pool2d(input, output_size);
  if (autograd::any_requires_grad({input}))
    autograd::record("AdaptiveAvgPool2dBackward", {input}, {output},
                     [shape = input.shape()](const GradList& g, const NeedList&) -> GradList {
                       return {ops::adaptive_avg_pool2d_backward(g[0], shape)};
                     });
  return output;
}

}  // namespace stoke
