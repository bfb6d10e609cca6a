// CPU dropout. Philox4x32-10 is evaluated for kGroup blocks at once in lane arrays, which the
// compiler vectorizes (the 32x32->64 multiplies map to vpmuludq): generating the mask costs about
// as much as reading the input, instead of dominating it. The rounds are core/philox.h's, the
// generator's and the CUDA kernel's (tests check the three agree).
#include <cmath>
#include <cstring>

#include "core/parallel.h"
#include "core/philox.h"
#include "ops/check.h"
#include "ops/cpu/backend.h"
#include "ops/creation.h"
#include "ops/dropout.h"

namespace stoke::ops::cpu {
namespace {

constexpr int64_t kGroup = 16;  // Philox blocks per vectorized group (64 elements)

// r[4 * j + k] = output k of Philox block (first + j) under `key`, for j < kGroup: the random
// number of element 4 * j + k of the group. counter_hi = 0 as in the generator's fills.
void philox_group(uint64_t first, uint64_t key, uint32_t (&r)[4 * kGroup]) {
  // One lane per block, the rounds inlined and unrolled: the lane loop is straight-line code.
  for (int64_t j = 0; j < kGroup; ++j) {
    const uint64_t ctr = first + static_cast<uint64_t>(j);
    uint32_t c0 = static_cast<uint32_t>(ctr), c1 = static_cast<uint32_t>(ctr >> 32), c2 = 0, c3 = 0;
    philox4x32_10(c0, c1, c2, c3, key);
    r[4 * j] = c0;
    r[4 * j + 1] = c1;
    r[4 * j + 2] = c2;
    r[4 * j + 3] = c3;
  }
}

}  // namespace

DropoutResult CpuBackend::dropout_with_mask(const Tensor& input, double p, GeneratorState st) {
  const char* op = "dropout";
  check_float(op, input, "input");
  const int64_t n = input.numel();
  const Tensor x = input.contiguous();
  // Element kept when its uniform (r >> 8) * 2^-24 is below 1 - p, i.e. (r >> 8) < threshold.
  const uint32_t threshold = static_cast<uint32_t>(std::ceil((1.0 - p) * 0x1p24));
  DropoutResult r;
  r.output = empty(x.shape(), {.dtype = x.dtype()});
  r.mask = empty(x.shape(), {.dtype = DType::u8});
  uint8_t* mask = r.mask.data<uint8_t>();
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* out = r.output.data<T>();
    const T scale = T(1.0 / (1.0 - p));
    const int64_t groups = (n + 4 * kGroup - 1) / (4 * kGroup);
    parallel_for(0, groups, 256, [&](int64_t gb, int64_t ge) {
      uint32_t rnd[4 * kGroup];
      uint8_t keep[4 * kGroup];
      T mult[4 * kGroup];
      for (int64_t grp = gb; grp < ge; ++grp) {
        philox_group(st.offset + static_cast<uint64_t>(grp * kGroup), st.seed, rnd);
        // Separate loops of one element width each: both vectorize (a fused loop with a
        // branch on the keep bit did not, and mispredicted half the time).
        for (int64_t i = 0; i < 4 * kGroup; ++i)
          rnd[i] = static_cast<uint32_t>((rnd[i] >> 8) < threshold);
        for (int64_t i = 0; i < 4 * kGroup; ++i) keep[i] = static_cast<uint8_t>(rnd[i]);
        for (int64_t i = 0; i < 4 * kGroup; ++i) mult[i] = static_cast<T>(rnd[i]) * scale;
        const int64_t base = grp * 4 * kGroup;
        const int64_t count = std::min<int64_t>(4 * kGroup, n - base);
        std::memcpy(mask + base, keep, static_cast<size_t>(count));
        const T* __restrict src = in + base;
        T* __restrict dst = out + base;
        // x * 0 keeps NaN as NaN for dropped elements, as torch's x * mask does.
        if (count == 4 * kGroup)
          for (int64_t i = 0; i < 4 * kGroup; ++i) dst[i] = src[i] * mult[i];
        else
          for (int64_t i = 0; i < count; ++i) dst[i] = src[i] * mult[i];
      }
    });
  });
  return r;
}

Tensor CpuBackend::dropout_backward(const Tensor& grad_output, const Tensor& mask, double p) {
  const char* op = "dropout_backward";
  check_float(op, grad_output, "grad_output");
  const Tensor g = grad_output.contiguous(), m = mask.contiguous();
  Tensor out = empty(g.shape(), {.dtype = g.dtype()});
  const int64_t n = g.numel();
  dispatch_float(g.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* gp = g.data<T>();
    const uint8_t* mp = m.data<uint8_t>();
    T* o = out.data<T>();
    const T scale = p < 1 ? T(1.0 / (1.0 - p)) : T(0);
    parallel_for(0, n, 1 << 15, [&](int64_t b, int64_t e) {
      const T* __restrict src = gp;
      const uint8_t* __restrict keep = mp;
      T* __restrict dst = o;
      for (int64_t i = b; i < e; ++i) dst[i] = src[i] * T(keep[i]) * scale;
    });
  });
  return out;
}

}  // namespace stoke::ops::cpu
