// Test support: a model's parameters and gradients read out into fresh vectors, and compared
// between two devices.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "worker/core/model.h"
#include "worker/core/models.h"
#include "worker/tests/random_images.h"

namespace kubetrain::worker::testing {

inline std::vector<float> Values(Model& model) {
  std::vector<float> v(static_cast<size_t>(model.num_parameters()));
  const absl::Status read = model.ReadValues(absl::MakeSpan(v));
  EXPECT_TRUE(read.ok()) << read;
  return v;
}

inline std::vector<float> Gradients(Model& model) {
  std::vector<float> g(static_cast<size_t>(model.num_parameters()));
  const absl::Status read = model.ReadGradients(absl::MakeSpan(g));
  EXPECT_TRUE(read.ok()) << read;
  return g;
}

// Asserts that each of `got`'s gradients is within `relative` times the largest of `want`'s (which
// must not all be zero) of `want`'s.
inline void ExpectGradientsNear(Model& got, Model& want, double relative) {
  const std::vector<float> got_grads = Gradients(got), want_grads = Gradients(want);
  ASSERT_EQ(got_grads.size(), want_grads.size());
  float largest = 0.0f;
  for (float g : want_grads) largest = std::max(largest, std::fabs(g));
  ASSERT_GT(largest, 0.0f);
  for (size_t i = 0; i < want_grads.size(); ++i) {
    ASSERT_NEAR(got_grads[i], want_grads[i], relative * largest) << "parameter " << i;
  }
}

// The CNN (seed 5) takes one step over the same 16 random images on `got` and on `want`: the
// losses agree within `loss_relative` (of 1 + want's) and the gradients as ExpectGradientsNear.
inline void ExpectCnnStepNear(Device& got, Device& want, double loss_relative,
                              double grad_relative) {
  absl::StatusOr<std::unique_ptr<Model>> on_want = MakeModel("cnn", want, 5);
  absl::StatusOr<std::unique_ptr<Model>> on_got = MakeModel("cnn", got, 5);
  ASSERT_TRUE(on_want.ok()) << on_want.status();
  ASSERT_TRUE(on_got.ok()) << on_got.status();
  const Batch b = UniformBatch(16, (*on_want)->input_size(), (*on_want)->num_classes(), 25);
  absl::StatusOr<float> want_loss = (*on_want)->ComputeGradients(b.images, b.labels);
  absl::StatusOr<float> got_loss = (*on_got)->ComputeGradients(b.images, b.labels);
  ASSERT_TRUE(want_loss.ok()) << want_loss.status();
  ASSERT_TRUE(got_loss.ok()) << got_loss.status();
  EXPECT_NEAR(*got_loss, *want_loss, loss_relative * (1.0 + *want_loss));
  ExpectGradientsNear(**on_got, **on_want, grad_relative);
}

}  // namespace kubetrain::worker::testing
