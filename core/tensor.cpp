#include "core/tensor.h"

#include <algorithm>
#include <cstring>

#include "core/device_copy.h"
#include "core/grad_mode.h"
#include "core/profiler.h"
#include "core/strided.h"
#include "core/sync_debug.h"

namespace stoke {

namespace {

constexpr size_t kMaxDims = 16;

detail::AutogradHooks& hooks_storage() {
  static detail::AutogradHooks h;
  return h;
}

bool should_record(const Tensor& in) {
  return GradMode::is_enabled() && in.requires_grad();
}

void check_dims(const Shape& shape, const char* op) {
  STOKE_CHECK(shape.size() <= kMaxDims, op, "tensors have at most ", kMaxDims, " dims, got shape ",
              shape);
  for (int64_t d : shape) STOKE_CHECK(d >= 0, op, "negative dimension in shape ", shape);
}

// Resolves one -1 in `shape` for a tensor of `numel` elements.
Shape infer_shape(const Shape& requested, int64_t numel, const char* op) {
  Shape shape = requested;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      STOKE_CHECK(infer_at < 0, op, "only one dim can be -1, got shape ", requested);
      infer_at = static_cast<int64_t>(i);
    } else {
      STOKE_CHECK(shape[i] >= 0, op, "invalid dim ", shape[i], " in shape ", requested);
      known *= shape[i];
    }
  }
  if (infer_at >= 0) {
    STOKE_CHECK(known != 0 && numel % known == 0, op, "shape ", requested,
                " is invalid for a tensor of ", numel, " elements");
    shape[infer_at] = numel / known;
  }
  STOKE_CHECK(shape.numel() == numel, op, "shape ", requested, " is invalid for a tensor of ",
              numel, " elements");
  return shape;
}

// Strides for viewing (shape, strides) as new_shape without copying, or empty if impossible
// (PyTorch's computeStride).
bool view_strides(const Shape& shape, const Shape& strides, const Shape& new_shape, Shape& out) {
  out.assign(new_shape.size(), 0);
  if (shape.numel() == 0 || shape.empty()) {  // no elements, or one element of a 0-dim tensor
    out = contiguous_strides(new_shape);
    return true;
  }
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

template <class D, class S>
inline D convert(S s) {
  if constexpr (std::is_same_v<D, S>) {
    return s;
  } else if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) {
    return convert<D>(static_cast<float>(s));
  } else if constexpr (std::is_same_v<D, bool>) {
    return s != S(0);
  } else if constexpr (std::is_same_v<D, Half> || std::is_same_v<D, BFloat16>) {
    return D(static_cast<float>(s));
  } else {
    return static_cast<D>(s);
  }
}

}  // namespace

namespace detail {
void set_autograd_hooks(const AutogradHooks& hooks) {
  hooks_storage() = hooks;
}
const AutogradHooks& autograd_hooks() {
  return hooks_storage();
}
}  // namespace detail

int64_t storage_span(const Shape& shape, const Shape& strides) {
  if (shape.numel() == 0) return 0;
  int64_t span = 1;
  for (size_t i = 0; i < shape.size(); ++i) span += (shape[i] - 1) * strides[i];
  return span;
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, Shape shape, Shape strides,
                            int64_t offset, DType dtype) {
  check_dims(shape, "Tensor::from_storage");
  STOKE_CHECK(strides.size() == shape.size(), "Tensor::from_storage", "shape ", shape, " has ",
              shape.size(), " dims but strides ", strides, " have ", strides.size());
  const int64_t span = storage_span(shape, strides);
  STOKE_CHECK(
      offset >= 0 && static_cast<size_t>(offset + span) * dtype_size(dtype) <= storage->nbytes(),
      "Tensor::from_storage", "shape ", shape, " strides ", strides, " offset ", offset, " of ",
      dtype, " exceed a storage of ", storage->nbytes(), " bytes");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

const TensorImpl& Tensor::checked() const {
  STOKE_CHECK(impl_ != nullptr, "Tensor", "the tensor is undefined (default-constructed)");
  return *impl_;
}

int64_t Tensor::size(int64_t d) const {
  return shape()[wrap_dim(d, dim(), "Tensor::size")];
}
int64_t Tensor::stride(int64_t d) const {
  return strides()[wrap_dim(d, dim(), "Tensor::stride")];
}

bool Tensor::is_contiguous() const {
  const auto& s = shape();
  const auto& st = strides();
  int64_t expected = 1;
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= s[i];
  }
  return true;
}

