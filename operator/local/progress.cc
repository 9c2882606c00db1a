#include "operator/local/progress.h"

#include "absl/strings/str_cat.h"
#include "operator/api/decode.h"

namespace kubetrain::local {
namespace {

constexpr const char* kProgressKeys[] = {"step", "epoch", "loss", "accuracy", "examples_per_sec"};

// Reads a value starting at `i`: quoted (with \" and \\ escapes) or up to the next space.
std::string ReadValue(absl::string_view line, size_t* i) {
  std::string value;
  if (*i < line.size() && line[*i] == '"') {
    for (++*i; *i < line.size() && line[*i] != '"'; ++*i) {
      if (line[*i] == '\\' && *i + 1 < line.size()) ++*i;
      value += line[*i];
    }
    ++*i;
    return value;
  }
  while (*i < line.size() && line[*i] != ' ') value += line[(*i)++];
  return value;
}

}  // namespace

std::map<std::string, std::string> ParseLogfmt(absl::string_view line) {
  std::map<std::string, std::string> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    size_t start = i;
    while (i < line.size() && line[i] != '=' && line[i] != ' ') ++i;
    if (i >= line.size() || line[i] != '=') continue;
    std::string key(line.substr(start, i - start));
    ++i;
    out[key] = ReadValue(line, &i);
  }
  return out;
}

bool ProgressTracker::Observe(absl::string_view line) {
  if (!line.empty() && line.front() == '{') {
    nlohmann::json doc = nlohmann::json::parse(line.begin(), line.end(), nullptr, false);
    if (doc.is_object() && api::StringField(doc, "event") == "training_complete") {
      completion_ = doc;
      return true;
    }
    return false;
  }
  std::map<std::string, std::string> fields = ParseLogfmt(line);
  if (fields["msg"] == "Writing TensorBoard summaries" && !fields["dir"].empty()) {
    summary_dir_ = fields["dir"];
    return false;
  }
  if (!fields.count("step")) return false;
  bool changed = false;
  for (const char* key : kProgressKeys) {
    auto it = fields.find(key);
    if (it != fields.end() && latest_[key] != it->second) {
      latest_[key] = it->second;
      changed = true;
    }
  }
  return changed;
}

std::string ProgressTracker::Summary() const {
  std::string out;
  for (const char* key : kProgressKeys) {
    auto it = latest_.find(key);
    if (it == latest_.end()) continue;
    absl::StrAppend(&out, out.empty() ? "" : " ", key, "=", it->second);
  }
  return out;
}

}  // namespace kubetrain::local
