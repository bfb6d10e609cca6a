#include "autograd/autocast.h"

#include <unordered_map>

#include "core/error.h"
#include "core/grad_mode.h"

namespace stoke {
namespace {

struct DeviceState {
  bool enabled = false;
  DType dtype = DType::f16;
};

// A cast weight, kept with its source so that the key (the source's TensorImpl) cannot be reused
// by another tensor while the entry lives.
struct CacheEntry {
  Tensor source;
  Tensor cast;
};

struct State {
  std::array<DeviceState, 2> devices;  // indexed by Device::Type (cpu, cuda)
  int depth = 0;                       // regions open on this thread
  int suspended = 0;                   // entry points running with autocast suspended
  int enabled_count = 0;               // device types with autocast on
  bool cache_enabled = true;
  size_t weight_casts = 0;
  std::unordered_map<const TensorImpl*, CacheEntry> cache;
};

State& state() {
  thread_local State s;
  return s;
}

DeviceState& device_state(Device::Type type) {
  return state().devices[static_cast<size_t>(type)];
}

bool is_low(DType t) {
  return t == DType::f16 || t == DType::bf16;
}

int rank(DType t) {  // for promotion: f64 > f32 > f16, bf16
  return t == DType::f64 ? 3 : t == DType::f32 ? 2 : 1;
}

}  // namespace

AutocastPolicy autocast_policy(std::string_view op) {
  for (const AutocastEntry& e : kAutocastPolicy)
    if (e.op == op) return e.policy;
  STOKE_FAIL("autocast", "'", std::string(op), "' is not in the autocast policy table",
             " (autograd/autocast.h, kAutocastPolicy)");
}

autocast::autocast(Device::Type device_type, const AutocastOptions& options)
    : device_type_(device_type) {
  const DType dtype =
      options.dtype.value_or(device_type == Device::Type::cuda ? DType::f16 : DType::bf16);
  STOKE_CHECK(is_low(dtype), "autocast", "expected dtype f16 or bf16 for the autocast region on ",
              Device{device_type, 0}, ", got ", dtype);
  State& s = state();
  DeviceState& d = device_state(device_type);
  previous_enabled_ = d.enabled;
  previous_dtype_ = d.dtype;
  previous_cache_enabled_ = s.cache_enabled;
  s.enabled_count += static_cast<int>(options.enabled) - static_cast<int>(d.enabled);
  d.enabled = options.enabled;
  d.dtype = dtype;
  s.cache_enabled = options.cache_enabled;
  ++s.depth;
}

autocast::~autocast() {
  State& s = state();
  DeviceState& d = device_state(device_type_);
  s.enabled_count += static_cast<int>(previous_enabled_) - static_cast<int>(d.enabled);
  d.enabled = previous_enabled_;
  d.dtype = previous_dtype_;
  s.cache_enabled = previous_cache_enabled_;
  // As torch: the cached weight casts live until the outermost region exits, so that a forward's
  // casts are shared by every op in it and the next forward (after the optimizer step) recasts.
  if (--s.depth == 0) s.cache.clear();
}

bool is_autocast_enabled(Device::Type device_type) {
  return device_state(device_type).enabled;
}

DType autocast_dtype(Device::Type device_type) {
  return device_state(device_type).dtype;
}

size_t autocast_weight_casts() {
  return state().weight_casts;
}

std::optional<DType> promoted_dtype(std::initializer_list<const Tensor*> ts) {
  std::optional<DType> widest;
  bool differ = false;
  for (const Tensor* t : ts) {
    if (!t || !t->defined() || !is_floating(t->dtype())) continue;
    const DType d = t->dtype();
    if (!widest) {
      widest = d;
    } else if (d != *widest) {
      differ = true;
      if (rank(d) > rank(*widest))
        widest = d;
      else if (rank(d) == rank(*widest))  // f16 with bf16: neither holds the other
        widest = DType::f32;
    }
  }
  return differ ? widest : std::nullopt;
}

namespace autocast_detail {

bool active() {
  const State& s = state();
  return s.enabled_count > 0 && s.suspended == 0;
}

Suspend::Suspend() {
  ++state().suspended;
}

Suspend::~Suspend() {
  --state().suspended;
}

std::optional<DType> target_dtype(AutocastPolicy policy, std::initializer_list<const Tensor*> ts) {
  const Tensor* first = nullptr;
  for (const Tensor* t : ts)
    if (t && t->defined()) {
      first = t;
      break;
    }
  if (!first) return std::nullopt;
  const DeviceState& d = device_state(first->device().type);
  if (!d.enabled) return std::nullopt;
  switch (policy) {
    case AutocastPolicy::lower:
      return d.dtype;
    case AutocastPolicy::f32:
    case AutocastPolicy::mixed_norm:
      return DType::f32;
    case AutocastPolicy::promote:
      return promoted_dtype(ts);
  }
  return std::nullopt;
}

bool keeps_first_operand(AutocastPolicy policy, std::initializer_list<const Tensor*> ts) {
  if (policy != AutocastPolicy::mixed_norm || ts.size() == 0) return false;
  const Tensor* input = *ts.begin();
  return input && input->defined() && input->device().type == Device::Type::cuda;
}

Tensor cast(const Tensor& t, DType target, AutocastPolicy policy) {
  if (!t.defined() || !is_floating(t.dtype()) || t.dtype() == target) return t;
  switch (policy) {
    case AutocastPolicy::lower:
      if (t.dtype() != DType::f32) return t;  // f64 stays f64, as in torch
      break;
    case AutocastPolicy::f32:
    case AutocastPolicy::mixed_norm:
      if (!is_low(t.dtype())) return t;
      break;
    case AutocastPolicy::promote:
      break;
  }
  State& s = state();
  // A weight: a leaf that requires grad, cast once per region. Only with grad mode on, as torch,
  // and only low-precision copies (the f32 policy's sources are activations).
  const bool cacheable = s.cache_enabled && policy == AutocastPolicy::lower && t.is_leaf() &&
                         t.requires_grad() && GradMode::is_enabled();
  if (!cacheable) return t.to(target);
  auto it = s.cache.find(t.impl());
  if (it != s.cache.end() && it->second.cast.dtype() == target) return it->second.cast;
  Tensor c = t.to(target);
  ++s.weight_casts;
  s.cache[t.impl()] = {t, c};
  return c;
}

}  // namespace autocast_detail
}  // namespace stoke
