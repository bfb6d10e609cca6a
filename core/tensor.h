// Tensor: a cheap handle to shared data. Copying a Tensor aliases it; clone() copies the data.
// A tensor has a shape, strides (in elements), a storage offset, a dtype, a device and autograd
// metadata. View methods (view, transpose, permute, narrow, ...) share storage and, when the
// input requires grad, are recorded by autograd like any other op.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/storage.h"

namespace stoke {

namespace autograd {
class Node;
}

class Tensor;

// Per-tensor autograd state; null for tensors that neither require grad nor come from a graph.
struct AutogradMeta {
  bool requires_grad = false;  // set on leaves by the user
  std::shared_ptr<Tensor> grad;
  std::shared_ptr<autograd::Node> grad_fn;  // the node that produced this tensor (null for leaves)
  uint32_t output_nr = 0;                   // which output of grad_fn this tensor is
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves: the node that accumulates into grad
  // Leaves only: hooks on the gradient flowing into this tensor, run before accumulation; each may
  // return a replacement (or an undefined tensor to keep it). A non-leaf's hooks live on its
  // grad_fn (autograd::Node::output_hooks), so that they fire after the tensor itself is gone.
  std::vector<std::function<Tensor(const Tensor&)>> hooks;
  // Leaves only: run after this backward pass finished accumulating into grad (as torch's
  // register_post_accumulate_grad_hook).
  std::vector<std::function<void(const Tensor&)>> post_accumulate_hooks;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;
  int64_t offset = 0;
  DType dtype = DType::f32;
  std::shared_ptr<AutogradMeta> autograd;
};

// Options for creating tensors: zeros({2, 3}, {.dtype = DType::f64, .requires_grad = true}).
struct TensorOptions {
  DType dtype = DType::f32;
  Device device = Device::cpu();
  bool requires_grad = false;
};

// How a 4-d (N, C, H, W) tensor's elements lie in memory, as torch.memory_format: contiguous is
// row-major NCHW; channels_last is NHWC, strides (H*W*C, 1, W*C, C), the layout cuDNN's fast
// f16/bf16 convolutions read. A channels_last tensor has NCHW's shape: only the strides differ.
enum class MemoryFormat : uint8_t { contiguous, channels_last };

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // A tensor over existing storage (no copy).
  static Tensor from_storage(std::shared_ptr<Storage> storage, Shape shape, Shape strides,
                             int64_t offset, DType dtype);

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  // True when both handles refer to the same tensor (not merely the same storage).
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  const Shape& shape() const { return checked().shape; }
  const Shape& strides() const { return checked().strides; }
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t numel() const { return shape().numel(); }
  int64_t offset() const { return checked().offset; }
  DType dtype() const { return checked().dtype; }
  Device device() const { return checked().storage->device(); }
  size_t element_size() const { return dtype_size(dtype()); }
  const std::shared_ptr<Storage>& storage() const { return checked().storage; }
  bool is_contiguous() const;
  // Whether the strides are `format`'s dense layout (dims of size 1 are ignored, as in torch);
  // channels_last needs 4 dims.
  bool is_contiguous(MemoryFormat format) const;
  // channels_last when a 4-d tensor's strides order its dims as NHWC does (C innermost, then W,
  // H, N; torch's is_channels_last_strides_2d, which tells the two apart by the strides of size-1
  // dims too, so a one-channel NHWC copy stays channels_last), else contiguous (torch's
  // suggest_memory_format): the layout an op's output keeps (ops/memory_format.h).
  MemoryFormat suggest_memory_format() const;

  // Pointer to the first element (storage data + offset).
  void* data_ptr() const;
  template <class T>
  T* data() const {
    STOKE_CHECK(dtype_of<T>() == dtype(), "Tensor::data", "expected dtype ", dtype_of<T>(),
                ", tensor has dtype ", dtype());
    return static_cast<T*>(data_ptr());
  }

  // --- views: share storage -------------------------------------------------------------------
  Tensor view(const Shape& shape) const;     // needs compatible strides; one dim may be -1
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // transpose of a 2-D tensor
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;  // removes `dim`
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor expand(const Shape& shape) const;  // -1 keeps a dim; new leading dims allowed
  Tensor as_strided(const Shape& shape, const Shape& strides, int64_t offset) const;

