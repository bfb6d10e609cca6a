// cuda/emu's execution model: indexing, barriers, shared memory, warp exchanges, atomics and
// half types, each checked against a host computation. Kernels run on plain host memory (in emu a
// device pointer is a host pointer).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "core/half.h"
#include "cuda/compat.h"

namespace {

// ---- indexing ----

__global__ void record_index(unsigned* visits, uint3* thread_of, uint3* block_of, dim3* dims) {
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned id = block * (blockDim.x * blockDim.y * blockDim.z) + thread;
  atomicAdd(&visits[id], 1u);
  thread_of[id] = threadIdx;
  block_of[id] = blockIdx;
  if (id == 0) {
    dims[0] = blockDim;
    dims[1] = gridDim;
  }
}

// ---- barriers and shared memory ----

constexpr unsigned kReduceBlock = 256;

__global__ void block_sum(const float* in, float* out, int n) {
  __shared__ float partial[kReduceBlock];
  const unsigned t = threadIdx.x;
  const unsigned i = blockIdx.x * blockDim.x + t;
  partial[t] = i < static_cast<unsigned>(n) ? in[i] : 0.0f;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = partial[0];
}

// Threads past n return before two barriers; the rest must not wait for them.
__global__ void early_return(int* out, int n) {
  __shared__ int value[64];
  const int t = static_cast<int>(threadIdx.x);
  if (t >= n) return;
  value[t] = t * 3;
  __syncthreads();
  const int neighbour = value[(t + 1) % n];
  __syncthreads();
  value[t] = neighbour + 1;
  __syncthreads();
  out[t] = value[(t + n - 1) % n];
}

__global__ void reverse_dynamic(const float* in, float* out, int n) {
  STOKE_DYNAMIC_SHARED(float, buf);
  const int t = static_cast<int>(threadIdx.x);
  const int base = static_cast<int>(blockIdx.x) * n;
  buf[t] = in[base + t];
  __syncthreads();
  out[base + t] = buf[n - 1 - t];
}

__global__ void barrier_votes(int* count, int* all, int* any, int threshold) {
  const int t = static_cast<int>(threadIdx.x);
  const int c = __syncthreads_count(t < threshold);
  const int a = __syncthreads_and(t < threshold);
  const int o = __syncthreads_or(t < threshold);
  if (t == 0) {
    *count = c;
    *all = a;
    *any = o;
  }
}

__global__ void grid_stride_scale(const float* in, float* out, int n, float alpha) {
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < n;
       i += static_cast<int>(gridDim.x * blockDim.x)) {
    out[i] = alpha * in[i];
  }
}

template <class T, int kScale>
__global__ void scale_template(T* data, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) data[i] = data[i] * static_cast<T>(kScale);
}

// ---- warps ----

// out[op * threads + t]: the shuffles of lane values 100 + t.
__global__ void shuffles(int* out, int width, int threads) {
  const int t = static_cast<int>(threadIdx.x);
  const int v = 100 + t;
  out[0 * threads + t] = __shfl_xor_sync(0xffffffffu, v, 1, width);
  out[1 * threads + t] = __shfl_xor_sync(0xffffffffu, v, 5, width);
  out[2 * threads + t] = __shfl_down_sync(0xffffffffu, v, 3, width);
  out[3 * threads + t] = __shfl_up_sync(0xffffffffu, v, 2, width);
  out[4 * threads + t] = __shfl_sync(0xffffffffu, v, 7, width);
  out[5 * threads + t] = __shfl_sync(0xffffffffu, v, t + 1, width);  // per-lane source
}

__global__ void warp_sum_double(const double* in, double* out) {
  double v = in[threadIdx.x];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) out[threadIdx.x / 32] = v;
}

__global__ void votes(unsigned* ballot, int* any, int* all, unsigned* active) {
  const unsigned t = threadIdx.x;
  const unsigned lane = t % 32;
  const unsigned warp = t / 32;
  ballot[t] = __ballot_sync(0xffffffffu, lane % 3 == 0);
  any[t] = __any_sync(0xffffffffu, lane == 31);
  all[t] = __all_sync(0xffffffffu, lane < 40);
  // No lane returns before every lane has passed the __syncwarp, so all are active here.
  const unsigned mask = __activemask();
  __syncwarp();
  if (lane == 0) active[warp] = mask;
}

// The warp's two halves vote with disjoint masks at the same time.
__global__ void split_votes(unsigned* ballot, int* sum) {
  const unsigned lane = threadIdx.x % 32;
  const unsigned mask = lane < 16 ? 0x0000ffffu : 0xffff0000u;
  ballot[threadIdx.x] = __ballot_sync(mask, lane % 2 == 0);
  int v = static_cast<int>(lane);
  for (int offset = 8; offset > 0; offset /= 2) v += __shfl_xor_sync(mask, v, offset, 16);
  sum[threadIdx.x] = v;
}

