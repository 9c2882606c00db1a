// A trainable parameter: its value and its gradient, same shape, both in device memory.
#pragma once

#include <string>

#include "worker/core/device.h"

namespace kubetrain::worker {

// Owns both buffers. `name` is stable across processes ("dense1/kernel") so a parameter server
// can key shards by it; `grad` always has exactly `value`'s layout. Not thread-safe.
struct Variable {
  std::string name;
  Tensor value;
  Tensor grad;

  Variable(Device& device, std::string var_name, Shape shape)
      : name(std::move(var_name)), value(device, shape), grad(device, std::move(shape)) {}

  const Shape& shape() const { return value.shape(); }
  int64_t size() const { return value.size(); }
};

}  // namespace kubetrain::worker
