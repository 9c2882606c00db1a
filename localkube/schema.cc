#include "localkube/schema.h"

#include <cmath>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

bool Preserves(const json& schema) {
  return schema.value("x-kubernetes-preserve-unknown-fields", false);
}

// The value as the apiserver prints it inside "Invalid value: ...".
std::string Shown(const json& value) { return value.dump(); }

bool TypeMatches(const json& schema, const json& value) {
  if (schema.value("x-kubernetes-int-or-string", false)) {
    return value.is_number_integer() || value.is_string();
  }
  std::string type = schema.value("type", "");
  if (type.empty()) return true;
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "string") return value.is_string();
  if (type == "boolean") return value.is_boolean();
  if (type == "number") return value.is_number();
  if (type == "integer") {
    if (value.is_number_integer()) return true;
    return value.is_number_float() && std::floor(value.get<double>()) == value.get<double>();
  }
  return true;
}

void Add(std::vector<Cause>* causes, const char* reason, const std::string& path,
         const std::string& message) {
  causes->push_back({reason, message, path});
}

void ValidateNumber(const json& schema, const json& value, const std::string& path,
                    std::vector<Cause>* causes) {
  double v = value.get<double>();
  if (schema.contains("minimum")) {
    double min = schema["minimum"].get<double>();
    bool exclusive = schema.value("exclusiveMinimum", false);
    if (exclusive ? v <= min : v < min) {
      Add(causes, "FieldValueInvalid", path,
          absl::StrCat("Invalid value: ", Shown(value), ": ", path, " in body should be greater ",
                       exclusive ? "than " : "than or equal to ", schema["minimum"].dump()));
    }
  }
  if (schema.contains("maximum")) {
    double max = schema["maximum"].get<double>();
    bool exclusive = schema.value("exclusiveMaximum", false);
    if (exclusive ? v >= max : v > max) {
      Add(causes, "FieldValueInvalid", path,
          absl::StrCat("Invalid value: ", Shown(value), ": ", path, " in body should be less ",
                       exclusive ? "than " : "than or equal to ", schema["maximum"].dump()));
    }
  }
}

void ValidateString(const json& schema, const json& value, const std::string& path,
                    std::vector<Cause>* causes) {
  const std::string& s = value.get_ref<const std::string&>();
  if (schema.contains("minLength") && s.size() < schema["minLength"].get<size_t>()) {
    Add(causes, "FieldValueInvalid", path,
        absl::StrCat("Invalid value: ", Shown(value), ": ", path, " in body should be at least ",
                     schema["minLength"].dump(), " chars long"));
  }
  if (schema.contains("maxLength") && s.size() > schema["maxLength"].get<size_t>()) {
    Add(causes, "TooLong", path,
        absl::StrCat("Too long: may not be longer than ", schema["maxLength"].dump()));
  }
  if (schema.contains("pattern")) {
    try {
      if (!std::regex_search(s, std::regex(schema["pattern"].get<std::string>()))) {
        Add(causes, "FieldValueInvalid", path,
            absl::StrCat("Invalid value: ", Shown(value), ": ", path, " in body should match '",
                         schema["pattern"].get<std::string>(), "'"));
      }
    } catch (const std::regex_error&) {
      // A pattern std::regex cannot compile is not the object's fault; skip it.
    }
  }
}

void ValidateSizes(const json& schema, const json& value, const std::string& path,
                   std::vector<Cause>* causes) {
  const char* min_key = value.is_array() ? "minItems" : "minProperties";
  const char* max_key = value.is_array() ? "maxItems" : "maxProperties";
  const char* noun = value.is_array() ? "items" : "properties";
  if (schema.contains(min_key) && value.size() < schema[min_key].get<size_t>()) {
    Add(causes, "FieldValueInvalid", path,
        absl::StrCat("Invalid value: ", value.size(), ": ", path, " in body should have at least ",
                     schema[min_key].dump(), " ", noun));
  }
  if (schema.contains(max_key) && value.size() > schema[max_key].get<size_t>()) {
    Add(causes, "TooMany", path,
        absl::StrCat("Too many: ", value.size(), ": must have at most ", schema[max_key].dump(),
                     " ", noun));
  }
}

}  // namespace