  // --- copies ----------------------------------------------------------------------------------
  Tensor contiguous() const;  // this tensor if already contiguous
  // A copy in `format`'s layout, or this tensor if already in it; differentiable (the gradient
  // comes back in the layout it arrives in). channels_last needs 4 dims, and gives NHWC's own
  // strides (a one-channel NCHW tensor, dense in both layouts, is copied to them).
  Tensor contiguous(MemoryFormat format) const;
  Tensor clone() const;  // always a new contiguous copy
  // A cast copy (this tensor if already of `dtype`), in this tensor's layout when it is
  // channels_last (torch's preserve_format), else contiguous.
  Tensor to(DType dtype) const;
  // A copy on `device` (this tensor if already there). Differentiable: the gradient goes back to
  // this tensor's device. With non_blocking a CPU<->device copy may still be in flight when this
  // returns, ordered on the backend's current stream (the CPU side should be pinned memory).
  Tensor to(Device device, bool non_blocking = false) const;
  // Copies src into this tensor (broadcasting src, converting dtype). Not recorded by autograd.
  Tensor& copy_(const Tensor& src);

  // The single element of a one-element tensor, as double. Keeps no graph alive.
  double item() const;
  template <class T>
  T item() const {
    return static_cast<T>(item());
  }
  // All elements, converted to T, in row-major order.
  template <class T>
  std::vector<T> to_vector() const;

  std::string str() const;  // PyTorch-style printing, summarized when large

  // --- autograd --------------------------------------------------------------------------------
  bool requires_grad() const;
  Tensor& set_requires_grad(bool requires_grad);  // leaves only
  bool is_leaf() const;
  Tensor grad() const;  // undefined until a backward pass reached this leaf
  void set_grad(const Tensor& grad) const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  uint32_t output_nr() const;
  // Same data, no history, does not require grad.
  Tensor detach() const;
  // Runs backward from this tensor (a scalar unless `gradient` is given).
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  // A hook on the gradient flowing into this tensor, as torch's Tensor.register_hook: it may
  // return a replacement (or an undefined tensor to keep the gradient). A leaf's runs before
  // accumulation into grad(); a non-leaf's is kept by its grad_fn, so it fires in every backward
  // through that node, even after this handle is gone.
  void register_hook(std::function<Tensor(const Tensor&)> hook) const;
  void register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;
  AutogradMeta& autograd_meta() const;  // creates it if absent
  AutogradMeta* autograd_meta_if_exists() const { return checked().autograd.get(); }

 private:
  const TensorImpl& checked() const;
  Tensor make_view(Shape shape, Shape strides, int64_t offset) const;

  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Uninitialized tensors.
Tensor empty(const Shape& shape, TensorOptions options = {});
Tensor empty_like(const Tensor& t);  // same shape, dtype and device; contiguous
Tensor empty_strided(const Shape& shape, const Shape& strides, TensorOptions options = {});

// Copies `src` (any strides, any dtype) into `dst` (same shape, any strides), converting element
// types. Both on the CPU. Not recorded by autograd.
void copy_strided(const Tensor& dst, const Tensor& src);

// Number of elements between the first and one past the last addressed element.
int64_t storage_span(const Shape& shape, const Shape& strides);

namespace detail {
// Autograd registers these at start-up so that core's view and copy methods are differentiable
// without core depending on autograd (see docs/design-notes.md, "Core's view methods are
// differentiable through registered hooks").
struct AutogradHooks {
  // `out` was computed from `in` by a view, a copy (clone/contiguous) or a dtype cast.
  void (*record_view)(const Tensor& in, Tensor& out) = nullptr;
  void (*record_copy)(const Tensor& in, Tensor& out) = nullptr;
  void (*backward)(const Tensor& root, const Tensor& gradient, bool retain_graph) = nullptr;
  // A hook on the gradient of a non-leaf `t`, kept by t's grad_fn.
  void (*register_output_hook)(const Tensor& t,
                               std::function<Tensor(const Tensor&)> hook) = nullptr;
};
void set_autograd_hooks(const AutogradHooks& hooks);
const AutogradHooks& autograd_hooks();
}  // namespace detail

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = detach().to(Device::cpu()).to(dtype_of<T>()).contiguous();
  const T* p = c.data<T>();
  return std::vector<T>(p, p + c.numel());
}

}  // namespace stoke