// Lanes past `live` return first; the others' full-mask exchanges must not wait for them. After
// the full-mask __syncwarp every other lane has returned, so __activemask() is exactly the live.
__global__ void warp_after_exit(unsigned* ballot, unsigned* active, int live) {
  if (static_cast<int>(threadIdx.x) >= live) return;
  __syncwarp();
  ballot[threadIdx.x] = __ballot_sync(0xffffffffu, 1);
  const unsigned mask = __activemask();
  __syncwarp();  // no live lane returns before all have read the mask
  if (threadIdx.x == 0) *active = mask;
}

// ---- atomics ----

__global__ void atomics(float* f, int* i, unsigned long long* u, double* d, int* mx, int* mn,
                        unsigned* inc, float* fmax) {
  const int t = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  atomicAdd(f, 0.5f);
  atomicAdd(i, t);
  atomicAdd(u, 1ull << 33);
  atomicAdd(d, 0.25);
  atomicMax(mx, (t * 7919) % 1000);
  atomicMin(mn, (t * 7919) % 1000 - 500);
  atomicInc(inc, 99u);
  // A float max through a compare-and-swap loop, the classic pattern.
  const float value = static_cast<float>((t * 31) % 977) * 0.5f;
  auto* bits = reinterpret_cast<unsigned*>(fmax);
  unsigned old = atomicAdd(bits, 0u);  // an atomic load: a plain read would race with the CAS
  while (__uint_as_float(old) < value) {
    const unsigned seen = atomicCAS(bits, old, __float_as_uint(value));
    if (seen == old) break;
    old = seen;
  }
}

__global__ void half_atomics(__half* h, __nv_bfloat16* b) {
  atomicAdd(h, __float2half(1.0f));
  atomicAdd(b, __float2bfloat16(1.0f));
}

// ---- half types ----

__global__ void half_round_trip(const float* in, unsigned short* h, unsigned short* b,
                                float* h_back, float* b_back, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  const __half x = __float2half(in[i]);
  const __nv_bfloat16 y = __float2bfloat16(in[i]);
  h[i] = __half_as_ushort(x);
  b[i] = __bfloat16_as_ushort(y);
  h_back[i] = __half2float(x);
  b_back[i] = __bfloat162float(y);
}

}  // namespace

TEST_CASE("cuda emu: every (block, thread) runs once with CUDA's indices", "[cuda][emu]") {
  const auto [grid, block] = GENERATE(table<dim3, dim3>({
      {dim3(5), dim3(7)},
      {dim3(3, 2), dim3(4, 3)},
      {dim3(2, 3, 2), dim3(4, 3, 2)},
      {dim3(1), dim3(1024)},
  }));
  const unsigned threads = block.x * block.y * block.z;
  const unsigned total = grid.x * grid.y * grid.z * threads;
  std::vector<unsigned> visits(total, 0);
  std::vector<uint3> thread_of(total), block_of(total);
  std::vector<dim3> dims(2);
  STOKE_LAUNCH(record_index, grid, block, 0, nullptr)
  (visits.data(), thread_of.data(), block_of.data(), dims.data());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  CHECK(std::all_of(visits.begin(), visits.end(), [](unsigned v) { return v == 1; }));
  CHECK(dims[0].x == block.x);
  CHECK(dims[0].y == block.y);
  CHECK(dims[0].z == block.z);
  CHECK(dims[1].x == grid.x);
  CHECK(dims[1].y == grid.y);
  CHECK(dims[1].z == grid.z);
  for (unsigned id = 0; id < total; ++id) {
    const unsigned b = id / threads, t = id % threads;
    const uint3 ti = thread_of[id], bi = block_of[id];
    REQUIRE(ti.x == t % block.x);
    REQUIRE(ti.y == (t / block.x) % block.y);
    REQUIRE(ti.z == t / (block.x * block.y));
    REQUIRE(bi.x == b % grid.x);
    REQUIRE(bi.y == (b / grid.x) % grid.y);
    REQUIRE(bi.z == b / (grid.x * grid.y));
  }
}

TEST_CASE("cuda emu: shared-memory tree reduction with __syncthreads", "[cuda][emu]") {
  const int n = GENERATE(1, 255, 256, 1000);
  std::vector<float> in(n);
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i % 17) - 8.0f;
  const int blocks = (n + kReduceBlock - 1) / kReduceBlock;
  std::vector<float> out(blocks, -1.0f);
  STOKE_LAUNCH(block_sum, blocks, kReduceBlock, 0, nullptr)(in.data(), out.data(), n);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  for (int b = 0; b < blocks; ++b) {
    const int lo = b * static_cast<int>(kReduceBlock);
    const int hi = std::min(n, lo + static_cast<int>(kReduceBlock));
    CHECK(out[b] == std::accumulate(in.begin() + lo, in.begin() + hi, 0.0f));
  }
}

