// Synthetic 28x28 examples for tests that need a dataset's shape, not its content.
#pragma once

#include <cstdint>

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

}  // namespace kubetrain::worker
