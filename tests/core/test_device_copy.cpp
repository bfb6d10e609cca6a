// Tensor::to(Device) and copy_ across devices, through core's registries, with a fake device
// backend ("cuda" memory that is host memory, copies that are memcpy and count themselves). The
// real CUDA backend registers the same two interfaces; this checks core's side of the contract.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>

#include "core/allocator.h"
#include "core/device_copy.h"
#include "stoke/stoke.h"

using namespace stoke;

namespace {

struct FakeAllocator final : DeviceAllocator {
  void* allocate(size_t n) override { return std::malloc(n == 0 ? 1 : n); }
  void deallocate(void* p, size_t) override { std::free(p); }
  AllocatorStats stats() const override { return {}; }
  void empty_cache() override {}
};

struct FakeCopier final : DeviceCopier {
  int copies = 0;
  size_t bytes = 0;
  void copy(void* dst, Device, const void* src, Device, size_t n, bool) override {
    ++copies;
    bytes += n;
    std::memcpy(dst, src, n);
  }
  // The fake device's memory is host memory, so its "kernel" is a plain strided loop (f32).
  void copy_strided(const Tensor& dst, const Tensor& src) override {
    REQUIRE(dst.dtype() == DType::f32);
    REQUIRE(src.dtype() == DType::f32);
    ++strided_copies;
    std::vector<int64_t> index(static_cast<size_t>(dst.dim()), 0);
    for (int64_t e = 0; e < dst.numel(); ++e) {
      int64_t d = 0, s = 0;
      for (int64_t k = 0; k < dst.dim(); ++k) {
        d += index[k] * dst.stride(k);
        s += index[k] * src.stride(k);
      }
      dst.data<float>()[d] = src.data<float>()[s];
      for (int64_t k = dst.dim() - 1; k >= 0 && ++index[k] == dst.size(k); --k) index[k] = 0;
    }
  }
  int strided_copies = 0;
};

// Registers the fake backend for Device::cuda for the scope's lifetime. The objects are static
// because storages remember their allocator after the scope ends.
struct FakeCuda {
  static FakeAllocator& allocator() {
    static FakeAllocator a;
    return a;
  }
  FakeCopier copier;
  FakeCuda() {
    register_allocator(Device::Type::cuda, &allocator());
    register_device_copier(Device::Type::cuda, &copier);
  }
  ~FakeCuda() {
    register_allocator(Device::Type::cuda, nullptr);
    register_device_copier(Device::Type::cuda, nullptr);
  }
};

}  // namespace

TEST_CASE("to(cuda) without a backend names the device and the reason", "[device]") {
  const Tensor x = ones({2, 3});
  try {
    (void)x.to(Device::cuda());
    FAIL("expected an error");
  } catch (const Error& e) {
    const std::string m = e.what();
    CHECK(m.find("cuda:0") != std::string::npos);
    // Built without CUDA: no backend; built with CUDA on a machine without a GPU: no device.
    CHECK((m.find("without CUDA") != std::string::npos ||
           m.find("no CUDA device") != std::string::npos));
  }
}

TEST_CASE("to(device) round-trips values, shapes and dtypes through the registered copier",
          "[device]") {
  FakeCuda fake;
  const Tensor x = arange(0, 24, 1, {.dtype = DType::f64}).reshape({2, 3, 4});
  const Tensor d = x.to(Device::cuda());
  CHECK(d.device() == Device::cuda());
  CHECK(d.shape() == x.shape());
  CHECK(d.dtype() == DType::f64);
  CHECK(fake.copier.bytes == 24 * sizeof(double));
  CHECK(x.to(Device::cpu()).is_same(x));  // same device: no copy
  const Tensor back = d.to(Device::cpu());
  CHECK(back.to_vector<double>() == x.to_vector<double>());
}

TEST_CASE("to(device) of strided views copies what the view shows", "[device]") {
  FakeCuda fake;
  const Tensor x = arange(0, 12, 1).reshape({3, 4});
  // CPU -> device: a transposed view is made contiguous before the copy.
  const Tensor t = x.t().to(Device::cuda());
  CHECK(t.to(Device::cpu()).to_vector<float>() == x.t().contiguous().to_vector<float>());
  // device -> CPU from a strided device view: the covered span is copied and re-viewed.
  const Tensor d = x.to(Device::cuda());
  const Tensor view = d.slice(1, 1, 4, 2);  // columns 1 and 3
  CHECK(view.to(Device::cpu()).to_vector<float>() == x.slice(1, 1, 4, 2).to_vector<float>());
  CHECK(d.t().to(Device::cpu()).to_vector<float>() == x.t().contiguous().to_vector<float>());
  // item() and printing go through the CPU.
  CHECK(d.select(0, 2).select(0, 3).item() == 11.0);
}

TEST_CASE("copy_ moves data into and out of device tensors, converting and broadcasting",
          "[device]") {
  FakeCuda fake;
  Tensor d = empty({2, 3}, {.device = Device::cuda()});
  d.copy_(arange(0, 3, 1));  // moved to the device, then broadcast there by the device's kernel
  CHECK(fake.copier.strided_copies == 1);
  CHECK(d.to(Device::cpu()).to_vector<float>() == std::vector<float>{0, 1, 2, 0, 1, 2});
  d.t().copy_(full({3, 2}, 7.0));  // into a non-contiguous device view
  CHECK(d.to(Device::cpu()).to_vector<float>() == std::vector<float>(6, 7.f));
  Tensor h = empty({2, 3});
  h.copy_(d);
  CHECK(h.to_vector<float>() == std::vector<float>(6, 7.f));
}

TEST_CASE("to(device) is differentiable: the gradient returns to the source device", "[device]") {
  FakeCuda fake;
  Tensor x = full({4}, 2.0, {.requires_grad = true});
  Tensor y = x.to(Device::cuda());
  CHECK(y.requires_grad());
  // The fake device has no kernels, so the loss is formed back on the CPU.
  Tensor z = y.to(Device::cpu());
  sum(z * z).backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().device() == Device::cpu());
  CHECK(x.grad().to_vector<float>() == std::vector<float>{4, 4, 4, 4});
}
