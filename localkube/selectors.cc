#include "localkube/selectors.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "localkube/errors.h"

namespace kubetrain::localkube {
namespace {

// Splits on commas that are not inside parentheses: "a in (x,y),b" -> {"a in (x,y)", "b"}.
std::vector<std::string> SplitTerms(absl::string_view text) {
  std::vector<std::string> terms;
  std::string current;
  int depth = 0;
  for (char c : text) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && depth == 0) {
      terms.push_back(current);
      current.clear();
    } else {
      current.push_back(c);
    }
  }
  terms.push_back(current);
  return terms;
}

std::string Trim(absl::string_view s) { return std::string(absl::StripAsciiWhitespace(s)); }

// Parses "(a, b)" into {"a","b"}.
absl::StatusOr<std::vector<std::string>> ParseSet(absl::string_view text) {
  std::string t = Trim(text);
  if (t.size() < 2 || t.front() != '(' || t.back() != ')') {
    return BadRequestError(absl::StrCat("unable to parse requirement: expected (values) in ", t));
  }
  std::vector<std::string> values;
  for (absl::string_view v : absl::StrSplit(t.substr(1, t.size() - 2), ',')) {
    values.push_back(Trim(v));
  }
  return values;
}

// Finds " in " / " notin " as a whole word after the key.
size_t FindWord(const std::string& term, const std::string& word) {
  size_t pos = term.find(" " + word + " ");
  if (pos == std::string::npos) pos = term.find(" " + word + "(");
  return pos;
}

}  // namespace

absl::StatusOr<LabelSelector> LabelSelector::Parse(absl::string_view text) {
  LabelSelector selector;
  if (Trim(text).empty()) return selector;
  for (const std::string& raw : SplitTerms(text)) {
    std::string term = Trim(raw);
    if (term.empty()) return BadRequestError("unable to parse requirement: empty term");
    Requirement req;
    size_t pos;
    if ((pos = FindWord(term, "notin")) != std::string::npos) {
      req.key = Trim(term.substr(0, pos));
      req.op = Op::kNotIn;
      auto set = ParseSet(term.substr(pos + 6));
      if (!set.ok()) return set.status();
      req.values = *set;
    } else if ((pos = FindWord(term, "in")) != std::string::npos) {
      req.key = Trim(term.substr(0, pos));
      req.op = Op::kIn;
      auto set = ParseSet(term.substr(pos + 3));
      if (!set.ok()) return set.status();
      req.values = *set;
    } else if ((pos = term.find("!=")) != std::string::npos) {
      req.key = Trim(term.substr(0, pos));
      req.op = Op::kNotEquals;
      req.values = {Trim(term.substr(pos + 2))};
    } else if ((pos = term.find("==")) != std::string::npos) {
      req.key = Trim(term.substr(0, pos));
      req.op = Op::kEquals;
      req.values = {Trim(term.substr(pos + 2))};
    } else if ((pos = term.find('=')) != std::string::npos) {
      req.key = Trim(term.substr(0, pos));
      req.op = Op::kEquals;
      req.values = {Trim(term.substr(pos + 1))};
    } else if (term[0] == '!') {
      req.key = Trim(term.substr(1));
      req.op = Op::kNotExists;
    } else {
      req.key = term;
      req.op = Op::kExists;
    }
    if (req.key.empty() || req.key.find_first_of(" ()!=") != std::string::npos) {
      return BadRequestError(
          absl::StrCat("unable to parse requirement: invalid label key in \"", term, "\""));
    }
    selector.requirements_.push_back(std::move(req));
  }
  return selector;
}

bool LabelSelector::Matches(const nlohmann::json& labels) const {
  for (const Requirement& req : requirements_) {
    bool has = labels.is_object() && labels.contains(req.key) && labels[req.key].is_string();
    std::string value = has ? labels[req.key].get<std::string>() : "";
    bool in_set = has && std::find(req.values.begin(), req.values.end(), value) != req.values.end();
    switch (req.op) {
      case Op::kEquals:
      case Op::kIn:
        if (!in_set) return false;
        break;
      case Op::kNotEquals:
      case Op::kNotIn:
        if (in_set) return false;
        break;
      case Op::kExists:
        if (!has) return false;
        break;
      case Op::kNotExists:
        if (has) return false;
        break;
    }
  }
  return true;
}

absl::StatusOr<FieldSelector> FieldSelector::Parse(absl::string_view text) {
  FieldSelector selector;
  if (Trim(text).empty()) return selector;
  for (const std::string& raw : SplitTerms(text)) {
    std::string term = Trim(raw);
    Term t;
    size_t pos;
    if ((pos = term.find("!=")) != std::string::npos) {
      t = {Trim(term.substr(0, pos)), true, Trim(term.substr(pos + 2))};
    } else if ((pos = term.find("==")) != std::string::npos) {
      t = {Trim(term.substr(0, pos)), false, Trim(term.substr(pos + 2))};
    } else if ((pos = term.find('=')) != std::string::npos) {
      t = {Trim(term.substr(0, pos)), false, Trim(term.substr(pos + 1))};
    } else {
      return BadRequestError(
          absl::StrCat("invalid selector: '", term, "'; can't understand '", term, "'"));
    }
    if (t.path.empty()) return BadRequestError("field label not supported: ");
    selector.terms_.push_back(std::move(t));
  }
  return selector;
}

bool FieldSelector::Matches(const nlohmann::json& object) const {
  for (const Term& t : terms_) {
    bool equal = FieldValue(object, t.path) == t.value;
    if (equal == t.negate) return false;
  }
  return true;
}

std::string FieldValue(const nlohmann::json& object, absl::string_view dotted_path) {
  const nlohmann::json* node = &object;
  for (absl::string_view part : absl::StrSplit(dotted_path, '.')) {
    if (!node->is_object()) return "";
    auto it = node->find(std::string(part));
    if (it == node->end()) return "";
    node = &*it;
  }
  if (node->is_string()) return node->get<std::string>();
  if (node->is_null()) return "";
  return node->dump();
}

}  // namespace kubetrain::localkube
