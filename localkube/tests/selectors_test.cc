#include "localkube/selectors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/testing/status_matchers.h"

namespace kubetrain::localkube {
namespace {

using ::kubetrain::testing::IsOk;
using nlohmann::json;

bool LabelsMatch(const std::string& selector, const json& labels) {
  auto parsed = LabelSelector::Parse(selector);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() && parsed->Matches(labels);
}

TEST(LabelSelector, EqualityForms) {
  json labels = {{"app", "web"}, {"tier", "front"}};
  EXPECT_TRUE(LabelsMatch("app=web", labels));
  EXPECT_TRUE(LabelsMatch("app==web,tier=front", labels));
  EXPECT_FALSE(LabelsMatch("app!=web", labels));
  EXPECT_TRUE(LabelsMatch("app!=db", labels));
  EXPECT_TRUE(LabelsMatch("missing!=x", labels));
}

TEST(LabelSelector, SetAndExistence) {
  json labels = {{"app", "web"}};
  EXPECT_TRUE(LabelsMatch("app in (db, web)", labels));
  EXPECT_FALSE(LabelsMatch("app notin (web)", labels));
  EXPECT_TRUE(LabelsMatch("tier notin (a)", labels));
  EXPECT_TRUE(LabelsMatch("app", labels));
  EXPECT_FALSE(LabelsMatch("!app", labels));
  EXPECT_TRUE(LabelsMatch("!tier,app in (web),app", labels));
  EXPECT_TRUE(LabelsMatch("", labels));
  EXPECT_FALSE(LabelsMatch("app", json()));
}

TEST(LabelSelector, RejectsGarbage) {
  EXPECT_FALSE(LabelSelector::Parse("app in web").ok());
  EXPECT_FALSE(LabelSelector::Parse("a,,b").ok());
}

TEST(FieldSelector, DottedPathsAndNegation) {
  json pod = {{"metadata", {{"name", "p"}, {"namespace", "ns"}}},
              {"status", {{"phase", "Running"}}}};
  auto sel = FieldSelector::Parse("metadata.name=p,status.phase!=Failed");
  ASSERT_THAT(sel, IsOk());
  EXPECT_TRUE(sel->Matches(pod));
  auto other = FieldSelector::Parse("metadata.namespace==default");
  ASSERT_THAT(other, IsOk());
  EXPECT_FALSE(other->Matches(pod));
  EXPECT_FALSE(FieldSelector::Parse("metadata.name").ok());
}

}  // namespace
}  // namespace kubetrain::localkube
