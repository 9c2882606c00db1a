#include "localkube/table.h"

#include <gtest/gtest.h>

#include "absl/time/clock.h"

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

// kubectl get events prints LAST SEEN, TYPE, REASON, OBJECT, MESSAGE (and with -o wide
// SUBOBJECT, SOURCE, FIRST SEEN, COUNT, NAME): the scheduler's FailedScheduling reads as on a
// cluster, and an events.k8s.io/v1 Event (series, no count) as well.
TEST(Table, EventsAsKubectlPrintsThem) {
  ResourceType type;
  type.kind = "Event";
  const std::string now = absl::FormatTime(absl::RFC3339_full, absl::Now(), absl::UTCTimeZone());
  json core = {{"metadata", {{"name", "b-worker-0.1"}, {"namespace", "default"}}},
               {"involvedObject", {{"kind", "Pod"}, {"name", "b-worker-0"}}},
               {"reason", "FailedScheduling"},
               {"message", "0/3 nodes are available: 3 Insufficient cpu. \n"},
               {"type", "Warning"},
               {"source", {{"component", "default-scheduler"}}},
               {"firstTimestamp", "2020-01-01T00:00:00Z"},
               {"lastTimestamp", now},
               {"count", 4}};
  json series = {{"metadata", {{"name", "n.2"}}},
                 {"regarding", {{"kind", "Node"}, {"name", "node-2"}}},
                 {"note", "Node node-2 status is now: NodeNotReady"},
                 {"type", "Normal"},
                 {"reason", "NodeNotReady"},
                 {"reportingController", "node-controller"},
                 {"eventTime", now},
                 {"series", {{"count", 3}, {"lastObservedTime", now}}}};
  json hostile = {{"metadata", {{"name", "h"}}}, {"involvedObject", "pod"}, {"type", 7}};
  json table = ToTable(type, {core, series, hostile}, "1", "None");
  std::vector<std::string> names, wide;
  for (const json& c : table["columnDefinitions"]) {
    (c["priority"] == 0 ? names : wide).push_back(c["name"]);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"Last Seen", "Type", "Reason", "Object", "Message"}));
  EXPECT_EQ(wide, (std::vector<std::string>{"Subobject", "Source", "First Seen", "Count", "Name"}));
  json cells = table["rows"][0]["cells"];
  ASSERT_EQ(cells.size(), 10u);
  EXPECT_EQ(cells[0], "0s");
  EXPECT_EQ(cells[1], "Warning");
  EXPECT_EQ(cells[2], "FailedScheduling");
  EXPECT_EQ(cells[3], "pod/b-worker-0");
  EXPECT_EQ(cells[5], "default-scheduler");
  EXPECT_EQ(cells[6], "0/3 nodes are available: 3 Insufficient cpu.");
  EXPECT_EQ(cells[8], 4);
  EXPECT_EQ(cells[9], "b-worker-0.1");
  cells = table["rows"][1]["cells"];
  EXPECT_EQ(cells[3], "node/node-2");
  EXPECT_EQ(cells[5], "node-controller");
  EXPECT_EQ(cells[6], "Node node-2 status is now: NodeNotReady");
  EXPECT_EQ(cells[7], "0s");
  EXPECT_EQ(cells[8], 3);
  cells = table["rows"][2]["cells"];  // malformed fields print empty, never throw
  EXPECT_EQ(cells[0], "<unknown>");
  EXPECT_EQ(cells[1], "");
  EXPECT_EQ(cells[3], "");
  EXPECT_EQ(cells[8], 1);
}

}  // namespace
}  // namespace kubetrain::localkube
