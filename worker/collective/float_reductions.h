// The element-wise float reductions the CPU communicators apply: out[i] = a[i] op b[i], with
// Gloo's reduction-function signature (out may be a or b). Gloo's one-call all-reduce and the
// shared-memory communicator both reduce through these, so both agree on min and max.
#pragma once

#include <cstddef>

#include "worker/collective/communicator.h"

namespace kubetrain::worker {

// Defined in float_reductions.cc, built alone at -O3 (worker/CMakeLists.txt): GCC's -O2 leaves
// these loops scalar (they need a trip-count epilogue and `out` may be `a` or `b`), about 4x
// slower than memory on a 1 MiB all-reduce.
void SumFloats(void* c, const void* a, const void* b, size_t n);
void MinFloats(void* c, const void* a, const void* b, size_t n);
void MaxFloats(void* c, const void* a, const void* b, size_t n);

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
