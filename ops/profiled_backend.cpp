#include "ops/profiled_backend.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>

#include "core/profiler.h"

namespace stoke::ops {
namespace {

// A profiler range named after the method, with the op for the methods that take one first
// ("binary add", "unary exp": built and interned per call) and the method's literal otherwise;
// on a device, with StartOptions::device_times, also the op's device time between two marks.
class OpRange {
 public:
  template <class Tuple>
  OpRange(const char* method, const Tuple& args, Device::Type type) : active_(profiler::enabled()) {
    if (!active_) return;
    name_ = method;
    if constexpr (std::tuple_size_v < Tuple >> 0) {
      using First = std::decay_t<std::tuple_element_t<0, Tuple>>;
      if constexpr (std::is_same_v<First, BinaryOp>)
        name_ = profiler::detail::intern(
            ::stoke::detail::str_cat(method, " ", binary_op_name(std::get<0>(args))));
      else if constexpr (std::is_same_v<First, UnaryOp>)
        name_ = profiler::detail::intern(
            ::stoke::detail::str_cat(method, " ", unary_op_name(std::get<0>(args))));
    }
    if (type != Device::Type::cpu) timer_ = profiler::detail::device_timer();
    if (timer_) {
      flops_ = profiler::detail::peek_next_flops();
      begin_mark_ = timer_->mark();
    }
    profiler::detail::begin(name_, profiler::Category::op);
  }
  ~OpRange() {
    if (!active_) return;
    profiler::detail::end();
    if (timer_) profiler::detail::add_device_range(name_, begin_mark_, timer_->mark(), flops_);
  }
  OpRange(const OpRange&) = delete;
  OpRange& operator=(const OpRange&) = delete;

 private:
  bool active_;
  const char* name_ = nullptr;
  profiler::DeviceTimer* timer_ = nullptr;
  int64_t begin_mark_ = 0;
  double flops_ = 0;
};

}  // namespace

// In its own namespace: the method list names ops:: types unqualified.
namespace profiling {
using namespace stoke::ops;

struct ProfiledBackend final : Backend {
  explicit ProfiledBackend(Backend& inner) : k(inner) {}
  Backend& k;

  Device::Type type() const override { return k.type(); }
  void use_device(const char* op, Device device) const override { k.use_device(op, device); }

#define STOKE_PROFILED_FORWARD(ret, name, params, args, family)       \
  ret name params override {                                          \
    const OpRange range(#name, std::forward_as_tuple args, k.type()); \
    return k.name args;                                               \
  }
  STOKE_BACKEND_METHODS(STOKE_PROFILED_FORWARD)
#undef STOKE_PROFILED_FORWARD
};

}  // namespace profiling

Backend& profiled(Backend& inner) {
  thread_local Backend* last_inner = nullptr;  // the common case: the same backend again
  thread_local Backend* last_made = nullptr;
  if (&inner == last_inner) return *last_made;
  static std::mutex mutex;
  static auto* made = new std::map<Backend*, std::unique_ptr<Backend>>;  // lives until exit
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = (*made)[&inner];
  if (!slot) slot = std::make_unique<profiling::ProfiledBackend>(inner);
  last_inner = &inner;
  last_made = slot.get();
  return *slot;
}

}  // namespace stoke::ops
