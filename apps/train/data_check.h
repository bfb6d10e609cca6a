// Checks, before the first step, that the test split and the model fit the training data: a test
// set of another image size (or with more classes) would otherwise fail after a whole epoch of
// training, and a model that cannot take the images would fail at its first layer with a message
// that names neither the data nor the model.
#pragma once

#include "data/dataset.h"
#include "nn/module.h"

namespace stoke::train {

// `first` is the training split's sample 0; `train_name` and `test_name` say where each split
// comes from. Throws stoke::Error naming both splits and what differs.
void check_splits_match(const data::Dataset& train, const data::Example& first,
                        const data::Dataset& test, const std::string& train_name,
                        const std::string& test_name);

// Runs `model` (in evaluation mode, without a graph) on a batch of two zero images of the data's
// shape on `device`, and checks that it gives (2, num_classes) logits; any error is rethrown
// naming the model and the image shape.
void check_model_fits(nn::Module& model, const std::string& model_name, const data::Example& first,
                      int64_t num_classes, Device device);

}  // namespace stoke::train
