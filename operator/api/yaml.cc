#include "operator/api/yaml.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <unordered_map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kubetrain::api {
namespace {

using nlohmann::json;

bool IsTrue(absl::string_view s) {
  static const char* kTrue[] = {"y",    "Y",    "yes", "Yes", "YES", "true",
                                "True", "TRUE", "on",  "On",  "ON"};
  for (const char* t : kTrue) {
    if (s == t) return true;
  }
  return false;
}

bool IsFalse(absl::string_view s) {
  static const char* kFalse[] = {"n",     "N",     "no",  "No",  "NO", "false",
                                 "False", "FALSE", "off", "Off", "OFF"};
  for (const char* f : kFalse) {
    if (s == f) return true;
  }
  return false;
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

// YAML's infinities and not-a-numbers (.inf, -.Inf, .NaN, ...): floats JSON cannot hold.
bool IsSpecialFloat(absl::string_view s) {
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) s.remove_prefix(1);
  return s == ".inf" || s == ".Inf" || s == ".INF" || s == ".nan" || s == ".NaN" || s == ".NAN";
}

// Resolves an untagged plain scalar: null, bool, int, float, or else string. A number too large
// for int64/uint64 reads as a float, and one too large for a double stays a string, as in
// kubectl (a JSON document cannot hold infinity). Special floats never get here (OnScalar
// refuses them).
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

json ScalarToJson(const std::string& tag, const std::string& s) {
  if (tag == "?") return ResolvePlain(s);
  if (tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float" ||
      tag == "tag:yaml.org,2002:bool" || tag == "tag:yaml.org,2002:null") {
    return ResolvePlain(s);
  }
  return s;  // quoted ("!") or explicitly a string
}

// A refusal from inside the event handler; carries its finished message out of yaml-cpp.
struct Refusal {
  std::string message;
};

std::string LineOf(const YAML::Mark& mark) { return absl::StrCat("line ", mark.line + 1); }

// Builds JSON from yaml-cpp's parse events, enforcing the limits of yaml.h as it goes, so nothing
// is allocated beyond them (yaml-cpp's node API would expand aliases without bound).
class JsonBuilder : public YAML::EventHandler {
 public:
  // `text_bytes`: the size of the text parsed, which bounds the values it can hold.
  explicit JsonBuilder(size_t text_bytes)
      : text_bytes_(text_bytes), max_text_nodes_(2 * text_bytes + 16) {}

  // The finished documents, empty ones left out.
  std::vector<json>& documents() { return documents_; }

  void OnDocumentStart(const YAML::Mark&) override {
    stack_.clear();
    anchors_.clear();
    alias_nodes_ = 0;
    document_nodes_ = 0;
    root_ = nullptr;
  }

  void OnDocumentEnd() override {
    if (!root_.is_null()) documents_.push_back(std::move(root_));
    root_ = nullptr;
  }

