// cuda/emu's NCCL: the arithmetic of its reductions (cuda/emu/nccl_reduce.h).
#include "cuda/emu/nccl_reduce.h"

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace stoke::emu::nccl {
namespace {

template <class T, class A>
A load(const unsigned char* p, std::size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else {
    return static_cast<A>(v);
  }
}

template <class T, class A>
void store(unsigned char* p, std::size_t i, A a) {
  T v;
  if constexpr (std::is_same_v<T, __half>) {
    v = __float2half_rn(a);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    v = __float2bfloat16_rn(a);
  } else {
    v = static_cast<T>(a);
  }
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

// Integers wrap: they are added and multiplied unsigned (signed overflow would be undefined).
template <class A>
A combine(A a, A b, ncclRedOp_t op) {
  using W = typename std::conditional_t<std::is_integral_v<A>, std::make_unsigned<A>,
                                        std::type_identity<A>>::type;
  switch (op) {
    case ncclSum:
    case ncclAvg:
      return static_cast<A>(static_cast<W>(static_cast<W>(a) + static_cast<W>(b)));
    case ncclProd:
      return static_cast<A>(static_cast<W>(static_cast<W>(a) * static_cast<W>(b)));
    case ncclMax:
      return b > a ? b : a;
    case ncclMin:
      return b < a ? b : a;
    default:
      return a;
  }
}

// out[i] = in[0][i] op in[1][i] op ... in rank order, accumulated in A and rounded once to T.
template <class T, class A>
void reduce_as(const std::vector<const unsigned char*>& in, unsigned char* out, std::size_t n,
               ncclRedOp_t op) {
  for (std::size_t i = 0; i < n; ++i) {
    A acc = load<T, A>(in[0], i);
    for (std::size_t r = 1; r < in.size(); ++r) acc = combine(acc, load<T, A>(in[r], i), op);
    if (op == ncclAvg) acc = static_cast<A>(acc / static_cast<A>(in.size()));
    store<T, A>(out, i, acc);
  }
}

using ReduceFn = void (*)(const std::vector<const unsigned char*>&, unsigned char*, std::size_t,
                          ncclRedOp_t);
// Indexed by ncclDataType_t (ncclInt8 ... ncclBfloat16).
constexpr ReduceFn kReduce[] = {&reduce_as<std::int8_t, std::int8_t>,
                                &reduce_as<std::uint8_t, std::uint8_t>,
                                &reduce_as<std::int32_t, std::int32_t>,
                                &reduce_as<std::uint32_t, std::uint32_t>,
                                &reduce_as<std::int64_t, std::int64_t>,
                                &reduce_as<std::uint64_t, std::uint64_t>,
                                &reduce_as<__half, float>,
                                &reduce_as<float, float>,
                                &reduce_as<double, double>,
                                &reduce_as<__nv_bfloat16, float>};

}  // namespace

void reduce(ncclDataType_t t, const std::vector<const unsigned char*>& in, unsigned char* out,
            std::size_t n, ncclRedOp_t op) {
  kReduce[static_cast<int>(t)](in, out, n, op);  // t was checked by type_size
}

}  // namespace stoke::emu::nccl
