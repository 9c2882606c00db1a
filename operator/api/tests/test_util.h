// Shared helpers for the api tests: the example job as JSON, file reading.
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "operator/api/validation.h"
#include "operator/api/yaml.h"

namespace kubetrain::api::testing {

inline std::string SourcePath(const std::string& relative) {
  return std::string(KUBETRAIN_SOURCE_DIR) + "/" + relative;
}

inline nlohmann::json LoadYaml(const std::string& relative) {
  auto text = ReadFileOrStdin(SourcePath(relative));
  EXPECT_TRUE(text.ok()) << text.status();
  auto docs = ParseYamlDocuments(*text);
  EXPECT_TRUE(docs.ok()) << docs.status();
  EXPECT_EQ(docs->size(), 1u);
  return docs->front();
}

// A minimal valid job: `ps` parameter servers, `workers` workers, optional Chief/Evaluator.
inline nlohmann::json MinimalJob(int ps, int workers, bool chief = false, bool evaluator = false,
                                 const std::string& name = "mnist",
                                 const std::string& ns = "kubeflow") {
  nlohmann::json container = {{"name", "kubetrain"}, {"image", "kubetrain/worker:0.1.0"}};
  nlohmann::json tmpl = {{"spec", {{"containers", nlohmann::json::array({container})}}}};
  nlohmann::json specs = nlohmann::json::object();
  if (chief) specs["Chief"] = {{"replicas", 1}, {"template", tmpl}};
  if (ps > 0) specs["PS"] = {{"replicas", ps}, {"template", tmpl}};
  if (workers > 0) specs["Worker"] = {{"replicas", workers}, {"template", tmpl}};
  if (evaluator) specs["Evaluator"] = {{"replicas", 1}, {"template", tmpl}};
  return {{"apiVersion", "kubetrain.dev/v1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", name}, {"namespace", ns}}},
          {"spec", {{"replicaSpecs", specs}}}};
}

// The errors DecodeAndValidate finds in `doc`, as FieldError::ToString writes them.
inline std::vector<std::string> ValidationErrors(const nlohmann::json& doc) {
  FieldErrors errors;
  DecodeAndValidate(doc, &errors);
  std::vector<std::string> out;
  for (const FieldError& e : errors) out.push_back(e.ToString());
  return out;
}

// `doc` decoded, with a test failure naming the first error where it does not validate.
inline TrainingJob ValidJob(const nlohmann::json& doc) {
  FieldErrors errors;
  TrainingJob job = DecodeAndValidate(doc, &errors);
  EXPECT_TRUE(errors.empty()) << errors.front().ToString();
  return job;
}

}  // namespace kubetrain::api::testing
