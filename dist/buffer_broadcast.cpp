#include "dist/buffer_broadcast.h"

#include <algorithm>

#include "core/grad_mode.h"
#include "ops/creation.h"

namespace stoke::dist {

BufferBroadcast::BufferBroadcast(const nn::Module& m) {
  for (const auto& named : m.named_buffers()) {
    const Tensor& b = named.second;  // not a structured binding: clang 14 cannot capture one
    auto it = std::find_if(groups_.begin(), groups_.end(), [&](const Group& g) {
      return g.buffers.front().dtype() == b.dtype() && g.buffers.front().device() == b.device();
    });
    if (it == groups_.end()) it = groups_.insert(groups_.end(), Group{});
    it->offsets.push_back(it->buffers.empty() ? 0
                                              : it->offsets.back() + it->buffers.back().numel());
    it->buffers.push_back(b.detach());
  }
  for (Group& g : groups_)
    g.flat = empty({g.offsets.back() + g.buffers.back().numel()},
                   {.dtype = g.buffers.front().dtype(), .device = g.buffers.front().device()});
}

void BufferBroadcast::operator()(Communicator& comm) {
  NoGradGuard no_grad;
  const bool root = comm.rank() == 0;
  for (Group& g : groups_) {
    if (root)
      for (size_t k = 0; k < g.buffers.size(); ++k)
        g.flat.narrow(0, g.offsets[k], g.buffers[k].numel()).copy_(g.buffers[k].reshape({-1}));
    comm.broadcast(g.flat, 0);
    if (!root)
      for (size_t k = 0; k < g.buffers.size(); ++k)
        g.buffers[k].copy_(
            g.flat.narrow(0, g.offsets[k], g.buffers[k].numel()).reshape(g.buffers[k].shape()));
  }
}

}  // namespace stoke::dist
