// CudaBackend: each ops:: entry point translated to a launch of cuda/kernels/ on the current
// stream. Arguments are validated here the way the CPU kernels validate them (shapes, dtypes),
// outputs are allocated on the input's device, and non-contiguous inputs are made contiguous on
// the device first where a kernel needs it.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "core/grad_mode.h"
#include "cuda/kernels/cross_entropy.h"
#include "cuda/kernels/elementwise.h"
#include "cuda/kernels/integer.h"
#include "cuda/kernels/reduce.h"
#include "cuda/kernels/sgemm.h"
#include "cuda/kernels/softmax.h"
#include "cuda/runtime/deferred_checks.h"
#include "cuda/runtime/stream.h"
#ifndef STOKE_CUDA_EMU
#include "cuda/vendor/cublas_gemm.h"
#endif
#include "ops/check.h"
#include "ops/creation.h"
#include "ops/cuda/backend.h"
#include "ops/linalg.h"
#include "ops/math_mode.h"

namespace stoke::ops::cuda_glue {
namespace {

cudaStream_t stream() {
  return launch_stream();
}

cuda::BinaryOp to_cuda(BinaryOp op) {
  return static_cast<cuda::BinaryOp>(op);
}

cuda::UnaryOp to_cuda(UnaryOp op) {
  switch (op) {
    case UnaryOp::neg:
      return cuda::UnaryOp::neg;
    case UnaryOp::exp:
      return cuda::UnaryOp::exp;
    case UnaryOp::log:
      return cuda::UnaryOp::log;
    case UnaryOp::sqrt:
      return cuda::UnaryOp::sqrt;
    case UnaryOp::rsqrt:
      return cuda::UnaryOp::rsqrt;
    case UnaryOp::abs:
      return cuda::UnaryOp::abs;
    case UnaryOp::relu:
      return cuda::UnaryOp::relu;
    case UnaryOp::sigmoid:
      return cuda::UnaryOp::sigmoid;
    case UnaryOp::tanh:
      return cuda::UnaryOp::tanh;
    case UnaryOp::gelu:
      return cuda::UnaryOp::gelu;
    case UnaryOp::gelu_tanh:
      return cuda::UnaryOp::gelu_tanh;
    case UnaryOp::sign:
      return cuda::UnaryOp::sign;
    case UnaryOp::silu:
      return cuda::UnaryOp::silu;
    case UnaryOp::hardswish:
      return cuda::UnaryOp::hardswish;
  }
  return cuda::UnaryOp::neg;
}

Tensor map_unary(const char* op, const Tensor& x_in, cuda::UnaryOp kind,
                 const cuda::UnaryParams& params = {}) {
  check_float_dtype(op, x_in);
  const Tensor x = x_in.detach().contiguous();
  Tensor out = empty_on(x.shape(), x.dtype(), x.device());
  cuda::unary(kind, x.dtype(), x.data_ptr(), out.data_ptr(), x.numel(), stream(), params);
  return out;
}

// Reduces dim `d` of contiguous x with `op`; indices (i64, same shape as the result) when given.
Tensor reduce_dim(const Tensor& x, int64_t d, cuda::ReduceOp op, Tensor* indices) {
  const Split s = split_at(x, d);
  Shape shape = x.shape();
  shape[static_cast<size_t>(d)] = 1;
  Tensor out = empty_on(shape, x.dtype(), x.device());
  int64_t* idx = nullptr;
  if (indices) {
    *indices = empty_on(shape, DType::i64, x.device());
    idx = indices->data<int64_t>();
  }
  const size_t ws_bytes = cuda::reduce_workspace_bytes(s.outer, s.n, s.inner);
  Tensor workspace =
      ws_bytes ? empty_on({static_cast<int64_t>(ws_bytes)}, DType::u8, x.device()) : Tensor();
  cuda::reduce(op, x.dtype(), x.data_ptr(), out.data_ptr(), idx, s.outer, s.n, s.inner,
               ws_bytes ? workspace.data_ptr() : nullptr, stream());
  return out;
}

// sum or mean over `dims` (all when empty), one dim at a time from the last.
Tensor reduce_dims(const char* op_name, const Tensor& x_in, std::vector<int64_t> dims, bool keepdim,
                   cuda::ReduceOp op) {
  check_float_dtype(op_name, x_in);
  Tensor x = x_in.detach().contiguous();
  const Shape final_shape = reduced_shape(x.shape(), dims, keepdim, op_name);
  if (dims.empty())
    for (int64_t d = 0; d < x.dim(); ++d) dims.push_back(d);
  for (auto& d : dims) d = wrap_dim(d, x.dim(), op_name);
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  if (x.numel() == 0 || x.dim() == 0) {
    Tensor out = empty_on(final_shape, x.dtype(), x.device());
    fill_(out, x.numel() == 0 ? (op == cuda::ReduceOp::sum ? 0.0 : NAN) : 0.0);
    if (x.dim() == 0) out.copy_(x);
    return out;
  }
  // One launch per run of adjacent dims (merged into one dim of x, which is contiguous), from the
  // last run; a run of size 1 needs none (a sum or mean over one element is the element).
  for (size_t end = dims.size(); end > 0;) {
    size_t begin = end - 1;
    while (begin > 0 && dims[begin - 1] == dims[begin] - 1) --begin;
    const int64_t first = dims[begin], last = dims[end - 1];
    int64_t n = 1;
    for (int64_t d = first; d <= last; ++d) n *= x.size(d);
    Shape merged(x.shape().begin(), x.shape().begin() + first);
    merged.push_back(n);
    merged.insert(merged.end(), x.shape().begin() + last + 1, x.shape().end());
    x = x.view(merged);
    if (n > 1) x = reduce_dim(x, first, op, nullptr);
    end = begin;
  }
  return x.view(final_shape);
}

cuda::CrossEntropyParams ce_params(const CrossEntropyOptions& o) {
  cuda::CrossEntropyParams p;
  p.reduction = o.reduction == Reduction::none  ? cuda::CrossEntropyReduction::none
                : o.reduction == Reduction::sum ? cuda::CrossEntropyReduction::sum
                                                : cuda::CrossEntropyReduction::mean;
  p.label_smoothing = static_cast<float>(o.label_smoothing);
  p.ignore_index = o.ignore_index;
  return p;
}

// Runs the fused cross-entropy kernel; with dlogits, also the gradient scaled by grad.
Tensor run_cross_entropy(const char* op, const Tensor& logits_in, const Tensor& target_in,
                         const CrossEntropyOptions& options, const Tensor* grad, Tensor* dlogits) {
  check_float_dtype(op, logits_in);
  STOKE_CHECK(logits_in.dim() == 2, op, "expected logits of shape (N, C) on cuda, got shape ",
              logits_in.shape());
  STOKE_CHECK(target_in.dtype() == DType::i64 && target_in.dim() == 1 &&
                  target_in.size(0) == logits_in.size(0),
              op, "expected i64 targets of shape [", logits_in.size(0), "], got ",
              target_in.dtype(), " of shape ", target_in.shape());
  const Tensor logits = logits_in.detach().contiguous();
  const Tensor target = target_in.detach().contiguous();
  const int64_t n = logits.size(0), c = logits.size(1);
  const Device dev = logits.device();
  Tensor row_loss = empty_on({n}, DType::f32, dev);
  Tensor loss = empty_on({}, DType::f32, dev);
  Tensor scratch = empty_on({2}, DType::i64, dev);
  Tensor g;
  cuda::CrossEntropyBuffers b;
  b.row_loss = row_loss.data<float>();
  b.loss = loss.data<float>();
  b.scratch = scratch.data<int64_t>();
  if (dlogits) {
    *dlogits = empty_on(logits.shape(), logits.dtype(), dev);
    b.dlogits = dlogits->data_ptr();
    if (grad && grad->defined()) {
      g = grad->detach().to(DType::f32).contiguous();
      b.grad = g.data<float>();
    }
  }
  cuda::cross_entropy(logits.dtype(), logits.data_ptr(), target.data<int64_t>(), n, c,
                      ce_params(options), b, stream());
  // The kernel writes the first out-of-range target's row to scratch[1] (-1: none) and skips such
  // rows; it is read at this thread's next synchronization, not here, and named as on the CPU.
  cuda::defer_check(
      {.flag = scratch.data<int64_t>() + 1,
       .flag_is_i64 = true,
       .passed = -1,
       .stream = stream(),
       .keep = std::make_shared<Tensor>(scratch),
       .describe = [op = std::string(op), target, c, ignore = options.ignore_index](int64_t bad) {
         const int64_t t = target.select(0, bad).to(Device::cpu()).item<int64_t>();
         return detail::str_cat("stoke::", op, ": target ", t, " of row ", bad,
                                " is out of range for ", c, " classes (expected 0 <= target < ", c,
                                " or ignore_index ", ignore, ")");
       }});
  const Tensor result = options.reduction == Reduction::none ? row_loss : loss;
  return result.dtype() == logits.dtype() ? result : result.to(logits.dtype());
}

// C (m, n) = op(A) · op(B) (+ beta C) for 2-D operands of `dtype` on the device, row-major with
// leading dims. Real builds: cuBLAS, f32 (TF32 only when set_allow_tf32 is on; off, results match
// the CPU's to f32 rounding), f16 and bf16 with f32 accumulation. The emulated build has no cuBLAS:
// our SGEMM, f32 only (the callers cast half operands to f32 there, see half_via_f32).
void gemm(DType dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void* a,
          int64_t lda, const void* b, int64_t ldb, float beta, void* c, int64_t ldc) {
#ifdef STOKE_CUDA_EMU
  STOKE_CHECK(dtype == DType::f32, "gemm", "the emulated SGEMM takes f32, got ", dtype);
  cuda::sgemm(ta, tb, m, n, k, 1.f, static_cast<const float*>(a), lda, static_cast<const float*>(b),
              ldb, beta, static_cast<float*>(c), ldc, stream());
#else
  cuda::gemm(dtype, m, n, k, a, lda, b, ldb, c, ldc,
             {.trans_a = ta, .trans_b = tb, .beta = beta, .allow_tf32 = allow_tf32()}, stream());
#endif
}

// Whether a GEMM op on `dtype` runs through f32 copies (half types in the emulated build).
bool half_via_f32(DType dtype) {
#ifdef STOKE_CUDA_EMU
  return dtype != DType::f32;
#else
  (void)dtype;
  return false;
#endif
}

Tensor as_f32(const Tensor& t) {
  return t.defined() ? t.detach().to(DType::f32) : t;
}

void check_gemm_operands(const char* op, const Tensor& a, const char* a_name, const Tensor& b,
                         const char* b_name) {
  check_float_dtype(op, a);
  check_same_dtype(op, a, a_name, b, b_name);
}

}  // namespace

namespace {

// Integer tensors (i32, i64, u8) take cuda/kernels/integer.h; the floating ones elementwise.h.
bool is_integer(DType d) {
  return d == DType::i32 || d == DType::i64 || d == DType::u8;
}

// A scalar applied to an integer tensor must be integral and in range, as on the CPU.
int64_t integral_scalar(double v, DType dtype, const char* op) {
  const double lo = dtype == DType::u8    ? 0
                    : dtype == DType::i32 ? -2147483648.0
                                          : -9.2233720368547758e18;
  const double hi = dtype == DType::u8    ? 255
                    : dtype == DType::i32 ? 2147483647.0
                                          : 9.2233720368547758e18;
  STOKE_CHECK(std::trunc(v) == v && v >= lo && v <= hi, op,
              "expected an integral scalar in the range of dtype ", dtype, ", got ", v,
              " (cast the tensor to a floating dtype first)");
  return static_cast<int64_t>(v);
}

}  // namespace

Tensor CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_op_name(op);
  check_same_dtype(name, a, "a", b, "b");
  const bool integer = is_integer(a.dtype());
  if (!integer) check_float_dtype(name, a);
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = empty_on(shape, a.dtype(), a.device());
  if (out.numel() == 0) return out;
  const Shape as = broadcast_strides(a.shape(), a.strides(), shape);
  const Shape bs = broadcast_strides(b.shape(), b.strides(), shape);
  const auto offsets = cuda::make_binary_offsets(shape.data(), static_cast<int>(shape.size()),
                                                 out.strides().data(), as.data(), bs.data());
  if (integer)
    cuda::int_binary(to_cuda(op), a.dtype(), a.data_ptr(), b.data_ptr(), out.data_ptr(), offsets,
                     out.numel(), 1, stream());
  else
    cuda::binary(to_cuda(op), a.dtype(), a.data_ptr(), b.data_ptr(), out.data_ptr(), offsets,
                 out.numel(), stream());
  return out;
}

