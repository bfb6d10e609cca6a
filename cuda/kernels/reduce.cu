// CUDA reductions (see reduce.h). Every op is a (value, position) accumulator combined by a
// Reducer; sum/mean ignore the position. The combine of max/min is order-independent (NaN first,
// then value, then lowest position), so the tree reductions give exactly ops::max_with_indices'
// answer; sums are combined in a fixed order for a given launch, so results are reproducible.
#include "cuda/kernels/reduce.h"

#include <cmath>

#include "cuda/kernels/elementwise_util.h"

namespace stoke::cuda {
namespace {

using ew::from_float;
using ew::to_float;

struct Acc {
  float v;
  int64_t i;
};

constexpr int64_t kNoIndex = INT64_MAX;

template <ReduceOp Op>
struct Reducer {
  static constexpr bool kIndex = Op == ReduceOp::max || Op == ReduceOp::min;
  __host__ __device__ static Acc identity() {
    if constexpr (Op == ReduceOp::max) return {-INFINITY, kNoIndex};
    if constexpr (Op == ReduceOp::min) return {INFINITY, kNoIndex};
    return {0.f, 0};
  }
  __host__ __device__ static Acc combine(Acc a, Acc b) {
    if constexpr (!kIndex) {
      return {a.v + b.v, 0};
    } else {
      const bool an = a.v != a.v, bn = b.v != b.v;
      const bool better = Op == ReduceOp::max ? b.v > a.v : b.v < a.v;
      const bool take_b = bn ? (!an || b.i < a.i) : (!an && (better || (b.v == a.v && b.i < a.i)));
      return take_b ? b : a;
    }
  }
};

template <class R>
__device__ __forceinline__ Acc warp_reduce_acc(Acc a) {
  for (int o = 16; o > 0; o >>= 1) {
    Acc b;
    b.v = __shfl_xor_sync(ew::kFullMask, a.v, o);
    b.i = R::kIndex
              ? static_cast<int64_t>(__shfl_xor_sync(ew::kFullMask, static_cast<long long>(a.i), o))
              : 0;
    a = R::combine(a, b);
  }
  return a;
}

// Reduction over a 1-D block (blockDim.x a multiple of 32); every thread gets the result.
template <class R>
__device__ __forceinline__ Acc block_reduce_acc(Acc a) {
  __shared__ float pv[32];
  __shared__ int64_t pi[32];
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  a = warp_reduce_acc<R>(a);
  __syncthreads();
  if (lane == 0) {
    pv[warp] = a.v;
    pi[warp] = a.i;
  }
  __syncthreads();
  const int warps = static_cast<int>((blockDim.x + 31) / 32);
  a = lane < warps ? Acc{pv[lane], pi[lane]} : R::identity();
  return warp_reduce_acc<R>(a);
}

// One row group (a warp when blockDim.x == 32, with blockDim.y rows per block; else the block)
// per contiguous row of n elements. Rows past the end still take part in the shuffles.
template <class T, ReduceOp Op>
__global__ void __launch_bounds__(256)
    reduce_rows_kernel(const T* x, T* out, int64_t* indices, int64_t rows, int64_t n, float scale) {
  using R = Reducer<Op>;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool valid = row < rows;
  Acc a = R::identity();
  if (valid) {
    const T* p = x + row * n;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) a = R::combine(a, Acc{to_float(p[j]), j});
  }
  a = blockDim.x == 32 ? warp_reduce_acc<R>(a) : block_reduce_acc<R>(a);
  if (valid && threadIdx.x == 0) {
    if (out) out[row] = from_float<T>(a.v * scale);
    if (indices) indices[row] = a.i;
  }
}

constexpr int kColTile = 32;  // columns per tile (threadIdx.x)
constexpr int kColRows = 8;   // threads splitting n (threadIdx.y)

// Column reduction of [outer, n, inner] with inner > 1: tiles of 32 adjacent columns (coalesced
// loads across threadIdx.x), 8 thread rows each taking every 8th element along n, combined in a
// fixed order through shared memory. Grid-stride over outer * tiles.
template <class T, ReduceOp Op>
__global__ void __launch_bounds__(kColTile* kColRows)
    reduce_cols_kernel(const T* x, T* out, int64_t* indices, int64_t outer, int64_t n,
                       int64_t inner, float scale) {
  using R = Reducer<Op>;
  __shared__ float sv[kColRows][kColTile];
  __shared__ int64_t si[kColRows][kColTile];
  const int64_t tiles = (inner + kColTile - 1) / kColTile;
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  for (int64_t t = blockIdx.x; t < outer * tiles; t += gridDim.x) {
    const int64_t o = t / tiles, col = (t % tiles) * kColTile + tx;
    Acc a = R::identity();
    if (col < inner) {
      const T* p = x + o * n * inner + col;
      for (int64_t j = ty; j < n; j += kColRows) a = R::combine(a, Acc{to_float(p[j * inner]), j});
    }
    sv[ty][tx] = a.v;
    si[ty][tx] = a.i;
    __syncthreads();
    if (ty == 0 && col < inner) {
      for (int k = 1; k < kColRows; ++k) a = R::combine(a, Acc{sv[k][tx], si[k][tx]});
      if (out) out[o * inner + col] = from_float<T>(a.v * scale);
      if (indices) indices[o * inner + col] = a.i;
    }
    __syncthreads();  // the tile's partials are read before the next tile overwrites them
  }
}

template <class T, ReduceOp Op>
void launch_reduce(const void* xv, void* outv, int64_t* indices, int64_t outer, int64_t n,
                   int64_t inner, float scale, cudaStream_t stream) {
  const T* x = static_cast<const T*>(xv);
  T* out = static_cast<T*>(outv);
  if (inner == 1) {
    const int64_t rows = outer;
    auto* k = &reduce_rows_kernel<T, Op>;
    if (n <= 1024) {
      const dim3 block(32, 4);
      STOKE_LAUNCH(k, static_cast<unsigned>((rows + 3) / 4), block, 0, stream)
      (x, out, indices, rows, n, scale);
    } else {
      STOKE_LAUNCH(k, static_cast<unsigned>(rows), dim3(256), 0, stream)
      (x, out, indices, rows, n, scale);
    }
  } else {
    const int64_t tiles = (inner + kColTile - 1) / kColTile;
    auto* k = &reduce_cols_kernel<T, Op>;
    STOKE_LAUNCH(k, ew::grid_for(outer * tiles, 1, 65535), dim3(kColTile, kColRows), 0, stream)
    (x, out, indices, outer, n, inner, scale);
  }
  STOKE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void reduce(ReduceOp op, DType dtype, const void* x, void* out, int64_t* indices, int64_t outer,
            int64_t n, int64_t inner, cudaStream_t stream) {
  STOKE_NVTX_RANGE("stoke::cuda::reduce");
  const char* name = "cuda::reduce";
  STOKE_CHECK(outer >= 0 && n >= 0 && inner >= 0, name,
              "expected non-negative sizes [outer, n, inner], got [", outer, ", ", n, ", ", inner,
              "]");
  const bool indexed = op == ReduceOp::max || op == ReduceOp::min;
  STOKE_CHECK(indexed || indices == nullptr, name,
              "expected no indices output for sum/mean, got one");
  STOKE_CHECK(!indexed || n > 0, name, "expected a non-empty reduced dim for max/min, got size 0");
  if (outer == 0 || inner == 0) return;
  const float scale = op == ReduceOp::mean ? 1.f / static_cast<float>(n) : 1.f;
  ew::dispatch_floating(dtype, name, [&](auto tag) {
    using T = decltype(tag);
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::mean:
        return launch_reduce<T, ReduceOp::sum>(x, out, indices, outer, n, inner, scale, stream);
      case ReduceOp::max:
        return launch_reduce<T, ReduceOp::max>(x, out, indices, outer, n, inner, scale, stream);
      case ReduceOp::min:
        return launch_reduce<T, ReduceOp::min>(x, out, indices, outer, n, inner, scale, stream);
    }
  });
}

}  // namespace stoke::cuda
