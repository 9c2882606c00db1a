#include "localkube/table.h"

#include <gtest/gtest.h>

namespace kubetrain::localkube {
namespace {

using nlohmann::json;

TEST(JsonPath, FieldsIndexesAndSlices) {
  json o = json::parse(R"({"status":{"conditions":[{"type":"Created"},{"type":"Running"}]}})");
  EXPECT_EQ(EvalJsonPath(o, ".status.conditions[-1:].type"), std::vector<json>{"Running"});
  EXPECT_EQ(EvalJsonPath(o, ".status.conditions[0].type"), std::vector<json>{"Created"});
  EXPECT_EQ(EvalJsonPath(o, "{.status.conditions[*].type}").size(), 2u);
  EXPECT_TRUE(EvalJsonPath(o, ".status.missing").empty());
}

TEST(HumanDuration, KubectlStyle) {
  EXPECT_EQ(HumanDuration(absl::Seconds(45)), "45s");
  EXPECT_EQ(HumanDuration(absl::Seconds(185)), "3m5s");
  EXPECT_EQ(HumanDuration(absl::Minutes(90)), "90m");
  EXPECT_EQ(HumanDuration(absl::Hours(5) + absl::Minutes(10)), "5h10m");
  EXPECT_EQ(HumanDuration(absl::Hours(24 * 3 + 4)), "3d4h");
}

TEST(Table, PrinterColumnsWithPriorityAndMissingCells) {
  ResourceType type;
  type.kind = "TrainingJob";
  type.custom = true;
  type.columns = {{"State", "string", "", "", ".status.conditions[-1:].type", 0},
                  {"Workers", "integer", "", "", ".spec.workers", 1}};
  json job = json::parse(R"({"metadata":{"name":"j","creationTimestamp":"2020-01-01T00:00:00Z"},
      "spec":{"workers":4},"status":{"conditions":[{"type":"Created"},{"type":"Succeeded"}]}})");
  json bare = json::parse(R"({"metadata":{"name":"k"}})");
  json table = ToTable(type, {job, bare}, "7", "");
  EXPECT_EQ(table["kind"], "Table");
  ASSERT_EQ(table["columnDefinitions"].size(), 3u);
  EXPECT_EQ(table["columnDefinitions"][0]["format"], "name");
  EXPECT_EQ(table["columnDefinitions"][2]["priority"], 1);
  EXPECT_EQ(table["rows"][0]["cells"], json::parse(R"(["j","Succeeded",4])"));
  EXPECT_EQ(table["rows"][1]["cells"], json::parse(R"(["k",null,null])"));
  EXPECT_EQ(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
}

TEST(Table, CustomResourceWithoutColumnsGetsAge) {
  ResourceType type;
  type.custom = true;
  json table = ToTable(type, {}, "1", "None");
  ASSERT_EQ(table["columnDefinitions"].size(), 2u);
  EXPECT_EQ(table["columnDefinitions"][1]["name"], "Age");
  EXPECT_TRUE(table["rows"].empty());
}

}  // namespace
}  // namespace kubetrain::localkube
