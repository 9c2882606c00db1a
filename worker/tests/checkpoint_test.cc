#include "worker/runtime/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <string>

#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "kubetrain/v1/checkpoint.pb.h"
#include "ps/wire.h"

namespace kubetrain::worker {
namespace {

using ::kubetrain::testing::FreshTempDir;
using ::kubetrain::testing::IsOk;
using ::kubetrain::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

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

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
}

// A checkpoint file as kubetrain wrote them before files carried a checksum: the bare proto.
std::string Unframed(const ps::ModelState& s, const std::string& model) {
  v1::Checkpoint ckpt;
  ckpt.set_global_step(s.global_step);
  *ckpt.mutable_config() = ps::ToProto(s.config);
  ckpt.set_run_id(s.run_id);
  ckpt.set_model(model);
  for (const ps::VariableState& v : s.variables) {
    v1::VariableCheckpoint* out = ckpt.add_variables();
    out->set_name(v.name);
    out->set_values(std::string(reinterpret_cast<const char*>(v.values.data()),
                                v.values.size() * sizeof(float)));
  }
  return ckpt.SerializeAsString();
}

// What State() fits: the two variables with their sizes.
CheckpointExpectation Expect(int64_t max_step = 1000) {
  return {"mlp", max_step, {{"dense1/kernel", 3}, {"dense1/bias", 1}}};
}

// What a Checkpointer keeping 2 loads, expecting State()'s variables, from `dir` (made here) when
// its one checkpoint, ckpt-7.pb, holds `bytes` and the manifest names it.
absl::StatusOr<std::optional<ps::ModelState>> LoadOnlyCheckpoint(const std::string& dir,
                                                                 const std::string& bytes) {
  fs::create_directories(dir);
  WriteAll(dir + "/ckpt-7.pb", bytes);
  WriteAll(dir + "/checkpoint.json", R"({"latest": "ckpt-7.pb", "all": ["ckpt-7.pb"]})");
  return Checkpointer({dir, 2}).LoadLatest(Expect());
}

TEST(Checkpointer, EmptyDirectoryHasNoCheckpoint) {
  Checkpointer c({FreshTempDir("ckpt_empty"), 3});
  auto latest = c.LoadLatest("mlp");
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_FALSE(latest->has_value());
}

TEST(Checkpointer, RoundTripsValuesSlotsStepAndConfig) {
  Checkpointer c({FreshTempDir("ckpt_roundtrip"), 3});
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
  std::string dir = FreshTempDir("ckpt_keep");
  Checkpointer c({dir, 2});
  for (int step : {10, 20, 30}) ASSERT_THAT(c.Save(State(step), "mlp"), IsOk());
  EXPECT_FALSE(fs::exists(dir + "/ckpt-10.pb"));
  EXPECT_TRUE(fs::exists(dir + "/ckpt-20.pb"));
  EXPECT_TRUE(fs::exists(dir + "/ckpt-30.pb"));
  for (const auto& e : fs::directory_iterator(dir)) {
    EXPECT_NE(e.path().extension(), ".tmp") << "temporary file left behind: " << e.path();
  }
  EXPECT_EQ((*c.LoadLatest("mlp"))->global_step, 30);
}

TEST(Checkpointer, RefusesAnotherModelsCheckpoint) {
  std::string dir = FreshTempDir("ckpt_model");
  Checkpointer c({dir, 2});
  ASSERT_THAT(c.Save(State(5), "mlp"), IsOk());
  auto latest = c.LoadLatest("cnn");
  EXPECT_THAT(latest, StatusIs(absl::StatusCode::kFailedPrecondition,
                               dir + "/ckpt-5.pb holds a mlp model, this run trains cnn; "
                                     "use another --checkpoint-dir"));
}

TEST(Checkpointer, CorruptCheckpointIsDataLoss) {
  std::string dir = FreshTempDir("ckpt_corrupt");
  Checkpointer c({dir, 2});
  auto path = c.Save(State(5), "mlp");
  ASSERT_THAT(path, IsOk());
  std::ofstream(*path, std::ios::trunc) << "\x08\xff\xff garbage";
  auto latest = c.LoadLatest("mlp");
  EXPECT_THAT(latest, StatusIs(absl::StatusCode::kDataLoss));
}

TEST(Checkpointer, UnreadableManifestFallsBackToTheNewestValidCheckpoint) {
  std::string dir = FreshTempDir("ckpt_bad_manifest");
  Checkpointer first({dir, 3});
  for (int step : {0, 10, 20}) ASSERT_THAT(first.Save(State(step), "mlp"), IsOk());
  WriteAll(dir + "/checkpoint.json", "{\"latest\": 5, \"all\": ");
  auto latest = Checkpointer({dir, 3}).LoadLatest(Expect());
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->global_step, 20);
}

