// A hook on the model's decisions at ReLU's kink: every ReLU output (stoke::relu and batch norm's
// fused ReLU, stoke::batch_norm with options.relu) in call order. tests/nn/train_vs_torch.py
// replays PyTorch's float64 step with the decisions stoke's float32 took for inputs within rounding
// of zero, instead of searching for them (stoke-test-train-steps --decisions). Off by default: one
// atomic load per ReLU call, none per element.
#pragma once

#include <functional>

#include "core/tensor.h"

namespace stoke {

// Installs `observer` (an empty one removes it). Set it before the model runs, not while another
// thread runs one: the observer itself is not synchronized.
void set_relu_observer(std::function<void(const Tensor& output)> observer);

// Hands a ReLU's output to the installed observer, if any.
void observe_relu(const Tensor& output);

}  // namespace stoke
