// stoke-train's checkpoints: DIR/last.safetensors holds the model, the optimizer state and the
// run's position (so that --resume continues mid-epoch, bit for bit); DIR/best.safetensors holds
// the weights of the epoch with the best test accuracy.
#pragma once

#include <cstdint>
#include <string>

#include "flags.h"
#include "nn/amp/grad_scaler.h"
#include "nn/module.h"
#include "nn/optim/optimizer.h"

namespace stoke::train {

// Everything a resumed run needs besides the tensors.
struct Position {
  int64_t epoch = 0, batch = 0, global_step = 0;
  double best_acc = -1, best_loss = 1e300;
  int64_t bad_epochs = 0;
  double epoch_loss_sum = 0;
  int64_t epoch_correct = 0, epoch_seen = 0;
};

// Writes the model, the optimizer state, the loss scaler's state (--amp fp16; keys
// "amp_scaler.<torch's key>"), `p` and the global generator's state to `path`.
void save_last(const std::string& path, const nn::Module& model, const nn::optim::Optimizer& opt,
               const nn::amp::GradScaler* scaler, const Position& p, const Flags& f);

// The same with the optimizer's state already taken (dist::ZeroOptimizer's consolidated state is
// collective: every rank takes it, rank 0 saves).
void save_last(const std::string& path, const nn::Module& model,
               const nn::NamedTensors& optimizer_state, const nn::amp::GradScaler* scaler,
               const Position& p, const Flags& f);

// Loads what save_last wrote into `model`, `opt` and `scaler` (if not null: a checkpoint without
// scaler state, of an f32 or bf16 run, leaves it at its initial scale), restores the global
// generator and returns the position; throws naming the file and the key when the metadata is
// missing or out of range.
Position load_last(const std::string& path, nn::Module& model, nn::optim::Optimizer& opt,
                   nn::amp::GradScaler* scaler, const Flags& f);

// Writes the model's weights, the 1-based `epoch` and its `test_acc` to `path`.
void save_best(const std::string& path, const nn::Module& model, int64_t epoch, double test_acc,
               const Flags& f);

}  // namespace stoke::train