bool Tensor::is_contiguous(MemoryFormat format) const {
  if (format == MemoryFormat::contiguous) return is_contiguous();
  if (dim() != 4) return false;
  static constexpr int64_t kNhwcInnermostFirst[] = {1, 3, 2, 0};  // C, then W, H and N
  int64_t expected = 1;
  for (const int64_t d : kNhwcInnermostFirst) {
    if (size(d) == 1) continue;
    if (stride(d) != expected) return false;
    expected *= size(d);
  }
  return true;
}

MemoryFormat Tensor::suggest_memory_format() const {
  // torch's is_channels_last_strides_2d_s4: the strides grow from C to W, H and N, each at least
  // the span of the dims inside it. A size-1 dim's stride still counts (it is what tells an NHWC
  // (N, 1, H, W) tensor, strides (HW, 1, W, 1), from an NCHW one, (HW, HW, W, 1)); ties fall back
  // to contiguous (an (N, 1, 1, 1) tensor).
  if (dim() != 4 || stride(1) == 0) return MemoryFormat::contiguous;
  int64_t min = 0;
  for (const int64_t d : {1, 3, 2, 0}) {
    if (size(d) == 0 || stride(d) < min) return MemoryFormat::contiguous;
    if (d == 0 && min == stride(1)) return MemoryFormat::contiguous;
    min = stride(d) * (size(d) > 1 ? size(d) : 1);
  }
  return MemoryFormat::channels_last;
}

void* Tensor::data_ptr() const {
  const auto& t = checked();
  // A released storage (0 bytes) under a tensor with elements: reading it would read past it.
  if (t.storage->nbytes() == 0 && t.shape.numel() > 0) [[unlikely]]
    STOKE_FAIL("Tensor", "a tensor of shape ", t.shape,
               " has no data: its storage is released (a parameter of a ZeRO-3 model outside "
               "its module's forward and backward? ZeroOptimizer::full_parameters() gathers it)");
  return static_cast<char*>(t.storage->data()) +
         t.offset * static_cast<int64_t>(dtype_size(t.dtype));
}

Tensor Tensor::make_view(Shape shape, Shape strides, int64_t offset) const {
  check_dims(shape, "view");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = storage();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = dtype();
  Tensor out(std::move(impl));
  if (should_record(*this)) {
    const auto& h = detail::autograd_hooks();
    STOKE_CHECK(h.record_view != nullptr, "view", "autograd is not linked (link stoke::stoke)");
    h.record_view(*this, out);
  }
  return out;
}

Tensor Tensor::as_strided(const Shape& shape, const Shape& strides, int64_t offset) const {
  STOKE_CHECK(shape.size() == strides.size(), "as_strided", "shape ", shape, " and strides ",
              strides, " differ in length");
  const int64_t span = storage_span(shape, strides);
  STOKE_CHECK(
      offset >= 0 && static_cast<size_t>(offset + span) * element_size() <= storage()->nbytes(),
      "as_strided", "shape ", shape, " strides ", strides, " offset ", offset,
      " exceed the storage");
  return make_view(shape, strides, offset);
}

Tensor Tensor::view(const Shape& requested) const {
  Shape shape = infer_shape(requested, numel(), "view");
  Shape strides;
  STOKE_CHECK(view_strides(this->shape(), this->strides(), shape, strides), "view", "cannot view ",
              "a tensor of shape ", this->shape(), " and strides ", this->strides(), " as shape ",
              shape, ": its memory is not laid out compatibly; use reshape()");
  return make_view(shape, strides, offset());
}