void CudaBackend::binary_(BinaryOp op, const Tensor& t, const Tensor& other, double alpha) {
  const char* name = binary_op_name(op);
  check_same_dtype(name, t, "self", other, "other");
  const bool integer = is_integer(t.dtype());
  if (!integer) check_float_dtype(name, t);
  STOKE_CHECK(!t.requires_grad() || !GradMode::is_enabled(), name,
              "in-place update of a tensor that requires grad (wrap it in NoGradGuard)");
  const Shape shape = t.shape();
  STOKE_CHECK(broadcast_shapes(shape, other.shape(), name) == shape, name, "cannot broadcast ",
              other.shape(), " to the in-place operand's shape ", shape);
  if (t.numel() == 0) return;
  const Shape os = broadcast_strides(other.shape(), other.strides(), shape);
  // The output aliases operand a: each element is read and written by the same thread.
  const auto offsets = cuda::make_binary_offsets(shape.data(), static_cast<int>(shape.size()),
                                                 t.strides().data(), t.strides().data(), os.data());
  if (integer)
    cuda::int_binary(to_cuda(op), t.dtype(), t.data_ptr(), other.data_ptr(), t.data_ptr(), offsets,
                     t.numel(), integral_scalar(alpha, t.dtype(), name), stream());
  else
    cuda::binary(to_cuda(op), t.dtype(), t.data_ptr(), other.data_ptr(), t.data_ptr(), offsets,
                 t.numel(), stream(), static_cast<float>(alpha));
}

