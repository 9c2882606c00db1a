// Small training runs for the tests of captured steps (worker/core/step_graphs.h): the same
// models and data on any device, and what a run leaves behind, to compare to the bit.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "common/testing/status_matchers.h"
#include "worker/core/data/batch_iterator.h"
#include "worker/core/data/dataset.h"
#include "worker/core/model.h"
#include "worker/core/models.h"
#include "worker/core/random.h"
#include "worker/core/sgd.h"

namespace kubetrain::worker::testing {

// `count` random 28x28 examples; labels 0..9 in turn.
inline Dataset GraphTestImages(int count, uint64_t seed) {
  Dataset data;
  data.height = data.width = 28;
  Rng rng(seed, /*stream=*/0x9a);
  data.images.resize(static_cast<size_t>(count) * 28 * 28);
  for (float& x : data.images) x = rng.Uniform() - 0.5f;
  for (int i = 0; i < count; ++i) data.labels.push_back(i % 10);
  return data;
}

// A small CNN or MLP on `device`, its steps captured when `graphed` (Model::UseStepGraphs).
inline std::unique_ptr<Model> GraphTestModel(bool cnn, Device& device, bool graphed = false) {
  absl::StatusOr<std::unique_ptr<Model>> model =
      cnn ? MakeCnn(device, {.conv1_filters = 4, .conv2_filters = 8, .hidden = 16, .seed = 3})
          : MakeMlp(device, {.hidden = {32, 16}, .seed = 3});
  EXPECT_THAT(model, ::kubetrain::testing::IsOk());
  if (model.ok()) (*model)->UseStepGraphs(graphed);
  return *std::move(model);
}

// What training leaves behind: every step's loss and the final values, to compare to the bit.
struct GraphTestRun {
  std::vector<float> losses;
  std::vector<float> values;
};

// `epochs` passes over `data` in order, in batches of `batch` (the last one short), with
// momentum SGD after each step.
inline GraphTestRun GraphTestTrain(Model& model, const Dataset& data, int batch, int epochs) {
  MomentumSgd sgd(model.device(), model.variables(), {.learning_rate = 0.05f});
  GraphTestRun run;
  for (int e = 0; e < epochs; ++e) {
    BatchIterator batches(data, IndexRange(0, data.size()), batch);
    while (const Batch* b = batches.Next()) {
      absl::StatusOr<float> loss = model.ComputeGradients(b->image_span(), b->label_span());
      EXPECT_THAT(loss, ::kubetrain::testing::IsOk());
      run.losses.push_back(loss.value_or(-1.0f));
      sgd.Step();
    }
  }
  run.values.resize(static_cast<size_t>(model.num_parameters()));
  EXPECT_THAT(model.ReadValues(absl::MakeSpan(run.values)), ::kubetrain::testing::IsOk());
  return run;
}

inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Trains `model` (its steps uncaptured) for 3 epochs of GraphTestImages(44, 5) in batches of 16
// (16, 16, 12), then again from the same values with its steps captured, and expects every
// loss and the final values equal to the bit. One model both times, so that both runs use the
// convolution algorithms a GPU chose for it.
inline void ExpectCapturedTrainingEqualsUncaptured(Model& model) {
  const Dataset data = GraphTestImages(44, 5);
  std::vector<float> initial(static_cast<size_t>(model.num_parameters()));
  ASSERT_THAT(model.ReadValues(absl::MakeSpan(initial)), ::kubetrain::testing::IsOk());
  const GraphTestRun expected = GraphTestTrain(model, data, 16, 3);
  ASSERT_THAT(model.WriteValues(initial), ::kubetrain::testing::IsOk());
  model.UseStepGraphs(true);
  const GraphTestRun got = GraphTestTrain(model, data, 16, 3);
  EXPECT_TRUE(SameBits(got.losses, expected.losses));
  EXPECT_TRUE(SameBits(got.values, expected.values));
}

}  // namespace kubetrain::worker::testing
