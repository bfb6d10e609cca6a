#include "cuda/vendor/cublas_gemm.h"

#include <climits>
#include <unordered_map>

#include "cuda/runtime/caching_allocator.h"
#include "cuda/runtime/device.h"
#include "cuda/runtime/stream.h"
#include "cuda/vendor/check.h"

namespace stoke::cuda {
namespace {

// cuBLAS's own workspace would be cudaMalloc'ed per stream behind our back; 32 MiB from the
// caching allocator is what NVIDIA recommends for Hopper and plenty for older parts.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

struct HandleState {
  cublasHandle_t handle = nullptr;
  // One workspace per stream: kernels queued on two streams at once must not share one.
  std::unordered_map<cudaStream_t, void*> workspaces;
};

// One handle per device per thread (cuBLAS handles are not safe to share between threads that
// set different streams). Never destroyed: destruction order at exit is not worth the risk.
cublasHandle_t handle_for(int device, cudaStream_t stream) {
  thread_local auto* handles = new std::unordered_map<int, HandleState>();
  HandleState& h = (*handles)[device];
  if (!h.handle) STOKE_CUBLAS_CHECK(cublasCreate(&h.handle));
  void*& workspace = h.workspaces[stream];
  // Allocated on `stream` itself, so the caching allocator's stream ordering covers it.
  if (!workspace) workspace = caching_allocator().allocate(kWorkspaceBytes, device, stream);
  STOKE_CUBLAS_CHECK(cublasSetStream(h.handle, stream));
  // cublasSetStream resets the workspace to cuBLAS's own pool: give ours back after each switch.
  STOKE_CUBLAS_CHECK(cublasSetWorkspace(h.handle, workspace, kWorkspaceBytes));
  return h.handle;
}

cudaDataType data_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    default:
      STOKE_FAIL("cuda::gemm", "expected dtype f32, f16 or bf16, got ", dtype);
  }
}

int to_int(int64_t v, const char* what) {
  STOKE_CHECK(v >= 0 && v <= INT_MAX, "cuda::gemm", "expected ", what, " in [0, ", INT_MAX,
              "], got ", v);
  return static_cast<int>(v);
}

}  // namespace

void gemm(DType dtype, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda, const void* b,
          int64_t ldb, void* c, int64_t ldc, const GemmOptions& o, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::gemm");
  const cudaDataType type = data_type(dtype);
  if (m == 0 || n == 0) return;
  STOKE_CHECK(o.batch >= 1, "cuda::gemm", "expected batch >= 1, got ", o.batch);
  cublasHandle_t handle = handle_for(current_device(), stream);
  // Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: swap the operands and pass the
  // row-major buffers as they are (each is its own transpose in column-major terms).
  const cublasOperation_t op_b = o.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = o.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasComputeType_t compute =
      dtype == DType::f32 && o.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const int im = to_int(m, "m"), in = to_int(n, "n"), ik = to_int(k, "k");
  const int ilda = to_int(lda, "lda"), ildb = to_int(ldb, "ldb"), ildc = to_int(ldc, "ldc");
  if (o.batch == 1) {
    STOKE_CUBLAS_CHECK(cublasGemmEx(handle, op_b, op_a, in, im, ik, &o.alpha, b, type, ildb, a,
                                    type, ilda, &o.beta, c, type, ildc, compute,
                                    CUBLAS_GEMM_DEFAULT));
  } else {
    STOKE_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        handle, op_b, op_a, in, im, ik, &o.alpha, b, type, ildb, o.stride_b, a, type, ilda,
        o.stride_a, &o.beta, c, type, ildc, o.stride_c, to_int(o.batch, "batch"), compute,
        CUBLAS_GEMM_DEFAULT));
  }
}

Tensor cublas_matmul(const Tensor& a, const Tensor& b, bool allow_tf32) {
  STOKE_CHECK(a.device().is_cuda() && b.device() == a.device(), "cuda::matmul",
              "expected both operands on one cuda device, got ", a.device(), " and ", b.device());
  STOKE_CHECK(a.dtype() == b.dtype(), "cuda::matmul", "dtypes differ: ", a.dtype(), " and ",
              b.dtype());
  STOKE_CHECK(a.is_contiguous() && b.is_contiguous(), "cuda::matmul",
              "expected contiguous operands, got strides ", a.strides(), " and ", b.strides());
  STOKE_CHECK(
      (a.dim() == 2 && b.dim() == 2) || (a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0)),
      "cuda::matmul", "expected 2-D operands or 3-D ones with one batch size, got ", a.shape(),
      " and ", b.shape());
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  STOKE_CHECK(b.size(-2) == k, "cuda::matmul", "inner dimensions differ: ", a.shape(), " and ",
              b.shape());
  DeviceGuard guard(a.device().index);
  Shape out_shape = a.dim() == 2 ? Shape{m, n} : Shape{a.size(0), m, n};
  Tensor c = empty(out_shape, {.dtype = a.dtype(), .device = a.device()});
  const int64_t batch = a.dim() == 3 ? a.size(0) : 1;
  gemm(a.dtype(), m, n, k, a.data_ptr(), k, b.data_ptr(), n, c.data_ptr(), n,
       GemmOptions{.allow_tf32 = allow_tf32,
                   .batch = batch,
                   .stride_a = m * k,
                   .stride_b = k * n,
                   .stride_c = m * n},
       current_stream(a.device().index));
  return c;
}

Tensor cublas_linear(const Tensor& x, const Tensor& weight, bool allow_tf32) {
  STOKE_CHECK(x.device().is_cuda() && weight.device() == x.device(), "cuda::linear",
              "expected both operands on one cuda device, got ", x.device(), " and ",
              weight.device());
  STOKE_CHECK(x.dtype() == weight.dtype(), "cuda::linear", "dtypes differ: ", x.dtype(), " and ",
              weight.dtype());
  STOKE_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1), "cuda::linear",
              "expected x (N, in) and weight (out, in), got ", x.shape(), " and ", weight.shape());
  STOKE_CHECK(x.is_contiguous() && weight.is_contiguous(), "cuda::linear",
              "expected contiguous operands, got strides ", x.strides(), " and ", weight.strides());
  DeviceGuard guard(x.device().index);
  const int64_t m = x.size(0), k = x.size(1), n = weight.size(0);
  Tensor y = empty({m, n}, {.dtype = x.dtype(), .device = x.device()});
  gemm(x.dtype(), m, n, k, x.data_ptr(), k, weight.data_ptr(), k, y.data_ptr(), n,
       GemmOptions{.trans_b = true, .allow_tf32 = allow_tf32}, current_stream(x.device().index));
  return y;
}

}  // namespace stoke::cuda
