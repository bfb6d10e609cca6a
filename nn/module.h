// Modules: parameters, buffers and children with PyTorch's names, so that state_dict() keys are
// those of the equivalent torch.nn model ("layer1.0.conv1.weight", "bn1.running_mean").
#pragma once

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
  Tensor operator()(const Tensor& input) { return forward(input); }
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
