// stoke-bench-ops-cpu: times stoke's CPU ops, forward and forward+backward, against PyTorch on the
// same machine in the same run.
//
//   stoke-bench-ops-cpu [--op NAME] [--case TEXT] [--reps 20] [--warmup 5] [--rounds 3]
//                       [--threads T] [--peer | --no-peer] [--quick] [--torch-script PATH]
//
// Each case is measured by stoke, then at once by the PyTorch peer (bench/ops_cpu_torch.py
// --serve, one process for the run) with the same thread count: the two sides of a row run
// seconds apart, so that a slow phase of the machine (this VM ran everything 1.4x slower for tens
// of seconds at a time) hits both sides of a ratio rather than one. Each side's first measurement
// after the other's warms up for at least a second (bench_util.h).
// Each side measures every case --rounds times (default 3), and its best round is reported: a round
// is one pass over the whole case list (stoke then torch on each case), so a case's rounds lie
// minutes apart and a phase that slows one of them on one side does not decide a ratio. Times are
// medians of --reps repetitions after --warmup untimed ones:
//   fwd      forward only, under NoGradGuard (no graph is recorded);
//   fwd+bwd  forward with the inputs requiring grad, then out.backward(grad_out) (loss.backward()
//            for cross_entropy); gradients are cleared between repetitions, outside the timing.
// sgemm is forward only (ops::matmul on 2-D f32) and also reports GFLOP/s; optimizer times one
// step (SGD with momentum, Adam) in the fwd column, against torch.optim with foreach=False.
// The output is a table, then one JSON line with every row. --quick (CI smoke check) runs the
// smallest case of each op once, without the peer: it checks that everything runs, not timings.
#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autograd/batch_norm.h"
#include "autograd/conv2d.h"
#include "autograd/elementwise.h"
#include "autograd/group_norm.h"
#include "autograd/linalg.h"
#include "autograd/loss.h"
#include "autograd/pool.h"
#include "autograd/softmax.h"
#include "bench/bench_util.h"
#include "bench/peer_process.h"
#include "core/grad_mode.h"
#include "ops/linalg.h"
#include "ops/optimizer.h"
#include "stoke/stoke.h"

#ifndef STOKE_BENCH_SOURCE_DIR
#define STOKE_BENCH_SOURCE_DIR "bench"
#endif

namespace {

using namespace stoke;
using bench::median_ms;

const double kNaN = std::nan("");

struct Args {
  std::string case_filter;  // --case: only the cases whose name contains it
  int reps = 20;
  int warmup = 5;
  int rounds = 3;   // passes over the case list, each side measuring each case once; best kept
  int threads = 0;  // 0: stoke::num_threads() as configured (STOKE_NUM_THREADS or the cores)
  int peer = -1;    // -1: on when /usr/bin/python3 can import torch
  bool quick = false;
  std::string op;  // empty: every op
  std::string torch_script = std::string(STOKE_BENCH_SOURCE_DIR) + "/ops_cpu_torch.py";
};

// One side's measurement of one case.
struct Measured {
  double fwd_ms = kNaN;
  double fwdbwd_ms = kNaN;
  double gflops = kNaN;
};

// Each side's best over the rounds: the least time, the most GFLOP/s (NaN where never measured).
Measured best_of(const Measured& x, const Measured& y) {
  return {.fwd_ms = std::fmin(x.fwd_ms, y.fwd_ms),
          .fwdbwd_ms = std::fmin(x.fwdbwd_ms, y.fwdbwd_ms),
          .gflops = std::fmax(x.gflops, y.gflops)};
}

struct Row {
  std::string op, name;
  Measured stoke, torch;
};

// Splits a case name such as "N64_C32_K64_H14_k3" into {N: 64, C: 32, K: 64, H: 14, k: 3}: each
// '_'-separated part is a letter prefix and a number (the torch script parses names the same way).
std::map<std::string, int64_t> parse_case(const std::string& name) {
  std::map<std::string, int64_t> out;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('_', start);
    if (end == std::string::npos) end = name.size();
    std::string part = name.substr(start, end - start);
    size_t i = 0;
    while (i < part.size() && !std::isdigit(static_cast<unsigned char>(part[i]))) ++i;
    out[part.substr(0, i)] = i < part.size() ? std::atoll(part.c_str() + i) : 0;
    start = end + 1;
  }
  return out;
}