void CudaBackend::binary_scalar_(BinaryOp op, const Tensor& t, double s) {
  const char* name = binary_op_name(op);
  const bool integer = is_integer(t.dtype());
  if (!integer) check_float_dtype(name, t);
  STOKE_CHECK(!t.requires_grad() || !GradMode::is_enabled(), name,
              "in-place update of a tensor that requires grad (wrap it in NoGradGuard)");
  if (t.is_contiguous()) {
    if (integer)
      cuda::int_binary_scalar(to_cuda(op), t.dtype(), t.data_ptr(),
                              integral_scalar(s, t.dtype(), name), t.data_ptr(), t.numel(), false,
                              stream());
    else
      cuda::binary_scalar(to_cuda(op), t.dtype(), t.data_ptr(), s, t.data_ptr(), t.numel(),
                          stream());
    return;
  }
  const Tensor tmp = binary_scalar(op, t, s, false);
  copy_strided(t, tmp);
}

Tensor CudaBackend::binary_scalar(BinaryOp op, const Tensor& a_in, double s, bool scalar_first) {
  const char* name = binary_op_name(op);
  const Tensor a = a_in.detach().contiguous();
  Tensor out = empty_on(a.shape(), a.dtype(), a.device());
  if (is_integer(a.dtype())) {
    cuda::int_binary_scalar(to_cuda(op), a.dtype(), a.data_ptr(),
                            integral_scalar(s, a.dtype(), name), out.data_ptr(), a.numel(),
                            scalar_first, stream());
    return out;
  }
  check_float_dtype(name, a_in);
  cuda::binary_scalar(to_cuda(op), a.dtype(), a.data_ptr(), s, out.data_ptr(), a.numel(), stream(),
                      scalar_first);
  return out;
}

