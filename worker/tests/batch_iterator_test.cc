#include "worker/core/data/batch_iterator.h"

#include <gtest/gtest.h>

#include <vector>

namespace kubetrain::worker {
namespace {

// Five 1x2 images whose pixels encode their index: image i = {10i, 10i + 1}, label i.
Dataset FiveExamples() {
  Dataset data;
  data.height = 1;
  data.width = 2;
  for (int i = 0; i < 5; ++i) {
    data.images.push_back(10.0f * i);
    data.images.push_back(10.0f * i + 1);
    data.labels.push_back(i);
  }
  return data;
}

TEST(BatchIterator, GathersIndicesIntoContiguousBatches) {
  const Dataset data = FiveExamples();
  BatchIterator it(data, {4, 0, 2}, 2);
  EXPECT_EQ(it.num_batches(), 2);
  const Batch* b = it.Next();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->size, 2);
  EXPECT_EQ(b->images, (std::vector<float>{40, 41, 0, 1}));
  EXPECT_EQ(b->labels, (std::vector<int32_t>{4, 0}));
  b = it.Next();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->size, 1);  // the partial last batch
  EXPECT_EQ(b->images, (std::vector<float>{20, 21}));
  EXPECT_EQ(b->labels, (std::vector<int32_t>{2}));
  EXPECT_EQ(it.Next(), nullptr);
}

TEST(BatchIterator, DropRemainderSkipsPartialBatch) {
  const Dataset data = FiveExamples();
  BatchIterator it(data, IndexRange(0, 5), 2, /*drop_remainder=*/true);
  EXPECT_EQ(it.num_batches(), 2);
  int batches = 0;
  while (const Batch* b = it.Next()) {
    EXPECT_EQ(b->size, 2);
    ++batches;
  }
  EXPECT_EQ(batches, 2);
}

TEST(BatchIterator, EmptyIndexListYieldsNothing) {
  const Dataset data = FiveExamples();
  BatchIterator it(data, {}, 4);
  EXPECT_EQ(it.num_batches(), 0);
  EXPECT_EQ(it.Next(), nullptr);
}

}  // namespace
}  // namespace kubetrain::worker
