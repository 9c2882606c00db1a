// YAML scalar resolution for yaml.cc (see yaml_scalar.h): the YAML 1.1 null, boolean, integer,
// hex and float grammars kubectl's reader accepts, matched by hand.
#include "operator/api/yaml_scalar.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "absl/strings/numbers.h"

namespace kubetrain::api {
namespace {

using nlohmann::json;

bool OneOf(absl::string_view s, std::initializer_list<absl::string_view> words) {
  return std::find(words.begin(), words.end(), s) != words.end();
}

bool IsTrue(absl::string_view s) {
  return OneOf(s, {"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"});
}

bool IsFalse(absl::string_view s) {
  return OneOf(s, {"n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"});
}

bool IsNull(absl::string_view s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsHexDigit(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// The scalar grammars below are matched by hand, in linear time and constant stack: a regex
// engine recurses per character and a long number would overflow the stack.

// [-+]?(0|[1-9][0-9_]*)
bool LooksLikeInt(absl::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  if (i == s.size()) return false;
  if (s[i] == '0') return i + 1 == s.size();
  if (!IsDigit(s[i])) return false;
  for (++i; i < s.size(); ++i) {
    if (!IsDigit(s[i]) && s[i] != '_') return false;
  }
  return true;
}

// 0x[0-9a-fA-F_]+
bool LooksLikeHex(absl::string_view s) {
  if (s.size() < 3 || s[0] != '0' || s[1] != 'x') return false;
  for (size_t i = 2; i < s.size(); ++i) {
    if (!IsHexDigit(s[i]) && s[i] != '_') return false;
  }
  return true;
}

// [-+]?(\.[0-9]+|[0-9][0-9_]*(\.[0-9_]*)?)([eE][-+]?[0-9]+)?
bool LooksLikeFloat(absl::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  auto skip = [&](bool underscores) {
    size_t start = i;
    while (i < n && (IsDigit(s[i]) || (underscores && s[i] == '_'))) ++i;
    return i - start;
  };
  if (i < n && (s[i] == '-' || s[i] == '+')) ++i;
  if (i < n && s[i] == '.') {
    ++i;
    if (skip(false) == 0) return false;
  } else {
    if (i == n || !IsDigit(s[i])) return false;
    skip(true);
    if (i < n && s[i] == '.') {
      ++i;
      skip(true);
    }
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < n && (s[i] == '-' || s[i] == '+')) ++i;
    if (skip(false) == 0) return false;
  }
  return i == n;
}

std::string WithoutUnderscores(absl::string_view s) {
  std::string out(s);
  out.erase(std::remove(out.begin(), out.end(), '_'), out.end());
  return out;
}

}  // namespace

bool IsSpecialFloat(absl::string_view s) {
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) s.remove_prefix(1);
  return s == ".inf" || s == ".Inf" || s == ".INF" || s == ".nan" || s == ".NaN" || s == ".NAN";
}

bool IsNumberBeyondDouble(absl::string_view s) {
  if (!LooksLikeInt(s) && !LooksLikeFloat(s)) return false;
  return ResolvePlain(std::string(s)).is_string();
}

json ResolvePlain(const std::string& s) {
  if (IsNull(s)) return nullptr;
  if (IsTrue(s)) return true;
  if (IsFalse(s)) return false;
  if (LooksLikeInt(s)) {
    std::string digits = WithoutUnderscores(s);
    int64_t v;
    if (absl::SimpleAtoi(digits, &v)) return v;
    uint64_t u;
    if (digits[0] != '-' && absl::SimpleAtoi(digits, &u)) return u;
  }
  if (LooksLikeHex(s)) {
    int64_t v;
    if (absl::SimpleHexAtoi(WithoutUnderscores(s), &v)) return v;
  }
  if (LooksLikeFloat(s)) {
    double v;
    if (absl::SimpleAtod(WithoutUnderscores(s), &v) && std::isfinite(v)) return v;
  }
  return s;
}

bool IsResolvedTag(const std::string& tag) {
  return tag == "?" || tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float" ||
         tag == "tag:yaml.org,2002:bool" || tag == "tag:yaml.org,2002:null";
}

json ScalarToJson(const std::string& tag, const std::string& s) {
  if (IsResolvedTag(tag)) return ResolvePlain(s);
  return s;  // quoted ("!") or explicitly a string
}

}  // namespace kubetrain::api
