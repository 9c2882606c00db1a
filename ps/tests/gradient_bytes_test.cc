// GradientBytes: a pushed gradient read where it arrived, in fragments at any alignment, float32
// or 16-bit; and the store summing and applying such gradients as it does contiguous ones.
#include "ps/gradient_bytes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ps/half_float.h"
#include "ps/store.h"
#include "ps/tests/store_testing.h"

namespace kubetrain::ps {
namespace {

using testing::Bytes;

std::vector<float> Ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * 0.25f - 100.0f;
  return v;
}

// `bytes` cut into fragments of `cut` bytes, each placed at an odd address of `storage` the way
// HTTP/2 framing leaves received slices: floats straddle fragments and none is aligned.
GradientBytes Fragmented(const std::string& bytes, size_t cut, WireFloat encoding,
                         std::vector<std::string>& storage) {
  GradientBytes out(absl::string_view(), encoding);
  for (size_t at = 0; at < bytes.size(); at += cut) {
    std::string& s = storage.emplace_back(1, 'x');
    s += bytes.substr(at, cut);
  }
  for (const std::string& s : storage) out.Append(absl::string_view(s).substr(1));
  return out;
}

std::vector<float> Collect(const GradientBytes& g, size_t* runs = nullptr) {
  std::vector<float> out;
  g.ForEachRun([&](size_t first, std::span<const float> run) {
    EXPECT_EQ(first, out.size());  // in order, no gaps
    EXPECT_FALSE(run.empty());
    out.insert(out.end(), run.begin(), run.end());
    if (runs != nullptr) ++*runs;
  });
  return out;
}

TEST(GradientBytes, Float32InOnePieceIsReadInPlace) {
  const std::vector<float> values = Ramp(10000);
  const std::string bytes = Bytes(values);  // std::string's heap buffer is aligned
  const GradientBytes g(bytes);
  EXPECT_EQ(g.size(), values.size());
  size_t runs = 0;
  g.ForEachRun([&](size_t first, std::span<const float> run) {
    ++runs;
    EXPECT_EQ(first, 0u);
    EXPECT_EQ(reinterpret_cast<const char*>(run.data()), bytes.data());  // not copied
    EXPECT_EQ(run.size(), values.size());
  });
  EXPECT_EQ(runs, 1u);
}

TEST(GradientBytes, Float32SplitAcrossUnalignedFragmentsReadsEveryValueInOrder) {
  const std::vector<float> values = Ramp(3 * GradientBytes::kRunValues + 17);
  for (size_t cut : {size_t{1}, size_t{7}, size_t{4093}, size_t{16384}}) {
    std::vector<std::string> storage;
    const GradientBytes g = Fragmented(Bytes(values), cut, WireFloat::kFloat32, storage);
    ASSERT_EQ(g.size(), values.size()) << cut;
    size_t runs = 0;
    EXPECT_EQ(Collect(g, &runs), values) << cut;
    EXPECT_LE(runs, values.size() / GradientBytes::kRunValues + 1) << cut;  // whole runs
    std::vector<float> copied(values.size());
    g.CopyTo(copied);
    EXPECT_EQ(copied, values) << cut;
  }
}

TEST(GradientBytes, SixteenBitValuesAreWidenedAcrossFragments) {
  const std::vector<float> values = Ramp(2 * GradientBytes::kRunValues + 5);
  for (WireFloat wire : {WireFloat::kFloat16, WireFloat::kBFloat16}) {
    std::vector<uint16_t> narrow(values.size());
    Compress(wire, values, narrow);
    std::vector<float> want(values.size());
    Decompress(wire, narrow, want);
    const std::string bytes(reinterpret_cast<const char*>(narrow.data()),
                            narrow.size() * sizeof(uint16_t));
    for (size_t cut : {size_t{3}, size_t{4095}}) {  // a value's two bytes in two fragments
      std::vector<std::string> storage;
      const GradientBytes g = Fragmented(bytes, cut, wire, storage);
      ASSERT_EQ(g.size(), values.size());
      EXPECT_EQ(g.wire_bytes(), bytes.size());
      EXPECT_EQ(Collect(g), want) << WireFloatName(wire) << " " << cut;
      std::vector<float> copied(values.size());
      g.CopyTo(copied);
      EXPECT_EQ(copied, want);
    }
  }
}

TEST(GradientBytes, CountsOnlyWholeValues) {
  const std::string five(5, '\0');
  EXPECT_FALSE(GradientBytes(five).whole());
  EXPECT_EQ(GradientBytes(five).size(), 1u);
  EXPECT_TRUE(GradientBytes(five.substr(0, 4)).whole());
  EXPECT_FALSE(GradientBytes(five.substr(0, 3), WireFloat::kFloat16).whole());
  EXPECT_TRUE(GradientBytes().empty());
}

TEST(GradientBytes, FirstNonFiniteFindsTheValueInAnyRunAndFragment) {
  std::vector<float> values = Ramp(2 * GradientBytes::kRunValues + 100);
  std::vector<std::string> storage;
  EXPECT_EQ(FirstNonFinite(Fragmented(Bytes(values), 4093, WireFloat::kFloat32, storage)), -1);
  const size_t at = GradientBytes::kRunValues + 1023;  // the second run; a fragment's edge
  values[at] = -std::numeric_limits<float>::infinity();
  values[at + 5] = std::numeric_limits<float>::quiet_NaN();
  storage.clear();
  float value = 0;
  EXPECT_EQ(FirstNonFinite(Fragmented(Bytes(values), 4093, WireFloat::kFloat32, storage), &value),
            static_cast<int64_t>(at));
  EXPECT_EQ(value, -std::numeric_limits<float>::infinity());

  // A 16-bit NaN is found once widened.
  std::vector<uint16_t> narrow(values.size());
  values[at] = 1.0f;
  Compress(WireFloat::kFloat16, values, narrow);
  const std::string bytes(reinterpret_cast<const char*>(narrow.data()), narrow.size() * 2);
  storage.clear();
  EXPECT_EQ(FirstNonFinite(Fragmented(bytes, 333, WireFloat::kFloat16, storage), &value),
            static_cast<int64_t>(at + 5));
  EXPECT_TRUE(std::isnan(value));
}

// A shard of one partition of `n` values, updated by momentum (a slot read and written with the
// values) from `replicas` pushes a step.
ShardState MomentumShard(size_t n, int replicas, UpdateMode mode) {
  TrainingConfig config{mode, replicas, {.kind = OptimizerKind::kMomentum, .learning_rate = 0.5}};
  ShardState state{config, 0, "run-1", {}};
  state.partitions.push_back({{"w", 0}, 0, Ramp(n), {}});
  return state;
}

std::vector<float> ValuesOf(const ShardStore& store) { return testing::Values(store).first; }

TEST(GradientBytesStore, FragmentedPushesUpdateBitForBitAsContiguousOnesDo) {
  const size_t n = 3 * GradientBytes::kRunValues + 11;
  std::vector<float> g1 = Ramp(n), g2 = Ramp(n);
  for (size_t i = 0; i < n; ++i) {
    g1[i] = std::sin(static_cast<float>(i)) * 0.01f;
    g2[i] = std::cos(static_cast<float>(i)) * 0.03f;
  }
  const std::string b1 = Bytes(g1), b2 = Bytes(g2);
  for (UpdateMode mode : {UpdateMode::kSync, UpdateMode::kAsync}) {
    ShardStore whole, pieces;
    ASSERT_TRUE(whole.Init(MomentumShard(n, 2, mode)).ok());
    ASSERT_TRUE(pieces.Init(MomentumShard(n, 2, mode)).ok());
    for (int64_t step = 0; step < 3; ++step) {
      // Sync: the first push of a step is copied into the sum, the second completes the round and
      // is added in the update's own pass. Async: each is applied on its own.
      for (const std::string* b : {&b1, &b2}) {
        const int64_t at = mode == UpdateMode::kSync ? step : 2 * step + (b == &b1 ? 0 : 1);
        PushArgs contiguous{"run-1", 0, at, {{{"w", 0}, GradientBytes(*b)}}};
        ASSERT_TRUE(whole.Push(contiguous).ok());
        std::vector<std::string> storage;
        PushArgs split{
            "run-1", 0, at, {{{"w", 0}, Fragmented(*b, 4093, WireFloat::kFloat32, storage)}}};
        ASSERT_TRUE(pieces.Push(split).ok());
      }
    }
    const std::vector<float> want = ValuesOf(whole);
    ASSERT_NE(want, Ramp(n));  // the pushes moved the values
    const std::vector<float> got = ValuesOf(pieces);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), n * sizeof(float)))
        << (mode == UpdateMode::kSync ? "sync" : "async");
  }
}

TEST(GradientBytesStore, ANonFiniteValueInAFragmentRefusesThePushAndNamesIt) {
  const size_t n = GradientBytes::kRunValues + 50;
  ShardStore store;
  ASSERT_TRUE(store.Init(MomentumShard(n, 1, UpdateMode::kSync)).ok());
  std::vector<float> g(n, 0.5f);
  g[n - 3] = std::numeric_limits<float>::infinity();
  std::vector<std::string> storage;
  PushArgs push{
      "run-1", 0, 0, {{{"w", 0}, Fragmented(Bytes(g), 999, WireFloat::kFloat32, storage)}}};
  auto pushed = store.Push(push);
  ASSERT_EQ(pushed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(pushed.status().message().find(absl::StrCat("inf at index ", n - 3)), std::string::npos)
      << pushed.status();
  EXPECT_EQ(ValuesOf(store), Ramp(n));  // nothing applied
}

}  // namespace
}  // namespace kubetrain::ps