Tensor Tensor::reshape(const Shape& requested) const {
  Shape shape = infer_shape(requested, numel(), "reshape");
  Shape strides;
  if (view_strides(this->shape(), this->strides(), shape, strides))
    return make_view(shape, strides, offset());
  return contiguous().view(shape);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  start_dim = wrap_dim(start_dim, dim(), "flatten");
  end_dim = wrap_dim(end_dim, dim(), "flatten");
  STOKE_CHECK(start_dim <= end_dim, "flatten", "start_dim ", start_dim, " is after end_dim ",
              end_dim);
  Shape s(shape().begin(), shape().begin() + start_dim);
  int64_t n = 1;
  for (int64_t d = start_dim; d <= end_dim; ++d) n *= shape()[d];
  s.push_back(n);
  s.insert(s.end(), shape().begin() + end_dim + 1, shape().end());
  return reshape(s);
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  dim0 = wrap_dim(dim0, dim(), "transpose");
  dim1 = wrap_dim(dim1, dim(), "transpose");
  Shape s = shape(), st = strides();
  std::swap(s[dim0], s[dim1]);
  std::swap(st[dim0], st[dim1]);
  return make_view(s, st, offset());
}

Tensor Tensor::t() const {
  STOKE_CHECK(dim() <= 2, "t", "expected a tensor with <= 2 dims, got shape ", shape());
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  STOKE_CHECK(static_cast<int64_t>(dims.size()) == dim(), "permute", "expected ", dim(),
              " dims for a tensor of shape ", shape(), ", got ", Shape(dims));
  Shape s(dims.size()), st(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], dim(), "permute");
    STOKE_CHECK(!seen[d], "permute", "dim ", d, " repeated in ", Shape(dims));
    seen[d] = true;
    s[i] = shape()[d];
    st[i] = strides()[d];
  }
  return make_view(s, st, offset());
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d, dim(), "narrow");
  const int64_t n = shape()[d];
  if (start < 0) start += n;
  STOKE_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow", "start ", start,
              " + length ", length, " exceeds size ", n, " of dim ", d, " (shape ", shape(), ")");
  Shape s = shape();
  s[d] = length;
  return make_view(s, strides(), offset() + start * strides()[d]);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = wrap_dim(d, dim(), "slice");
  STOKE_CHECK(step > 0, "slice", "step must be positive, got ", step);
  const int64_t n = shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = shape(), st = strides();
  s[d] = (end - start + step - 1) / step;
  st[d] *= step;
  return make_view(s, st, offset() + start * strides()[d]);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = wrap_dim(d, dim(), "select");
  const int64_t n = shape()[d];
  STOKE_CHECK(index >= -n && index < n, "select", "index ", index, " out of range for dim ", d,
              " of size ", n);
  if (index < 0) index += n;
  Shape s = shape(), st = strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return make_view(s, st, offset() + index * strides()[d]);
}

Tensor Tensor::squeeze() const {
  Shape s, st;
  for (int64_t i = 0; i < dim(); ++i)
    if (shape()[i] != 1) {
      s.push_back(shape()[i]);
      st.push_back(strides()[i]);
    }
  return make_view(s, st, offset());
}

Tensor Tensor::squeeze(int64_t d) const {
  d = wrap_dim(d, dim(), "squeeze");
  if (shape()[d] != 1) return make_view(shape(), strides(), offset());
  Shape s = shape(), st = strides();
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return make_view(s, st, offset());
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape s = shape(), st = strides();
  const int64_t stride = d < dim() ? st[d] * s[d] : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  return make_view(s, st, offset());
}

