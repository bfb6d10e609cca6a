// CUDA graphs for a training step (torch.cuda.CUDAGraph): capture the work a step queues once,
// then replay it with one launch per step instead of one per kernel.
//
//   stoke::cuda::Graph graph;
//   for (int i = 0; i < 3; ++i) step();       // warm-up: the caching allocator fills its pool
//   graph.capture([&] { step(); });           // queued, not run: the step's work is recorded
//   for (...) { static_x.copy_(next_x); graph.replay(); }
//
// What a replay does is fixed at capture: every kernel's arguments (its pointers and its host
// scalars, such as a learning rate passed by value) and every buffer it reads or writes. So the
// step's inputs live in static tensors that are refilled before each replay, its outputs are read
// from the tensors the capture made, and a value that changes from step to step must reach the
// kernels from device memory (the fused optimizers' step counts, the GradScaler's scale and
// found-inf flag). Host reads (item(), a blocking copy, a synchronize) cannot be captured: CUDA
// refuses them, the capture is invalidated and capture_end throws, naming the error. Nor can
// random draws from the default generator (dropout): a replay would repeat the capture's draws,
// so capture_end throws when the generator moved during the capture. A check of device values that
// the captured ops defer (a class target out of range) is read after each replay, at the next
// synchronization, as in an eager step; never before the first replay, whose kernels write it.
//
// Memory: the capture runs on the graph's own stream, and the caching allocator keeps blocks per
// stream, so every block the captured work allocates is served from (and freed back to) that
// stream's pool: a private pool that no other work reuses while replays still write it. The
// pool is kept until the Graph is destroyed.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "core/random.h"
#include "cuda/compat.h"
#include "cuda/runtime/deferred_checks.h"
#include "cuda/runtime/stream.h"

namespace stoke::cuda {

class Graph {
 public:
  Graph();
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Starts capturing on this thread: the graph's stream becomes the current stream (after it
  // waits for the work already queued on the previous one), and what is queued on it from here
  // on is recorded instead of run. Throws when a capture is already under way.
  void capture_begin();
  // Ends the capture, makes the recorded work launchable, restores the previous current stream.
  // Throws (naming the CUDA error) when something in the capture was refused.
  void capture_end();
  // capture_begin(), step(), capture_end(); the capture ends (and the stream is restored) when
  // step throws too.
  void capture(const std::function<void()>& step);
  // Queues the whole captured work on the current stream: one launch.
  void replay();
  // Drops the captured work (and, with the Graph, its stream's pool stays cached as any other).
  void reset();

  bool captured() const { return exec_ != nullptr; }
  // How many operations (kernels, copies, memsets, event records) the capture recorded.
  std::size_t size() const { return nodes_; }
  // The stream the graph captures on (its private pool's stream).
  cudaStream_t stream() const { return stream_.handle(); }

 private:
  Stream stream_;
  cudaStream_t previous_ = nullptr;
  GeneratorState rng_;  // the default generator's state at capture_begin
  bool capturing_ = false;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  std::size_t nodes_ = 0;
  // The deferred range checks (cuda/runtime/deferred_checks.h) the captured work registered,
  // registered again after each replay; checks_mark_ is the pending count at capture_begin.
  std::vector<DeferredCheck> checks_;
  int64_t checks_mark_ = 0;

  // Ends a capture that failed or was left unfinished, dropping what it recorded, and restores
  // the current stream; does nothing when no capture is under way.
  void abandon_capture() noexcept;
};

// True while the calling thread's current stream is being captured into a graph.
bool current_stream_capturing();

// Throws a stoke::Error naming the op (the outermost SyncSite, e.g. Tensor::item) when the current
// stream is being captured: `what` ("a copy between the host and the device") has no place in a
// graph. The copy paths call it before any host-device transfer.
void refuse_host_copy_in_capture(const char* what);

}  // namespace stoke::cuda
