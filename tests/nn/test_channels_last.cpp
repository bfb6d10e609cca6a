// The channels_last memory format (Tensor::contiguous(MemoryFormat::channels_last)) on the CPU:
// the layout's strides and copies, every op a CNN of the zoo runs accepting it and keeping it,
// models training in it as in NCHW, and stoke-train --channels-last.
#include <sys/wait.h>
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#include "core/parallel.h"
#include "ops/batch_norm.h"
#include "support/channels_last_util.h"

using namespace stoke;
using namespace stoke::test;

TEST_CASE("channels_last: strides, the copy's values, size-1 dims, and what is refused",
          "[channels_last]") {
  Generator g(2);
  const Tensor x = randn({2, 3, 4, 5}, {}, &g);
  CHECK(x.is_contiguous(MemoryFormat::contiguous));
  CHECK_FALSE(x.is_contiguous(MemoryFormat::channels_last));
  CHECK(x.suggest_memory_format() == MemoryFormat::contiguous);
  const Tensor y = x.contiguous(MemoryFormat::channels_last);
  CHECK(y.strides() == Shape{60, 1, 15, 3});
  CHECK(y.shape() == x.shape());
  // Element (n, c, h, w) at n*60 + h*15 + w*3 + c of the buffer: an independent index loop.
  const std::vector<float> xv = x.to_vector<float>();
  const float* buf = y.data<float>();
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t w = 0; w < 5; ++w)
          CHECK(buf[n * 60 + h * 15 + w * 3 + c] ==
                xv[static_cast<size_t>(((n * 3 + c) * 4 + h) * 5 + w)]);
  CHECK(y.contiguous(MemoryFormat::channels_last).data_ptr() == y.data_ptr());  // no copy
  CHECK(y.contiguous().strides() == Shape{60, 20, 5, 1});
  CHECK(y.contiguous().to_vector<float>() == xv);
  // One channel, or 1x1 images: dense in both layouts at once (size-1 dims do not count, as in
  // torch); the strides of the size-1 dims tell which one a tensor suggests (torch's rule), and
  // contiguous(channels_last) gives NHWC's own strides.
  const Tensor one_channel = randn({2, 1, 4, 5}, {}, &g);
  CHECK(one_channel.is_contiguous(MemoryFormat::channels_last));
  CHECK(one_channel.suggest_memory_format() == MemoryFormat::contiguous);
  const Tensor one_channel_nhwc = one_channel.contiguous(MemoryFormat::channels_last);
  CHECK(one_channel_nhwc.strides() == Shape{20, 1, 5, 1});
  CHECK(one_channel_nhwc.suggest_memory_format() == MemoryFormat::channels_last);
  CHECK(one_channel_nhwc.to_vector<float>() == one_channel.to_vector<float>());
  const Tensor pooled = randn({3, 8, 1, 1}, {}, &g);
  CHECK(pooled.is_contiguous(MemoryFormat::channels_last));
  CHECK(pooled.suggest_memory_format() == MemoryFormat::contiguous);
  CHECK(pooled.contiguous(MemoryFormat::channels_last).strides() == Shape{8, 1, 8, 8});
  CHECK(pooled.contiguous(MemoryFormat::channels_last).suggest_memory_format() ==
        MemoryFormat::channels_last);
  // Neither layout: a transposed view, an expanded one.
  CHECK(x.transpose(2, 3).suggest_memory_format() == MemoryFormat::contiguous);
  CHECK(randn({1, 3, 1, 1}, {}, &g).expand({2, 3, 4, 5}).suggest_memory_format() ==
        MemoryFormat::contiguous);
  // The gradient comes back through the copy.
  Tensor leaf = x.clone();
  leaf.set_requires_grad(true);
  sum(mul(leaf.contiguous(MemoryFormat::channels_last), 3.0)).backward();
  CHECK(leaf.grad().to_vector<float>() == std::vector<float>(120, 3.0f));
  CHECK_FALSE(randn({2, 3, 4}, {}, &g).is_contiguous(MemoryFormat::channels_last));
  CHECK_THROWS_WITH(randn({2, 3, 4}, {}, &g).contiguous(MemoryFormat::channels_last),
                    Catch::Contains("channels_last needs a 4-d") && Catch::Contains("[2, 3, 4]"));
}

TEST_CASE("channels_last: every op of the zoo's CNNs accepts NHWC input and equals NCHW",
          "[channels_last]") {
  check_channels_last_equals_nchw(Device::cpu());
}

