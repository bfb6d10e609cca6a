#include "checkpoints.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "data/channel_stats.h"
#include "nn/checkpoint/safetensors.h"
#include "run_dir.h"
#include "stoke/stoke.h"

namespace stoke::train {
namespace {

using Metadata = std::map<std::string, std::string>;

// The loss scaler's tensors in last.safetensors: 0-dim f64/i64 scalars, not model weights (a
// PyTorch load of the model's keys never sees them).
const std::string kScalerPrefix = "amp_scaler.";

// Checkpoints are written from the CPU: device tensors are copied back first.
nn::NamedTensors on_cpu(nn::NamedTensors tensors) {
  for (auto& [name, t] : tensors)
    if (!t.device().is_cpu()) t = t.to(Device::cpu());
  return tensors;
}

// The shortest text that reads back as exactly `x` (std::to_string kept 6 decimals: a resumed
// run's epoch loss and best values came back rounded). meta_double reads it, and the 6-decimal
// values of older checkpoints, with std::from_chars.
std::string exact(double x) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);
  STOKE_CHECK(ec == std::errc(), "stoke-train", "cannot format ", x);
  return {buf, end};
}

// "stoke-train/2" counts the position in samples ("sample"); "stoke-train/1" counted it in its
// own run's batches ("batch").
constexpr const char* kFormat = "stoke-train/2";
constexpr const char* kFormatV1 = "stoke-train/1";

Metadata to_metadata(const Position& p, const GeneratorState& g, const Flags& f) {
  return {{"format", kFormat},
          {"normalize_mean", data::channels_text(p.mean)},
          {"normalize_std", data::channels_text(p.std)},
          {"model", f.model},
          {"epoch", std::to_string(p.epoch)},
          {"sample", std::to_string(p.sample)},
          {"global_step", std::to_string(p.global_step)},
          {"best_acc", exact(p.best_acc)},
          {"best_loss", exact(p.best_loss)},
          {"bad_epochs", std::to_string(p.bad_epochs)},
          {"epoch_loss_sum", exact(p.epoch_loss_sum)},
          {"epoch_correct", std::to_string(p.epoch_correct)},
          {"epoch_seen", std::to_string(p.epoch_seen)},
          {"rng_seed", std::to_string(g.seed)},
          {"rng_offset", std::to_string(g.offset)}};
}

// A checkpoint holds finite weights, or is not written: a file named as the last good checkpoint
// must be one to resume from.
void check_finite(const nn::NamedTensors& tensors, const std::string& path) {
  const auto fail = [&](const std::string& name, double v, int64_t i) {
    STOKE_FAIL("stoke-train", "tensor '", name, "' holds ", v, " at index ", i,
               ": the weights diverged; ", path,
               " is not written over (it holds the last good checkpoint, if any)");
  };
  for (const auto& [name, t] : tensors) {
    if (!is_floating(t.dtype())) continue;
    if (t.dtype() == DType::f32) {  // the checkpoints' dtype: read in place
      const Tensor c = t.contiguous();
      const float* p = c.data<float>();
      for (int64_t i = 0; i < c.numel(); ++i)
        if (!std::isfinite(p[i])) fail(name, p[i], i);
    } else {
      const std::vector<double> v = t.to_vector<double>();
      for (size_t i = 0; i < v.size(); ++i)
        if (!std::isfinite(v[i])) fail(name, v[i], static_cast<int64_t>(i));
    }
  }
}

std::string meta(const Metadata& m, const std::string& key, const std::string& path) {
  auto it = m.find(key);
  STOKE_CHECK(it != m.end(), "stoke-train", path, ": checkpoint metadata has no '", key, "'");
  return it->second;
}

// An integer of the metadata in [lo, hi]: the whole value must parse (a mutated "-5" or "12abc"
// used to train a wrong number of epochs, and a non-number aborted with stoll's bare message).
template <class Int>
Int meta_int(const Metadata& m, const std::string& key, const std::string& path, Int lo, Int hi) {
  const std::string v = meta(m, key, path);
  Int x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  STOKE_CHECK(ec == std::errc() && end == v.data() + v.size() && x >= lo && x <= hi, "stoke-train",
              path, ": checkpoint metadata '", key, "' is '", v, "', expected an integer in [", lo,
              ", ", hi, "]");
  return x;
}

// A finite number of the metadata (not NaN or infinite: those would poison the resumed run).
double meta_double(const Metadata& m, const std::string& key, const std::string& path) {
  const std::string v = meta(m, key, path);
  double x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  STOKE_CHECK(ec == std::errc() && end == v.data() + v.size() && std::isfinite(x), "stoke-train",
              path, ": checkpoint metadata '", key, "' is '", v, "', expected a finite number");
  return x;
}

