#include "worker/data/shard.h"

#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/random.h"

namespace kubetrain::worker {

std::vector<int64_t> EpochPermutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  Rng rng(seed, static_cast<uint64_t>(epoch));
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

int64_t ShardSize(int64_t n, int count) { return count > 0 ? n / count : 0; }

absl::StatusOr<std::vector<int64_t>> EpochShard(int64_t n, const ShardSpec& spec, int64_t epoch) {
  if (spec.count < 1 || spec.index < 0 || spec.index >= spec.count) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard index ", spec.index, " is not in [0, ", spec.count, ")"));
  }
  if (n < spec.count) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot shard ", n, " examples over ", spec.count, " workers"));
  }
  const std::vector<int64_t> perm = EpochPermutation(n, spec.seed, epoch);
  const int64_t size = ShardSize(n, spec.count);
  std::vector<int64_t> shard(static_cast<size_t>(size));
  for (int64_t k = 0; k < size; ++k) shard[k] = perm[spec.index + k * spec.count];
  return shard;
}

}  // namespace kubetrain::worker
