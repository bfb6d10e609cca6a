// dist::HostStagedCommunicator on the emulator's devices: every collective and stoke's ring on cuda
// tensors, staged through an in-process group, equal bit for bit to the same calls on cpu tensors
// (which pass straight through), for every dtype and lengths 0, 1, 7 and 1000.
#include <catch2/catch.hpp>

#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "cuda/runtime/device.h"
#include "dist/host_staged.h"
#include "dist/in_process.h"
#include "dist/ring.h"
#include "stoke/stoke.h"

#include "dist_ranks.h"

using namespace stoke;
using namespace stoke::dist;
using stoke::test::run_staged;

namespace {

std::vector<double> host(const Tensor& t) {
  return t.to(Device::cpu()).to(DType::f64).to_vector<double>();
}

// Every result of one rank, in order, for the tensors on `device`.
std::vector<std::vector<double>> results(Communicator& c, Device device, DType dtype, int64_t len) {
  const int n = c.size();
  Generator gen(11 + static_cast<uint64_t>(c.rank()));
  auto input = [&](int64_t k) { return randn({k}, {.dtype = dtype}, &gen).to(device); };
  std::vector<std::vector<double>> out;
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
    Tensor t = input(len);
    c.allreduce(t, op);
    out.push_back(host(t));
  }
  Tensor scattered = empty({len}, {.dtype = dtype, .device = device});
  c.reduce_scatter(input(len * n), scattered);
  out.push_back(host(scattered));
  Tensor gathered = empty({len * n}, {.dtype = dtype, .device = device});
  c.allgather(input(len), gathered);
  out.push_back(host(gathered));
  Tensor b = input(len);
  c.broadcast(b, n - 1);
  out.push_back(host(b));
  Tensor r = input(len);
  if (dtype != DType::f64 || device.is_cpu()) {  // the ring reduces f64 on the CPU only
    ring_allreduce(c, r, ReduceOp::sum, {.segment_bytes = 64});
    out.push_back(host(r));
  }
  Tensor sent = input(len), got = empty({len}, {.dtype = dtype, .device = device});
  c.sendrecv(sent, (c.rank() + 1) % n, got, (c.rank() + n - 1) % n);
  out.push_back(host(got));
  return out;
}

}  // namespace

TEST_CASE("dist: host-staged (emu): cuda tensors through a host engine equal cpu tensors",
          "[nccl_dist]") {
  for (int n : {2, 3}) {
    for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      for (int64_t len : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}}) {
        INFO(n << " ranks, " << dtype << ", " << len << " elements");
        std::vector<std::vector<std::vector<double>>> on_cpu(n), on_cuda(n);
        run_staged(n, [&](HostStagedCommunicator& c) {
          on_cpu[c.rank()] = results(c, Device::cpu(), dtype, len);
          on_cuda[c.rank()] = results(c, Device::cuda(c.rank() % 2), dtype, len);
        });
        for (int r = 0; r < n; ++r) {
          const size_t ring_skipped = dtype == DType::f64 ? 1 : 0;
          REQUIRE(on_cuda[r].size() + ring_skipped == on_cpu[r].size());
          // Bit for bit: a staged call copies the device tensors to the host and runs the same
          // host engine's code on the same values (cpu tensors go straight to it); the ring's
          // steps are one addition each, in f32 (f16/bf16 added in f32 and rounded once) on the
          // device as on the host, correctly rounded to one result.
          for (size_t k = 0, j = 0; k < on_cuda[r].size(); ++k, ++j) {
            if (ring_skipped && k == 6) ++j;  // the f64 ring result exists on the cpu only
            REQUIRE(on_cuda[r][k] == on_cpu[r][j]);
          }
          REQUIRE(on_cpu[r][3].size() == static_cast<size_t>(len));
          REQUIRE(on_cpu[r][4].size() == static_cast<size_t>(len * n));
        }
      }
    }
  }
}

TEST_CASE("dist: host-staged (emu): errors of the host engine reach the caller", "[nccl_dist]") {
  CHECK_THROWS_WITH(run_staged(2,
                               [&](HostStagedCommunicator& c) {
                                 Tensor t = ones({c.rank() == 0 ? 4 : 5},
                                                 {.device = Device::cuda(c.rank())});
                                 c.allreduce(t);
                               }),
                    Catch::Contains("allreduce #0") && Catch::Contains("elements"));
}
