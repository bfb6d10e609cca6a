// Automatic mixed precision, as torch.autocast: inside a region the differentiable entry points
// named in the policy table below cast their floating operands to the precision the table gives,
// so that the matrix products run in f16/bf16 and the numerically delicate ops in f32.
//
//   {
//     stoke::autocast region(Device::Type::cuda, {.dtype = DType::bf16});
//     Tensor loss = cross_entropy(model.forward(x), y);  // convs in bf16, the loss in f32
//   }
//   loss.backward();  // parameters stay f32 and receive f32 gradients through the casts
//
// The casts are Tensor::to, so they are differentiable: a low-precision op's gradient reaches an
// f32 parameter as f32 (ToCopyBackward). A leaf that requires grad (a weight) is cast once per
// region and the copy reused by every op that takes it (the cast cache), cleared when the
// outermost region on the thread exits. The state is thread-local, per device type, and regions
// nest (an inner one may change the dtype or disable autocast; leaving it restores the outer one).
// Ops not in the table (relu, pooling, views, dropout, ...) run in their inputs' dtype.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>

#include "core/tensor.h"

namespace stoke {

// What an op in the table does with its floating operands inside an autocast region.
enum class AutocastPolicy : uint8_t {
  lower,    // cast f32 operands to the region's dtype (f16 or bf16): the matrix products
  f32,      // cast f16/bf16 operands to f32: softmax, losses, reductions, normalization statistics
  promote,  // cast every floating operand to the widest among them (f16 with bf16 gives f32)
  // Batch norm. On cuda the input keeps its dtype and the other floating operands (weight, bias,
  // running statistics) become f32: the kernels read f16/bf16 activations with f32 statistics, as
  // cuDNN's and torch's mixed batch norm do, so no cast pass runs over the activations. On the CPU,
  // whose kernels take per-channel tensors in the input's dtype and have no f16 arithmetic: as f32.
  mixed_norm,
};

// The policy table: every entry point named here consults it (tests/autograd/test_autocast.cpp
// loops over it, so a new entry is tested); anything else follows its inputs. The reasons are in
// docs/design.md ("Mixed precision").
struct AutocastEntry {
  std::string_view op;
  AutocastPolicy policy;
};
inline constexpr std::array<AutocastEntry, 25> kAutocastPolicy{{
    // Products: tensor-core (or f16 GEMM) work whose inputs tolerate rounding; f32 accumulation.
    {"conv2d", AutocastPolicy::lower},
    {"conv_transpose2d", AutocastPolicy::lower},
    {"linear", AutocastPolicy::lower},
    {"matmul", AutocastPolicy::lower},
    // Ranges or sums that overflow f16 or lose bf16's 8 bits of mantissa.
    {"softmax", AutocastPolicy::f32},
    {"log_softmax", AutocastPolicy::f32},
    {"cross_entropy", AutocastPolicy::f32},
    {"nll_loss", AutocastPolicy::f32},
    {"mse_loss", AutocastPolicy::f32},
    {"sum", AutocastPolicy::f32},
    {"mean", AutocastPolicy::f32},
    {"var", AutocastPolicy::f32},
    {"batch_norm", AutocastPolicy::mixed_norm},
    {"group_norm", AutocastPolicy::f32},
    {"layer_norm", AutocastPolicy::f32},
    {"exp", AutocastPolicy::f32},
    {"log", AutocastPolicy::f32},
    {"pow", AutocastPolicy::f32},
    // Binary ops mixing dtypes compute in the wider one (also outside regions: type promotion).
    {"add", AutocastPolicy::promote},
    {"sub", AutocastPolicy::promote},
    {"mul", AutocastPolicy::promote},
    {"div", AutocastPolicy::promote},
    {"maximum", AutocastPolicy::promote},
    {"minimum", AutocastPolicy::promote},
    {"where", AutocastPolicy::promote},
}};

// The table's policy for `op`; fails naming the op when it is not in the table.
AutocastPolicy autocast_policy(std::string_view op);

struct AutocastOptions {
  // f16 or bf16; unset: torch's default for the device type (cuda: f16, cpu: bf16).
  std::optional<DType> dtype = {};
  bool enabled = true;        // false: a region inside which autocast is off (until it exits)
  bool cache_enabled = true;  // false: weights are cast at every use
};

// RAII: autocast for tensors on `device_type` until destruction; restores the previous state.
class autocast {
 public:
  explicit autocast(Device::Type device_type, const AutocastOptions& options = {});
  ~autocast();
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

