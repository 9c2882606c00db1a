// The element-wise float reductions the CPU communicators apply: out[i] = a[i] op b[i], with
// Gloo's reduction-function signature (out may be a or b). Gloo's one-call all-reduce and the
// shared-memory communicator both reduce through these, so both agree on min and max.
#pragma once

#include <cstddef>

#include "worker/collective/communicator.h"

namespace kubetrain::worker {

inline void SumFloats(void* c, const void* a, const void* b, size_t n) {
  float* out = static_cast<float*>(c);
  const float* x = static_cast<const float*>(a);
  const float* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
}

inline void MinFloats(void* c, const void* a, const void* b, size_t n) {
  float* out = static_cast<float*>(c);
  const float* x = static_cast<const float*>(a);
  const float* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = y[i] < x[i] ? y[i] : x[i];
}

inline void MaxFloats(void* c, const void* a, const void* b, size_t n) {
  float* out = static_cast<float*>(c);
  const float* x = static_cast<const float*>(a);
  const float* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = y[i] > x[i] ? y[i] : x[i];
}

using FloatReduction = void (*)(void* c, const void* a, const void* b, size_t n);

inline FloatReduction FloatReductionFor(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin:
      return &MinFloats;
    case ReduceOp::kMax:
      return &MaxFloats;
    case ReduceOp::kSum:
      break;
  }
  return &SumFloats;
}

}  // namespace kubetrain::worker
