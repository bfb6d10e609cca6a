// The umbrella header: everything a user of stoke needs.
#pragma once

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/gradcheck.h"
#include "core/allocator.h"
#include "core/grad_mode.h"
#include "core/parallel.h"
#include "core/random.h"
#include "core/tensor.h"
#include "ops/creation.h"

namespace stoke::autograd {
// Pulls autograd's registration with core into every program that includes this header.
[[gnu::used]] static const bool* const autograd_link_anchor = &autograd_hooks_registered;
}  // namespace stoke::autograd