void Prune(const json& schema, json* value, const std::string& path,
           std::vector<std::string>* pruned) {
  if (!schema.is_object()) return;
  if (value->is_array() && schema.contains("items")) {
    for (size_t i = 0; i < value->size(); ++i) {
      Prune(schema["items"], &(*value)[i], absl::StrCat(path, "[", i, "]"), pruned);
    }
    return;
  }
  if (!value->is_object()) return;
  const json props = schema.value("properties", json::object());
  const json additional = schema.value("additionalProperties", json());
  bool preserve = Preserves(schema);
  for (auto it = value->begin(); it != value->end();) {
    std::string child = Join(path, it.key());
    if (props.contains(it.key())) {
      Prune(props[it.key()], &it.value(), child, pruned);
    } else if (additional.is_object()) {
      Prune(additional, &it.value(), child, pruned);
    } else if (!preserve && !(additional.is_boolean() && additional.get<bool>())) {
      pruned->push_back(child);
      it = value->erase(it);
      continue;
    }
    ++it;
  }
}

void ApplyDefaults(const json& schema, json* value) {
  if (!schema.is_object()) return;
  if (value->is_array() && schema.contains("items")) {
    for (auto& item : *value) ApplyDefaults(schema["items"], &item);
    return;
  }
  if (!value->is_object()) return;
  const json props = schema.value("properties", json::object());
  for (auto it = props.begin(); it != props.end(); ++it) {
    if (!value->contains(it.key()) && it.value().contains("default")) {
      (*value)[it.key()] = it.value()["default"];
    }
    if (value->contains(it.key())) ApplyDefaults(it.value(), &(*value)[it.key()]);
  }
  if (schema.contains("additionalProperties") && schema["additionalProperties"].is_object()) {
    for (auto it = value->begin(); it != value->end(); ++it) {
      if (!props.contains(it.key())) ApplyDefaults(schema["additionalProperties"], &it.value());
    }
  }
}

void Validate(const json& schema, const json& value, const std::string& path,
              std::vector<Cause>* causes) {
  if (!schema.is_object()) return;
  if (value.is_null()) {
    if (schema.value("nullable", false)) return;
    Add(causes, "FieldValueTypeInvalid", path,
        absl::StrCat("Invalid value: \"null\": ", path, " in body must be of type ",
                     schema.value("type", "object"), ": \"null\""));
    return;
  }
  if (!TypeMatches(schema, value)) {
    std::string got = value.is_number_integer() ? "integer" : value.type_name();
    if (got == "bool") got = "boolean";
    Add(causes, "FieldValueTypeInvalid", path,
        absl::StrCat("Invalid value: \"", got, "\": ", path, " in body must be of type ",
                     schema.value("type", ""), ": \"", got, "\""));
    return;
  }
  if (schema.contains("enum") && schema["enum"].is_array()) {
    const json& allowed = schema["enum"];
    if (std::find(allowed.begin(), allowed.end(), value) == allowed.end()) {
      std::vector<std::string> shown;
      for (const auto& a : allowed) shown.push_back(a.dump());
      Add(causes, "FieldValueNotSupported", path,
          absl::StrCat("Unsupported value: ", Shown(value),
                       ": supported values: ", absl::StrJoin(shown, ", ")));
    }
  }
  if (value.is_number()) ValidateNumber(schema, value, path, causes);
  if (value.is_string()) ValidateString(schema, value, path, causes);
  if (value.is_array() || value.is_object()) ValidateSizes(schema, value, path, causes);
  if (value.is_array() && schema.contains("items")) {
    for (size_t i = 0; i < value.size(); ++i) {
      Validate(schema["items"], value[i], absl::StrCat(path, "[", i, "]"), causes);
    }
  }
  if (!value.is_object()) return;
  for (const auto& req : schema.value("required", json::array())) {
    if (!value.contains(req.get<std::string>())) {
      Add(causes, "FieldValueRequired", Join(path, req), "Required value");
    }
  }
  const json props = schema.value("properties", json::object());
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (path.empty() &&
        (it.key() == "metadata" || it.key() == "apiVersion" || it.key() == "kind")) {
      continue;
    }
    if (props.contains(it.key())) {
      Validate(props[it.key()], it.value(), Join(path, it.key()), causes);
    } else if (schema.contains("additionalProperties") &&
               schema["additionalProperties"].is_object()) {
      Validate(schema["additionalProperties"], it.value(), Join(path, it.key()), causes);
    }
  }
}

SchemaOutcome ApplySchema(const json& schema, json* object) {
  SchemaOutcome outcome;
  if (!schema.is_object()) return outcome;
  // The implicit top-level fields are never pruned or validated against the schema.
  json implicit = json::object();
  for (const char* key : {"apiVersion", "kind", "metadata"}) {
    if (object->contains(key)) {
      implicit[key] = (*object)[key];
      object->erase(key);
    }
  }
  Prune(schema, object, "", &outcome.unknown_fields);
  ApplyDefaults(schema, object);
  Validate(schema, *object, "", &outcome.causes);
  for (auto it = implicit.begin(); it != implicit.end(); ++it) (*object)[it.key()] = it.value();
  return outcome;
}

}  // namespace kubetrain::localkube
