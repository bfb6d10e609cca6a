// stoke-gpu-selftest's NCCL rows (dist::NcclCommunicator, dist/cuda/nccl.h): one rank per GPU, as
// threads of this process (a clique of one on a one-GPU machine), every collective against the CPU
// sum of the ranks' inputs, stoke's ring over NCCL's send/recv, and one DDP step against the
// whole batch on the CPU. Built with the real NCCL (STOKE_HAS_NCCL) and in cuda/emu, where
// tests/cuda/test_selftest_ops.cpp runs it over the emulator's two devices.
#include "apps/selftest/vendor_checks.h"

#if defined(STOKE_HAS_NCCL) || defined(STOKE_CUDA_EMU)

#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cuda/runtime/device.h"
#include "dist/cuda/nccl.h"
#include "dist/ddp.h"
#include "dist/ring.h"
#include "stoke/stoke.h"

namespace stoke::selftest {
namespace {

// fn(comm) on one thread per rank (rank r on GPU r); rethrows the first error.
void on_ranks(int n, const std::function<void(dist::NcclCommunicator&)>& fn) {
  const ncclUniqueId id = dist::NcclCommunicator::make_unique_id();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        cuda::set_device(r);
        dist::NcclCommunicator comm(id, r, n, r);
        fn(comm);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Rank r's input: values in [-1, 1) from seed r (the same on the CPU and the device).
Tensor rank_input(int r, int64_t n, DType dtype) {
  Generator gen(100 + static_cast<uint64_t>(r));
  return uniform({n}, -1, 1, {}, &gen).to(dtype).to(DType::f32);
}

struct Mlp : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  explicit Mlp(Generator* gen) {
    fc1 = register_module("fc1",
                          std::make_shared<nn::Linear>(12, 8, nn::LinearOptions{.generator = gen}));
    fc2 = register_module("fc2",
                          std::make_shared<nn::Linear>(8, 4, nn::LinearOptions{.generator = gen}));
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(relu(fc1->forward(x))); }
};

void collectives(Suite& s, int n) {
  const int64_t len = 1000;
  const std::string shape = detail::str_cat(len, " x ", n, n == 1 ? " rank" : " ranks");
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    const double tol = dt == DType::f32 || dt == DType::f64 ? 1e-6 : dt == DType::f16 ? 4e-3 : 3e-2;
    // The CPU references from the rounded inputs.
    Tensor sum = zeros({len}), mx = full({len}, -2.0), cat_all = empty({n * len});
    for (int r = 0; r < n; ++r) {
      const Tensor in = rank_input(r, len, dt);
      sum = ops::add(sum, in);
      mx = ops::maximum(mx, in);
      cat_all.narrow(0, r * len, len).copy_(in);
    }
    Tensor scatter_ref = zeros({len});
    for (int r = 0; r < n; ++r)
      scatter_ref = ops::add(scatter_ref, rank_input(r, n * len, dt).narrow(0, 0, len));
    std::vector<Tensor> got_sum(n), got_avg(n), got_max(n), got_ring(n), got_gather(n),
        got_bcast(n), got_scatter(n);
    on_ranks(n, [&](dist::NcclCommunicator& c) {
      const int r = c.rank();
      const Device dev = Device::cuda(c.device());
      auto up = [&](int64_t k) { return rank_input(r, k, dt).to(dt).to(dev); };
      Tensor t = up(len);
      c.allreduce(t, dist::ReduceOp::sum);
      got_sum[r] = t.to(Device::cpu());
      t = up(len);
      c.allreduce(t, dist::ReduceOp::avg);
      got_avg[r] = t.to(Device::cpu());
      t = up(len);
      c.allreduce(t, dist::ReduceOp::max);
      got_max[r] = t.to(Device::cpu());
      if (dt != DType::f64) {  // the ring reduces with stoke's kernels: no f64 on cuda
        t = up(len);
        dist::ring_allreduce(c, t, dist::ReduceOp::sum);
        got_ring[r] = t.to(Device::cpu());
      }
      Tensor all = empty({n * len}, {.dtype = dt, .device = dev});
      c.allgather(up(len), all);
      got_gather[r] = all.to(Device::cpu());
      Tensor one = empty({len}, {.dtype = dt, .device = dev});
      c.reduce_scatter(rank_input(r, n * len, dt).to(dt).to(dev), one);
      got_scatter[r] = one.to(Device::cpu());
      t = up(len);
      c.broadcast(t, n - 1);
      got_bcast[r] = t.to(Device::cpu());
      c.barrier();
    });
    const std::string d = detail::str_cat(dt);
    for (int r = 0; r < n; ++r) {
      const std::string who = n == 1 ? "" : detail::str_cat(" (rank ", r, ")");
      s.compare("nccl allreduce sum" + who, shape, d, got_sum[r], sum, tol * n);
      s.compare("nccl allreduce avg" + who, shape, d, got_avg[r], ops::div(sum, n), tol * n);
      s.compare("nccl allreduce max" + who, shape, d, got_max[r], mx, 0);
      if (dt != DType::f64)
        s.compare("ring allreduce over nccl" + who, shape, d, got_ring[r], sum, tol * n);
      s.compare("nccl allgather" + who, shape, d, got_gather[r], cat_all, 0);
      if (r == 0)
        s.compare("nccl reduce_scatter (rank 0's block)", shape, d, got_scatter[r], scatter_ref,
                  tol * n);
      s.compare("nccl broadcast from the last rank" + who, shape, d, got_bcast[r],
                rank_input(n - 1, len, dt), 0);
    }
  }
}

void ddp_step(Suite& s, int n) {
  const int64_t per_rank = 8;
  Generator data_gen(9);
  const Tensor x = randn({n * per_rank, 12}, {}, &data_gen);
  const Tensor y = randint(0, 4, {n * per_rank}, {.dtype = DType::i64}, &data_gen);
  Generator gen(3);
  auto ref = std::make_shared<Mlp>(&gen);
  nn::optim::SGD ref_opt(ref->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 2; ++step) {
    cross_entropy(ref->forward(x), y).backward();
    ref_opt.step();
    ref_opt.zero_grad();
  }
  std::vector<std::vector<Tensor>> got(n);
  on_ranks(n, [&](dist::NcclCommunicator& c) {
    const Device dev = Device::cuda(c.device());
    Generator g(3);
    auto model = std::make_shared<Mlp>(&g);
    model->to(dev);
    dist::DistributedDataParallel ddp(model, c);
    nn::optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
    const Tensor xs = x.narrow(0, c.rank() * per_rank, per_rank).to(dev);
    const Tensor ys = y.narrow(0, c.rank() * per_rank, per_rank).to(dev);
    for (int step = 0; step < 2; ++step) {
      cross_entropy(ddp(xs), ys).backward();
      opt.step();
      opt.zero_grad();
    }
    for (const Tensor& p : model->parameters())
      got[static_cast<size_t>(c.rank())].push_back(p.detach().to(Device::cpu()));
  });
  const auto names = ref->named_parameters();
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < names.size(); ++i)
      s.compare(detail::str_cat("ddp 2 SGD steps: ", names[i].first,
                                n == 1 ? "" : detail::str_cat(" (rank ", r, ")")),
                detail::str_cat(n, " x ", per_rank, " vs ", n * per_rank), "f32", got[r][i],
                names[i].second, 1e-4);
}

}  // namespace

void run_nccl_checks(Suite& s) {
  const int n = std::min(cuda::device_count(), 8);
  s.run("nccl collectives", [&](Suite& st) { collectives(st, n); });
  s.run("nccl ddp", [&](Suite& st) { ddp_step(st, n); });
}

}  // namespace stoke::selftest

#endif
