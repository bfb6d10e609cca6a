#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>

#include "nn/models/models.h"
#include "nn/optim/optimizer.h"
#include "nn/optim/scheduler.h"
#include "stoke/stoke.h"
#include "support/fixture.h"
#include "support/fixture_tensor.h"

using namespace stoke;
using stoke::testing::to_tensor;
using namespace stoke::nn;
using stoke::testing::FixtureCase;

namespace {
// Fixture tensor names "g1", "p2", ... (built by appending: GCC 12 warns falsely on "g" + str).
std::string step_name(char prefix, int step) {
  std::string n(1, prefix);
  n += std::to_string(step);
  return n;
}

std::unique_ptr<optim::Optimizer> make(const FixtureCase& c, std::vector<Tensor> params) {
  const std::string kind = c.attr("optimizer");
  auto get = [&](const char* k, double d) { return c.has_attr(k) ? c.attr_double(k) : d; };
  if (kind == "sgd")
    return std::make_unique<optim::SGD>(params,
                                        optim::SGDOptions{.lr = get("lr", 0),
                                                          .momentum = get("momentum", 0),
                                                          .dampening = get("dampening", 0),
                                                          .weight_decay = get("weight_decay", 0),
                                                          .nesterov = get("nesterov", 0) != 0});
  if (kind == "rmsprop")
    return std::make_unique<optim::RMSprop>(
        params, optim::RMSpropOptions{.lr = get("lr", 1e-2),
                                      .alpha = get("alpha", 0.99),
                                      .eps = get("eps", 1e-8),
                                      .weight_decay = get("weight_decay", 0),
                                      .momentum = get("momentum", 0),
                                      .centered = get("centered", 0) != 0});
  if (kind == "adagrad")
    return std::make_unique<optim::Adagrad>(
        params,
        optim::AdagradOptions{.lr = get("lr", 1e-2),
                              .lr_decay = get("lr_decay", 0),
                              .weight_decay = get("weight_decay", 0),
                              .initial_accumulator_value = get("initial_accumulator_value", 0),
                              .eps = get("eps", 1e-10)});
  const optim::AdamOptions o{.lr = get("lr", 1e-3),
                             .beta1 = get("beta1", 0.9),
                             .beta2 = get("beta2", 0.999),
                             .eps = get("eps", 1e-8),
                             .weight_decay = get("weight_decay", 0),
                             .amsgrad = get("amsgrad", 0) != 0};
  if (kind == "adam") return std::make_unique<optim::Adam>(params, o);
  return std::make_unique<optim::AdamW>(
      params, optim::AdamWOptions{.lr = o.lr,
                                  .beta1 = o.beta1,
                                  .beta2 = o.beta2,
                                  .eps = o.eps,
                                  .weight_decay = get("weight_decay", 1e-2),
                                  .amsgrad = o.amsgrad});
}
}  // namespace

TEST_CASE("optimizers: three steps match torch.optim", "[nn][optim]") {
  const auto cases = stoke::testing::load_fixture(stoke::testing::fixture_path("optim.txt"));
  // SGD x4, Adam x2, AdamW, RMSprop x2, Adagrad x2, Adam and AdamW with amsgrad
  REQUIRE(cases.size() == 13);
  for (const auto& c : cases) {
    INFO(c.name);
    Tensor p = to_tensor(c.tensor("p0")).set_requires_grad(true);
    auto opt = make(c, {p});
    for (int s = 1; s <= 3; ++s) {
      p.set_grad(to_tensor(c.tensor(step_name('g', s))));
      opt->step();
      const auto got = p.to_vector<float>();
      const auto& want = c.tensor(step_name('p', s)).values;
      // torch's f32 step and stoke's round the same ~10 operations per element in other orders
      // (foreach ops against one fused loop): a few ulps (2^-23 relative) of |p| <= 3 apart per
      // step, 12 ulps after three; the fixture's 9 printed digits add ~5e-9. An element near 0
      // is p minus an update of |.| <= 1: a few ulps of 1 per step, under 1e-6 absolute.
      for (size_t i = 0; i < got.size(); ++i)
        REQUIRE(got[i] == Approx(want[i]).epsilon(12 * 0x1p-23).margin(1e-6));
    }
  }
}