// Batch norm runs on the NHWC storage itself on the CPU (ops/cpu/batch_norm.cpp, channel_sums_cl
// and affine_cl), reproducing the NCHW path's lanes, folds and order per channel. So equality, by
// construction, on planes that take each of that path's branches: rows of more than kBnFold = 1024
// values (two chunks, the second with a tail past its whole lanes), a row with a tail (35 = 32 +
// 3), short rows (9 < kRowMin = 16: sums in double), in f32 and f64 (other lane counts), training
// (with and without the fused ReLU) and eval, forward and backward, at 1 and 2 threads.
TEST_CASE("channels_last: CPU batch norm on NHWC memory equals NCHW bit for bit",
          "[channels_last]") {
  const int threads = num_threads();
  const std::vector<Shape> shapes = {{2, 5, 37, 37}, {3, 6, 7, 5}, {4, 3, 3, 3}, {2, 4, 1, 1}};
  for (const int t : {1, 2}) {
    set_num_threads(t);
    for (const Shape& shape : shapes)
      for (DType d : {DType::f32, DType::f64})
        for (int mode = 0; mode < 3; ++mode) {  // training, training with ReLU, eval
          INFO(t << " threads, " << shape << " " << d << " mode " << mode);
          const int64_t C = shape[1];
          Generator g(static_cast<uint64_t>(C * 10 + mode));
          const Tensor x = (randn(shape, {}, &g) * 2 + 3).to(d);
          const Tensor gy = randn(shape, {}, &g).to(d);
          const Tensor w = (randn({C}, {}, &g) * 0.3 + 1).to(d), b = randn({C}, {}, &g).to(d);
          const Tensor rm = randn({C}, {}, &g).to(d), rv = (abs(randn({C}, {}, &g)) + 0.5).to(d);
          const BatchNormOptions o{.training = mode < 2, .relu = mode == 1};
          std::vector<std::vector<double>> got[2];
          for (int run = 0; run < 2; ++run) {
            const Tensor xi = run == 0 ? x : x.contiguous(MemoryFormat::channels_last);
            const Tensor gyi = run == 0 ? gy : gy.contiguous(MemoryFormat::channels_last);
            const Tensor rmi = rm.clone(), rvi = rv.clone();
            const auto f = ops::batch_norm_forward(xi, rmi, rvi, w, b, o);
            if (run == 1 && shape[2] * shape[3] > 1)
              CHECK(f.output.suggest_memory_format() == MemoryFormat::channels_last);
            const auto bw =
                ops::batch_norm_backward(gyi, xi, w, f.save_mean, f.save_invstd, o.training,
                                         {true, true, true}, o.relu ? f.output : Tensor());
            for (const Tensor& v : {f.output, f.save_mean, f.save_invstd, rmi, rvi, bw.grad_input,
                                    bw.grad_weight, bw.grad_bias})
              got[run].push_back(v.contiguous().to(DType::f64).to_vector<double>());
          }
          for (size_t i = 0; i < got[0].size(); ++i) {
            INFO("result " << i
                           << " (output, save_mean, save_invstd, running_mean, running_var, "
                              "grad_input, grad_weight, grad_bias)");
            CHECK(got[1][i] == got[0][i]);
          }
        }
  }
  set_num_threads(threads);
}

TEST_CASE(
    "channels_last: ResNet-8, MobileNetV2 and LeNet-5 keep NHWC through every layer and train "
    "as in NCHW bit for bit, at 1 and 2 threads and under bf16 autocast",
    "[channels_last]") {
  const int threads = num_threads();
  for (const int t : {1, 2}) {
    set_num_threads(t);
    INFO(t << " threads");
    check_model_channels_last("resnet8", 3, 16, Device::cpu(), 3);
    check_model_channels_last("mobilenetv2", 3, 32, Device::cpu(), 2);
    check_model_channels_last("lenet5", 1, 28, Device::cpu(), 3);  // one input channel
  }
  check_model_channels_last("resnet8", 3, 16, Device::cpu(), 2, DType::bf16);  // under autocast
  set_num_threads(threads);
}

#ifdef STOKE_TRAIN_EXE
namespace {

namespace fs = std::filesystem;

// stoke-train's exit code and output.
std::pair<int, std::string> run_train(const std::string& args) {
  FILE* p = popen((std::string(STOKE_TRAIN_EXE) + " " + args + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), p) != nullptr) out += buf.data();
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128, out};
}

// The text of `key` in each metrics record of `type`, in order (compared as text: bit for bit).
std::vector<std::string> metric_text(const fs::path& file, const std::string& type,
                                     const std::string& key) {
  std::ifstream in(file);
  const std::regex re("\"" + key + "\":([-+0-9.eEnaif]+)");
  std::vector<std::string> out;
  std::smatch m;
  for (std::string line; std::getline(in, line);)
    if (line.find("\"type\":\"" + type + "\"") != std::string::npos &&
        std::regex_search(line, m, re))
      out.push_back(m[1].str());
  return out;
}

}  // namespace

TEST_CASE("channels_last: stoke-train --channels-last trains ResNet-8 to the NCHW run's losses",
          "[channels_last]") {
  const fs::path data = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(data)) {
    WARN("no Fashion-MNIST at " << data << " (scripts/install-deps.sh installs it): skipped");
    return;
  }
  const fs::path dir = fs::temp_directory_path() / ("stoke-cl-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string common =
      " --model resnet8 --epochs 1 --limit-train 48 --limit-test 16 --batch 16 --lr 0.05 "
      "--seed 3 --log-every 1 --no-progress --workers 2 --augment";
  const auto nchw = run_train(common + " --metrics " + (dir / "nchw.jsonl").string());
  INFO(nchw.second);
  REQUIRE(nchw.first == 0);
  const auto nhwc =
      run_train(common + " --channels-last --metrics " + (dir / "nhwc.jsonl").string());
  INFO(nhwc.second);
  REQUIRE(nhwc.first == 0);
  // The same operations on each element (check_model_channels_last): equal as printed.
  const auto want = metric_text(dir / "nchw.jsonl", "step", "loss");
  REQUIRE(want.size() == 3);
  CHECK(metric_text(dir / "nhwc.jsonl", "step", "loss") == want);
  CHECK(metric_text(dir / "nhwc.jsonl", "epoch", "test_loss") ==
        metric_text(dir / "nchw.jsonl", "epoch", "test_loss"));
  const auto bad = run_train("--channels-last=maybe");  // a switch takes no other value
  CHECK(bad.first == 1);
  CHECK_THAT(bad.second, Catch::Contains("--channels-last is a switch"));
  fs::remove_all(dir);
}
#endif
