#include "nn/optim/scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace stoke::nn::optim {

StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma)
    : LRScheduler(opt), step_size(step_size), gamma(gamma) {
  STOKE_CHECK(step_size > 0, "StepLR", "step_size must be positive, got ", step_size);
  reset();
}
double StepLR::lr_at(int64_t step, double base) const {
  return base * std::pow(gamma, static_cast<double>(step / std::max<int64_t>(step_size, 1)));
}

MultiStepLR::MultiStepLR(Optimizer& opt, std::vector<int64_t> ms, double gamma)
    : LRScheduler(opt), milestones(std::move(ms)), gamma(gamma) {
  STOKE_CHECK(std::is_sorted(milestones.begin(), milestones.end()), "MultiStepLR",
              "milestones must be increasing");
  reset();
}
double MultiStepLR::lr_at(int64_t step, double base) const {
  const auto passed =
      std::upper_bound(milestones.begin(), milestones.end(), step) - milestones.begin();
  return base * std::pow(gamma, static_cast<double>(passed));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min)
    : LRScheduler(opt), t_max(t_max), eta_min(eta_min) {
  STOKE_CHECK(t_max > 0, "CosineAnnealingLR", "t_max must be positive, got ", t_max);
  reset();
}
double CosineAnnealingLR::lr_at(int64_t step, double base) const {
  const double t = static_cast<double>(std::min(step, t_max)) / static_cast<double>(t_max);
  return eta_min + (base - eta_min) * (1 + std::cos(std::numbers::pi * t)) / 2;
}

OneCycleLR::OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, double pct_start,
                       double div_factor, double final_div_factor)
    : LRScheduler(opt),
      max_lr(max_lr),
      total_steps(total_steps),
      pct_start(pct_start),
      div_factor(div_factor),
      final_div_factor(final_div_factor) {
  STOKE_CHECK(total_steps > 1, "OneCycleLR", "total_steps must be > 1, got ", total_steps);
  STOKE_CHECK(pct_start > 0 && pct_start < 1, "OneCycleLR", "pct_start must be in (0, 1), got ",
              pct_start);
  reset();
}
// Every group follows max_lr (torch with one max_lr for all groups does the same).
double OneCycleLR::lr_at(int64_t step, double /*base*/) const {
  const double initial = max_lr / div_factor, final_lr = initial / final_div_factor;
  // torch: phase ends at pct_start * total_steps - 1 and total_steps - 1.
  const double up_end = pct_start * static_cast<double>(total_steps) - 1;
  const double down_end = static_cast<double>(total_steps) - 1;
  const double s = static_cast<double>(std::min<int64_t>(step, total_steps - 1));
  auto cos_anneal = [](double start, double end, double pct) {
    return end + (start - end) / 2.0 * (std::cos(std::numbers::pi * pct) + 1);
  };
  if (s <= up_end) return cos_anneal(initial, max_lr, s / up_end);
  return cos_anneal(max_lr, final_lr, (s - up_end) / (down_end - up_end));
}

LinearWarmup::LinearWarmup(Optimizer& opt, int64_t warmup_steps, double start_factor,
                           std::unique_ptr<LRScheduler> after)
    : LRScheduler(opt),
      warmup_steps(warmup_steps),
      start_factor(start_factor),
      after(std::move(after)) {
  STOKE_CHECK(warmup_steps >= 0, "LinearWarmup", "warmup_steps must be >= 0, got ", warmup_steps);
  if (this->after) base_lrs_ = this->after->base_lrs();
  reset();
}
double LinearWarmup::lr_at(int64_t step, double base) const {
  if (step < warmup_steps) {
    const double f = start_factor + (1 - start_factor) * static_cast<double>(step) /
                                        static_cast<double>(warmup_steps);
    return (after ? after->lr_at(0, base) : base) * f;
  }
  return after ? after->lr_at(step - warmup_steps, base) : base;
}

}  // namespace stoke::nn::optim