Tensor Tensor::expand(const Shape& requested) const {
  STOKE_CHECK(requested.size() >= shape().size(), "expand", "cannot expand shape ", shape(),
              " to fewer dims: ", requested);
  const size_t lead = requested.size() - shape().size();
  Shape s(requested.size()), st(requested.size());
  for (size_t i = 0; i < requested.size(); ++i) {
    if (i < lead) {
      STOKE_CHECK(requested[i] >= 0, "expand", "new leading dim ", i, " cannot be ", requested[i],
                  " (shape ", requested, ")");
      s[i] = requested[i];
      st[i] = 0;
      continue;
    }
    const int64_t have = shape()[i - lead];
    const int64_t want = requested[i] == -1 ? have : requested[i];
    STOKE_CHECK(want == have || have == 1, "expand", "cannot expand shape ", shape(), " to ",
                requested, " (dim ", i, ": ", have, " vs ", want, ")");
    s[i] = want;
    st[i] = want == have ? strides()[i - lead] : 0;
  }
  return make_view(s, st, offset());
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::contiguous(MemoryFormat format) const {
  if (format == MemoryFormat::contiguous) return contiguous();
  STOKE_CHECK(dim() == 4, "contiguous", "channels_last needs a 4-d (N, C, H, W) tensor, got shape ",
              shape());
  if (is_contiguous(format) && suggest_memory_format() == format) return *this;
  // NHWC is the row-major copy of the (N, H, W, C) permutation, seen back as (N, C, H, W): both
  // permutes are views and the copy is clone's, so autograd records them as for any view. clone,
  // not contiguous(): a tensor dense in both layouts (one channel) is copied to NHWC's strides.
  return permute({0, 2, 3, 1}).clone().permute({0, 3, 1, 2});
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), {.dtype = dtype(), .device = device()});
  {
    NoGradGuard no_grad;
    copy_strided(out, *this);
  }
  if (should_record(*this)) {
    const auto& h = detail::autograd_hooks();
    STOKE_CHECK(h.record_copy != nullptr, "clone", "autograd is not linked (link stoke::stoke)");
    h.record_copy(*this, out);
  }
  return out;
}

Tensor Tensor::to(DType t) const {
  if (t == dtype()) return *this;
  // A range of its own (torch's aten::_to_copy): under autocast the casts are a visible part of
  // the step, which would otherwise be counted as the caller's self time.
  const profiler::Range range("to_copy", profiler::Category::op);
  // torch's preserve_format: a channels_last tensor (autocast's cast of an NHWC activation) stays
  // channels_last, and the copy runs in memory order.
  const bool nhwc = suggest_memory_format() == MemoryFormat::channels_last;
  Tensor out = nhwc ? empty({size(0), size(2), size(3), size(1)}, {.dtype = t, .device = device()})
                          .permute({0, 3, 1, 2})
                    : empty(shape(), {.dtype = t, .device = device()});
  copy_strided(out, *this);
  if (should_record(*this)) {
    STOKE_CHECK(is_floating(t), "to", "cannot cast a tensor that requires grad to ", t,
                ": only floating dtypes carry gradients");
    const auto& h = detail::autograd_hooks();
    STOKE_CHECK(h.record_copy != nullptr, "to", "autograd is not linked (link stoke::stoke)");
    h.record_copy(*this, out);
  }
  return out;
}

