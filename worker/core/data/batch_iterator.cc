#include "worker/core/data/batch_iterator.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

namespace kubetrain::worker {

BatchIterator::BatchIterator(const Dataset& data, std::vector<int64_t> indices, int batch_size,
                             bool drop_remainder)
    : data_(data),
      indices_(std::move(indices)),
      batch_size_(std::max(1, batch_size)),
      drop_remainder_(drop_remainder) {
  batch_.images.reserve(static_cast<size_t>(batch_size_ * data_.example_size()));
  batch_.labels.reserve(static_cast<size_t>(batch_size_));
}

int64_t BatchIterator::num_batches() const {
  const auto n = static_cast<int64_t>(indices_.size());
  return drop_remainder_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

const Batch* BatchIterator::Next() {
  const auto remaining = static_cast<int64_t>(indices_.size()) - position_;
  if (remaining <= 0 || (drop_remainder_ && remaining < batch_size_)) return nullptr;
  const int size = static_cast<int>(std::min<int64_t>(remaining, batch_size_));
  const int64_t example = data_.example_size();
  batch_.size = size;
  batch_.images.resize(static_cast<size_t>(size * example));
  batch_.labels.resize(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) {
    const int64_t index = indices_[position_ + i];
    std::memcpy(batch_.images.data() + i * example, data_.image(index), example * sizeof(float));
    batch_.labels[i] = data_.labels[index];
  }
  position_ += size;
  return &batch_;
}

std::vector<int64_t> IndexRange(int64_t begin, int64_t end) {
  std::vector<int64_t> indices(static_cast<size_t>(std::max<int64_t>(end - begin, 0)));
  std::iota(indices.begin(), indices.end(), begin);
  return indices;
}

}  // namespace kubetrain::worker