Tensor CudaBackend::unary(UnaryOp op, const Tensor& x) {
  return map_unary(unary_op_name(op), x, to_cuda(op));
}

Tensor CudaBackend::leaky_relu(const Tensor& x, double negative_slope) {
  cuda::UnaryParams p;
  p.negative_slope = static_cast<float>(negative_slope);
  return map_unary("leaky_relu", x, cuda::UnaryOp::leaky_relu, p);
}

Tensor CudaBackend::clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  STOKE_CHECK(min || max, "clamp", "expected at least one of min and max");
  cuda::UnaryParams p;
  if (min) p.min = static_cast<float>(*min);
  if (max) p.max = static_cast<float>(*max);
  return map_unary("clamp", x, cuda::UnaryOp::clamp, p);
}

Tensor CudaBackend::relu_backward(const Tensor& grad_in, const Tensor& out_in) {
  check_same_dtype("relu_backward", grad_in, "grad", out_in, "output");
  check_float_dtype("relu_backward", grad_in);
  check_shape("relu_backward", grad_in, "grad", out_in.shape());
  const Tensor g = grad_in.detach().contiguous(), y = out_in.detach().contiguous();
  Tensor dx = empty_on(y.shape(), y.dtype(), y.device());
  cuda::unary_backward(cuda::UnaryBackwardOp::relu, y.dtype(), g.data_ptr(), y.data_ptr(),
                       dx.data_ptr(), y.numel(), stream());
  return dx;
}

