#include "cuda/vendor/cudnn_conv.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>
#include <vector>

#include "cuda/runtime/caching_allocator.h"
#include "cuda/runtime/device.h"
#include "cuda/runtime/stream.h"
#include "cuda/vendor/check.h"
#include "cuda/vendor/cudnn_handle.h"
#include "cuda/vendor/first_that_runs.h"

namespace stoke::cuda {
namespace {

std::atomic<bool> g_benchmark{false};

// Workspace cap for algorithm choice: cuDNN's fastest algorithms sometimes ask for gigabytes.
constexpr size_t kMaxWorkspace = size_t{1} << 30;

struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  explicit Descriptors(const ConvGeometry& g) {
    const cudnnDataType_t t = cudnn_data_type(g.dtype, "cuda::conv2d");
    auto i = [](int64_t v) { return static_cast<int>(v); };
    STOKE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    STOKE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    STOKE_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    STOKE_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    // The dims are (n, c, h, w) and (k, c / groups, r, s) in either format; the format names the
    // memory order (NHWC: c innermost; the filter's NHWC is KRSC).
    const cudnnTensorFormat_t f = g.channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    STOKE_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, f, t, i(g.n), i(g.c), i(g.h), i(g.w)));
    STOKE_CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(y, f, t, i(g.n), i(g.k), i(g.out_h()), i(g.out_w())));
    STOKE_CUDNN_CHECK(
        cudnnSetFilter4dDescriptor(w, t, f, i(g.k), i(g.c / g.groups), i(g.r), i(g.s)));
    // f32 accumulation for every dtype (f16/bf16 data with f32 compute).
    STOKE_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        conv, i(g.padding[0]), i(g.padding[1]), i(g.stride[0]), i(g.stride[1]), i(g.dilation[0]),
        i(g.dilation[1]), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    STOKE_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, i(g.groups)));
    STOKE_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, math_type(g)));
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
  ~Descriptors() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(conv);
  }

  // f32 without TF32 must be plain FMA math: cuDNN's default math allows TF32 on Ampere+.
  static cudnnMathType_t math_type(const ConvGeometry& g) {
    if (g.dtype != DType::f32) return CUDNN_TENSOR_OP_MATH;
    return g.allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  }
};

struct Choice {
  int algo = 0;
  size_t workspace = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};
// Every usable algorithm, fastest first; once one has run, it is first (the ones before it that
// failed to launch are dropped).
using Choices = std::vector<Choice>;

using Key = std::tuple<int, int, std::vector<int64_t>>;  // device, direction, geometry

std::vector<int64_t> geometry_key(const ConvGeometry& g) {
  return {g.n,
          g.c,
          g.h,
          g.w,
          g.k,
          g.r,
          g.s,
          g.stride[0],
          g.stride[1],
          g.padding[0],
          g.padding[1],
          g.dilation[0],
          g.dilation[1],
          g.groups,
          static_cast<int64_t>(g.dtype),
          g.allow_tf32,
          g.channels_last,
          g_benchmark.load()};
}

std::mutex g_cache_mutex;
std::map<Key, Choices> g_cache;

// The perf results (sorted fastest first by cuDNN) that succeeded and fit, in order.
template <class Perf>
Choices pick(const Perf* perf, int count, const char* direction, const ConvGeometry& g) {
  Choices c;
  for (int i = 0; i < count; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= kMaxWorkspace) {
      c.push_back({static_cast<int>(perf[i].algo), perf[i].memory, perf[i].mathType});
    }
  }
  STOKE_CHECK(!c.empty(), "cuda::conv2d", "cuDNN offers no ", direction, " algorithm for ", g.str(),
              " within ", format_bytes(kMaxWorkspace), " of workspace");
  return c;
}

// Scratch for cudnnFind*Ex: as much as the search may use, freed right after.
struct Scratch {
  void* ptr = nullptr;
  size_t bytes = 0;
  Scratch(int device, cudaStream_t stream) {
    size_t free_bytes = 0, total = 0;
    STOKE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    bytes = std::min(kMaxWorkspace, free_bytes / 2);
    ptr = caching_allocator().allocate(bytes, device, stream);
  }
  ~Scratch() { caching_allocator().free(ptr); }
};