// Times `forward` without recording, then forward + backward with recording. `leaves` are the
// tensors requiring grad (their grads are cleared before each repetition, untimed); an undefined
// grad_out means the output is a scalar loss.
Measured time_autograd(const std::function<Tensor()>& forward, const std::vector<Tensor>& leaves,
                       const Tensor& grad_out, const Args& a) {
  Measured m;
  {
    NoGradGuard no_grad;
    m.fwd_ms = median_ms([&] { Tensor y = forward(); }, a.reps, a.warmup);
  }
  auto clear = [&] {
    for (const Tensor& t : leaves) t.set_grad(Tensor());
  };
  m.fwdbwd_ms = median_ms(
      [&] {
        Tensor y = forward();
        y.backward(grad_out);
      },
      a.reps, a.warmup, clear);
  return m;
}

TensorOptions leaf_options() {
  return {.requires_grad = true};
}

// A random gradient shaped like forward()'s output.
Tensor grad_like_output(const std::function<Tensor()>& forward) {
  NoGradGuard no_grad;
  return randn(forward().shape());
}

// conv2d ("N64_C32_K64_H14_k3"): bias, stride 1, "same" padding. The conv2d_resnet8 cases are
// ResNet-8's nine convolutions at batch 128 as the model runs them: no bias, stride "s2" where the
// stage halves the plane, and "data" for the stem, whose input (the images) needs no gradient.
Measured time_conv2d(const std::string& name, const Args& a, bool bias) {
  auto p = parse_case(name);
  const int64_t n = p["N"], c = p["C"], k = p["K"], h = p["H"], ks = p["k"];
  const int64_t stride = p.count("s") ? p["s"] : 1;
  const bool data = p.count("data") > 0;
  Tensor x = randn({n, c, h, h}, data ? TensorOptions{} : leaf_options());
  Tensor w = randn({k, c, ks, ks}, leaf_options());
  Tensor b = bias ? randn({k}, leaf_options()) : Tensor();
  std::function<Tensor()> f = [&] {
    return conv2d(x, w, b, {.stride = {stride, stride}, .padding = {ks / 2, ks / 2}});
  };
  std::vector<Tensor> leaves = {w};
  if (!data) leaves.push_back(x);
  if (bias) leaves.push_back(b);
  return time_autograd(f, leaves, grad_like_output(f), a);
}

Measured bench_conv2d(const std::string& name, const Args& a) {
  return time_conv2d(name, a, true);
}

Measured bench_conv2d_resnet8(const std::string& name, const Args& a) {
  return time_conv2d(name, a, false);
}

// FLOPs of one forward + backward of a conv2d case: the forward's 2*N*K*C*k*k*OH*OW multiply-adds
// again for the weight gradient and, unless the input is data, for the input gradient.
double conv2d_fwdbwd_flops(const std::string& name) {
  auto p = parse_case(name);
  const int64_t stride = p.count("s") ? p["s"] : 1, ks = p["k"], h = p["H"];
  const int64_t oh = (h + 2 * (ks / 2) - ks) / stride + 1;
  const double fwd =
      2.0 * double(p["N"]) * double(p["K"]) * double(p["C"]) * double(ks * ks) * double(oh * oh);
  return fwd * (p.count("data") ? 2.0 : 3.0);
}

Measured bench_linear(const std::string& name, const Args& a) {
  // "N128_784_256": batch 128, 784 inputs, 256 outputs.
  int64_t n = 0, fin = 0, fout = 0;
  std::sscanf(name.c_str(), "N%" SCNd64 "_%" SCNd64 "_%" SCNd64, &n, &fin, &fout);
  Tensor x = randn({n, fin}, leaf_options());
  Tensor w = randn({fout, fin}, leaf_options());
  Tensor b = randn({fout}, leaf_options());
  std::function<Tensor()> f = [&] { return linear(x, w, b); };
  return time_autograd(f, {x, w, b}, grad_like_output(f), a);
}