Tensor CudaBackend::sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  if (is_integer(x.dtype()) || x.dtype() == DType::boolean) {
    // Integer and bool sums are exact i64 (counting correct predictions), as on the CPU: one
    // dim at a time into i64, then i64 onwards.
    const Shape final_shape = reduced_shape(x.shape(), dims, keepdim, "sum");
    std::vector<int64_t> ds = dims;
    if (ds.empty())
      for (int64_t d = 0; d < x.dim(); ++d) ds.push_back(d);
    for (auto& d : ds) d = wrap_dim(d, std::max<int64_t>(x.dim(), 1), "sum");
    std::sort(ds.begin(), ds.end());
    ds.erase(std::unique(ds.begin(), ds.end()), ds.end());
    Tensor cur = x.detach().contiguous();
    if (cur.dim() == 0) cur = cur.reshape({1});
    for (auto it = ds.rbegin(); it != ds.rend(); ++it) {
      const Split sp = split_at(cur, *it);
      Shape shape = cur.shape();
      shape[static_cast<size_t>(*it)] = 1;
      Tensor out = empty_on(shape, DType::i64, cur.device());
      if (out.numel() > 0 && sp.n == 0)
        fill_(out, 0.0);
      else
        cuda::int_sum(cur.dtype(), cur.data_ptr(), typed<int64_t>(out), sp.outer, sp.n, sp.inner,
                      stream());
      cur = out;
    }
    if (cur.dtype() != DType::i64) cur = cur.to(DType::i64);  // no dims reduced
    return cur.reshape(final_shape);
  }
  return reduce_dims("sum", x, dims, keepdim, cuda::ReduceOp::sum);
}

Tensor CudaBackend::mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce_dims("mean", x, dims, keepdim, cuda::ReduceOp::mean);
}

// max/min over one dim with the positions of the first extremum (a 0-dim x is its own extremum,
// at position 0, as on the CPU).
ValuesIndices extremum(const char* op, const Tensor& x_in, int64_t dim, bool keepdim,
                       cuda::ReduceOp kind) {
  check_float_dtype(op, x_in);
  const int64_t d = wrap_dim(dim, x_in.dim(), op);
  const bool scalar = x_in.dim() == 0;
  const Tensor x = scalar ? x_in.detach().reshape({1}) : x_in.detach().contiguous();
  STOKE_CHECK(x.size(d) > 0, op, "cannot reduce over dim ", dim, " of size 0 (input shape ",
              x.shape(), ")");
  Tensor indices;
  Tensor values = reduce_dim(x, d, kind, &indices);
  if (scalar) return {values.reshape({}), indices.reshape({})};
  if (!keepdim) {
    values = values.squeeze(d);
    indices = indices.squeeze(d);
  }
  return {values, indices};
}

ValuesIndices CudaBackend::max_with_indices(const Tensor& x, int64_t dim, bool keepdim) {
  return extremum("max", x, dim, keepdim, cuda::ReduceOp::max);
}

ValuesIndices CudaBackend::min_with_indices(const Tensor& x, int64_t dim, bool keepdim) {
  return extremum("min", x, dim, keepdim, cuda::ReduceOp::min);
}

Tensor CudaBackend::softmax(const Tensor& x_in, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  check_float_dtype(name, x_in);
  const Tensor x = x_in.detach().contiguous();
  Tensor y = empty_on(x.shape(), x.dtype(), x.device());
  if (x.numel() == 0) return y;
  const Split s = split_at(x, wrap_dim(dim, std::max<int64_t>(x.dim(), 1), name));
  cuda::softmax_forward(x.dtype(), x.data_ptr(), y.data_ptr(), s.outer, s.n, s.inner, log,
                        stream());
  return y;
}

