#include "autograd/node.h"

#include "autograd/function.h"
#include "core/grad_mode.h"
#include "ops/elementwise.h"

namespace stoke::autograd {

Tensor add_gradients(const Tensor& a, const Tensor& b) {
  STOKE_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype(), "backward",
              "cannot accumulate gradients of different shapes or dtypes: ", a.dtype(), " ",
              a.shape(), " and ", b.dtype(), " ", b.shape());
  STOKE_CHECK(a.dtype() != DType::boolean, "backward", "gradients cannot be bool");
  // A new tensor, never a or b written in place: either may be held elsewhere (a leaf's .grad the
  // user kept, a gradient an op's backward passed through unchanged).
  const bool cpu = a.device().is_cpu() && b.device().is_cpu();
  if (cpu && (a.dtype() == DType::f16 || a.dtype() == DType::bf16)) {
    // f16/bf16 are storage types on the CPU: the sum in f32, rounded once to the dtype.
    return ops::add(a.to(DType::f32), b.to(DType::f32)).to(a.dtype());
  }
  return ops::add(a, b);
}

AccumulateGrad::AccumulateGrad(Tensor leaf) : leaf_(std::move(leaf)) {
  outputs.push_back({leaf_.shape(), leaf_.dtype(), leaf_.device()});
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grads) {
  Tensor g = std::move(grads[0]);
  AutogradMeta& meta = leaf_.autograd_meta();
  for (const auto& hook : meta.hooks) {
    Tensor replaced = hook(g);
    if (replaced.defined()) g = replaced;
  }
  STOKE_CHECK(g.shape() == leaf_.shape() && g.dtype() == leaf_.dtype(), "backward",
              "gradient for a leaf of ", leaf_.dtype(), " ", leaf_.shape(), " has ", g.dtype(), " ",
              g.shape());
  if (meta.grad) {
    *meta.grad = add_gradients(*meta.grad, g);
  } else {
    // Own the gradient: the incoming tensor may alias another tensor's memory. It takes the
    // leaf's layout, as torch's AccumulateGrad does (a channels_last input's .grad is
    // channels_last).
    const bool nhwc = leaf_.suggest_memory_format() == MemoryFormat::channels_last;
    const bool in_layout = nhwc ? g.suggest_memory_format() == MemoryFormat::channels_last &&
                                      g.is_contiguous(MemoryFormat::channels_last)
                                : g.is_contiguous();
    const bool owned = in_layout && g.storage().use_count() == 1;
    const Tensor d = g.detach();
    meta.grad =
        std::make_shared<Tensor>(owned  ? d
                                 : nhwc ? d.permute({0, 2, 3, 1}).clone().permute({0, 3, 1, 2})
                                        : d.clone());
  }
  for (const auto& hook : meta.post_accumulate_hooks) hook(leaf_);
  return {};
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  AutogradMeta* meta = t.autograd_meta_if_exists();
  if (!meta) return {};
  if (meta->grad_fn) return {meta->grad_fn, meta->output_nr};
  if (!meta->requires_grad) return {};
  auto acc = meta->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t);
    meta->grad_accumulator = acc;
  }
  return {acc, 0};
}

namespace {

class LambdaNode final : public Node {
 public:
  LambdaNode(std::string name, BackwardFn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    STOKE_CHECK(fn_ != nullptr, "backward", "trying to run backward through ", name_,
                " a second time: its saved tensors were freed; pass retain_graph=true to the first "
                "backward");
    NeedList needs(next_edges.size());
    for (size_t i = 0; i < needs.size(); ++i) needs[i] = next_edges[i].node != nullptr;
    return fn_(grads, needs);
  }

  void release_saved() override { fn_ = nullptr; }

 private:
  std::string name_;
  BackwardFn fn_;
};

}  // namespace

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const auto& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void record(const std::string& name, const std::vector<Tensor>& inputs,
            const std::vector<Tensor>& outputs, BackwardFn backward) {
  if (!any_requires_grad(inputs)) return;
  (void)autograd_hooks_registered;
  auto node = std::make_shared<LambdaNode>(name, std::move(backward));
  node->next_edges.reserve(inputs.size());
  for (const auto& t : inputs) node->next_edges.push_back(gradient_edge(t));
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    node->outputs.push_back({out.shape(), out.dtype(), out.device()});
    AutogradMeta& meta = out.autograd_meta();
    STOKE_CHECK(!meta.grad_fn, "record", name, ": output ", i, " already has a grad_fn");
    meta.grad_fn = node;
    meta.output_nr = static_cast<uint32_t>(i);
  }
}

}  // namespace stoke::autograd