Choices choose(const ConvGeometry& g, int direction, const Descriptors& d, cudnnHandle_t h,
               const void* in0, const void* in1, void* out, cudaStream_t stream) {
  const int device = current_device();
  const Key key{device, direction, geometry_key(g)};
  {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    auto it = g_cache.find(key);
    if (it != g_cache.end()) return it->second;
  }
  constexpr int kMax = 16;
  int count = 0;
  Choices c;
  const bool find = g_benchmark.load() && in0 && in1 && out;
  if (direction == 0) {
    cudnnConvolutionFwdAlgoPerf_t perf[kMax];
    if (find) {
      Scratch s(device, stream);
      STOKE_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
          h, d.x, in0, d.w, in1, d.conv, d.y, out, kMax, &count, perf, s.ptr, s.bytes));
    } else {
      STOKE_CUDNN_CHECK(
          cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, kMax, &count, perf));
    }
    c = pick(perf, count, "forward", g);
  } else if (direction == 1) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
    if (find) {
      Scratch s(device, stream);
      STOKE_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
          h, d.w, in1, d.y, in0, d.conv, d.x, out, kMax, &count, perf, s.ptr, s.bytes));
    } else {
      STOKE_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, kMax,
                                                                    &count, perf));
    }
    c = pick(perf, count, "backward-data", g);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
    if (find) {
      Scratch s(device, stream);
      STOKE_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
          h, d.x, in0, d.y, in1, d.conv, d.w, out, kMax, &count, perf, s.ptr, s.bytes));
    } else {
      STOKE_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w,
                                                                      kMax, &count, perf));
    }
    c = pick(perf, count, "backward-filter", g);
  }
  // The heuristics report no workspace size: ask for each algorithm's (one that cannot say is
  // dropped).
  if (!find) {
    Choices sized;
    for (Choice a : c) {
      cudnnStatus_t st = cudnnSetConvolutionMathType(d.conv, a.math);
      if (st == CUDNN_STATUS_SUCCESS && direction == 0) {
        st = cudnnGetConvolutionForwardWorkspaceSize(
            h, d.x, d.w, d.conv, d.y, static_cast<cudnnConvolutionFwdAlgo_t>(a.algo), &a.workspace);
      } else if (st == CUDNN_STATUS_SUCCESS && direction == 1) {
        st = cudnnGetConvolutionBackwardDataWorkspaceSize(
            h, d.w, d.y, d.conv, d.x, static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algo),
            &a.workspace);
      } else if (st == CUDNN_STATUS_SUCCESS) {
        st = cudnnGetConvolutionBackwardFilterWorkspaceSize(
            h, d.x, d.y, d.conv, d.w, static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algo),
            &a.workspace);
      }
      if (st == CUDNN_STATUS_SUCCESS && a.workspace <= kMaxWorkspace) sized.push_back(a);
    }
    STOKE_CHECK(!sized.empty(), "cuda::conv2d", "no cuDNN algorithm reports its workspace for ",
                g.str());
    c = std::move(sized);
  }
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  g_cache.emplace(key, c);
  return c;
}

void check_geometry(const ConvGeometry& g) {
  STOKE_CHECK(g.groups >= 1 && g.c % g.groups == 0 && g.k % g.groups == 0, "cuda::conv2d",
              "expected groups dividing c and k, got ", g.str());
  STOKE_CHECK(g.out_h() >= 1 && g.out_w() >= 1, "cuda::conv2d", "empty output for ", g.str());
}

// Launches one algorithm; an empty string when it ran, else why not (a status, no workspace).
std::string try_algorithm(const Choice& c, int direction, const Descriptors& d, cudnnHandle_t h,
                          const void* in0, const void* in1, void* out, int device,
                          cudaStream_t stream) {
  cudnnStatus_t st = cudnnSetConvolutionMathType(d.conv, c.math);
  if (st != CUDNN_STATUS_SUCCESS)
    return ::stoke::detail::str_cat("algo ", c.algo, ": ", cudnnGetErrorString(st));
  void* ws = nullptr;
  if (c.workspace) {
    try {
      ws = caching_allocator().allocate(c.workspace, device, stream);
    } catch (const std::exception& e) {
      return ::stoke::detail::str_cat("algo ", c.algo, ": its workspace: ", e.what());
    }
  }
  const float one = 1.0f, zero = 0.0f;
  if (direction == 0) {
    st = cudnnConvolutionForward(h, &one, d.x, in0, d.w, in1, d.conv,
                                 static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), ws, c.workspace,
                                 &zero, d.y, out);
  } else if (direction == 1) {
    st = cudnnConvolutionBackwardData(h, &one, d.w, in1, d.y, in0, d.conv,
                                      static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), ws,
                                      c.workspace, &zero, d.x, out);
  } else {
    st = cudnnConvolutionBackwardFilter(h, &one, d.x, in0, d.y, in1, d.conv,
                                        static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), ws,
                                        c.workspace, &zero, d.w, out);
  }
  // Freed at once: the block is reused only by later work on the same stream.
  caching_allocator().free(ws);
  if (st != CUDNN_STATUS_SUCCESS)
    return ::stoke::detail::str_cat("algo ", c.algo, ": ", cudnnGetErrorString(st));
  return {};
}

