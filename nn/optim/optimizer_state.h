// The optimizers' shared bookkeeping (nn/optim/optimizer.cpp): gradients as the update kernels
// take them, zero state, and the checks of load_state_dict. Internal to nn/optim.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/named_tensors.h"

namespace stoke::nn::optim::detail {

// p's gradient, contiguous, checked to match p's dtype and device.
Tensor contiguous_grad(const Tensor& p);
// The defined gradients of `params`, each made contiguous and set back as the parameter's .grad,
// so that scaling them in place scales what step() reads (unscaling, clipping).
std::vector<Tensor> contiguous_grads_in_place(const std::vector<Tensor>& params);
// Zero state shaped, typed and placed like p.
Tensor zeros_like_param(const Tensor& p);
std::map<std::string, Tensor> by_name(const NamedTensors& state);
// Removes `key` from m and returns a copy on like's device, checked to match like's shape and
// dtype; a missing key or a mismatch is an error naming it.
Tensor take(std::map<std::string, Tensor>& m, const std::string& key, const Tensor& like,
            const char* op);
// An error listing the keys left in m (state for parameters the optimizer does not have).
void check_no_leftovers(const std::map<std::string, Tensor>& m, const char* op);

}  // namespace stoke::nn::optim::detail
