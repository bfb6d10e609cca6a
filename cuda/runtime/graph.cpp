#include "cuda/runtime/graph.h"

#include <utility>

#include "core/error.h"

namespace stoke::cuda {

Graph::Graph() : stream_(StreamOptions{.non_blocking = true}) {}

Graph::~Graph() {
  abandon_capture();
  reset();
}

void Graph::abandon_capture() noexcept {
  if (!capturing_) return;
  capturing_ = false;
  set_current_stream(previous_);
  cudaGraph_t abandoned = nullptr;
  (void)cudaStreamEndCapture(stream_.handle(), &abandoned);
  if (abandoned != nullptr) (void)cudaGraphDestroy(abandoned);
  (void)cudaGetLastError();
  (void)take_deferred_checks_since(checks_mark_);  // flags nothing will write
}

void Graph::reset() {
  checks_.clear();
  if (exec_ != nullptr) (void)cudaGraphExecDestroy(std::exchange(exec_, nullptr));
  if (graph_ != nullptr) (void)cudaGraphDestroy(std::exchange(graph_, nullptr));
  nodes_ = 0;
}

void Graph::capture_begin() {
  STOKE_CHECK(!capturing_, "cuda::Graph::capture_begin", "a capture is already under way");
  STOKE_CHECK(!current_stream_capturing(), "cuda::Graph::capture_begin",
              "the current stream is already being captured (graphs do not nest)");
  reset();
  // The capture stream starts after everything already queued on the current stream, so the
  // captured work (and its first replay) sees the state that work leaves.
  previous_ = current_stream();
  Event ready(EventOptions{.timing = false});
  ready.record(previous_);
  stream_.wait(ready);
  set_current_stream(stream_.handle());
  // Relaxed: the caching allocator may cudaMalloc a segment for the private pool mid-capture.
  const cudaError_t e = cudaStreamBeginCapture(stream_.handle(), cudaStreamCaptureModeRelaxed);
  if (e != cudaSuccess) {
    set_current_stream(previous_);
    STOKE_CUDA_CHECK(e);
  }
  capturing_ = true;
  rng_ = default_generator().state();
  checks_mark_ = pending_deferred_checks();
}

void Graph::capture_end() {
  STOKE_CHECK(capturing_, "cuda::Graph::capture_end", "no capture is under way");
  capturing_ = false;
  set_current_stream(previous_);
  // The captured ops' checks wait for a replay to write their flags.
  checks_ = take_deferred_checks_since(checks_mark_);
  const cudaError_t e = cudaStreamEndCapture(stream_.handle(), &graph_);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    STOKE_FAIL("cuda::Graph::capture_end", "the capture failed (", cudaGetErrorName(e), ": ",
               cudaGetErrorString(e),
               "): the captured work synchronized with the host, read a value back or copied to "
               "or from pageable memory; run the step eagerly with STOKE_SYNC_DEBUG=error to find "
               "the call");
  }
  const GeneratorState rng = default_generator().state();
  if (rng.seed != rng_.seed || rng.offset != rng_.offset) {
    reset();
    STOKE_FAIL("cuda::Graph::capture_end",
               "the captured work drew random numbers from the default generator (dropout, "
               "stochastic depth, a random fill), which every replay would repeat; keep random "
               "draws out of the graph");
  }
  STOKE_CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &nodes_));
  STOKE_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
}

void Graph::capture(const std::function<void()>& step) {
  capture_begin();
  try {
    step();
  } catch (...) {
    abandon_capture();
    throw;
  }
  capture_end();
}

void Graph::replay() {
  STOKE_CHECK(exec_ != nullptr, "cuda::Graph::replay", "nothing was captured");
  note_kernel_launch();
  STOKE_CUDA_CHECK(cudaGraphLaunch(exec_, current_stream()));
  for (DeferredCheck c : checks_) {  // this replay's answers, read on the stream it ran on
    c.stream = current_stream();
    defer_check(std::move(c));
  }
}

void refuse_host_copy_in_capture(const char* what) {
  if (!current_stream_capturing()) return;
  const char* site = current_sync_site();
  STOKE_FAIL(site != nullptr ? site : "copy", what,
             " inside a CUDA graph capture: a replay would copy what the capture saw, or could not "
             "wait for the host; copy into the graph's static inputs before replay() and read its "
             "outputs after it");
}

bool current_stream_capturing() {
  const cudaStream_t s = current_stream();
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  STOKE_CUDA_CHECK(cudaStreamIsCapturing(s, &status));
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace stoke::cuda