TEST_CASE("optimizers: AdamW's default weight decay is torch.optim.AdamW's 1e-2", "[nn][optim]") {
  Tensor p = ones({3}).set_requires_grad(true);
  optim::AdamW opt({p}, {.lr = 0.1});
  CHECK(opt.options().weight_decay == 1e-2);
  // A zero gradient leaves only the decoupled decay: p *= 1 - lr * weight_decay
  // (torch.optim.AdamW([p], lr=0.1) gives 0.999 too).
  p.set_grad(zeros({3}));
  opt.step();
  // 1 - lr * wd and the product with p = 1 rounded in f32: within 2u = 2^-23 of 0.999.
  for (float v : p.to_vector<float>()) CHECK(v == Approx(0.999).epsilon(0x1p-23));
  optim::Adam adam({p}, {.lr = 0.1});
  CHECK(adam.options().weight_decay == 0);  // torch.optim.Adam's default
}

TEST_CASE("optimizers: state_dict round trip resumes exactly", "[nn][optim]") {
  for (const char* kind : {"sgd", "adam", "adam_amsgrad", "rmsprop", "adagrad"}) {
    INFO(kind);
    Generator g(3);
    Tensor p1 = randn({10}, {}, &g).set_requires_grad(true);
    Tensor p2 = p1.detach().clone().set_requires_grad(true);
    auto make_opt = [&](Tensor p) -> std::unique_ptr<optim::Optimizer> {
      if (std::string(kind) == "sgd")
        return std::make_unique<optim::SGD>(std::vector<Tensor>{p},
                                            optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
      if (std::string(kind) == "rmsprop")
        return std::make_unique<optim::RMSprop>(
            std::vector<Tensor>{p},
            optim::RMSpropOptions{.lr = 0.01, .momentum = 0.5, .centered = true});
      if (std::string(kind) == "adagrad")
        return std::make_unique<optim::Adagrad>(std::vector<Tensor>{p},
                                                optim::AdagradOptions{.lr = 0.1, .lr_decay = 0.1});
      return std::make_unique<optim::Adam>(
          std::vector<Tensor>{p},
          optim::AdamOptions{
              .lr = 0.1, .beta2 = 0.5, .amsgrad = std::string(kind) == "adam_amsgrad"});
    };
    auto a = make_opt(p1), b = make_opt(p2);
    std::vector<Tensor> grads;
    for (int s = 0; s < 4; ++s) grads.push_back(randn({10}, {}, &g));
    for (int s = 0; s < 2; ++s) {
      p1.set_grad(grads[s]);
      a->step();
      p2.set_grad(grads[s]);
      b->step();
    }
    auto c = make_opt(p2);  // a fresh optimizer restored from b's state
    c->load_state_dict(b->state_dict());
    for (int s = 2; s < 4; ++s) {
      p1.set_grad(grads[s]);
      a->step();
      p2.set_grad(grads[s]);
      c->step();
    }
    // Bit for bit: the same steps on the same values, the state restored from a save and load.
    CHECK(p1.to_vector<float>() == p2.to_vector<float>());
  }
  Tensor p = zeros({3}, {.requires_grad = true});
  optim::SGD sgd({p}, {.lr = 0.1, .momentum = 0.9});
  CHECK_THROWS_WITH(sgd.load_state_dict({{"state.0.momentum_buffer", zeros({4})}}),
                    Catch::Contains("expected f32 [3], got f32 [4]"));
  CHECK_THROWS_WITH(sgd.load_state_dict({{"state.7.momentum_buffer", zeros({3})}}),
                    Catch::Contains("unexpected optimizer state 'state.7.momentum_buffer'"));
  optim::RMSprop rms({p}, {.momentum = 0.9});
  CHECK_THROWS_WITH(rms.load_state_dict({{"state.0.step", zeros({}, {.dtype = DType::i64})},
                                         {"state.0.square_avg", zeros({3})}}),
                    Catch::Contains("missing optimizer state 'state.0.momentum_buffer'"));
  CHECK_THROWS_WITH(optim::Adagrad({zeros({2}, {.dtype = DType::f16, .requires_grad = true})}, {}),
                    Catch::Contains("Adagrad") && Catch::Contains("f32 and f64 parameters"));
  // amsgrad's running maximum is state as torch names it, and a state without it (or with it, for
  // an Adam without amsgrad) is refused by name.
  Tensor q = zeros({3}, {.requires_grad = true});
  optim::Adam ams({q}, {.amsgrad = true});
  q.set_grad(ones({3}));
  ams.step();
  NamedTensors st = ams.state_dict();
  bool has_max = false;
  for (const auto& [k, t] : st) has_max = has_max || k == "state.0.max_exp_avg_sq";
  CHECK(has_max);
  optim::Adam plain({q}, {});
  CHECK_THROWS_WITH(plain.load_state_dict(st),
                    Catch::Contains("unexpected optimizer state 'state.0.max_exp_avg_sq'"));
  NamedTensors without;
  for (const auto& [k, t] : st)
    if (k != "state.0.max_exp_avg_sq") without.emplace_back(k, t);
  CHECK_THROWS_WITH(ams.load_state_dict(without),
                    Catch::Contains("missing optimizer state 'state.0.max_exp_avg_sq'"));
}

TEST_CASE("schedulers: closed forms match PyTorch's", "[nn][optim]") {
  Tensor p = zeros({1}, {.requires_grad = true});
  optim::SGD opt({p}, {.lr = 1.0});
  // Closed forms in double on both sides (the values read from PyTorch 1.13 print 15 digits):
  // Catch's default Approx (100 f32 epsilons, 1.2e-5 relative) is loose; 1e-12 relative holds.
  optim::StepLR step(opt, 2, 0.5);
  CHECK(opt.lr() == 1.0);
  step.step();
  CHECK(opt.lr() == 1.0);
  step.step();
  CHECK(opt.lr() == 0.5);
  optim::MultiStepLR multi(opt, {1, 3}, 0.1);
  CHECK(multi.lr_at(0) == Approx(0.5).epsilon(1e-12));
  CHECK(multi.lr_at(1) == Approx(0.05).epsilon(1e-12));
  CHECK(multi.lr_at(3) == Approx(0.005).epsilon(1e-12));
  opt.set_lr(0.1);
  optim::CosineAnnealingLR cosine(opt, 10, 0.001);
  CHECK(cosine.lr_at(0) == Approx(0.1).epsilon(1e-12));
  CHECK(cosine.lr_at(5) == Approx(0.001 + (0.1 - 0.001) / 2).epsilon(1e-12));
  CHECK(cosine.lr_at(10) == Approx(0.001).epsilon(1e-12));
  // torch.optim.lr_scheduler.OneCycleLR(max_lr=0.1, total_steps=100): values read from
  // PyTorch 1.13.
  optim::OneCycleLR one(opt, 0.1, 100);
  CHECK(one.lr_at(0) == Approx(0.004).epsilon(1e-12));
  CHECK(one.lr_at(29) == Approx(0.1).epsilon(1e-12));
  CHECK(one.lr_at(99) == Approx(4e-7).epsilon(1e-12));
  CHECK(one.lr_at(50) == Approx(0.0793893450575732).epsilon(1e-12));
  opt.set_lr(0.1);  // OneCycleLR set the optimizer to its initial lr
  optim::LinearWarmup warm(opt, 4, 0.0, std::make_unique<optim::CosineAnnealingLR>(opt, 10));
  CHECK(warm.lr_at(0) == Approx(0.0).epsilon(1e-12));
  CHECK(warm.lr_at(2) == Approx(0.05).epsilon(1e-12));
  CHECK(warm.lr_at(4) == Approx(0.1).epsilon(1e-12));
}

TEST_CASE("clip_grad_norm_ scales gradients to the global norm", "[nn][optim]") {
  Tensor a = zeros({2}, {.requires_grad = true}), b = zeros({1}, {.requires_grad = true});
  a.set_grad(from_vector<float>({3, 0}, {2}));
  b.set_grad(from_vector<float>({4}, {1}));
  CHECK(optim::clip_grad_norm_({a, b}, 1.0) == 5.0);  // sqrt(9 + 16): exact
  // torch's clip_coef = max_norm / (norm + 1e-6) = 0.2 (1 - 2e-7), times 3 and 4 in f32 (two
  // roundings, 1.2e-7): within 3.2e-7 relative of 0.6 and 0.8, and the new norm of 1.
  CHECK(a.grad().to_vector<float>()[0] == Approx(0.6).epsilon(4e-7));
  CHECK(b.grad().to_vector<float>()[0] == Approx(0.8).epsilon(4e-7));
  CHECK(optim::clip_grad_norm_({a, b}, 10.0) == Approx(1.0).epsilon(4e-7));  // no change below
}

TEST_CASE("Optimizer::clip_grad_norm_ clips its own parameters' gradients", "[nn][optim]") {
  Tensor a = zeros({2}, {.requires_grad = true}), b = zeros({1}, {.requires_grad = true});
  optim::SGD opt({a, b}, {.lr = 0.1});
  a.set_grad(from_vector<float>({3, 0}, {2}));
  b.set_grad(from_vector<float>({4}, {1}));
  const Tensor norm = opt.clip_grad_norm_(1.0);  // a CPU tensor: the f64 norm, read
  CHECK(norm.item() == 5.0);                     // sqrt(9 + 16): exact
  // The coefficient as above: within 3.2e-7 relative of 0.6 and 0.8.
  CHECK(a.grad().to_vector<float>()[0] == Approx(0.6).epsilon(4e-7));
  CHECK(b.grad().to_vector<float>()[0] == Approx(0.8).epsilon(4e-7));
}

TEST_CASE("gradient accumulation over k micro-batches equals one batch of k*b",
          "[nn][optim][accum]") {
  Generator g(5);
  Tensor x = randn({8, 1, 28, 28}, {}, &g);
  Tensor y = randint(0, 10, {8}, {.dtype = DType::i64}, &g);
  Generator init_a(1), init_b(1);
  auto a = models::make_model("lenet5", {.generator = &init_a});
  auto b = models::make_model("lenet5", {.generator = &init_b});
  optim::SGD oa(a->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD ob(b->parameters(), {.lr = 0.1, .momentum = 0.9});
  // The path each parameter element of a travels: the sum of its steps' |change|.
  std::vector<std::vector<float>> before, path;
  for (const auto& [n, t] : a->state_dict()) {
    before.push_back(t.to_vector<float>());
    path.emplace_back(before.back().size(), 0.f);
  }
  for (int step = 0; step < 2; ++step) {
    cross_entropy((*a)(x), y).backward();
    oa.step();
    oa.zero_grad();
    const auto sd = a->state_dict();
    for (size_t i = 0; i < sd.size(); ++i) {
      const auto now = sd[i].second.to_vector<float>();
      for (size_t j = 0; j < now.size(); ++j) path[i][j] += std::abs(now[j] - before[i][j]);
      before[i] = now;
    }
    for (int k = 0; k < 4; ++k) {
      Tensor loss = cross_entropy((*b)(x.narrow(0, 2 * k, 2)), y.narrow(0, 2 * k, 2));
      (loss * 0.25).backward();
    }
    ob.step();
    ob.zero_grad();
  }
  // The same per-sample gradient terms summed in other groupings (4 micro-batch means x 0.25
  // against one mean of 8): a gradient element sums K <= 8 x 784 terms of random sign (conv1's
  // weights: batch x positions), within 6u sqrt(K / 3) = 1.6e-5 of |g| in either grouping (six
  // standard deviations of random rounding errors, u = 2^-24) of the sum of its terms' magnitudes.
  // That sum is the tensor's gradient scale, not the element's own result: an element whose
  // gradient nearly cancels keeps its terms' rounding (one did under OpenBLAS's Haswell kernels:
  // its own path bounded it at 1.1e-9). So, first order, each parameter element ends within that
  // fraction of the largest path of its tensor, plus a rounding of its value.
  const double delta = 6 * 0x1p-24 * std::sqrt(8.0 * 784 / 3);
  const auto sa = a->state_dict(), sb = b->state_dict();
  for (size_t i = 0; i < sa.size(); ++i) {
    INFO(sa[i].first);
    const auto va = sa[i].second.to_vector<float>(), vb = sb[i].second.to_vector<float>();
    const double scale = *std::max_element(path[i].begin(), path[i].end());
    for (size_t j = 0; j < va.size(); ++j)
      REQUIRE(std::abs(vb[j] - va[j]) <= delta * scale + 0x1p-23 * std::abs(va[j]));
  }
}

namespace {

// Parameters and gradients that differ per parameter, in f64 so that equality is exact.
std::vector<Tensor> params_with_grads(uint64_t seed, const std::vector<Shape>& shapes) {
  Generator g(seed);
  std::vector<Tensor> out;
  for (const Shape& s : shapes) {
    Tensor p = randn(s, {.dtype = DType::f64}, &g).set_requires_grad(true);
    p.set_grad(randn(s, {.dtype = DType::f64}, &g));
    out.push_back(p);
  }
  return out;
}

std::vector<Tensor> clones(const std::vector<Tensor>& ps) {
  std::vector<Tensor> out;
  for (const Tensor& p : ps) {
    Tensor c = p.detach().clone().set_requires_grad(true);
    c.set_grad(p.grad().clone());
    out.push_back(c);
  }
  return out;
}

}  // namespace

TEST_CASE("optimizers: parameter groups step as separate optimizers with each group's settings",
          "[nn][optim]") {
  const std::vector<Shape> shapes = {{3, 4}, {4}, {2, 2, 3}, {5}};
  // Groups: {0, 1} with the defaults, {2, 3} with their own lr and no decay.
  auto grouped = [&](const std::vector<Tensor>& ps) {
    return std::vector<optim::ParamGroup>{
        {.params = {ps[0], ps[1]}}, {.params = {ps[2], ps[3]}, .lr = 0.3, .weight_decay = 0.0}};
  };
  const std::vector<Tensor> a = params_with_grads(1, shapes);
  const std::vector<Tensor> b = clones(a);  // the reference: two single-group optimizers
  SECTION("SGD") {
    optim::SGD opt(grouped(a), {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-2});
    optim::SGD ref0({b[0], b[1]}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-2});
    optim::SGD ref1({b[2], b[3]}, {.lr = 0.3, .momentum = 0.9, .weight_decay = 0.0});
    for (int s = 0; s < 3; ++s) {
      opt.step();
      ref0.step();
      ref1.step();
    }
  }
  SECTION("AdamW") {
    optim::AdamW opt(grouped(a), {.lr = 0.01, .weight_decay = 0.1});
    optim::AdamW ref0({b[0], b[1]}, {.lr = 0.01, .weight_decay = 0.1});
    optim::AdamW ref1({b[2], b[3]}, {.lr = 0.3, .weight_decay = 0.0});
    for (int s = 0; s < 3; ++s) {
      opt.step();
      ref0.step();
      ref1.step();
    }
  }
  SECTION("Adam") {
    optim::Adam opt(grouped(a), {.lr = 0.01, .weight_decay = 0.1});
    optim::Adam ref0({b[0], b[1]}, {.lr = 0.01, .weight_decay = 0.1});
    optim::Adam ref1({b[2], b[3]}, {.lr = 0.3, .weight_decay = 0.0});
    for (int s = 0; s < 3; ++s) {
      opt.step();
      ref0.step();
      ref1.step();
    }
  }
  // Bit for bit: a group's step is its optimizer's elementwise update on its own parameters with
  // its own settings, the same operations on the same values as the single-group optimizers.
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("parameter " << i);
    CHECK(a[i].to_vector<double>() == b[i].to_vector<double>());
  }
}

