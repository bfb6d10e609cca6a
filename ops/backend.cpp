#include "ops/backend.h"

#include <array>

#include "core/enum_name.h"
#include "core/profiler.h"
#include "ops/profiled_backend.h"

namespace stoke::ops {
namespace {

std::array<Backend*, 2>& registry() {
  static std::array<Backend*, 2> r{};
  return r;
}

}  // namespace

// Each enum is declared from its list (ops/backend.h), so an enumerator's value is its position
// in the list and indexes a table made from the same list.
#define STOKE_INPLACE_NAME(name) #name "_",
#define STOKE_BACKWARD_NAME(name) #name "_backward",

const char* binary_op_name(BinaryOp op) {
  static constexpr const char* names[] = {STOKE_BINARY_OPS(STOKE_NAME_STRING)};
  return enum_name(op, names, "binary");
}

const char* unary_op_name(UnaryOp op) {
  if (op == UnaryOp::gelu_tanh) return "gelu";  // gelu(x, approximate = tanh), as torch names it
  static constexpr const char* names[] = {STOKE_UNARY_OPS(STOKE_NAME_STRING)};
  return enum_name(op, names, "unary");
}

const char* inplace_op_name(BinaryOp op) {
  static constexpr const char* names[] = {STOKE_BINARY_OPS(STOKE_INPLACE_NAME)};
  return enum_name(op, names, "binary_");
}

const char* unary_grad_op_name(UnaryGradOp op) {
  if (op == UnaryGradOp::gelu_tanh) return "gelu_backward";
  static constexpr const char* names[] = {STOKE_UNARY_GRAD_OPS(STOKE_BACKWARD_NAME)};
  return enum_name(op, names, "unary_backward");
}

const char* compare_op_name(CompareOp op) {
  static constexpr const char* names[] = {STOKE_COMPARE_OPS(STOKE_NAME_STRING)};
  return enum_name(op, names, "compare");
}

#undef STOKE_INPLACE_NAME
#undef STOKE_BACKWARD_NAME

void register_backend(Device::Type type, Backend* backend) {
  STOKE_CHECK(type != Device::Type::cpu, "register_backend",
              "the cpu backend is built in (ops/cpu/backend.cpp) and cannot be replaced");
  registry()[static_cast<size_t>(type)] = backend;
}

Backend& backend_for(const char* op, Device device) {
  if (device.is_cpu()) return cpu_backend();
  Backend* b = registry()[static_cast<size_t>(device.type)];
  STOKE_CHECK(b != nullptr, op, "got a tensor on ", device,
              ", but this build has no kernels for that device (built without CUDA)");
  b->use_device(op, device);
  return *b;
}

bool stream_capturing(Device device) {
  if (device.is_cpu()) return false;
  const Backend* b = registry()[static_cast<size_t>(device.type)];
  return b != nullptr && b->stream_capturing();
}

Backend& dispatch(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t || !t->defined()) continue;
    if (!first) first = t;
    STOKE_CHECK(t->device() == first->device(), op, "expected all tensors on the same device, got ",
                first->device(), " and ", t->device());
  }
  Backend& b = first ? backend_for(op, first->device()) : cpu_backend();
  return profiler::enabled() ? profiled(b) : b;  // one relaxed load when off
}

}  // namespace stoke::ops