// The position and the generator's state from the metadata of `path`, each value checked.
Position read_position(const Metadata& m, const std::string& path, const Flags& f,
                       int64_t epoch_samples, int world_size) {
  Position p;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const std::string format = meta(m, "format", path);
  STOKE_CHECK(format == kFormat || format == kFormatV1, "stoke-train", path,
              ": checkpoint metadata 'format' is '", format, "', expected ", kFormat, " (or ",
              kFormatV1, ")");
  p.epoch = meta_int<int64_t>(m, "epoch", path, 0, kMax);
  STOKE_CHECK(p.epoch <= f.epochs, "stoke-train", path, ": the checkpoint is at epoch ", p.epoch,
              ", past --epochs ", f.epochs, ": pass --epochs ", p.epoch + 1,
              " or more to train on from it");
  if (format == kFormat) {
    p.sample = meta_int<int64_t>(m, "sample", path, 0, epoch_samples);
  } else {
    // Before the position was kept in samples: batches of that run's --batch at its -np, which
    // the file does not say. Resuming with the same ones gives the same position.
    const int64_t batch = meta_int<int64_t>(m, "batch", path, 0, kMax);
    const int64_t per_batch = f.batch * world_size;
    STOKE_CHECK(batch <= epoch_samples / per_batch + 1, "stoke-train", path,
                ": checkpoint metadata 'batch' is ", batch, ", past the epoch's ", epoch_samples,
                " samples at --batch ", f.batch, " on ", world_size, " rank(s)");
    p.sample = std::min(batch * per_batch, epoch_samples);
    if (batch > 0)
      std::printf(
          "note: %s is of an older stoke-train (%s), which counted its position in batches: batch "
          "%lld is taken as sample %lld, as if it ran at --batch %lld on %d rank(s) like this "
          "run\n",
          path.c_str(), kFormatV1, static_cast<long long>(batch), static_cast<long long>(p.sample),
          static_cast<long long>(f.batch), world_size);
  }
  p.global_step = meta_int<int64_t>(m, "global_step", path, 0, kMax);
  p.best_acc = meta_double(m, "best_acc", path);
  p.best_loss = meta_double(m, "best_loss", path);
  p.bad_epochs = meta_int<int64_t>(m, "bad_epochs", path, 0, kMax);
  p.epoch_loss_sum = meta_double(m, "epoch_loss_sum", path);
  p.epoch_seen = meta_int<int64_t>(m, "epoch_seen", path, 0, kMax);
  p.epoch_correct = meta_int<int64_t>(m, "epoch_correct", path, 0, p.epoch_seen);
  constexpr uint64_t kMaxU = std::numeric_limits<uint64_t>::max();
  default_generator().set_state({meta_int<uint64_t>(m, "rng_seed", path, 0, kMaxU),
                                 meta_int<uint64_t>(m, "rng_offset", path, 0, kMaxU)});
  if (const auto n = data::read_normalization(m, "stoke-train", path)) {
    p.mean = n->mean;
    p.std = n->std;
  } else {
    p.mean = {0.2860f};
    p.std = {0.3530f};
    std::printf(
        "note: %s has no normalize_mean/normalize_std (an older stoke-train's, which normalized "
        "every dataset with Fashion-MNIST's 0.2860 / 0.3530): the resumed run keeps them\n",
        path.c_str());
  }
  return p;
}

}  // namespace

void save_last(const std::string& path, const nn::NamedTensors& model_state,
               const nn::NamedTensors& optimizer_state, const nn::amp::GradScaler* scaler,
               const Position& p, const GeneratorState& rng, const Flags& f) {
  remove_stale_temp_files(f.checkpoint);  // of saves that were killed before their rename
  nn::NamedTensors all = on_cpu(model_state);
  check_finite(all, path);
  for (auto& [k, t] : on_cpu(optimizer_state)) all.emplace_back("optimizer." + k, t);
  if (scaler)
    for (auto& [k, t] : scaler->state_dict()) all.emplace_back(kScalerPrefix + k, t);
  nn::save_safetensors(path, all, to_metadata(p, rng, f));
}

Position load_last(const std::string& path, nn::Module& model, nn::optim::Optimizer& opt,
                   nn::amp::GradScaler* scaler, const Flags& f, int64_t epoch_samples,
                   int world_size) {
  // Every last.safetensors stoke-train writes carries its checksum: one without it was edited.
  const nn::SafetensorsFile file = nn::load_safetensors(path, {.require_checksum = true});
  STOKE_CHECK(meta(file.metadata, "model", path) == f.model, "stoke-train", path,
              ": checkpoint is of model '", meta(file.metadata, "model", path), "', not '", f.model,
              "'");
  nn::NamedTensors model_state, opt_state, scaler_state;
  for (const auto& [k, t] : file.tensors) {
    if (k.rfind("optimizer.", 0) == 0) {
      opt_state.emplace_back(k.substr(10), t);
    } else if (k.rfind(kScalerPrefix, 0) == 0) {
      scaler_state.emplace_back(k.substr(kScalerPrefix.size()), t);
    } else {
      model_state.emplace_back(k, t);
    }
  }
  model.load_state_dict(model_state);
  opt.load_state_dict(opt_state);
  if (scaler && !scaler_state.empty()) scaler->load_state_dict(scaler_state);
  return read_position(file.metadata, path, f, epoch_samples, world_size);
}

void save_best(const std::string& path, const nn::Module& model, int64_t epoch, double test_acc,
               const Position& p, const Flags& f) {
  const nn::NamedTensors state = on_cpu(model.state_dict());
  check_finite(state, path);
  nn::save_safetensors(path, state,
                       {{"epoch", std::to_string(epoch)},
                        {"test_acc", exact(test_acc)},
                        {"model", f.model},
                        {"normalize_mean", data::channels_text(p.mean)},
                        {"normalize_std", data::channels_text(p.std)}});
}

}  // namespace stoke::train
