// stoke-gpu-selftest's checks of the public API on "cuda" tensors: every ops:: entry point that
// dispatches to the CUDA backend (every method of ops/cuda/backend.h's CudaBackend), run on
// tensors moved to Device::cuda(0) and compared with the same op on the CPU, at several shapes
// (sizes that are not a multiple of 4 or of a 256-thread block, broadcasting, transposed and
// strided operands) and dtypes (f32; f16 and bf16 where the op takes them; i32/i64/u8/bool for
// arithmetic, comparisons, indexing and sums). Half results are compared with the f32 CPU op on
// the half-rounded inputs (f16/bf16 are storage types on the CPU).
//
// Builds against the real backend (apps/gpu_selftest.cpp) and against cuda/emu
// (tests/cuda/test_selftest_ops.cpp). `quick` keeps the shapes small for the emulator, which runs
// one OS thread per CUDA thread; the full set adds shapes of many blocks.
#pragma once

#include <vector>

#include "apps/selftest/suite.h"
#include "stoke/stoke.h"

namespace stoke::selftest {

// Runs every check below into `s`, each guarded (an exception becomes a failed row).
void run_ops_checks(Suite& s, bool quick);

// The checks, by file. Each adds rows; none throws on a mismatch.
// ops_checks.cpp: fill, strided copies and casts, cat/stack, data::normalize on the device.
void check_fill_copy(Suite& s, bool quick);
void check_normalize(Suite& s, bool quick);
void check_crop_flip_normalize(Suite& s, bool quick);
// ops_checks_elementwise.cpp
void check_binary(Suite& s, bool quick);
void check_integer(Suite& s, bool quick);
void check_unary(Suite& s, bool quick);
void check_unary_backward(Suite& s, bool quick);
void check_compare_where(Suite& s, bool quick);
void check_pow_ternary_backward(Suite& s, bool quick);
void check_in_place(Suite& s, bool quick);
// ops_checks_reduce.cpp
void check_reductions(Suite& s, bool quick);
void check_softmax_cross_entropy(Suite& s, bool quick);
void check_linear_algebra(Suite& s, bool quick);
// ops_checks_nn.cpp
void check_conv2d(Suite& s, bool quick);
void check_pooling(Suite& s, bool quick);
void check_batch_norm(Suite& s, bool quick);
void check_group_layer_norm(Suite& s, bool quick);
void check_dropout(Suite& s, bool quick);
void check_optimizer(Suite& s, bool quick);
// ops_checks_index.cpp
void check_index(Suite& s, bool quick);

// Helpers the checks share.
namespace ops_checks {

inline Device dev() {
  return Device::cuda(0);
}
inline const std::vector<DType>& float_types() {
  static const std::vector<DType> t = {DType::f32, DType::f16, DType::bf16};
  return t;
}
// Every dtype the copy, cast and index kernels take.
inline const std::vector<DType>& all_types() {
  static const std::vector<DType> t = {DType::f32, DType::f16, DType::bf16,   DType::i32,
                                       DType::i64, DType::u8,  DType::boolean};
  return t;
}
// Standard-normal f32 values on the CPU, reproducible from `seed`.
inline Tensor randn_cpu(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, {}, &g);
}
// Uniform [lo, hi) f32 on the CPU.
inline Tensor uniform_cpu(const Shape& shape, double lo, double hi, uint64_t seed) {
  Generator g(seed);
  return uniform(shape, lo, hi, {}, &g);
}
// Integers in [lo, hi) of `dtype` on the CPU.
inline Tensor randint_cpu(int64_t lo, int64_t hi, const Shape& shape, DType dtype, uint64_t seed) {
  Generator g(seed);
  return randint(lo, hi, shape, {.dtype = dtype}, &g);
}
// Values every dtype holds exactly: integers in [0, 100) (0/1 for bool), on the CPU.
inline Tensor exact_values(const Shape& shape, DType dtype, uint64_t seed) {
  return randint_cpu(0, dtype == DType::boolean ? 2 : 100, shape, DType::i64, seed).to(dtype);
}
// The f32 values an input of `dtype` really holds: the CPU reference computes from these.
inline Tensor rounded(const Tensor& cpu_f32, DType dtype) {
  return cpu_f32.to(dtype).to(DType::f32);
}
// An uninitialized tensor on the device.
inline Tensor dev_empty(const Shape& shape, DType dtype) {
  return empty(shape, {.dtype = dtype, .device = dev()});
}
// cpu_f32 cast to `dtype` on the CPU, then copied to the device.
inline Tensor upload(const Tensor& cpu_f32, DType dtype) {
  return cpu_f32.to(dtype).to(dev());
}
// A row's dtype column: "f16" or "f32->bf16" style labels come from here.
inline std::string dn(DType dtype) {
  return dtype_name(dtype);
}
// A leaf on the device (dtype `dtype`) and its CPU twin (the rounded f32 values), both requiring
// grad: autograd checks run the same graph from each and compare values and gradients.
struct Leaf {
  Tensor dev, cpu;
};
inline Leaf leaf(const Tensor& cpu_f32, DType dtype) {
  // detach(): new handles, so that marking them never marks cpu_f32 (to(f32) returns it as is).
  Leaf l{upload(cpu_f32, dtype).detach(), rounded(cpu_f32, dtype).detach()};
  l.dev.set_requires_grad(true);
  l.cpu.set_requires_grad(true);
  return l;
}
// Back-propagates one gradient (f32 values on the CPU) through a device result and its CPU twin:
// the device gets it in `dtype`, the CPU the values that dtype holds.
inline void backward_both(const Tensor& got, const Tensor& ref, const Tensor& grad_f32,
                          DType dtype) {
  got.backward(upload(grad_f32, dtype));
  ref.backward(rounded(grad_f32, dtype));
}
// Adds a row comparing a device result of `dtype` (checked) with an f32/CPU reference.
inline void compare_on(Suite& s, const std::string& op, const std::string& shape, DType dtype,
                       const Tensor& got, const Tensor& ref, double tol) {
  if (got.defined() && (got.dtype() != dtype || !got.device().is_cuda())) {
    s.expect(op, shape, dn(dtype), false,
             detail::str_cat("result is ", got.dtype(), " on ", got.device(), ", expected ", dtype,
                             " on cuda"));
    return;
  }
  s.compare(op, shape, dn(dtype), got, ref, tol);
}

}  // namespace ops_checks
}  // namespace stoke::selftest
