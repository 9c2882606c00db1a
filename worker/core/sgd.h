// Local SGD with momentum, for tests and single-process training. The parameter server owns the
// distributed optimizers; this one only has to be correct and allocation-free per step.
#pragma once

#include <vector>

#include "worker/core/device.h"
#include "worker/core/variable.h"

namespace kubetrain::worker {

struct SgdOptions {
  float learning_rate = 0.01f;
  float momentum = 0.9f;  // 0 gives plain SGD
};

// v = momentum * v + g;  w -= learning_rate * v  (TensorFlow's MomentumOptimizer).
// Owns one velocity buffer per variable; borrows the variables and the Device, which must
// outlive it. Not thread-safe.
class MomentumSgd {
 public:
  MomentumSgd(Device& device, std::vector<Variable*> variables, const SgdOptions& options);

  // Applies every variable's current grad.
  void Step();

  void set_learning_rate(float lr) { options_.learning_rate = lr; }

 private:
  Device& device_;
  std::vector<Variable*> variables_;
  SgdOptions options_;
  std::vector<Tensor> velocity_;
};

}  // namespace kubetrain::worker
