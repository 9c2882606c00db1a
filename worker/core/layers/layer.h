// One stage of a feed-forward network, computed through a Device.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "worker/core/device.h"
#include "worker/core/random.h"
#include "worker/core/variable.h"

namespace kubetrain::worker {

// A layer owns its variables and its output/scratch buffers, sized for `capacity` examples by
// Reserve so steps allocate nothing. Inputs and gradients are device pointers to `batch`
// examples laid out back to back (NHWC for images). Not thread-safe.
class Layer {
 public:
  Layer(std::string name, int64_t input_size, int64_t output_size)
      : name_(std::move(name)), input_size_(input_size), output_size_(output_size) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  // Floats per example in and out.
  int64_t input_size() const { return input_size_; }
  int64_t output_size() const { return output_size_; }

  // (Re)allocates per-batch buffers for up to `capacity` examples.
  virtual void Reserve(int capacity) = 0;
  // Draws fresh variable values; parameterless layers do nothing.
  virtual void Initialize(Rng& /*rng*/) {}
  // Computes the output of `batch` examples; the result lives in this layer until the next call.
  virtual const float* Forward(const float* input, int batch) = 0;
  // Given the Forward input and dLoss/dOutput, overwrites every variable's grad and returns
  // dLoss/dInput (owned by this layer), or nullptr when `need_input_grad` is false.
  virtual const float* Backward(const float* input, const float* output_grad, int batch,
                                bool need_input_grad) = 0;
  // The layer's variables in a fixed order (empty for parameterless layers).
  virtual std::vector<Variable*> variables() { return {}; }
  // How many layers of the unfused network this one stands for (2 for a Dense or Conv2D with a
  // fused activation). Model numbers its per-layer random streams by it, so a seed draws the same
  // initial values whether or not activations are fused.
  virtual int fused_layers() const { return 1; }

 private:
  std::string name_;
  int64_t input_size_;
  int64_t output_size_;
};

}  // namespace kubetrain::worker