TEST(Checkpointer, ManifestNamingAMissingFileFallsBackToAScan) {
  std::string dir = FreshTempDir("ckpt_missing_latest");
  Checkpointer c({dir, 3});
  ASSERT_THAT(c.Save(State(10), "mlp"), IsOk());
  ASSERT_THAT(c.Save(State(20), "mlp"), IsOk());
  fs::remove(dir + "/ckpt-20.pb");
  auto latest = c.LoadLatest(Expect());
  ASSERT_TRUE(latest.ok() && latest->has_value()) << latest.status();
  EXPECT_EQ((*latest)->global_step, 10);
}

TEST(Checkpointer, ALaterRunNeverOverwritesAnEarlierRunsCheckpoint) {
  std::string dir = FreshTempDir("ckpt_no_overwrite");
  ASSERT_THAT(Checkpointer({dir, 3}).Save(State(0), "mlp"), IsOk());
  ASSERT_THAT(Checkpointer({dir, 3}).Save(State(10), "mlp"), IsOk());
  const std::string earlier = ReadAll(dir + "/ckpt-0.pb");
  WriteAll(dir + "/checkpoint.json", "not json");
  // A second run starting afresh at step 0, with a keep of 1.
  Checkpointer second({dir, 1});
  auto path = second.Save(State(0), "mlp");
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, dir + "/ckpt-0.1.pb");
  EXPECT_EQ(ReadAll(dir + "/ckpt-0.pb"), earlier);
  // Its own file it may replace; the earlier run's files are not its to rotate away.
  EXPECT_EQ(*second.Save(State(0), "mlp"), dir + "/ckpt-0.1.pb");
  ASSERT_THAT(second.Save(State(5), "mlp"), IsOk());
  EXPECT_FALSE(fs::exists(dir + "/ckpt-0.1.pb"));
  EXPECT_TRUE(fs::exists(dir + "/ckpt-0.pb"));
  EXPECT_TRUE(fs::exists(dir + "/ckpt-10.pb"));
}

TEST(Checkpointer, ManifestEntriesOutsideTheDirectoryAreNeverDeleted) {
  std::string dir = FreshTempDir("ckpt_traversal");
  fs::create_directories(dir + "/sub");
  WriteAll(dir + "/precious.pb", "keep me");
  WriteAll(dir + "/sub/checkpoint.json", R"({"latest": "ckpt-1.pb", "all": ["../precious.pb"]})");
  ASSERT_THAT(Checkpointer({dir + "/sub", 1}).Save(State(2), "mlp"), IsOk());
  EXPECT_TRUE(fs::exists(dir + "/precious.pb"));
}

TEST(Checkpointer, ChecksumMismatchIsDataLossNamingTheFile) {
  std::string dir = FreshTempDir("ckpt_checksum");
  Checkpointer c({dir, 2});
  auto path = c.Save(State(5), "mlp");
  ASSERT_THAT(path, IsOk());
  std::string data = ReadAll(*path);
  data[data.size() - 2] ^= 0x01;  // one bit of a float value: still a valid proto
  WriteAll(*path, data);
  auto latest = c.LoadLatest(Expect());
  EXPECT_THAT(latest,
              StatusIs(absl::StatusCode::kDataLoss, *path + " is corrupt: checksum mismatch"));
}

TEST(Checkpointer, ReadsOlderFilesWithoutAChecksum) {
  std::string dir = FreshTempDir("ckpt_legacy");
  auto latest = LoadOnlyCheckpoint(dir, Unframed(State(7), "mlp"));
  ASSERT_TRUE(latest.ok() && latest->has_value()) << latest.status();
  EXPECT_EQ((*latest)->global_step, 7);
  EXPECT_EQ((*latest)->variables[0].values, (std::vector<float>{1.5f, -2.0f, 7.0f}));
}

