#include "cuda/runtime/profiler_timer.h"

#include <map>
#include <mutex>
#include <vector>

#include "core/profiler.h"
#include "cuda/compat.h"
#include "cuda/runtime/device.h"
#include "cuda/runtime/stream.h"

namespace stoke::cuda {
namespace {

// Marks are events recorded on the calling thread's current stream. Device times are placed on
// the host clock through one reference per device: the first mark on a device after reset()
// records an event, waits for it, and reads the host clock (one synchronization per device per
// profile); a mark's time is then the reference's plus cudaEventElapsedTime from it.
class CudaEventTimer final : public profiler::DeviceTimer {
 public:
  int64_t mark() override {
    const int device = current_device();
    const cudaStream_t stream = current_stream(device);
    std::lock_guard<std::mutex> lock(mutex_);
    Reference& ref = refs_[device];
    if (!ref.event) {
      const ExpectedSync expected("the profiler's device clock reference");
      note_device_sync("cudaEventSynchronize");
      ref.event = take_event();
      if (!ref.event || cudaEventRecord(ref.event, stream) != cudaSuccess ||
          cudaEventSynchronize(ref.event) != cudaSuccess)
        ref.failed = true;
      ref.host_ns = profiler::detail::now_ns();
    }
    cudaEvent_t e = take_event();
    if (e && cudaEventRecord(e, stream) != cudaSuccess) {
      free_.push_back(e);
      e = nullptr;
    }
    marks_.push_back({e, device});
    return static_cast<int64_t>(marks_.size()) - 1;
  }

  int64_t time_ns(int64_t id) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (id < 0 || id >= static_cast<int64_t>(marks_.size())) return -1;
    const Mark& m = marks_[static_cast<size_t>(id)];
    const Reference& ref = refs_[m.device];
    float ms = 0;
    if (!m.event || ref.failed || cudaEventSynchronize(m.event) != cudaSuccess ||
        cudaEventElapsedTime(&ms, ref.event, m.event) != cudaSuccess)
      return -1;
    return ref.host_ns + static_cast<int64_t>(static_cast<double>(ms) * 1e6);
  }

  int device(int64_t id) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return id >= 0 && id < static_cast<int64_t>(marks_.size())
               ? marks_[static_cast<size_t>(id)].device
               : 0;
  }

  void reset() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Mark& m : marks_)
      if (m.event) free_.push_back(m.event);
    for (auto& [device, ref] : refs_)
      if (ref.event) free_.push_back(ref.event);
    marks_.clear();
    refs_.clear();
  }

 private:
  struct Mark {
    cudaEvent_t event;  // null: the record failed (the mark resolves to -1)
    int device;
  };
  struct Reference {
    cudaEvent_t event = nullptr;
    int64_t host_ns = 0;
    bool failed = false;
  };

  // A timing event (pooled: a profile records two per op), or null if CUDA refuses one.
  cudaEvent_t take_event() {
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    return cudaEventCreate(&e) == cudaSuccess ? e : nullptr;
  }

  std::mutex mutex_;
  std::vector<Mark> marks_;
  std::map<int, Reference> refs_;
  std::vector<cudaEvent_t> free_;
};

}  // namespace

void register_profiler_timer() {
  static auto* timer = new CudaEventTimer;  // lives until exit, as the profiler's registry
  profiler::set_device_timer(timer);
}

}  // namespace stoke::cuda