Tensor Tensor::to(Device d, bool non_blocking) const {
  const Device from = device();
  if (d == from) return *this;
  const Device backend = from.is_cpu() ? d : from;
  const SyncSite site(d.is_cpu() ? "Tensor::to(cpu)" : "Tensor::to(cuda)");
  DeviceCopier* copier = device_copier(backend.type);
  STOKE_CHECK(copier != nullptr, "to", "copy from ", from, " to ", d,
              " is not available: ", backend,
              " has no backend in this build (stoke was built without CUDA)");
  Tensor out;
  if (numel() == 0) {
    out = empty(shape(), {.dtype = dtype(), .device = d});
  } else if (from.is_cpu() || is_contiguous()) {
    // Contiguous on the source side (CPU tensors are made so there), then one byte copy.
    const Tensor src = from.is_cpu() ? detach().contiguous() : detach();
    out = empty(shape(), {.dtype = dtype(), .device = d});
    copier->copy(out.data_ptr(), d, src.data_ptr(), from, numel() * element_size(), non_blocking);
  } else {
    // A strided device tensor: copy the storage span its elements cover, rebuild the view on
    // the destination, and (on the CPU) make it contiguous there.
    STOKE_CHECK(d.is_cpu(), "to", "copy of a non-contiguous tensor from ", from, " to ", d,
                " needs contiguous() first");
    int64_t span = 1;
    for (int64_t i = 0; i < dim(); ++i) span += (size(i) - 1) * stride(i);
    auto storage = std::make_shared<Storage>(static_cast<size_t>(span) * element_size(), d);
    copier->copy(storage->data(), d, data_ptr(), from, static_cast<size_t>(span) * element_size(),
                 false);
    out = from_storage(std::move(storage), shape(), strides(), 0, dtype()).contiguous();
  }
  if (should_record(*this)) {
    const auto& h = detail::autograd_hooks();
    STOKE_CHECK(h.record_copy != nullptr, "to", "autograd is not linked (link stoke::stoke)");
    h.record_copy(*this, out);
  }
  return out;
}

Tensor& Tensor::copy_(const Tensor& src) {
  Tensor s = src.detach();
  // A source on another device is moved to this one first (contiguous, its own dtype); the
  // broadcast and the dtype conversion then happen on this tensor's device.
  if (s.device() != device()) s = s.to(device());
  if (s.shape() != shape()) s = s.expand(shape());
  copy_strided(*this, s);
  return *this;
}

void copy_strided(const Tensor& dst, const Tensor& src) {
  STOKE_CHECK(dst.shape() == src.shape(), "copy", "shapes differ: destination ", dst.shape(),
              ", source ", src.shape());
  STOKE_CHECK(dst.device() == src.device(), "copy",
              "expected tensors on one device, got destination on ", dst.device(),
              " and source on ", src.device(), " (use to(device) to move data)");
  if (dst.numel() == 0) return;
  if (!dst.device().is_cpu()) {
    DeviceCopier* copier = device_copier(dst.device().type);
    STOKE_CHECK(copier != nullptr, "copy", dst.device(), " has no backend in this build");
    copier->copy_strided(dst, src);
    return;
  }
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    std::memcpy(dst.data_ptr(), src.data_ptr(), dst.numel() * dst.element_size());
    return;
  }
  const auto g = coalesce<2>(dst.shape(), {dst.strides(), src.strides()});
  dispatch_all(dst.dtype(), "copy", [&](auto dtag) {
    using D = typename decltype(dtag)::type;
    dispatch_all(src.dtype(), "copy", [&](auto stag) {
      using S = typename decltype(stag)::type;
      D* d = static_cast<D*>(dst.data_ptr());
      const S* s = static_cast<const S*>(src.data_ptr());
      parallel_for_each_row(g, 1 << 16, [&](const auto& off, int64_t n, const auto& st) {
        D* dp = d + off[0];
        const S* sp = s + off[1];
        if (st[0] == 1 && st[1] == 1) {
          for (int64_t i = 0; i < n; ++i) dp[i] = convert<D>(sp[i]);
        } else {
          for (int64_t i = 0; i < n; ++i) dp[i * st[0]] = convert<D>(sp[i * st[1]]);
        }
      });
    });
  });
}

double Tensor::item() const {
  const SyncSite site("Tensor::item");
  STOKE_CHECK(numel() == 1, "item", "expected a tensor with one element, got shape ", shape());
  Tensor c = to(Device::cpu());
  return dispatch_all(c.dtype(), "item", [&](auto tag) -> double {
    using T = typename decltype(tag)::type;
    return convert<double>(*static_cast<const T*>(c.data_ptr()));
  });
}

