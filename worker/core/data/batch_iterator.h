// Walks a list of example indices in batches, gathering each batch into contiguous buffers.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "worker/core/data/dataset.h"

namespace kubetrain::worker {

// One batch in host memory: `size` images back to back, then their labels.
struct Batch {
  int size = 0;
  std::vector<float> images;  // size * example_size floats (capacity kept across batches)
  std::vector<int32_t> labels;

  absl::Span<const float> image_span() const { return absl::MakeConstSpan(images); }
  absl::Span<const int32_t> label_span() const { return absl::MakeConstSpan(labels); }
};

// Borrows the Dataset (which must outlive it) and owns its index list and one reusable Batch,
// so iterating allocates nothing after the first batch. Not thread-safe.
class BatchIterator {
 public:
  // With drop_remainder the last, partial batch is skipped (fixed-shape steps).
  BatchIterator(const Dataset& data, std::vector<int64_t> indices, int batch_size,
                bool drop_remainder = false);

  // The next batch, or nullptr after the last one. The pointer stays valid until the next call.
  const Batch* Next();

  int64_t num_batches() const;

 private:
  const Dataset& data_;
  std::vector<int64_t> indices_;
  int batch_size_;
  bool drop_remainder_;
  int64_t position_ = 0;
  Batch batch_;
};

// Indices begin..end-1 in order (evaluation walks a split, or its share of one, unshuffled).
std::vector<int64_t> IndexRange(int64_t begin, int64_t end);

}  // namespace kubetrain::worker
