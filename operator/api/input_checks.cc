// Hostile-input checks of operator/api (see input_checks.h and yaml.h): text that is not UTF-8
// or not text at all, and JSON values nested too deep or holding invalid UTF-8. Kept apart from
// the YAML conversion in yaml.cc; the YAML reader's own budgets (aliases, nodes, duplicate keys)
// are enforced as it builds, in yaml.cc's JsonBuilder.
#include "operator/api/input_checks.h"

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "operator/api/yaml.h"

namespace kubetrain::api {
namespace {

using nlohmann::json;

// Line and column (1-based) of byte `offset` of `text`.
std::string Position(absl::string_view text, size_t offset) {
  size_t line = 1 + std::count(text.begin(), text.begin() + offset, '\n');
  size_t line_start = text.rfind('\n', offset == 0 ? 0 : offset - 1);
  size_t column =
      line_start == absl::string_view::npos || offset == 0 ? offset + 1 : offset - line_start;
  return absl::StrCat("line ", line, ", column ", column);
}

}  // namespace

bool HasWideByteOrderMark(absl::string_view text) {
  return absl::StartsWith(text, absl::string_view("\xFE\xFF", 2)) ||
         absl::StartsWith(text, absl::string_view("\xFF\xFE", 2)) ||
         absl::StartsWith(text, absl::string_view("\0\0\xFE\xFF", 4));
}

absl::Status CheckText(absl::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char c = text[i];
    if (c >= 0x20 || c == '\t' || c == '\n' || c == '\r') continue;
    if (c == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("not YAML text: contains a NUL byte at offset ", i, " (", Position(text, i),
                       "); is it a binary file (or UTF-16 without a byte-order mark)?"));
    }
    return absl::InvalidArgumentError(
        absl::StrFormat("not YAML text: contains control character 0x%02x at offset %d (%s); "
                        "YAML allows only tab, newline and carriage return",
                        c, i, Position(text, i)));
  }
  return absl::OkStatus();
}

absl::Status InvalidUtf8Text(absl::string_view text, size_t offset) {
  return absl::InvalidArgumentError(
      absl::StrFormat("not UTF-8 text: byte 0x%02x at %s is not valid UTF-8; save the file as "
                      "UTF-8",
                      static_cast<unsigned char>(text[offset]), Position(text, offset)));
}

size_t InvalidUtf8Offset(absl::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return i;  // a continuation byte, an overlong lead (C0, C1) or beyond U+10FFFF (F5..FF)
    }
    if (i + len > n) return i;
    for (int k = 1; k < len; ++k) {
      unsigned char cc = s[i + k];
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return i;
    }
    i += len;
  }
  return absl::string_view::npos;
}

absl::Status CheckJsonShape(const json& value) {
  struct Item {
    const json* value;
    std::string path;
    int depth;
  };
  std::vector<Item> todo = {{&value, "", 0}};
  while (!todo.empty()) {
    Item item = std::move(todo.back());
    todo.pop_back();
    const json& v = *item.value;
    const std::string& where = item.path.empty() ? std::string("document") : item.path;
    if (v.is_string()) {
      const std::string& s = v.get_ref<const std::string&>();
      if (size_t bad = InvalidUtf8Offset(s); bad != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: invalid UTF-8 (byte 0x%02x at offset %d of the value); strings must be UTF-8",
            where, static_cast<unsigned char>(s[bad]), bad));
      }
      continue;
    }
    if (!v.is_structured()) continue;
    if (item.depth >= kMaxNestingDepth) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": nesting deeper than ", kMaxNestingDepth, " levels of objects and arrays"));
    }
    if (v.is_array()) {
      for (size_t i = 0; i < v.size(); ++i) {
        todo.push_back({&v[i], absl::StrCat(item.path, "[", i, "]"), item.depth + 1});
      }
      continue;
    }
    for (const auto& [key, child] : v.items()) {
      if (size_t bad = InvalidUtf8Offset(key); bad != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: a key is not valid UTF-8 (byte 0x%02x at offset %d); keys must be UTF-8", where,
            static_cast<unsigned char>(key[bad]), bad));
      }
      todo.push_back(
          {&child, item.path.empty() ? key : absl::StrCat(item.path, ".", key), item.depth + 1});
    }
  }
  return absl::OkStatus();
}

}  // namespace kubetrain::api
