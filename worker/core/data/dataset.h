// In-memory labelled image data, normalised to float once at load time.
#pragma once

#include <cstdint>
#include <vector>

namespace kubetrain::worker {

// Examples stored contiguously: image i is images[i*example_size() .. +example_size()), HWC with
// one channel. Plain value type; read-only sharing across threads is safe.
struct Dataset {
  int height = 0;
  int width = 0;
  int channels = 1;
  int num_classes = 10;
  std::vector<float> images;
  std::vector<int32_t> labels;

  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  int64_t example_size() const { return static_cast<int64_t>(height) * width * channels; }
  const float* image(int64_t i) const { return images.data() + i * example_size(); }
};

// Affine map pixel/255 -> (pixel/255 - mean) / stddev. Computed from the training split and
// applied to every split so train and test see the same inputs.
struct Normalization {
  float mean = 0.0f;
  float stddev = 1.0f;
};

}  // namespace kubetrain::worker
