#include "operator/api/tf_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"

namespace kubetrain::api {
namespace {

using ::kubetrain::testing::IsOk;
using ::kubetrain::testing::StatusIs;

constexpr char kWorker1[] =
    R"({"cluster":{"chief":["j-chief-0.j.ns.svc:2222"],"ps":["j-ps-0.j.ns.svc:2222"],)"
    R"("worker":["j-worker-0.j.ns.svc:2222","j-worker-1.j.ns.svc:2222"]},)"
    R"("task":{"type":"worker","index":1}})";

TEST(TfConfig, ParsesAndSerialisesByteForByte) {
  auto config = ParseTfConfig(kWorker1);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->task_type, "worker");
  EXPECT_EQ(config->task_index, 1);
  EXPECT_EQ(config->Addresses("ps").size(), 1u);
  EXPECT_EQ(config->TaskAddress(), "j-worker-1.j.ns.svc:2222");
  EXPECT_FALSE(config->IsChief());
  EXPECT_EQ(ToJsonString(*config), kWorker1);
}

TEST(TfConfig, ChiefIsChiefZeroWhenPresentElseWorkerZero) {
  auto with_chief = ParseTfConfig(
      R"({"cluster":{"chief":["c:1"],"worker":["w:1"]},"task":{"type":"worker","index":0}})");
  ASSERT_THAT(with_chief, IsOk());
  EXPECT_FALSE(with_chief->IsChief());
  auto without = ParseTfConfig(R"({"cluster":{"worker":["w:1"]},"task":{"type":"worker"}})");
  ASSERT_THAT(without, IsOk());
  EXPECT_TRUE(without->IsChief());
}

TEST(TfConfig, EvaluatorIsNotInClusterButParses) {
  auto config = ParseTfConfig(R"({"cluster":{"worker":["w:1"]},"task":{"type":"evaluator"}})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->TaskAddress(), "");
}

struct BadCase {
  const char* json;
  const char* message;
};

class TfConfigErrors : public ::testing::TestWithParam<BadCase> {};

TEST_P(TfConfigErrors, NameTheField) {
  auto config = ParseTfConfig(GetParam().json);
  EXPECT_THAT(config, StatusIs(absl::StatusCode::kInvalidArgument, GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    All, TfConfigErrors,
    ::testing::Values(
        BadCase{"{", "TF_CONFIG: not valid JSON"},
        BadCase{"[]", "TF_CONFIG: must be a JSON object"},
        BadCase{R"({"task":{"type":"worker"}})", "TF_CONFIG: cluster: required"},
        BadCase{R"({"cluster":{"worker":["w:1"]}})", "TF_CONFIG: task: required"},
        BadCase{R"({"cluster":{"worker":"w:1"},"task":{"type":"worker"}})",
                "TF_CONFIG: cluster.worker: must be a list of \"host:port\" strings"},
        BadCase{R"({"cluster":{"worker":["w"]},"task":{"type":"worker"}})",
                "TF_CONFIG: cluster.worker[0]: \"w\" is not host:port (e.g. "
                "fmnist-ps-0.fmnist:2222)"},
        BadCase{R"({"cluster":{"worker":["w:99999"]},"task":{"type":"worker"}})",
                "TF_CONFIG: cluster.worker[0]: \"w:99999\" has no valid port (1-65535) after the "
                "last ':'"},
        BadCase{R"({"cluster":{"worker":["w:1"]},"task":{"type":"ps"}})",
                "TF_CONFIG: task.type: \"ps\" is not a key of cluster"},
        BadCase{R"({"cluster":{"worker":["w:1","w:2"]},"task":{"type":"worker","index":3}})",
                "TF_CONFIG: task.index: 3 is out of range, cluster.worker has 2 entries"},
        BadCase{R"({"cluster":{"worker":["w:1"]},"task":{"type":"worker","index":"0"}})",
                "TF_CONFIG: task.index: must be a non-negative integer, got \"0\""},
        // 4294967296 used to wrap to 0 on the way to int and made a second chief.
        BadCase{R"({"cluster":{"worker":["w:1"]},"task":{"type":"worker","index":4294967296}})",
                "TF_CONFIG: task.index: must be at most 1000000, got 4294967296"},
        BadCase{
            R"({"cluster":{"worker":["w:1"]},"task":{"type":"worker","index":18446744073709551615}})",
            "TF_CONFIG: task.index: must be at most 1000000, got 18446744073709551615"},
        BadCase{R"({"cluster":{"worker":["w:1"]},"task":{"type":"worker","index":-4294967296}})",
                "TF_CONFIG: task.index: must be >= 0, got -4294967296"},
        BadCase{R"({"cluster":{"worker":["w:1"]},"task":{"type":"worker","index":0.5}})",
                "TF_CONFIG: task.index: must be a non-negative integer, got 0.5"},
        BadCase{R"({"cluster":{"worker":["w:1"]},"task":{"type":"worker","index":null}})",
                "TF_CONFIG: task.index: must be a non-negative integer, got null"},
        BadCase{R"({"cluster":{"worker":["w:1"]},"task":{"type":5}})",
                "TF_CONFIG: task.type: required string (chief, ps, worker or evaluator)"},
        BadCase{R"({"cluster":{"worker":["w:1"]},"task":[]})",
                "TF_CONFIG: task: must be an object with type and index"},
        BadCase{R"({"cluster":["w:1"],"task":{"type":"worker"}})",
                "TF_CONFIG: cluster: must be an object of task type to addresses"},
        BadCase{R"({"cluster":{"worker":[5]},"task":{"type":"worker"}})",
                "TF_CONFIG: cluster.worker[0]: must be a \"host:port\" string"}));

TEST(TfConfig, OversizedInputIsRefusedBeforeParsing) {
  std::string huge = R"({"cluster":{"worker":[)";
  for (int i = 0; i < 30000; ++i) huge += (i ? ",\"" : "\"") + std::string("w:1\"");
  huge += R"(]},"task":{"type":"worker"}})";
  auto config = ParseTfConfig(huge);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().message(),
            absl::StrCat("TF_CONFIG: ", huge.size(),
                         " bytes, more than the 131072 a process environment can carry"));
  // Deep nesting is only JSON, not a crash.
  EXPECT_FALSE(ParseTfConfig(std::string(100000, '[') + std::string(100000, ']')).ok());
}

}  // namespace
}  // namespace kubetrain::api
