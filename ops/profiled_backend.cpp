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
// ("binary add", "unary exp": built and interned per call) and the method's literal otherwise.
class OpRange {
 public:
  template <class Tuple>
  OpRange(const char* method, const Tuple& args) : active_(profiler::enabled()) {
    if (!active_) return;
    if constexpr (std::tuple_size_v < Tuple >> 0) {
      using First = std::decay_t<std::tuple_element_t<0, Tuple>>;
      if constexpr (std::is_same_v<First, BinaryOp>) {
        profiler::detail::begin_interned(
            ::stoke::detail::str_cat(method, " ", binary_op_name(std::get<0>(args))), kCategory);
        return;
      } else if constexpr (std::is_same_v<First, UnaryOp>) {
        profiler::detail::begin_interned(
            ::stoke::detail::str_cat(method, " ", unary_op_name(std::get<0>(args))), kCategory);
        return;
      }
    }
    profiler::detail::begin(method, kCategory);
  }
  ~OpRange() {
    if (active_) profiler::detail::end();
  }
  OpRange(const OpRange&) = delete;
  OpRange& operator=(const OpRange&) = delete;

 private:
  static constexpr profiler::Category kCategory = profiler::Category::op;
  bool active_;
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

#define STOKE_PROFILED_FORWARD(ret, name, params, args, family) \
  ret name params override {                                    \
    const OpRange range(#name, std::forward_as_tuple args);     \
    return k.name args;                                         \
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
