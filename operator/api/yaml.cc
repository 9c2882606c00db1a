// YAML <-> JSON for manifests (see yaml.h): the reader, which builds JSON from yaml-cpp's parse
// events within the budgets of yaml.h, the writer, and the manifest file reader. Scalar types
// are resolved in yaml_scalar.cc; the byte-level checks of the text are in input_checks.cc.
#include "operator/api/yaml.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <unordered_map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "operator/api/input_checks.h"
#include "operator/api/yaml_scalar.h"

namespace kubetrain::api {
namespace {

using nlohmann::json;

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
    if (IsResolvedTag(tag) && IsNumberBeyondDouble(value)) {
      std::string path = Path();
      throw Refusal{absl::StrCat(LineOf(mark), ": ", path.empty() ? "document" : path,
                                 ": a number of ", value.size(),
                                 " characters is beyond any number JSON can hold (the API "
                                 "server's format); quote it if you mean the text")};
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
    // ".inf", ".nan" and numbers beyond a double are texts here (a plain one is refused on
    // reading): keep them quoted.
    if (IsSpecialFloat(s) || IsNumberBeyondDouble(s) || !ResolvePlain(s).is_string() || multiline ||
        marker) {
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
