#include "operator/api/yaml.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kubetrain::api {
namespace {

using nlohmann::json;

bool IsTrue(const std::string& s) {
  static const char* kTrue[] = {"y",    "Y",    "yes", "Yes", "YES", "true",
                                "True", "TRUE", "on",  "On",  "ON"};
  for (const char* t : kTrue) {
    if (s == t) return true;
  }
  return false;
}

bool IsFalse(const std::string& s) {
  static const char* kFalse[] = {"n",     "N",     "no",  "No",  "NO", "false",
                                 "False", "FALSE", "off", "Off", "OFF"};
  for (const char* f : kFalse) {
    if (s == f) return true;
  }
  return false;
}

bool IsNull(const std::string& s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}

// Resolves an untagged plain scalar: null, bool, int, float, or else string.
json ResolvePlain(const std::string& s) {
  if (IsNull(s)) return nullptr;
  if (IsTrue(s)) return true;
  if (IsFalse(s)) return false;
  static const std::regex kInt(R"([-+]?(0|[1-9][0-9_]*))");
  static const std::regex kHex(R"(0x[0-9a-fA-F_]+)");
  static const std::regex kFloat(R"([-+]?(\.[0-9]+|[0-9][0-9_]*(\.[0-9_]*)?)([eE][-+]?[0-9]+)?)");
  if (std::regex_match(s, kInt)) {
    int64_t v;
    std::string digits = s;
    digits.erase(std::remove(digits.begin(), digits.end(), '_'), digits.end());
    if (absl::SimpleAtoi(digits, &v)) return v;
  }
  if (std::regex_match(s, kHex)) {
    int64_t v;
    if (absl::SimpleHexAtoi(s, &v)) return v;
  }
  if (std::regex_match(s, kFloat)) {
    double v;
    if (absl::SimpleAtod(s, &v)) return v;
  }
  if (s == ".inf" || s == ".Inf" || s == "+.inf") return std::numeric_limits<double>::infinity();
  if (s == "-.inf" || s == "-.Inf") return -std::numeric_limits<double>::infinity();
  return s;
}

json ScalarToJson(const YAML::Node& node) {
  const std::string& s = node.Scalar();
  const std::string& tag = node.Tag();
  if (tag == "?") return ResolvePlain(s);
  if (tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float" ||
      tag == "tag:yaml.org,2002:bool" || tag == "tag:yaml.org,2002:null") {
    return ResolvePlain(s);
  }
  return s;  // quoted ("!") or explicitly a string
}

json NodeToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar:
      return ScalarToJson(node);
    case YAML::NodeType::Sequence: {
      json arr = json::array();
      for (const auto& item : node) arr.push_back(NodeToJson(item));
      return arr;
    }
    case YAML::NodeType::Map: {
      json obj = json::object();
      for (const auto& kv : node) obj[kv.first.as<std::string>()] = NodeToJson(kv.second);
      return obj;
    }
  }
  return nullptr;
}

void Emit(YAML::Emitter& out, const json& v) {
  if (v.is_object()) {
    if (v.empty()) {
      out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
      return;
    }
    out << YAML::BeginMap;
    for (const auto& [key, value] : v.items()) {
      out << YAML::Key;
      Emit(out, key);
      out << YAML::Value;
      Emit(out, value);
    }
    out << YAML::EndMap;
  } else if (v.is_array()) {
    if (v.empty()) {
      out << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
      return;
    }
    out << YAML::BeginSeq;
    for (const auto& item : v) Emit(out, item);
    out << YAML::EndSeq;
  } else if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    bool multiline = s.find('\n') != std::string::npos;
    if (!ResolvePlain(s).is_string() || multiline) {
      out << YAML::DoubleQuoted;
    } else if (s.find('"') != std::string::npos && s.find('\'') == std::string::npos) {
      out << YAML::SingleQuoted;  // JSON values such as TF_CONFIG read best without escapes
    }
    out << s;
  } else if (v.is_null()) {
    out << YAML::Null;
  } else {
    out << v.dump();  // numbers and booleans: JSON's shortest round-trip text is valid YAML
  }
}

}  // namespace

absl::StatusOr<std::vector<json>> ParseYamlDocuments(absl::string_view text) {
  std::vector<json> docs;
  try {
    for (const YAML::Node& node : YAML::LoadAll(std::string(text))) {
      json doc = NodeToJson(node);
      if (!doc.is_null()) docs.push_back(std::move(doc));
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("YAML syntax error at line ", e.mark.line + 1,
                                                   ", column ", e.mark.column + 1, ": ", e.msg));
  }
  return docs;
}

std::string ToYaml(const json& value) {
  YAML::Emitter out;
  out.SetIndent(2);
  out.SetSeqFormat(YAML::Block);
  Emit(out, value);
  return std::string(out.c_str()) + "\n";
}

absl::StatusOr<std::string> ReadFileOrStdin(const std::string& path) {
  std::ostringstream buffer;
  if (path == "-") {
    buffer << std::cin.rdbuf();
    return buffer.str();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace kubetrain::api
