#include "localkube/schema.h"

#include <gtest/gtest.h>

namespace kubetrain::localkube {
namespace {

using nlohmann::json;

json Schema() {
  return json::parse(R"({"type":"object","required":["spec"],"properties":{
    "spec":{"type":"object","required":["image"],"properties":{
      "replicas":{"type":"integer","minimum":1,"maximum":10,"default":1},
      "image":{"type":"string"},
      "mode":{"type":"string","enum":["A","B"]},
      "run":{"type":"object","default":{},"properties":{"policy":{"type":"string","default":"Pod"}}},
      "extra":{"type":"object","x-kubernetes-preserve-unknown-fields":true},
      "list":{"type":"array","items":{"type":"object","properties":{"n":{"type":"integer"}}}}}},
    "status":{"type":"object","properties":{"phase":{"type":"string"}}}}})");
}

json Object(json spec) {
  return {{"apiVersion", "x.dev/v1"}, {"kind", "X"}, {"metadata", {{"name", "a"}}}, {"spec", spec}};
}

TEST(Schema, DefaultsNestedObjects) {
  json o = Object({{"image", "i"}});
  SchemaOutcome out = ApplySchema(Schema(), &o);
  EXPECT_TRUE(out.causes.empty());
  EXPECT_EQ(o["spec"]["replicas"], 1);
  EXPECT_EQ(o["spec"]["run"]["policy"], "Pod");
  EXPECT_EQ(o["metadata"]["name"], "a");
}

TEST(Schema, PrunesUnknownFieldsButNotPreserved) {
  json o = Object({{"image", "i"},
                   {"bogus", 1},
                   {"extra", {{"anything", true}}},
                   {"list", {{{"n", 1}, {"junk", 2}}}}});
  o["topLevel"] = 1;
  SchemaOutcome out = ApplySchema(Schema(), &o);
  EXPECT_EQ(out.unknown_fields,
            (std::vector<std::string>{"spec.bogus", "spec.list[0].junk", "topLevel"}));
  EXPECT_FALSE(o["spec"].contains("bogus"));
  EXPECT_TRUE(o["spec"]["extra"]["anything"]);
  EXPECT_FALSE(o.contains("topLevel"));
}

TEST(Schema, ReportsFieldPaths) {
  json o = Object({{"replicas", 15}, {"mode", "C"}, {"list", {{{"n", "x"}}}}});
  SchemaOutcome out = ApplySchema(Schema(), &o);
  std::vector<std::string> fields;
  for (const Cause& c : out.causes) fields.push_back(c.field + " " + c.reason);
  EXPECT_EQ(fields, (std::vector<std::string>{
                        "spec.image FieldValueRequired", "spec.list[0].n FieldValueTypeInvalid",
                        "spec.mode FieldValueNotSupported", "spec.replicas FieldValueInvalid"}));
  EXPECT_EQ(out.causes.back().message,
            "Invalid value: 15: spec.replicas in body should be less than or equal to 10");
}

TEST(Schema, RequiredTopLevel) {
  json o = {{"apiVersion", "x.dev/v1"}, {"kind", "X"}, {"metadata", {{"name", "a"}}}};
  SchemaOutcome out = ApplySchema(Schema(), &o);
  ASSERT_EQ(out.causes.size(), 1u);
  EXPECT_EQ(out.causes[0].field, "spec");
}

}  // namespace
}  // namespace kubetrain::localkube
