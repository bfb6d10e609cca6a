// Makes core's view and copy methods differentiable (registered with core at start-up; see
// core/tensor.h, detail::AutogradHooks). One backward serves every view: the gradient of a view
// is scattered into a zero buffer laid out like the base's memory, through the view's own
// strides, and read back through the base's strides.
#include <cstring>
#include "autograd/engine.h"
#include "autograd/function.h"

#include "core/strided.h"

namespace stoke::autograd {
namespace {

bool overlaps(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.stride(d) == 0 && t.size(d) > 1) return true;
  return false;
}

// dst += src elementwise, where dst may alias itself (stride 0): runs serially then.
void accumulate_into(const Tensor& dst, const Tensor& src) {
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
        for (int64_t i = 0; i < n; ++i)
          d[off[0] + i * st[0]] = T(float(d[off[0] + i * st[0]]) + float(sp[off[1] + i * st[1]]));
      });
    }
  });
}

void record_view(const Tensor& base, Tensor& view) {
  STOKE_CHECK(!overlaps(base), "view", "cannot differentiate a view of an expanded tensor (shape ",
              base.shape(), ", strides ", base.strides(), "); call contiguous() on it first");
  const Shape base_shape = base.shape(), base_strides = base.strides();
  const Shape view_shape = view.shape(), view_strides = view.strides();
  const int64_t rel_offset = view.offset() - base.offset();
  const DType dtype = base.dtype();
  record("ViewBackward", {base}, {view}, [=](const GradList& g, const NeedList&) -> GradList {
    const int64_t span = storage_span(base_shape, base_strides);
    Tensor buffer = empty({span}, {.dtype = dtype, .device = g[0].device()});
    std::memset(buffer.data_ptr(), 0, buffer.numel() * buffer.element_size());
    accumulate_into(buffer.as_strided(view_shape, view_strides, rel_offset), g[0]);
    return {buffer.as_strided(base_shape, base_strides, 0)};
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

// Registered when this object file is linked, which any program that builds a graph does: every
// differentiable function goes through record() in node.cpp, which refers to this symbol.
struct Registration {
  Registration() {
    detail::set_autograd_hooks(
        {.record_view = record_view, .record_copy = record_copy, .backward = run_backward});
  }
};

}  // namespace

const bool autograd_hooks_registered = [] {
  static Registration r;
  return true;
}();

}  // namespace stoke::autograd
