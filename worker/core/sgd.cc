#include "worker/core/sgd.h"

#include <utility>

namespace kubetrain::worker {

MomentumSgd::MomentumSgd(Device& device, std::vector<Variable*> variables,
                         const SgdOptions& options)
    : device_(device), variables_(std::move(variables)), options_(options) {
  velocity_.reserve(variables_.size());
  for (Variable* v : variables_) {
    velocity_.emplace_back(device_, v->shape());
    device_.Fill(v->size(), 0.0f, velocity_.back().data());
  }
}

void MomentumSgd::Step() {
  for (size_t i = 0; i < variables_.size(); ++i) {
    Variable& var = *variables_[i];
    float* v = velocity_[i].data();
    device_.Scale(var.size(), options_.momentum, v);
    device_.Axpy(var.size(), 1.0f, var.grad.data(), v);
    device_.Axpy(var.size(), -options_.learning_rate, v, var.value.data());
  }
}

}  // namespace kubetrain::worker
