#include "worker/device.h"

namespace kubetrain::worker {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace kubetrain::worker
