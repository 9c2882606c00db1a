// What both sides of bench/allreduce share, so that Gloo and MPI are measured and checked the
// same way: the values each rank writes before every all-reduce, the check of the sum, and the
// one line that rank 0 prints per buffer size for the driver to parse. Plain C++ only: the MPI
// reference program includes it and links nothing of the project.
#pragma once

#include <cstddef>
#include <cstdio>
#include <vector>

namespace kubetrain::bench {

// Small integers, so that the float sum is exact in any order and every wrong element is
// caught. The pattern shifts with the iteration, so a result left over from the previous
// iteration (or a skipped all-reduce) is wrong too.
inline constexpr int kPatternPeriod = 13;

// data[i] = rank + 1 + (i + iteration) % 13
inline void FillPattern(float* data, size_t count, int rank, int iteration) {
  int phase = iteration % kPatternPeriod;
  const float base = static_cast<float>(rank + 1);
  for (size_t i = 0; i < count; ++i) {
    data[i] = base + static_cast<float>(phase);
    if (++phase == kPatternPeriod) phase = 0;
  }
}

// Number of elements that differ from the sum of FillPattern over ranks 0..world-1.
inline size_t CountWrong(const float* data, size_t count, int world, int iteration) {
  int phase = iteration % kPatternPeriod;
  const float base = static_cast<float>(world * (world + 1) / 2);
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    wrong += data[i] != base + static_cast<float>(world * phase);
    if (++phase == kPatternPeriod) phase = 0;
  }
  return wrong;
}

// One buffer size's outcome, printed by rank 0 on stdout:
//   result <bytes> <wrong elements over all ranks and iterations> <seconds per timed iteration>...
// where each time is the slowest rank's time for that iteration.
inline void PrintResult(size_t bytes, size_t wrong, const std::vector<double>& seconds) {
  std::printf("result %zu %zu", bytes, wrong);
  for (double s : seconds) std::printf(" %.9g", s);
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace kubetrain::bench
