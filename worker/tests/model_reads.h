// Test support: a model's parameters and gradients read out into fresh vectors.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/types/span.h"
#include "worker/core/model.h"

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

}  // namespace kubetrain::worker::testing
