// Label and field selectors in the apiserver's grammar. Parsed once per request, then matched
// against many objects. Immutable after parsing, so safe to share between threads.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kubetrain::localkube {

// `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a)`, `k`, `!k`; comma means AND.
class LabelSelector {
 public:
  static absl::StatusOr<LabelSelector> Parse(absl::string_view text);
  // `labels` is metadata.labels (may be null).
  bool Matches(const nlohmann::json& labels) const;
  bool empty() const { return requirements_.empty(); }

 private:
  enum class Op { kEquals, kNotEquals, kIn, kNotIn, kExists, kNotExists };
  struct Requirement {
    std::string key;
    Op op;
    std::vector<std::string> values;
  };
  std::vector<Requirement> requirements_;
};

// `path=v`, `path==v`, `path!=v`; comma means AND. Any dotted path into the object is accepted
// (metadata.name, status.phase, involvedObject.uid, ...); a missing field reads as "".
class FieldSelector {
 public:
  static absl::StatusOr<FieldSelector> Parse(absl::string_view text);
  bool Matches(const nlohmann::json& object) const;
  bool empty() const { return terms_.empty(); }

 private:
  struct Term {
    std::string path;
    bool negate;
    std::string value;
  };
  std::vector<Term> terms_;
};

// The string form of a field for selectors: strings as-is, other scalars dumped, missing "".
std::string FieldValue(const nlohmann::json& object, absl::string_view dotted_path);

}  // namespace kubetrain::localkube
