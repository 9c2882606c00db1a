#include "operator/api/validation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "common/testing/status_matchers.h"
#include "operator/api/render.h"
#include "operator/api/tests/test_util.h"

namespace kubetrain::api {
namespace {

using ::kubetrain::testing::IsOk;
using nlohmann::json;
namespace fs = std::filesystem;

TEST(Validate, ExamplesAreValid) {
  for (const auto& entry : fs::directory_iterator(testing::SourcePath("deploy/examples"))) {
    if (entry.path().extension() != ".yaml") continue;
    auto text = ReadFileOrStdin(entry.path());
    ASSERT_THAT(text, IsOk());
    auto docs = ParseYamlDocuments(*text);
    ASSERT_TRUE(docs.ok()) << entry.path() << ": " << docs.status();
    for (const json& doc : *docs) {
      EXPECT_EQ(testing::ValidationErrors(doc), std::vector<std::string>{}) << entry.path();
    }
  }
}

TEST(Validate, MinimalJobsOfEveryShapeAreValid) {
  EXPECT_TRUE(testing::ValidationErrors(testing::MinimalJob(1, 1)).empty());
  EXPECT_TRUE(
      testing::ValidationErrors(testing::MinimalJob(0, 4)).empty());  // all-reduce: workers only
  EXPECT_TRUE(testing::ValidationErrors(testing::MinimalJob(3, 0, /*chief=*/true)).empty());
  EXPECT_TRUE(testing::ValidationErrors(testing::MinimalJob(2, 8, true, true)).empty());
}

TEST(Validate, ManagedByIsADomainPrefixedPath) {
  json job = testing::MinimalJob(1, 1);
  job["spec"]["runPolicy"]["managedBy"] = "kueue.x-k8s.io/multikueue";
  EXPECT_TRUE(testing::ValidationErrors(job).empty());
  job["spec"]["runPolicy"]["managedBy"] = "kubetrain.dev/operator";
  EXPECT_TRUE(testing::ValidationErrors(job).empty());
  job["spec"]["runPolicy"]["managedBy"] = "multikueue";
  ASSERT_EQ(testing::ValidationErrors(job).size(), 1u);
  EXPECT_NE(testing::ValidationErrors(job)[0].find("spec.runPolicy.managedBy"), std::string::npos);
  job["spec"]["runPolicy"]["managedBy"] = "example.com/" + std::string(60, 'x');
  EXPECT_EQ(testing::ValidationErrors(job).size(), 1u);
}

TEST(Validate, LongestNameThatFitsIsAccepted) {
  // "-evaluator-0" is 12 characters: 51 + 12 = 63.
  std::string name(51, 'a');
  EXPECT_TRUE(testing::ValidationErrors(testing::MinimalJob(1, 1, false, true, name)).empty());
  EXPECT_EQ(testing::ValidationErrors(testing::MinimalJob(1, 1, false, true, name + "a")).size(),
            1u);
}

TEST(Validate, ReplicasAreCappedLikeTheCrd) {
  json doc = testing::MinimalJob(1, 1);
  doc["spec"]["replicaSpecs"]["Worker"]["replicas"] = 2000000000;
  EXPECT_EQ(testing::ValidationErrors(doc),
            (std::vector<std::string>{
                "spec.replicaSpecs.Worker.replicas: must be <= 1000, got 2000000000"}));
}

TEST(Validate, TfConfigThatNoProcessCouldReceiveIsRefused) {
  // 1000 workers under a 52-character name: every pod's TF_CONFIG would pass the kernel's
  // 128 KiB limit on one environment string, so no task could even start.
  std::string name(52, 'a');
  json doc = testing::MinimalJob(2, 1000, /*chief=*/true, false, name, "default");
  EXPECT_EQ(
      testing::ValidationErrors(doc),
      (std::vector<std::string>{"spec.replicaSpecs: TF_CONFIG would be 136,361 bytes (1003 tasks x "
                                "~132 bytes per address) > 122,880, above what a process "
                                "environment can carry; lower replicas or shorten metadata.name "
                                "and metadata.namespace"}));
}

TEST(Validate, TfConfigBoundIsExact) {
  // The estimate must equal what render produces, so the limit means what it says.
  for (int workers : {1, 9, 10, 100, 850}) {
    json doc = testing::MinimalJob(3, workers, true, true, std::string(40, 'b'), "team-a");
    FieldErrors errors;
    TrainingJob job = DecodeAndValidate(doc, &errors);
    ClusterDnsAddresses addresses;
    size_t largest = 0;
    for (const Task& t : Tasks(job, addresses)) {
      largest =
          std::max(largest, ToJsonString(TfConfigFor(job, addresses, t.type, t.index)).size());
    }
    EXPECT_EQ(LargestTfConfigSize(job), largest) << workers << " workers";
    EXPECT_EQ(!errors.empty(), largest > kMaxTfConfigSize) << workers << " workers";
  }
}

json ElasticJob(int workers, int min, int max) {
  json doc = testing::MinimalJob(1, workers);
  doc["spec"]["elastic"] = {{"minReplicas", min}, {"maxReplicas", max}};
  return doc;
}

TEST(Validate, ElasticJobWithinItsBoundsIsValid) {
  EXPECT_TRUE(testing::ValidationErrors(ElasticJob(2, 1, 4)).empty());
  EXPECT_TRUE(testing::ValidationErrors(ElasticJob(4, 4, 4)).empty());
  json chief = ElasticJob(1, 1, 3);
  chief["spec"]["replicaSpecs"]["Chief"] = chief["spec"]["replicaSpecs"]["Worker"];
  chief["spec"]["backupWorkers"] = 1;  // the Chief and one Worker at the least
  EXPECT_TRUE(testing::ValidationErrors(chief).empty());
}

// `kubectl scale` beyond a bound: `kubetrain validate` calls it an error; the operator keeps the
// job at the nearest bound and reports it apart from the errors.
TEST(Validate, TheOperatorKeepsWorkersOutOfBoundsAtTheNearestBound) {
  FieldErrors errors;
  FieldErrors clamped;
  TrainingJob job = DecodeAndValidate(ElasticJob(9, 2, 4), &errors, &clamped);
  EXPECT_TRUE(errors.empty()) << errors.front().ToString();
  EXPECT_EQ(job.spec.replica_specs.at(ReplicaType::kWorker).replicas, 4);
  EXPECT_EQ(clamped, (FieldErrors{{"spec.replicaSpecs.Worker.replicas",
                                   "must be between spec.elastic.minReplicas (2) and "
                                   "spec.elastic.maxReplicas (4), got 9; kept at 4 until it is "
                                   "set within the bounds"}}));
  clamped.clear();
  job = DecodeAndValidate(ElasticJob(1, 2, 4), &errors, &clamped);
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(job.spec.replica_specs.at(ReplicaType::kWorker).replicas, 2);
  ASSERT_EQ(clamped.size(), 1u);
  // Within the bounds, or not elastic: nothing moves.
  clamped.clear();
  job = DecodeAndValidate(ElasticJob(3, 2, 4), &errors, &clamped);
  EXPECT_TRUE(clamped.empty());
  EXPECT_EQ(job.spec.replica_specs.at(ReplicaType::kWorker).replicas, 3);
  // Bounds that are themselves invalid are errors, and nothing is clamped to them.
  job = DecodeAndValidate(ElasticJob(3, 4, 2), &errors, &clamped);
  EXPECT_TRUE(clamped.empty());
  EXPECT_EQ(errors.size(), 1u);
}

// An elastic job may grow to maxReplicas Workers: names and TF_CONFIG must fit at that size.
TEST(Validate, ElasticJobsAreSizedAtMaxReplicas) {
  json doc = testing::MinimalJob(2, 1, /*chief=*/true, false, std::string(52, 'a'), "default");
  doc["spec"]["elastic"] = {{"minReplicas", 1}, {"maxReplicas", 1000}};
  std::vector<std::string> messages = testing::ValidationErrors(doc);
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_TRUE(absl::StrContains(messages[0], "spec.elastic.maxReplicas counts")) << messages[0];
  json named = ElasticJob(1, 1, 100);
  named["metadata"]["name"] = std::string(54, 'b');  // + "-worker-0" fits, "-worker-99" not
  EXPECT_EQ(
      testing::ValidationErrors(named),
      (std::vector<std::string>{"metadata.name: too long: pod name \"" + std::string(54, 'b') +
                                "-worker-99\" would be 64 characters, at most 63 are allowed; "
                                "shorten the name to at most 53 characters"}));
}

// A gang must stay schedulable once the job is down to minReplicas Workers.
TEST(Validate, ElasticMinAvailableCountsMinReplicas) {
  json doc = ElasticJob(4, 2, 4);
  doc["spec"]["runPolicy"] = {{"schedulingPolicy", {{"minAvailable", 4}}}};
  EXPECT_EQ(
      testing::ValidationErrors(doc),
      (std::vector<std::string>{"spec.runPolicy.schedulingPolicy.minAvailable: must be <= the "
                                "job's 3 replicas at spec.elastic.minReplicas, got 4"}));
}

TEST(Validate, NotAnObject) {
  EXPECT_EQ(testing::ValidationErrors(json::array()),
            (std::vector<std::string>{"must be an object, got []"}));
}

// Every file in testdata/invalid states, as `# expect: ` lines, the exact messages it yields.
class InvalidManifest : public ::testing::TestWithParam<std::string> {};

TEST_P(InvalidManifest, YieldsExactlyTheExpectedMessages) {
  auto text = ReadFileOrStdin(GetParam());
  ASSERT_TRUE(text.ok()) << text.status();
  std::vector<std::string> expected;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    if (absl::ConsumePrefix(&line, "# expect: ")) expected.emplace_back(line);
  }
  ASSERT_FALSE(expected.empty()) << GetParam() << " has no '# expect: ' line";
  auto docs = ParseYamlDocuments(*text);
  ASSERT_TRUE(docs.ok()) << docs.status();
  ASSERT_EQ(docs->size(), 1u);
  std::vector<std::string> actual = testing::ValidationErrors(docs->front());
  std::sort(expected.begin(), expected.end());
  std::sort(actual.begin(), actual.end());
  EXPECT_EQ(actual, expected);
}

std::vector<std::string> InvalidFiles() {
  std::vector<std::string> files;
  for (const auto& e :
       fs::directory_iterator(testing::SourcePath("operator/api/testdata/invalid"))) {
    files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(InvalidCorpus, HasAtLeastThirtyManifests) { EXPECT_GE(InvalidFiles().size(), 30u); }

INSTANTIATE_TEST_SUITE_P(Corpus, InvalidManifest, ::testing::ValuesIn(InvalidFiles()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = fs::path(info.param).stem().string();
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace kubetrain::api
