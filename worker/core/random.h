// A small, portable pseudo-random generator (SplitMix64) for shuffles and initialisation.
//
// Every worker must compute the same epoch permutation from (seed, epoch), so we do not rely on
// std::shuffle or std::*_distribution, whose algorithms differ between standard libraries.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>

#include "absl/strings/str_format.h"

namespace kubetrain::worker {

// Value type; one instance per thread.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  // Derives an independent stream from two keys, e.g. (seed, epoch) or (seed, layer).
  Rng(uint64_t seed, uint64_t stream) : state_(Mix(seed ^ Mix(stream + 0x632be59bd9b4e019ULL))) {}

  uint64_t Next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return Mix(state_);
  }

  // Uniform in [0, bound), unbiased (rejection on the short final interval). bound > 0.
  uint64_t Below(uint64_t bound) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x = Next();
    while (x >= limit) x = Next();
    return x % bound;
  }

  // Uniform in [0, 1) with 24 random bits: exactly representable as float.
  float Uniform() { return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f); }

  // Standard normal by Box-Muller (one value per call; simplicity over speed).
  float Normal() {
    const double u1 = (static_cast<double>(Next() >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    const double u2 = static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0);
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }

 private:
  static uint64_t Mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  uint64_t state_;
};

// 16 hex digits from the system's entropy source, never seeded (unlike Rng): the id of a training
// run or of a rendezvous session, which must differ between runs.
inline std::string RandomHexId() {
  std::random_device rd;
  return absl::StrFormat("%08x%08x", rd(), rd());
}

}  // namespace kubetrain::worker
