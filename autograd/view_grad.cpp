// Makes core's view and copy methods differentiable (registered with core at start-up; see
// core/tensor.h, detail::AutogradHooks). One backward serves every view: the gradient of a view
// is written into a zero buffer laid out like the base's memory, through the view's own strides,
// and read back through the base's strides. Everything runs as ops on the gradient's device: the
// host never touches a device buffer, and each dtype accumulates in its own precision.
#include <algorithm>
#include <numeric>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "core/strided.h"
#include "ops/creation.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"

namespace stoke::autograd {
namespace {

// True when two indices of (shape, strides) address one element through a stride-0 dim (what
// expand makes).
bool overlaps(const Shape& shape, const Shape& strides) {
  for (size_t d = 0; d < shape.size(); ++d)
    if (strides[d] == 0 && shape[d] > 1) return true;
  return false;
}

// True when no two indices of (shape, strides) address one element: with the dims of size > 1
// sorted by stride, each stride steps over the whole extent of the dims below it.
bool distinct_addresses(const Shape& shape, const Shape& strides) {
  std::vector<size_t> dims;
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] > 1) dims.push_back(d);
  std::sort(dims.begin(), dims.end(), [&](size_t a, size_t b) { return strides[a] < strides[b]; });
  int64_t extent = 1;
  for (size_t d : dims) {
    if (strides[d] < extent) return false;
    extent = strides[d] * shape[d];
  }
  return true;
}

// dst += src elementwise where dst's strides may address one element several times (a view made
// with as_strided): runs serially on the CPU, accumulating in the gradient's own dtype (f16/bf16
// through f32). Only such views come here; expand's stride-0 dims are summed on the device first.
void accumulate_serially(const Tensor& dst, const Tensor& src) {
  const Tensor s = src.contiguous();
  const auto g = coalesce<2>(dst.shape(), {dst.strides(), s.strides()});
  dispatch_all(dst.dtype(), "view backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      STOKE_FAIL("view backward", "gradients cannot be bool");
    } else {
      T* d = static_cast<T*>(dst.data_ptr());
      const T* sp = static_cast<const T*>(s.data_ptr());
      for_each_row(g, 0, g.rows(), [&](const auto& off, int64_t n, const auto& st) {
        for (int64_t i = 0; i < n; ++i) {
          T& out = d[off[0] + i * st[0]];
          if constexpr (std::is_arithmetic_v<T>)
            out = static_cast<T>(out + sp[off[1] + i * st[1]]);
          else
            out = T(float(out) + float(sp[off[1] + i * st[1]]));
        }
      });
    }
  });
}

// The gradient of a base whose own indices alias memory (an expanded tensor: a stride-0 dim of
// size > 1), as torch's as_strided backward does it: the view's gradient is summed per memory
// location, and each location's sum is shared evenly among the base indices that alias it. What
// made the base (expand) sums the shares back, so its input receives each location's whole sum.
// Runs on the CPU (both sides alias, so no scatter without atomics would do): a rare path.
Tensor aliased_base_backward(const Tensor& g, const Shape& shape, const Shape& base_shape,
                             const Shape& base_strides, const Shape& view_strides,
                             int64_t rel_offset, DType dtype) {
  const int64_t span = storage_span(base_shape, base_strides);
  const Tensor sums = zeros({span}, {.dtype = dtype});
  accumulate_serially(sums.as_strided(shape, view_strides, rel_offset), g.to(Device::cpu()));
  const Tensor aliases = zeros({span}, {.dtype = dtype});
  accumulate_serially(aliases.as_strided(base_shape, base_strides, 0),
                      ones(base_shape, {.dtype = dtype}));
  // Locations no base index reaches hold a zero sum: dividing them by 1 keeps them zero.
  const Tensor shares = ops::div(sums, ops::clamp(aliases, 1.0, std::nullopt));
  return shares.as_strided(base_shape, base_strides, 0).contiguous().to(g.device());
}

// The gradient of `base` from the gradient `grad` of the view (view_shape, view_strides,
// rel_offset) of it.
Tensor view_backward(const Tensor& grad, const Shape& base_shape, const Shape& base_strides,
                     const Shape& view_shape, const Shape& view_strides, int64_t rel_offset,
                     DType dtype) {
  Tensor g = grad.to(dtype);
  Shape shape = view_shape;
  // Dims of stride 0 (expand) read one element many times: sum their gradient first, keeping the
  // dim with size 1, so that what is left addresses each element once.
  std::vector<int64_t> repeated;
  for (size_t d = 0; d < shape.size(); ++d)
    if (view_strides[d] == 0 && shape[d] > 1) repeated.push_back(static_cast<int64_t>(d));
  if (!repeated.empty()) {
    g = ops::sum(g, repeated, /*keepdim=*/true);
    for (int64_t d : repeated) shape[static_cast<size_t>(d)] = 1;
  }
  if (overlaps(base_shape, base_strides))
    return aliased_base_backward(g, shape, base_shape, base_strides, view_strides, rel_offset,
                                 dtype);
  const int64_t span = storage_span(base_shape, base_strides);
  if (distinct_addresses(shape, view_strides)) {
    Tensor buffer = zeros({span}, {.dtype = dtype, .device = g.device()});
    buffer.as_strided(shape, view_strides, rel_offset).copy_(g);
    return buffer.as_strided(base_shape, base_strides, 0);
  }
  Tensor buffer = zeros({span}, {.dtype = dtype});
  accumulate_serially(buffer.as_strided(shape, view_strides, rel_offset), g.to(Device::cpu()));
  return buffer.to(g.device()).as_strided(base_shape, base_strides, 0);
}

void record_view(const Tensor& base, Tensor& view) {
  const Shape base_shape = base.shape(), base_strides = base.strides();
  const Shape view_shape = view.shape(), view_strides = view.strides();
  const int64_t rel_offset = view.offset() - base.offset();
  const DType dtype = base.dtype();
  record("ViewBackward", {base}, {view}, [=](const GradList& g, const NeedList&) -> GradList {
    return {
        view_backward(g[0], base_shape, base_strides, view_shape, view_strides, rel_offset, dtype)};
  });
}

void record_copy(const Tensor& in, Tensor& out) {
  const DType dtype = in.dtype();
  const Device device = in.device();
  const bool same = in.dtype() == out.dtype() && in.device() == out.device();
  record(same ? "CloneBackward" : "ToCopyBackward", {in}, {out},
         [dtype, device](const GradList& g, const NeedList&) -> GradList {
           return {g[0].to(device).to(dtype)};
         });
}

void run_backward(const Tensor& root, const Tensor& gradient, bool retain_graph) {
  backward(root, gradient, retain_graph);
}

void register_output_hook(const Tensor& t, std::function<Tensor(const Tensor&)> hook) {
  const AutogradMeta& meta = t.autograd_meta();
  Node& node = *meta.grad_fn;
  if (node.output_hooks.size() < node.outputs.size()) node.output_hooks.resize(node.outputs.size());
  node.output_hooks[meta.output_nr].push_back(std::move(hook));
}

// Registered when this object file is linked, which any program that builds a graph does: every
// differentiable function goes through record() in node.cpp, which refers to this symbol.
struct Registration {
  Registration() {
    detail::set_autograd_hooks({.record_view = record_view,
                                .record_copy = record_copy,
                                .backward = run_backward,
                                .register_output_hook = register_output_hook});
  }
};

}  // namespace

const bool autograd_hooks_registered = [] {
  static Registration r;
  return true;
}();

}  // namespace stoke::autograd
