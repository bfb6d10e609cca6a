// ZeroOptimizer's master weights: f16/bf16 parameters stepped through f32 copies of this rank's
// shards (dist/zero.h, ZeroOptions::master_weights; docs/design.md, "Mixed-precision ZeRO").
#include <vector>

#include "core/grad_mode.h"
#include "dist/zero_state.h"
#include "ops/creation.h"

namespace stoke::dist {

namespace {

bool is_half(DType d) {
  return d == DType::f16 || d == DType::bf16;
}

}  // namespace

void ZeroOptimizer::State::make_masters() {
  if (!options.master_weights) return;
  for (Flat& flat : flats) {
    if (!is_half(flat.dtype)) continue;
    const TensorOptions to{.dtype = DType::f32, .device = flat.device};
    flat.master = zeros({flat.shard}, to);  // the padding stays zero
    flat.master_grads = zeros({flat.shard}, to);
  }
  refresh_masters();
}

void ZeroOptimizer::State::refresh_masters() {
  NoGradGuard no_grad;
  for (const Bucket& b : buckets) {
    const Flat& flat = flats[b.flat];
    if (flat.master.defined() && b.chunk > 0)
      flat.master.narrow(0, b.shard_begin, b.chunk).copy_(shard_params(b));  // exact: widening
  }
}

void ZeroOptimizer::State::round_masters_into_parameters() {
  NoGradGuard no_grad;
  for (const Bucket& b : buckets) {
    const Flat& flat = flats[b.flat];
    if (flat.master.defined() && b.chunk > 0)
      shard_params(b).copy_(flat.master.narrow(0, b.shard_begin, b.chunk));  // rounds to nearest
  }
}

Tensor ZeroOptimizer::State::step_grad(const Bucket& b) const {
  const Flat& flat = flats[b.flat];
  return flat.master.defined() ? flat.master_grads.narrow(0, b.shard_begin, b.chunk)
                               : shard_grad(b);
}

std::vector<Tensor> ZeroOptimizer::State::step_gradients() {
  NoGradGuard no_grad;
  sync_gradients();
  if (!masters_filled) {
    for (const Bucket& b : buckets)
      if (flats[b.flat].master.defined() && b.chunk > 0) step_grad(b).copy_(shard_grad(b));
    masters_filled = true;
  }
  std::vector<Tensor> out;
  for (const Bucket& b : buckets)
    if (b.chunk > 0) out.push_back(step_grad(b));
  return out;
}

}  // namespace stoke::dist