// Training batch norm of a conv layer's output ("N64_C32_H28"), forward and backward; for the
// batch_norm_relu op, relu(batch_norm(x)) as ResNet's conv -> BN -> ReLU runs it: "_fused" is the
// one-pass op (BatchNormOptions::relu, nn::BatchNorm::forward_relu), "_unfused" the two ops
// (torch's peer is F.relu(F.batch_norm(...)) for both).
Measured bench_batch_norm(const std::string& name, const Args& a) {
  auto p = parse_case(name);
  int64_t n = p["N"], c = p["C"], h = p["H"];
  const bool relu_after = p.count("fused") || p.count("unfused"), fused = p.count("fused") > 0;
  Tensor x = randn({n, c, h, h}, leaf_options());
  Tensor w = randn({c}, leaf_options());
  Tensor b = randn({c}, leaf_options());
  Tensor running_mean = zeros({c});
  Tensor running_var = ones({c});
  std::function<Tensor()> f = [&] {
    const Tensor y = batch_norm(x, running_mean, running_var, w, b,
                                {.training = true, .momentum = 0.1, .eps = 1e-5, .relu = fused});
    return relu_after && !fused ? relu(y) : y;
  };
  return time_autograd(f, {x, w, b}, grad_like_output(f), a);
}

// GroupNorm of a conv layer's output ("N64_C32_H28_G8": 8 groups), forward and backward.
Measured bench_group_norm(const std::string& name, const Args& a) {
  auto p = parse_case(name);
  int64_t n = p["N"], c = p["C"], h = p["H"];
  Tensor x = randn({n, c, h, h}, leaf_options());
  Tensor w = randn({c}, leaf_options()), b = randn({c}, leaf_options());
  std::function<Tensor()> f = [&] { return group_norm(x, p["G"], w, b); };
  return time_autograd(f, {x, w, b}, grad_like_output(f), a);
}

// LayerNorm over the last dim of (N, D) rows ("N8192_D384": a transformer's tokens).
Measured bench_layer_norm(const std::string& name, const Args& a) {
  auto p = parse_case(name);
  int64_t n = p["N"], d = p["D"];
  Tensor x = randn({n, d}, leaf_options());
  Tensor w = randn({d}, leaf_options()), b = randn({d}, leaf_options());
  std::function<Tensor()> f = [&] { return layer_norm(x, {d}, w, b); };
  return time_autograd(f, {x, w, b}, grad_like_output(f), a);
}

Measured bench_max_pool2d(const std::string& name, const Args& a) {
  // "N64_C32_H28_k2s2": kernel 2, stride 2.
  auto p = parse_case(name);
  int64_t n = p["N"], c = p["C"], h = p["H"];
  int64_t ks = 0, stride = 0;
  std::sscanf(name.substr(name.rfind("_k")).c_str(), "_k%" SCNd64 "s%" SCNd64, &ks, &stride);
  Tensor x = randn({n, c, h, h}, leaf_options());
  std::function<Tensor()> f = [&] {
    return max_pool2d(x, {.kernel_size = {ks, ks}, .stride = {stride, stride}});
  };
  return time_autograd(f, {x}, grad_like_output(f), a);
}

Measured bench_cross_entropy(const std::string& name, const Args& a) {
  auto p = parse_case(name);
  int64_t n = p["N"], c = p["C"];
  Tensor x = randn({n, c}, leaf_options());
  Tensor target = randint(0, c, {n});
  std::function<Tensor()> f = [&] { return cross_entropy(x, target, {}); };
  return time_autograd(f, {x}, Tensor(), a);  // the mean loss is a scalar
}

Measured bench_softmax(const std::string& name, const Args& a) {
  auto p = parse_case(name);
  int64_t n = p["N"], c = p["C"];
  Tensor x = randn({n, c}, leaf_options());
  std::function<Tensor()> f = [&] { return softmax(x, -1); };
  return time_autograd(f, {x}, grad_like_output(f), a);
}

// An activation over N x C elements (N64_C32_H28: a conv layer's output), forward and backward.
template <Tensor (*Activation)(const Tensor&)>
Measured bench_activation(const std::string& name, const Args& a) {
  auto p = parse_case(name);
  Tensor x = randn({p["N"], p["C"], p["H"], p["H"]}, leaf_options());
  std::function<Tensor()> f = [&] { return Activation(x); };
  return time_autograd(f, {x}, grad_like_output(f), a);
}

