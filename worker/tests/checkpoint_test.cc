#include "worker/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace kubetrain::worker {
namespace {

namespace fs = std::filesystem;

ps::ModelState State(int64_t step) {
  ps::ModelState s;
  s.config.mode = ps::UpdateMode::kSync;
  s.config.replicas_to_aggregate = 2;
  s.config.optimizer.kind = ps::OptimizerKind::kMomentum;
  s.config.optimizer.learning_rate = 0.04;
  s.global_step = step;
  s.run_id = "run-1";
  s.variables.push_back(
      {"dense1/kernel", {1.5f, -2.0f, float(step)}, {{"momentum", {0.25f, 0, 1}}}});
  s.variables.push_back({"dense1/bias", {3.0f}, {}});
  return s;
}

std::string FreshDir(const std::string& name) {
  std::string dir = ::testing::TempDir() + "/" + name;
  fs::remove_all(dir);
  return dir;
}

TEST(Checkpointer, EmptyDirectoryHasNoCheckpoint) {
  Checkpointer c({FreshDir("ckpt_empty"), 3});
  auto latest = c.LoadLatest("mlp");
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_FALSE(latest->has_value());
}

TEST(Checkpointer, RoundTripsValuesSlotsStepAndConfig) {
  Checkpointer c({FreshDir("ckpt_roundtrip"), 3});
  auto path = c.Save(State(42), "mlp");
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_TRUE(fs::exists(*path));
  auto latest = c.LoadLatest("mlp");
  ASSERT_TRUE(latest.ok() && latest->has_value()) << latest.status();
  const ps::ModelState& s = **latest;
  EXPECT_EQ(s.global_step, 42);
  EXPECT_EQ(s.run_id, "run-1");
  EXPECT_EQ(s.config.replicas_to_aggregate, 2);
  EXPECT_EQ(s.config.optimizer.kind, ps::OptimizerKind::kMomentum);
  EXPECT_DOUBLE_EQ(s.config.optimizer.learning_rate, 0.04);
  ASSERT_EQ(s.variables.size(), 2u);
  EXPECT_EQ(s.variables[0].values, (std::vector<float>{1.5f, -2.0f, 42.0f}));
  EXPECT_EQ(s.variables[0].slots.at("momentum"), (std::vector<float>{0.25f, 0, 1}));
  EXPECT_EQ(s.variables[1].values, (std::vector<float>{3.0f}));
}

TEST(Checkpointer, KeepsOnlyTheNewestAndLoadsTheLatest) {
  std::string dir = FreshDir("ckpt_keep");
  Checkpointer c({dir, 2});
  for (int step : {10, 20, 30}) ASSERT_TRUE(c.Save(State(step), "mlp").ok());
  EXPECT_FALSE(fs::exists(dir + "/ckpt-10.pb"));
  EXPECT_TRUE(fs::exists(dir + "/ckpt-20.pb"));
  EXPECT_TRUE(fs::exists(dir + "/ckpt-30.pb"));
  for (const auto& e : fs::directory_iterator(dir)) {
    EXPECT_NE(e.path().extension(), ".tmp") << "temporary file left behind: " << e.path();
  }
  EXPECT_EQ((*c.LoadLatest("mlp"))->global_step, 30);
}

TEST(Checkpointer, RefusesAnotherModelsCheckpoint) {
  std::string dir = FreshDir("ckpt_model");
  Checkpointer c({dir, 2});
  ASSERT_TRUE(c.Save(State(5), "mlp").ok());
  auto latest = c.LoadLatest("cnn");
  ASSERT_FALSE(latest.ok());
  EXPECT_EQ(latest.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(latest.status().message(), dir +
                                           "/ckpt-5.pb holds a mlp model, this run trains cnn; "
                                           "use another --checkpoint-dir");
}

TEST(Checkpointer, CorruptCheckpointIsDataLoss) {
  std::string dir = FreshDir("ckpt_corrupt");
  Checkpointer c({dir, 2});
  auto path = c.Save(State(5), "mlp");
  ASSERT_TRUE(path.ok());
  std::ofstream(*path, std::ios::trunc) << "\x08\xff\xff garbage";
  auto latest = c.LoadLatest("mlp");
  ASSERT_FALSE(latest.ok());
  EXPECT_EQ(latest.status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace kubetrain::worker