Tensor CudaBackend::softmax_backward(const Tensor& grad_in, const Tensor& output_in, int64_t dim,
                                     bool log) {
  const char* name = log ? "log_softmax_backward" : "softmax_backward";
  check_same_dtype(name, grad_in, "grad", output_in, "output");
  check_float_dtype(name, grad_in);
  check_shape(name, grad_in, "grad", output_in.shape());
  const Tensor g = grad_in.detach().contiguous(), y = output_in.detach().contiguous();
  Tensor dx = empty_on(y.shape(), y.dtype(), y.device());
  if (y.numel() == 0) return dx;
  const Split s = split_at(y, wrap_dim(dim, std::max<int64_t>(y.dim(), 1), name));
  cuda::softmax_backward(y.dtype(), g.data_ptr(), y.data_ptr(), dx.data_ptr(), s.outer, s.n,
                         s.inner, log, stream());
  return dx;
}

CrossEntropyForward CudaBackend::cross_entropy_forward(const Tensor& logits, const Tensor& target,
                                                       const CrossEntropyOptions& options) {
  // The fused kernel recomputes the log-sum-exp in the backward pass, so no lse is kept.
  return {run_cross_entropy("cross_entropy", logits, target, options, nullptr, nullptr), Tensor()};
}

Tensor CudaBackend::cross_entropy_backward(const Tensor& grad, const Tensor& logits,
                                           const Tensor& target, const Tensor&,
                                           const CrossEntropyOptions& options) {
  Tensor dlogits;
  run_cross_entropy("cross_entropy_backward", logits, target, options, &grad, &dlogits);
  return dlogits;
}

Tensor CudaBackend::matmul(const Tensor& a_in, const Tensor& b_in) {
  check_gemm_operands("matmul", a_in, "a", b_in, "b");
  STOKE_CHECK(a_in.dim() >= 1 && b_in.dim() >= 1, "matmul",
              "expected operands with at least 1 dim, got shapes ", a_in.shape(), " and ",
              b_in.shape());
  // torch.matmul's rules, as on the CPU: a 1-D operand gains a dim (dropped from the result),
  // batch dims broadcast.
  const Tensor a2 = a_in.dim() == 1 ? a_in.detach().unsqueeze(0) : a_in.detach();
  const Tensor b2 = b_in.dim() == 1 ? b_in.detach().unsqueeze(1) : b_in.detach();
  STOKE_CHECK(a2.size(-1) == b2.size(-2), "matmul", "expected a's last dim to equal b's ",
              b_in.dim() == 1 ? "only" : "second-to-last", " dim, got shapes ", a_in.shape(),
              " and ", b_in.shape());
  if (half_via_f32(a_in.dtype())) return matmul(as_f32(a_in), as_f32(b_in)).to(a_in.dtype());
  const int64_t m = a2.size(-2), k = a2.size(-1), n = b2.size(-1);
  const Shape batch = broadcast_shapes(Shape(a2.shape().begin(), a2.shape().end() - 2),
                                       Shape(b2.shape().begin(), b2.shape().end() - 2), "matmul");
  Shape fa = batch, fb = batch, fc = batch;
  fa.insert(fa.end(), {m, k});
  fb.insert(fb.end(), {k, n});
  fc.insert(fc.end(), {m, n});
  Shape result = batch;
  if (a_in.dim() > 1) result.push_back(m);
  if (b_in.dim() > 1) result.push_back(n);
  Tensor c = empty_on(fc, a2.dtype(), a2.device());
  if (c.numel() == 0) return c.view(result);
  if (k == 0) {
    fill_(c, 0.0);
    return c.view(result);
  }
  // Broadcast batch operands are materialized; one GEMM per batch matrix (cuBLAS's strided batched
  // GEMM would save the launches; the training models only multiply 2-D operands).
  const Tensor a = a2.expand(fa).contiguous(), b = b2.expand(fb).contiguous();
  const int64_t count = c.numel() / (m * n);
  const size_t es = a.element_size();
  const auto* pa = static_cast<const char*>(a.data_ptr());
  const auto* pb = static_cast<const char*>(b.data_ptr());
  auto* pc = static_cast<char*>(c.data_ptr());
  for (int64_t i = 0; i < count; ++i)
    gemm(a.dtype(), false, false, m, n, k, pa + i * m * k * es, k, pb + i * k * n * es, n, 0.f,
         pc + i * m * n * es, n);
  return c.view(result);
}

