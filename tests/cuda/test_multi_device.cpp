// ops:: on a second device (the emulator presents two): each op runs on its tensors' device
// whichever device is current, its outputs are allocated there, copies move data between the
// devices, and mixing devices or naming a missing one fails with a message naming the devices.
#include "cuda/emu/emu.h"
#include "cuda/runtime/device.h"
#include "ops_cuda_util.h"

using namespace stoke;
using stoke::test::kU;
using stoke::test::max_abs;
using stoke::test::max_diff;
using stoke::test::max_rel_diff;
using stoke::test::rand_cpu;
using stoke::test::signed_sum_tol;

TEST_CASE("multi-device: ops on cuda:1 launch on device 1 and allocate there", "[cuda][multi]") {
  REQUIRE(cuda::device_count() == 2);
  const Device d1 = Device::cuda(1);
  const Tensor a = rand_cpu({37, 65}, 1), b = rand_cpu({65}, 2), w = rand_cpu({65, 9}, 3);
  cuda::set_device(0);
  const Tensor a1 = a.to(d1), b1 = b.to(d1), w1 = w.to(d1);
  CHECK(emu::device_of(a1.data_ptr()) == 1);

  const Tensor sum = add(a1, b1);  // broadcasting binary kernel
  CHECK(emu::stats().last_launch_device == 1);
  CHECK(sum.device() == d1);
  CHECK(emu::device_of(sum.data_ptr()) == 1);
  CHECK(max_diff(sum, add(a, b)) == 0);  // one IEEE addition: bit for bit

  const Tensor prod = matmul(relu(a1), w1);  // unary kernel, then the GEMM
  CHECK(emu::device_of(prod.data_ptr()) == 1);
  // Sums of 65 products of relu(a) w (random signs through w): signed_sum_tol of the largest
  // sum of squared products; the column sums add 37 of those errors and their own rounding.
  const Tensor r = relu(a),
               sq = matmul(ops::mul(r, r).to(DType::f64), ops::mul(w, w).to(DType::f64));
  const double prod_tol = signed_sum_tol(65, max_abs(sq));
  const Tensor col = ops::sum(matmul(r, w), {0});
  CHECK(max_diff(prod, matmul(r, w)) < prod_tol);
  CHECK(max_diff(ops::sum(prod, {0}), col) <
        37 * prod_tol +
            signed_sum_tol(37, max_abs(ops::sum(ops::mul(matmul(r, w), matmul(r, w)), {0}))));

  // Back on cuda:0 the next op makes device 0 current again.
  const Tensor a0 = a.to(Device::cuda(0));
  const Tensor e0 = exp(a0);
  CHECK(emu::stats().last_launch_device == 0);
  CHECK(emu::device_of(e0.data_ptr()) == 0);
  // The CPU's exp polynomial (1.5 ulp) against expf (2 ulp): under 8u relative.
  CHECK(max_rel_diff(e0, exp(a)) <= 8 * kU);
  cuda::set_device(0);
}

TEST_CASE("multi-device: autograd on cuda:1 keeps gradients on device 1", "[cuda][multi]") {
  const Device d1 = Device::cuda(1);
  const Tensor x = rand_cpu({8, 5}, 4), w = rand_cpu({3, 5}, 5);
  const Tensor target = from_vector<int64_t>({0, 1, 2, 0, 1, 2, 0, 1}, {8}, {.dtype = DType::i64});
  Tensor w_cpu = w.clone().set_requires_grad(true);
  Tensor w_dev = w.to(d1).set_requires_grad(true);
  cross_entropy(linear(x, w_cpu), target).backward();
  cross_entropy(linear(x.to(d1), w_dev), target.to(d1)).backward();
  REQUIRE(w_dev.grad().defined());
  CHECK(w_dev.grad().device() == d1);
  CHECK(emu::device_of(w_dev.grad().data_ptr()) == 1);
  // (softmax - onehot) / 8 summed with x over the 8 rows: sums of 8 products of |.| <= 4 / 8
  // (signed_sum_tol(8, 8 x 0.25) = 1.4e-6 at most), softmax's own ~23u relative (see
  // test_ops_cuda.cpp) times sum |x| / 8 <= 4.
  CHECK(max_diff(w_dev.grad(), w_cpu.grad()) < signed_sum_tol(8, 2.0) + 23 * kU * 4);
}

TEST_CASE("multi-device: copies between devices and errors name both devices", "[cuda][multi]") {
  const Tensor a = rand_cpu({1000}, 6);
  const Tensor a1 = a.to(Device::cuda(1));
  const Tensor a0 = a1.to(Device::cuda(0));  // device to device
  CHECK(emu::device_of(a0.data_ptr()) == 0);
  CHECK(max_diff(a0, a) == 0);  // copies
  CHECK(max_diff(a1.to(Device::cpu()), a) == 0);

  CHECK_THROWS_WITH(add(a0, a1), Catch::Contains("stoke::add") &&
                                     Catch::Contains("expected all tensors on the same device") &&
                                     Catch::Contains("cuda:0") && Catch::Contains("cuda:1"));
  CHECK_THROWS_WITH(a.to(Device::cuda(2)), Catch::Contains("cuda:2"));
}