  void OnAnchor(const YAML::Mark&, const std::string& name) override { anchor_name_ = name; }

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    CountTextNode(mark);
    if (IsKeyPosition()) {
      SetKey(mark, "null");
      return;
    }
    Remember(anchor, nullptr, 0, "null");
    Add(nullptr);
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = anchors_.find(anchor);
    if (it == anchors_.end()) {
      throw Refusal{absl::StrCat(LineOf(mark),
                                 ": alias refers to a node that contains it; YAML aliases must "
                                 "refer to a complete node")};
    }
    const Anchored& a = it->second;
    if (IsKeyPosition()) {
      if (!a.scalar) {
        throw Refusal{absl::StrCat(LineOf(mark), ": alias *", a.name,
                                   " used as a map key refers to a map or list; keys must be "
                                   "strings")};
      }
      SetKey(mark, a.raw);
      return;
    }
    if (alias_nodes_ + a.nodes > kMaxAliasNodes) {
      throw Refusal{absl::StrCat(
          LineOf(mark), ": alias *", a.name, " would expand the document to more than ",
          kMaxAliasNodes,
          " nodes copied through aliases (a \"billion laughs\" file?); repeat less through "
          "aliases")};
    }
    if (stack_.size() + a.depth > static_cast<size_t>(kMaxNestingDepth)) {
      throw Refusal{absl::StrCat(LineOf(mark), ": alias *", a.name, " nests deeper than ",
                                 kMaxNestingDepth,
                                 " levels of maps and lists; flatten the manifest")};
    }
    alias_nodes_ += a.nodes;
    Add(a.value, a.nodes, a.depth);
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    CountTextNode(mark);
    if (size_t bad = InvalidUtf8Offset(value); bad != std::string::npos) {
      std::string path = Path();
      throw Refusal{absl::StrFormat(
          "%s: %s: invalid UTF-8 (byte 0x%02x at offset %d of the %s); manifests must be UTF-8 "
          "text",
          LineOf(mark), path.empty() ? "document" : path, static_cast<unsigned char>(value[bad]),
          bad, IsKeyPosition() ? "key" : "value")};
    }
    if (IsKeyPosition()) {
      Remember(anchor, value, 0, value);
      SetKey(mark, value);
      return;
    }
    if (tag != "!" && IsSpecialFloat(value)) {
      // kubectl fails on these too ("json: unsupported value: +Inf"): manifests travel as JSON.
      std::string path = Path();
      throw Refusal{absl::StrCat(LineOf(mark), ": ", path.empty() ? "document" : path, ": ", value,
                                 " is not a number JSON can hold (the API server's format); quote "
                                 "it if you mean the text")};
    }
    json v = ScalarToJson(tag, value);
    Remember(anchor, v, 0, value);
    Add(std::move(v));
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Start(mark, anchor, json::array());
  }
  void OnSequenceEnd() override { End(); }

  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Start(mark, anchor, json::object());
  }
  void OnMapEnd() override { End(); }

 private:
  struct Frame {
    json value;  // the object or array being filled
    YAML::anchor_t anchor = 0;
    std::string anchor_name;
    size_t alias_nodes_at_start = 0;
    size_t nodes = 1;  // this collection and everything in it
    int depth = 1;     // levels of collections, this one included
    bool is_key = false;
    YAML::Mark start;
    // Maps: the key awaiting its value, and the line of every key seen.
    bool has_key = false;
    std::string key;
    std::map<std::string, YAML::Mark> key_lines;
  };

  struct Anchored {
    json value;
    size_t nodes = 1;
    int depth = 0;
    bool scalar = false;
    std::string raw;  // a scalar's text, for use as a key
    std::string name;
  };

  bool IsKeyPosition() const {
    return !stack_.empty() && stack_.back().value.is_object() && !stack_.back().has_key;
  }

  // The field path of the value being read: spec.replicaSpecs.Worker.replicas, args[1].
  std::string Path() const {
    std::string path;
    for (const Frame& f : stack_) {
      if (f.value.is_array()) {
        absl::StrAppend(&path, "[", f.value.size(), "]");
      } else if (f.has_key) {
        absl::StrAppend(&path, path.empty() ? "" : ".", f.key);
      }
    }
    return path;
  }

  void SetKey(const YAML::Mark& mark, const std::string& key) {
    Frame& f = stack_.back();
    auto [it, inserted] = f.key_lines.emplace(key, mark);
    if (!inserted) {
      // JSON often sits on one line, where only the column tells the two keys apart.
      const YAML::Mark& first = it->second;
      bool same_line = first.line == mark.line;
      std::string where = Path();
      throw Refusal{absl::StrCat(
          LineOf(mark), same_line ? absl::StrCat(", column ", mark.column + 1) : "", ": key \"",
          key, "\" already set in ", where.empty() ? "map" : where, " at line ", first.line + 1,
          same_line ? absl::StrCat(", column ", first.column + 1) : "", "; remove one of them")};
    }
    f.has_key = true;
    f.key = key;
  }

  void Remember(YAML::anchor_t anchor, const json& value, int depth, const std::string& raw) {
    if (anchor == YAML::NullAnchor) return;
    anchors_[anchor] = {value, 1, depth, true, raw, std::move(anchor_name_)};
    anchor_name_.clear();
  }

  void Start(const YAML::Mark& mark, YAML::anchor_t anchor, json empty) {
    CountTextNode(mark);
    // A collection as a key is refused when it ends: if it never ends, the syntax error (an
    // unclosed bracket that yaml-cpp reads as a key) is the better answer.
    const bool is_key = IsKeyPosition();
    if (stack_.size() >= static_cast<size_t>(kMaxNestingDepth)) {
      throw Refusal{absl::StrCat(LineOf(mark), ": nesting deeper than ", kMaxNestingDepth,
                                 " levels of maps and lists; flatten the manifest")};
    }
    Frame f;
    f.value = std::move(empty);
    f.anchor = anchor;
    f.is_key = is_key;
    f.start = mark;
    if (anchor != YAML::NullAnchor) f.anchor_name = std::move(anchor_name_);
    anchor_name_.clear();
    stack_.push_back(std::move(f));
  }

  void End() {
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    if (f.is_key) {
      throw Refusal{
          absl::StrCat(LineOf(f.start), ": a map or list used as a map key; keys must be strings")};
    }
    if (f.anchor != YAML::NullAnchor) {
      anchors_[f.anchor] = {f.value, f.nodes, f.depth, false, "", f.anchor_name};
    }
    Add(std::move(f.value), f.nodes, f.depth);
  }

  // Appends a finished node to the collection being built, or makes it the document.
  void Add(json value, size_t nodes = 1, int depth = 0) {
    document_nodes_ += nodes;
    if (document_nodes_ > kMaxDocumentNodes) {
      throw Refusal{absl::StrCat("a document holds more than ", kMaxDocumentNodes,
                                 " values; is the file really a manifest?")};
    }
    if (stack_.empty()) {
      root_ = std::move(value);
      return;
    }
    Frame& parent = stack_.back();
    parent.nodes += nodes;
    parent.depth = std::max(parent.depth, depth + 1);
    if (parent.value.is_array()) {
      parent.value.push_back(std::move(value));
    } else {
      parent.value[parent.key] = std::move(value);
      parent.has_key = false;
    }
  }

  std::vector<json> documents_;
  std::vector<Frame> stack_;
  std::unordered_map<YAML::anchor_t, Anchored> anchors_;
  std::string anchor_name_;
  size_t alias_nodes_ = 0;
  size_t document_nodes_ = 0;  // values added to the current document, aliases included
  const size_t text_bytes_;
  const size_t max_text_nodes_;
  size_t text_nodes_ = 0;  // nulls, scalars and collections the text itself made, all documents

  // Every value written in the text takes at least a byte of it (aliases are budgeted apart):
  // more means the parser is making values up (yaml-cpp loops on some malformed input, slower
  // with every value) and would never stop.
  void CountTextNode(const YAML::Mark& mark) {
    if (++text_nodes_ > max_text_nodes_) {
      throw Refusal{absl::StrCat(LineOf(mark), ": the YAML parser made more than ", max_text_nodes_,
                                 " values from ", text_bytes_, " bytes; the text is malformed")};
    }
  }
  json root_;
};

