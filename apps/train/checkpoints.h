// stoke-train's checkpoints: DIR/last.safetensors holds the model, the optimizer state and the
// run's position (so that --resume continues mid-epoch, bit for bit); DIR/best.safetensors holds
// the weights of the epoch with the best test accuracy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/random.h"
#include "flags.h"
#include "nn/amp/grad_scaler.h"
#include "nn/module.h"
#include "nn/optim/optimizer.h"

namespace stoke::train {

// Everything a resumed run needs besides the tensors.
struct Position {
  // `sample`: how many positions of the epoch's order (the order every rank shares) the job has
  // trained on. Batches are counted per rank and per --batch; samples are not, so a run resumes
  // mid-epoch at any -np and --batch and visits each sample of the epoch once.
  int64_t epoch = 0, sample = 0, global_step = 0;
  double best_acc = -1, best_loss = 1e300;
  int64_t bad_epochs = 0;
  double epoch_loss_sum = 0;
  int64_t epoch_correct = 0, epoch_seen = 0;
  // The normalization the run trains with (metadata "normalize_mean" and "normalize_std", in
  // best.safetensors too, where stoke-logits reads them). A checkpoint of a stoke-train from
  // before they were kept reads as Fashion-MNIST's 0.2860 / 0.3530, which that version used for
  // every dataset.
  std::vector<float> mean, std;
};

// Writes the model's state (`model_state`), the optimizer's (ZeRO's consolidated state is
// collective: every rank takes it, rank 0 saves), the loss scaler's (--amp fp16; keys
// "amp_scaler.<torch's key>"), `p` and the global generator's state `rng` to `path`. Refuses
// (throws, naming the tensor, the file left as it was) weights that are not finite.
void save_last(const std::string& path, const nn::NamedTensors& model_state,
               const nn::NamedTensors& optimizer_state, const nn::amp::GradScaler* scaler,
               const Position& p, const GeneratorState& rng, const Flags& f);

// Loads what save_last wrote into `model`, `opt` and `scaler` (if not null: a checkpoint without
// scaler state, of an f32 or bf16 run, leaves it at its initial scale), restores the global
// generator and returns the position; throws naming the file and the key when the metadata is
// missing or out of range, or the file has no checksum. `epoch_samples` is the epoch's sample
// count, which the position may not pass. A checkpoint of an older stoke-train
// ("stoke-train/1") counts the position in batches of its own run: it is taken to come from a
// run of this --batch and `world_size` (said on stdout).
Position load_last(const std::string& path, nn::Module& model, nn::optim::Optimizer& opt,
                   nn::amp::GradScaler* scaler, const Flags& f, int64_t epoch_samples,
                   int world_size);

// Writes the model's weights, the 1-based `epoch` and its `test_acc` to `path`; refuses weights
// that are not finite, as save_last does.
void save_best(const std::string& path, const nn::Module& model, int64_t epoch, double test_acc,
               const Position& p, const Flags& f);

}  // namespace stoke::train
