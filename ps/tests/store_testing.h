// ShardStore test helpers shared by store_test.cc and store_elastic_test.cc: a two-partition
// shard, pushes of whole shards, and reading every value back.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "prometheus/registry.h"
#include "ps/store.h"

namespace kubetrain::ps::testing {

inline std::string Bytes(const std::vector<float>& values) {
  std::string out(values.size() * sizeof(float), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// Two partitions of "w": 4 and 2 elements, values 10..15.
inline ShardState TwoPartitions(TrainingConfig config) {
  ShardState state{config, 0, "run-1", {}};
  state.partitions.push_back({{"w", 0}, 0, {10, 11, 12, 13}, {}});
  state.partitions.push_back({{"w", 1}, 4, {14, 15}, {}});
  return state;
}

inline TrainingConfig Sync(int replicas, OptimizerOptions optimizer = {.learning_rate = 1}) {
  return {UpdateMode::kSync, replicas, optimizer};
}

// A push of the same value g to every element of both partitions, or of `g`'s six values in
// partition order. The strings live in the returned object so the GradientRefs stay valid.
struct Push {
  std::string a, b;
  PushArgs args;
  Push(int64_t step, float g) : Push(step, std::vector<float>(6, g)) {}
  Push(int64_t step, const std::vector<float>& g)
      : a(Bytes({g.begin(), g.begin() + 4})), b(Bytes({g.begin() + 4, g.end()})) {
    args.step = step;
    args.gradients = {{{"w", 0}, GradientBytes(a)}, {{"w", 1}, GradientBytes(b)}};
  }
};

// All values of the store, in partition order, and the step they belong to.
inline std::pair<std::vector<float>, int64_t> Values(const ShardStore& store,
                                                     int64_t min_step = 0) {
  std::vector<float> out;
  auto pulled = store.Pull({}, min_step, absl::Now() + absl::Seconds(60),
                           [&](const PartitionKey&, uint64_t, std::span<const float> v, uint64_t) {
                             out.insert(out.end(), v.begin(), v.end());
                           });
  EXPECT_TRUE(pulled.ok()) << pulled.status();
  return {out, pulled.ok() ? pulled->global_step : -1};
}

inline std::vector<float> Minus(std::vector<float> v, float d) {
  for (float& x : v) x -= d;
  return v;
}

inline const std::vector<float> kInitial = {10, 11, 12, 13, 14, 15};

class StoreTest : public ::testing::Test {
 protected:
  prometheus::Registry registry_;
  PsMetrics metrics_{registry_};
  ShardStore store_{&metrics_};
};

// An elastic sync config: `nominal` replicas the rate is scaled for, `backup` backup workers.
inline TrainingConfig Elastic(int nominal, int backup = 0) {
  TrainingConfig config = Sync(nominal);
  config.elastic = true;
  config.backup_workers = backup;
  config.member_timeout = absl::Seconds(5);
  return config;
}

// `push` as worker `worker` sends it.
inline PushArgs From(uint32_t worker, Push& push) {
  push.args.worker = worker;
  return push.args;
}

}  // namespace kubetrain::ps::testing
