// The CRD (deploy/crd) and the C++ validation must agree: a value the API server accepts must be
// accepted by `kubetrain validate` and the operator, and the other way round.
#include <gtest/gtest.h>

#include <map>

#include <set>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "operator/api/decode.h"
#include "operator/api/defaults.h"
#include "operator/api/tests/test_util.h"
#include "operator/api/validation.h"

namespace kubetrain::api {
namespace {

using nlohmann::json;

const json& Crd() {
  static const json crd = testing::LoadYaml("deploy/crd/kubetrain.dev_trainingjobs.yaml");
  return crd;
}

const json& SpecSchema() {
  return Crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
}

// A constraint found in the schema, at a document path like "spec.runPolicy.backoffLimit".
struct Constraint {
  std::string path;
  json node;
};

void Collect(const json& node, const std::string& path, std::vector<Constraint>* out) {
  // Free-form nodes (the pod template) have no constraints of their own; replicaSpecs keeps
  // unknown keys but its known ones are constrained.
  if (node.value("x-kubernetes-preserve-unknown-fields", false) && !node.contains("properties")) {
    return;
  }
  out->push_back({path, node});
  if (!node.contains("properties")) return;
  for (const auto& [key, child] : node["properties"].items()) Collect(child, path + "." + key, out);
}

std::vector<Constraint> Constraints() {
  std::vector<Constraint> out;
  Collect(SpecSchema(), "spec", &out);
  return out;
}

// A job with every replica type, spec.elastic and spec.checkpoint, so every schema path exists.
json FullJob() {
  json job = testing::MinimalJob(2, 2, /*chief=*/true, /*evaluator=*/true);
  job["spec"]["elastic"] = {{"minReplicas", 1}, {"maxReplicas", 2}};
  job["spec"]["checkpoint"] = {
      {"volumeClaimTemplate", {{"spec", {{"resources", {{"requests", {{"storage", "1Gi"}}}}}}}}}};
  return job;
}

void SetAt(json* doc, const std::string& path, const json& value) {
  json* node = doc;
  for (absl::string_view part : absl::StrSplit(path, '.')) node = &(*node)[std::string(part)];
  *node = value;
}

json* At(json* doc, const std::string& path) {
  json* node = doc;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    if (!node->is_object() || !node->contains(std::string(part))) return nullptr;
    node = &(*node)[std::string(part)];
  }
  return node;
}

// True if validating `doc` reports a problem at exactly `path`.
bool RejectsAt(const json& doc, const std::string& path) {
  FieldErrors errors;
  DecodeAndValidate(doc, &errors);
  for (const FieldError& e : errors) {
    if (e.path == path) return true;
  }
  return false;
}

bool Accepts(const json& doc) {
  FieldErrors errors;
  DecodeAndValidate(doc, &errors);
  return errors.empty();
}

std::vector<std::string> Enum(const std::string& path) {
  for (const Constraint& c : Constraints()) {
    if (c.path == path) return c.node.at("enum").get<std::vector<std::string>>();
  }
  ADD_FAILURE() << "no schema node at " << path;
  return {};
}

TEST(CrdAgreement, EnumsMatchTheCppNames) {
  for (const std::string& type : ReplicaTypeNames()) {
    EXPECT_EQ(Enum("spec.replicaSpecs." + type + ".restartPolicy"), RestartPolicyNames()) << type;
  }
  EXPECT_EQ(Enum("spec.runPolicy.cleanPodPolicy"), CleanPodPolicyNames());
  EXPECT_EQ(Enum("spec.runPolicy.restartScope"), RestartScopeNames());
  EXPECT_EQ(Enum("spec.successPolicy"), SuccessPolicyNames());
  EXPECT_EQ(Enum("spec.checkpoint.reclaimPolicy"), ReclaimPolicyNames());
}

TEST(CrdAgreement, ReplicaTypesMatch) {
  std::set<std::string> schema_types;
  for (const auto& [key, _] : SpecSchema()["properties"]["replicaSpecs"]["properties"].items()) {
    schema_types.insert(key);
  }
  EXPECT_EQ(schema_types,
            std::set<std::string>(ReplicaTypeNames().begin(), ReplicaTypeNames().end()));
}

TEST(CrdAgreement, EveryEnumValueIsAcceptedAndOthersRejected) {
  int checked = 0;
  for (const Constraint& c : Constraints()) {
    if (!c.node.contains("enum")) continue;
    for (const json& value : c.node["enum"]) {
      json doc = FullJob();
      SetAt(&doc, c.path, value);
      // AllWorkers is valid here: FullJob has workers.
      EXPECT_TRUE(Accepts(doc)) << c.path << "=" << value;
    }
    json doc = FullJob();
    SetAt(&doc, c.path, "NotAnAllowedValue");
    EXPECT_TRUE(RejectsAt(doc, c.path)) << c.path;
    ++checked;
  }
  // 4 restartPolicy, cleanPodPolicy, restartScope, successPolicy, checkpoint.reclaimPolicy,
  // gradientCompression
  EXPECT_EQ(checked, 9);
}

TEST(CrdAgreement, MinimumsAndMaximumsMatch) {
  int checked = 0;
  for (const Constraint& c : Constraints()) {
    if (c.node.contains("minimum")) {
      int64_t min = c.node["minimum"].get<int64_t>();
      json at_min = FullJob();
      SetAt(&at_min, c.path, min);
      EXPECT_FALSE(RejectsAt(at_min, c.path)) << c.path << "=" << min;
      json below = FullJob();
      SetAt(&below, c.path, min - 1);
      EXPECT_TRUE(RejectsAt(below, c.path)) << c.path << "=" << min - 1;
      ++checked;
    }
    if (c.node.contains("maximum")) {
      int64_t max = c.node["maximum"].get<int64_t>();
      json above = FullJob();
      SetAt(&above, c.path, max + 1);
      EXPECT_TRUE(RejectsAt(above, c.path)) << c.path << "=" << max + 1;
      ++checked;
    }
  }
  // 4 replicas minimums, 4 replicas maximums, ttl, deadline, backoffLimit, minAvailable,
  // backupWorkers, elastic minReplicas and maxReplicas (minimum and maximum each).
  EXPECT_EQ(checked, 17);
}

TEST(CrdAgreement, EveryReplicaCountIsCapped) {
  std::map<std::string, int64_t> capped;
  for (const Constraint& c : Constraints()) {
    if (c.node.contains("maximum")) capped[c.path] = c.node["maximum"].get<int64_t>();
  }
  EXPECT_EQ(capped,
            (std::map<std::string, int64_t>{{"spec.elastic.maxReplicas", kMaxReplicas},
                                            {"spec.elastic.minReplicas", kMaxReplicas},
                                            {"spec.replicaSpecs.Chief.replicas", 1},
                                            {"spec.replicaSpecs.Evaluator.replicas", 1},
                                            {"spec.replicaSpecs.PS.replicas", kMaxReplicas},
                                            {"spec.replicaSpecs.Worker.replicas", kMaxReplicas}}));
}

TEST(CrdAgreement, SchemaDefaultsEqualCppDefaults) {
  int checked = 0;
  for (const Constraint& c : Constraints()) {
    if (!c.node.contains("default") || c.node["default"].is_object()) continue;
    json doc = FullJob();
    json* parent = At(&doc, c.path.substr(0, c.path.rfind('.')));
    if (parent != nullptr) parent->erase(c.path.substr(c.path.rfind('.') + 1));
    FieldErrors errors;
    TrainingJob job = Decode(doc, &errors);
    ASSERT_TRUE(errors.empty());
    SetDefaults(&job);
    json out = ToJson(job);
    json* value = At(&out, c.path);
    ASSERT_NE(value, nullptr) << c.path << " is not set by SetDefaults";
    EXPECT_EQ(*value, c.node["default"]) << c.path;
    ++checked;
  }
  // 4 replicas, cleanPodPolicy, backoffLimit, restartScope, suspend, success,
  // checkpoint.mountPath
  EXPECT_EQ(checked, 10);
}

TEST(CrdAgreement, RequiredFieldsAreRequired) {
  for (const Constraint& c : Constraints()) {
    if (!c.node.contains("required")) continue;
    for (const std::string& field : c.node["required"].get<std::vector<std::string>>()) {
      json doc = FullJob();
      json* parent = At(&doc, c.path);
      ASSERT_NE(parent, nullptr) << c.path;
      parent->erase(field);
      EXPECT_TRUE(RejectsAt(doc, c.path + "." + field)) << c.path << "." << field;
    }
  }
}

// Unknown fields are pruned everywhere but in pod templates and the checkpoint claim's template
// (core/v1, validated by the API server when the pod or claim is created) and in replicaSpecs,
// where a misspelt replica type must reach the operator's validation rather than vanish.
TEST(CrdAgreement, PreserveUnknownFieldsOnlyOnPodTemplatesAndReplicaSpecs) {
  std::vector<std::string> preserved;
  std::function<void(const json&, const std::string&)> walk = [&](const json& n,
                                                                  const std::string& path) {
    if (n.value("x-kubernetes-preserve-unknown-fields", false)) preserved.push_back(path);
    if (n.contains("properties")) {
      for (const auto& [k, v] : n["properties"].items()) walk(v, path + "." + k);
    }
    if (n.contains("items")) walk(n["items"], path + "[]");
  };
  walk(Crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"], "");
  EXPECT_EQ(preserved,
            (std::vector<std::string>{
                ".spec.checkpoint.volumeClaimTemplate", ".spec.replicaSpecs",
                ".spec.replicaSpecs.Chief.template", ".spec.replicaSpecs.Evaluator.template",
                ".spec.replicaSpecs.PS.template", ".spec.replicaSpecs.Worker.template"}));
}

TEST(CrdAgreement, NamesSubresourcesAndColumns) {
  const json& spec = Crd()["spec"];
  EXPECT_EQ(Crd()["metadata"]["name"], std::string(kPlural) + "." + kGroup);
  EXPECT_EQ(spec["group"], kGroup);
  EXPECT_EQ(spec["names"]["kind"], kKind);
  EXPECT_EQ(spec["names"]["plural"], kPlural);
  EXPECT_EQ(spec["names"]["shortNames"], json::array({"tj"}));
  const json& v = spec["versions"][0];
  EXPECT_EQ(v["name"], kVersion);
  EXPECT_TRUE(v["subresources"].contains("status"));
  EXPECT_EQ(v["subresources"]["scale"]["specReplicasPath"], ".spec.replicaSpecs.Worker.replicas");
  std::vector<std::string> columns;
  for (const json& c : v["additionalPrinterColumns"]) columns.push_back(c["name"]);
  EXPECT_EQ(columns, (std::vector<std::string>{"State", "Step", "Accuracy", "Workers", "Age"}));
}

}  // namespace
}  // namespace kubetrain::api
