// The element math of the optimizers, written once for every place that applies updates: the
// parameter server's loops (ps/optimizer.cc), the worker's CPU device and its CUDA kernels (all-
// reduce training updates locally). Per-step scalars (the scheduled learning rate, Adam's bias
// correction) are folded into an UpdateRule on the host by Optimizer::Rule; what is left per
// element is branch-free arithmetic on one value and its slots.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/host_device.h"

namespace kubetrain::ps {

enum class UpdateKind : int32_t { kSgd = 0, kMomentum = 1, kAdam = 2, kAdagrad = 3 };

// Slots per value each rule keeps: momentum 1, Adam 2 (m, v), Adagrad 1 (accumulator).
KT_HOST_DEVICE inline int UpdateSlots(UpdateKind kind) {
  return kind == UpdateKind::kAdam ? 2 : kind == UpdateKind::kSgd ? 0 : 1;
}

// Everything one update needs besides the tensors. `grad_scale` multiplies every gradient first
// (1/replicas when the gradients arrive summed, as from an all-reduce).
struct UpdateRule {
  UpdateKind kind = UpdateKind::kSgd;
  float lr = 0.0f;  // the scheduled rate; for Adam the bias-corrected lr_t
  float momentum = 0.0f;
  float beta1 = 0.0f;
  float beta2 = 0.0f;
  float rest1 = 0.0f;  // 1 - beta1, computed in double
  float rest2 = 0.0f;  // 1 - beta2, computed in double
  float epsilon = 0.0f;
  float grad_scale = 1.0f;
};

namespace update {

KT_HOST_DEVICE inline void Sgd(float lr, float g, float& w) { w -= lr * g; }

// TF's MomentumOptimizer: accum = momentum * accum + grad; var -= lr * accum.
KT_HOST_DEVICE inline void Momentum(float lr, float mu, float g, float& w, float& accum) {
  accum = mu * accum + g;
  w -= lr * accum;
}

// Adam with the bias correction folded into lr (TF's form).
KT_HOST_DEVICE inline void Adam(float lr_t, float b1, float b2, float rest1, float rest2, float eps,
                                float g, float& w, float& m, float& v) {
  m = b1 * m + rest1 * g;
  v = b2 * v + rest2 * g * g;
  w -= lr_t * m / (sqrtf(v) + eps);
}

// accum += grad^2; var -= lr * grad / (sqrt(accum) + epsilon).
KT_HOST_DEVICE inline void Adagrad(float lr, float eps, float g, float& w, float& accum) {
  accum += g * g;
  w -= lr * g / (sqrtf(accum) + eps);
}

// One element under `rule`: the per-thread body of a GPU kernel, and the reference for tests.
// slot0/slot1 may be null when the rule keeps fewer slots.
KT_HOST_DEVICE inline void ApplyElement(const UpdateRule& r, float g, float& w, float* slot0,
                                        float* slot1) {
  g *= r.grad_scale;
  switch (r.kind) {
    case UpdateKind::kSgd:
      Sgd(r.lr, g, w);
      break;
    case UpdateKind::kMomentum:
      Momentum(r.lr, r.momentum, g, w, *slot0);
      break;
    case UpdateKind::kAdam:
      Adam(r.lr, r.beta1, r.beta2, r.rest1, r.rest2, r.epsilon, g, w, *slot0, *slot1);
      break;
    case UpdateKind::kAdagrad:
      Adagrad(r.lr, r.epsilon, g, w, *slot0);
      break;
  }
}

// The host loop over n elements, element i's gradient being grad(i): the switch hoisted out so
// each loop vectorises.
template <typename Grad>
inline void ApplyLoopOf(const UpdateRule& r, int64_t n, Grad grad, float* w, float* slot0,
                        float* slot1) {
  switch (r.kind) {
    case UpdateKind::kSgd:
      for (int64_t i = 0; i < n; ++i) Sgd(r.lr, grad(i), w[i]);
      break;
    case UpdateKind::kMomentum:
      for (int64_t i = 0; i < n; ++i) Momentum(r.lr, r.momentum, grad(i), w[i], slot0[i]);
      break;
    case UpdateKind::kAdam:
      for (int64_t i = 0; i < n; ++i) {
        Adam(r.lr, r.beta1, r.beta2, r.rest1, r.rest2, r.epsilon, grad(i), w[i], slot0[i],
             slot1[i]);
      }
      break;
    case UpdateKind::kAdagrad:
      for (int64_t i = 0; i < n; ++i) Adagrad(r.lr, r.epsilon, grad(i), w[i], slot0[i]);
      break;
  }
}

// ApplyLoopOf with each gradient times r.grad_scale.
inline void ApplyLoop(const UpdateRule& r, int64_t n, const float* grad, float* w, float* slot0,
                      float* slot1) {
  const float s = r.grad_scale;
  ApplyLoopOf(
      r, n, [=](int64_t i) { return s * grad[i]; }, w, slot0, slot1);
}

}  // namespace update
}  // namespace kubetrain::ps
