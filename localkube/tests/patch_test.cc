#include "localkube/patch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/testing/status_matchers.h"

namespace kubetrain::localkube {
namespace {

using ::kubetrain::testing::IsOk;
using nlohmann::json;

json Deployment() {
  return json::parse(R"({"spec":{"replicas":1,"template":{"spec":{"containers":[
    {"name":"app","image":"nginx:1.27","ports":[{"containerPort":80}],"env":[{"name":"A","value":"1"}]},
    {"name":"sidecar","image":"busybox"}]}}},"metadata":{"finalizers":["a"]}})");
}

TEST(MergePatch, NullDeletesAndListsReplace) {
  auto out = ApplyMergePatch(json::parse(R"({"a":1,"b":{"c":2},"l":[1,2]})"),
                             json::parse(R"({"a":null,"b":{"d":3},"l":[3]})"));
  ASSERT_THAT(out, IsOk());
  EXPECT_EQ(*out, json::parse(R"({"b":{"c":2,"d":3},"l":[3]})"));
}

TEST(JsonPatch, OperationsAndFailedTest) {
  json doc = {{"a", {{"b", 1}}}};
  auto out = ApplyJsonPatch(doc, json::parse(R"([{"op":"replace","path":"/a/b","value":2},
                                                  {"op":"add","path":"/c","value":[1]}])"));
  ASSERT_THAT(out, IsOk());
  EXPECT_EQ((*out)["a"]["b"], 2);
  EXPECT_FALSE(ApplyJsonPatch(doc, json::parse(R"([{"op":"test","path":"/a/b","value":9}])")).ok());
}

TEST(StrategicMergePatch, ContainersMergeByName) {
  auto out = ApplyStrategicMergePatch(Deployment(), json::parse(R"({"spec":{"template":{"spec":{
        "$setElementOrder/containers":[{"name":"app"},{"name":"sidecar"}],
        "containers":[{"name":"app","image":"nginx:1.28"}]}}}})"));
  ASSERT_TRUE(out.ok()) << out.status();
  const json& containers = (*out)["spec"]["template"]["spec"]["containers"];
  ASSERT_EQ(containers.size(), 2u);
  EXPECT_EQ(containers[0]["image"], "nginx:1.28");
  EXPECT_EQ(containers[0]["ports"][0]["containerPort"], 80);
  EXPECT_EQ(containers[1]["name"], "sidecar");
  EXPECT_FALSE((*out)["spec"]["template"]["spec"].contains("$setElementOrder/containers"));
}

TEST(StrategicMergePatch, EnvAndPortsMergeByKey) {
  auto out = ApplyStrategicMergePatch(Deployment(), json::parse(R"({"spec":{"template":{"spec":{
      "containers":[{"name":"app","env":[{"name":"B","value":"2"}],
                     "ports":[{"containerPort":81}]}]}}}})"));
  ASSERT_THAT(out, IsOk());
  const json& app = (*out)["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(app["env"].size(), 2u);
  EXPECT_EQ(app["ports"].size(), 2u);
}

TEST(StrategicMergePatch, DeleteAndReplaceDirectives) {
  auto out = ApplyStrategicMergePatch(Deployment(), json::parse(R"({"spec":{"template":{"spec":{
      "containers":[{"name":"sidecar","$patch":"delete"}]}}}})"));
  ASSERT_THAT(out, IsOk());
  EXPECT_EQ((*out)["spec"]["template"]["spec"]["containers"].size(), 1u);
  auto replaced = ApplyStrategicMergePatch(
      Deployment(), json::parse(R"({"spec":{"$patch":"replace","replicas":5}})"));
  ASSERT_THAT(replaced, IsOk());
  EXPECT_EQ((*replaced)["spec"], json::parse(R"({"replicas":5})"));
}

TEST(StrategicMergePatch, FinalizersMergeAsSet) {
  auto out = ApplyStrategicMergePatch(Deployment(),
                                      json::parse(R"({"metadata":{"finalizers":["b","a"]}})"));
  ASSERT_THAT(out, IsOk());
  EXPECT_EQ((*out)["metadata"]["finalizers"], json::parse(R"(["a","b"])"));
  auto removed = ApplyStrategicMergePatch(
      *out, json::parse(R"({"metadata":{"$deleteFromPrimitiveList/finalizers":["a"]}})"));
  ASSERT_THAT(removed, IsOk());
  EXPECT_EQ((*removed)["metadata"]["finalizers"], json::parse(R"(["b"])"));
}

TEST(MergeApplied, KeepsUnmanagedFieldsAndMergesKeyedLists) {
  json live = Deployment();
  json applied = json::parse(R"({"spec":{"replicas":3,"template":{"spec":{"containers":[
      {"name":"app","image":"nginx:1.29"}]}}}})");
  json out = MergeApplied(live, applied);
  EXPECT_EQ(out["spec"]["replicas"], 3);
  EXPECT_EQ(out["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.29");
  EXPECT_EQ(out["spec"]["template"]["spec"]["containers"].size(), 2u);
}

}  // namespace
}  // namespace kubetrain::localkube
