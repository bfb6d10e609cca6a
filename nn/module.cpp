#include "nn/module.h"

#include <map>
#include <set>
#include <sstream>

#include "core/grad_mode.h"

namespace stoke::nn {

Tensor Module::operator()(const Tensor& input) {
  if (pre_hooks_.empty() && post_hooks_.empty()) return forward(input);
  Tensor x = input;
  // Copies: a hook may register or remove hooks.
  const auto pre = pre_hooks_;
  for (const auto& [id, hook] : pre)
    if (Tensor r = hook(*this, x); r.defined()) x = r;
  Tensor out = forward(x);
  const auto post = post_hooks_;
  for (const auto& [id, hook] : post)
    if (Tensor r = hook(*this, x, out); r.defined()) out = r;
  return out;
}

int64_t Module::register_forward_pre_hook(ForwardPreHook hook) {
  STOKE_CHECK(hook != nullptr, "Module::register_forward_pre_hook", "an empty hook");
  pre_hooks_.emplace_back(next_hook_id_, std::move(hook));
  return next_hook_id_++;
}

int64_t Module::register_forward_hook(ForwardHook hook) {
  STOKE_CHECK(hook != nullptr, "Module::register_forward_hook", "an empty hook");
  post_hooks_.emplace_back(next_hook_id_, std::move(hook));
  return next_hook_id_++;
}

void Module::remove_forward_hook(int64_t id) {
  auto match = [id](const auto& h) { return h.first == id; };
  const size_t before = pre_hooks_.size() + post_hooks_.size();
  std::erase_if(pre_hooks_, match);
  std::erase_if(post_hooks_, match);
  STOKE_CHECK(pre_hooks_.size() + post_hooks_.size() < before, "Module::remove_forward_hook",
              "no forward hook with id ", id, " on this ", name());
}

Tensor Module::forward(const Tensor&) {
  STOKE_FAIL("Module::forward", name(), " has no single-input forward");
}

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  STOKE_CHECK(name.find('.') == std::string::npos && !name.empty(), "register_parameter",
              "invalid parameter name '", name, "'");
  if (t.defined() && !t.requires_grad()) t.set_requires_grad(true);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  STOKE_CHECK(name.find('.') == std::string::npos && !name.empty(), "register_buffer",
              "invalid buffer name '", name, "'");
  buffers_.emplace_back(name, t);
  return t;
}

void Module::collect(const std::string& prefix, bool params, bool buffers, bool recurse,
                     NamedTensors& out) const {
  if (params)
    for (const auto& [n, t] : params_)
      if (t.defined()) out.emplace_back(prefix + n, t);
  if (buffers)
    for (const auto& [n, t] : buffers_)
      if (t.defined()) out.emplace_back(prefix + n, t);
  if (recurse)
    for (const auto& [n, m] : children_) m->collect(prefix + n + ".", params, buffers, true, out);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  collect("", true, false, recurse, out);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  collect("", false, true, recurse, out);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  // PyTorch orders a module's own parameters, then its buffers, then each child's.
  collect("", true, true, true, out);
  return out;
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  std::map<std::string, const Tensor*> given;
  for (const auto& [n, t] : state) given[n] = &t;
  std::vector<std::string> problems;
  std::set<std::string> used;
  const NamedTensors mine = state_dict();
  for (const auto& [n, t] : mine) {
    auto it = given.find(n);
    if (it == given.end()) {
      if (strict) problems.push_back("missing key '" + n + "'");
      continue;
    }
    used.insert(n);
    const Tensor& src = *it->second;
    if (src.shape() != t.shape())
      problems.push_back("'" + n + "': expected shape " + t.shape().str() + ", got " +
                         src.shape().str());
    else if (src.dtype() != t.dtype())
      problems.push_back("'" + n + "': expected dtype " + dtype_name(t.dtype()) + ", got " +
                         dtype_name(src.dtype()));
  }
  if (strict)
    for (const auto& [n, t] : state)
      if (!used.count(n)) problems.push_back("unexpected key '" + n + "'");
  if (!problems.empty()) {
    std::ostringstream os;
    os << problems.size() << " problem(s) loading the state dict:";
    for (const auto& p : problems) os << "\n  " << p;
    STOKE_FAIL("load_state_dict", os.str());
  }
  NoGradGuard no_grad;
  for (const auto& [n, t] : mine)
    if (auto it = given.find(n); it != given.end()) Tensor(t).copy_(*it->second);  // any devices
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, m] : children_) m->train(on);
}

void set_data(const Tensor& t, const Tensor& src) {
  TensorImpl* impl = t.impl();
  impl->storage = src.storage();
  impl->shape = src.shape();
  impl->strides = src.strides();
  impl->offset = src.offset();
  impl->dtype = src.dtype();
}

void Module::to(DType dtype) {
  NoGradGuard no_grad;
  for (auto& [n, t] : state_dict())
    if (is_floating(t.dtype()) && t.dtype() != dtype) {
      set_data(t, t.to(dtype));
      if (t.grad().defined()) t.set_grad(t.grad().to(dtype));
    }
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  for (auto& [n, t] : state_dict())
    if (t.device() != device) set_data(t, t.to(device));
}

void Module::zero_grad() {
  for (auto& t : parameters()) t.set_grad(Tensor());
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& t : parameters()) n += t.numel();
  return n;
}

void Module::print(std::ostream& os, int indent) const {
  os << name();
  if (children_.empty()) {
    os << '(';
    bool first = true;
    for (const auto& [n, t] : params_) {
      os << (first ? "" : ", ") << n << '=' << t.shape();
      first = false;
    }
    os << ')';
    return;
  }
  os << "(\n";
  for (const auto& [n, m] : children_) {
    os << std::string(indent + 2, ' ') << '(' << n << "): ";
    m->print(os, indent + 2);
    os << '\n';
  }
  os << std::string(indent, ' ') << ')';
}

std::string Module::str() const {
  std::ostringstream os;
  print(os, 0);
  return os.str();
}

void for_each_module(Module& root, const std::function<void(Module&)>& f) {
  f(root);
  for (const auto& [name, child] : root.named_children())
    if (child) for_each_module(*child, f);
}

}  // namespace stoke::nn
