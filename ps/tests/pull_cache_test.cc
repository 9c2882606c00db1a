// PullCache: the pulls of one revision share one encoding per wire format; a new revision is
// encoded afresh while answers still in flight keep the bytes they reference.
#include "ps/pull_cache.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "absl/synchronization/barrier.h"
#include "ps/half_float.h"

namespace kubetrain::ps {
namespace {

std::vector<float> FloatsOf(const grpc::Slice& slice) {
  std::vector<float> out(slice.size() / sizeof(float));
  std::memcpy(out.data(), slice.begin(), slice.size());
  return out;
}

TEST(PullCache, PullsOfOneRevisionShareOneEncoding) {
  PullCache cache;
  const PartitionKey key{"w", 0};
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 9.5f, 11.0f, 13.0f};
  grpc::Slice first = cache.Get(key, 1, WireFloat::kFloat32, values);
  grpc::Slice second = cache.Get(key, 1, WireFloat::kFloat32, values);
  EXPECT_EQ(first.begin(), second.begin());  // one copy, referenced twice
  EXPECT_EQ(FloatsOf(first), values);
  EXPECT_EQ(cache.bytes(), values.size() * sizeof(float));
  // Another partition at the same revision number is its own entry.
  grpc::Slice other = cache.Get({"w", 1}, 1, WireFloat::kFloat32, {values.data(), 2});
  EXPECT_NE(other.begin(), first.begin());
  EXPECT_EQ(FloatsOf(other), std::vector<float>(values.begin(), values.begin() + 2));
}

TEST(PullCache, ANewRevisionIsEncodedAfreshWhileAnAnswerInFlightKeepsItsBytes) {
  PullCache cache;
  const PartitionKey key{"w", 0};
  std::vector<float> values(1000, 1.0f);
  grpc::Slice in_flight = cache.Get(key, 1, WireFloat::kFloat32, values);
  std::fill(values.begin(), values.end(), 2.0f);  // the store applied a step: revision 2
  grpc::Slice next = cache.Get(key, 2, WireFloat::kFloat32, values);
  EXPECT_EQ(FloatsOf(next), values);
  EXPECT_EQ(FloatsOf(in_flight), std::vector<float>(1000, 1.0f));
  EXPECT_EQ(cache.bytes(), values.size() * sizeof(float));  // only the newest is kept
  cache.Clear();
  EXPECT_EQ(cache.bytes(), 0u);
  EXPECT_EQ(FloatsOf(next), values);  // still referenced here
}

TEST(PullCache, EachWireFormatHasItsOwnEncoding) {
  PullCache cache;
  const PartitionKey key{"w", 0};
  const std::vector<float> values = {0.5f, -1.25f, 1000.0f, 3.0f};
  grpc::Slice f32 = cache.Get(key, 4, WireFloat::kFloat32, values);
  grpc::Slice f16 = cache.Get(key, 4, WireFloat::kFloat16, values);
  grpc::Slice bf16 = cache.Get(key, 4, WireFloat::kBFloat16, values);
  ASSERT_EQ(f16.size(), values.size() * 2);
  ASSERT_EQ(bf16.size(), values.size() * 2);
  EXPECT_EQ(FloatsOf(f32), values);
  for (const auto& [wire, slice] :
       {std::pair{WireFloat::kFloat16, &f16}, std::pair{WireFloat::kBFloat16, &bf16}}) {
    std::vector<uint16_t> bits(values.size());
    std::memcpy(bits.data(), slice->begin(), slice->size());
    std::vector<float> widened(values.size());
    Decompress(wire, bits, widened);
    EXPECT_EQ(widened, values) << WireFloatName(wire);  // all exact in both formats
  }
  EXPECT_EQ(cache.Get(key, 4, WireFloat::kFloat16, values).begin(), f16.begin());
  EXPECT_EQ(cache.bytes(), values.size() * (4 + 2 + 2));
}

// In sync mode every worker's pull of a step is woken at once: they must wait for one encoding,
// not each make their own.
TEST(PullCache, ConcurrentPullsOfOneRevisionGetOneEncoding) {
  PullCache cache;
  const PartitionKey key{"w", 0};
  const std::vector<float> values(1 << 20, 0.25f);
  constexpr int kPulls = 8;
  std::vector<grpc::Slice> got(kPulls);
  absl::Barrier start(kPulls);
  std::vector<std::thread> threads;
  for (int i = 0; i < kPulls; ++i) {
    threads.emplace_back([&, i] {
      start.Block();
      got[i] = cache.Get(key, 7, WireFloat::kFloat32, values);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const grpc::Slice& s : got) EXPECT_EQ(s.begin(), got[0].begin());
  EXPECT_EQ(cache.bytes(), values.size() * sizeof(float));
}

}  // namespace
}  // namespace kubetrain::ps
