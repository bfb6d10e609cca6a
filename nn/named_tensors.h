// Ordered (name, tensor) pairs: state dicts of modules and optimizers, and checkpoint contents.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace stoke::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

}  // namespace stoke::nn
