#include "data_check.h"

#include "core/error.h"
#include "stoke/stoke.h"

namespace stoke::train {

void check_splits_match(const data::Dataset& train, const data::Example& first,
                        const data::Dataset& test, const std::string& train_name,
                        const std::string& test_name) {
  if (test.size() > 0) {
    data::Example t;
    test.get(0, t);
    STOKE_CHECK(t.height == first.height && t.width == first.width && t.channels == first.channels,
                "stoke-train", "the test data (", test.describe(0), ") holds ", t.height, "x",
                t.width, "x", t.channels, " images but the training data (", train.describe(0),
                ") holds ", first.height, "x", first.width, "x", first.channels,
                " images: a model trained on one cannot be evaluated on the other");
  }
  STOKE_CHECK(test.num_classes() <= train.num_classes(), "stoke-train", "the test data (",
              test_name, ") has ", test.num_classes(), " classes but the training data (",
              train_name, ") has ", train.num_classes(),
              ": the model's output has one logit per training class");
}

void check_model_fits(nn::Module& model, const std::string& model_name, const data::Example& first,
                      int64_t num_classes, Device device) {
  const bool was_training = model.is_training();
  model.eval();
  Tensor logits;
  try {
    NoGradGuard no_grad;
    logits =
        model.forward(zeros({2, first.channels, first.height, first.width}, {.device = device}));
  } catch (const Error& e) {
    model.train(was_training);
    STOKE_FAIL("stoke-train", "model ", model_name, " does not take the data's ", first.height, "x",
               first.width, "x", first.channels, " images (height x width x channels): ", e.what());
  }
  model.train(was_training);
  STOKE_CHECK(logits.dim() == 2 && logits.size(0) == 2 && logits.size(1) == num_classes,
              "stoke-train", "model ", model_name, " gives logits of shape ", logits.shape(),
              " for a batch of 2 images; expected [2, ", num_classes, "] (one per class)");
}

}  // namespace stoke::train
