// The umbrella header: everything a user of stoke needs.
#pragma once

#include "autograd/autocast.h"
#include "autograd/batch_norm.h"
#include "autograd/conv2d.h"
#include "autograd/dropout.h"
#include "autograd/elementwise.h"
#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/gradcheck.h"
#include "autograd/group_norm.h"
#include "autograd/index.h"
#include "autograd/index_resize.h"
#include "autograd/linalg.h"
#include "autograd/loss.h"
#include "autograd/pool.h"
#include "autograd/reduce.h"
#include "autograd/softmax.h"
#include "core/allocator.h"
#include "core/grad_mode.h"
#include "core/parallel.h"
#include "core/random.h"
#include "core/sync_debug.h"
#include "core/tensor.h"
#include "data/batcher.h"
#include "data/cifar.h"
#include "data/idx.h"
#include "data/idx_dataset.h"
#include "data/image_folder.h"
#include "data/loader.h"
#include "data/normalize.h"
#include "data/packed.h"
#include "dist/communicator.h"
#include "dist/ddp.h"
#include "dist/in_process.h"
#include "dist/rhd.h"
#include "dist/ring.h"
#include "dist/tree.h"
#include "dist/tuner.h"
#include "dist/zero.h"
#if defined(STOKE_HAS_MPI)
#include "dist/mpi.h"  // in builds with MPI (CMake's STOKE_MPI)
#endif
#if defined(STOKE_HAS_NCCL)
#include "dist/cuda/nccl.h"  // in builds with CUDA and NCCL
#endif
#include "nn/amp/grad_scaler.h"
#include "nn/amp/half_parameters.h"
#include "nn/checkpoint/safetensors.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/models/models.h"
#include "nn/module.h"
#include "nn/optim/optimizer.h"
#include "nn/optim/scheduler.h"
#include "nn/throughput.h"
#include "ops/creation.h"
#include "ops/math_mode.h"

namespace stoke::autograd {
// Pulls autograd's registration with core into every program that includes this header.
[[gnu::used]] static const bool* const autograd_link_anchor = &autograd_hooks_registered;
}  // namespace stoke::autograd

#if defined(STOKE_HAS_CUDA_OPS)
namespace stoke::ops {
// Pulls the CUDA backend's registration (allocator, copies, kernels) into every program that
// includes this header, in builds that have it.
extern const bool cuda_backend_registered;
[[gnu::used]] static const bool* const cuda_link_anchor = &cuda_backend_registered;
}  // namespace stoke::ops
#endif
