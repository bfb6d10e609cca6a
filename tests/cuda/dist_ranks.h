// Ranks as threads on the emulator's two devices, for the dist/ tests on cuda tensors: rank r
// runs on cuda:(r % 2) with a communicator of the engine the runner names.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "cuda/runtime/device.h"
#include "dist/cuda/nccl.h"
#include "dist/host_staged.h"
#include "dist/in_process.h"
#include "nn/models/models.h"

namespace stoke::test {

// Runs fn(r) for r = 0 .. n-1 on n threads with cuda:(r % 2) current and rethrows the first
// rank's failure after all have ended; on_failure(r) runs on the failing rank's thread (to abort a
// group, so that the others throw instead of waiting for it).
inline void run_rank_threads(int n, const std::function<void(int)>& fn,
                             const std::function<void(int)>& on_failure = {}) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        cuda::set_device(r % 2);
        fn(r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
        if (on_failure) on_failure(r);
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// n ranks of one NCCL clique (emu's NCCL).
inline void run_nccl(int n, const std::function<void(dist::NcclCommunicator&)>& fn,
                     dist::NcclOptions options = {}) {
  const ncclUniqueId id = dist::NcclCommunicator::make_unique_id();
  run_rank_threads(n, [&](int r) {
    dist::NcclCommunicator comm(id, r, n, r % 2, options);
    fn(comm);
  });
}

// LeNet-5 initialized from seed 3 on rank c's device: every rank starts from the same weights (the
// replica the DDP-on-cuda tests train).
inline std::shared_ptr<nn::Module> lenet5_replica(const dist::NcclCommunicator& c) {
  Generator init(3);
  auto model = nn::models::make_model("lenet5", {.generator = &init});
  model->to(Device::cuda(c.device()));
  return model;
}

// n ranks of an in-process group, each staged through host memory (dist::HostStagedCommunicator).
inline void run_staged(int n, const std::function<void(dist::HostStagedCommunicator&)>& fn) {
  dist::InProcessGroup group(n);
  run_rank_threads(
      n,
      [&](int r) {
        dist::HostStagedCommunicator comm(group.communicator(r));
        fn(comm);
      },
      [&](int r) { group.abort(r, "failed"); });
}

}  // namespace stoke::test
