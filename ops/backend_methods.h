// The one list of the methods of ops::Backend (ops/backend.h), written once and expanded by the
// interface (pure virtual), by each backend's declaration (CPU: ops/cpu/backend.h, CUDA:
// ops/cuda/backend.h) and by stoke-gpu-selftest's coverage decorator (apps/selftest), so that
// adding an op's kernel is one line here plus its implementations, and a backend that lacks one
// does not compile.
//
// X(return type, name, (parameters), (arguments), family) — `family` is the op's name everywhere
// (ops/<family>.h, ops/cpu/<family>.cpp, ops/cuda/<family>.cpp, cuda/kernels/<family>*.cu); the
// comments say what the entry point has checked before calling. Include ops/backend.h, not this.
#pragma once

// clang-format off
#define STOKE_BACKEND_METHODS(X)                                                                   \
  /* creation: t = value; dst <- src (same device and shape), strided, converting dtypes */       \
  X(void, fill, (const Tensor& t, double value), (t, value), creation)                            \
  X(void, copy_strided, (const Tensor& dst, const Tensor& src), (dst, src), creation)             \
  /* elementwise: binary ops broadcast; scalar_first: s (op) a, as in sub(s, a), div(s, a) */     \
  X(Tensor, binary, (BinaryOp op, const Tensor& a, const Tensor& b), (op, a, b), elementwise)     \
  X(Tensor, binary_scalar, (BinaryOp op, const Tensor& a, double s, bool scalar_first),           \
    (op, a, s, scalar_first), elementwise)                                                        \
  X(Tensor, unary, (UnaryOp op, const Tensor& x), (op, x), elementwise)                          \
  X(Tensor, leaky_relu, (const Tensor& x, double negative_slope), (x, negative_slope),           \
    elementwise)                                                                                  \
  X(Tensor, clamp, (const Tensor& x, std::optional<double> min, std::optional<double> max),       \
    (x, min, max), elementwise)                                                                   \
  X(Tensor, relu_backward, (const Tensor& grad, const Tensor& x), (grad, x), elementwise)         \
  /* in place, after check_inplace_target: t = t op (alpha * other) (alpha for add/sub only),   */ \
  /* other broadcast to t's shape; t = t op s */                                                  \
  X(void, binary_, (BinaryOp op, const Tensor& t, const Tensor& other, double alpha),            \
    (op, t, other, alpha), elementwise)                                                           \
  X(void, binary_scalar_, (BinaryOp op, const Tensor& t, double s), (op, t, s), elementwise)      \
  /* grad and saved broadcast against each other; saved is the forward's input or output as    */ \
  /* ops::NAME_backward takes it */                                                               \
  X(Tensor, unary_backward,                                                                       \
    (UnaryGradOp op, const Tensor& grad, const Tensor& saved, const UnaryGradParams& params),     \
    (op, grad, saved, params), elementwise)                                                       \
  /* comparisons with broadcasting, any dtype (both operands the same); a bool result */          \
  X(Tensor, compare, (CompareOp op, const Tensor& a, const Tensor& b), (op, a, b), elementwise)   \
  X(Tensor, compare_scalar, (CompareOp op, const Tensor& a, double s), (op, a, s), elementwise)   \
  /* cond (bool) ? a : b with broadcasting; grad where cond == for_a, else 0 */                   \
  X(Tensor, where, (const Tensor& cond, const Tensor& a, const Tensor& b), (cond, a, b),          \
    elementwise)                                                                                  \
  X(Tensor, where_backward, (const Tensor& grad, const Tensor& cond, bool for_a),                \
    (grad, cond, for_a), elementwise)                                                             \
  /* x ** exponent and grad * exponent * x^(exponent - 1) */                                      \
  X(Tensor, pow, (const Tensor& x, double exponent), (x, exponent), elementwise)                  \
  X(Tensor, pow_backward, (const Tensor& grad, const Tensor& x, double exponent),                 \
    (grad, x, exponent), elementwise)                                                             \
  /* -grad * a / b^2, and a's share of the gradient of maximum(a, b) (max) or minimum(a, b) */    \
  X(Tensor, div_backward_other, (const Tensor& grad, const Tensor& a, const Tensor& b),           \
    (grad, a, b), elementwise)                                                                    \
  X(Tensor, minmax_backward, (bool max, const Tensor& grad, const Tensor& a, const Tensor& b),    \
    (max, grad, a, b), elementwise)                                                               \
  /* in place, after the in-place checks: sqrt, clamp (one bound at least), t += w * (end - t) */ \
  X(void, sqrt_, (const Tensor& t), (t), elementwise)                                             \
  X(void, clamp_, (const Tensor& t, std::optional<double> min, std::optional<double> max),        \
    (t, min, max), elementwise)                                                                   \
  X(void, lerp_, (const Tensor& t, const Tensor& end, double weight), (t, end, weight),           \
    elementwise)                                                                                  \
  /* reductions */                                                                                \
  X(Tensor, sum, (const Tensor& x, const std::vector<int64_t>& dims, bool keepdim),               \
    (x, dims, keepdim), reduce)                                                                   \
  X(Tensor, mean, (const Tensor& x, const std::vector<int64_t>& dims, bool keepdim),              \
    (x, dims, keepdim), reduce)                                                                   \
  X(ValuesIndices, max_with_indices, (const Tensor& x, int64_t dim, bool keepdim),                \
    (x, dim, keepdim), reduce)                                                                    \
  X(ValuesIndices, min_with_indices, (const Tensor& x, int64_t dim, bool keepdim),                \
    (x, dim, keepdim), reduce)                                                                    \
  /* softmax and log_softmax (log) */                                                             \
  X(Tensor, softmax, (const Tensor& x, int64_t dim, bool log), (x, dim, log), softmax)            \
  X(Tensor, softmax_backward, (const Tensor& grad, const Tensor& output, int64_t dim, bool log),   \
    (grad, output, dim, log), softmax)                                                            \
  /* losses */                                                                                    \
  X(CrossEntropyForward, cross_entropy_forward,                                                   \
    (const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options),             \
    (logits, target, options), loss)                                                              \
  X(Tensor, cross_entropy_backward,                                                               \
    (const Tensor& grad, const Tensor& logits, const Tensor& target, const Tensor& lse,           \
     const CrossEntropyOptions& options),                                                         \
    (grad, logits, target, lse, options), loss)                                                   \
  /* linear algebra */                                                                            \
  X(Tensor, matmul, (const Tensor& a, const Tensor& b), (a, b), linalg)                           \
  X(Tensor, linear, (const Tensor& x, const Tensor& weight, const Tensor& bias),                  \
    (x, weight, bias), linalg)                                                                    \
  X(LinearGrads, linear_backward,                                                                 \
    (const Tensor& grad_out, const Tensor& x, const Tensor& weight, bool need_input,              \
     bool need_weight, bool need_bias),                                                           \
    (grad_out, x, weight, need_input, need_weight, need_bias), linalg)                            \
  /* convolution, after the entry point's checks (shapes, options, dtypes agree) */               \
  X(Tensor, conv2d,                                                                               \
    (const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options), \
    (input, weight, bias, options), conv2d)                                                       \
  X(Conv2dGrads, conv2d_backward,                                                                 \
    (const Tensor& grad_out, const Tensor& input, const Tensor& weight,                           \
     const Conv2dOptions& options, bool need_input, bool need_weight, bool need_bias),            \
    (grad_out, input, weight, options, need_input, need_weight, need_bias), conv2d)               \
  /* pooling */                                                                                   \
  X(MaxPool2dResult, max_pool2d_with_indices, (const Tensor& input, const Pool2dOptions& options),\
    (input, options), pool)                                                                       \
  X(Tensor, max_pool2d_backward,                                                                  \
    (const Tensor& grad_output, const Tensor& indices, const Shape& input_shape,                  \
     const Pool2dOptions& options),                                                               \
    (grad_output, indices, input_shape, options), pool)                                           \
  X(Tensor, avg_pool2d, (const Tensor& input, const Pool2dOptions& options), (input, options),   \
    pool)                                                                                         \
  X(Tensor, avg_pool2d_backward,                                                                  \
    (const Tensor& grad_output, const Shape& input_shape, const Pool2dOptions& options),          \
    (grad_output, input_shape, options), pool)                                                    \
  X(Tensor, adaptive_avg_pool2d, (const Tensor& input, std::array<int64_t, 2> output_size),       \
    (input, output_size), pool)                                                                   \
  X(Tensor, adaptive_avg_pool2d_backward, (const Tensor& grad_output, const Shape& input_shape),  \
    (grad_output, input_shape), pool)                                                             \
  /* batch norm */                                                                                \
  X(BatchNormForward, batch_norm_forward,                                                         \
    (const Tensor& input, const Tensor& running_mean, const Tensor& running_var,                  \
     const Tensor& weight, const Tensor& bias, const BatchNormOptions& options),                  \
    (input, running_mean, running_var, weight, bias, options), batch_norm)                        \
  X(BatchNormGrads, batch_norm_backward,                                                          \
    (const Tensor& grad_output, const Tensor& input, const Tensor& weight,                        \
     const Tensor& save_mean, const Tensor& save_invstd, bool training,                           \
     std::array<bool, 3> output_mask, const Tensor& relu_output),                                 \
    (grad_output, input, weight, save_mean, save_invstd, training, output_mask, relu_output),     \
    batch_norm)                                                                                   \
  /* group and layer norm on the (N, G, K, S) view, weight / bias flat (G * K) or undefined */  \
  X(GroupNormForward, group_norm_forward,                                                         \
    (const Tensor& input, const Tensor& weight, const Tensor& bias,                               \
     const GroupNormLayout& layout, double eps),                                                  \
    (input, weight, bias, layout, eps), group_norm)                                               \
  X(GroupNormGrads, group_norm_backward,                                                          \
    (const Tensor& grad_output, const Tensor& input, const Tensor& weight,                        \
     const Tensor& save_mean, const Tensor& save_rstd, const GroupNormLayout& layout,             \
     std::array<bool, 3> output_mask),                                                            \
    (grad_output, input, weight, save_mean, save_rstd, layout, output_mask), group_norm)          \
  /* dropout, 0 < p < 1; `state` is the generator reservation, so every device draws one mask */  \
  X(DropoutResult, dropout_with_mask, (const Tensor& input, double p, GeneratorState state),      \
    (input, p, state), dropout)                                                                   \
  X(Tensor, dropout_backward, (const Tensor& grad_output, const Tensor& mask, double p),          \
    (grad_output, mask, p), dropout)                                                              \
  /* indexing. check_index_range: every value of `index` (contiguous i64) is in [0, bound), else */ \
  /* stoke::Error("stoke::<op>: " + describe(first bad position)); a device may raise it at the  */ \
  /* calling thread's next synchronization instead (CUDA: no read-back per call), its kernels   */ \
  /* skipping the bad values meanwhile */                                                         \
  X(void, check_index_range,                                                                      \
    (const char* op, const Tensor& index, int64_t bound,                                          \
     std::function<std::string(int64_t)> describe),                                              \
    (op, index, bound, describe), index)                                                          \
  X(Tensor, index_select,                                                                         \
    (const Tensor& x, int64_t dim, const Tensor& index, const Shape& out_shape),                  \
    (x, dim, index, out_shape), index)                                                            \
  X(Tensor, index_select_backward,                                                                \
    (const Tensor& grad, int64_t dim, const Tensor& index, const Shape& input_shape),             \
    (grad, dim, index, input_shape), index)                                                       \
  X(Tensor, gather, (const Tensor& x, int64_t dim, const Tensor& index), (x, dim, index), index)  \
  X(Tensor, gather_backward,                                                                      \
    (const Tensor& grad, int64_t dim, const Tensor& index, const Shape& input_shape),             \
    (grad, dim, index, input_shape), index)                                                       \
  /* ops whose CPU kernel is fused or specialized (one pass, no temporary), which the CUDA */     \
  /* backend composes from its other methods and ops:: calls */                                   \
  /* in place, after the in-place checks: t += value * a * b, t += value * a / b, t = 0 */        \
  X(void, addcmul_, (const Tensor& t, const Tensor& a, const Tensor& b, double value),            \
    (t, a, b, value), elementwise)                                                                \
  X(void, addcdiv_, (const Tensor& t, const Tensor& a, const Tensor& b, double value),            \
    (t, a, b, value), elementwise)                                                                \
  X(void, zero_, (const Tensor& t), (t), elementwise)                                             \
  /* grad summed to `shape`, which broadcasts to grad's shape and is not that shape */            \
  X(Tensor, sum_to, (const Tensor& grad, const Shape& shape), (grad, shape), elementwise)         \
  /* var of detached x over dims (checked), correction >= 0; var's backward takes grad with */    \
  /* the reduced dims kept and scale = 2 / (count - correction); mean's, count per output */      \
  X(Tensor, var,                                                                                  \
    (const Tensor& x, const std::vector<int64_t>& dims, int64_t correction, bool keepdim),        \
    (x, dims, correction, keepdim), reduce)                                                       \
  X(Tensor, var_backward,                                                                         \
    (const Tensor& grad, const Tensor& x, const std::vector<int64_t>& dims, double scale),        \
    (grad, x, dims, scale), reduce)                                                               \
  X(Tensor, mean_backward,                                                                        \
    (const Tensor& grad, const Shape& input_shape, const std::vector<int64_t>& dims,              \
     bool keepdim, int64_t count),                                                                \
    (grad, input_shape, dims, keepdim, count), reduce)                                            \
  /* zeros of input_shape with grad written at `indices` (i64) along dim */                       \
  X(Tensor, index_reduce_backward,                                                                \
    (const Tensor& grad, const Tensor& indices, const Shape& input_shape, int64_t dim,            \
     bool keepdim),                                                                               \
    (grad, indices, input_shape, dim, keepdim), reduce)                                           \
  /* idx: contiguous i64, every value checked to lie in [0, num_classes) */                       \
  X(Tensor, one_hot, (const Tensor& idx, int64_t num_classes), (idx, num_classes), index)         \
  /* losses on (N, C) rows; each backend checks the dtypes, shapes and target values */           \
  X(Tensor, class_targets,                                                                        \
    (const char* op, const Tensor& target, int64_t classes, int64_t ignore_index),                \
    (op, target, classes, ignore_index), loss)                                                    \
  X(Tensor, nll_loss,                                                                             \
    (const Tensor& log_probs, const Tensor& target, const NllLossOptions& options),               \
    (log_probs, target, options), loss)                                                           \
  X(Tensor, nll_loss_backward,                                                                    \
    (const Tensor& grad, const Shape& input_shape, const Tensor& target,                          \
     const NllLossOptions& options),                                                              \
    (grad, input_shape, target, options), loss)                                                   \
  /* after the entry point's checks (one dtype, one shape, grad's shape per the reduction) */     \
  X(Tensor, mse_loss, (const Tensor& input, const Tensor& target, Reduction reduction),           \
    (input, target, reduction), loss)                                                             \
  X(Tensor, mse_loss_backward,                                                                    \
    (const Tensor& grad, const Tensor& input, const Tensor& target, Reduction reduction),         \
    (grad, input, target, reduction), loss)                                                       \
  /* each backend checks the dtypes, then the shapes (ops/linalg_detail.h) */                     \
  X(MatmulGrads, matmul_backward,                                                                 \
    (const Tensor& grad_out, const Tensor& a, const Tensor& b, bool need_a, bool need_b),         \
    (grad_out, a, b, need_a, need_b), linalg)                                                     \
  X(Tensor, sum_leading_dims, (const Tensor& g), (g), linalg)                                     \
  /* conv2d's bias gradient: grad_out (N, K, OH, OW) summed over N, OH and OW */                  \
  X(Tensor, conv2d_backward_bias, (const Tensor& grad_out), (grad_out), conv2d)                   \
  /* max_pool2d's output without its indices, after the entry point's checks */                   \
  X(Tensor, max_pool2d, (const Tensor& input, const Pool2dOptions& options), (input, options),    \
    pool)                                                                                         \
  /* out (N, C, H, W) = (images (N, H, W, C) u8 / 255 - mean[c]) / std[c], both contiguous */     \
  X(void, normalize_u8_nhwc,                                                                      \
    (const Tensor& images, const Tensor& out, const std::vector<float>& mean,                     \
     const std::vector<float>& std),                                                              \
    (images, out, mean, std), normalize)                                                         \
  /* the same with a crop (zero padding) and flip per image: crops i32 (N, 3) (top, left, flip), */ \
  /* out (N, C, OH, OW) f32/f16/bf16 */                                                          \
  X(void, crop_flip_normalize_u8_nhwc,                                                            \
    (const Tensor& images, const Tensor& out, const Tensor& crops, const std::vector<float>& mean, \
     const std::vector<float>& std),                                                              \
    (images, out, crops, mean, std), normalize)                                                  \
  /* optimizer updates over lists, in place, after the entry point's checks: every param, its   */ \
  /* state and grad of one dtype and device, each grad and state of its param's shape, all      */ \
  /* contiguous; momentum_buffers empty when momentum == 0, max_exp_avg_sqs without amsgrad */  \
  X(void, fused_sgd_,                                                                             \
    (const std::vector<Tensor>& params, const std::vector<Tensor>& grads,                         \
     const std::vector<Tensor>& momentum_buffers, const SgdStepOptions& options),                 \
    (params, grads, momentum_buffers, options), optimizer)                                        \
  X(void, fused_adam_,                                                                            \
    (const std::vector<Tensor>& params, const std::vector<Tensor>& grads,                         \
     const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,                 \
     const std::vector<Tensor>& max_exp_avg_sqs, const AdamStepOptions& options),                 \
    (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, options), optimizer)                  \
  /* contiguous floating grads on one device, f32 one-element found_inf and inv_scale there */   \
  X(void, non_finite_check_and_unscale_,                                                          \
    (const std::vector<Tensor>& grads, const Tensor& found_inf, const Tensor& inv_scale),         \
    (grads, found_inf, inv_scale), optimizer)                                                     \
  X(Tensor, sum_of_squares, (const std::vector<Tensor>& tensors), (tensors), optimizer)          \
  /* one-element f32 tensors on one device (ops::amp_update_scale_) */                           \
  X(void, amp_update_scale_,                                                                      \
    (const Tensor& scale, const Tensor& growth_tracker, const Tensor& skipped,                    \
     const Tensor& collapsed, const Tensor& found_inf, const AmpUpdateScaleOptions& options),     \
    (scale, growth_tracker, skipped, collapsed, found_inf, options), optimizer)
// clang-format on
