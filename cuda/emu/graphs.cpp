// cuda/emu: stream capture and CUDA graphs. cudaStreamBeginCapture puts a stream in capture mode:
// the launches, copies, memsets, event records and host functions queued on it from then on are
// appended to the capture instead of running (enqueue in streams.cpp asks capture_work first).
// A stream that waits for an event recorded in the capture joins it (CUDA's fork), so work on a
// side stream is captured too. cudaStreamEndCapture hands the capture over as a cudaGraph_t;
// cudaGraphInstantiate copies it into a cudaGraphExec_t, and cudaGraphLaunch queues the whole
// graph on a stream as one task that runs the captured work in the order it was issued (a valid
// order of CUDA's graph, whose edges all point from earlier to later work).
//
// What a GPU refuses during a capture, the emulator refuses too, with the same error codes, and
// the capture is invalidated (cudaStreamEndCapture then fails with
// cudaErrorStreamCaptureInvalidated): synchronizing or querying a capturing stream, or an event
// recorded in the capture; cudaDeviceSynchronize; a copy between a capturing stream and pageable
// host memory (it would be synchronous); and synchronous work on the legacy default stream while a
// blocking stream is captured (cudaErrorStreamCaptureImplicit). The capture mode is recorded but
// every capture behaves as cudaStreamCaptureModeRelaxed: cudaMalloc and cudaFree stay allowed
// (stoke's caching allocator may grow its pool while a graph is captured).
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "cuda/emu/internal.h"

struct CUgraph_st {
  std::vector<std::function<void()>> work;
};

struct CUgraphExec_st {
  std::shared_ptr<const std::vector<std::function<void()>>> work;
};

namespace stoke::emu::detail {
namespace {

struct Capture {
  std::uint64_t id = 0;
  cudaStream_t origin = nullptr;
  bool invalidated = false;
  std::vector<std::function<void()>> work;
};

struct Captures {
  std::mutex m;
  std::uint64_t next_id = 0;
  std::map<std::uint64_t, std::unique_ptr<Capture>> live;  // by id
  std::map<cudaStream_t, std::uint64_t> streams;           // capturing stream -> capture id
};

Captures& captures() {
  static Captures c;
  return c;
}

Capture* find_locked(Captures& c, cudaStream_t stream) {
  const auto it = c.streams.find(stream);
  if (it == c.streams.end()) return nullptr;
  return c.live.at(it->second).get();
}

bool is_legacy(cudaStream_t stream) {
  return stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
}

}  // namespace

bool capture_work(cudaStream_t stream, std::function<void()>& work) {
  Captures& c = captures();
  std::lock_guard lock(c.m);
  if (c.streams.empty() || is_legacy(stream)) return false;
  Capture* capture = find_locked(c, stream);
  if (capture == nullptr) return false;
  capture->work.push_back(std::move(work));
  return true;
}

std::uint64_t capture_id(cudaStream_t stream) {
  Captures& c = captures();
  std::lock_guard lock(c.m);
  const Capture* capture = find_locked(c, stream);
  return capture == nullptr ? 0 : capture->id;
}

bool capture_live(std::uint64_t id) {
  if (id == 0) return false;
  Captures& c = captures();
  std::lock_guard lock(c.m);
  return c.live.count(id) != 0;
}

bool any_capture() {
  Captures& c = captures();
  std::lock_guard lock(c.m);
  return !c.live.empty();
}

bool blocking_capture() {
  Captures& c = captures();
  std::lock_guard lock(c.m);
  for (const auto& [stream, id] : c.streams)
    if ((stream_flags(stream) & cudaStreamNonBlocking) == 0) return true;
  return false;
}

cudaError_t refuse_in_capture(std::uint64_t id, cudaError_t error) {
  Captures& c = captures();
  {
    std::lock_guard lock(c.m);
    if (id == 0) {
      for (auto& [live_id, capture] : c.live) capture->invalidated = true;
    } else if (const auto it = c.live.find(id); it != c.live.end()) {
      it->second->invalidated = true;
    }
  }
  return fail(error);
}

void join_capture(cudaStream_t stream, std::uint64_t id) {
  if (is_legacy(stream)) return;
  Captures& c = captures();
  std::lock_guard lock(c.m);
  if (c.live.count(id) != 0) c.streams[stream] = id;
}

}  // namespace stoke::emu::detail

using stoke::emu::detail::captures;
using stoke::emu::detail::fail;

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode /*mode*/) {
  if (!stoke::emu::detail::valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  // CUDA refuses to capture the legacy default stream.
  if (stoke::emu::detail::is_legacy(stream)) return fail(cudaErrorStreamCaptureUnsupported);
  auto& c = captures();
  std::lock_guard lock(c.m);
  if (c.streams.count(stream) != 0) return fail(cudaErrorIllegalState);
  auto capture = std::make_unique<stoke::emu::detail::Capture>();
  capture->id = ++c.next_id;
  capture->origin = stream;
  c.streams[stream] = capture->id;
  c.live.emplace(capture->id, std::move(capture));
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  if (pGraph == nullptr) return fail(cudaErrorInvalidValue);
  *pGraph = nullptr;
  auto& c = captures();
  std::lock_guard lock(c.m);
  stoke::emu::detail::Capture* capture = stoke::emu::detail::find_locked(c, stream);
  if (capture == nullptr) return fail(cudaErrorIllegalState);
  // Only the stream that began the capture ends it (a joined stream cannot).
  if (capture->origin != stream) return fail(cudaErrorStreamCaptureUnmatched);
  const std::uint64_t id = capture->id;
  for (auto it = c.streams.begin(); it != c.streams.end();)
    it = it->second == id ? c.streams.erase(it) : std::next(it);
  std::unique_ptr<stoke::emu::detail::Capture> done = std::move(c.live.at(id));
  c.live.erase(id);
  if (done->invalidated) return fail(cudaErrorStreamCaptureInvalidated);
  *pGraph = new CUgraph_st{std::move(done->work)};
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                  enum cudaStreamCaptureStatus* pCaptureStatus) {
  if (pCaptureStatus == nullptr) return fail(cudaErrorInvalidValue);
  if (!stoke::emu::detail::valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  auto& c = captures();
  std::lock_guard lock(c.m);
  const stoke::emu::detail::Capture* capture = stoke::emu::detail::find_locked(c, stream);
  *pCaptureStatus = capture == nullptr     ? cudaStreamCaptureStatusNone
                    : capture->invalidated ? cudaStreamCaptureStatusInvalidated
                                           : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                 unsigned long long /*flags*/) {
  if (pGraphExec == nullptr || graph == nullptr) return fail(cudaErrorInvalidValue);
  *pGraphExec =
      new CUgraphExec_st{std::make_shared<const std::vector<std::function<void()>>>(graph->work)};
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  if (graphExec == nullptr) return fail(cudaErrorInvalidValue);
  if (!stoke::emu::detail::valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  stoke::emu::detail::enqueue(stream, [work = graphExec->work] {
    for (const std::function<void()>& w : *work) w();
  });
  return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* numNodes) {
  if (graph == nullptr || numNodes == nullptr) return fail(cudaErrorInvalidValue);
  if (nodes != nullptr) return fail(cudaErrorNotSupported);  // the count only
  *numNodes = graph->work.size();
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  delete graphExec;  // a launch in flight holds the work it runs
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}