Measured bench_sgemm(const std::string& name, const Args& a) {
  int64_t n = parse_case(name)["n"];
  Tensor x = randn({n, n});
  Tensor y = randn({n, n});
  Measured m;
  m.fwd_ms = median_ms([&] { Tensor z = ops::matmul(x, y); }, a.reps, a.warmup);
  m.gflops = 2.0 * static_cast<double>(n) * n * n / (m.fwd_ms * 1e-3) / 1e9;
  return m;
}

// One optimizer step over one f32 parameter of n elements with its gradient set
// ("sgd_n1048576": SGD with momentum 0.9; "adam_n1048576": Adam), timed as fwd: the update
// ops::sgd_step_ / ops::adam_step_ that Optimizer::step() runs, after a first step (untimed).
Measured bench_optimizer(const std::string& name, const Args& a) {
  auto p = parse_case(name);
  Tensor w = randn({p["n"]}, leaf_options());
  w.set_grad(randn({p["n"]}));
  std::unique_ptr<nn::optim::Optimizer> opt;
  if (p.count("sgd"))
    opt = std::make_unique<nn::optim::SGD>(std::vector<Tensor>{w},
                                           nn::optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  else
    opt = std::make_unique<nn::optim::Adam>(std::vector<Tensor>{w}, nn::optim::AdamOptions{});
  opt->step();  // the first step allocates the state (untimed, as torch's)
  Measured m;
  m.fwd_ms = median_ms([&] { opt->step(); }, a.reps, a.warmup);
  return m;
}

// One optimizer step over a list of t f32 parameters of n elements each, the shape of a model's
// parameter list ("sgd_fused_t200_n5000": SGD with momentum 0.9 through Optimizer::step(), one
// multi-tensor pass; "sgd_loop_t200_n5000": the same update as ops::sgd_step_ called per tensor,
// the loop the fused pass replaced; "adam_..." likewise). The torch peer runs foreach=True for
// "fused" (torch 1.13's fused=True is CUDA-only) and foreach=False for "loop".
Measured bench_optimizer_list(const std::string& name, const Args& a) {
  auto p = parse_case(name);
  const bool sgd = p.count("sgd") > 0, fused = p.count("fused") > 0;
  std::vector<Tensor> ws, bufs, ms, vs;
  for (int64_t i = 0; i < p["t"]; ++i) {
    Tensor w = randn({p["n"]}, leaf_options());
    w.set_grad(randn({p["n"]}));
    ws.push_back(w);
    bufs.push_back(zeros({p["n"]}));
    ms.push_back(zeros({p["n"]}));
    vs.push_back(zeros({p["n"]}));
  }
  std::unique_ptr<nn::optim::Optimizer> opt;
  if (sgd)
    opt = std::make_unique<nn::optim::SGD>(ws, nn::optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  else
    opt = std::make_unique<nn::optim::Adam>(ws, nn::optim::AdamOptions{});
  opt->step();  // the first step allocates the state (untimed, as torch's)
  int64_t t = 1;
  auto loop = [&] {
    NoGradGuard no_grad;
    ++t;
    for (size_t i = 0; i < ws.size(); ++i) {
      if (sgd)
        ops::sgd_step_(ws[i], ws[i].grad(), bufs[i], {.lr = 0.01, .momentum = 0.9});
      else
        ops::adam_step_(ws[i], ws[i].grad(), ms[i], vs[i], {.step = t});
    }
  };
  Measured m;
  if (fused)
    m.fwd_ms = median_ms([&] { opt->step(); }, a.reps, a.warmup);
  else
    m.fwd_ms = median_ms(loop, a.reps, a.warmup);
  return m;
}

struct OpSpec {
  std::string name;
  std::vector<std::string> cases;  // names exactly as in bench/ops_cpu_torch.py, smallest first
  Measured (*run)(const std::string& name, const Args& a);
  // FLOPs of one forward + backward of a case: when set, the GFLOP/s columns show both sides'
  // forward + backward rate.
  double (*fwdbwd_flops)(const std::string& name) = nullptr;
};

const std::vector<OpSpec>& op_specs() {
  static const std::vector<OpSpec> specs = {
      {"conv2d",
       {"N64_C1_K32_H28_k3", "N64_C32_K64_H14_k3", "N64_C64_K64_H8_k3"},
       bench_conv2d,
       conv2d_fwdbwd_flops},
      {"conv2d_resnet8",
       {"N128_C1_K16_H28_k3_data", "N128_C16_K16_H28_k3", "N128_C16_K32_H28_k3_s2",
        "N128_C16_K32_H28_k1_s2", "N128_C32_K32_H14_k3", "N128_C32_K64_H14_k3_s2",
        "N128_C32_K64_H14_k1_s2", "N128_C64_K64_H7_k3"},
       bench_conv2d_resnet8,
       conv2d_fwdbwd_flops},
      {"conv2d_vgg11",
       {"N128_C1_K64_H28_k3_data", "N128_C64_K128_H14_k3", "N128_C128_K256_H7_k3",
        "N128_C256_K256_H7_k3", "N128_C256_K512_H3_k3", "N128_C512_K512_H3_k3",
        "N128_C512_K512_H1_k3"},
       bench_conv2d_resnet8,
       conv2d_fwdbwd_flops},
      {"linear", {"N128_784_256"}, bench_linear},
      {"batch_norm", {"N64_C32_H28"}, bench_batch_norm},
      {"batch_norm_relu", {"N64_C32_H28_unfused", "N64_C32_H28_fused"}, bench_batch_norm},
      {"group_norm", {"N64_C32_H28_G8"}, bench_group_norm},
      {"layer_norm", {"N8192_D384"}, bench_layer_norm},
      {"max_pool2d", {"N64_C32_H28_k2s2"}, bench_max_pool2d},
      {"cross_entropy", {"N128_C10", "N1024_C1000"}, bench_cross_entropy},
      {"softmax", {"N1024_C1000"}, bench_softmax},
      {"silu", {"N64_C32_H28"}, bench_activation<silu>},
      {"hardswish", {"N64_C32_H28"}, bench_activation<hardswish>},
      {"sgemm", {"n256", "n512", "n1024", "n2048"}, bench_sgemm},
      {"optimizer", {"sgd_n1048576", "adam_n1048576"}, bench_optimizer},
      {"optimizer_list",
       {"sgd_fused_t200_n5000", "sgd_loop_t200_n5000", "adam_fused_t200_n5000",
        "adam_loop_t200_n5000"},
       bench_optimizer_list},
  };
  return specs;
}

// Starts the torch peer (bench/ops_cpu_torch.py --serve), or returns null with the reason on
// stderr.
std::unique_ptr<bench::PeerProcess> start_peer(const Args& a) {
  try {
    auto peer = std::make_unique<bench::PeerProcess>(std::vector<std::string>{
        "/usr/bin/python3", a.torch_script, "--serve", "--threads", std::to_string(num_threads()),
        "--reps", std::to_string(a.reps), "--warmup", std::to_string(a.warmup)});
    // Its greeting comes once torch is imported: stoke's first case must not share the cores with
    // the import.
    const std::optional<std::string> hello = peer->read_line();
    if (!hello || hello->find("\"ready\"") == std::string::npos) {
      std::cerr << "stoke-bench-ops-cpu: the torch peer did not start (" << a.torch_script
                << (hello ? " said '" + *hello + "'" : " exited") << ")\n";
      return nullptr;
    }
    return peer;
  } catch (const std::exception& e) {
    std::cerr << "stoke-bench-ops-cpu: could not start the torch peer: " << e.what() << "\n";
    return nullptr;
  }
}

// The peer's measurement of one case (NaNs, with the reason on stderr, when it has none).
Measured ask_peer(bench::PeerProcess& peer, const std::string& op, const std::string& name) {
  Measured m;
  const std::optional<std::string> line = peer.ask(op + " " + name);
  if (!line) {
    std::cerr << "stoke-bench-ops-cpu: the torch peer exited (at " << op << " " << name
              << "); the rest of the rows have no torch side\n";
  } else if (bench::json_text(*line, "case") != name) {
    std::cerr << "stoke-bench-ops-cpu: the torch peer answered '" << *line << "' for " << op << " "
              << name << "\n";
  } else if (const std::string error = bench::json_text(*line, "error"); !error.empty()) {
    std::cerr << "stoke-bench-ops-cpu: the torch peer could not run " << op << " " << name << ": "
              << error << "\n";
  } else {
    m.fwd_ms = bench::json_number(*line, "fwd_ms");
    m.fwdbwd_ms = bench::json_number(*line, "fwdbwd_ms");
    m.gflops = bench::json_number(*line, "gflops");
  }
  // stoke's next measurement warms up longer: the peer's threads just went idle (bench_util.h).
  bench::min_warmup_ms = std::max(bench::min_warmup_ms, bench::kHandoffWarmupMs);
  return m;
}

bool torch_available(const Args& a) {
  if (!std::filesystem::exists(a.torch_script)) return false;
  return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

void usage(std::ostream& os) {
  os << "usage: stoke-bench-ops-cpu [--op NAME] [--case TEXT] [--reps N] [--warmup N] [--rounds "
        "N]\n"
        "                           [--threads N] [--peer | --no-peer] [--quick] [--torch-script "
        "PATH]\n"
        "  --op NAME     one of:";
  for (const auto& s : op_specs()) os << " " << s.name;
  os << "\n"
        "  --case TEXT   only the cases whose name contains TEXT (e.g. --op conv2d_resnet8\n"
        "                --case C32_K32)\n"
        "  --reps N      timed repetitions per measurement (median reported; default 20)\n"
        "  --warmup N    untimed repetitions first (default 5)\n"
        "  --rounds N    N passes over the case list, each measuring every case on stoke then\n"
        "                torch; each side's best median is reported (default 3)\n"
        "  --threads N   stoke's thread pool size, also passed to torch (default: num_threads())\n"
        "  --peer        also run PyTorch (bench/ops_cpu_torch.py); default when it imports\n"
        "  --no-peer     stoke only\n"
        "  --quick       smoke check: smallest case per op, 1 rep, no warm-up, no peer\n";
}

// Parses argv into `a`; returns an exit code (>= 0) when the program should stop.
int parse_args(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "stoke-bench-ops-cpu: " << flag << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    auto int_value = [&](const char* flag, int min) {
      std::string v = value(flag);
      char* end = nullptr;
      long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < min) {
        std::cerr << "stoke-bench-ops-cpu: " << flag << " expects an integer >= " << min
                  << ", got '" << v << "'\n";
        std::exit(2);
      }
      return static_cast<int>(n);
    };
    if (s == "--reps") {
      a.reps = int_value("--reps", 1);
    } else if (s == "--warmup") {
      a.warmup = int_value("--warmup", 0);
    } else if (s == "--rounds") {
      a.rounds = int_value("--rounds", 1);
    } else if (s == "--threads") {
      a.threads = int_value("--threads", 1);
    } else if (s == "--op") {
      a.op = value("--op");
    } else if (s == "--case") {
      a.case_filter = value("--case");
    } else if (s == "--peer") {
      a.peer = 1;
    } else if (s == "--no-peer") {
      a.peer = 0;
    } else if (s == "--quick") {
      a.quick = true;
    } else if (s == "--torch-script") {
      a.torch_script = value("--torch-script");
    } else if (s == "-h" || s == "--help") {
      usage(std::cout);
      return 0;
    } else {
      std::cerr << "stoke-bench-ops-cpu: unknown argument '" << s << "'\n";
      usage(std::cerr);
      return 2;
    }
  }
  if (!a.op.empty()) {
    bool known = false;
    for (const auto& spec : op_specs()) known = known || spec.name == a.op;
    if (!known) {
      std::cerr << "stoke-bench-ops-cpu: unknown op '" << a.op << "'\n";
      usage(std::cerr);
      return 2;
    }
  }
  if (a.quick) {
    a.reps = 1;
    a.rounds = 1;
    a.warmup = 0;
    a.peer = 0;
  }
  return -1;
}

double ratio(double torch_ms, double stoke_ms) {
  return torch_ms / stoke_ms;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (int rc = parse_args(argc, argv, a); rc >= 0) return rc;
  try {
    if (a.threads > 0) set_num_threads(a.threads);
    if (a.peer < 0) a.peer = torch_available(a) ? 1 : 0;
    if (a.peer == 1 && !std::filesystem::exists(a.torch_script)) {
      std::cerr << "stoke-bench-ops-cpu: --peer: no torch script at " << a.torch_script << "\n";
      return 2;
    }
    std::unique_ptr<bench::PeerProcess> peer = a.peer ? start_peer(a) : nullptr;
    if (!peer) a.peer = 0;
    std::cout << "stoke-bench-ops-cpu: threads " << num_threads() << ", reps " << a.reps
              << ", warmup " << a.warmup << ", rounds " << a.rounds << ", peer "
              << (a.peer ? "torch" : "none")
              << (a.quick ? " (quick smoke run: times are not meaningful)" : "") << std::endl;
    // Every selected case, in order; each round is one pass over all of them, so that a case's
    // rounds lie a whole pass (minutes) apart and a slow phase of the machine (tens of seconds)
    // falls on at most one of them.
    std::vector<Row> rows;
    std::vector<const OpSpec*> row_spec;
    for (const auto& spec : op_specs()) {
      if (!a.op.empty() && spec.name != a.op) continue;
      for (const auto& name : spec.cases)
        if (name.find(a.case_filter) != std::string::npos) {
          rows.push_back(Row{spec.name, name, {}, {}});
          row_spec.push_back(&spec);
          if (a.quick) break;
        }
    }
    for (int round = 0; round < a.rounds; ++round)
      for (size_t i = 0; i < rows.size(); ++i) {
        Row& row = rows[i];
        std::cerr << "  round " << round + 1 << "/" << a.rounds << ": " << row.op << " " << row.name
                  << " ..." << std::endl;
        row.stoke = best_of(row.stoke, row_spec[i]->run(row.name, a));
        if (peer && peer->alive())
          row.torch = best_of(row.torch, ask_peer(*peer, row.op, row.name));
      }
    for (size_t i = 0; i < rows.size(); ++i)
      if (row_spec[i]->fwdbwd_flops) {
        const double flops = row_spec[i]->fwdbwd_flops(rows[i].name);
        rows[i].stoke.gflops = flops / (rows[i].stoke.fwdbwd_ms * 1e6);
        rows[i].torch.gflops = flops / (rows[i].torch.fwdbwd_ms * 1e6);
      }

    bench::Table table({"op", "case", "stoke fwd", "stoke fwd+bwd", "torch fwd", "torch fwd+bwd",
                        "ratio fwd", "ratio fwd+bwd", "stoke GFLOP/s", "torch GFLOP/s"});
    std::vector<std::string> json_rows;
    for (const Row& r : rows) {
      double rf = ratio(r.torch.fwd_ms, r.stoke.fwd_ms);
      double rb = ratio(r.torch.fwdbwd_ms, r.stoke.fwdbwd_ms);
      table.add({r.op, r.name, bench::fmt(r.stoke.fwd_ms), bench::fmt(r.stoke.fwdbwd_ms),
                 bench::fmt(r.torch.fwd_ms), bench::fmt(r.torch.fwdbwd_ms), bench::fmt(rf, 2),
                 bench::fmt(rb, 2), bench::fmt(r.stoke.gflops, 1), bench::fmt(r.torch.gflops, 1)});
      json_rows.push_back(bench::JsonObject()
                              .add("op", r.op)
                              .add("case", r.name)
                              .add("stoke_fwd_ms", r.stoke.fwd_ms)
                              .add("stoke_fwdbwd_ms", r.stoke.fwdbwd_ms)
                              .add("torch_fwd_ms", r.torch.fwd_ms)
                              .add("torch_fwdbwd_ms", r.torch.fwdbwd_ms)
                              .add("ratio_fwd", rf)
                              .add("ratio_fwdbwd", rb)
                              .add("stoke_gflops", r.stoke.gflops)
                              .add("torch_gflops", r.torch.gflops)
                              .str());
    }
    std::cout << "\n";
    table.print(std::cout);
    std::cout << "(times: median ms; ratio = torch / stoke, above 1: stoke is faster; conv2d's "
                 "GFLOP/s: forward + backward, 3x the forward's 2*N*K*C*k*k*OH*OW, 2x for "
                 "\"data\" inputs)\n";
    std::cout << bench::JsonObject()
                     .add("bench", "ops_cpu")
                     .add("threads", num_threads())
                     .add("reps", a.reps)
                     .add("warmup", a.warmup)
                     .add("rounds", a.rounds)
                     .add("peer", a.peer ? "torch" : "none")
                     .add("quick", a.quick)
                     .raw("rows", bench::json_array(json_rows))
                     .str()
              << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "stoke-bench-ops-cpu: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
