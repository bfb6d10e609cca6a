// stoke-bench-zero: per-rank memory and step time of DDP and ZeRO-1, 2, 3 on ResNet-18 (CIFAR
// shape, 11.2 M parameters) with SGD-momentum and AdamW, under mpirun; then, from the formulas that
// tests/dist/test_zero.cpp checks against the measured bytes, the per-rank memory of 1 B and 7.5 B
// parameter models at N = 8 ... 1024, beside the ZeRO paper's table 1 (fp16 mixed precision with
// Adam: K = 12 bytes of optimizer state per parameter, 2 bytes each of parameters and gradients).
//
//   OMPI_MCA_mpi_yield_when_idle=1 mpirun --allow-run-as-root --oversubscribe -np N
//       build/bench/stoke-bench-zero [--steps 3] [--batch 2] [--model resnet18] [--bucket-mb 25]
//       [--precision f32,fp16,fp16p]
//
// Per configuration: one warm-up step, then --steps timed steps (forward, backward, step,
// zero_grad; a barrier before each; the slowest rank's time; the median is shown). fp16: the
// forward in an f16 autocast region and the GradScaler (scale, unscale and found-inf over DDP's
// gradients or ZeRO's shards, the flag MAX-allreduced, step, update), as stoke-train --amp fp16
// runs it; the parameters, gradients and optimizer state stay f32. fp16p: the same, with the
// convolutions' and linear layers' parameters in f16 (the norms' stay f32, as apex's O2 keeps
// them) and ZeRO's f32 master weights in the shards: the mixed-precision ZeRO of the paper's
// formulas; ZeRO rows only (stoke's DDP keeps no master weights). Memory, per rank, after the last
// step:
//   params / grads / optim / master / comm: ZeroOptimizer::memory_report() (the storages it holds:
//   stage
//     3's params are its shards); gath: stage 3's most parameters gathered at once; for DDP
//     the parameters' and the optimizer state's storages, the gradients' (read before zero_grad)
//     and DDP's buckets (Ψ elements of flat buffers, dist/ddp.cpp);
//   alloc: this process's CPU allocator, live bytes after the step (model, optimizer, buffers,
//     the batch and whatever the allocator rounds up), and its peak so far in the process (the
//     configurations run in order: DDP, ZeRO-1, 2, 3 for SGD, then for AdamW).
// Only rank 0 prints: the table, then one JSON line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "bench/bench_util.h"
#include "core/allocator.h"
#include "core/error.h"
#include "core/parallel.h"
#include "dist/ddp.h"
#include "dist/mpi.h"
#include "dist/zero.h"
#include "stoke/stoke.h"

namespace {

using namespace stoke;
constexpr double kMiB = 1024.0 * 1024.0;

struct Args {
  int steps = 3;
  int64_t batch = 2;  // per rank
  std::string model = "resnet18";
  double bucket_mb = 25;  // DDP's and ZeRO's bucket cap (both default to 25 MiB)
  std::vector<std::string> precisions = {"f32", "fp16", "fp16p"};
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      STOKE_CHECK(i + 1 < argc, "stoke-bench-zero", k, " needs a value");
      return argv[++i];
    };
    if (k == "--steps")
      a.steps = std::max(1, std::atoi(value().c_str()));
    else if (k == "--batch")
      a.batch = std::max<int64_t>(1, std::atoll(value().c_str()));
    else if (k == "--model")
      a.model = value();
    else if (k == "--bucket-mb")
      a.bucket_mb = std::max(0.001, std::atof(value().c_str()));
    else if (k == "--precision") {
      a.precisions = bench::split_commas(value());
      for (const std::string& p : a.precisions)
        STOKE_CHECK(p == "f32" || p == "fp16" || p == "fp16p", "stoke-bench-zero",
                    "--precision: unknown '", p, "' (known: f32, fp16, fp16p)");
    } else
      STOKE_FAIL("stoke-bench-zero", "unknown flag '", k,
                 "' (known: --steps, --batch, --model, --bucket-mb, --precision)");
  }
  return a;
}

struct Row {
  std::string config, precision;
  double step_ms = 0;
  double params = 0, grads = 0, optim = 0, master = 0, comm = 0, gathered = 0;  // MiB
  double alloc = 0, peak = 0;                                                   // MiB
};