TEST_CASE("cuda emu: threads that return early drop out of later barriers", "[cuda][emu]") {
  const int n = GENERATE(1, 13, 33, 63);
  std::vector<int> out(64, -1);
  STOKE_LAUNCH(early_return, 2, 64, 0, nullptr)(out.data(), n);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  for (int t = 0; t < n; ++t) CHECK(out[t] == 3 * t + 1);
  CHECK(out[n % 64] == (n == 64 ? out[0] : -1));
}

TEST_CASE("cuda emu: dynamic shared memory is the launch's size, per block", "[cuda][emu]") {
  const int n = GENERATE(1, 5, 128);
  const int blocks = 3;
  std::vector<float> in(n * blocks), out(n * blocks, 0.0f);
  std::iota(in.begin(), in.end(), 1.0f);
  STOKE_LAUNCH(reverse_dynamic, blocks, n, n * sizeof(float), nullptr)(in.data(), out.data(), n);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < n; ++t) CHECK(out[b * n + t] == in[b * n + n - 1 - t]);
}

TEST_CASE("cuda emu: __syncthreads_count/_and/_or", "[cuda][emu]") {
  const int threshold = GENERATE(0, 1, 77, 96);
  int count = -1, all = -1, any = -1;
  STOKE_LAUNCH(barrier_votes, 1, 96, 0, nullptr)(&count, &all, &any, threshold);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  CHECK(count == threshold);
  CHECK(all == (threshold == 96 ? 1 : 0));
  CHECK(any == (threshold > 0 ? 1 : 0));
}

TEST_CASE("cuda emu: grid-stride loop with 1024-thread blocks", "[cuda][emu]") {
  const int n = 5000;
  std::vector<float> in(n), out(n, 0.0f);
  std::iota(in.begin(), in.end(), 0.0f);
  STOKE_LAUNCH(grid_stride_scale, 2, 1024, 0, nullptr)(in.data(), out.data(), n, 2.0f);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  for (int i = 0; i < n; ++i) REQUIRE(out[i] == 2.0f * in[i]);
}

TEST_CASE("cuda emu: a template kernel launches through a pointer", "[cuda][emu]") {
  std::vector<double> data{1.0, 2.0, 3.0};
  auto* kernel = &scale_template<double, 3>;
  STOKE_LAUNCH(kernel, 1, 32, 0, nullptr)(data.data(), 3);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  CHECK(data == std::vector<double>{3.0, 6.0, 9.0});
}

TEST_CASE("cuda emu: shuffles match CUDA's definition", "[cuda][emu]") {
  const int width = GENERATE(32, 16, 8);
  const int threads = 64;
  std::vector<int> out(6 * threads, -1);
  STOKE_LAUNCH(shuffles, 1, threads, 0, nullptr)(out.data(), width, threads);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  for (int t = 0; t < threads; ++t) {
    const int lane = t % 32, warp_base = t - lane;
    const int base = lane & ~(width - 1);  // segment start within the warp
    auto v = [&](int l) { return 100 + warp_base + l; };
    auto xor_src = [&](int m) {
      const int s = lane ^ m;
      return s >= base + width ? lane : s;
    };
    INFO("width " << width << " thread " << t);
    CHECK(out[0 * threads + t] == v(xor_src(1)));
    CHECK(out[1 * threads + t] == v(xor_src(5)));
    CHECK(out[2 * threads + t] == v(lane + 3 >= base + width ? lane : lane + 3));
    CHECK(out[3 * threads + t] == v(lane - 2 < base ? lane : lane - 2));
    CHECK(out[4 * threads + t] == v(base + 7 % width));
    CHECK(out[5 * threads + t] == v(base + ((t + 1) & (width - 1))));
  }
}

TEST_CASE("cuda emu: a shuffle-down warp reduction of doubles", "[cuda][emu]") {
  std::vector<double> in(96), out(3, 0.0);
  for (int i = 0; i < 96; ++i) in[i] = 0.5 * i;
  STOKE_LAUNCH(warp_sum_double, 1, 96, 0, nullptr)(in.data(), out.data());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  for (int w = 0; w < 3; ++w)
    CHECK(out[w] == std::accumulate(in.begin() + 32 * w, in.begin() + 32 * w + 32, 0.0));
}