Tensor CudaBackend::linear(const Tensor& x_in, const Tensor& w_in, const Tensor& bias) {
  check_gemm_operands("linear", x_in, "input", w_in, "weight");
  STOKE_CHECK(x_in.dim() >= 1 && w_in.dim() == 2 && x_in.size(-1) == w_in.size(1), "linear",
              "expected input (..., in_features) and weight (out_features, in_features), got ",
              x_in.shape(), " and ", w_in.shape());
  if (half_via_f32(x_in.dtype()))
    return linear(as_f32(x_in), as_f32(w_in), as_f32(bias)).to(x_in.dtype());
  const int64_t in = w_in.size(1), out_f = w_in.size(0);
  Shape out_shape(x_in.shape().begin(), x_in.shape().end() - 1);
  out_shape.push_back(out_f);
  const Tensor x = x_in.detach().contiguous().reshape({-1, in});
  const Tensor w = w_in.detach().contiguous();
  const int64_t m = x.size(0);
  Tensor y = empty_on({m, out_f}, x.dtype(), x.device());
  float beta = 0.f;
  if (bias.defined()) {
    check_shape("linear", bias, "bias", {out_f});
    y.copy_(bias.detach().expand({m, out_f}));
    beta = 1.f;
  }
  if (y.numel() > 0)
    gemm(x.dtype(), false, true, m, out_f, in, x.data_ptr(), in, w.data_ptr(), in, beta,
         y.data_ptr(), out_f);
  return y.view(out_shape);
}

LinearGrads CudaBackend::linear_backward(const Tensor& grad_out, const Tensor& x_in,
                                         const Tensor& w_in, bool need_input, bool need_weight,
                                         bool need_bias) {
  check_gemm_operands("linear_backward", x_in, "input", w_in, "weight");
  check_same_dtype("linear_backward", grad_out, "grad_out", x_in, "input");
  if (half_via_f32(x_in.dtype())) {
    LinearGrads r = linear_backward(as_f32(grad_out), as_f32(x_in), as_f32(w_in), need_input,
                                    need_weight, need_bias);
    for (Tensor* t : {&r.grad_input, &r.grad_weight, &r.grad_bias})
      if (t->defined()) *t = t->to(x_in.dtype());
    return r;
  }
  const int64_t in = w_in.size(1), out_f = w_in.size(0);
  Shape out_shape(x_in.shape().begin(), x_in.shape().end() - 1);
  out_shape.push_back(out_f);
  check_shape("linear_backward", grad_out, "grad_out", out_shape);
  const Tensor g = grad_out.detach().contiguous().reshape({-1, out_f});
  const int64_t rows = g.size(0);
  LinearGrads r;
  if (need_input) {
    const Tensor w = w_in.detach().contiguous();
    Tensor gx = empty_on({rows, in}, g.dtype(), g.device());
    if (gx.numel() > 0)  // gx (rows, in) = g (rows, out) · W (out, in)
      gemm(g.dtype(), false, false, rows, in, out_f, g.data_ptr(), out_f, w.data_ptr(), in, 0.f,
           gx.data_ptr(), in);
    r.grad_input = gx.view(x_in.shape());
  }
  if (need_weight) {
    const Tensor x = x_in.detach().contiguous().reshape({-1, in});
    Tensor gw = empty_on({out_f, in}, g.dtype(), g.device());
    if (rows == 0)
      fill_(gw, 0.0);
    else if (gw.numel() > 0)  // gW (out, in) = gᵀ (out, rows) · x (rows, in)
      gemm(g.dtype(), true, false, out_f, in, rows, g.data_ptr(), out_f, x.data_ptr(), in, 0.f,
           gw.data_ptr(), in);
    r.grad_weight = gw;
  }
  if (need_bias) r.grad_bias = sum_leading_dims(grad_out);
  return r;
}

}  // namespace stoke::ops::cuda_glue