// Line and column (1-based) of byte `offset` of `text`.
std::string Position(absl::string_view text, size_t offset) {
  size_t line = 1 + std::count(text.begin(), text.begin() + offset, '\n');
  size_t line_start = text.rfind('\n', offset == 0 ? 0 : offset - 1);
  size_t column =
      line_start == absl::string_view::npos || offset == 0 ? offset + 1 : offset - line_start;
  return absl::StrCat("line ", line, ", column ", column);
}

// UTF-16 and UTF-32 streams start with a byte-order mark (yaml-cpp would decode them).
bool HasWideByteOrderMark(absl::string_view text) {
  return absl::StartsWith(text, absl::string_view("\xFE\xFF", 2)) ||
         absl::StartsWith(text, absl::string_view("\xFF\xFE", 2)) ||
         absl::StartsWith(text, absl::string_view("\0\0\xFE\xFF", 4));
}

// Binary input gets a plain answer instead of whatever the YAML scanner trips over first.
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

void Emit(YAML::Emitter& out, const json& v) {
  if (v.is_object()) {
    if (v.empty()) {
      out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
      return;
    }
    out << YAML::BeginMap;
    for (const auto& [key, value] : v.items()) {
      // An implicit key ends within 1024 characters (YAML 1.2 §7.4.2); a longer one (escapes
      // count) must be an explicit "? key".
      if (key.size() > 256) out << YAML::LongKey;
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
    // Line breaks (a lone \r too) and edge blanks do not survive a plain scalar.
    bool multiline = s.find_first_of("\r\n") != std::string::npos ||
                     (!s.empty() && (absl::ascii_isspace(static_cast<unsigned char>(s.front())) ||
                                     absl::ascii_isspace(static_cast<unsigned char>(s.back()))));
    // yaml-cpp leaves "--- x" plain, which reads back as a document marker.
    bool marker = absl::StartsWith(s, "---") || absl::StartsWith(s, "...");
    if (!ResolvePlain(s).is_string() || multiline || marker) {
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

absl::StatusOr<std::vector<json>> ParseYamlDocuments(absl::string_view text) {
  if (HasWideByteOrderMark(text)) {
    // yaml-cpp would decode it, but then no byte-level check of ours applies to what it made.
    return absl::InvalidArgumentError(
        "not UTF-8: the text starts with a UTF-16 or UTF-32 byte-order mark; save the manifest "
        "as UTF-8, as Kubernetes expects");
  }
  if (absl::Status s = CheckText(text); !s.ok()) return s;
  JsonBuilder builder(text.size());
  std::string copy(text);
  std::istringstream in(copy);
  try {
    YAML::Parser parser(in);
    while (parser.HandleNextDocument(builder)) {
    }
  } catch (const Refusal& r) {
    return absl::InvalidArgumentError(r.message);
  } catch (const YAML::DeepRecursion& e) {
    return absl::InvalidArgumentError(absl::StrCat("line ", e.mark.line + 1,
                                                   ": nesting deeper than ", kMaxNestingDepth,
                                                   " levels of maps and lists; flatten the "
                                                   "manifest"));
  } catch (const YAML::Exception& e) {
    // Bytes that are not UTF-8 are the likelier cause, and the more useful answer.
    if (size_t bad = InvalidUtf8Offset(text); bad != absl::string_view::npos) {
      return InvalidUtf8Text(text, bad);
    }
    return absl::InvalidArgumentError(absl::StrCat("YAML syntax error at line ", e.mark.line + 1,
                                                   ", column ", e.mark.column + 1, ": ", e.msg));
  }
  // Values were checked with their field paths; what is left is comments and the like.
  if (size_t bad = InvalidUtf8Offset(text); bad != absl::string_view::npos) {
    return InvalidUtf8Text(text, bad);
  }
  return std::move(builder.documents());
}

std::string ToYaml(const json& value) {
  YAML::Emitter out;
  out.SetIndent(2);
  out.SetSeqFormat(YAML::Block);
  Emit(out, value);
  return std::string(out.c_str()) + "\n";
}

absl::StatusOr<std::string> ReadFileOrStdin(const std::string& path) {
  std::istream* in = &std::cin;
  std::ifstream file;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) {
      return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
    }
    in = &file;
  }
  std::string text;
  char buffer[64 * 1024];
  while (*in) {
    in->read(buffer, sizeof(buffer));
    text.append(buffer, in->gcount());
    if (text.size() > kMaxManifestBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          path == "-" ? "stdin" : path, ": larger than ", kMaxManifestBytes >> 20,
          " MiB; a manifest is at most that big (the API server takes at most 3 MiB)"));
    }
  }
  if (in->bad()) {
    return absl::DataLossError(absl::StrCat(path, ": read failed: ", std::strerror(errno)));
  }
  return text;
}

}  // namespace kubetrain::api
