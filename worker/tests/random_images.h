// Synthetic data for tests that need a shape, not a content: 28x28 examples, random vectors.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/core/data/batch_iterator.h"
#include "worker/core/data/dataset.h"
#include "worker/core/random.h"

namespace kubetrain::worker {

// `count` examples of 28x28 pixels drawn uniformly from [-0.5, 0.5) with Rng(`seed`), labelled
// 0, 1, ..., 9, 0, ... in turn. The same seed gives the same set.
inline Dataset RandomImages(int count, uint64_t seed) {
  Dataset data;
  data.height = data.width = 28;
  Rng rng(seed);
  for (int i = 0; i < count; ++i) {
    for (int p = 0; p < 28 * 28; ++p) data.images.push_back(rng.Uniform() - 0.5f);
    data.labels.push_back(i % 10);
  }
  return data;
}

// `n` values drawn uniformly from [-scale, scale) with Rng(`seed`).
inline std::vector<float> RandomVector(int64_t n, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = scale * (2.0f * rng.Uniform() - 1.0f);
  return v;
}

// `size` examples of `example_size` values drawn uniformly from [0, 1) with Rng(`seed`), then
// their labels, drawn uniformly from [0, classes) with the same generator.
inline Batch UniformBatch(int size, int64_t example_size, int classes, uint64_t seed) {
  Rng rng(seed);
  Batch b;
  b.size = size;
  b.images.resize(static_cast<size_t>(size * example_size));
  for (float& x : b.images) x = rng.Uniform();
  b.labels.resize(static_cast<size_t>(size));
  for (int32_t& y : b.labels) y = static_cast<int32_t>(rng.Below(classes));
  return b;
}

}  // namespace kubetrain::worker
