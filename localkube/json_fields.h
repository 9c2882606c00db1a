// Lenient readers of a decoded JSON object's members, for code that has already validated the
// object's shape or treats a missing or mistyped member as unset, and encoding/json's names for a
// value's kind, which Go's type errors quote.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kubetrain::localkube {

// object[key], or null when object is not an object or has no such member.
inline const nlohmann::json& Field(const nlohmann::json& object, const char* key) {
  static const nlohmann::json kNull;
  if (!object.is_object()) return kNull;
  auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

// object[key] when it is a string, else "".
inline std::string Str(const nlohmann::json& object, const char* key) {
  const nlohmann::json& v = Field(object, key);
  return v.is_string() ? v.get<std::string>() : "";
}

// The strings of a JSON array, in order; elements that are not strings are skipped, and a value
// that is not an array has none.
inline std::vector<std::string> StringElements(const nlohmann::json& array) {
  std::vector<std::string> out;
  if (!array.is_array()) return out;
  for (const nlohmann::json& v : array) {
    if (v.is_string()) out.push_back(v.get<std::string>());
  }
  return out;
}

// The strings of the array object[key] (none when it is missing or not an array).
inline std::vector<std::string> StringsOf(const nlohmann::json& object, const char* key) {
  return StringElements(Field(object, key));
}

// encoding/json's name for a JSON value's kind in type errors.
inline std::string GoKind(const nlohmann::json& v) {
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_boolean()) return "bool";
  if (v.is_array()) return "array";
  return "object";
}

}  // namespace kubetrain::localkube
