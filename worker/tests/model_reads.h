// Test support: a model's parameters and gradients read out into fresh vectors.
#pragma once

#include <gtest/gtest.h>

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

}  // namespace kubetrain::worker::testing