TEST_CASE("optimizers: groups number their state across groups and keep their own rates",
          "[nn][optim]") {
  const std::vector<Tensor> ps = params_with_grads(2, {{2}, {3}, {4}});
  optim::SGD opt({{.params = {ps[0]}, .lr = 0.5}, {.params = {ps[1], ps[2]}}},
                 {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3});
  CHECK(opt.num_groups() == 2);
  CHECK(opt.lr(0) == 0.5);
  CHECK(opt.lr(1) == 0.1);
  CHECK(opt.weight_decay(0) == 1e-3);
  CHECK(opt.params_of(1).size() == 2);
  CHECK(opt.params().size() == 3);
  opt.step();
  const NamedTensors state = opt.state_dict();
  REQUIRE(state.size() == 3);
  CHECK(state[2].first == "state.2.momentum_buffer");  // the second group's second parameter
  CHECK(state[2].second.shape() == Shape{4});

  // A scheduler scales each group from its own initial rate; set_lr sets them all.
  optim::StepLR sched(opt, 1, 0.5);
  sched.step();
  CHECK(opt.lr(0) == 0.25);
  CHECK(opt.lr(1) == 0.05);
  CHECK(sched.base_lrs() == std::vector<double>{0.5, 0.1});
  opt.set_lr(0.01);
  CHECK(opt.lr(1) == 0.01);

  CHECK_THROWS_WITH(optim::SGD({{.params = {ps[0]}}, {.params = {ps[1], ps[0]}}}, {.lr = 0.1}),
                    Catch::Contains("SGD") && Catch::Contains("parameter 2 (group 1)") &&
                        Catch::Contains("already in an earlier group"));
  CHECK_THROWS_WITH(optim::Adam(std::vector<optim::ParamGroup>{}, {}),
                    Catch::Contains("at least one parameter group"));
  CHECK_THROWS_WITH(optim::SGD({{.params = {ps[0]}, .lr = -1.0}}, {.lr = 0.1}),
                    Catch::Contains("parameter group 0") && Catch::Contains("-1"));
  CHECK_THROWS_WITH(opt.lr(2), Catch::Contains("no parameter group 2 (2 groups)"));
}

TEST_CASE("optimizers: weight_decay_groups leaves biases and norm weights undecayed",
          "[nn][optim]") {
  Generator g(3);
  const auto model = models::make_model(
      "resnet8", {.in_channels = 1, .num_classes = 10, .input_size = 28, .generator = &g});
  const auto groups = optim::weight_decay_groups(*model, 5e-4);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].weight_decay == 5e-4);
  CHECK(groups[1].weight_decay == 0.0);
  size_t decayed = 0, kept = 0;
  for (const auto& [name, p] : model->named_parameters()) {
    INFO(name);
    const bool is_weight_matrix = p.dim() >= 2;
    CHECK(is_weight_matrix ==
          (name.find("bn") == std::string::npos && name.find("bias") == std::string::npos &&
           name.find("downsample.1") == std::string::npos));
    (is_weight_matrix ? decayed : kept)++;
  }
  CHECK(groups[0].params.size() == decayed);
  CHECK(groups[1].params.size() == kept);
  CHECK(kept > 0);
  optim::SGD opt(groups, {.lr = 0.1, .momentum = 0.9, .weight_decay = 5e-4});
  CHECK(opt.params().size() == model->parameters().size());
}
