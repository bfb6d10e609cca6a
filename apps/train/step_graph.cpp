#include "step_graph.h"

#include "core/error.h"
#include "stoke/stoke.h"

#if STOKE_HAS_CUDA || STOKE_CUDA_EMU
#include "cuda/runtime/graph.h"
#endif

namespace stoke::train {

#if STOKE_HAS_CUDA || STOKE_CUDA_EMU

struct StepGraph::Impl {
  cuda::Graph graph;
  DeviceBatch inputs;  // the static batch the graph reads
};

StepGraph::StepGraph(Device device) : impl_(std::make_unique<Impl>()) {
  STOKE_CHECK(device.is_cuda(), "stoke-train", "--cuda-graph needs --device cuda, got ", device);
}

#else

struct StepGraph::Impl {};

StepGraph::StepGraph(Device) {
  STOKE_FAIL("stoke-train", "--cuda-graph: this stoke-train was built without CUDA");
}

#endif

StepGraph::~StepGraph() = default;

void StepGraph::note_eager_step(bool vets_checkpoint) {
  if (warmup_steps_ < kWarmupSteps)
    ++warmup_steps_;
  else if (vets_checkpoint)
    ++checkpoint_steps_;
  else
    ++other_shape_steps_;
}

std::string StepGraph::summary() const {
  return ::stoke::detail::str_cat(replays_, " steps replayed, ", captures_, " captures, ",
                                  warmup_steps_ + other_shape_steps_ + checkpoint_steps_,
                                  " eager (", warmup_steps_, " warm-up, ", other_shape_steps_,
                                  " of another shape, ", checkpoint_steps_,
                                  " vetting a checkpoint)");
}

bool StepGraph::accepts(const DeviceBatch& b) const {
#if STOKE_HAS_CUDA || STOKE_CUDA_EMU
  if (warmup_steps_ < kWarmupSteps) return false;
  const DeviceBatch& s = impl_->inputs;
  return !s.images.defined() ||
         (s.images.shape() == b.images.shape() && s.images.dtype() == b.images.dtype() &&
          s.labels.shape() == b.labels.shape() && s.labels.dtype() == b.labels.dtype());
#else
  (void)b;
  return false;
#endif
}

void StepGraph::run(const DeviceBatch& b, const std::function<void(const DeviceBatch&)>& step) {
#if STOKE_HAS_CUDA || STOKE_CUDA_EMU
  Impl& g = *impl_;
  if (!g.inputs.images.defined()) g.inputs = {empty_like(b.images), empty_like(b.labels)};
  {
    NoGradGuard no_grad;
    g.inputs.images.copy_(b.images);
    g.inputs.labels.copy_(b.labels);
  }
  if (!g.graph.captured()) {
    try {
      g.graph.capture([&] { step(g.inputs); });
    } catch (const Error& e) {
      STOKE_FAIL("stoke-train",
                 "--cuda-graph: the training step cannot be captured (train "
                 "this model without --cuda-graph): ",
                 e.what());
    }
    ++captures_;
  }
  g.graph.replay();
  ++replays_;
#else
  (void)b;
  (void)step;
#endif
}

}  // namespace stoke::train
