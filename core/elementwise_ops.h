// The elementwise op kinds that ops/ (ops::BinaryOp, UnaryOp, UnaryGradOp, CompareOp in
// ops/backend.h) and the CUDA kernels (cuda/kernels/elementwise.h, elementwise_compare.h) both
// name, listed once: each side declares its enum from these lists (cuda/ may not include ops/),
// and the glue maps one to the other by name (ops/cuda/elementwise*.cpp), so adding a map is one
// line here plus its kernels.
#pragma once

// clang-format off
// Broadcasting binary arithmetic, as the ops:: functions of two tensors of the same names
// (ops/elementwise.h declares them from this list).
#define STOKE_BINARY_OPS(X) X(add) X(sub) X(mul) X(div) X(maximum) X(minimum)
// Unary maps without parameters that are ops:: functions of one tensor, Tensor NAME(const Tensor&)
// (ops/elementwise.h declares them from this list).
#define STOKE_UNARY_FUNCTION_OPS(X)                                                            \
  X(neg) X(exp) X(log) X(sqrt) X(rsqrt) X(abs) X(relu) X(sigmoid) X(tanh) X(sign) X(silu)     \
  X(hardswish)
// All unary maps without parameters: those and ops::gelu's two forms, gelu the exact erf form,
// gelu_tanh the tanh approximation.
#define STOKE_UNARY_OPS(X) STOKE_UNARY_FUNCTION_OPS(X) X(gelu) X(gelu_tanh)
// Backward maps out = f(grad, saved), saved being the forward's input or output as
// ops::NAME_backward takes it.
#define STOKE_UNARY_GRAD_OPS(X)                                                                \
  X(leaky_relu) X(sigmoid) X(tanh) X(gelu) X(gelu_tanh) X(clamp) X(abs) X(sqrt) X(rsqrt)       \
  X(silu) X(hardswish)
// a (op) b -> bool.
#define STOKE_COMPARE_OPS(X) X(eq) X(ne) X(lt) X(le) X(gt) X(ge)
// clang-format on

// An enumerator per list entry: enum class E { STOKE_BINARY_OPS(STOKE_ENUMERATOR) };
#define STOKE_ENUMERATOR(name) name,
// Its name as a string, in the same order (the op kinds' names in ops/backend.cpp):
//   const char* names[] = {STOKE_BINARY_OPS(STOKE_NAME_STRING)};
#define STOKE_NAME_STRING(name) #name,
