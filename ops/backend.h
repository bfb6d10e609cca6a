// The backend interface of ops/: one Backend object per device type (the CPU's in ops/cpu/, the
// CUDA glue's in ops/cuda/), peers behind every ops:: entry point. An entry point in ops/<op>.cpp
// checks its arguments (device-independent checks, the same message on every device), then calls
// its method on dispatch(op, tensors): the backend of the tensors' device. The methods mirror the
// ops:: functions one to one and are listed once, in ops/backend_methods.h; each is pure virtual,
// so a backend without an op's kernel does not compile (never a silent CPU fallback on device
// memory, never a missing kernel found at run time).
//
// Why virtual methods and not a switch in every op: ops/ cannot depend on cuda/ (the real and the
// emulated backend are two libraries with the same symbols, and a CPU-only build has neither), so
// the link goes the other way, through this registry, like core's allocator registry. The cost is
// one indirect call per op, not per element.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "core/elementwise_ops.h"
#include "core/random.h"
#include "core/tensor.h"
#include "ops/backend_methods.h"
#include "ops/batch_norm.h"
#include "ops/conv2d.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/group_norm.h"
#include "ops/index.h"
#include "ops/linalg.h"
#include "ops/loss.h"
#include "ops/optimizer.h"
#include "ops/pool.h"
#include "ops/reduce.h"

namespace stoke::ops {

// The op kinds, listed once for ops/ and the CUDA kernels (core/elementwise_ops.h).
enum class BinaryOp : uint8_t { STOKE_BINARY_OPS(STOKE_ENUMERATOR) };
enum class UnaryOp : uint8_t { STOKE_UNARY_OPS(STOKE_ENUMERATOR) };
enum class UnaryGradOp : uint8_t { STOKE_UNARY_GRAD_OPS(STOKE_ENUMERATOR) };
struct UnaryGradParams {
  double negative_slope = 0.01;  // leaky_relu
  double min = -INFINITY;        // clamp (missing bounds are infinite)
  double max = INFINITY;
};
// a (op) b -> bool, as ops::eq ... ops::ge.
enum class CompareOp : uint8_t { STOKE_COMPARE_OPS(STOKE_ENUMERATOR) };

// The ops:: function an op kind serves, for messages: "add", "gelu" (also for gelu_tanh), "add_"
// (the in-place form), "sigmoid_backward", "eq".
const char* binary_op_name(BinaryOp op);
const char* unary_op_name(UnaryOp op);
const char* inplace_op_name(BinaryOp op);
const char* unary_grad_op_name(UnaryGradOp op);
const char* compare_op_name(CompareOp op);

class Backend {
 public:
  virtual ~Backend() = default;
  // The device type this backend serves, for messages.
  virtual Device::Type type() const = 0;
  // Called by every dispatch before the op's kernels: throws naming `op` when `device` cannot run
  // kernels (no such device, no driver), else makes it the device the op's launches, allocations
  // and library handles use. CUDA: the calling thread's current device becomes device.index (what
  // a torch op's device guard does; here it stays set, so the common one-device case never
  // switches). The CPU has nothing to select.
  virtual void use_device(const char* op, Device device) const = 0;
  // Whether the calling thread's current stream is capturing a CUDA graph (what is launched now
  // is recorded for the replays, not run once). Never on the CPU.
  virtual bool stream_capturing() const { return false; }

#define STOKE_BACKEND_PURE(ret, name, params, args, family) virtual ret name params = 0;
  STOKE_BACKEND_METHODS(STOKE_BACKEND_PURE)
#undef STOKE_BACKEND_PURE
};

// In a backend's class: `STOKE_BACKEND_METHODS(STOKE_BACKEND_OVERRIDE)` declares every method.
#define STOKE_BACKEND_OVERRIDE(ret, name, params, args, family) ret name params override;

// The CPU backend (ops/cpu/backend.cpp); always present.
Backend& cpu_backend();
// Registers the backend of a non-CPU device type (null unregisters). Called by backends at
// start-up.
void register_backend(Device::Type type, Backend* backend);
// The backend for `device`, or throws naming the op and the device when none is registered.
Backend& backend_for(const char* op, Device device);
// The dispatch of an entry point: checks that every defined tensor is on one device (naming the
// two devices otherwise), selects that device (Backend::use_device) and returns its backend; the
// CPU's when no tensor is defined.
Backend& dispatch(const char* op, std::initializer_list<const Tensor*> tensors);
// Backend::stream_capturing of `device`'s backend (false on the CPU and without a backend).
bool stream_capturing(Device device);

}  // namespace stoke::ops
