// Modules: parameters, buffers and children with PyTorch's names, so that state_dict() keys are
// those of the equivalent torch.nn model ("layer1.0.conv1.weight", "bn1.running_mean").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/named_tensors.h"

namespace stoke::nn {

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The computation; modules that are containers of others may leave it unimplemented.
  virtual Tensor forward(const Tensor& input);
  // forward() with the forward hooks around it, as torch's Module.__call__: a direct forward()
  // call runs none (the model zoo calls its children through operator(), so hooks on any of them
  // fire).
  Tensor operator()(const Tensor& input);

  // torch's register_forward_pre_hook / register_forward_hook: a pre-hook sees the input before
  // forward() and may return a replacement (an undefined tensor keeps it); a hook sees the input
  // and the output after it and may return a replacement output. They run in registration order.
  // Returns an id for remove_forward_hook.
  using ForwardPreHook = std::function<Tensor(Module&, const Tensor& input)>;
  using ForwardHook = std::function<Tensor(Module&, const Tensor& input, const Tensor& output)>;
  int64_t register_forward_pre_hook(ForwardPreHook hook);
  int64_t register_forward_hook(ForwardHook hook);
  // Removes the hook with that id (either kind); an error for an id this module does not have.
  void remove_forward_hook(int64_t id);
  bool has_forward_hooks() const { return !pre_hooks_.empty() || !post_hooks_.empty(); }
  // Short type name for printing ("Conv2d").
  virtual std::string name() const { return "Module"; }

  NamedTensors named_parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const {
    return children_;
  }
  // Parameters then buffers of every module, depth first, with dotted names.
  NamedTensors state_dict() const;
  // Copies values from `state` into the parameters and buffers (no autograd). Checks every name,
  // shape and dtype and reports all mismatches in one error; with strict=false missing and
  // unexpected keys are allowed but shape/dtype mismatches still fail.
  void load_state_dict(const NamedTensors& state, bool strict = true);

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves/casts every floating parameter and floating buffer in place (handles stay valid).
  void to(DType dtype);
  void to(Device device);
  void zero_grad();  // drops the gradients (set to none, like PyTorch's default)
  int64_t num_parameters() const;
  std::string str() const;  // the module tree with parameter shapes

 protected:
  // Registers a parameter (requires grad) under `name`; returns the handle to keep as a member.
  Tensor register_parameter(const std::string& name, Tensor t);
  Tensor register_buffer(const std::string& name, Tensor t);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }

 private:
  void collect(const std::string& prefix, bool params, bool buffers, bool recurse,
               NamedTensors& out) const;
  void print(std::ostream& os, int indent) const;

  std::vector<std::pair<int64_t, ForwardPreHook>> pre_hooks_;
  std::vector<std::pair<int64_t, ForwardHook>> post_hooks_;
  int64_t next_hook_id_ = 0;
  NamedTensors params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

using ModulePtr = std::shared_ptr<Module>;

// Calls f on `root` and then on every module below it, depth first in registration order (as
// torch's Module.modules()), e.g. to initialize every Conv2d of a model.
void for_each_module(Module& root, const std::function<void(Module&)>& f);

// Replaces the data of `t` in place (storage, shape, strides, dtype) with that of `src`, keeping
// its autograd identity, so every handle to `t` sees the new data (PyTorch's `t.data = src`).
void set_data(const Tensor& t, const Tensor& src);

}  // namespace stoke::nn