TEST_CASE("cuda emu: votes and __activemask, including a partial last warp", "[cuda][emu]") {
  const int threads = 48;  // warp 1 has 16 lanes
  std::vector<unsigned> ballot(threads), active(2);
  std::vector<int> any(threads), all(threads);
  STOKE_LAUNCH(votes, 1, threads, 0, nullptr)(ballot.data(), any.data(), all.data(), active.data());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  for (int t = 0; t < threads; ++t) {
    const int lanes = t < 32 ? 32 : 16;
    unsigned want = 0;
    for (int l = 0; l < lanes; l += 3) want |= 1u << l;
    CHECK(ballot[t] == want);
    CHECK(any[t] == (lanes == 32 ? 1 : 0));
    CHECK(all[t] == 1);
  }
  CHECK(active[0] == 0xffffffffu);
  CHECK(active[1] == 0x0000ffffu);
}

TEST_CASE("cuda emu: disjoint partial masks exchange independently", "[cuda][emu]") {
  std::vector<unsigned> ballot(64);
  std::vector<int> sum(64);
  STOKE_LAUNCH(split_votes, 1, 64, 0, nullptr)(ballot.data(), sum.data());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32;
    CHECK(ballot[t] == (lane < 16 ? 0x00005555u : 0x55550000u));
    CHECK(sum[t] == (lane < 16 ? 120 : 376));  // 0+..+15, 16+..+31
  }
}

TEST_CASE("cuda emu: returned lanes drop out of warp exchanges", "[cuda][emu]") {
  const int live = GENERATE(1, 17, 31);
  std::vector<unsigned> ballot(32, 0);
  unsigned active = 0;
  STOKE_LAUNCH(warp_after_exit, 1, 32, 0, nullptr)(ballot.data(), &active, live);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const unsigned want = (1u << live) - 1;
  for (int t = 0; t < live; ++t) CHECK(ballot[t] == want);
  CHECK(active == want);
}

TEST_CASE("cuda emu: atomics under contention", "[cuda][emu]") {
  const int blocks = 4, threads = 256, n = blocks * threads;
  float f = 0.0f, fmax = -1.0f;
  int i = 0, mx = -1, mn = 1000;
  unsigned long long u = 0;
  double d = 0.0;
  unsigned inc = 0;
  STOKE_LAUNCH(atomics, blocks, threads, 0, nullptr)(&f, &i, &u, &d, &mx, &mn, &inc, &fmax);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  CHECK(f == 0.5f * n);
  CHECK(i == n * (n - 1) / 2);
  CHECK(u == static_cast<unsigned long long>(n) << 33);
  CHECK(d == 0.25 * n);
  int want_max = -1, want_min = 1000;
  float want_fmax = -1.0f;
  for (int t = 0; t < n; ++t) {
    want_max = std::max(want_max, (t * 7919) % 1000);
    want_min = std::min(want_min, (t * 7919) % 1000 - 500);
    want_fmax = std::max(want_fmax, static_cast<float>((t * 31) % 977) * 0.5f);
  }
  CHECK(mx == want_max);
  CHECK(mn == want_min);
  CHECK(inc == static_cast<unsigned>(n % 100));
  CHECK(fmax == want_fmax);
}

TEST_CASE("cuda emu: atomicAdd on __half and __nv_bfloat16", "[cuda][emu]") {
  __half h = __float2half(0.0f);
  __nv_bfloat16 b = __float2bfloat16(0.0f);
  STOKE_LAUNCH(half_atomics, 2, 100, 0, nullptr)(&h, &b);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  CHECK(__half2float(h) == 200.0f);      // exact in f16
  CHECK(__bfloat162float(b) == 200.0f);  // exact in bf16 (8 significant bits)
}

TEST_CASE("cuda emu: __half and __nv_bfloat16 round like stoke's CPU conversions", "[cuda][emu]") {
  std::vector<float> in{0.0f,     -0.0f,         1.0f,           -2.5f,       0.1f,
                        65504.0f, 70000.0f,      1e-7f,          3.14159265f, -1e30f,
                        6.1e-5f,  1.0009765625f, 1.00048828125f, INFINITY,    -INFINITY};
  for (int i = 0; i < 100; ++i) in.push_back(std::ldexp(1.0f + i * 0.0137f, i % 40 - 20));
  const int n = static_cast<int>(in.size());
  std::vector<unsigned short> h(n), b(n);
  std::vector<float> hb(n), bb(n);
  STOKE_LAUNCH(half_round_trip, (n + 63) / 64, 64, 0, nullptr)
  (in.data(), h.data(), b.data(), hb.data(), bb.data(), n);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  for (int i = 0; i < n; ++i) {
    INFO("value " << in[i]);
    CHECK(h[i] == stoke::detail::float_to_half_bits(in[i]));
    CHECK(b[i] == stoke::detail::float_to_bf16_bits(in[i]));
    CHECK(hb[i] == stoke::detail::half_bits_to_float(h[i]));
    CHECK(bb[i] == stoke::detail::bf16_bits_to_float(b[i]));
  }
}
