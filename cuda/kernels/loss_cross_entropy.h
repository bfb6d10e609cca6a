// CUDA fused cross-entropy: log-softmax + NLL with label smoothing and ignore_index, forward and
// backward in one pass over the logits (like llm.c's fused classifier): each row's max and
// log-sum-exp are computed once and used both for its loss and for its dlogits.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "cuda/compat.h"

namespace stoke::cuda {

// How row losses are combined (ops::Reduction; cuda/ does not include ops/).
enum class CrossEntropyReduction : uint8_t { none, mean, sum };

// The options of ops::cross_entropy.
struct CrossEntropyParams {
  CrossEntropyReduction reduction = CrossEntropyReduction::mean;
  float label_smoothing = 0.f;  // eps: target distribution (1 - eps) one_hot + eps / C
  int64_t ignore_index = -100;  // rows with this target give no loss, no gradient, no count
};

// Device buffers of one call. row_loss and scratch are required; the others are optional.
struct CrossEntropyBuffers {
  float* row_loss = nullptr;  // (N) per-row losses, f32 (the result for reduction none)
  float* loss = nullptr;      // one f32: the mean or sum of the row losses (ignored for none)
  void* dlogits = nullptr;    // (N, C) in the logits' dtype: written in the same pass when set
  // dloss: one value for mean/sum, (N) for none; null means 1 (training with the loss as is).
  const float* grad = nullptr;
  // Two i64 written by the call: [0] the number of non-ignored rows, [1] the first row whose
  // target is neither ignore_index nor in [0, C), or -1. Such a row's loss is NaN and its
  // dlogits 0; the caller reports it as ops::cross_entropy does ("target T out of range").
  int64_t* scratch = nullptr;
};

// Cross entropy of logits (N, C) (f32, f16, bf16; contiguous) against i64 targets (N): per row
// (1 - eps) (lse - x[t]) + eps (lse - mean_c x[c]), 0 on ignored rows; mean divides by the
// non-ignored count. With dlogits: (softmax - (1 - eps) one_hot - eps / C) * scale, scale being
// grad (sum), grad / count (mean) or grad[i] (none), 0 on ignored rows. Three launches: count
// and check targets, the fused row kernel, and a fixed-order (deterministic) loss reduction.
void cross_entropy(DType dtype, const void* logits, const int64_t* target, int64_t n, int64_t c,
                   const CrossEntropyParams& params, const CrossEntropyBuffers& buffers,
                   cudaStream_t stream);

}  // namespace stoke::cuda