// --- autograd glue ------------------------------------------------------------------------------

AutogradMeta& Tensor::autograd_meta() const {
  auto& impl = const_cast<TensorImpl&>(checked());
  if (!impl.autograd) impl.autograd = std::make_shared<AutogradMeta>();
  return *impl.autograd;
}

bool Tensor::requires_grad() const {
  const AutogradMeta* m = autograd_meta_if_exists();
  return m && (m->requires_grad || m->grad_fn);
}

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  STOKE_CHECK(is_leaf(), "set_requires_grad",
              "only leaf tensors can change requires_grad; use detach() for a non-leaf");
  STOKE_CHECK(!requires_grad || is_floating(dtype()), "set_requires_grad",
              "only floating tensors can require grad, got dtype ", dtype());
  autograd_meta().requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const {
  const AutogradMeta* m = autograd_meta_if_exists();
  return !m || !m->grad_fn;
}

Tensor Tensor::grad() const {
  const AutogradMeta* m = autograd_meta_if_exists();
  return m && m->grad ? *m->grad : Tensor();
}

void Tensor::set_grad(const Tensor& grad) const {
  if (grad.defined())
    STOKE_CHECK(grad.shape() == shape() && grad.dtype() == dtype(), "set_grad", "expected a ",
                dtype(), " gradient of shape ", shape(), ", got ", grad.dtype(), " ", grad.shape());
  autograd_meta().grad = grad.defined() ? std::make_shared<Tensor>(grad) : nullptr;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  const AutogradMeta* m = autograd_meta_if_exists();
  return m ? m->grad_fn : none;
}

uint32_t Tensor::output_nr() const {
  const AutogradMeta* m = autograd_meta_if_exists();
  return m ? m->output_nr : 0;
}

Tensor Tensor::detach() const {
  const auto& t = checked();
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.storage;
  impl->shape = t.shape;
  impl->strides = t.strides;
  impl->offset = t.offset;
  impl->dtype = t.dtype;
  return Tensor(std::move(impl));
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  const auto& h = detail::autograd_hooks();
  STOKE_CHECK(h.backward != nullptr, "backward", "autograd is not linked (link stoke::stoke)");
  h.backward(*this, gradient, retain_graph);
}

void Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  STOKE_CHECK(requires_grad(), "register_hook",
              "cannot register a hook on a tensor that does not require grad");
  AutogradMeta& meta = autograd_meta();
  if (!meta.grad_fn) {
    meta.hooks.push_back(std::move(hook));
    return;
  }
  // As torch: a non-leaf's hook belongs to the graph, and still fires when the tensor itself is
  // gone before backward (a layer's output that only the next layer's saved copy outlives).
  const auto& h = detail::autograd_hooks();
  STOKE_CHECK(h.register_output_hook != nullptr, "register_hook",
              "autograd is not linked (link stoke::stoke)");
  h.register_output_hook(*this, std::move(hook));
}

void Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  STOKE_CHECK(is_leaf() && requires_grad(), "register_post_accumulate_grad_hook",
              "expected a leaf tensor that requires grad");
  autograd_meta().post_accumulate_hooks.push_back(std::move(hook));
}

// --- creation
// -------------------------------------------------------------------------------------

Tensor empty(const Shape& shape, TensorOptions options) {
  return empty_strided(shape, contiguous_strides(shape), options);
}

Tensor empty_like(const Tensor& t) {
  return empty(t.shape(), {.dtype = t.dtype(), .device = t.device()});
}

Tensor empty_strided(const Shape& shape, const Shape& strides, TensorOptions options) {
  check_dims(shape, "empty");
  const int64_t span = storage_span(shape, strides);
  auto storage = std::make_shared<Storage>(static_cast<size_t>(span) * dtype_size(options.dtype),
                                           options.device);
  Tensor t = Tensor::from_storage(std::move(storage), shape, strides, 0, options.dtype);
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}

}  // namespace stoke