std::unique_ptr<nn::optim::Optimizer> plain_optimizer(const std::string& kind,
                                                      const nn::Module& m) {
  if (kind == "sgd")
    return std::make_unique<nn::optim::SGD>(m.parameters(),
                                            nn::optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  return std::make_unique<nn::optim::AdamW>(m.parameters(), nn::optim::AdamWOptions{.lr = 1e-3});
}

int64_t storage_bytes(const std::vector<Tensor>& ts, std::unordered_set<const Storage*>& seen) {
  int64_t b = 0;
  for (const Tensor& t : ts)
    if (t.defined() && seen.insert(t.storage().get()).second)
      b += static_cast<int64_t>(t.storage()->nbytes());
  return b;
}

// The communicator's worker keeps its last finished job (and the tensors it captured: DDP's last
// bucket) until the next non-blocking call; one empty call lets the allocator's count see only
// what the configuration holds.
void release_finished_jobs(dist::Communicator& comm) {
  comm.run_async([] {}).wait();
}

// One configuration: stage 0 is DDP with the plain optimizer.
Row run(dist::Communicator& comm, const Args& a, const std::string& opt_kind, int stage,
        const std::string& precision) {
  release_finished_jobs(comm);
  Generator gen(1);
  auto model = nn::models::make_model(
      a.model, {.in_channels = 3, .num_classes = 10, .input_size = 32, .generator = &gen});
  const Tensor x = randn({a.batch, 3, 32, 32}, {}, &gen);
  if (precision == "fp16p") nn::amp::half_precision_parameters(*model, DType::f16);
  const Tensor y = randint(0, 10, {a.batch}, {.dtype = DType::i64}, &gen);
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  std::unique_ptr<nn::optim::Optimizer> opt = plain_optimizer(opt_kind, *model);
  dist::ZeroOptimizer* zero = nullptr;
  if (stage == 0) {
    ddp = std::make_unique<dist::DistributedDataParallel>(
        model, comm, dist::DdpOptions{.bucket_cap_mb = a.bucket_mb});
  } else {
    auto z = dist::make_zero_optimizer(
        *opt, comm, {.stage = stage, .bucket_cap_mb = a.bucket_mb, .module = model.get()});
    zero = z.get();
    opt = std::move(z);
  }
  const bool fp16 = precision != "f32";
  std::optional<nn::amp::GradScaler> scaler;
  if (fp16) {
    scaler.emplace();
    scaler->found_inf_reducer = [&comm](Tensor& f) { comm.allreduce(f, dist::ReduceOp::max); };
  }
  Row row;
  row.config = (stage == 0 ? std::string("ddp") : dist::zero_stage_name(stage)) + " " + opt_kind;
  row.precision = precision;
  std::vector<double> times;
  int64_t ddp_grad_bytes = 0;
  for (int s = 0; s <= a.steps; ++s) {
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    Tensor loss;
    {
      std::optional<autocast> region;
      if (fp16) region.emplace(Device::Type::cpu, AutocastOptions{.dtype = DType::f16});
      const Tensor out = ddp ? (*ddp)(x) : (*model)(x);  // the hooks of stage 3 run
      loss = cross_entropy(out, y);
    }
    (scaler ? scaler->scale(loss) : loss).backward();
    if (!zero) {
      std::unordered_set<const Storage*> seen;
      std::vector<Tensor> grads;
      for (const Tensor& p : model->parameters()) grads.push_back(p.grad());
      ddp_grad_bytes = storage_bytes(grads, seen);
    }
    if (scaler) {
      scaler->step(*opt);
      scaler->update();
    } else {
      opt->step();
    }
    opt->zero_grad();
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    Tensor t = full({1}, ms, {.dtype = DType::f64});
    comm.allreduce(t, dist::ReduceOp::max);
    if (s > 0) times.push_back(t.item());  // step 0 is the warm-up
  }
  std::sort(times.begin(), times.end());
  row.step_ms = times[times.size() / 2];
  if (zero) {
    const dist::ZeroMemoryReport m = zero->memory_report();
    row.params = m.parameter_bytes / kMiB;
    row.grads = m.gradient_bytes / kMiB;
    row.optim = m.optimizer_state_bytes / kMiB;
    row.comm = m.communication_bytes / kMiB;
    row.master = m.master_bytes / kMiB;
    row.gathered = m.peak_gathered_bytes / kMiB;
  } else {
    std::unordered_set<const Storage*> seen;
    const std::vector<Tensor> ps = model->parameters();
    row.params = storage_bytes(ps, seen) / kMiB;
    row.grads = ddp_grad_bytes / kMiB;
    std::vector<Tensor> state;
    for (const auto& [k, t] : opt->state_dict())
      if (t.dtype() != DType::i64) state.push_back(t);
    row.optim = storage_bytes(state, seen) / kMiB;
    int64_t psi = 0;
    for (const Tensor& p : ps) psi += p.numel();
    row.comm = static_cast<double>(psi) * 4 / kMiB;  // DDP's buckets hold every gradient once
  }
  release_finished_jobs(comm);
  const AllocatorStats st = cpu_allocator().stats();
  row.alloc = static_cast<double>(st.allocated_bytes) / kMiB;
  row.peak = static_cast<double>(st.peak_allocated_bytes) / kMiB;
  return row;
}

// The paper's table 1 setting: fp16 parameters and gradients, Adam's fp32 master copy, momentum
// and variance (K = 12), per rank: DDP (2 + 2 + K)Ψ, stage 1 4Ψ + KΨ/N, stage 2 2Ψ + (2 + K)Ψ/N,
// stage 3 (2 + 2 + K)Ψ/N. The padding (N - 1 elements per bucket), the bucket buffers and stage
// 3's gathered working set are left out: at 25 MiB buckets the first two are below 0.1 GB at every
// size here, and the working set is the model's largest few buckets.
void print_projection() {
  // The paper's table 1 (7.5 B parameters; 1 GB = 1e9 bytes): DDP is its DP = 1 column, 120 GB.
  struct Paper {
    int n;
    double s1, s2, s3;
  };
  const Paper paper[] = {{16, 35.6, 21.6, 7.5},
                         {64, 31.4, 16.6, 1.88},
                         {256, 30.4, 15.4, 0.47},
                         {1024, 30.1, 15.1, 0.12}};
  std::printf("\nprojected per-rank memory, fp16 mixed-precision Adam (K = 12), GB:\n");
  std::printf("%-6s %6s | %9s %9s %9s %9s | %11s %11s %11s %11s\n", "params", "N", "ddp", "zero1",
              "zero2", "zero3", "paper: ddp", "zero1", "zero2", "zero3");
  for (double psi : {1e9, 7.5e9})
    for (int n : {8, 16, 64, 256, 1024}) {
      const double k = 12;
      const double ddp = (2 + 2 + k) * psi / 1e9, s1 = (4 + k / n) * psi / 1e9,
                   s2 = (2 + (2 + k) / n) * psi / 1e9, s3 = (2 + 2 + k) / n * psi / 1e9;
      std::printf("%-6s %6d | %9.2f %9.2f %9.2f %9.2f |", psi > 2e9 ? "7.5B" : "1B", n, ddp, s1, s2,
                  s3);
      const Paper* p = nullptr;
      for (const Paper& q : paper)
        if (psi > 2e9 && q.n == n) p = &q;
      if (p)
        std::printf(" %11.1f %11.1f %11.1f %11.2f\n", 120.0, p->s1, p->s2, p->s3);
      else
        std::printf(" %11s %11s %11s %11s\n", "-", "-", "-", "-");
    }
  std::printf(
      "(the paper's table has 7.5 B at N = 1, 4, 16, 64, 256, 1024 only. stoke trains in "
      "f32: DDP 16Ψ + 4Ψ of buckets, zero1 8Ψ + 8Ψ/N, zero2 4Ψ + 12Ψ/N, zero3 16Ψ/N with Adam, "
      "plus padding and buffers: the forms tests/dist/test_zero.cpp checks)\n");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    dist::MpiCommunicator comm;
    set_num_threads(1);
    std::vector<Row> rows;
    for (const std::string& precision : a.precisions)
      for (const char* opt : {"sgd", "adamw"})
        for (int stage : {0, 1, 2, 3})
          if (stage > 0 || precision != "fp16p")
            rows.push_back(run(comm, a, opt, stage, precision));
    if (comm.rank() == 0) {
      std::printf(
          "stoke-bench-zero: %s, batch %lld per rank, N = %d, buckets of %g MiB, %d timed steps "
          "(median)\n",
          a.model.c_str(), static_cast<long long>(a.batch), comm.size(), a.bucket_mb, a.steps);
      std::printf("%-12s %-5s %9s | %7s %7s %7s %7s %7s %7s | %7s | %7s %7s\n", "config", "prec",
                  "step ms", "params", "grads", "optim", "master", "comm", "total", "gath", "alloc",
                  "peak");
      std::vector<std::string> json_rows;
      for (const Row& r : rows) {
        const double total = r.params + r.grads + r.optim + r.master + r.comm;
        std::printf(
            "%-12s %-5s %9.1f | %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f | %7.1f | %7.1f %7.1f\n",
            r.config.c_str(), r.precision.c_str(), r.step_ms, r.params, r.grads, r.optim, r.master,
            r.comm, total, r.gathered, r.alloc, r.peak);
        json_rows.push_back(bench::JsonObject()
                                .add("config", r.config)
                                .add("precision", r.precision)
                                .add("step_ms", r.step_ms)
                                .add("params_mib", r.params)
                                .add("grads_mib", r.grads)
                                .add("optim_mib", r.optim)
                                .add("master_mib", r.master)
                                .add("comm_mib", r.comm)
                                .add("total_mib", total)
                                .add("gathered_mib", r.gathered)
                                .add("alloc_mib", r.alloc)
                                .add("peak_mib", r.peak)
                                .str());
      }
      std::printf(
          "(MiB per rank. alloc: this process's CPU allocator after the step, live bytes with "
          "its rounding of large blocks to a quarter power of two, the batch and the model's "
          "buffers; peak: its high-water mark so far in this process)\n");
      print_projection();
      std::printf("%s\n", bench::JsonObject()
                              .add("bench", "zero")
                              .add("model", a.model)
                              .add("ranks", comm.size())
                              .add("batch_per_rank", static_cast<double>(a.batch))
                              .add("bucket_mb", a.bucket_mb)
                              .add("steps", a.steps)
                              .raw("rows", bench::json_array(json_rows))
                              .str()
                              .c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stoke-bench-zero: %s\n", e.what());
    return 1;
  }
}
