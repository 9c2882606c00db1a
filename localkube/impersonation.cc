#include "localkube/impersonation.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "localkube/errors.h"
#include "localkube/pod_validation.h"

namespace kubetrain::localkube {
namespace {

constexpr char kUserHeader[] = "impersonate-user";
constexpr char kGroupHeader[] = "impersonate-group";
constexpr char kUidHeader[] = "impersonate-uid";
constexpr char kExtraPrefix[] = "impersonate-extra-";
constexpr char kAuthenticationGroup[] = "authentication.k8s.io";

// One thing to impersonate, as the filter's v1.ObjectReference holds it.
struct Wanted {
  std::string kind;  // ServiceAccount, User, Group, UserExtra, UID
  std::string ns;
  std::string name;
  std::string api_version;
  std::string field_path;  // UserExtra: the key
};

// Go's %v of a v1.ObjectReference: its seven fields, space-separated, in braces.
std::string GoValue(const Wanted& w) {
  return absl::StrCat("{", w.kind, " ", w.ns, " ", w.name, "  ", w.api_version, "  ", w.field_path,
                      "}");
}

// url.PathUnescape; the key as it is when malformed.
std::string PathUnescape(const std::string& key) {
  std::string out;
  for (size_t i = 0; i < key.size(); ++i) {
    if (key[i] != '%') {
      out.push_back(key[i]);
      continue;
    }
    if (i + 2 >= key.size() || !absl::ascii_isxdigit(key[i + 1]) ||
        !absl::ascii_isxdigit(key[i + 2])) {
      return key;
    }
    out.push_back(static_cast<char>(std::stoi(key.substr(i + 1, 2), nullptr, 16)));
    i += 2;
  }
  return out;
}

// serviceaccount.SplitUsername: (namespace, name) of a valid ServiceAccount user name.
bool SplitServiceAccount(const std::string& user, std::string* ns, std::string* name) {
  if (!absl::StartsWith(user, kServiceAccountPrefix)) return false;
  std::vector<std::string> parts = absl::StrSplit(user.substr(strlen(kServiceAccountPrefix)), ':');
  if (parts.size() != 2 || !Dns1123LabelErrors(parts[0]).empty() ||
      !Dns1123SubdomainErrors(parts[1]).empty()) {
    return false;
  }
  *ns = parts[0];
  *name = parts[1];
  return true;
}

bool Has(const std::vector<std::string>& list, const std::string& v) {
  return std::find(list.begin(), list.end(), v) != list.end();
}

}  // namespace

absl::StatusOr<UserInfo> Impersonate(
    const Store* rbac_store, const UserInfo& requester,
    const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string user, uid;
  bool has_user = false, has_uid = false, has_groups = false;
  std::vector<Wanted> groups, extras;
  for (const auto& [raw_name, value] : headers) {
    std::string name = absl::AsciiStrToLower(raw_name);
    if (name == kUserHeader && !has_user) {
      has_user = !value.empty();
      user = value;
    } else if (name == kGroupHeader) {
      has_groups = true;
      groups.push_back({.kind = "Group", .name = value});
    } else if (name == kUidHeader && !has_uid) {
      has_uid = !value.empty();
      uid = value;
    } else if (absl::StartsWith(name, kExtraPrefix)) {
      extras.push_back({.kind = "UserExtra",
                        .name = value,
                        .api_version = "authentication.k8s.io/v1",
                        .field_path = PathUnescape(name.substr(strlen(kExtraPrefix)))});
    }
  }
  std::vector<Wanted> wanted;
  std::string sa_ns, sa_name;
  if (has_user) {
    if (SplitServiceAccount(user, &sa_ns, &sa_name)) {
      wanted.push_back({.kind = "ServiceAccount", .ns = sa_ns, .name = sa_name});
    } else {
      wanted.push_back({.kind = "User", .name = user});
    }
  }
  wanted.insert(wanted.end(), groups.begin(), groups.end());
  wanted.insert(wanted.end(), extras.begin(), extras.end());
  if (has_uid) {
    wanted.push_back({.kind = "UID", .name = uid, .api_version = "authentication.k8s.io/v1"});
  }
  if (wanted.empty()) return requester;
  if (!has_user) {
    std::vector<std::string> values;
    for (const Wanted& w : wanted) values.push_back(GoValue(w));
    return BadRequestError(
        absl::StrCat("requested [", absl::StrJoin(values, " "), "] without impersonating a user"));
  }
  UserInfo out;
  for (const Wanted& w : wanted) {
    RequestAttributes a{
        .resource_request = true, .verb = "impersonate", .ns = w.ns, .name = w.name};
    if (w.kind == "ServiceAccount") {
      a.resource = "serviceaccounts";
      out.name = absl::StrCat(kServiceAccountPrefix, w.ns, ":", w.name);
      if (!has_groups) {
        out.groups = {"system:serviceaccounts", absl::StrCat("system:serviceaccounts:", w.ns)};
      }
    } else if (w.kind == "User") {
      a.resource = "users";
      out.name = w.name;
    } else if (w.kind == "Group") {
      a.resource = "groups";
      out.groups.push_back(w.name);
    } else if (w.kind == "UserExtra") {
      a.api_group = kAuthenticationGroup;
      a.api_version = "v1";
      a.resource = "userextras";
      a.subresource = w.field_path;
      out.extra[w.field_path].push_back(w.name);
    } else {
      a.api_group = kAuthenticationGroup;
      a.api_version = "v1";
      a.resource = "uids";
      out.uid = w.name;
    }
    if (rbac_store != nullptr) {
      if (absl::Status st = Authorize(*rbac_store, requester, a); !st.ok()) return st;
    }
  }
  if (out.name != "system:anonymous") {
    if (!Has(out.groups, "system:authenticated") && !Has(out.groups, "system:unauthenticated")) {
      out.groups.push_back("system:authenticated");
    }
  } else if (!Has(out.groups, "system:unauthenticated")) {
    out.groups.push_back("system:unauthenticated");
  }
  return out;
}

}  // namespace kubetrain::localkube
