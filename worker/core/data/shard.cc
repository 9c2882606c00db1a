#include "worker/core/data/shard.h"

#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/core/random.h"

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

int64_t ShardBatches::steps_per_epoch() const {
  return batch_size_ > 0 ? ShardSize(data_.size(), spec_.count) / batch_size_ : 0;
}

absl::StatusOr<const Batch*> ShardBatches::At(int64_t step) {
  const int64_t per_epoch = steps_per_epoch();
  if (per_epoch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch size ", batch_size_,
                                                   " is larger than this worker's shard of ",
                                                   ShardSize(data_.size(), spec_.count)));
  }
  const int64_t epoch = step / per_epoch;
  const int64_t index = step % per_epoch;
  if (!iterator_ || epoch != epoch_ || index != next_index_) {
    ASSIGN_OR_RETURN(std::vector<int64_t> shard, EpochShard(data_.size(), spec_, epoch));
    iterator_ = std::make_unique<BatchIterator>(data_, std::move(shard), batch_size_,
                                                /*drop_remainder=*/true);
    epoch_ = epoch;
    for (int64_t i = 0; i < index; ++i) iterator_->Next();
  }
  next_index_ = index + 1;
  const Batch* batch = iterator_->Next();
  if (batch == nullptr) return absl::InternalError("ran out of batches inside an epoch");
  return batch;
}

}  // namespace kubetrain::worker
