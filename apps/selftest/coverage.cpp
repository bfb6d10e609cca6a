#include "apps/selftest/coverage.h"

#include "core/error.h"

#include <tuple>
#include <type_traits>
#include <utility>

namespace stoke::selftest {

namespace {

// The tensor whose dtype a call notes: the op's input, which is its first tensor argument except
// where that is the output or a mask (copy_strided(dst, src), where(cond, a, b),
// normalize_u8_nhwc(images u8, out), crop_flip_normalize_u8_nhwc(images u8, out, crops)): there
// the second.
size_t noted_index(Method m) {
  return m == Method::copy_strided || m == Method::where || m == Method::normalize_u8_nhwc ||
                 m == Method::crop_flip_normalize_u8_nhwc
             ? 1
             : 0;
}

template <class Tuple>
const Tensor& noted_tensor(Method m, const Tuple& args) {
  static const Tensor none;
  const Tensor* found[2] = {nullptr, nullptr};
  size_t n = 0;
  std::apply(
      [&](const auto&... a) {
        auto note = [&](const auto& x) {
          if constexpr (std::is_same_v<std::decay_t<decltype(x)>, Tensor>)
            if (n < 2) found[n++] = &x;
        };
        (note(a), ...);
      },
      args);
  const size_t i = noted_index(m);
  return i < n ? *found[i] : (n > 0 ? *found[0] : none);
}

}  // namespace

// The forwarding backend, in its own namespace because the method list (ops/backend_methods.h)
// names ops:: types unqualified: the using-directive stays here (tests/cuda compiles this file
// together with the ops checks, where it would make calls ambiguous).
namespace forwarding {
using namespace stoke::ops;

// Forwards every method to the wrapped backend after counting it.
struct CountingBackend : Backend {
  CountingBackend(Backend& inner, CoverageScope::State& state) : k(inner), s(state) {}
  Backend& k;
  CoverageScope::State& s;

  void hit(Method m, const Tensor& t) {
    const auto i = static_cast<size_t>(m);
    s.calls[i].fetch_add(1, std::memory_order_relaxed);
    if (t.defined())
      s.dtypes[i].fetch_or(1u << static_cast<unsigned>(t.dtype()), std::memory_order_relaxed);
  }

  Device::Type type() const override { return k.type(); }
  void use_device(const char* op, Device device) const override { k.use_device(op, device); }

#define STOKE_SELFTEST_FORWARD(ret, name, params, args, family)                \
  ret name params override {                                                   \
    hit(Method::name, noted_tensor(Method::name, std::forward_as_tuple args)); \
    return k.name args;                                                        \
  }
  STOKE_BACKEND_METHODS(STOKE_SELFTEST_FORWARD)
#undef STOKE_SELFTEST_FORWARD
};

}  // namespace forwarding

struct CoverageScope::Decorator final : forwarding::CountingBackend {
  using CountingBackend::CountingBackend;
};

CoverageScope::CoverageScope()
    : inner_(&ops::backend_for("stoke-gpu-selftest", Device::cuda(0))),
      decorator_(new Decorator(*inner_, state_)) {
  ops::register_backend(Device::Type::cuda, decorator_);
}

CoverageScope::~CoverageScope() {
  ops::register_backend(Device::Type::cuda, inner_);
  delete decorator_;
}

Coverage CoverageScope::snapshot() const {
  Coverage c;
  for (size_t i = 0; i < kMethodCount; ++i) {
    c.calls[i] = state_.calls[i].load();
    c.dtypes[i] = state_.dtypes[i].load();
  }
  return c;
}

namespace {
size_t index_of(std::string_view method) {
  for (size_t i = 0; i < kMethodCount; ++i)
    if (kMethods[i] == method) return i;
  STOKE_FAIL("selftest::Coverage", "no Backend method named ", std::string(method));
}
}  // namespace

int64_t Coverage::calls_of(std::string_view method) const {
  return calls[index_of(method)];
}

bool Coverage::saw(std::string_view method, DType dtype) const {
  return (dtypes[index_of(method)] >> static_cast<unsigned>(dtype)) & 1u;
}

std::string Coverage::never_called() const {
  std::string s;
  for (size_t i = 0; i < kMethodCount; ++i)
    if (calls[i] == 0) s.append(s.empty() ? "" : ", ").append(kMethods[i]);
  return s;
}

std::vector<std::string> Coverage::lines() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < kMethodCount; ++i) {
    std::string line = detail::str_cat(kMethods[i], ": ", calls[i], " calls (");
    bool first = true;
    for (unsigned d = 0; d < 8; ++d) {
      if (!((dtypes[i] >> d) & 1u)) continue;
      line.append(first ? "" : " ").append(dtype_name(static_cast<DType>(d)));
      first = false;
    }
    out.push_back(line + ")");
  }
  return out;
}

}  // namespace stoke::selftest
