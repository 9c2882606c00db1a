// Api::List: paginated lists read as the apiserver's etcd3 storage reads them, every page at the
// first page's revision, with its continue tokens, remainingItemCount and 410 after compaction.
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "localkube/api.h"
#include "localkube/errors.h"
#include "localkube/object_meta.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

// A list's continue token, as the apiserver's storage encodes it: unpadded base64url of
// {"v":"meta.k8s.io/v1","rv":<revision of the first page>,"start":<next key>}, the key relative
// to the list's prefix. rv -1 asks for the rest at the latest revision.
struct ContinueToken {
  int64_t revision = 0;
  std::string start;
};

std::string EncodeContinue(const std::string& start, int64_t revision) {
  nlohmann::ordered_json token = {{"v", "meta.k8s.io/v1"}, {"rv", revision}, {"start", start}};
  std::string encoded = absl::WebSafeBase64Escape(token.dump());
  while (!encoded.empty() && encoded.back() == '=') encoded.pop_back();
  return encoded;
}

// path.Clean leaves "/" + start unchanged: no empty, "." or ".." element, no trailing slash.
bool CleanPath(const std::string& start) {
  std::vector<absl::string_view> parts = absl::StrSplit(start, '/');
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i] == "." || parts[i] == "..") return false;
    if (parts[i].empty() && !(i == 0 && start.empty())) return false;
  }
  return true;
}

absl::StatusOr<ContinueToken> DecodeContinue(const std::string& value) {
  auto invalid = [](absl::string_view why) {
    return BadRequestError(absl::StrCat("invalid continue token: continue key is not valid", why));
  };
  std::string raw;
  for (size_t i = 0; i < value.size(); ++i) {
    char c = value[i];
    if (!(absl::ascii_isalnum(c) || c == '-' || c == '_')) {
      return invalid(absl::StrCat(": illegal base64 data at input byte ", i));
    }
  }
  if (value.size() % 4 == 1 || !absl::WebSafeBase64Unescape(value, &raw)) {
    return invalid(absl::StrCat(": illegal base64 data at input byte ", value.size() - 1));
  }
  json token = json::parse(raw, nullptr, false);
  if (!token.is_object()) {
    return invalid(": invalid character looking for beginning of value");
  }
  if (token.value("v", json()) != "meta.k8s.io/v1") {
    std::string version = token.contains("v") && token["v"].is_string() ? token["v"] : "";
    return invalid(absl::StrCat(": server does not recognize this encoded version ", version));
  }
  ContinueToken out;
  if (token.contains("rv") && token["rv"].is_number_integer()) out.revision = token["rv"];
  if (out.revision == 0) {
    return invalid(": incorrect encoded start resourceVersion (version meta.k8s.io/v1)");
  }
  if (token.contains("start") && token["start"].is_string()) out.start = token["start"];
  if (out.start.empty()) return invalid(": encoded start key empty (version meta.k8s.io/v1)");
  std::string start = absl::StartsWith(out.start, "/") ? out.start.substr(1) : out.start;
  if (!CleanPath(start)) return invalid(absl::StrCat(": ", out.start));
  out.start = start;
  return out;
}

}  // namespace

absl::StatusOr<json> Api::List(const Target& target, const ListOptions& options) const {
  const ResourceType& type = *target.type;
  // Keys are "namespace/name" in the store; a token holds the next key relative to the list's
  // prefix (the namespace's, or the resource's for cluster-scoped and all-namespace lists).
  const std::string prefix = !target.ns.empty() ? target.ns + "/" : type.namespaced ? "" : "/";
  std::string from;
  int64_t at = 0;
  if (!options.continue_token.empty()) {
    ASSIGN_OR_RETURN(ContinueToken token, DecodeContinue(options.continue_token));
    if (options.resource_version != 0) {
      return BadRequestError("specifying resource version is not allowed when using continue");
    }
    from = prefix + token.start;
    at = token.revision > 0 ? token.revision : 0;
  }
  json items = json::array();
  std::string last_key;
  bool more = false;
  int64_t remaining = 0;
  const bool count_remaining = options.labels.empty() && options.fields.empty();
  int64_t revision = 0;
  absl::Status scanned = store_->Scan(
      type.StorageKey(), target.ns, from, at,
      [&](const json& o) {
        if (!options.labels.Matches(Meta(o).value("labels", json()))) return true;
        if (!options.fields.Matches(o)) return true;
        if (options.limit > 0 && static_cast<int64_t>(items.size()) >= options.limit) {
          more = true;
          ++remaining;
          return count_remaining;
        }
        json item = o;
        item["apiVersion"] = type.GroupVersion();
        items.push_back(std::move(item));
        last_key = NamespaceOf(o) + "/" + NameOf(o);
        return true;
      },
      &revision);
  if (absl::IsOutOfRange(scanned)) {
    return ExpiredContinueError(EncodeContinue(from.substr(prefix.size()), -1));
  }
  if (absl::IsInvalidArgument(scanned)) {
    return TooLargeResourceVersionError(at, store_->Revision());
  }
  RETURN_IF_ERROR(scanned);
  json list = {{"kind", type.list_kind},
               {"apiVersion", type.GroupVersion()},
               {"metadata", {{"resourceVersion", std::to_string(revision)}}},
               {"items", std::move(items)}};
  if (more) {
    // Every page is read at the first page's revision: the token carries it.
    list["metadata"]["continue"] =
        EncodeContinue(last_key.substr(prefix.size()) + std::string(1, '\0'), revision);
    if (count_remaining) list["metadata"]["remainingItemCount"] = remaining;
  }
  return list;
}

}  // namespace kubetrain::localkube
