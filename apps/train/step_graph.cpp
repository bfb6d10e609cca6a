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
  std::vector<DeviceBatch> inputs;  // the static batches the graph reads, one per micro-batch
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

bool same_batch_shapes(const DeviceBatch& a, const DeviceBatch& b) {
  return a.images.shape() == b.images.shape() && a.images.dtype() == b.images.dtype() &&
         a.labels.shape() == b.labels.shape() && a.labels.dtype() == b.labels.dtype();
}

void StepGraph::note_eager_step(Eager why) {
  switch (why) {
    case Eager::warmup:
      ++warmup_steps_;
      break;
    case Eager::vetting:
      ++checkpoint_steps_;
      break;
    case Eager::other_shape:
      ++other_shape_steps_;
      break;
  }
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
  if (!warmed_up()) return false;
  return impl_->inputs.empty() || same_batch_shapes(impl_->inputs.front(), b);
#else
  (void)b;
  return false;
#endif
}

void StepGraph::run(const std::vector<DeviceBatch>& group,
                    const std::function<void(const std::vector<DeviceBatch>&)>& step) {
#if STOKE_HAS_CUDA || STOKE_CUDA_EMU
  Impl& g = *impl_;
  if (g.inputs.empty())
    for (const DeviceBatch& b : group)
      // In the batches' own layout (--channels-last), which the captured step then keeps.
      g.inputs.push_back(
          {b.images.clone().contiguous(b.images.suggest_memory_format()), empty_like(b.labels)});
  STOKE_CHECK(group.size() == g.inputs.size(), "stoke-train", "--cuda-graph: a group of ",
              group.size(), " batches for a graph captured with ", g.inputs.size());
  {
    NoGradGuard no_grad;
    for (size_t i = 0; i < group.size(); ++i) {
      g.inputs[i].images.copy_(group[i].images);
      g.inputs[i].labels.copy_(group[i].labels);
    }
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
  replays_ += static_cast<int64_t>(group.size());
#else
  (void)group;
  (void)step;
#endif
}

}  // namespace stoke::train