// Runs one direction: descriptors, the cached algorithms (the next one when one fails to launch),
// workspace from the caching allocator.
void run(const ConvGeometry& g, int direction, const void* in0, const void* in1, void* out,
         cudaStream_t stream) {
  check_geometry(g);
  const int device = current_device();
  cudnnHandle_t h = cudnn_handle(device, stream);
  Descriptors d(g);
  const Choices c = choose(g, direction, d, h, in0, in1, out, stream);
  static constexpr const char* kDir[] = {"forward", "backward-data", "backward-filter"};
  const size_t used = first_that_runs(
      c.size(),
      [&](size_t i) { return try_algorithm(c[i], direction, d, h, in0, in1, out, device, stream); },
      "cuda::conv2d",
      ::stoke::detail::str_cat("the cuDNN ", kDir[direction], " convolution of ", g.str()));
  if (used > 0) {
    // Later calls start at the algorithm that ran.
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    auto it = g_cache.find(Key{device, direction, geometry_key(g)});
    if (it != g_cache.end() && it->second.size() == c.size())
      it->second.erase(it->second.begin(), it->second.begin() + static_cast<std::ptrdiff_t>(used));
  }
}

}  // namespace

int64_t ConvGeometry::out_h() const {
  return (h + 2 * padding[0] - dilation[0] * (r - 1) - 1) / stride[0] + 1;
}

int64_t ConvGeometry::out_w() const {
  return (w + 2 * padding[1] - dilation[1] * (s - 1) - 1) / stride[1] + 1;
}

std::string ConvGeometry::str() const {
  std::ostringstream os;
  os << "n=" << n << " c=" << c << " h=" << h << " w=" << w << " k=" << k << " r=" << r
     << " s=" << s << " stride=" << stride[0] << "x" << stride[1] << " pad=" << padding[0] << "x"
     << padding[1] << " dil=" << dilation[0] << "x" << dilation[1] << " g=" << groups << " "
     << dtype_name(dtype) << (allow_tf32 ? " tf32" : "") << (channels_last ? " nhwc" : "");
  return os.str();
}

void set_cudnn_benchmark(bool on) {
  g_benchmark.store(on);
}

bool cudnn_benchmark() {
  return g_benchmark.load();
}

std::string conv2d_algorithm(const ConvGeometry& g, int direction) {
  check_geometry(g);
  const int device = current_device();
  cudaStream_t stream = current_stream(device);
  Descriptors d(g);
  const Choice c =
      choose(g, direction, d, cudnn_handle(device, stream), nullptr, nullptr, nullptr, stream)
          .front();
  static constexpr const char* kDir[] = {"fwd", "bwd-data", "bwd-filter"};
  std::ostringstream os;
  os << kDir[direction] << " algo " << c.algo
     << (c.math == CUDNN_TENSOR_OP_MATH ? " tensor-op" : "") << ", " << format_bytes(c.workspace)
     << " workspace";
  return os.str();
}

void conv2d_forward(const ConvGeometry& g, const void* x, const void* w, void* y,
                    cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::cudnn_conv2d_forward");
  run(g, 0, x, w, y, stream);
}

void conv2d_backward_data(const ConvGeometry& g, const void* dy, const void* w, void* dx,
                          cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::cudnn_conv2d_backward_data");
  run(g, 1, dy, w, dx, stream);
}

void conv2d_backward_filter(const ConvGeometry& g, const void* x, const void* dy, void* dw,
                            cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::cudnn_conv2d_backward_filter");
  run(g, 2, x, dy, dw, stream);
}

Tensor cudnn_conv2d(const Tensor& input, const Tensor& weight, std::array<int64_t, 2> stride,
                    std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation,
                    int64_t groups) {
  STOKE_CHECK(input.device().is_cuda() && weight.device() == input.device(), "cuda::conv2d",
              "expected input and weight on one cuda device, got ", input.device(), " and ",
              weight.device());
  STOKE_CHECK(input.dim() == 4 && weight.dim() == 4 && input.is_contiguous() &&
                  weight.is_contiguous() && input.dtype() == weight.dtype(),
              "cuda::conv2d", "expected contiguous 4-D input and weight of one dtype, got input ",
              input.shape(), " ", input.dtype(), " and weight ", weight.shape(), " ",
              weight.dtype());
  ConvGeometry g{.n = input.size(0),
                 .c = input.size(1),
                 .h = input.size(2),
                 .w = input.size(3),
                 .k = weight.size(0),
                 .r = weight.size(2),
                 .s = weight.size(3),
                 .stride = stride,
                 .padding = padding,
                 .dilation = dilation,
                 .groups = groups,
                 .dtype = input.dtype()};
  STOKE_CHECK(weight.size(1) * groups == g.c, "cuda::conv2d", "expected weight (k, ", g.c / groups,
              ", r, s) for ", g.c, " input channels and ", groups, " groups, got ", weight.shape());
  DeviceGuard guard(input.device().index);
  Tensor y =
      empty({g.n, g.k, g.out_h(), g.out_w()}, {.dtype = input.dtype(), .device = input.device()});
  conv2d_forward(g, input.data_ptr(), weight.data_ptr(), y.data_ptr(),
                 current_stream(input.device().index));
  return y;
}

}  // namespace stoke::cuda
