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

std::vector<std::string> Messages(const json& doc) {
  FieldErrors errors;
  DecodeAndValidate(doc, &errors);
  std::vector<std::string> out;
  for (const FieldError& e : errors) out.push_back(e.ToString());
  return out;
}

TEST(Validate, ExamplesAreValid) {
  for (const auto& entry : fs::directory_iterator(testing::SourcePath("deploy/examples"))) {
    if (entry.path().extension() != ".yaml") continue;
    auto text = ReadFileOrStdin(entry.path());
    ASSERT_THAT(text, IsOk());
    auto docs = ParseYamlDocuments(*text);
    ASSERT_TRUE(docs.ok()) << entry.path() << ": " << docs.status();
    for (const json& doc : *docs) {
      EXPECT_EQ(Messages(doc), std::vector<std::string>{}) << entry.path();
    }
  }
}

TEST(Validate, MinimalJobsOfEveryShapeAreValid) {
  EXPECT_TRUE(Messages(testing::MinimalJob(1, 1)).empty());
  EXPECT_TRUE(Messages(testing::MinimalJob(0, 4)).empty());  // all-reduce: workers only
  EXPECT_TRUE(Messages(testing::MinimalJob(3, 0, /*chief=*/true)).empty());
  EXPECT_TRUE(Messages(testing::MinimalJob(2, 8, true, true)).empty());
}

TEST(Validate, LongestNameThatFitsIsAccepted) {
  // "-evaluator-0" is 12 characters: 51 + 12 = 63.
  std::string name(51, 'a');
  EXPECT_TRUE(Messages(testing::MinimalJob(1, 1, false, true, name)).empty());
  EXPECT_EQ(Messages(testing::MinimalJob(1, 1, false, true, name + "a")).size(), 1u);
}

TEST(Validate, ReplicasAreCappedLikeTheCrd) {
  json doc = testing::MinimalJob(1, 1);
  doc["spec"]["replicaSpecs"]["Worker"]["replicas"] = 2000000000;
  EXPECT_EQ(Messages(doc),
            (std::vector<std::string>{
                "spec.replicaSpecs.Worker.replicas: must be <= 1000, got 2000000000"}));
}

TEST(Validate, TfConfigThatNoProcessCouldReceiveIsRefused) {
  // 1000 workers under a 52-character name: every pod's TF_CONFIG would pass the kernel's
  // 128 KiB limit on one environment string, so no task could even start.
  std::string name(52, 'a');
  json doc = testing::MinimalJob(2, 1000, /*chief=*/true, false, name, "default");
  EXPECT_EQ(Messages(doc), (std::vector<std::string>{
                               "spec.replicaSpecs: TF_CONFIG would be 136,361 bytes (1003 tasks x "
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

TEST(Validate, NotAnObject) {
  EXPECT_EQ(Messages(json::array()), (std::vector<std::string>{"must be an object, got []"}));
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
  std::vector<std::string> actual = Messages(docs->front());
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
