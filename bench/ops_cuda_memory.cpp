// stoke-bench-ops-cuda, section "memory": memory-bound kernels at 1 K ... 256 M elements (x4
// steps) in GB/s of their minimal DRAM traffic (each operand read or written once):
//   copy d2d               cudaMemcpyAsync (the row the others are read against)
//   add f32 / f16          cuda::binary(add) on contiguous operands (vectorized path)
//   relu f32, exp f32      cuda::unary
//   relu bwd f32           cuda::unary_backward (grad, saved -> out)
//   cast f32->f16, f16->f32  cuda::cast
//   sum all                cuda::reduce over every element
//   sum rows (n/1024 x 1024, dim 1)   contiguous rows (one warp/block per row)
//   sum cols (n/256 x 256, dim 0)     columns (inner > 1: the column-tile kernel)
// "vs ref" is the percentage of a device-to-device cudaMemcpy that moves the same number of bytes
// (the practical roofline), "%peak" the percentage of the bandwidth from the device properties.
#include <string>

#include "bench/ops_cuda.h"
#include "cuda/kernels/creation.h"
#include "cuda/kernels/elementwise.h"
#include "cuda/kernels/reduce.h"

namespace stoke::bench::ops_cuda {
namespace {

std::string size_text(int64_t n) {
  if (n >= (1 << 20) && n % (1 << 20) == 0) return std::to_string(n >> 20) + " M";
  if (n >= (1 << 10) && n % (1 << 10) == 0) return std::to_string(n >> 10) + " K";
  return std::to_string(n);
}

}  // namespace

void bench_memory(Bench& b) {
  std::vector<int64_t> sizes;
  for (int64_t n = 1 << 10; n <= (int64_t{1} << 28); n <<= 2) sizes.push_back(n);
  if (b.o.quick) sizes = {1 << 10, 1 << 20};
  for (int64_t n : sizes) {
    const std::string shape = size_text(n);
    // Two f32 inputs and an output; the f16 views use the first half of each.
    Buffer x(n * 4), y(n * 4), out(n * 4, DType::f32, Fill::zero);
    Buffer xh(n * 2, DType::f16), yh(n * 2, DType::f16);
    // One row per case; `traffic` in bytes. The reference is a copy of the same traffic.
    auto add = [&](const std::string& op, const std::string& impl, double traffic,
                   const std::function<void()>& fn) {
      b.bytes("memory", op, shape, impl, traffic, b.memcpy_gbs(traffic), fn);
    };
    add("copy d2d f32", "cudaMemcpyAsync", 8.0 * n, [&] {
      STOKE_CUDA_CHECK(cudaMemcpyAsync(out.ptr, x.ptr, n * 4, cudaMemcpyDeviceToDevice, nullptr));
    });
    add("add f32", "stoke binary", 12.0 * n,
        [&] { cuda::binary(cuda::BinaryOp::add, DType::f32, x.ptr, y.ptr, out.ptr, n, nullptr); });
    add("add f16", "stoke binary", 6.0 * n, [&] {
      cuda::binary(cuda::BinaryOp::add, DType::f16, xh.ptr, yh.ptr, out.ptr, n, nullptr);
    });
    add("relu f32", "stoke unary", 8.0 * n,
        [&] { cuda::unary(cuda::UnaryOp::relu, DType::f32, x.ptr, out.ptr, n, nullptr); });
    add("exp f32", "stoke unary", 8.0 * n,
        [&] { cuda::unary(cuda::UnaryOp::exp, DType::f32, x.ptr, out.ptr, n, nullptr); });
    add("relu bwd f32", "stoke unary_backward", 12.0 * n, [&] {
      cuda::unary_backward(cuda::UnaryBackwardOp::relu, DType::f32, x.ptr, y.ptr, out.ptr, n,
                           nullptr);
    });
    add("cast f32->f16", "stoke cast", 6.0 * n,
        [&] { cuda::cast(DType::f32, x.ptr, DType::f16, out.ptr, n, nullptr); });
    add("cast f16->f32", "stoke cast", 6.0 * n,
        [&] { cuda::cast(DType::f16, xh.ptr, DType::f32, out.ptr, n, nullptr); });
    // The two-stage path's partials (the largest any case below needs: the whole-tensor sum).
    Buffer ws(std::max<size_t>(cuda::reduce_workspace_bytes(1, n, 1), 8), DType::u8, Fill::zero);
    add("sum all f32", "stoke reduce", 4.0 * n, [&] {
      cuda::reduce(cuda::ReduceOp::sum, DType::f32, x.ptr, out.ptr, nullptr, 1, n, 1, ws.ptr,
                   nullptr);
    });
    const int64_t row = 1024, rows = n / row;
    add("sum rows f32 (" + std::to_string(rows) + "x1024, dim 1)", "stoke reduce",
        4.0 * n + 4.0 * rows, [&] {
          cuda::reduce(cuda::ReduceOp::sum, DType::f32, x.ptr, out.ptr, nullptr, rows, row, 1,
                       ws.ptr, nullptr);
        });
    const int64_t cols = 256, crows = n / cols;
    add("sum cols f32 (" + std::to_string(crows) + "x256, dim 0)", "stoke reduce",
        4.0 * n + 4.0 * cols, [&] {
          cuda::reduce(cuda::ReduceOp::sum, DType::f32, x.ptr, out.ptr, nullptr, 1, crows, cols,
                       ws.ptr, nullptr);
        });
    Buffer indices(rows * 8, DType::i64, Fill::zero);
    add("max+argmax rows f32 (" + std::to_string(rows) + "x1024)", "stoke reduce",
        4.0 * n + 12.0 * rows, [&] {
          cuda::reduce(cuda::ReduceOp::max, DType::f32, x.ptr, out.ptr, indices.as<int64_t>(), rows,
                       row, 1, ws.ptr, nullptr);
        });
  }
}

}  // namespace stoke::bench::ops_cuda
