// An enum's values and the names flags, logs and wire formats spell them with, written once as a
// table and read both ways, so a name and its parse can never disagree:
//
//   constexpr EnumName<Level> kLevels[] = {{Level::kDebug, "debug"}, {Level::kInfo, "info"}};
//   NameOf(kLevels, Level::kInfo)   -> "info"
//   ValueNamed(kLevels, "debug")    -> Level::kDebug (std::nullopt for a name not in the table)
//   NamesOf(kLevels)                -> "debug, info" (for "allowed: ..." in an error)
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace kubetrain {

template <typename Enum>
struct EnumName {
  Enum value;
  const char* name;  // a literal: converts to std:: and absl::string_view alike
};

// `value`'s name; `fallback` for a value the table does not hold.
template <typename Enum, size_t N>
constexpr const char* NameOf(const EnumName<Enum> (&table)[N], Enum value,
                             const char* fallback = "unknown") {
  for (const EnumName<Enum>& e : table) {
    if (e.value == value) return e.name;
  }
  return fallback;
}

// `name` is any string type with data() and size() (std::string_view, absl::string_view, ...).
template <typename Enum, size_t N, typename Text>
constexpr std::optional<Enum> ValueNamed(const EnumName<Enum> (&table)[N], const Text& name) {
  const std::string_view wanted(name.data(), name.size());
  for (const EnumName<Enum>& e : table) {
    if (wanted == e.name) return e.value;
  }
  return std::nullopt;
}

// The table's names in its order, joined by ", ".
template <typename Enum, size_t N>
std::string NamesOf(const EnumName<Enum> (&table)[N]) {
  std::string out;
  for (const EnumName<Enum>& e : table) {
    if (!out.empty()) out += ", ";
    out += e.name;
  }
  return out;
}

}  // namespace kubetrain
