#include <catch2/catch.hpp>

#include "stoke/stoke.h"

using namespace stoke;

namespace {
std::vector<float> values(const Tensor& t) {
  return t.to_vector<float>();
}
}  // namespace

TEST_CASE("tensor: shape, strides, contiguity", "[core][tensor]") {
  Tensor t = arange(24).view({2, 3, 4});
  CHECK(t.shape() == Shape{2, 3, 4});
  CHECK(t.strides() == Shape{12, 4, 1});
  CHECK(t.dim() == 3);
  CHECK(t.size(-1) == 4);
  CHECK(t.numel() == 24);
  CHECK(t.is_contiguous());
  CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % kCpuAlignment == 0);
  Tensor tt = t.transpose(0, 2);
  CHECK(tt.shape() == Shape{4, 3, 2});
  CHECK(tt.strides() == Shape{1, 4, 12});
  CHECK_FALSE(tt.is_contiguous());
  CHECK(tt.storage() == t.storage());
}

TEST_CASE("tensor: views share storage and read the right elements", "[core][tensor]") {
  Tensor t = arange(12).view({3, 4});
  CHECK(values(t.t()) == std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  CHECK(values(t.narrow(1, 1, 2)) == std::vector<float>{1, 2, 5, 6, 9, 10});
  CHECK(values(t.slice(1, 0, 4, 2)) == std::vector<float>{0, 2, 4, 6, 8, 10});
  CHECK(values(t.select(0, -1)) == std::vector<float>{8, 9, 10, 11});
  CHECK(values(t.permute({1, 0})) == values(t.t()));
  CHECK(t.unsqueeze(0).shape() == Shape{1, 3, 4});
  CHECK(t.unsqueeze(-1).shape() == Shape{3, 4, 1});
  CHECK(t.unsqueeze(1).squeeze().shape() == Shape{3, 4});
  CHECK(t.unsqueeze(1).squeeze(1).shape() == Shape{3, 4});
  CHECK(t.view({-1}).shape() == Shape{12});
  CHECK(t.view({2, -1, 2}).shape() == Shape{2, 3, 2});
  CHECK(t.flatten().shape() == Shape{12});
  Tensor s = scalar_tensor(5);  // 0-dim tensors view and reshape like any other
  CHECK(s.view({1, 1}).shape() == Shape{1, 1});
  CHECK(s.reshape({-1}).item() == 5);
  CHECK(s.flatten().shape() == Shape{1});
  CHECK(s.view({1}).view({}).dim() == 0);
  Tensor row = arange(3).view({3, 1});
  Tensor e = row.expand({3, 4});
  CHECK(e.strides() == Shape{1, 0});
  CHECK(values(e) == std::vector<float>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2});
  CHECK(row.expand({2, -1, 4}).shape() == Shape{2, 3, 4});
  // Writes through a view are visible in the base.
  t.select(0, 1).copy_(full({4}, 7));
  CHECK(values(t.select(0, 1)) == std::vector<float>{7, 7, 7, 7});
}

TEST_CASE("tensor: contiguous, clone, reshape of non-contiguous data", "[core][tensor]") {
  Tensor t = arange(6).view({2, 3});
  Tensor tt = t.t();
  Tensor c = tt.contiguous();
  CHECK(c.is_contiguous());
  CHECK(c.storage() != t.storage());
  CHECK(values(c) == std::vector<float>{0, 3, 1, 4, 2, 5});
  CHECK(t.contiguous().storage() == t.storage());
  CHECK_THROWS_WITH(tt.view({6}), Catch::Contains("use reshape()"));
  CHECK(values(tt.reshape({6})) == std::vector<float>{0, 3, 1, 4, 2, 5});
  Tensor cl = t.clone();
  cl.copy_(zeros({2, 3}));
  CHECK(values(t) == std::vector<float>{0, 1, 2, 3, 4, 5});
}

TEST_CASE("tensor: casts between all dtypes", "[core][tensor]") {
  // Exact: every value is representable in every floating dtype (and truncates as C++ does).
  Tensor t = from_vector<double>({-2.5, 0, 1, 3.75, 255}, {5}, {.dtype = DType::f64});
  CHECK(t.to(DType::f32).to_vector<double>() == std::vector<double>{-2.5, 0, 1, 3.75, 255});
  CHECK(t.to(DType::f16).to_vector<double>() == std::vector<double>{-2.5, 0, 1, 3.75, 255});
  CHECK(t.to(DType::bf16).to_vector<double>() == std::vector<double>{-2.5, 0, 1, 3.75, 255});
  CHECK(t.to(DType::i32).to_vector<int>() == std::vector<int>{-2, 0, 1, 3, 255});
  CHECK(t.to(DType::i64).to_vector<int64_t>() == std::vector<int64_t>{-2, 0, 1, 3, 255});
  CHECK(t.to(DType::boolean).to_vector<int>() == std::vector<int>{1, 0, 1, 1, 1});
  CHECK(t.narrow(0, 1, 4).to(DType::u8).to_vector<int>() == std::vector<int>{0, 1, 3, 255});
  CHECK(t.to(DType::f16).to(DType::bf16).to(DType::f64).to_vector<double>() ==
        std::vector<double>{-2.5, 0, 1, 3.75, 255});
}