 private:
  Device::Type device_type_;
  bool previous_enabled_;
  DType previous_dtype_;
  bool previous_cache_enabled_;
};

// Whether autocast is on for `device_type` on this thread, and its dtype there.
bool is_autocast_enabled(Device::Type device_type);
DType autocast_dtype(Device::Type device_type);

// How many weight casts this thread's cache has made (misses) since the thread started: a test of
// "once per region" reads it before and after.
size_t autocast_weight_casts();

// The widest floating dtype among the defined floating operands when they differ (f64 > f32 >
// f16, bf16; f16 with bf16 gives f32, as torch promotes), else nullopt. The binary ops cast to it
// in and out of regions (type promotion).
std::optional<DType> promoted_dtype(std::initializer_list<const Tensor*> ts);

namespace autocast_detail {

// True while some device type has autocast on and no autocast entry point is running (the entry
// point runs its op with autocast suspended, so the op's own calls are not cast again).
bool active();

// Suspends autocast on this thread for its lifetime.
class Suspend {
 public:
  Suspend();
  ~Suspend();
  Suspend(const Suspend&) = delete;
  Suspend& operator=(const Suspend&) = delete;
};

// The dtype `op`'s operands get (their device's region's dtype, f32, or the widest floating
// dtype among them); nullopt: leave them (no operand on a device with autocast on, or no policy).
std::optional<DType> target_dtype(AutocastPolicy policy, std::initializer_list<const Tensor*> ts);

// Whether `op`'s first operand keeps its dtype while the others are cast (mixed_norm on cuda).
bool keeps_first_operand(AutocastPolicy policy, std::initializer_list<const Tensor*> ts);

// t cast to `target` as the policy says: only floating operands; `lower` casts f32 ones only (f64
// stays, as in torch), through the cast cache for leaves that require grad.
Tensor cast(const Tensor& t, DType target, AutocastPolicy policy);

inline const Tensor* tensor_ptr(const Tensor& t) {
  return &t;
}
template <class T>
const Tensor* tensor_ptr(const T&) {
  return nullptr;
}
inline Tensor cast_arg(const Tensor& t, std::optional<DType> target, AutocastPolicy policy) {
  return target ? cast(t, *target, policy) : t;
}
template <class T>
const T& cast_arg(const T& v, std::optional<DType>, AutocastPolicy) {
  return v;
}

template <class F, size_t... I, class... A>
auto call_indexed(F&& f, std::index_sequence<I...>, std::optional<DType> target, bool keep_first,
                  AutocastPolicy policy, const A&... args) {
  return f(cast_arg(args, I == 0 && keep_first ? std::nullopt : target, policy)...);
}

// Calls f(args...) with the tensor arguments cast per the op's policy and autocast suspended.
template <class F, class... A>
auto call(std::string_view op, F&& f, const A&... args) {
  const AutocastPolicy policy = autocast_policy(op);
  const std::optional<DType> target = target_dtype(policy, {tensor_ptr(args)...});
  const bool keep_first = keeps_first_operand(policy, {tensor_ptr(args)...});
  const Suspend suspend;
  return call_indexed(f, std::index_sequence_for<A...>{}, target, keep_first, policy, args...);
}

}  // namespace autocast_detail

// The first line of a differentiable entry point in the policy table, e.g. in linear(x, w, b):
//   STOKE_AUTOCAST("linear", linear, x, w, b);
// Inside a region it returns the op run on cast operands; outside it costs one thread-local load.
#define STOKE_AUTOCAST(op_name, fn, ...)                                                           \
  do {                                                                                             \
    if (::stoke::autocast_detail::active())                                                        \
      return ::stoke::autocast_detail::call(                                                       \
          op_name, [&](const auto&... stoke_autocast_args) { return fn(stoke_autocast_args...); }, \
          __VA_ARGS__);                                                                            \
  } while (false)

// The first line of a binary entry point: operands of different floating dtypes are cast
// (differentiably) to the wider one, as torch's type promotion does; f16 activations meet f32
// tensors that way inside autocast regions.
#define STOKE_PROMOTE(fn, a, b)                                            \
  do {                                                                     \
    if (const auto stoke_promoted = ::stoke::promoted_dtype({&(a), &(b)})) \
      return fn((a).to(*stoke_promoted), (b).to(*stoke_promoted));         \
  } while (false)

}  // namespace stoke