// What a disk that was full (or a run killed) as the file was created leaves: said as it is,
// not read as an older format's checkpoint of a model named "".
TEST(Checkpointer, AnEmptyCheckpointIsDataLossSayingItIsEmpty) {
  std::string dir = FreshTempDir("ckpt_empty_file");
  auto latest = LoadOnlyCheckpoint(dir, "");
  EXPECT_THAT(latest, StatusIs(absl::StatusCode::kDataLoss,
                               AllOf(HasSubstr(dir + "/ckpt-7.pb is empty (0 bytes): "),
                                     HasSubstr("delete it to resume from an earlier checkpoint"))));
}

TEST(Checkpointer, RefusesNonFiniteValuesNamingTheFile) {
  std::string dir = FreshTempDir("ckpt_nan");
  ps::ModelState s = State(7);
  for (float& v : s.variables[0].values) v = std::numeric_limits<float>::quiet_NaN();
  auto latest = LoadOnlyCheckpoint(dir, Unframed(s, "mlp"));
  EXPECT_THAT(
      latest,
      StatusIs(absl::StatusCode::kDataLoss,
               dir + "/ckpt-7.pb: variable dense1/kernel holds nan at index 0 (training had "
                     "diverged); delete it to resume from an earlier checkpoint, or use another "
                     "--checkpoint-dir"));
}

TEST(Checkpointer, SaveRefusesNonFiniteValuesAndKeepsTheEarlierCheckpoints) {
  std::string dir = FreshTempDir("ckpt_save_nan");
  Checkpointer c({dir, 1});
  ASSERT_THAT(c.Save(State(5), "mlp"), IsOk());
  ps::ModelState s = State(6);
  s.variables[1].values[0] = std::numeric_limits<float>::infinity();
  auto path = c.Save(s, "mlp");
  ASSERT_FALSE(path.ok());
  EXPECT_EQ(path.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fs::exists(dir + "/ckpt-5.pb"));
  EXPECT_EQ((*c.LoadLatest(Expect()))->global_step, 5);
}

TEST(Checkpointer, RefusesAStepBeyondTheJobNamingTheFile) {
  std::string dir = FreshTempDir("ckpt_step");
  Checkpointer c({dir, 2});
  ASSERT_THAT(c.Save(State(int64_t{1} << 62), "mlp"), IsOk());
  auto latest = c.LoadLatest(Expect(937));
  EXPECT_THAT(
      latest,
      StatusIs(absl::StatusCode::kFailedPrecondition,
               dir + "/ckpt-4611686018427387904.pb is at global step 4611686018427387904, beyond "
                     "the 937 steps this job trains; raise --epochs to continue it, or use another "
                     "--checkpoint-dir"));
}

TEST(Checkpointer, RefusesVariablesOfAnotherShapeNamingTheFile) {
  std::string dir = FreshTempDir("ckpt_shape");
  Checkpointer c({dir, 2});
  ASSERT_THAT(c.Save(State(3), "mlp"), IsOk());
  CheckpointExpectation e = Expect();
  e.variables[0].elements = 4;
  auto latest = c.LoadLatest(e);
  EXPECT_THAT(
      latest,
      StatusIs(absl::StatusCode::kFailedPrecondition,
               dir +
                   "/ckpt-3.pb: variable dense1/kernel has 3 values, the mlp model's has 4; it was "
                   "written for another model, use another --checkpoint-dir"));
}

TEST(Checkpointer, NoUsableCheckpointIsAnErrorNotAFreshStart) {
  std::string dir = FreshTempDir("ckpt_none_usable");
  Checkpointer c({dir, 3});
  auto path = c.Save(State(5), "mlp");
  ASSERT_THAT(path, IsOk());
  WriteAll(*path, "\x08\xff\xff garbage");
  fs::remove(dir + "/checkpoint.json");
  auto latest = c.LoadLatest(Expect());
  EXPECT_THAT(latest,
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("no usable checkpoint in " + dir), HasSubstr(*path))));
}

}  // namespace
}  // namespace kubetrain::worker