TEST_CASE("tensor: item and printing", "[core][tensor]") {
  CHECK(scalar_tensor(2.5).item() == 2.5);
  CHECK(full({1, 1}, 3).item<int>() == 3);
  CHECK_THROWS_WITH(zeros({2}).item(), Catch::Contains("stoke::item") &&
                                           Catch::Contains("one element, got shape [2]"));
  CHECK(arange(4).view({2, 2}).str() ==
        "tensor([[0.0000, 1.0000],\n        [2.0000, 3.0000]], dtype=f32)");
  CHECK(arange(3, {.dtype = DType::i64}).str() == "tensor([0, 1, 2], dtype=i64)");
  CHECK(scalar_tensor(1, {.dtype = DType::boolean}).str() == "tensor(True, dtype=bool)");
  const std::string big = arange(2000).str();
  CHECK(big.find("...") != std::string::npos);
  CHECK(big.find("1999.0000") != std::string::npos);
  CHECK(zeros({2}, {.requires_grad = true}).str() ==
        "tensor([0.0000, 0.0000], dtype=f32, requires_grad=True)");
}

TEST_CASE("tensor: errors name the op, expected and given", "[core][tensor][errors]") {
  Tensor t = zeros({2, 3});
  CHECK_THROWS_WITH(t.view({4, 2}), Catch::Contains("stoke::view") &&
                                        Catch::Contains("[4, 2] is invalid for a tensor of 6"));
  CHECK_THROWS_WITH(t.transpose(0, 2),
                    Catch::Contains("stoke::transpose") && Catch::Contains("dim 2 out of range"));
  CHECK_THROWS_WITH(t.expand({4, 3}), Catch::Contains("cannot expand shape [2, 3] to [4, 3]"));
  CHECK_THROWS_WITH(t.narrow(1, 2, 2), Catch::Contains("exceeds size 3"));
  CHECK_THROWS_WITH(t.permute({0, 0}), Catch::Contains("repeated"));
  CHECK_THROWS_WITH(t.data<double>(), Catch::Contains("expected dtype f64, tensor has dtype f32"));
  CHECK_THROWS_WITH(zeros({2}, {.device = Device::cuda(0)}), Catch::Contains("cuda:0"));
  // Without CUDA: "copy from cpu to cuda:0 is not available"; with CUDA but no GPU: the
  // allocator's "cannot allocate ... on cuda:0 ... (no CUDA device: ...)".
  CHECK_THROWS_WITH(t.to(Device::cuda()), Catch::Contains("cuda:0"));
  CHECK_THROWS_WITH(zeros({2}, {.dtype = DType::i64}).set_requires_grad(true),
                    Catch::Contains("only floating tensors can require grad, got dtype i64"));
  CHECK_THROWS_AS(Tensor().shape(), Error);
}

TEST_CASE("allocator: 64-byte alignment and caching of large blocks", "[core][allocator]") {
  // The caching under test is what poison mode (STOKE_ALLOC_POISON=1, CI's asan stage) turns off.
  const bool poison = alloc_poison();
  set_alloc_poison(false);
  DeviceAllocator& a = cpu_allocator();
  for (size_t n : {1, 7, 64, 1000, 1 << 20}) {
    void* p = a.allocate(n);
    CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
    a.deallocate(p, n);
  }
  const size_t big = size_t{8} << 20;
  void* p = a.allocate(big);
  a.deallocate(p, big);
  const auto before = a.stats();
  void* q = a.allocate(big);
  CHECK(q == p);  // reused from the cache
  CHECK(a.stats().system_allocs == before.system_allocs);
  a.deallocate(q, big);
  // Of several cached blocks of a size, the one freed last comes back first (it is the one still
  // in the CPU's caches): q, r freed in that order give r, then q.
  q = a.allocate(big);
  void* r = a.allocate(big);
  a.deallocate(q, big);
  a.deallocate(r, big);
  CHECK(a.allocate(big) == r);
  CHECK(a.allocate(big) == q);
  a.deallocate(q, big);
  a.deallocate(r, big);
  a.empty_cache();
  CHECK(a.stats().cached_bytes == 0);
  set_alloc_poison(poison);
}

TEST_CASE(
    "shape: element counts past int64 are refused, and a zero dim is empty whatever the others",
    "[core]") {
  const int64_t big = int64_t{1} << 62;
  // Empty in any order (the product of the other dims would overflow: undefined behaviour before).
  for (const Shape& s : {Shape{0, big, big}, Shape{big, big, 0}, Shape{big, 0, big}}) {
    INFO(s);
    CHECK(s.numel() == 0);
    const Tensor t = empty(s, {.dtype = DType::u8});
    CHECK(t.numel() == 0);
    CHECK(t.shape() == s);
  }
  CHECK_THROWS_WITH(
      Shape({big, 4}).numel(),
      Catch::Contains("shape [4611686018427387904, 4] has more than 2^63 - 1 elements"));
  CHECK_THROWS_WITH(empty({big, big}), Catch::Contains("has more than 2^63 - 1 elements"));
  CHECK(Shape({big, 1}).numel() == big);
  CHECK(Shape({}).numel() == 1);
}
