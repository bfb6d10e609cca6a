#include "metrics_records.h"

#include <nlohmann/json.hpp>

namespace stoke::train {
namespace {

// ordered_json keeps the keys in the order they are set (nlohmann::json would sort them).
using Record = nlohmann::ordered_json;

// The run stops before a non-finite loss is logged, so every value here is finite; one that was
// not would be written as null, still valid JSON, never as a bare nan or inf.
void write(MetricsLog& metrics, const Record& record) {
  metrics.write(record.dump());
}

}  // namespace

void log_step(MetricsLog& metrics, int64_t epoch, int64_t step, double loss, double lr,
              double data_wait_s, const std::optional<AmpRecord>& amp) {
  if (!metrics.is_open()) return;
  Record r;
  r["type"] = "step";
  r["epoch"] = epoch;
  r["step"] = step;
  r["loss"] = loss;
  r["lr"] = lr;
  r["data_wait_s"] = data_wait_s;
  if (amp) {
    r["loss_scale"] = amp->loss_scale;
    r["skipped_steps"] = amp->skipped_steps;
  }
  write(metrics, r);
}

void log_eval(MetricsLog& metrics, int64_t step, double test_loss, double test_acc) {
  if (!metrics.is_open()) return;
  Record r;
  r["type"] = "eval";
  r["step"] = step;
  r["test_loss"] = test_loss;
  r["test_acc"] = test_acc;
  write(metrics, r);
}

void log_profile(MetricsLog& metrics, int64_t step, int64_t steps, double step_ms,
                 const std::vector<std::pair<std::string, double>>& phase_ms, double other_ms,
                 double comm_ms, double exposed_comm_ms) {
  if (!metrics.is_open()) return;
  Record r;
  r["type"] = "profile";
  r["step"] = step;
  r["steps"] = steps;
  r["step_ms"] = step_ms;
  Record phases = Record::object();
  for (const auto& [name, ms] : phase_ms) phases[name] = ms;
  phases["(other)"] = other_ms;
  r["phase_ms"] = phases;
  if (comm_ms > 0 || exposed_comm_ms > 0) {
    r["comm_ms"] = comm_ms;
    r["exposed_comm_ms"] = exposed_comm_ms;
  }
  write(metrics, r);
}

void log_epoch(MetricsLog& metrics, const EpochRecord& e) {
  if (!metrics.is_open()) return;
  Record r;
  r["type"] = "epoch";
  r["epoch"] = e.epoch;
  r["step"] = e.step;
  r["train_loss"] = e.train_loss;
  r["train_acc"] = e.train_acc;
  r["test_loss"] = e.test_loss;
  r["test_acc"] = e.test_acc;
  if (e.test_acc5 >= 0) r["test_acc5"] = e.test_acc5;
  r["time_s"] = e.time_s;
  r["images_per_s"] = e.images_per_s;
  r["data_wait_s"] = e.data_wait_s;
  r["data_wait_pct"] = e.data_wait_pct;
  r["lr"] = e.lr;
  r["rss_mib"] = e.rss_mib;
  r["peak_rss_mib"] = e.peak_rss_mib;
  r["flops_per_image"] = e.flops_per_image;
  r["peak_gflops"] = e.peak_gflops;
  r["peak_dtype"] = e.peak_dtype;
  r["mfu"] = e.mfu;
  write(metrics, r);
}

}  // namespace stoke::train
