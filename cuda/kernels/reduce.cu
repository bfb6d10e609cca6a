// CUDA reductions (see reduce.h). Every op is a (value, position) accumulator combined by a
// Reducer; sum/mean ignore the position. The combine of max/min is order-independent (NaN first,
// then value, then lowest position), so the tree reductions give exactly ops::max_with_indices'
// answer; sums are combined in a fixed order for a given launch, so results are reproducible.
#include "cuda/kernels/reduce.h"

#include <algorithm>
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

// Slices per row for the two-stage path (1: one stage). Rows of at least kTwoStageMin elements,
// fewer rows than kTwoStageRows (below, one block per row leaves most SMs idle), slices of at
// least kChunkMin elements (each block's 256 threads get 16 elements or more), at most kMaxChunks.
constexpr int64_t kTwoStageMin = 32768, kTwoStageRows = 64, kChunkMin = 4096, kMaxChunks = 1024;

int64_t reduce_chunks(int64_t outer, int64_t n, int64_t inner) {
  if (inner != 1 || outer >= kTwoStageRows || n < kTwoStageMin) return 1;
  return std::min<int64_t>(kMaxChunks, (n + kChunkMin - 1) / kChunkMin);
}

// Two-stage reduction of few long rows (a whole tensor, a clip_grad_norm_'s sum of squares): one
// block per row would use one SM of a hundred. Stage 1: blockIdx.y is the row, blockIdx.x one of
// `chunks` contiguous slices of it, reduced to a partial (value, position) in the workspace.
template <class T, ReduceOp Op>
__global__ void __launch_bounds__(256)
    reduce_partial_kernel(const T* x, float* part_v, int64_t* part_i, int64_t n, int64_t chunk) {
  using R = Reducer<Op>;
  const int64_t row = blockIdx.y, begin = static_cast<int64_t>(blockIdx.x) * chunk;
  const int64_t end = begin + chunk < n ? begin + chunk : n;
  const T* p = x + row * n;
  Acc a = R::identity();
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x)
    a = R::combine(a, Acc{to_float(p[j]), j});
  a = block_reduce_acc<R>(a);
  if (threadIdx.x == 0) {
    part_v[row * gridDim.x + blockIdx.x] = a.v;
    part_i[row * gridDim.x + blockIdx.x] = a.i;
  }
}

// Stage 2: one block per row combines its `chunks` partials in a fixed order.
template <class T, ReduceOp Op>
__global__ void __launch_bounds__(256)
    reduce_finish_kernel(const float* part_v, const int64_t* part_i, T* out, int64_t* indices,
                         int64_t chunks, float scale) {
  using R = Reducer<Op>;
  const int64_t row = blockIdx.x;
  Acc a = R::identity();
  for (int64_t j = threadIdx.x; j < chunks; j += blockDim.x)
    a = R::combine(a, Acc{part_v[row * chunks + j], part_i[row * chunks + j]});
  a = block_reduce_acc<R>(a);
  if (threadIdx.x == 0) {
    if (out) out[row] = from_float<T>(a.v * scale);
    if (indices) indices[row] = a.i;
  }
}

template <class T, ReduceOp Op>
void launch_reduce(const void* xv, void* outv, int64_t* indices, int64_t outer, int64_t n,
                   int64_t inner, float scale, void* workspace, cudaStream_t stream) {
  const T* x = static_cast<const T*>(xv);
  T* out = static_cast<T*>(outv);
  const int64_t chunks = reduce_chunks(outer, n, inner);
  if (chunks > 1) {
    auto* part_v = static_cast<float*>(workspace);
    auto* part_i = reinterpret_cast<int64_t*>(part_v + ((outer * chunks + 1) / 2) * 2);
    auto* k1 = &reduce_partial_kernel<T, Op>;
    STOKE_LAUNCH(k1, dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(outer)), 256, 0,
                 stream)
    (x, part_v, part_i, n, (n + chunks - 1) / chunks);
    STOKE_CUDA_CHECK(cudaGetLastError());
    auto* k2 = &reduce_finish_kernel<T, Op>;
    STOKE_LAUNCH(k2, static_cast<unsigned>(outer), 256, 0, stream)
    (part_v, part_i, out, indices, chunks, scale);
  } else if (inner == 1) {
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

size_t reduce_workspace_bytes(int64_t outer, int64_t n, int64_t inner) {
  const int64_t chunks = reduce_chunks(outer, n, inner);
  if (chunks <= 1) return 0;
  const int64_t parts = outer * chunks;
  return static_cast<size_t>((parts + 1) / 2 * 2) * sizeof(float) +
         static_cast<size_t>(parts) * sizeof(int64_t);
}

void reduce(ReduceOp op, DType dtype, const void* x, void* out, int64_t* indices, int64_t outer,
            int64_t n, int64_t inner, void* workspace, cudaStream_t stream) {
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
  STOKE_CHECK(workspace != nullptr || reduce_workspace_bytes(outer, n, inner) == 0, name,
              "expected a workspace of ", reduce_workspace_bytes(outer, n, inner),
              " bytes for [outer, n, inner] = [", outer, ", ", n, ", ", inner, "], got none");
  const float scale = op == ReduceOp::mean ? 1.f / static_cast<float>(n) : 1.f;
  ew::dispatch_floating(dtype, name, [&](auto tag) {
    using T = decltype(tag);
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::mean:
        return launch_reduce<T, ReduceOp::sum>(x, out, indices, outer, n, inner, scale, workspace,
                                               stream);
      case ReduceOp::max:
        return launch_reduce<T, ReduceOp::max>(x, out, indices, outer, n, inner, scale, workspace,
                                               stream);
      case ReduceOp::min:
        return launch_reduce<T, ReduceOp::min>(x, out, indices, outer, n, inner, scale, workspace,
                                               stream);
    }
  });
}

}  // namespace stoke::cuda
