// Learning-rate schedulers as closed-form functions of the step count, like torch.optim's
// (chainable forms are not needed: every schedule here has a closed form). step() advances one
// step and sets the optimizer's learning rate; state is the step count, so a resumed run continues
// exactly.
#pragma once

#include <memory>
#include <vector>

#include "nn/optim/optimizer.h"

namespace stoke::nn::optim {

class LRScheduler {
 public:
  // Each parameter group's rate follows the schedule from its own initial rate (torch's
  // base_lrs); base_lr() is group 0's.
  explicit LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
    for (size_t g = 0; g < optimizer.num_groups(); ++g) base_lrs_.push_back(optimizer.lr(g));
  }
  virtual ~LRScheduler() = default;

  // The learning rate after `step` calls of step(), for a group whose initial rate is `base`.
  virtual double lr_at(int64_t step, double base) const = 0;
  // The same for group 0.
  double lr_at(int64_t step) const { return lr_at(step, base_lrs_.front()); }
  void step() { apply(++step_); }
  int64_t last_step() const { return step_; }
  void set_last_step(int64_t step) {
    step_ = step;
    apply(step_);
  }
  double base_lr() const { return base_lrs_.front(); }
  const std::vector<double>& base_lrs() const { return base_lrs_; }

 protected:
  // Constructors of subclasses call this once their parameters are set (lr_at is virtual).
  void reset() { apply(step_); }
  void apply(int64_t step) {
    for (size_t g = 0; g < base_lrs_.size(); ++g) optimizer_.set_lr(g, lr_at(step, base_lrs_[g]));
  }
  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  int64_t step_ = 0;
};

// lr = base * gamma^(step / step_size)
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);
  using LRScheduler::lr_at;
  double lr_at(int64_t step, double base) const override;
  int64_t step_size;
  double gamma;
};

// lr = base * gamma^(number of milestones <= step)
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma = 0.1);
  using LRScheduler::lr_at;
  double lr_at(int64_t step, double base) const override;
  std::vector<int64_t> milestones;
  double gamma;
};

// eta_min + (base - eta_min) * (1 + cos(pi * step / t_max)) / 2, constant at eta_min after t_max.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min = 0);
  using LRScheduler::lr_at;
  double lr_at(int64_t step, double base) const override;
  int64_t t_max;
  double eta_min;
};

// torch.optim.lr_scheduler.OneCycleLR (anneal_strategy='cos', three_phase=False), learning rate
// only: from max_lr/div_factor up to max_lr over pct_start of the steps, then cosine down to
// max_lr/(div_factor*final_div_factor) at total_steps - 1.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, double pct_start = 0.3,
             double div_factor = 25, double final_div_factor = 1e4);
  using LRScheduler::lr_at;
  double lr_at(int64_t step, double base) const override;
  double max_lr;
  int64_t total_steps;
  double pct_start, div_factor, final_div_factor;
};

// Linear warm-up from start_factor * base to base over warmup_steps, then `after` (if any)
// continues with its own step count starting at 0.
class LinearWarmup : public LRScheduler {
 public:
  LinearWarmup(Optimizer& opt, int64_t warmup_steps, double start_factor = 0.0,
               std::unique_ptr<LRScheduler> after = nullptr);
  using LRScheduler::lr_at;
  double lr_at(int64_t step, double base) const override;
  int64_t warmup_steps;
  double start_factor;
  std::unique_ptr<LRScheduler> after;
};

}  // namespace stoke::nn::optim
